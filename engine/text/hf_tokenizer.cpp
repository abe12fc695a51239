// Hugging Face tokenizer pipeline (see hf_tokenizer.h). Each step follows the Rust source of
// `tokenizers` 0.19 (normalizers/bert.rs, pre_tokenizers/bert.rs, models/wordpiece,
// processors/template.rs, tokenizer/added_vocabulary.rs); the Unicode data comes from ICU.
#include "engine/text/hf_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/core/io_util.h"
#include "engine/core/tensor.h"
#include "engine/text/unicode.h"

namespace attnlab {

using json = nlohmann::json;
namespace fs = std::filesystem;
namespace uc = unicode;

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
    case 0x166D: return "Po";   // CANADIAN SYLLABICS CHI SIGN, So since 12.0
    case 0x111C9: return "Po";  // SHARADA SANDHI MARK, Mn since 11.0
    case 0x1734: return "Mn";   // HANUNOO SIGN PAMUDPOD, Mc since 14.0
    case 0x1885: return "Lo";   // MONGOLIAN LETTER ALI GALI BALUDA, Mn since 9.0
    case 0x1886: return "Lo";   // MONGOLIAN LETTER ALI GALI THREE BALUDA, Mn since 9.0
    case 0xA9BD: return "Mc";   // JAVANESE CONSONANT SIGN KERET, Mn since 12.0
    default: return uc::category(c, kCategoryAge);
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

// GPT-2's bytes_to_unicode (pre_tokenizers/byte_level.rs): printable bytes stand for themselves,
// the other 68 map to U+0100 onwards, so every byte sequence is a string of visible characters.
struct ByteTable {
  char32_t to_char[256];
  std::unordered_map<char32_t, uint8_t> to_byte;
  ByteTable() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      to_byte[to_char[b]] = static_cast<uint8_t>(b);
    }
  }
};
const ByteTable& byte_table() {
  static const ByteTable t;
  return t;
}

// GPT-2's pre-tokenizer regex (ByteLevel with use_regex).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

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
  return (c < 0x80 && ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126))) ||
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

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw Error(where + ": " + what);
}

// A vocabulary from a {token: id} object: ids index the token list; a hole gets a placeholder.
Vocab vocab_from_map(const json& m, const std::string& where) {
  if (!m.is_object()) fail(where, "\"model.vocab\" must be an object of token: id");
  std::vector<std::string> tokens;
  std::vector<uint8_t> set;
  for (const auto& [tok, id] : m.items()) {
    if (!id.is_number_integer() || id.get<long long>() < 0 || id.get<long long>() > (1 << 24))
      fail(where, "vocabulary id of \"" + tok + "\" must be an integer in [0, 16777216]");
    const size_t i = static_cast<size_t>(id.get<long long>());
    if (i >= tokens.size()) tokens.resize(i + 1), set.resize(i + 1, 0);
    if (set[i]) fail(where, "vocabulary id " + std::to_string(i) + " is given to two tokens");
    tokens[i] = tok;
    set[i] = 1;
  }
  for (size_t i = 0; i < tokens.size(); ++i)
    if (!set[i]) tokens[i] = "<no token " + std::to_string(i) + ">";
  try {
    return Vocab(std::move(tokens));
  } catch (const Error& e) {
    fail(where, e.what());
  }
}

// tokenizer_config.json as transformers reads it (empty text: every default).
json parse_tokenizer_config(const std::string& text) {
  if (text.empty()) return json::object();
  json cfg;
  try {
    cfg = json::parse(text);
  } catch (const json::exception& e) {
    fail("tokenizer_config.json", "not valid JSON (" + json_error_text(e.what()) + ")");
  }
  if (!cfg.is_object()) fail("tokenizer_config.json", "expected a JSON object");
  return cfg;
}

// A token named in tokenizer_config.json: a string, or an AddedToken object's "content".
std::string config_string(const json& cfg, const char* key, const char* fallback) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return fallback;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content")) return (*it)["content"].get<std::string>();
  fail("tokenizer_config.json", std::string("\"") + key + "\" must be a string");
}

bool json_bool(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw Error(std::string("\"") + key + "\" must be true or false");
  return it->get<bool>();
}

}  // namespace

// ---------------------------------------------------------------- loading

std::shared_ptr<const HfTokenizer> HfTokenizer::from_folder(const std::string& dir) {
  const fs::path d(dir);
  if (fs::exists(d / "tokenizer.json"))
    return from_tokenizer_json(read_file_bytes((d / "tokenizer.json").string()), (d / "tokenizer.json").string());
  if (fs::exists(d / "vocab.txt")) {
    const std::string cfg =
        fs::exists(d / "tokenizer_config.json") ? read_file_bytes((d / "tokenizer_config.json").string()) : "";
    return from_vocab_txt(read_file_bytes((d / "vocab.txt").string()), cfg, (d / "vocab.txt").string());
  }
  if (fs::exists(d / "vocab.json") && fs::exists(d / "merges.txt")) {
    const std::string cfg =
        fs::exists(d / "tokenizer_config.json") ? read_file_bytes((d / "tokenizer_config.json").string()) : "";
    return from_vocab_json(read_file_bytes((d / "vocab.json").string()), read_file_bytes((d / "merges.txt").string()),
                           cfg, (d / "vocab.json").string());
  }
  if (fs::exists(d / "vocab.json"))
    throw Error(dir + ": vocab.json without merges.txt (a byte-level BPE tokenizer needs both, or tokenizer.json)");
  throw Error(dir + ": no tokenizer (expected tokenizer.json, vocab.txt with tokenizer_config.json, or vocab.json "
              "with merges.txt)");
}

std::shared_ptr<const HfTokenizer> HfTokenizer::from_tokenizer_json(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(where, "not valid JSON (" + json_error_text(e.what()) + ")");
  }
  if (!j.is_object()) fail(where, "expected a JSON object");
  auto t = std::make_shared<HfTokenizer>();
  try {
    // model
    const json& model = j.contains("model") ? j["model"] : json();
    if (!model.is_object()) fail(where, "no \"model\" object");
    const std::string type = model.value("type", std::string(model.contains("vocab") && model.contains("merges") ? "BPE" : ""));
    if (type != "WordPiece" && type != "BPE")
      fail(where, "tokenizer model \"" + type + "\" is not supported (WordPiece and BPE are)");
    t->vocab_ = vocab_from_map(model.contains("vocab") ? model["vocab"] : json(), where);
    if (type == "BPE") {
      t->parse_bpe(model, where);
    } else {
      if (model.contains("unk_token")) t->unk_ = model["unk_token"].get<std::string>();
      if (model.contains("continuing_subword_prefix") && model["continuing_subword_prefix"].is_string())
        t->prefix_ = model["continuing_subword_prefix"].get<std::string>();
      if (model.contains("max_input_chars_per_word"))
        t->max_chars_ = std::clamp(model["max_input_chars_per_word"].get<int>(), 0, 1 << 20);
      if (t->vocab_.id(t->unk_) < 0) fail(where, "the unknown token \"" + t->unk_ + "\" is not in the vocabulary");
    }

    // normalizer
    std::function<void(const json&)> add_norm = [&](const json& n) {
      if (n.is_null()) return;
      const std::string nt = n.value("type", "");
      if (nt == "Sequence") {
        for (const auto& s : n.at("normalizers")) add_norm(s);
      } else if (nt == "BertNormalizer") {
        NormStep s{NormStep::Bert};
        s.clean_text = json_bool(n, "clean_text", true);
        s.chinese = json_bool(n, "handle_chinese_chars", true);
        s.lowercase = json_bool(n, "lowercase", true);
        s.strip_accents = json_bool(n, "strip_accents", s.lowercase);  // null: follows lowercase
        t->norm_.push_back(s);
        t->lowercase_ = t->lowercase_ || s.lowercase;
      } else if (nt == "Lowercase") {
        t->norm_.push_back({NormStep::Lowercase});
        t->lowercase_ = true;
      } else if (nt == "NFD") {
        t->norm_.push_back({NormStep::Nfd});
      } else if (nt == "StripAccents") {
        t->norm_.push_back({NormStep::StripAccents});
      } else if (nt == "NFC") {
        t->norm_.push_back({NormStep::Nfc});
      } else if (nt == "Prepend") {
        NormStep st{NormStep::Prepend};
        st.text = uc::decode(n.at("prepend").get<std::string>(), where);
        t->norm_.push_back(st);
      } else if (nt == "Replace") {
        NormStep st{NormStep::Replace};
        const json& pat = n.at("pattern");
        st.with = uc::decode(n.at("content").get<std::string>(), where);
        if (pat.contains("String"))
          st.text = uc::decode(pat["String"].get<std::string>(), where);
        else
          st.re = std::make_shared<Regex>(pat.at("Regex").get<std::string>(), where + ": Replace");
        if (!st.re && st.text.empty()) fail(where, "Replace with an empty pattern");
        t->norm_.push_back(st);
      } else {
        fail(where, "normalizer \"" + nt +
                        "\" is not supported (BertNormalizer, Lowercase, NFD, NFC, StripAccents, Prepend, Replace are)");
      }
    };
    if (j.contains("normalizer")) add_norm(j["normalizer"]);

    // pre-tokenizer
    std::function<void(const json&)> add_pre = [&](const json& p) {
      if (p.is_null()) return;
      const std::string pt = p.value("type", "");
      if (pt == "Sequence")
        for (const auto& s : p.at("pretokenizers")) add_pre(s);
      else if (pt == "BertPreTokenizer")
        t->pre_.push_back({PreStep::Bert});
      else if (pt == "WhitespaceSplit")
        t->pre_.push_back({PreStep::WhitespaceSplit});
      else if (pt == "ByteLevel") {
        PreStep st{PreStep::ByteLevel};
        st.add_prefix_space = json_bool(p, "add_prefix_space", true);
        st.use_regex = json_bool(p, "use_regex", true);
        if (st.use_regex) st.re = std::make_shared<Regex>(kGpt2Pattern, where + ": ByteLevel");
        t->pre_.push_back(st);
        t->byte_level_ = true;
      } else if (pt == "Split") {
        PreStep st{PreStep::Split};
        const json& pat = p.at("pattern");
        if (pat.contains("String"))
          st.literal = pat["String"].get<std::string>();
        else
          st.re = std::make_shared<Regex>(pat.at("Regex").get<std::string>(), where + ": Split");
        if (!st.re && st.literal.empty()) fail(where, "Split with an empty pattern");
        const std::string b = p.value("behavior", "Isolated");
        static const std::pair<const char*, PreStep::Behavior> kB[] = {
            {"Removed", PreStep::Removed},
            {"Isolated", PreStep::Isolated},
            {"MergedWithPrevious", PreStep::MergedWithPrevious},
            {"MergedWithNext", PreStep::MergedWithNext},
            {"Contiguous", PreStep::Contiguous}};
        bool known = false;
        for (const auto& [name, v] : kB)
          if (b == name) st.behavior = v, known = true;
        if (!known) fail(where, "Split behavior \"" + b + "\" is unknown");
        st.invert = json_bool(p, "invert", false);
        t->pre_.push_back(st);
      } else {
        fail(where, "pre-tokenizer \"" + pt +
                        "\" is not supported (BertPreTokenizer, WhitespaceSplit, ByteLevel, Split are)");
      }
    };
    if (j.contains("pre_tokenizer")) add_pre(j["pre_tokenizer"]);

    // added tokens
    if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
      for (const auto& a : j["added_tokens"]) {
        AddedToken at;
        at.content = a.at("content").get<std::string>();
        at.id = a.at("id").get<int>();
        at.special = json_bool(a, "special", false);
        at.single_word = json_bool(a, "single_word", false);
        at.lstrip = json_bool(a, "lstrip", false);
        at.rstrip = json_bool(a, "rstrip", false);
        at.normalized = json_bool(a, "normalized", !at.special);
        if (at.id < 0) fail(where, "added token \"" + at.content + "\" has a negative id");
        if (at.content.empty()) continue;
        uc::decode(at.content, where + ": added token");
        t->added_.push_back(std::move(at));
      }
      // Added tokens past the model's vocabulary extend it (user-added tokens: ids after the model's).
      std::vector<std::string> tokens = t->vocab_.tokens();
      bool grew = false;
      for (const AddedToken& a : t->added_) {
        if (a.id < static_cast<int>(tokens.size()) || t->vocab_.id(a.content) >= 0) continue;
        if (a.id > (1 << 24)) fail(where, "added token \"" + a.content + "\" has an absurd id");
        while (static_cast<int>(tokens.size()) < a.id) tokens.push_back("<no token " + std::to_string(tokens.size()) + ">");
        tokens.push_back(a.content);
        grew = true;
      }
      if (grew) {
        try {
          t->vocab_ = Vocab(std::move(tokens));
        } catch (const Error& e) {
          fail(where, e.what());
        }
      }
    }

    // post-processor
    const json pp = j.contains("post_processor") ? j["post_processor"] : json();
    auto parse_template = [&](const json& arr, std::vector<TemplatePiece>& out) {
      for (const auto& p : arr) {
        TemplatePiece piece;
        if (p.contains("Sequence")) {
          piece.is_sequence = true;
          const std::string id = p["Sequence"].at("id").get<std::string>();
          piece.sequence = id == "B" ? 1 : 0;
          piece.type_id = p["Sequence"].value("type_id", 0);
        } else if (p.contains("SpecialToken")) {
          piece.special = p["SpecialToken"].at("id").get<std::string>();
          piece.type_id = p["SpecialToken"].value("type_id", 0);
        } else {
          fail(where, "post_processor template piece is neither Sequence nor SpecialToken");
        }
        out.push_back(piece);
      }
    };
    // No post-processor, and ByteLevel's (offsets only): the text as it is, a pair side by side.
    t->single_ = {TemplatePiece{true, 0, "", 0}};
    t->pair_ = {TemplatePiece{true, 0, "", 0}, TemplatePiece{true, 1, "", 1}};
    std::function<void(const json&)> add_post = [&](const json& pp) {
      if (pp.is_null()) return;
      const std::string type = pp.value("type", "");
      if (type == "Sequence") {
        for (const auto& q : pp.at("processors")) add_post(q);
      } else if (type == "ByteLevel") {
      } else if (type == "TemplateProcessing") {
        t->single_.clear(), t->pair_.clear();
        parse_template(pp.at("single"), t->single_);
        parse_template(pp.at("pair"), t->pair_);
        const json specials = pp.value("special_tokens", json::object());  // named: items() must not outlive it
        for (const auto& [name, st] : specials.items()) t->template_ids_[name] = st.at("ids").get<std::vector<int>>();
      } else if (type == "BertProcessing") {
        const std::string cls = pp.at("cls").at(0).get<std::string>(), sep = pp.at("sep").at(0).get<std::string>();
        t->template_ids_[cls] = {pp.at("cls").at(1).get<int>()};
        t->template_ids_[sep] = {pp.at("sep").at(1).get<int>()};
        t->single_ = {{false, 0, cls, 0}, {true, 0, "", 0}, {false, 0, sep, 0}};
        t->pair_ = {{false, 0, cls, 0}, {true, 0, "", 0}, {false, 0, sep, 0}, {true, 1, "", 1}, {false, 0, sep, 1}};
      } else {
        fail(where, "post_processor \"" + type +
                        "\" is not supported (TemplateProcessing, BertProcessing, ByteLevel, Sequence are)");
      }
    };
    add_post(pp);
    t->check_template_tokens(where);
    t->build_patterns();
  } catch (const json::exception& e) {
    fail(where, "unexpected structure (" + json_error_text(e.what()) + ")");
  }
  return t;
}

std::shared_ptr<const HfTokenizer> HfTokenizer::from_vocab_txt(const std::string& vocab_text,
                                                                const std::string& config_text,
                                                                const std::string& where) {
  // transformers' BertTokenizerFast built from the slow tokenizer's files (convert_slow_tokenizer.py,
  // BertConverter), with BertTokenizer's defaults for what tokenizer_config.json leaves out.
  const json cfg = parse_tokenizer_config(config_text);
  auto t = std::make_shared<HfTokenizer>();
  t->vocab_ = parse_vocab(vocab_text, where);
  // vocab.txt often ends with a newline: parse_vocab gives no token for an empty last line, but
  // a blank line inside is a real (empty) token there too.
  auto str = [&](const char* key, const char* fallback) { return config_string(cfg, key, fallback); };
  try {
    NormStep s{NormStep::Bert};
    s.lowercase = json_bool(cfg, "do_lower_case", true);
    s.chinese = json_bool(cfg, "tokenize_chinese_chars", true);
    s.strip_accents = json_bool(cfg, "strip_accents", s.lowercase);
    t->norm_.push_back(s);
    t->lowercase_ = s.lowercase;
  } catch (const Error& e) {
    fail("tokenizer_config.json", e.what());
  }
  t->pre_ = {{PreStep::Bert}};
  t->unk_ = str("unk_token", "[UNK]");
  const std::string cls = str("cls_token", "[CLS]"), sep = str("sep_token", "[SEP]");
  for (const std::string& sp :
       {str("pad_token", "[PAD]"), t->unk_, cls, sep, str("mask_token", "[MASK]")}) {
    const int id = t->vocab_.id(sp);
    if (id >= 0) t->added_.push_back(AddedToken{sp, id, true, false, false, false, false});
  }
  if (t->vocab_.id(t->unk_) < 0) fail(where, "the unknown token \"" + t->unk_ + "\" is not in the vocabulary");
  t->template_ids_[cls] = {t->vocab_.id(cls)};
  t->template_ids_[sep] = {t->vocab_.id(sep)};
  t->single_ = {{false, 0, cls, 0}, {true, 0, "", 0}, {false, 0, sep, 0}};
  t->pair_ = {{false, 0, cls, 0}, {true, 0, "", 0}, {false, 0, sep, 0}, {true, 1, "", 1}, {false, 0, sep, 1}};
  t->check_template_tokens(where);
  t->build_patterns();
  return t;
}

void HfTokenizer::check_template_tokens(const std::string& where) {
  for (const auto* tpl : {&single_, &pair_})
    for (const TemplatePiece& p : *tpl) {
      if (p.is_sequence) continue;
      auto it = template_ids_.find(p.special);
      if (it == template_ids_.end() || it->second.empty())
        fail(where, "the post-processor's special token \"" + p.special + "\" has no id");
      for (int id : it->second)
        if (id < 0 || id >= vocab_.size())
          fail(where, "the post-processor's special token \"" + p.special + "\" is not in the vocabulary");
    }
  for (const AddedToken& a : added_)
    if (a.id >= vocab_.size())
      fail(where, "added token \"" + a.content + "\" has id " + std::to_string(a.id) + ", outside the vocabulary (" +
                      std::to_string(vocab_.size()) + " tokens)");
}

std::string HfTokenizer::describe() const {
  if (bpe_model_)
    return std::string(byte_level_ ? "byte-level BPE" : "BPE") + (bpe_.byte_fallback ? " with byte fallback" : "") +
           ", " + thousands(vocab_.size()) + " tokens";
  return std::string("WordPiece, ") + (lowercase_ ? "uncased" : "cased") + ", " + thousands(vocab_.size()) + " tokens";
}

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
          while ((at = s.find(n.text, done)) != std::u32string::npos) out += s.substr(done, at - done) + n.with, done = at + n.text.size();
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
  if (pair && pair_.empty()) throw Error("this tokenizer has no template for a pair of texts");
  Encoding a, b, out;
  int words = 0;
  encode_one(text, 0, a, words);
  if (pair) encode_one(*pair, 1, b, words);
  post_process(a, pair ? &b : nullptr, out);
  return out;
}


// ---------------------------------------------------------------- BPE (models/bpe)

namespace {
uint64_t pair_key(int a, int b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
}  // namespace

void HfTokenizer::add_merges(const std::vector<std::pair<std::string, std::string>>& merges, const std::string& where) {
  // model.rs: rank = position in the list; the merged token is a + b without b's subword prefix.
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const int ia = vocab_.id(a), ib = vocab_.id(b);
    if (ia < 0 || ib < 0)
      fail(where, "merge \"" + a + " " + b + "\" uses \"" + (ia < 0 ? a : b) + "\", which is not in the vocabulary");
    const std::string merged = a + (b.rfind(bpe_.prefix, 0) == 0 ? b.substr(bpe_.prefix.size()) : b);
    const int im = vocab_.id(merged);
    if (im < 0) fail(where, "merge \"" + a + " " + b + "\" makes \"" + merged + "\", which is not in the vocabulary");
    bpe_.merges[pair_key(ia, ib)] = {static_cast<int>(rank), im};
  }
}

void HfTokenizer::parse_bpe(const json& model, const std::string& where) {
  bpe_model_ = true;
  auto str_or_empty = [&](const char* key) {
    auto it = model.find(key);
    return it == model.end() || it->is_null() ? std::string() : it->get<std::string>();
  };
  if (auto it = model.find("dropout"); it != model.end() && !it->is_null() && it->get<double>() != 0.0)
    fail(where, "BPE dropout is random; a visualiser needs the same tokens every time (set dropout to null)");
  bpe_.prefix = str_or_empty("continuing_subword_prefix");
  bpe_.suffix = str_or_empty("end_of_word_suffix");
  bpe_.byte_fallback = json_bool(model, "byte_fallback", false);
  bpe_.ignore_merges = json_bool(model, "ignore_merges", false);
  bpe_.fuse_unk = json_bool(model, "fuse_unk", false);
  unk_ = str_or_empty("unk_token");
  bpe_.has_unk = !unk_.empty();
  if (bpe_.has_unk && vocab_.id(unk_) < 0) fail(where, "the unknown token \"" + unk_ + "\" is not in the vocabulary");
  std::vector<std::pair<std::string, std::string>> merges;
  for (const auto& m : model.at("merges")) {
    if (m.is_string()) {  // "a b": exactly one space (convert_merges_to_hashmap)
      const std::string line = m.get<std::string>();
      const size_t sp = line.find(' ');
      if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
        fail(where, "merge \"" + line + "\" is not two tokens separated by one space");
      merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      fail(where, "a merge must be \"a b\" or [\"a\", \"b\"]");
    }
  }
  add_merges(merges, where);
}

void HfTokenizer::bpe_word(const std::u32string& word, int word_index, int sequence, Encoding& out) const {
  if (word.empty()) return;
  const std::string word_text = uc::encode(word);
  auto push = [&](int id, bool unknown) {
    out.tokens.push_back(vocab_.token(id));
    out.ids.push_back(id);
    out.type_ids.push_back(sequence);
    out.special.push_back(0);
    out.unknown.push_back(unknown ? 1 : 0);
    out.word.push_back(word_index);
    out.word_text.push_back(word_text);
  };
  if (bpe_.ignore_merges)
    if (const int id = vocab_.id(word_text); id >= 0) return push(id, false);
  // merge_word: one symbol per character ([prefix] c [suffix]), else its bytes as <0xNN>, else [UNK]
  const int unk_id = bpe_.has_unk ? vocab_.id(unk_) : -1;
  std::vector<int> symbols;
  int pending_unk = 0;  // unknown characters waiting to become one [UNK] (fuse_unk) or several
  auto flush_unk = [&] {
    if (pending_unk > 0) symbols.push_back(unk_id);
    pending_unk = 0;
  };
  for (size_t i = 0; i < word.size(); ++i) {
    std::string ch = uc::encode(word[i]);
    if (i > 0) ch = bpe_.prefix + ch;
    if (i + 1 == word.size()) ch += bpe_.suffix;
    if (const int id = vocab_.id(ch); id >= 0) {
      flush_unk();
      symbols.push_back(id);
      continue;
    }
    if (bpe_.byte_fallback) {
      std::vector<int> bytes;
      for (unsigned char b : ch) {
        char code[8];
        std::snprintf(code, sizeof code, "<0x%02X>", b);
        const int id = vocab_.id(code);
        if (id < 0) break;
        bytes.push_back(id);
      }
      if (bytes.size() == ch.size()) {
        symbols.insert(symbols.end(), bytes.begin(), bytes.end());  // (a pending [UNK] stays pending, as in model.rs)
        continue;
      }
    }
    if (unk_id >= 0) {
      if (pending_unk > 0 && !bpe_.fuse_unk) flush_unk();
      ++pending_unk;
    }
  }
  flush_unk();
  // word.rs merge_all: always the lowest-ranked adjacent pair, leftmost first
  while (symbols.size() > 1) {
    int best = -1, best_rank = 0, best_id = 0;
    for (size_t k = 0; k + 1 < symbols.size(); ++k) {
      auto it = bpe_.merges.find(pair_key(symbols[k], symbols[k + 1]));
      if (it != bpe_.merges.end() && (best < 0 || it->second.first < best_rank))
        best = static_cast<int>(k), best_rank = it->second.first, best_id = it->second.second;
    }
    if (best < 0) break;
    symbols[static_cast<size_t>(best)] = best_id;
    symbols.erase(symbols.begin() + best + 1);
  }
  for (int id : symbols) push(id, id == unk_id);
}

// ---------------------------------------------------------------- readable labels

namespace {

// One character as a label shows it: white space and controls as visible marks.
std::string visible(char32_t c) {
  switch (c) {
    case U' ': return "\u2423";   // OPEN BOX
    case U'\n': return "\u21B5";  // DOWNWARDS ARROW WITH CORNER LEFTWARDS
    case U'\t': return "\u21E5";  // RIGHTWARDS ARROW TO BAR
    case U'\r': return "\u240D";  // SYMBOL FOR CARRIAGE RETURN
    default: break;
  }
  if (c < 0x20) return uc::encode(static_cast<char32_t>(0x2400 + c));  // Unicode's control pictures: U+240B for \v
  if (c == 0x7F) return "\u2421";
  return uc::encode(c);
}

// Length of the UTF-8 sequence starting at s[i], or 0 when it is not a valid one.
size_t utf8_length(const std::string& s, size_t i) {
  const unsigned char b = static_cast<unsigned char>(s[i]);
  const size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  try {
    uc::decode(std::string_view(s).substr(i, n));
  } catch (const Error&) {
    return 0;  // overlong, surrogate, past U+10FFFF
  }
  return n;
}

}  // namespace

std::vector<std::string> HfTokenizer::readable(const Encoding& e) const {
  if (!bpe_model_) return e.tokens;
  std::vector<std::string> labels(e.size());
  std::vector<uint8_t> opaque(e.size(), 0);  // special and added tokens: their own text
  std::string bytes;
  std::vector<size_t> owner;  // the token each byte came from
  auto flush = [&] {
    for (size_t i = 0; i < bytes.size();) {
      const size_t n = utf8_length(bytes, i);
      if (n == 0) {
        labels[owner[i]] += "\uFFFD";
        ++i;
        continue;
      }
      labels[owner[i]] += visible(uc::decode(std::string_view(bytes).substr(i, n))[0]);
      i += n;
    }
    bytes.clear();
    owner.clear();
  };
  for (size_t i = 0; i < e.size(); ++i) {
    const std::string& tok = e.tokens[i];
    bool added = e.special[i] != 0;
    for (const AddedToken& a : added_) added = added || a.id == e.ids[i];
    if (added) {
      flush();
      labels[i] = tok, opaque[i] = 1;
      continue;
    }
    std::string b;
    if (byte_level_) {
      for (char32_t c : uc::decode(tok)) {
        auto it = byte_table().to_byte.find(c);
        if (it != byte_table().to_byte.end())
          b.push_back(static_cast<char>(it->second));
        else
          b += uc::encode(c);
      }
    } else if (bpe_.byte_fallback && tok.size() == 6 && tok.compare(0, 3, "<0x") == 0 && tok[5] == '>') {
      b.push_back(static_cast<char>(std::stoi(tok.substr(3, 2), nullptr, 16)));
    } else {
      // SentencePiece-style BPE writes a space as U+2581
      for (char32_t c : uc::decode(tok)) b += c == 0x2581 ? std::string(" ") : uc::encode(c);
    }
    bytes += b;
    owner.insert(owner.end(), b.size(), i);
  }
  flush();
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i].empty() && !opaque[i]) labels[i] = "\u2026";  // only the middle or end of a character
  return labels;
}

std::string HfTokenizer::readable_token(int id) const {
  if (id < 0 || id >= vocab_.size()) return "#" + std::to_string(id);  // an embedding row past the tokenizer
  Encoding e;
  e.tokens = {vocab_.token(id)};
  e.ids = {id};
  e.type_ids = {0};
  e.special = {0};
  e.unknown = {0};
  e.word = {0};
  e.word_text = {""};
  for (const AddedToken& a : added_)
    if (a.id == id) e.special[0] = 1;
  std::string label = readable(e)[0];
  if (label != "\u2026" && label.find("\uFFFD") == std::string::npos) return label;
  // part of a character: its bytes
  std::string hex;
  for (char32_t c : uc::decode(e.tokens[0])) {
    auto it = byte_table().to_byte.find(c);
    const int b = it != byte_table().to_byte.end() ? it->second : -1;
    char buf[8];
    std::snprintf(buf, sizeof buf, "%s%02X", hex.empty() ? "" : " ", b & 0xFF);
    hex += buf;
  }
  return byte_level_ ? "<" + hex + ">" : e.tokens[0];
}

// ---------------------------------------------------------------- GPT-2's slow files

std::shared_ptr<const HfTokenizer> HfTokenizer::from_vocab_json(const std::string& vocab_json,
                                                                 const std::string& merges_txt,
                                                                 const std::string& config_text,
                                                                 const std::string& where) {
  // transformers' GPT2Converter (convert_slow_tokenizer.py) over GPT2Tokenizer's files: BPE
  // without [UNK], ByteLevel(add_prefix_space), [BOS] when add_bos_token.
  const json cfg = parse_tokenizer_config(config_text);
  json vocab;
  try {
    vocab = json::parse(vocab_json);
  } catch (const json::exception& e) {
    fail(where, "not valid JSON (" + json_error_text(e.what()) + ")");
  }
  auto t = std::make_shared<HfTokenizer>();
  t->vocab_ = vocab_from_map(vocab, where);
  t->bpe_model_ = true;
  t->unk_.clear();
  // GPT2Tokenizer: merges_handle.read().split("\n")[1:-1] (the first line is the #version
  // header, the last the empty string after the final newline), each line split on white space.
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl; (nl = merges_txt.find('\n', start)) != std::string::npos; start = nl + 1)
    lines.push_back(merges_txt.substr(start, nl - start));
  lines.push_back(merges_txt.substr(start));
  std::vector<std::pair<std::string, std::string>> merges;
  std::set<std::pair<std::string, std::string>> seen;
  for (size_t i = 1; i + 1 < lines.size(); ++i) {
    std::vector<std::string> parts;
    std::string cur;
    for (char c : lines[i] + " ") {
      if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') {
        if (!cur.empty()) parts.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    if (parts.empty()) continue;
    if (parts.size() != 2) fail("merges.txt", "line " + std::to_string(i + 1) + " is not two tokens");
    if (seen.insert({parts[0], parts[1]}).second) merges.emplace_back(parts[0], parts[1]);
  }
  t->add_merges(merges, "merges.txt");
  try {
    PreStep st{PreStep::ByteLevel};
    st.add_prefix_space = json_bool(cfg, "add_prefix_space", false);
    st.re = std::make_shared<Regex>(kGpt2Pattern, where);
    t->pre_ = {st};
    t->byte_level_ = true;
    auto str = [&](const char* key, const char* fallback) { return config_string(cfg, key, fallback); };
    std::set<int> ids;
    if (auto it = cfg.find("added_tokens_decoder"); it != cfg.end() && it->is_object()) {
      const json decoder = *it;
      for (const auto& [id, a] : decoder.items()) {
        AddedToken at;
        at.id = std::stoi(id);
        at.content = a.at("content").get<std::string>();
        at.special = json_bool(a, "special", false);
        at.single_word = json_bool(a, "single_word", false);
        at.lstrip = json_bool(a, "lstrip", false);
        at.rstrip = json_bool(a, "rstrip", false);
        at.normalized = json_bool(a, "normalized", !at.special);
        if (!at.content.empty() && ids.insert(at.id).second) t->added_.push_back(at);
      }
    }
    for (const char* key : {"unk_token", "bos_token", "eos_token", "pad_token"}) {
      const std::string tok = str(key, key[0] == 'p' ? "" : "<|endoftext|>");
      const int id = tok.empty() ? -1 : t->vocab_.id(tok);
      if (id >= 0 && ids.insert(id).second) t->added_.push_back(AddedToken{tok, id, true, false, false, false, false});
    }
    t->single_ = {TemplatePiece{true, 0, "", 0}};
    t->pair_ = {TemplatePiece{true, 0, "", 0}, TemplatePiece{true, 1, "", 1}};
    if (json_bool(cfg, "add_bos_token", false)) {
      const std::string bos = str("bos_token", "<|endoftext|>");
      if (t->vocab_.id(bos) < 0) fail("tokenizer_config.json", "bos_token \"" + bos + "\" is not in the vocabulary");
      t->template_ids_[bos] = {t->vocab_.id(bos)};
      t->single_ = {{false, 0, bos, 0}, {true, 0, "", 0}};
      t->pair_ = {{false, 0, bos, 0}, {true, 0, "", 0}, {true, 1, "", 1}};
    }
  } catch (const Error& e) {
    fail(where, e.what());
  } catch (const std::exception& e) {
    fail("tokenizer_config.json", std::string("unexpected structure (") + e.what() + ")");
  }
  t->check_template_tokens(where);
  t->build_patterns();
  return t;
}

}  // namespace attnlab
