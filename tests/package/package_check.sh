#!/usr/bin/env bash
# The Debian package, as a user gets it: cpack -G DEB from this build tree into a scratch folder,
# unpacked with dpkg -x into a scratch root, then from there: attnlab-cli --version, a forward on
# the packaged default model, the app's --screenshot (offscreen), the menu entry and AppStream
# metadata validated, and lintian when it is installed (no errors, no warnings).
# usage: package_check.sh BUILD_DIR
set -euo pipefail
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cpack -G DEB -B "$tmp/pkg" --config "$build/CPackConfig.cmake" > "$tmp/cpack.log" 2>&1 || { cat "$tmp/cpack.log"; fail "cpack"; }
deb=$(ls "$tmp"/pkg/attnlab_*_*.deb 2>/dev/null | head -1)
[ -n "$deb" ] || fail "no attnlab_<version>_<arch>.deb in $tmp/pkg"
echo "package: $(basename "$deb"), $(du -k "$deb" | cut -f1) KB"
depends=$(dpkg-deb -f "$deb" Depends)
# libdnnl2 exactly when the build links oneDNN (-DATTNLAB_ONEDNN=OFF builds do not)
libs="libqt6widgets6 libicu libpcre2-8-0 libc6"
if objdump -p "$build/app/attnlab-cli" | grep -q 'NEEDED.*libdnnl'; then libs="$libs libdnnl2"; fi
for lib in $libs; do
  case "$depends" in *"$lib"*) ;; *) fail "Depends lacks $lib: $depends" ;; esac
done

root="$tmp/root"
dpkg -x "$deb" "$root"
for f in usr/bin/attnlab usr/bin/attnlab-cli usr/share/attnlab/models/default/model.safetensors usr/share/attnlab/models/relative/model.safetensors \
         usr/share/applications/io.github.attnlab.attnlab.desktop usr/share/metainfo/io.github.attnlab.attnlab.metainfo.xml \
         usr/share/icons/hicolor/256x256/apps/attnlab.png usr/share/icons/hicolor/scalable/apps/attnlab.svg \
         usr/share/man/man1/attnlab.1.gz usr/share/man/man1/attnlab-cli.1.gz usr/share/doc/attnlab/copyright; do
  [ -e "$root/$f" ] || fail "missing /$f"
done

version=$("$root/usr/bin/attnlab-cli" --version)
case "$version" in "attnlab-cli "[0-9]*) echo "$version" ;; *) fail "--version printed: $version" ;; esac
out=$(cd "$tmp" && "$root/usr/bin/attnlab-cli" forward --text "the film was not very good" --json)
echo "$out" | grep -q "\"model\": \"$root/usr/share/attnlab/models/default\"" ||
  fail "forward did not use the packaged default model: $(echo "$out" | grep '"model"')"
echo "$out" | grep -q '"predicted_label": "negative"' || fail "forward: $(echo "$out" | grep predicted_label)"
# found on PATH, as an installed binary is run: argv[0] is a bare name
out=$(cd "$tmp" && PATH="$root/usr/bin:$PATH" attnlab-cli forward --text "the film was not very good" --json)
echo "$out" | grep -q "\"model\": \"$root/usr/share/attnlab/models/default\"" ||
  fail "attnlab-cli run from PATH did not use the packaged default model: $(echo "$out" | grep '"model"')"
[ -f "$root/usr/share/attnlab/models/relative/config.json" ] || fail "missing the tour's relative-position model"
(cd "$tmp" && QT_QPA_PLATFORM=offscreen timeout 60 "$root/usr/bin/attnlab" --no-settings --size 1000x700 \
   --text "the film was not very good" --screenshot "$tmp/shot.png") || fail "the app's --screenshot"
[ "$(stat -c %s "$tmp/shot.png")" -gt 10000 ] || fail "screenshot too small"

desktop-file-validate "$root/usr/share/applications/io.github.attnlab.attnlab.desktop" || fail "desktop-file-validate"
appstreamcli validate --no-net --pedantic "$root/usr/share/metainfo/io.github.attnlab.attnlab.metainfo.xml" > "$tmp/as.log" 2>&1 ||
  { cat "$tmp/as.log"; fail "appstreamcli validate"; }
if command -v lintian > /dev/null; then
  report=$(lintian "$deb" 2>&1 | grep -v "running with root privileges" || true)
  [ -z "$report" ] || fail "lintian: $report"
  echo "lintian: clean"
fi
echo "package check passed"
