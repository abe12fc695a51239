// Vocabulary (vocab.txt: one token per line, line number = id) and the two tokenizers:
// word (lower-cased words, punctuation split off) and char (one token per UTF-8 code point).
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "engine/core/config.h"

namespace attnlab {

inline constexpr const char* kPadToken = "[PAD]";
inline constexpr const char* kUnkToken = "[UNK]";
inline constexpr const char* kClsToken = "[CLS]";

class Vocab {
 public:
  Vocab() = default;
  explicit Vocab(std::vector<std::string> tokens);  // Error on a duplicate token

  int size() const { return static_cast<int>(tokens_.size()); }
  const std::string& token(int id) const { return tokens_.at(static_cast<size_t>(id)); }
  const std::vector<std::string>& tokens() const { return tokens_; }
  int id(const std::string& token) const;  // -1 when absent
  int pad_id() const { return id(kPadToken); }
  int unk_id() const { return id(kUnkToken); }
  int cls_id() const { return id(kClsToken); }

 private:
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int> index_;
};

Vocab parse_vocab(const std::string& text, const std::string& where = "vocab.txt");
Vocab load_vocab(const std::string& path);
std::string vocab_to_text(const Vocab& v);

struct Tokenized {
  std::vector<std::string> tokens;  // as shown to the user ("[UNK]" spelled as the original text)
  std::vector<int> ids;
  std::vector<bool> unknown;  // true where the piece was not in the vocabulary
};

// Splits text into pieces (no vocabulary involved). Error on invalid UTF-8.
std::vector<std::string> split_text(const std::string& text, TokenizerKind kind, bool lowercase);
// Pieces -> ids; prepends [CLS] when the tokenizer description says so (config.add_cls).
Tokenized tokenize(const std::string& text, const ModelConfig& config, const Vocab& vocab);
// Ids -> tokens for display; Error naming the first id outside [0, vocab_size).
Tokenized from_ids(const std::vector<int>& ids, const ModelConfig& config, const Vocab& vocab);

}  // namespace attnlab
