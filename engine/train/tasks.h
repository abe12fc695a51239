// Generated toy tasks whose solutions need attention, deterministic by seed:
//  - negation: "the film was not very good" -> negative; a head must look from the sentiment
//    word to the negator.
//  - first_last: a string of letters -> "same" if its last letter equals its first, else
//    "different"; the last position must attend to the first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/train/dataset.h"

namespace attnlab {

std::vector<Example> make_negation_task(int n, uint64_t seed);
std::vector<Example> make_first_last_task(int n, uint64_t seed);
// "negation" | "first_last"; Error otherwise.
std::vector<Example> make_task(const std::string& name, int n, uint64_t seed);
// text<TAB>label lines with a header.
std::string examples_to_tsv(const std::vector<Example>& rows);

// The datasets shipped in resources/data, one row each: the file, how the Train tab names it, the
// tokenizer and max_len a new model on it gets, and a probe sentence whose heads it shows.
struct ShippedDataset {
  const char* file;
  const char* label;
  const char* tokenizer;  // "word" | "char"
  int max_len;
  const char* probe;
};
const std::vector<ShippedDataset>& shipped_datasets();

}  // namespace attnlab
