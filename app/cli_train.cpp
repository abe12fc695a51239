// attnlab-cli train / eval / predict / make-data: the training side of the engine, headless.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "app/cli_common.h"
#include "engine/core/io_util.h"
#include "engine/core/memory.h"
#include "engine/formats/safetensors.h"
#include "engine/model/hf_model.h"
#include "engine/train/train_model.h"
#include "engine/train/tasks.h"
#include "engine/train/trainer.h"

namespace attnlab::cli {

namespace {

using json = nlohmann::json;

DatasetOptions dataset_options(const Args& a) {
  DatasetOptions o;
  o.text_column = a.get("--text-column");
  o.label_column = a.get("--label-column");
  return o;
}

void print_eval(const Model& model, const EvalResult& ev) {
  std::printf("accuracy %.4f loss %.4f (%zu examples)\n", ev.accuracy, ev.loss, ev.count);
  for (size_t k = 0; k < ev.class_accuracy.size(); ++k) {
    int total = 0;
    for (int v : ev.confusion[k]) total += v;
    std::printf("  class %-12s accuracy %.4f (%d examples)\n", model.label(static_cast<int>(k)).c_str(),
                ev.class_accuracy[k], total);
  }
}

// Optimiser flags both objectives share.
void optimizer_from_flags(const Args& a, TrainConfig& tc, double default_lr, double default_dropout) {
  tc.optimizer.lr = static_cast<float>(a.get_double("--lr", default_lr));
  tc.checkpoint = a.has("--checkpoint");
  tc.optimizer.weight_decay = static_cast<float>(a.get_double("--weight-decay", 0.0));
  tc.optimizer.clip_norm = static_cast<float>(a.get_double("--clip", 1.0));
  tc.optimizer.warmup_steps = a.get_int("--warmup", 0);
  tc.optimizer.cosine = a.has("--cosine");
  tc.dropout = static_cast<float>(a.get_double("--dropout", default_dropout));
  tc.backend = a.get("--backend", "cpu");
  if (!(tc.dropout >= 0.0f && tc.dropout < 1.0f)) throw Error("--dropout must be in [0, 1)");
  if (!(tc.optimizer.lr > 0.0f)) throw Error("--lr must be positive");
}

// train --objective lm: a new GPT-2- or Llama-style decoder on a generated task, next-token loss;
// --preset NAME starts from a row of lm_presets() (each flag given overrides it).
// Both language-model runs: a line every --log-every steps and one per epoch, then the folder
// saved (the last weights); exit 1 when the run diverged.
int run_lm(const Args& a, Model& model, const EncodedData& train, const EncodedData& val, TrainConfig tc,
           int log_every) {
  const bool quiet = a.has("--quiet");
  tc.eval_every = a.get_int("--eval-every", 1);
  if (tc.eval_every < 1) throw Error("--eval-every must be 1 or more (epochs between held-out evaluations)");
  TrainCallbacks cb;
  const int every = std::max(1, a.get_int("--log-every", log_every));
  // an epoch line each epoch, or every --log-every steps' worth when epochs are single steps
  // (modadd's full batch runs thousands; their epoch lines say what step lines would, so none)
  const int per_epoch =
      static_cast<int>((train.size() + static_cast<size_t>(tc.batch) - 1) / static_cast<size_t>(tc.batch));
  cb.on_step = [&](const TrainProgress& p) {
    if (quiet || per_epoch == 1 || (p.step % every != 0 && p.step != p.total_steps)) return;
    std::printf("step %d/%d loss %.4f lr %.2e\n", p.step, p.total_steps, p.loss, p.lr);
    std::fflush(stdout);
  };
  const int epoch_every = std::max(1, every / std::max(1, per_epoch));
  cb.on_epoch = [&](const EpochReport& r) {
    if (r.epoch % epoch_every != 0 && r.epoch != tc.epochs) return;
    std::printf("epoch %d/%d train_loss %.4f train_acc %.4f val_loss %.4f val_acc %.4f samples_per_s %.0f\n", r.epoch,
                tc.epochs, r.train_loss, r.train_acc, r.val_loss, r.val_acc, r.samples_per_s);
    std::fflush(stdout);
  };
  // --hf: the folder as transformers saves GPT2LMHeadModel / LlamaForCausalLM; refused before the
  // run when the model has no such form
  if (a.has("--hf")) (void)as_hf_language_model(model);
  const TrainResult res = train_model(model, train, val, tc, cb);
  if (!res.message.empty()) std::cerr << "attnlab-cli train: " << res.message << "\n";
  save_model(a.has("--hf") ? as_hf_language_model(model) : model, a.get("--out"));
  if (!quiet && tc.keep_best && res.best_epoch > 0)
    std::printf("saved %s (the weights of epoch %d, the best held-out accuracy: %.4f)\n", a.get("--out").c_str(),
                res.best_epoch, res.epochs[static_cast<size_t>(res.best_epoch - 1)].val_acc);
  else if (!quiet)
    std::printf("saved %s\n", a.get("--out").c_str());
  return res.diverged ? 1 : 0;
}

// A language model's training text, refused before it is read when training on it would not fit
// in the memory available (check_text_fits).
std::string read_training_text(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec) check_text_fits(static_cast<double>(size), available_bytes(), path);
  return read_file_bytes(path);
}

// train --objective lm --init DIR --data FILE.txt: fine-tune a language model folder (a Hugging
// Face decoder or one trained here) on a text, saved in the folder's own kind.
int fine_tune_lm(const Args& a) {
  for (const char* f : {"--task", "--preset", "--arch", "--layers", "--heads", "--kv-heads", "--dim", "--ff",
                        "--max-len", "--task-seq", "--task-vocab", "--n", "--val-data", "--config", "--freeze-encoder"})
    if (a.has(f))
      throw Error(std::string(f) + " does not apply with --init (the model is the folder's, the data --data)");
  if (!a.has("--data")) throw Error("train --objective lm --init DIR needs --data FILE.txt (the text to train on)");
  if (!a.has("--out")) throw Error("train needs --out DIR (where the trained model folder goes)");
  Model model = load_model(a.get("--init"));
  if (!model.config.lm_head || model.config.num_classes > 0)
    throw Error(a.get("--init") + ": not a language model (no LM head); --objective lm fine-tunes decoders");
  const int seq = a.get_int("--seq", std::min(64, model.config.max_len));
  LmData data;
  try {
    data = split_lm_text(model, read_training_text(a.get("--data")), seq);  // the last tenth held out
  } catch (const Error& e) {
    throw Error(a.get("--data") + ": " + e.what());
  }
  const EncodedData &train = data.train, &val = data.val;
  TrainConfig tc;
  tc.batch = a.get_int("--batch", 8);
  const int steps = a.get_int("--steps", 0);
  const int per_epoch = static_cast<int>((train.size() + static_cast<size_t>(tc.batch) - 1) / std::max(1, tc.batch));
  tc.epochs = steps > 0 ? (steps + per_epoch - 1) / per_epoch : a.get_int("--epochs", 1);
  tc.max_steps = steps;
  tc.seed = static_cast<uint64_t>(a.get_int("--seed", 0));
  tc.keep_best = false;
  optimizer_from_flags(a, tc, 5e-5, 0.0);  // a pretrained model wants a small step
  model.source = a.get("--out");
  const bool quiet = a.has("--quiet");
  if (!quiet)
    std::printf("fine-tuning %s (%lld parameters) on %s: %zu train / %zu validation sequences of %d tokens\n",
                a.get("--init").c_str(), model.config.parameter_count(), a.get("--data").c_str(), train.size(),
                val.size(), seq);
  return run_lm(a, model, train, val, tc, 10);
}

// The shape flags of a new decoder, over a preset's (or the defaults').
LmShape shape_from_flags(const Args& a, LmShape shape, bool preset) {
  shape.arch = a.get("--arch", shape.arch);
  shape.layers = a.get_int("--layers", shape.layers);
  shape.heads = a.get_int("--heads", shape.heads);
  shape.kv_heads = a.get_int("--kv-heads", shape.kv_heads);
  shape.dim = a.get_int("--dim", shape.dim);
  shape.ff = a.get_int("--ff", preset ? shape.ff : 0);
  return shape;
}

// train --objective lm --data FILE.txt (no --init): a new decoder on a text, with a character or
// word vocabulary built from the text (build_vocab: by frequency, --vocab-size at most, each piece
// seen --min-count times; the rest read as [UNK]) or a byte-level BPE learned from it (--tokenizer
// bpe; the folder is a Hugging Face one); the last tenth of its sequences held out.
int text_lm(const Args& a) {
  for (const char* f :
       {"--task", "--preset", "--task-seq", "--task-vocab", "--task-p", "--task-train-frac", "--n", "--val-data",
        "--config", "--freeze-encoder", "--classes", "--pooling", "--positional", "--norm", "--activation"})
    if (a.has(f))
      throw Error(std::string(f) + " does not apply to a new language model on --data (the text is the data)");
  if (!a.has("--out")) throw Error("train needs --out DIR (where the trained model folder goes)");
  const std::string kind_name = a.get("--tokenizer", "char");
  TextLmOptions o;
  try {
    o.tokenizer = parse_text_tokenizer(kind_name);
  } catch (const Error& e) {
    throw Error(std::string("--tokenizer: ") + e.what());
  }
  o.seq = a.get_int("--seq", 64);
  o.vocab_size = a.get_int("--vocab-size", TextLmOptions::default_vocab_size(o.tokenizer));
  o.min_count = a.get_int("--min-count", TextLmOptions::default_min_count(o.tokenizer));
  if (o.tokenizer == TextTokenizer::Bpe && o.vocab_size < 257)  // said before the text is read
    throw Error("--vocab-size: a byte-level BPE holds <|endoftext|> and the 256 bytes: at least 257, got " +
                std::to_string(o.vocab_size));
  LmShape shape = shape_from_flags(a, LmShape{}, false);
  shape.max_len = a.get_int("--max-len", o.seq);
  const uint64_t seed = static_cast<uint64_t>(a.get_int("--seed", 0));
  const std::string text = read_training_text(a.get("--data"));
  TextLm made;
  try {
    made = new_text_language_model(text, o, shape, seed);
  } catch (const Error& e) {
    throw Error(a.get("--data") + ": " + e.what());
  }
  Model& model = made.model;
  const LmData& data = made.data;
  const int seq = o.seq;
  model.source = a.get("--out");
  TrainConfig tc;
  tc.batch = a.get_int("--batch", 32);
  const int steps = a.get_int("--steps", 0);
  if (steps < 0 || (steps == 0 && !a.has("--epochs")))
    throw Error("train --objective lm needs --steps N or --epochs N");
  const int per_epoch =
      static_cast<int>((data.train.size() + static_cast<size_t>(tc.batch) - 1) / std::max(1, tc.batch));
  tc.epochs = steps > 0 ? (steps + per_epoch - 1) / per_epoch : a.get_int("--epochs", 1);
  tc.max_steps = steps;
  tc.seed = seed;
  tc.keep_best = false;
  optimizer_from_flags(a, tc, 1e-3, 0.0);
  if (!a.has("--quiet"))
    std::printf(
        "training a %s-style language model (%d layers, %d heads, dim %d, %s) on %s: %zu train / %zu validation "
        "sequences of %d tokens, %s vocabulary of %d, %lld parameters\n",
        shape.arch.c_str(), shape.layers, shape.heads, shape.dim,
        shape.ff > 0 ? ("ff " + std::to_string(shape.ff)).c_str() : "attention-only", a.get("--data").c_str(),
        data.train.size(), data.val.size(), seq, kind_name.c_str(), model.vocab.size(), model.config.parameter_count());
  return run_lm(a, model, data.train, data.val, tc, 100);
}

int train_lm(const Args& a) {
  if (a.has("--init")) return fine_tune_lm(a);
  if (a.has("--data")) return text_lm(a);
  for (const char* f : {"--val-data", "--init", "--config", "--freeze-encoder", "--classes", "--pooling", "--tokenizer",
                        "--positional", "--norm", "--activation"})
    if (a.has(f))
      throw Error(std::string(f) + " does not apply to --objective lm on --task (--arch sets the new decoder's shape)");
  LmPreset p;  // no preset: the flags' defaults
  p.task.name.clear();
  p.sequences = 20000;
  if (a.has("--preset")) p = lm_preset(a.get("--preset"));
  if (!a.has("--task") && p.task.name.empty()) {
    std::string tasks;
    for (const std::string& t : lm_task_names()) tasks += (tasks.empty() ? "" : "|") + t;
    throw Error("train --objective lm needs --task " + tasks + " or --preset NAME");
  }
  if (!a.has("--out")) throw Error("train needs --out DIR (where the trained model folder goes)");
  const uint64_t seed = static_cast<uint64_t>(a.get_int("--seed", static_cast<int>(p.seed)));
  LmTask task = p.task;
  task.name = a.get("--task", task.name);
  const LmTaskKind& kind = lm_task_kind(task.name);  // Error naming the tasks for an unknown one
  task.seq = a.get_int("--task-seq", task.seq);
  task.vocab = a.get_int("--task-vocab", a.get_int("--vocab-size", task.vocab));
  task.p = a.get_int("--task-p", task.p);
  task.train_frac = a.get_double("--task-train-frac", task.train_frac);
  const bool modadd = kind.fixed_set;
  for (const char* f : {"--task-vocab", "--vocab-size"})
    if (!kind.uses_vocab && a.has(f))
      throw Error(std::string(f) + " does not apply to the " + task.name + " task (its tokens are its own)");
  if (!kind.uses_seq && a.has("--task-seq")) throw Error("--task-seq does not apply to the " + task.name + " task");
  for (const char* f : {"--task-p", "--task-train-frac"})
    if (!modadd && a.has(f)) throw Error(std::string(f) + " is for --task modadd");
  task.vocab = lm_task_vocab(task);  // Error naming the tasks for an unknown one
  LmShape shape = shape_from_flags(a, p.shape, a.has("--preset"));
  shape.vocab = task.vocab;
  const int length = lm_task_length(task);
  shape.max_len = a.get_int("--max-len", length);
  if (shape.max_len < length)
    throw Error("--max-len " + std::to_string(shape.max_len) + " is shorter than the task's sequences (" +
                std::to_string(length) + " tokens)");
  Model model = new_language_model(shape, seed);
  model.vocab = lm_task_vocabulary(task);
  model.source = a.get("--out");
  if (modadd && a.has("--n"))
    throw Error("--n does not apply to the " + task.name + " task (its sequences are every case once)");
  const int requested = a.get_int("--n", p.sequences);
  if (requested < 1) throw Error("--n must be positive");
  const LmData data = make_lm_data(task, requested, seed);  // drawn, or (modadd) the pairs split
  const EncodedData &train = data.train, &val = data.val;
  const int n = static_cast<int>(train.size());
  TrainConfig tc;
  tc.batch = a.get_int("--batch", modadd && !a.has("--preset") ? n : p.batch);  // a fixed set: the full batch
  const int steps = a.get_int("--steps", 0);
  if (steps < 0 || (steps == 0 && !a.has("--epochs") && p.epochs == 0))
    throw Error("train --objective lm needs --steps N or --epochs N");
  const int per_epoch = (n + tc.batch - 1) / std::max(1, tc.batch);
  tc.epochs = steps > 0 ? (steps + per_epoch - 1) / per_epoch : a.get_int("--epochs", p.epochs);
  tc.max_steps = steps;
  tc.seed = seed;
  tc.keep_best = lm_keeps_best(task);
  optimizer_from_flags(a, tc, p.lr, 0.0);
  if (!a.has("--warmup")) tc.optimizer.warmup_steps = p.warmup;
  if (!a.has("--weight-decay")) tc.optimizer.weight_decay = p.weight_decay;
  tc.optimizer.beta2 = p.beta2;
  tc.optimizer.cosine = tc.optimizer.cosine || p.cosine;
  const bool quiet = a.has("--quiet");
  if (!quiet)
    std::printf(
        "training a %s-style language model (%d layers, %d heads, dim %d, %s) on the %s task: %d sequences of "
        "%s%d, vocab %d, %lld parameters\n",
        shape.arch.c_str(), shape.layers, shape.heads, shape.dim,
        shape.ff > 0 ? ("ff " + std::to_string(shape.ff)).c_str() : "attention-only", task.name.c_str(), n,
        std::all_of(train.seqs.begin(), train.seqs.end(),
                    [&](const auto& s) { return s.size() == train.seqs[0].size(); })
            ? ""
            : "up to ",
        length, task.vocab, model.config.parameter_count());
  return run_lm(a, model, train, val, tc, 100);
}

}  // namespace

int cmd_train(const std::vector<std::string>& argv) {
  const Args a(argv,
               with(kModelValued, {"--data",
                                   "--val-data",
                                   "--val-split",
                                   "--out",
                                   "--config",
                                   "--epochs",
                                   "--batch",
                                   "--lr",
                                   "--weight-decay",
                                   "--dropout",
                                   "--clip",
                                   "--warmup",
                                   "--min-count",
                                   "--text-column",
                                   "--label-column",
                                   "--init",
                                   "--objective",
                                   "--task",
                                   "--task-seq",
                                   "--task-vocab",
                                   "--arch",
                                   "--kv-heads",
                                   "--steps",
                                   "--n",
                                   "--log-every",
                                   "--preset",
                                   "--seq",
                                   "--task-p",
                                   "--task-train-frac",
                                   "--eval-every"}),
               {"--cosine", "--quiet", "--json", "--freeze-encoder", "--checkpoint", "--hf"});
  const std::string objective = a.get("--objective", "classify");
  if (objective == "lm") return train_lm(a);
  if (objective != "classify") throw Error("--objective must be classify or lm, got \"" + objective + "\"");
  for (const char* f : {"--task", "--task-seq", "--task-vocab", "--task-p", "--task-train-frac", "--arch", "--kv-heads",
                        "--steps", "--n", "--preset", "--hf", "--eval-every"})
    if (a.has(f)) throw Error(std::string(f) + " is for --objective lm");
  if (!a.has("--data")) throw Error("train needs --data FILE.tsv");
  if (!a.has("--out")) throw Error("train needs --out DIR (where the trained model folder goes)");
  const uint64_t seed = static_cast<uint64_t>(a.get_int("--seed", 0));
  const Dataset data = load_dataset(a.get("--data"), dataset_options(a));
  std::vector<Example> train_rows, val_rows;
  if (a.has("--val-data")) {
    train_rows = data.rows;
    val_rows = load_dataset(a.get("--val-data"), dataset_options(a)).rows;
  } else {
    split_dataset(data.rows, a.get_double("--val-split", 0.1), seed, train_rows, val_rows);
  }
  Dataset train_set;
  train_set.rows = train_rows;
  const std::vector<std::string> labels = train_set.label_set();

  ModelConfig defaults;
  if (a.has("--config")) {
    // vocab_size and num_classes come from the data; everything else from the file.
    std::string text = read_file_bytes(a.get("--config"));
    auto j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw Error(a.get("--config") + ": not valid JSON");
    j["vocab_size"] = 1 << 20;
    j["num_classes"] = static_cast<int>(labels.size());
    j.erase("labels");
    defaults = parse_config_json(j.dump(), a.get("--config"));
  } else {
    defaults.embed_size = 64, defaults.num_heads = 8, defaults.num_layers = 2, defaults.ff_dim = 128,
    defaults.max_len = 64;
    defaults.positional = Positional::Learned;
    defaults.pooling = Pooling::MaskedMean;
    defaults.vocab_size = 1 << 20;
    defaults.num_classes = static_cast<int>(labels.size());
  }
  TrainingSetup setup;
  if (a.has("--init")) {
    // Fine-tuning: the folder's encoder (and tokenizer), a new classifier on its pooled output.
    for (const char* f : {"--config", "--layers", "--heads", "--dim", "--ff", "--max-len", "--tokenizer",
                          "--positional", "--pooling", "--norm", "--activation", "--vocab-size"})
      if (a.has(f)) throw Error(std::string(f) + " does not apply with --init (the architecture is the folder's)");
    const Model base = load_model(a.get("--init"));
    if (base.config.causal)  // before the data is read: the model is what is refused
      throw Error(a.get("--init") + ": " + (base.is_hf() ? base.hf.architecture : std::string("this model")) +
                  " is a causal language model; a classifier fine-tunes encoders (attnlab's own models, BERT, "
                  "DistilBERT). Fine-tune it on a text with train --objective lm --init DIR --data FILE.txt");
    try {
      setup = fine_tune_setup(base, train_rows, val_rows, seed);
    } catch (const Error& e) {
      throw Error(a.get("--data") + ": " + e.what());
    }
  } else {
    if (a.has("--freeze-encoder")) throw Error("--freeze-encoder needs --init DIR (an encoder to keep)");
    const ModelConfig form = config_from_flags(a, defaults);
    const int vocab_cap = a.has("--vocab-size") ? a.get_int("--vocab-size", 0) : 20000;
    try {
      setup = new_classifier(train_rows, val_rows, form, seed, vocab_cap, a.get_int("--min-count", 1));
    } catch (const Error& e) {
      throw Error(a.get("--data") + ": " + e.what());
    }
  }
  Model& model = setup.model;
  const ModelConfig& c = model.config;
  model.source = a.get("--out");
  const EncodedData& train = setup.train;
  const EncodedData& val = setup.val;
  TrainConfig tc;
  tc.epochs = a.get_int("--epochs", 10);
  tc.batch = a.get_int("--batch", 32);
  // Fine-tuning a whole pretrained encoder wants a small step (BERT's paper: 2e-5..5e-5).
  const double default_lr = a.has("--init") && !a.has("--freeze-encoder") ? 5e-5 : 1e-3;
  optimizer_from_flags(a, tc, default_lr, 0.1);
  tc.freeze_encoder = a.has("--freeze-encoder");
  tc.seed = seed;

  const bool quiet = a.has("--quiet");
  if (!quiet)
    std::printf(
        "training %s%s: %zu train / %zu validation rows, %d labels, vocab %d, %lld parameters%s\n",
        a.get("--data").c_str(),
        a.has("--init") ? (" from " + a.get("--init") + (tc.freeze_encoder ? " (encoder frozen)" : "")).c_str() : "",
        train.size(), val.size(), c.num_classes, c.vocab_size, c.parameter_count(),
        train.truncated ? (", " + std::to_string(train.truncated) + " truncated to max_len").c_str() : "");
  TrainCallbacks cb;
  cb.on_epoch = [&](const EpochReport& r) {
    std::printf("epoch %d/%d train_loss %.4f val_loss %.4f val_acc %.4f samples_per_s %.0f\n", r.epoch, tc.epochs,
                r.train_loss, r.val_loss, r.val_acc, r.samples_per_s);
    std::fflush(stdout);
  };
  // --hf: the folder as transformers saves GPT2LMHeadModel / LlamaForCausalLM; refused before the
  // run when the model has no such form
  if (a.has("--hf")) (void)as_hf_language_model(model);
  const TrainResult res = train_model(model, train, val, tc, cb);
  if (!res.message.empty()) std::cerr << "attnlab-cli train: " << res.message << "\n";
  save_model(a.has("--hf") ? as_hf_language_model(model) : model, a.get("--out"));
  if (!quiet) std::printf("saved %s (weights of epoch %d)\n", a.get("--out").c_str(), res.best_epoch);
  return res.diverged ? 1 : 0;
}

namespace {

// eval and predict read a classifier's labels: say what else the model can do when it has none.
void require_classifier(const Model& model) {
  if (model.config.num_classes > 0) return;
  throw Error(model.config.lm_head
                  ? "the model is a language model, not a classifier: forward --json lists its next tokens, analyze "
                    "--method logit-lens reads its layers"
                  : "the model has no classifier head (an encoder such as a sentence-embedding BERT): forward shows "
                    "its attention, analyze --method rollout or value-norm reads its layers");
}

}  // namespace

int cmd_eval(const std::vector<std::string>& argv, const std::string& argv0) {
  const Args a(argv, with(kModelValued, {"--data", "--text-column", "--label-column", "--batch"}),
               {"--json", "--random-init"});
  if (!a.has("--data")) throw Error("eval needs --data FILE.tsv");
  const Model model = resolve_model(a, argv0);
  require_classifier(model);
  const Dataset data = load_dataset(a.get("--data"), dataset_options(a));
  const EncodedData enc = encode_examples(model, data.rows);
  auto ops = make_ops(a.get("--backend", "cpu"));
  const EvalResult ev = evaluate(model, *ops, enc, a.get_int("--batch", 64));
  if (a.has("--json")) {
    json j = {{"accuracy", ev.accuracy}, {"loss", ev.loss}, {"count", ev.count}, {"confusion", ev.confusion}};
    json per = json::object();
    for (size_t k = 0; k < ev.class_accuracy.size(); ++k)
      per[model.label(static_cast<int>(k))] =
          std::isnan(ev.class_accuracy[k]) ? json(nullptr) : json(ev.class_accuracy[k]);
    j["class_accuracy"] = per;
    std::cout << j.dump(2) << "\n";
  } else {
    print_eval(model, ev);
  }
  return 0;
}

int cmd_predict(const std::vector<std::string>& argv, const std::string& argv0) {
  const Args a(argv, with(kModelValued, {"--text", "--pair", "--truncation", "--ids"}), {"--json", "--random-init"});
  const Model model = resolve_model(a, argv0);
  require_classifier(model);
  ForwardRequest req;
  const PreparedInput in = input_from_flags(a, model, "--text", "--ids");
  if (in.ids.empty()) throw Error("predict needs --text \"...\" or --ids 1,2,3");
  req.ids = in.ids, req.tokens = in.tokens, req.token_types = in.token_types;
  req.keep_attention.assign(static_cast<size_t>(model.config.num_layers), false);
  auto backend = make_backend(a.get("--backend", "cpu"));
  const ForwardResult r = run_forward(model, *backend, req);
  if (a.has("--json")) {
    json probs = json::object();
    for (size_t k = 0; k < r.class_probs.size(); ++k) probs[model.label(static_cast<int>(k))] = r.class_probs[k];
    std::vector<std::string> warnings = r.warnings;
    if (const std::string note = unknown_note(in, "--text"); !note.empty()) warnings.push_back(note);
    std::cout << json{{"label", model.label(r.predicted)},
                      {"probabilities", probs},
                      {"tokens", r.tokens},
                      {"warnings", warnings}}
                     .dump(2)
              << "\n";
  } else {
    std::printf("%s\n", model.label(r.predicted).c_str());
    for (size_t k = 0; k < r.class_probs.size(); ++k)
      std::printf("  %-12s %.4f\n", model.label(static_cast<int>(k)).c_str(), r.class_probs[k]);
  }
  return 0;
}

// lm-loss: a language model's next-token loss on one sequence, and its gradients (the training
// step's backward, no update) in the folder's own tensor names, for checking against PyTorch.
int cmd_lm_loss(const std::vector<std::string>& argv, const std::string& argv0) {
  const Args a(argv, with(kModelValued, {"--text", "--ids", "--grad-out"}), {"--json", "--random-init"});
  const Model model = resolve_model(a, argv0);
  if (!model.config.lm_head || model.config.num_classes > 0)
    throw Error("lm-loss reads a language model (an LM head); this model is " +
                std::string(model.config.num_classes > 0 ? "a classifier: eval --data FILE.tsv" : "an encoder"));
  const PreparedInput in = input_from_flags(a, model, "--text", "--ids");
  if (in.ids.size() < 2) throw Error("lm-loss needs at least 2 tokens (each position predicts the next)");
  auto ops = make_ops(a.get("--backend", "cpu"));
  ModelWeights grads = zeros_like(model.weights);
  const bool want_grads = a.has("--grad-out");
  const StepOutput s = train_step(model, *ops, make_batch(model, {in.ids}, {}), {}, want_grads ? &grads : nullptr);
  if (want_grads)
    save_safetensors(a.get("--grad-out"),
                     model.is_hf() ? hf_tensors(model, grads, true) : weights_to_tensors(model.config, grads));
  if (a.has("--json"))
    std::cout << json{{"loss", s.loss}, {"scored", s.scored}, {"correct", s.correct}, {"tokens", in.tokens}}.dump(2)
              << "\n";
  else
    std::printf("loss %.6f over %d positions (%d predicted right)\n", s.loss, s.scored, s.correct);
  return 0;
}

int cmd_make_data(const std::vector<std::string>& argv) {
  const Args a(argv, {"--task", "--out", "--n", "--seed"}, {});
  if (!a.has("--task") || !a.has("--out")) throw Error("make-data needs --task negation|first_last and --out FILE.tsv");
  const auto rows = make_task(a.get("--task"), a.get_int("--n", 4000), static_cast<uint64_t>(a.get_int("--seed", 1)));
  write_file_atomic(a.get("--out"), examples_to_tsv(rows));
  std::printf("wrote %zu rows to %s\n", rows.size(), a.get("--out").c_str());
  return 0;
}

}  // namespace attnlab::cli
