// What the four files of the Hugging Face tokenizer share (hf_tokenizer.cpp: loading and GPT-2's
// slow files; hf_tokenizer_pipeline.cpp: normalize, pre-tokenize, WordPiece, templates;
// hf_tokenizer_bpe.cpp: BPE; hf_tokenizer_labels.cpp: readable labels), and bpe_trainer.cpp
// (the byte alphabet). Not for other callers.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "engine/core/tensor.h"

namespace attnlab::hf_detail {

[[noreturn]] inline void fail(const std::string& where, const std::string& what) {
  throw Error(where + ": " + what);
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
inline const ByteTable& byte_table() {
  static const ByteTable t;
  return t;
}

inline bool json_bool(const nlohmann::json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw Error(std::string("\"") + key + "\" must be true or false");
  return it->get<bool>();
}

}  // namespace attnlab::hf_detail
