// UTF-8 and the Unicode properties tokenizers from elsewhere depend on, backed by ICU (Debian's
// libicu): categories, White_Space, NFD, full lower-casing and the version a character first
// appeared in. Everything here works on code points (char32_t).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace attnlab::unicode {

// UTF-8 -> code points; Error "<what> is not valid UTF-8 at byte N" on malformed input
// (overlong forms, surrogates and values past U+10FFFF included).
std::u32string decode(std::string_view utf8, const std::string& what = "text");
std::string encode(std::u32string_view cps);
std::string encode(char32_t cp);

// General category, two letters as in UnicodeData.txt ("Lu", "Mn", "Cn", ...), of `cp` as of
// Unicode version `max_age` (e.g. 9.0): a character assigned later is "Cn" (unassigned) there.
// max_age 0 = ICU's own (current) version.
const char* category(char32_t cp, double max_age = 0);
bool is_white_space(char32_t cp);  // the White_Space property (Rust's char::is_whitespace)
std::u32string nfd(std::u32string_view s);
std::u32string nfc(std::u32string_view s);
std::u32string to_lower(std::u32string_view s);  // per character, as Rust's char::to_lowercase

}  // namespace attnlab::unicode
