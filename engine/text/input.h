// Input preparation: text (or ids) -> what a pass reads and what every view labels it with, with
// one policy for every caller (the CLI, Explore, the Train tab's probe, datasets). Special tokens
// come from the model's tokenizer description (config "add_cls"), never from other settings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/text/hf_tokenizer.h"

namespace attnlab {

// What to do with more tokens than the model's max_len.
enum class Overflow {
  Cut,    // keep the first max_len tokens and say so in a notice (the app, datasets, probes)
  Error,  // refuse with an Error (the CLI, where a silent cut would change a user's numbers)
  Keep,   // keep every token (tokenizing only, never a pass)
};

struct InputOptions {
  Overflow overflow = Overflow::Cut;
  int pad_to = 0;             // append [PAD] up to this length (at most max_len)
  std::string what = "text";  // names the input in notices and errors ("cross text", "line 7")
  // Sentence B of a pair ([CLS] A [SEP] B [SEP], token types 0 / 1): models whose tokenizer has a
  // pair template (Hugging Face BERT family); Error for others.
  std::optional<std::string> pair;
  // Cutting to max_len as transformers does (Hugging Face tokenizers): the texts are cut, then
  // [CLS] / [SEP] added. None: Cut means longest_first for such tokenizers (a pair keeps
  // sentence B and both separators), Error refuses. Other tokenizers keep their first tokens.
  Truncation truncation = Truncation::None;
};

struct PreparedInput {
  std::vector<std::string> tokens;  // as shown: pieces as typed ("[UNK]" pieces keep their text)
  std::vector<int> ids;
  std::vector<uint8_t> unknown;      // 1 where the piece is not in the vocabulary (id = [UNK])
  std::vector<uint8_t> special;      // 1 for tokens the tokenizer added ([CLS], [SEP]), typed special tokens, padding
  std::vector<int> token_types;      // segment of each token (0 = text, 1 = pair); all 0 for one text
  std::vector<int> words;            // word each token is a piece of ("play" "##ing" share one); -1 for special
  std::vector<std::string> notices;  // what was done to the input, for the user ("cut to 512 tokens")
  TruncationCut cut;                 // tokens the cut removed from the text and from sentence B

  size_t size() const { return ids.size(); }
};

// Tokenizes text for the model (Error on invalid UTF-8, or when a piece has no id and the
// vocabulary no [UNK]). Empty text gives an empty input, not an error.
PreparedInput prepare_text(const Model& model, const std::string& text, const InputOptions& options = {});
// The same for ids typed by the user: labels from the vocabulary; Error for an id outside it.
PreparedInput prepare_ids(const Model& model, const std::vector<int>& ids, const InputOptions& options = {});

}  // namespace attnlab
