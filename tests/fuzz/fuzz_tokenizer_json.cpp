// libFuzzer harness: a Hugging Face tokenizer.json (parse, then encode a text and a pair with it),
// and the input as text through a fixed BERT tokenizer (UTF-8, Unicode data, added tokens).
#include <cstdint>
#include <string>

#include "engine/hf_tokenizer.h"
#include "engine/tensor.h"

namespace {
const char* kTokenizer = R"({"model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
  "max_input_chars_per_word": 12, "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "a": 5,
  "##b": 6, "the": 7, "##s": 8, "é": 9, "東": 10, ".": 11}},
  "normalizer": {"type": "BertNormalizer", "lowercase": true, "strip_accents": null},
  "pre_tokenizer": {"type": "BertPreTokenizer"},
  "added_tokens": [{"id": 4, "content": "[MASK]", "special": true, "lstrip": true, "rstrip": false,
                    "single_word": false, "normalized": false},
                   {"id": 7, "content": "the", "special": false, "single_word": true, "normalized": true}],
  "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]}})";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  static const auto fixed = attnlab::HfTokenizer::from_tokenizer_json(kTokenizer);
  try {
    const std::string half = input.substr(0, size / 2);
    fixed->encode(input);
    fixed->encode(half, &half);
  } catch (const attnlab::Error&) {
  }
  try {
    const auto t = attnlab::HfTokenizer::from_tokenizer_json(input);
    const std::string text = "The café [MASK] 東京 abbb.";
    t->encode(text);
    if (t->has_pair_template()) t->encode(text, &text);
  } catch (const attnlab::Error&) {
  }
  return 0;
}
