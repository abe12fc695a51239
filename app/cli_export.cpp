// attnlab-cli export: the app's figures, headless (offscreen Qt): one head, a layer's heads or
// every layer, as PNG / SVG / PDF, or the probabilities as CSV / .npy.
#include <QApplication>
#include <cstdio>

#include "app/cli_common.h"
#include "engine/text/token_view.h"
#include "ui/colormaps.h"
#include "ui/figure_export.h"

namespace attnlab::cli {

namespace {
// Qt's note about XDG_RUNTIME_DIR on headless machines is noise for a command-line tool; every
// other message goes through as usual.
void quiet_qt_messages(QtMsgType type, const QMessageLogContext&, const QString& msg) {
  if (msg.startsWith("QStandardPaths: XDG_RUNTIME_DIR not set")) return;
  if (type != QtDebugMsg && type != QtInfoMsg) std::fprintf(stderr, "%s\n", qPrintable(msg));
}
}  // namespace

int cmd_export(const std::vector<std::string>& argv, const std::string& argv0) {
  const Args a(argv,
               with(kModelValued, {"--text", "--pair", "--truncation", "--ids", "--cross-text", "--cross-ids",
                                   "--pad-to", "--layer", "--head", "--out", "--width", "--height", "--dpi",
                                   "--colormap", "--title", "--scale", "--attention", "--batch"}),
               {"--random-init", "--annotate", "--hide-special", "--merge-pieces"});
  if (!a.has("--out")) throw Error("export needs --out FILE.png|svg|pdf|csv|npy|npz");
  auto which = [&](const char* flag, int fallback) {
    const std::string v = a.get(flag, std::to_string(fallback));
    return v == "all" ? -1 : a.get_int(flag, fallback);
  };
  ExportSpec spec;
  spec.layer = which("--layer", 0);
  spec.head = which("--head", -1);
  spec.width = a.get_int("--width", 0);
  spec.height = a.get_int("--height", 0);
  spec.dpi = a.get_int("--dpi", 150);
  spec.colormap = QString::fromStdString(a.get("--colormap", "viridis"));
  if (!colormap_names().contains(spec.colormap))
    throw Error("--colormap: no colour map \"" + spec.colormap.toStdString() + "\" (" +
                colormap_names().join(", ").toStdString() + ")");
  spec.title = QString::fromStdString(a.get("--title"));
  spec.annotate = a.has("--annotate");
  const std::string scale = a.get("--scale", "max");
  if (scale != "max" && scale != "0-1") throw Error("--scale: expected max or 0-1, got \"" + scale + "\"");
  spec.unit_range = scale == "0-1";
  if (spec.dpi < 24 || spec.dpi > 1200) throw Error("--dpi must be between 24 and 1200");
  if (spec.width < 0 || spec.height < 0 || spec.width > 20000 || spec.height > 20000)
    throw Error("--width/--height out of range");
  if (spec.layer < -1 || spec.head < -1) throw Error("--layer and --head take a number or \"all\"");

  if (a.has("--batch") && !a.has("--attention")) throw Error("--batch chooses a sequence of an --attention file");
  TokenViewOptions view;  // as the app's Display options: a transform of what is drawn
  view.hide_special = a.has("--hide-special");
  view.merge_pieces = a.has("--merge-pieces");
  ForwardResult r;
  std::pair<PreparedInput, PreparedInput> prepared;
  if (a.has("--attention")) {  // made elsewhere: no model, the file's tokens
    if (view.active()) throw Error("--hide-special and --merge-pieces need a model's tokenizer, not an attention file");
    r = result_from_attention_flag(a, "export");
  } else {
    const Model model = resolve_model(a, argv0);
    const ForwardRequest req = request_from_flags(a, model, "export", &prepared);
    auto backend = make_backend(a.get("--backend", "cpu"));
    r = run_forward(model, *backend, req);
  }
  if (view.active()) {
    const PreparedInput& A = prepared.first;
    const PreparedInput& B = r.is_cross() ? prepared.second : prepared.first;
    const TokenGroups rows = group_tokens(A.tokens, A.special, A.words, view);
    const TokenGroups cols = group_tokens(B.tokens, B.special, B.words, view);
    if (rows.members.empty() || cols.members.empty()) throw Error("--hide-special leaves no tokens to draw");
    apply_token_view(r, rows, cols);
    spec.note = token_view_note(view.hide_special, view.merge_pieces);
  }
  for (const auto& w : r.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  qInstallMessageHandler(quiet_qt_messages);
  int qargc = 1;
  char name[] = "attnlab-cli";
  char* qargv[] = {name, nullptr};
  QApplication app(qargc, qargv);
  export_attention(r, spec, QString::fromStdString(a.get("--out")));
  std::printf("wrote %s\n", a.get("--out").c_str());
  return 0;
}

}  // namespace attnlab::cli
