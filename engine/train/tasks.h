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
#include "engine/train/trainer.h"

namespace attnlab {

std::vector<Example> make_negation_task(int n, uint64_t seed);
std::vector<Example> make_first_last_task(int n, uint64_t seed);
// "negation" | "first_last"; Error otherwise.
std::vector<Example> make_task(const std::string& name, int n, uint64_t seed);
// Language-model tasks (the sequences are token ids, drawn from [first_id, vocab); loss_from
// marks where each one's scored part starts):
//  - induction: L random tokens, then the same L again (Olsson et al. 2022), L from seq / 2 to seq,
//    after random filler that makes every sequence 2 seq long; the second copy is scored, which
//    only a head looking back to the token after the current one's first occurrence (an
//    induction head, fed by a previous-token head) can predict.
struct LmTask {
  std::string name;
  int seq = 16;      // the longest repeated part (the sequences are 2 seq long)
  int vocab = 64;    // the model's vocabulary size (ids first_id .. vocab - 1 are drawn)
  int first_id = 3;  // below it: [PAD], [UNK], [CLS], never drawn
};
EncodedData make_lm_task(const LmTask& task, int n, uint64_t seed);
// The language-model tasks by name, for messages: "induction".
std::vector<std::string> lm_task_names();

// text<TAB>label lines with a header.
std::string examples_to_tsv(const std::vector<Example>& rows);

// Language-model presets, one row each: a task, a model and a schedule that reproduce a paper's
// effect at a size this machine trains in seconds (the Train tab lists them beside the shipped
// datasets; attnlab-cli train --objective lm --preset NAME; docs/training.md says what each shows).
struct LmPreset {
  const char* name = "";   // --preset NAME
  const char* label = "";  // how the Train tab lists it
  LmTask task;
  LmShape shape;
  int sequences = 0;  // drawn once with the seed: an epoch's worth
  int epochs = 0, batch = 32, warmup = 0;
  float lr = 1e-3f;
  bool cosine = false;
  uint64_t seed = 0;
  const char* what = "";  // what to watch for, shown when it is chosen
  // The run the row describes: its epochs, batch, schedule and seed; no dropout; the last weights
  // kept (the run is for the change, not the best epoch).
  TrainConfig train_config() const {
    TrainConfig tc;
    tc.epochs = epochs, tc.batch = batch, tc.seed = seed, tc.dropout = 0.0f, tc.keep_best = false;
    tc.optimizer.lr = lr, tc.optimizer.warmup_steps = warmup, tc.optimizer.cosine = cosine;
    return tc;
  }
};
const std::vector<LmPreset>& lm_presets();
const LmPreset& lm_preset(const std::string& name);  // Error naming the presets there are

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
