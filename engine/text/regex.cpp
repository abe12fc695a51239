// PCRE2 behind Regex (see regex.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/text/regex.h"

#include <pcre2.h>

#include "engine/core/tensor.h"

namespace attnlab {

namespace {

// Unicode White_Space (PropList.txt), the set Oniguruma's \s matches.
constexpr const char* kWhiteSpace =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

}  // namespace

std::string Regex::to_pcre2(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') {
        out += in_class ? std::string(kWhiteSpace) : std::string("[") + kWhiteSpace + "]";
      } else if (n == 'S') {
        if (in_class) throw Error("pattern: \\S inside a character class is not supported");
        out += std::string("[^") + kWhiteSpace + "]";
      } else {
        out += c;
        out += n;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a literal ] first in a class
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

Regex::Regex(const std::string& pattern, const std::string& where) : pattern_(pattern) {
  const std::string p = to_pcre2(pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), PCRE2_UTF | PCRE2_UCP, &err, &offset,
                        nullptr);
  if (!code_) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error(where + ": the regular expression does not compile (" + reinterpret_cast<const char*>(msg) +
                " at offset " + std::to_string(offset) + ")");
  }
  pcre2_jit_compile(static_cast<pcre2_code*>(code_), PCRE2_JIT_COMPLETE);  // optional speed-up
}

Regex::~Regex() {
  pcre2_code_free(static_cast<pcre2_code*>(code_));
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(const std::string& s) const {
  std::vector<std::pair<size_t, size_t>> out;
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  size_t pos = 0;
  while (pos <= s.size()) {
    const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos, PCRE2_NO_UTF_CHECK, md,
                               nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      throw Error("regular expression match failed (PCRE2 error " + std::to_string(rc) + ")");
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      pos = e;
    } else {  // empty match: skip one character
      pos = b + 1;
      while (pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
  pcre2_match_data_free(md);
  return out;
}

}  // namespace attnlab
