// libFuzzer harness: the TSV/CSV dataset reader (strict and lenient, both delimiters), then
// vocabulary building and splitting on whatever parsed.
#include <cstdint>
#include <string>

#include "engine/train/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  for (const char* name : {"fuzz.tsv", "fuzz.csv"})
    for (const bool strict : {true, false}) {
      try {
        attnlab::DatasetOptions o;
        o.strict = strict;
        const attnlab::Dataset d = attnlab::parse_dataset(bytes, name, o);
        attnlab::build_vocab(d.rows, attnlab::TokenizerKind::Word, true, 100, 1);
        std::vector<attnlab::Example> tr, va;
        if (d.rows.size() >= 2) attnlab::split_dataset(d.rows, 0.5, 1, tr, va);
      } catch (const attnlab::Error&) {
      }
    }
  return 0;
}
