// Regular expressions as Hugging Face tokenizers use them (Oniguruma syntax: \p{L}, \p{N},
// look-ahead, (?i:...)), through PCRE2 from Debian (std::regex has no Unicode classes). The one
// difference that matters for tokenizer patterns is \s: Oniguruma's is Unicode White_Space,
// PCRE2 10.42's is \p{Z} plus \h and \v (which adds U+180E); patterns are rewritten to
// White_Space before compiling.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace attnlab {

class Regex {
 public:
  // Error naming `where` and PCRE2's message when the pattern does not compile.
  explicit Regex(const std::string& pattern, const std::string& where = "pattern");
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Every non-overlapping match in UTF-8 `subject`, leftmost first, as byte ranges
  // [begin, end). An empty match advances by one character (as the Rust crates do).
  std::vector<std::pair<size_t, size_t>> find_all(const std::string& subject) const;
  const std::string& pattern() const { return pattern_; }

  // An Oniguruma pattern with \s / \S spelled out as White_Space (exposed for tests).
  static std::string to_pcre2(const std::string& onig);

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8
};

}  // namespace attnlab
