// Hugging Face tokenizers (see hf_tokenizer.h): loading tokenizer.json, and GPT-2's slow files. Each step follows the
// Rust source of `tokenizers` 0.19 (normalizers/bert.rs, pre_tokenizers/bert.rs, models/wordpiece,
// processors/template.rs, tokenizer/added_vocabulary.rs); the Unicode data comes from ICU.
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

// GPT-2's pre-tokenizer regex (ByteLevel with use_regex).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

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
  throw Error(dir +
              ": no tokenizer (expected tokenizer.json, vocab.txt with tokenizer_config.json, or vocab.json "
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
    const std::string type =
        model.value("type", std::string(model.contains("vocab") && model.contains("merges") ? "BPE" : ""));
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
        fail(where,
             "normalizer \"" + nt +
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
        fail(where,
             "pre-tokenizer \"" + pt + "\" is not supported (BertPreTokenizer, WhitespaceSplit, ByteLevel, Split are)");
      }
    };
    if (j.contains("pre_tokenizer")) add_pre(j["pre_tokenizer"]);
    if (j.contains("decoder")) t->parse_decoder(j["decoder"], where);

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
        while (static_cast<int>(tokens.size()) < a.id)
          tokens.push_back("<no token " + std::to_string(tokens.size()) + ">");
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
      } else if (type == "RobertaProcessing") {  // RoBERTa's and BART's: <s> A </s>, <s> A </s> </s> B </s>, types 0
        const std::string cls = pp.at("cls").at(0).get<std::string>(), sep = pp.at("sep").at(0).get<std::string>();
        t->template_ids_[cls] = {pp.at("cls").at(1).get<int>()};
        t->template_ids_[sep] = {pp.at("sep").at(1).get<int>()};
        t->single_ = {{false, 0, cls, 0}, {true, 0, "", 0}, {false, 0, sep, 0}};
        t->pair_ = {{false, 0, cls, 0}, {true, 0, "", 0}, {false, 0, sep, 0},
                    {false, 0, sep, 0}, {true, 1, "", 0}, {false, 0, sep, 0}};
      } else {
        fail(where, "post_processor \"" + type +
                        "\" is not supported (TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, "
                        "Sequence are)");
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
  t->decoder_ = {DecodeStep::WordPiece};  // BertTokenizerFast's decoder: "##" joins, cleanup on
  t->unk_ = str("unk_token", "[UNK]");
  const std::string cls = str("cls_token", "[CLS]"), sep = str("sep_token", "[SEP]");
  for (const std::string& sp : {str("pad_token", "[PAD]"), t->unk_, cls, sep, str("mask_token", "[MASK]")}) {
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
    t->decoder_ = {DecodeStep::ByteLevel};  // GPT2TokenizerFast's decoder
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
