// Hugging Face tokenizers, reproduced exactly (tests compare ids with the `tokenizers` library):
// the pipeline of a tokenizer.json (added tokens -> normalizer -> pre-tokenizer -> model ->
// post-processor), or the BERT tokenizer that transformers builds from vocab.txt +
// tokenizer_config.json. Supported today: BertNormalizer / Lowercase / NFD / StripAccents,
// BertPreTokenizer / WhitespaceSplit, WordPiece, TemplateProcessing / BertProcessing.
// Truncation and padding in the file are ignored: a visualiser shows the text as typed.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer.h"

namespace attnlab {

// One encoded text (or pair): every token with its id, segment, and where it came from.
struct Encoding {
  std::vector<std::string> tokens;  // vocabulary strings: "[CLS]", "play", "##ing"
  std::vector<int> ids;
  std::vector<int> type_ids;        // 0 for the first text, 1 for the second (per the template)
  std::vector<uint8_t> special;     // added by the post-processor, or a special token typed in the text
  std::vector<uint8_t> unknown;     // the unknown token standing for a word not in the vocabulary
  std::vector<int> word;            // index of the word (pre-token) the piece is part of; -1 for special
  std::vector<std::string> word_text;  // that word as normalised ("" for special tokens)
  size_t size() const { return ids.size(); }
};

class HfTokenizer {
 public:
  // DIR/tokenizer.json, else DIR/vocab.txt (+ tokenizer_config.json) as transformers'
  // BertTokenizerFast; Error naming what is missing or unsupported.
  static std::shared_ptr<const HfTokenizer> from_folder(const std::string& dir);
  static std::shared_ptr<const HfTokenizer> from_tokenizer_json(const std::string& text,
                                                                 const std::string& where = "tokenizer.json");
  // vocab.txt text + tokenizer_config.json text (may be empty: BERT's defaults).
  static std::shared_ptr<const HfTokenizer> from_vocab_txt(const std::string& vocab_text, const std::string& config_text,
                                                            const std::string& where = "vocab.txt");

  // Error on invalid UTF-8. `pair`: the second text of a pair (sentence B).
  Encoding encode(const std::string& text, const std::string* pair = nullptr) const;
  // The stages on their own, for `attnlab-cli tokenize --stage` and the tests.
  std::string normalize(const std::string& text) const;
  std::vector<std::string> pre_tokenize(const std::string& normalized) const;

  const Vocab& vocab() const { return vocab_; }
  int vocab_size() const { return vocab_.size(); }
  bool lowercase() const { return lowercase_; }
  bool has_pair_template() const { return !pair_.empty(); }
  const std::string& unk_token() const { return unk_; }
  std::string describe() const;  // "WordPiece, uncased, 30,522 tokens"

  struct AddedToken {
    std::string content;
    int id = -1;
    bool special = false, single_word = false, lstrip = false, rstrip = false, normalized = false;
  };
  struct TemplatePiece {
    bool is_sequence = false;  // $A / $B
    int sequence = 0;          // 0 = A, 1 = B
    std::string special;       // a special token's name in the template
    int type_id = 0;
  };

 private:
  struct NormStep {
    enum Kind { Bert, Lowercase, Nfd, StripAccents } kind;
    bool clean_text = true, chinese = true, strip_accents = false, lowercase = true;
  };
  enum class PreTok { Bert, WhitespaceSplit, None };

  void encode_one(const std::string& text, int sequence, Encoding& out, int& word_base) const;
  void split_added(const std::u32string& text, bool normalized,
                   std::vector<std::pair<std::u32string, int>>& parts) const;  // (text, added id or -1)
  std::u32string normalize_cps(std::u32string s) const;
  std::vector<std::u32string> pre_tokenize_cps(const std::u32string& s) const;
  void word_piece(const std::u32string& word, int word_index, int sequence, Encoding& out) const;
  void post_process(const Encoding& a, const Encoding* b, Encoding& out) const;
  void check_template_tokens(const std::string& where);
  void build_patterns();  // the added tokens' match patterns, made once at load

  Vocab vocab_;
  std::vector<NormStep> norm_;
  std::vector<PreTok> pre_;
  std::string unk_ = "[UNK]", prefix_ = "##";
  int max_chars_ = 100;
  bool lowercase_ = false;
  std::vector<AddedToken> added_;
  // Added tokens as matched: (pattern, index into added_), raw ones and normalised ones apart.
  std::vector<std::pair<std::u32string, size_t>> raw_patterns_, norm_patterns_;
  std::vector<TemplatePiece> single_, pair_;
  std::unordered_map<std::string, std::vector<int>> template_ids_;  // special token name -> ids
};

}  // namespace attnlab
