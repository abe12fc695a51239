// The trainer: epochs of shuffled, padded batches through train_step and Adam, per-epoch
// validation, progress events for the GUI, cancellation within one batch, best-model keeping,
// and a stop that keeps the last good weights when the loss or gradients turn NaN/inf.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "engine/train/dataset.h"
#include "engine/train/optimizer.h"
#include "engine/compute/ops.h"

namespace attnlab {

struct TrainConfig {
  int epochs = 10;
  int batch = 32;
  OptimizerConfig optimizer;
  float dropout = 0.1f;
  uint64_t seed = 0;
  std::string backend = "cpu";
  bool keep_best = true;        // end with the weights of the epoch with the best validation accuracy
  bool freeze_encoder = false;  // train the head (pooler, classifier) only
  bool checkpoint = false;      // activation checkpointing (StepOptions::checkpoint)
  int max_steps = 0;            // > 0: stop after this many steps (the schedule ends there)
  // The held-out set is evaluated every this many epochs and after the last (a run of one-step
  // epochs, modadd's full batch, spent ~40% of its time on it at 1); the epochs between report
  // val_loss and val_acc as NaN and are not candidates for keep_best.
  int eval_every = 1;
};

struct TrainProgress {
  int epoch = 0, epochs = 0;  // epoch is 1-based
  int step = 0, total_steps = 0;
  double loss = 0;           // this batch's loss
  double samples_per_s = 0;  // over the epoch so far
  double lr = 0;
};

struct EpochReport {
  int epoch = 0;
  double train_loss = 0, val_loss = 0, val_acc = 0;
  // the epoch's batches' accuracy, each taken before its update (a language model's: over scored
  // positions); with one batch an epoch (modadd's full batch), the training set's accuracy
  double train_acc = 0;
  double samples_per_s = 0;
};

struct EvalResult {
  double loss = 0, accuracy = 0;
  std::vector<std::vector<int>> confusion;  // [true][predicted]
  std::vector<double> class_accuracy;       // per true class (NaN when the class has no rows)
  size_t count = 0;
};

// Stop and pause for a run on another thread: stop() is seen before the next batch (or layer of
// a forward pass: cancel is the flag ForwardRequest::cancel takes); a paused run blocks on a
// condition variable before its next batch until resumed or stopped (no polling).
class RunControl {
 public:
  void stop();
  void set_paused(bool paused);
  bool paused() const { return paused_; }
  bool stopped() const { return cancel.load(); }
  // Blocks while paused; returns false when the run should stop.
  bool wait_while_paused();
  void reset();

  std::atomic<bool> cancel{false};

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool paused_ = false;
};

struct TrainCallbacks {
  std::function<void(const TrainProgress&)> on_step;
  std::function<void(const EpochReport&)> on_epoch;
  RunControl* control = nullptr;  // stop and pause, checked before every batch
};

struct TrainResult {
  std::vector<EpochReport> epochs;
  bool cancelled = false;
  bool diverged = false;
  int best_epoch = 0;
  std::string message;  // why training stopped early, for the user
};

// A new classifier for a dataset: vocabulary from the training rows, labels from them (Error
// when there is only one class), the config's sizes, random weights from the seed; and both
// splits encoded (cut at max_len, counted in EncodedData::truncated).
struct TrainingSetup {
  Model model;
  EncodedData train, val;
};
TrainingSetup new_classifier(const std::vector<Example>& train_rows, const std::vector<Example>& val_rows,
                             ModelConfig config, uint64_t seed, int vocab_cap = 20000, int min_count = 1);

// Fine-tuning: a copy of `base` (its config, weights and tokenizer) with a new classifier for the
// rows' labels on the pooled output: pooler (kept from base when it has one) and classifier
// initialised as transformers does (normal, std 0.02; biases 0); both splits encoded with the
// base's tokenizer.
TrainingSetup fine_tune_setup(const Model& base, const std::vector<Example>& train_rows,
                              const std::vector<Example>& val_rows, uint64_t seed);
// A new decoder language model to train from scratch: GPT-2's shape ("gpt2": learned positions,
// pre-LayerNorm, GELU (tanh), tied LM head, biases) or Llama's ("llama": RoPE, RMSNorm, SwiGLU,
// untied head, no biases, grouped-query heads when kv_heads divides heads); ff 0 = attention-only.
// Initialised as transformers' _init_weights: normal(0, 0.02) weights and embeddings, zero biases,
// unit norm gains, GPT-2's residual projections (attn.c_proj, mlp.c_proj) normal(0, 0.02 /
// sqrt(2 layers)). Word-level vocabulary of `vocab` tokens: [PAD], [UNK], [CLS], w0, w1, ...
struct LmShape {
  std::string arch = "gpt2";
  int layers = 2, heads = 4, kv_heads = 0, dim = 64, ff = 256, max_len = 128, vocab = 64;
};
Model new_language_model(const LmShape& shape, uint64_t seed);

// A new language model on a text of one's own (attnlab-cli train --objective lm --data FILE.txt,
// the Train tab's "Train a language model on a text file..."), read by a tokenizer learned from
// the text:
// - Char (case kept) or Word (lower-cased): a vocabulary built by build_vocab (by frequency,
//   vocab_size at most with [PAD], [UNK] and [CLS], each piece seen min_count times; the rest
//   read as [UNK]);
// - Bpe: a byte-level BPE learned as tokenizers' BpeTrainer learns one (train_byte_level_bpe:
//   vocab_size at most with <|endoftext|> and the 256 bytes, pairs seen min_count times merged);
//   nothing is unknown. The model is a Hugging Face one from the start (as_hf_language_model), its
//   tokenizer.json the learned one.
// Then a model of `shape` with that vocabulary (shape.vocab is set; shape.max_len must hold seq),
// and the text's sequences of seq tokens with the last tenth held out (split_lm_text). Error, for
// the caller to prefix with the file's name, when the text has fewer than 2 distinct pieces or
// makes fewer than two sequences.
enum class TextTokenizer { Char, Word, Bpe };
TextTokenizer parse_text_tokenizer(const std::string& name);  // char | word | bpe; Error otherwise
const char* to_string(TextTokenizer t);
struct TextLmOptions {
  TextTokenizer tokenizer = TextTokenizer::Char;
  int seq = 64;
  int vocab_size = 4096;  // a BPE's default is 1024 (default_vocab_size)
  int min_count = 1;      // a BPE's default is 2 (ByteLevelBPETokenizer's min_frequency)
  static int default_vocab_size(TextTokenizer t) { return t == TextTokenizer::Bpe ? 1024 : 4096; }
  static int default_min_count(TextTokenizer t) { return t == TextTokenizer::Bpe ? 2 : 1; }
};
struct TextLm {
  Model model;
  LmData data;
};
TextLm new_text_language_model(const std::string& text, const TextLmOptions& options, LmShape shape, uint64_t seed);

// Per parameter tensor (parameters() order): true for everything but the head (pooler, classifier).
std::vector<bool> encoder_mask(const ModelConfig& config);

// Trains model.weights in place.
TrainResult train_model(Model& model, const EncodedData& train, const EncodedData& val, const TrainConfig& config,
                        const TrainCallbacks& callbacks = {});

EvalResult evaluate(const Model& model, Ops& ops, const EncodedData& data, int batch = 64);

}  // namespace attnlab
