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
// Language-model tasks (the sequences are token ids; loss_from marks where each one's scored part
// starts, the prompt before it is context only). Ids below first_id ([PAD], [UNK], [CLS]) are never
// used. One row each in lm_task_kinds():
//  - induction: L random tokens, then the same L again (Olsson et al. 2022), L from seq / 2 to seq,
//    after random filler that makes every sequence 2 seq long; the second copy is scored, which
//    only a head looking back to the token after the current one's first occurrence (an
//    induction head, fed by a previous-token head) can predict.
//  - copy: L random tokens, "|", the same L again (L from seq / 2 to seq; 2 L + 1 tokens); the copy
//    is scored. Tokens are drawn from [first_id, vocab - 1); vocab - 1 is "|".
//  - reverse: as copy, the L tokens reversed after "|": each output reads the token as far before
//    "|" as it is after it (an anti-diagonal pattern).
//  - parens: a string of 2 to seq parentheses, "=", then "yes" if it is balanced (every prefix
//    opens at least as many as it closes, and the whole closes all) or "no"; only the answer is
//    scored. Half are balanced; of the rest, half have as many "(" as ")" in a wrong order (only
//    the prefixes tell) and half have one parenthesis flipped (the counts tell). Ids: first_id ..
//    first_id + 4 for "(", ")", "=", "yes", "no". Short strings recur, also across the split.
//  - modadd: "a b = c" with c = (a + b) mod p (Power et al. 2022; Nanda et al. 2023), every pair
//    a, b in [0, p) once; train_frac of the pairs are trained on, the rest held out; only c is
//    scored. Ids: first_id + k for the number k, first_id + p for "=" (vocab is first_id + p + 1).
struct LmTask {
  std::string name;
  int seq = 16;             // induction, copy, reverse: the longest repeated part; parens: the longest string
  int vocab = 64;           // induction, copy, reverse: the model's vocabulary size
  int first_id = 3;         // below it: [PAD], [UNK], [CLS], never drawn
  int p = 113;              // modadd: the modulus
  double train_frac = 0.3;  // modadd: the share of the p^2 pairs trained on
};
// What the CLI, the Train tab and a run need to know of a task: one row each.
struct LmTaskKind {
  const char* name = "";
  const char* summary = "";      // one line, for --help
  bool fixed_set = false;        // every case once, split by train_frac (modadd); else drawn with the seed
  bool uses_vocab = false;       // --task-vocab sets its vocabulary (else the task fixes it)
  bool uses_seq = false;         // --task-seq applies
  bool keeps_best = false;       // a run ends with the weights of its best held-out epoch (lm_keeps_best)
  bool probe_repeats = false;    // its probe is a random sequence repeated, which the head detectors read
  bool accuracy_curves = false;  // the Train tab charts training and held-out accuracy over log steps
};
const std::vector<LmTaskKind>& lm_task_kinds();
const LmTaskKind& lm_task_kind(const std::string& name);  // Error naming the tasks there are
// Drawn tasks: n sequences drawn with the seed. Error for a fixed set (modadd; make_lm_data splits it).
EncodedData make_lm_task(const LmTask& task, int n, uint64_t seed);
// A task's training and held-out sequences. Drawn tasks: n drawn with 2 seed + 1 and n / 10 (1 to
// 256) with 2 seed + 2; modadd: the p^2 pairs shuffled with the seed, the first train_frac of
// them (at least one each side) to train on, n not used. Error naming the problem for a bad task.
LmData make_lm_data(const LmTask& task, int n, uint64_t seed);
// The vocabulary size a model of the task needs, and its longest sequence.
int lm_task_vocab(const LmTask& task);
int lm_task_length(const LmTask& task);
// The vocabulary of a new model for the task: drawn ids are arbitrary tokens (w0, w1, ..., as
// new_language_model names them); the task's own tokens read as the task writes them ("|", "(",
// "yes", modadd's "0" .. "p-1" and "="), so Explore reads "12 40 =" as the task does.
Vocab lm_task_vocabulary(const LmTask& task);
// What the Train tab shows the model while it trains: for induction, seq tokens drawn from the
// task's ids (seed 0) and the same seq again, as the head detectors read; for the others, the
// first held-out sequence (of make_lm_data with the seed) without its last token, so the next
// token is its last answer.
std::vector<int> lm_task_probe(const LmTask& task, uint64_t seed);
// Whether a run on the task ends with the weights of its best held-out epoch: modadd's (past
// grokking, Adam's loss spikes come and go, the "slingshot" of Thilak et al. 2022, and a run can
// end inside one); the others keep the last (the run is for the change, not the best epoch).
inline bool lm_keeps_best(const LmTask& task) {
  return lm_task_kind(task.name).keeps_best;
}
// The language-model tasks by name, for messages: "induction, copy, reverse, parens, modadd".
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
  float weight_decay = 0.0f;  // AdamW's decoupled decay (grokking needs it)
  float beta2 = 0.999f;
  bool cosine = false;
  uint64_t seed = 0;
  const char* what = "";  // what to watch for, shown when it is chosen
  // The run the row describes: its epochs, batch, schedule and seed; no dropout; which weights are
  // kept (lm_keeps_best).
  TrainConfig train_config() const {
    TrainConfig tc;
    tc.epochs = epochs, tc.batch = batch, tc.seed = seed, tc.dropout = 0.0f, tc.keep_best = lm_keeps_best(task);
    tc.optimizer.lr = lr, tc.optimizer.warmup_steps = warmup, tc.optimizer.cosine = cosine;
    tc.optimizer.weight_decay = weight_decay, tc.optimizer.beta2 = beta2;
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

// Texts shipped in resources/data for a new language model (new_text_language_model), one row
// each: the file, how the Train tab lists it, what to watch for, and the model and run that show
// it in a minute or so here (the form keeps them editable).
struct ShippedText {
  const char* file;
  const char* label;
  const char* what;
  const char* opening = nullptr;  // where the Data box's preview starts (past the file's header), or null
  LmShape shape;                  // its vocab is the text's
  TextLmOptions text;
  int epochs = 10, batch = 32;
  float lr = 1e-3f, dropout = 0.0f;
};
const std::vector<ShippedText>& shipped_texts();

}  // namespace attnlab
