// libFuzzer harness: vocab.txt parsing, then both tokenizers on the same bytes as text
// (UTF-8 validation, [UNK] handling, [CLS] prepending).
#include <cstdint>
#include <string>

#include "engine/core/tensor.h"
#include "engine/text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    const attnlab::Vocab v = attnlab::parse_vocab(bytes);
    for (const auto kind : {attnlab::TokenizerKind::Word, attnlab::TokenizerKind::Char})
      for (const bool add_cls : {false, true}) {
        attnlab::ModelConfig c;
        c.vocab_size = v.size();
        c.tokenizer = kind;
        c.add_cls = add_cls;
        try {
          attnlab::tokenize(bytes, c, v);
        } catch (const attnlab::Error&) {
        }
      }
  } catch (const attnlab::Error&) {
  }
  return 0;
}
