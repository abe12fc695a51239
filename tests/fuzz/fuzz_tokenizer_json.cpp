// libFuzzer harness: a Hugging Face tokenizer.json (parse, then encode a text and a pair with it,
// label the tokens and decode them), and the input as text through a fixed BERT tokenizer (UTF-8, Unicode
// data, added tokens) and a fixed byte-level BPE (a Llama-3-style Split regex through PCRE2,
// merges, readable labels of split characters).
#include <cstdint>
#include <string>

#include "engine/text/hf_tokenizer.h"
#include "engine/core/tensor.h"

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
// Byte-level: "a" "b" "Ġ" "é"'s two bytes (Ã ©), merges "a b", "Ġ a", "Ã ©".
const char* kByteLevel = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "\u0120": 2, "\u00c3": 3, "\u00a9": 4,
  "ab": 5, "\u0120a": 6, "\u00c3\u00a9": 7, "<|s|>": 8}, "merges": ["a b", "\u0120 a", "\u00c3 \u00a9"]},
  "normalizer": {"type": "NFC"},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
  "decoder": {"type": "ByteLevel"},
  "added_tokens": [{"id": 8, "content": "<|s|>", "special": true, "normalized": false}],
  "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|s|>", "type_id": 0}},
    {"Sequence": {"id": "A", "type_id": 0}}], "pair": [{"Sequence": {"id": "A", "type_id": 0}},
    {"Sequence": {"id": "B", "type_id": 1}}], "special_tokens": {"<|s|>": {"id": "<|s|>", "ids": [8]}}}})";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  static const auto fixed = attnlab::HfTokenizer::from_tokenizer_json(kTokenizer);
  static const auto bytes = attnlab::HfTokenizer::from_tokenizer_json(kByteLevel);
  try {
    const attnlab::Encoding e = bytes->encode(input);  // unknown bytes are dropped (no [UNK]), never a crash
    if (bytes->readable(e).size() != e.size()) __builtin_trap();
    for (int id : e.ids) bytes->readable_token(id);
    bytes->decode(e.ids);  // the ids back to text (invalid UTF-8 as U+FFFD), never a crash
  } catch (const attnlab::Error&) {
  }
  try {
    const std::string half = input.substr(0, size / 2);
    fixed->encode(input);
    fixed->encode(half, &half);
  } catch (const attnlab::Error&) {
  }
  try {
    const auto t = attnlab::HfTokenizer::from_tokenizer_json(input);
    const std::string text = "The café [MASK] 東京 abbb.";
    const attnlab::Encoding e = t->encode(text);
    t->readable(e);
    t->decode(e.ids);  // through the input's own decoder
    t->decode({-1, 0, 1, 1 << 30});
    if (t->has_pair_template()) t->encode(text, &text);
  } catch (const attnlab::Error&) {
  }
  return 0;
}
