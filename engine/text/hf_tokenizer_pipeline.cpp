// Hugging Face tokenizer pipeline (see hf_tokenizer.h): normalizers, pre-tokenizers, WordPiece,
// the post-processor's templates. Each step follows the Rust source of `tokenizers` 0.19
// (normalizers/bert.rs, pre_tokenizers/bert.rs, models/wordpiece, processors/template.rs,
// tokenizer/added_vocabulary.rs); the Unicode data comes from ICU.
#include "engine/text/hf_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/core/io_util.h"
#include "engine/core/tensor.h"
#include "engine/text/hf_tokenizer_detail.h"
#include "engine/text/unicode.h"

namespace attnlab {

using json = nlohmann::json;
namespace fs = std::filesystem;
namespace uc = unicode;
using namespace hf_detail;

namespace {

// `tokenizers` takes categories from the unicode_categories crate, whose tables are Unicode 8.0's:
// a character assigned since has no category there (neither control, nor punctuation, nor mark).
// The test over every code point (tests/crosscheck/hf_crosscheck.py) pins this value.
constexpr double kCategoryAge = 8.0;

// The category as of Unicode 8.0: ICU's current one for characters that existed then, except the
// few whose category changed later (UnicodeData.txt 8.0 vs 15.0; the only ones that change a
// tokenizer's output, found by the every-code-point test).
const char* category8(char32_t c) {
  switch (c) {
    case 0x166D:
      return "Po";  // CANADIAN SYLLABICS CHI SIGN, So since 12.0
    case 0x111C9:
      return "Po";  // SHARADA SANDHI MARK, Mn since 11.0
    case 0x1734:
      return "Mn";  // HANUNOO SIGN PAMUDPOD, Mc since 14.0
    case 0x1885:
      return "Lo";  // MONGOLIAN LETTER ALI GALI BALUDA, Mn since 9.0
    case 0x1886:
      return "Lo";  // MONGOLIAN LETTER ALI GALI THREE BALUDA, Mn since 9.0
    case 0xA9BD:
      return "Mc";  // JAVANESE CONSONANT SIGN KERET, Mn since 12.0
    default:
      return uc::category(c, kCategoryAge);
  }
}

bool is_other(char32_t c) {  // the crate's is_other: Cc, Cf, Co, Cs (not Cn: unassigned characters stay)
  const char* cat = category8(c);
  return cat[0] == 'C' && cat[1] != 'n';
}
bool is_punctuation(char32_t c) {  // Pc, Pd, Pe, Pf, Pi, Po, Ps
  return category8(c)[0] == 'P';
}
bool is_mark_nonspacing(char32_t c) {
  const char* cat = category8(c);
  return cat[0] == 'M' && cat[1] == 'n';
}

// NFD as the unicode-normalization-alignments crate does it: its tables predate Unicode 13, so a
// character added since is left whole (and, having no combining class there, is a starter).
constexpr double kNfdAge = 12.1;
std::u32string nfd_old(const std::u32string& s) {
  std::u32string out, run;
  for (char32_t c : s) {
    if (uc::category(c, kNfdAge)[0] == 'C' && uc::category(c)[0] != 'C') {  // assigned after kNfdAge
      out += uc::nfd(run);
      run.clear();
      out.push_back(c);
    } else {
      run.push_back(c);
    }
  }
  return out + uc::nfd(run);
}
// NFC with the same tables (characters assigned after them are left as they are).
std::u32string nfc_old(const std::u32string& s) {
  std::u32string out, run;
  for (char32_t c : s) {
    if (uc::category(c, kNfdAge)[0] == 'C' && uc::category(c)[0] != 'C') {
      out += uc::nfc(run);
      run.clear();
      out.push_back(c);
    } else {
      run.push_back(c);
    }
  }
  return out + uc::nfc(run);
}

// normalizers/bert.rs: tab, newline and carriage return count as white space, not control.
bool bert_whitespace(char32_t c) {
  return c == '\t' || c == '\n' || c == '\r' || uc::is_white_space(c);
}
bool bert_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  return is_other(c);
}
bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}
bool bert_punctuation(char32_t c) {
  return (c < 0x80 &&
          ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126))) ||
         is_punctuation(c);
}
bool is_word_char(char32_t c) {  // added_vocabulary.rs: alphanumeric or '_'
  if (c == '_') return true;
  const char* cat = uc::category(c);
  return cat[0] == 'L' || cat[0] == 'N';
}

std::u32string strip_marks(const std::u32string& s) {
  std::u32string out;
  for (char32_t c : s)
    if (!is_mark_nonspacing(c)) out.push_back(c);
  return out;
}

}  // namespace

// ---------------------------------------------------------------- the pipeline

std::u32string HfTokenizer::normalize_cps(std::u32string s) const {
  for (const NormStep& n : norm_) {
    switch (n.kind) {
      case NormStep::Bert: {
        if (n.clean_text) {
          std::u32string out;
          out.reserve(s.size());
          for (char32_t c : s) {
            if (c == 0 || c == 0xFFFD || bert_control(c)) continue;
            out.push_back(bert_whitespace(c) ? U' ' : c);
          }
          s = std::move(out);
        }
        if (n.chinese) {
          std::u32string out;
          out.reserve(s.size());
          for (char32_t c : s) {
            if (is_chinese_char(c)) {
              out.push_back(U' ');
              out.push_back(c);
              out.push_back(U' ');
            } else {
              out.push_back(c);
            }
          }
          s = std::move(out);
        }
        if (n.strip_accents) s = strip_marks(nfd_old(s));
        if (n.lowercase) s = uc::to_lower(s);
        break;
      }
      case NormStep::Lowercase:
        s = uc::to_lower(s);
        break;
      case NormStep::Nfd:
        s = nfd_old(s);
        break;
      case NormStep::StripAccents:
        s = strip_marks(s);
        break;
      case NormStep::Nfc:
        s = nfc_old(s);
        break;
      case NormStep::Prepend:
        if (!s.empty()) s = n.text + s;
        break;
      case NormStep::Replace: {
        std::u32string out;
        if (n.re) {
          const std::string u = uc::encode(s);
          std::string r;
          size_t done = 0;
          for (const auto& [b, e] : n.re->find_all(u)) r += u.substr(done, b - done) + uc::encode(n.with), done = e;
          out = uc::decode(r + u.substr(done));
        } else {
          size_t done = 0, at;
          while ((at = s.find(n.text, done)) != std::u32string::npos)
            out += s.substr(done, at - done) + n.with, done = at + n.text.size();
          out += s.substr(done);
        }
        s = std::move(out);
        break;
      }
    }
  }
  return s;
}

// pre_tokenizers/split.rs + normalizer.rs split(): the pattern's matches and the text between
// them, then what the behaviour makes of the matches; empty pieces are dropped.
std::vector<std::string> HfTokenizer::split_by(const PreStep& p, const std::string& u) const {
  std::vector<std::pair<size_t, size_t>> found;
  if (p.re) {
    found = p.re->find_all(u);
  } else {
    for (size_t at = u.find(p.literal); at != std::string::npos; at = u.find(p.literal, at + p.literal.size()))
      found.emplace_back(at, at + p.literal.size());
  }
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> parts;  // ((begin, end), is_match)
  size_t prev = 0;
  for (const auto& [b, e] : found) {
    if (prev != b) parts.push_back({{prev, b}, false});
    parts.push_back({{b, e}, true});
    prev = e;
  }
  if (prev != u.size()) parts.push_back({{prev, u.size()}, false});
  if (p.invert)
    for (auto& part : parts) part.second = !part.second;
  std::vector<std::pair<size_t, size_t>> out;
  bool previous_match = false;
  switch (p.behavior) {
    case PreStep::Removed:
      for (const auto& [r, m] : parts)
        if (!m) out.push_back(r);
      break;
    case PreStep::Isolated:
      for (const auto& [r, m] : parts) out.push_back(r);
      break;
    case PreStep::MergedWithPrevious:
      for (const auto& [r, m] : parts) {
        if (m && !previous_match && !out.empty())
          out.back().second = r.second;
        else
          out.push_back(r);
        previous_match = m;
      }
      break;
    case PreStep::MergedWithNext:
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->second && !previous_match && !out.empty())
          out.back().first = it->first.first;
        else
          out.push_back(it->first);
        previous_match = it->second;
      }
      std::reverse(out.begin(), out.end());
      break;
    case PreStep::Contiguous:
      for (const auto& [r, m] : parts) {
        if (m == previous_match && !out.empty())
          out.back().second = r.second;
        else
          out.push_back(r);
        previous_match = m;
      }
      break;
  }
  std::vector<std::string> pieces;
  for (const auto& [b, e] : out)
    if (e > b) pieces.push_back(u.substr(b, e - b));
  return pieces;
}

std::vector<std::u32string> HfTokenizer::pre_tokenize_cps(const std::u32string& s) const {
  std::vector<std::u32string> words = {s};
  for (const PreStep& p : pre_) {
    std::vector<std::u32string> next;
    for (const std::u32string& w : words) {
      if (p.kind == PreStep::Split) {
        for (const std::string& piece : split_by(p, uc::encode(w))) next.push_back(uc::decode(piece));
        continue;
      }
      if (p.kind == PreStep::ByteLevel) {
        // byte_level.rs: [a space before the text], [GPT-2's regex, isolated], then every byte
        // as its printable stand-in
        std::u32string x = w;
        if (p.add_prefix_space && (x.empty() || x[0] != U' ')) x.insert(x.begin(), U' ');
        const std::string u = uc::encode(x);
        const std::vector<std::string> pieces = p.use_regex ? split_by(p, u) : std::vector<std::string>{u};
        for (const std::string& piece : pieces) {
          std::u32string mapped;
          for (unsigned char b : piece) mapped.push_back(byte_table().to_char[b]);
          if (!mapped.empty()) next.push_back(std::move(mapped));
        }
        continue;
      }
      std::u32string cur;
      auto flush = [&] {
        if (!cur.empty()) next.push_back(std::move(cur));
        cur.clear();
      };
      for (char32_t c : w) {
        if (uc::is_white_space(c)) {  // char::is_whitespace: removed
          flush();
        } else if (p.kind == PreStep::Bert && bert_punctuation(c)) {  // isolated
          flush();
          next.push_back(std::u32string(1, c));
        } else {
          cur.push_back(c);
        }
      }
      flush();
    }
    words = std::move(next);
  }
  if (pre_.empty() && !s.empty()) return {s};
  return words;
}

std::string HfTokenizer::normalize(const std::string& text) const {
  return uc::encode(normalize_cps(uc::decode(text)));
}

std::vector<std::string> HfTokenizer::pre_tokenize(const std::string& normalized) const {
  std::vector<std::string> out;
  for (const auto& w : pre_tokenize_cps(uc::decode(normalized))) out.push_back(uc::encode(w));
  return out;
}

// Leftmost-longest matches of the added tokens with this `normalized` flag (aho-corasick's
// LeftmostLongest in added_vocabulary.rs), honouring single_word, lstrip and rstrip.
void HfTokenizer::build_patterns() {
  for (auto* pats : {&raw_patterns_, &norm_patterns_}) pats->clear();
  for (size_t k = 0; k < added_.size(); ++k) {
    const AddedToken& a = added_[k];
    std::u32string p = uc::decode(a.content);
    if (a.normalized) p = normalize_cps(p);
    if (!p.empty()) (a.normalized ? norm_patterns_ : raw_patterns_).emplace_back(std::move(p), k);
  }
}

void HfTokenizer::split_added(const std::u32string& text, bool normalized,
                              std::vector<std::pair<std::u32string, int>>& parts) const {
  const auto& pats = normalized ? norm_patterns_ : raw_patterns_;
  size_t done = 0, i = 0;
  while (i < text.size() && !pats.empty()) {
    const AddedToken* best = nullptr;
    size_t best_len = 0;
    for (const auto& [p, k] : pats)
      if (p.size() > best_len && text.compare(i, p.size(), p) == 0) best = &added_[k], best_len = p.size();
    if (!best) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + best_len;
    if (best->single_word) {
      const bool left_ok = start == 0 || !is_word_char(text[start - 1]);
      const bool right_ok = stop == text.size() || !is_word_char(text[stop]);
      if (!left_ok || !right_ok) {
        ++i;
        continue;
      }
    }
    if (best->lstrip)
      while (start > done && uc::is_white_space(text[start - 1])) --start;
    if (best->rstrip)
      while (stop < text.size() && uc::is_white_space(text[stop])) ++stop;
    if (start > done) parts.emplace_back(text.substr(done, start - done), -1);
    parts.emplace_back(text.substr(i, best_len), static_cast<int>(best - added_.data()));
    done = i = stop;
  }
  if (done < text.size()) parts.emplace_back(text.substr(done), -1);
}

void HfTokenizer::word_piece(const std::u32string& word, int word_index, int sequence, Encoding& out) const {
  const std::string word_text = uc::encode(word);
  auto push = [&](const std::string& tok, int id, bool unknown) {
    out.tokens.push_back(tok);
    out.ids.push_back(id);
    out.type_ids.push_back(sequence);
    out.special.push_back(0);
    out.unknown.push_back(unknown ? 1 : 0);
    out.word.push_back(word_index);
    out.word_text.push_back(word_text);
  };
  const int unk = vocab_.id(unk_);
  if (static_cast<int>(word.size()) > max_chars_) return push(unk_, unk, true);
  std::vector<std::pair<std::string, int>> pieces;
  size_t start = 0;
  while (start < word.size()) {
    size_t end = word.size();
    int found = -1;
    std::string sub;
    while (start < end) {
      sub = uc::encode(std::u32string_view(word).substr(start, end - start));
      if (start > 0) sub = prefix_ + sub;
      found = vocab_.id(sub);
      if (found >= 0) break;
      --end;
    }
    if (found < 0) return push(unk_, unk, true);
    pieces.emplace_back(sub, found);
    start = end;
  }
  for (const auto& [tok, id] : pieces) push(tok, id, false);
}

void HfTokenizer::encode_one(const std::string& text, int sequence, Encoding& out, int& word_base) const {
  const std::u32string cps = uc::decode(text, sequence == 0 ? "text" : "second text");
  std::vector<std::pair<std::u32string, int>> raw_parts;
  split_added(cps, false, raw_parts);
  for (const auto& [part, added] : raw_parts) {
    std::vector<std::pair<std::u32string, int>> parts;
    if (added >= 0)
      parts.emplace_back(part, added);
    else
      split_added(normalize_cps(part), true, parts);
    for (const auto& [p, a] : parts) {
      if (a >= 0) {
        const AddedToken& t = added_[static_cast<size_t>(a)];
        out.tokens.push_back(t.content);
        out.ids.push_back(t.id);
        out.type_ids.push_back(sequence);
        out.special.push_back(t.special ? 1 : 0);
        out.unknown.push_back(0);
        out.word.push_back(word_base++);
        out.word_text.push_back(t.content);
        continue;
      }
      for (const std::u32string& w : pre_tokenize_cps(p)) {
        if (bpe_model_)
          bpe_word(w, word_base++, sequence, out);
        else
          word_piece(w, word_base++, sequence, out);
      }
    }
  }
}

void HfTokenizer::post_process(const Encoding& a, const Encoding* b, Encoding& out) const {
  const auto& tpl = b ? pair_ : single_;
  for (const TemplatePiece& p : tpl) {
    if (p.is_sequence) {
      const Encoding& s = p.sequence == 0 ? a : *b;
      for (size_t i = 0; i < s.size(); ++i) {
        out.tokens.push_back(s.tokens[i]);
        out.ids.push_back(s.ids[i]);
        out.type_ids.push_back(p.type_id);
        out.special.push_back(s.special[i]);
        out.unknown.push_back(s.unknown[i]);
        out.word.push_back(s.word[i]);
        out.word_text.push_back(s.word_text[i]);
      }
      continue;
    }
    for (int id : template_ids_.at(p.special)) {
      out.tokens.push_back(vocab_.token(id));
      out.ids.push_back(id);
      out.type_ids.push_back(p.type_id);
      out.special.push_back(1);
      out.unknown.push_back(0);
      out.word.push_back(-1);
      out.word_text.push_back("");
    }
  }
}

Encoding HfTokenizer::encode(const std::string& text, const std::string* pair) const {
  return encode(text, pair, 0, Truncation::None);
}

int HfTokenizer::added_tokens(bool pair) const {
  int n = 0;
  for (const TemplatePiece& p : pair ? pair_ : single_)
    if (!p.is_sequence) n += static_cast<int>(template_ids_.at(p.special).size());
  return n;
}

namespace {

void keep_first(Encoding& e, size_t n) {
  if (e.size() <= n) return;
  e.tokens.resize(n), e.ids.resize(n), e.type_ids.resize(n), e.special.resize(n), e.unknown.resize(n);
  e.word.resize(n), e.word_text.resize(n);
}

}  // namespace

Truncation parse_truncation(const std::string& name) {
  if (name == "longest_first") return Truncation::LongestFirst;
  if (name == "only_first") return Truncation::OnlyFirst;
  if (name == "only_second") return Truncation::OnlySecond;
  throw Error("--truncation: expected longest_first, only_first or only_second, got \"" + name + "\"");
}

const char* to_string(Truncation t) {
  switch (t) {
    case Truncation::None:
      return "none";
    case Truncation::LongestFirst:
      return "longest_first";
    case Truncation::OnlyFirst:
      return "only_first";
    case Truncation::OnlySecond:
      return "only_second";
  }
  return "none";
}

Encoding HfTokenizer::encode(const std::string& text, const std::string* pair, int max_length, Truncation how,
                             TruncationCut* cut) const {
  if (pair && pair_.empty()) throw Error("this tokenizer has no template for a pair of texts");
  Encoding a, b, out;
  int words = 0;
  encode_one(text, 0, a, words);
  if (pair) encode_one(*pair, 1, b, words);
  const size_t n_a = a.size(), n_b = b.size();
  // tokenizers' truncate_encodings: the texts share max_length less what the template adds
  const int added = added_tokens(pair != nullptr);
  if (how != Truncation::None && static_cast<int>(n_a + n_b) + added > max_length) {
    if (max_length < added)
      throw Error("cannot cut to " + std::to_string(max_length) + " tokens: the template alone adds " +
                  std::to_string(added));
    const size_t target = static_cast<size_t>(max_length - added), over = n_a + n_b - target;
    if (how == Truncation::LongestFirst && !pair) {
      keep_first(a, target);
    } else if (how == Truncation::LongestFirst) {
      // n1 the shorter: only the longer is cut when the shorter fits in half, else both get half
      // (the odd token to the longer), as tokenizers' LongestFirst
      size_t n1 = std::min(n_a, n_b), n2 = std::max(n_a, n_b);
      n2 = n1 > target ? n1 : std::max(n1, target - n1);
      if (n1 + n2 > target) n1 = target / 2, n2 = n1 + target % 2;
      const bool swapped = n_a > n_b;
      keep_first(a, swapped ? n2 : n1);
      keep_first(b, swapped ? n1 : n2);
    } else {
      if (how == Truncation::OnlySecond && !pair)
        throw Error("--truncation only_second needs a pair (sentence B) to cut");
      Encoding& e = how == Truncation::OnlyFirst ? a : b;
      if (e.size() <= over)
        throw Error(std::string(how == Truncation::OnlyFirst ? "the text" : "sentence B") + " has " +
                    std::to_string(e.size()) + (e.size() == 1 ? " token" : " tokens") + ": too short to lose the " +
                    std::to_string(over) + " that " + std::to_string(max_length) + " tokens need (try longest_first)");
      keep_first(e, e.size() - over);
    }
  }
  if (cut) *cut = {static_cast<int>(n_a - a.size()), static_cast<int>(n_b - b.size())};
  post_process(a, pair ? &b : nullptr, out);
  return out;
}

}  // namespace attnlab
