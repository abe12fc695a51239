// Hugging Face tokenizers, reproduced exactly (tests compare ids with the `tokenizers` library):
// the pipeline of a tokenizer.json (added tokens -> normalizer -> pre-tokenizer -> model ->
// post-processor), or what transformers builds from a slow tokenizer's files: BERT's vocab.txt
// (+ tokenizer_config.json), GPT-2's vocab.json + merges.txt. Supported: BertNormalizer /
// Lowercase / NFD / NFC / StripAccents / Prepend / Replace, BertPreTokenizer / WhitespaceSplit /
// ByteLevel / Split (Oniguruma-style regexes through PCRE2), WordPiece and BPE (merges by rank,
// byte fallback, ignore_merges), TemplateProcessing / BertProcessing / ByteLevel / Sequence.
// Truncation and padding in the file are ignored: a visualiser shows the text as typed.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/text/regex.h"
#include "engine/text/tokenizer.h"

namespace attnlab {

// One encoded text (or pair): every token with its id, segment, and where it came from.
struct Encoding {
  std::vector<std::string> tokens;  // vocabulary strings: "[CLS]", "play", "##ing"
  std::vector<int> ids;
  std::vector<int> type_ids;           // 0 for the first text, 1 for the second (per the template)
  std::vector<uint8_t> special;        // added by the post-processor, or a special token typed in the text
  std::vector<uint8_t> unknown;        // the unknown token standing for a word not in the vocabulary
  std::vector<int> word;               // index of the word (pre-token) the piece is part of; -1 for special
  std::vector<std::string> word_text;  // that word as normalised ("" for special tokens)
  size_t size() const { return ids.size(); }
};

// How an encoding longer than a length is cut, as Hugging Face's tokenizers names and does it
// (TruncationStrategy, direction right, stride 0): the texts are cut before the template adds
// its special tokens, so [CLS] A [SEP] B [SEP] keeps every separator.
enum class Truncation {
  None,          // nothing is cut
  LongestFirst,  // the longer text first (both to about half when both are long)
  OnlyFirst,     // text A only
  OnlySecond,    // sentence B only
};
Truncation parse_truncation(const std::string& name);  // longest_first | only_first | only_second
const char* to_string(Truncation t);
// What a truncation removed from each text.
struct TruncationCut {
  int from_first = 0, from_second = 0;
};

class HfTokenizer {
 public:
  // DIR/tokenizer.json, else DIR/vocab.txt (+ tokenizer_config.json) as transformers'
  // BertTokenizerFast; Error naming what is missing or unsupported.
  static std::shared_ptr<const HfTokenizer> from_folder(const std::string& dir);
  static std::shared_ptr<const HfTokenizer> from_tokenizer_json(const std::string& text,
                                                                const std::string& where = "tokenizer.json");
  // vocab.txt text + tokenizer_config.json text (may be empty: BERT's defaults).
  static std::shared_ptr<const HfTokenizer> from_vocab_txt(const std::string& vocab_text,
                                                           const std::string& config_text,
                                                           const std::string& where = "vocab.txt");
  // vocab.json + merges.txt (+ tokenizer_config.json) as transformers' GPT2TokenizerFast.
  static std::shared_ptr<const HfTokenizer> from_vocab_json(const std::string& vocab_json,
                                                            const std::string& merges_txt,
                                                            const std::string& config_text,
                                                            const std::string& where = "vocab.json");

  // Error on invalid UTF-8. `pair`: the second text of a pair (sentence B).
  Encoding encode(const std::string& text, const std::string* pair = nullptr) const;
  // The same, cut to at most max_length tokens (special tokens included) as tokenizers'
  // truncate_encodings does it; Error (as tokenizers') when the strategy cannot reach the length
  // (only_second without a pair, a text too short to lose enough). `cut` says what was removed.
  Encoding encode(const std::string& text, const std::string* pair, int max_length, Truncation how,
                  TruncationCut* cut = nullptr) const;
  // ids back to text as tokenizers' Tokenizer.decode does it (skip_special_tokens=False): each
  // id's token through the tokenizer.json decoder (ByteLevel, Metaspace, WordPiece, or a Sequence
  // of Replace, ByteFallback, Fuse, Strip), joined; without a decoder, the tokens joined by spaces.
  // Invalid UTF-8 comes out as U+FFFD, as there; an id outside the vocabulary (models pad their
  // embedding past it) is left out, as tokenizers' id_to_token gives it nothing.
  std::string decode(const std::vector<int>& ids) const;
  // Tokens the template adds to one text or to a pair ([CLS] and [SEP]: 2 and 3 for BERT).
  int added_tokens(bool pair) const;
  // The stages on their own, for `attnlab-cli tokenize --stage` and the tests.
  std::string normalize(const std::string& text) const;
  std::vector<std::string> pre_tokenize(const std::string& normalized) const;

  // Labels a person can read: a byte-level token's bytes as text (a space drawn as U+2423, a
  // newline as U+21B5), a character split over several tokens shown on the token where it
  // starts (the others show U+2026), byte-fallback <0xNN> tokens joined the same way.
  // WordPiece tokens are their own labels.
  std::vector<std::string> readable(const Encoding& e) const;
  // One vocabulary token on its own, readable; a token holding only part of a character shows
  // its bytes as byte-fallback vocabularies (Llama's, Mistral's) name them ("<0xE2><0x80>").
  std::string readable_token(int id) const;

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
    enum Kind { Bert, Lowercase, Nfd, Nfc, StripAccents, Prepend, Replace } kind;
    NormStep(Kind k) : kind(k) {}  // NOLINT: {NormStep::Nfd} reads as the step it is
    bool clean_text = true, chinese = true, strip_accents = false, lowercase = true;
    std::u32string text, with;        // Prepend: text; Replace: literal text -> with
    std::shared_ptr<const Regex> re;  // Replace with a regex
  };
  struct PreStep {
    enum Kind { Bert, WhitespaceSplit, ByteLevel, Split } kind;
    PreStep(Kind k) : kind(k) {}  // NOLINT: {PreStep::Bert} reads as the step it is
    // Split (and ByteLevel's own GPT-2 regex): what a match becomes (tokenizers' SplitDelimiterBehavior)
    enum Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous } behavior = Isolated;
    std::shared_ptr<const Regex> re;  // null with a literal pattern
    std::string literal;
    bool invert = false;
    bool add_prefix_space = false, use_regex = true;  // ByteLevel
  };
  struct DecodeStep {
    enum Kind { ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, WordPiece } kind;
    DecodeStep(Kind k) : kind(k) {}  // NOLINT: {DecodeStep::Fuse} reads as the step it is
    std::string from, to;            // Replace (a literal pattern); Metaspace: the replacement character
    int start = 0, stop = 0;         // Strip: leading and trailing characters to remove
    bool prepend = true;             // Metaspace: a space was prepended (strip it from the first token)
    bool cleanup = true;             // WordPiece: tokenizers' cleanup of spaces before punctuation
  };
  void parse_decoder(const nlohmann::json& d, const std::string& where);
  struct Bpe {
    std::unordered_map<uint64_t, std::pair<int, int>> merges;  // (left id, right id) -> (rank, merged id)
    bool byte_fallback = false, ignore_merges = false, fuse_unk = false, has_unk = false;
    std::string prefix, suffix;  // continuing_subword_prefix, end_of_word_suffix
  };
  void bpe_word(const std::u32string& word, int word_index, int sequence, Encoding& out) const;
  void parse_bpe(const nlohmann::json& model, const std::string& where);
  void add_merges(const std::vector<std::pair<std::string, std::string>>& merges, const std::string& where);
  std::vector<std::string> split_by(const PreStep& p, const std::string& piece) const;

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
  bool bpe_model_ = false;  // BPE (else WordPiece)
  Bpe bpe_;
  bool byte_level_ = false;  // a ByteLevel pre-tokenizer maps bytes to its 256 printable characters
  std::vector<NormStep> norm_;
  std::vector<PreStep> pre_;
  std::string unk_ = "[UNK]", prefix_ = "##";
  int max_chars_ = 100;
  bool lowercase_ = false;
  std::vector<AddedToken> added_;
  // Added tokens as matched: (pattern, index into added_), raw ones and normalised ones apart.
  std::vector<std::pair<std::u32string, size_t>> raw_patterns_, norm_patterns_;
  std::vector<TemplatePiece> single_, pair_;
  std::vector<DecodeStep> decoder_;  // tokenizer.json's decoder, flattened; empty: join with spaces
  std::unordered_map<std::string, std::vector<int>> template_ids_;  // special token name -> ids
};

}  // namespace attnlab
