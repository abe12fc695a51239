// Training loop.
#include "engine/train/trainer.h"

#include <chrono>
#include <cmath>
#include <random>

#include "engine/model/hf_model.h"
#include "engine/text/bpe_trainer.h"
#include "engine/train/train_model.h"

namespace attnlab {

namespace {

// Rows [start, end) of data: sequences, labels (classifiers) and where each one's loss starts.
TrainBatch batch_of(const Model& model, const EncodedData& data, const std::vector<size_t>& rows) {
  std::vector<std::vector<int>> seqs;
  std::vector<int> labels, loss_from;
  for (size_t k : rows) {
    seqs.push_back(data.seqs[k]);
    if (!data.labels.empty()) labels.push_back(data.labels[k]);
    if (!data.loss_from.empty()) loss_from.push_back(data.loss_from[k]);
  }
  return make_batch(model, seqs, labels, loss_from);
}

std::vector<size_t> range_of(size_t start, size_t end) {
  std::vector<size_t> rows;
  for (size_t k = start; k < end; ++k) rows.push_back(k);
  return rows;
}

// A language model's validation: the mean next-token loss and accuracy over every scored position.
EvalResult evaluate_lm(const Model& model, Ops& ops, const EncodedData& data, int batch) {
  EvalResult r;
  double loss = 0;
  long long correct = 0, scored = 0;
  for (size_t start = 0; start < data.size(); start += static_cast<size_t>(batch)) {
    const size_t end = std::min(data.size(), start + static_cast<size_t>(batch));
    const StepOutput s = train_step(model, ops, batch_of(model, data, range_of(start, end)), {}, nullptr);
    loss += s.loss * s.scored;
    correct += s.correct;
    scored += s.scored;
  }
  r.count = data.size();
  if (scored > 0) {
    r.loss = loss / static_cast<double>(scored);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(scored);
  }
  return r;
}

}  // namespace

EvalResult evaluate(const Model& model, Ops& ops, const EncodedData& data, int batch) {
  if (model.config.num_classes == 0 && model.config.lm_head) return evaluate_lm(model, ops, data, batch);
  EvalResult r;
  const int C = model.config.num_classes;
  r.confusion.assign(static_cast<size_t>(C), std::vector<int>(static_cast<size_t>(C), 0));
  double loss = 0;
  int correct = 0;
  for (size_t start = 0; start < data.size(); start += static_cast<size_t>(batch)) {
    const size_t end = std::min(data.size(), start + static_cast<size_t>(batch));
    std::vector<std::vector<int>> seqs(data.seqs.begin() + static_cast<std::ptrdiff_t>(start),
                                       data.seqs.begin() + static_cast<std::ptrdiff_t>(end));
    std::vector<int> labels(data.labels.begin() + static_cast<std::ptrdiff_t>(start),
                            data.labels.begin() + static_cast<std::ptrdiff_t>(end));
    const StepOutput s = train_step(model, ops, make_batch(model, seqs, labels), {}, nullptr);
    loss += s.loss * static_cast<double>(end - start);
    correct += s.correct;
    for (size_t i = 0; i < labels.size(); ++i)
      ++r.confusion[static_cast<size_t>(labels[i])][static_cast<size_t>(s.predicted[i])];
  }
  r.count = data.size();
  if (r.count) {
    r.loss = loss / static_cast<double>(r.count);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(r.count);
  }
  for (int k = 0; k < C; ++k) {
    int total = 0;
    for (int p = 0; p < C; ++p) total += r.confusion[static_cast<size_t>(k)][static_cast<size_t>(p)];
    r.class_accuracy.push_back(
        total ? static_cast<double>(r.confusion[static_cast<size_t>(k)][static_cast<size_t>(k)]) / total : NAN);
  }
  return r;
}

void RunControl::stop() {
  {
    std::lock_guard<std::mutex> lock(m_);
    cancel = true;
  }
  cv_.notify_all();
}

void RunControl::set_paused(bool paused) {
  {
    std::lock_guard<std::mutex> lock(m_);
    paused_ = paused;
  }
  cv_.notify_all();
}

bool RunControl::wait_while_paused() {
  std::unique_lock<std::mutex> lock(m_);
  cv_.wait(lock, [this] { return !paused_ || cancel.load(); });
  return !cancel.load();
}

void RunControl::reset() {
  std::lock_guard<std::mutex> lock(m_);
  cancel = false;
  paused_ = false;
}

namespace {

// The classes of the training rows (sorted); Error when there is only one.
std::vector<std::string> classifier_labels(const std::vector<Example>& train_rows) {
  Dataset train_set;
  train_set.rows = train_rows;
  std::vector<std::string> labels = train_set.label_set();
  if (labels.size() < 2)
    throw Error("only one class (\"" + (labels.empty() ? std::string() : labels[0]) +
                "\") in the training rows; a classifier needs two or more");
  return labels;
}

}  // namespace

TrainingSetup new_classifier(const std::vector<Example>& train_rows, const std::vector<Example>& val_rows,
                             ModelConfig c, uint64_t seed, int vocab_cap, int min_count) {
  const std::vector<std::string> labels = classifier_labels(train_rows);
  TrainingSetup s;
  s.model.vocab = build_vocab(train_rows, c.tokenizer, c.lowercase, vocab_cap, min_count);
  c.vocab_size = s.model.vocab.size();
  c.num_classes = static_cast<int>(labels.size());
  c.labels = labels;
  c.validate();
  s.model.config = c;
  s.model.weights = random_weights(c, seed);
  s.train = encode_examples(s.model, train_rows);
  s.val = encode_examples(s.model, val_rows);
  return s;
}

Model new_language_model(const LmShape& shape, uint64_t seed) {
  if (shape.arch != "gpt2" && shape.arch != "llama")
    throw Error("unknown architecture \"" + shape.arch + "\" for a new language model (expected gpt2 or llama)");
  const bool gpt2 = shape.arch == "gpt2";
  ModelConfig c;
  c.vocab_size = shape.vocab, c.embed_size = shape.dim, c.num_heads = shape.heads, c.num_layers = shape.layers;
  c.ff_dim = shape.ff, c.max_len = shape.max_len, c.num_kv_heads = gpt2 ? 0 : shape.kv_heads;
  c.norm = NormPlacement::Pre;
  c.final_norm = true;
  c.causal = c.lm_head = true;
  c.pooling = Pooling::Mean;
  c.tokenizer = TokenizerKind::Word;
  if (gpt2) {
    c.positional = Positional::Learned;
    c.activation = Activation::GeluTanh;
    c.tied_lm_head = true;
  } else {
    c.positional = Positional::Rotary;
    c.norm_kind = NormKind::RmsNorm;
    c.layer_norm_eps = 1e-6f;
    c.activation = Activation::Silu;
    c.gated_ff = shape.ff > 0;
    c.qkv_bias = c.out_bias = c.ff_bias = false;
  }
  c.validate();
  Model m;
  m.config = c;
  m.vocab = default_vocab(c);
  ModelWeights w = empty_weights(c);
  std::mt19937_64 rng(seed);
  const float residual = 0.02f / std::sqrt(2.0f * static_cast<float>(c.num_layers));
  for (const WeightEntry& e : weight_entries(c)) {
    Tensor& t = e.in(w);
    t = Tensor(e.shape, e.spec->init == Init::Ones ? 1.0f : 0.0f);
    if (e.shape.size() != 2) continue;  // biases 0, gains 1
    const auto lm = e.spec->layer_member;
    std::normal_distribution<float> normal(
        0.0f, gpt2 && (lm == &LayerWeights::wo || lm == &LayerWeights::w2) ? residual : 0.02f);
    for (float& v : t.data) v = normal(rng);
  }
  w.version = next_weights_version();
  m.weights = std::move(w);
  return m;
}

TextTokenizer parse_text_tokenizer(const std::string& name) {
  if (name == "char") return TextTokenizer::Char;
  if (name == "word") return TextTokenizer::Word;
  if (name == "bpe") return TextTokenizer::Bpe;
  throw Error("a new language model reads its text by char, word or bpe (a byte-level BPE learned from it), got \"" +
              name + "\"");
}
const char* to_string(TextTokenizer t) {
  return t == TextTokenizer::Char ? "char" : t == TextTokenizer::Word ? "word" : "bpe";
}

TextLm new_text_language_model(const std::string& text, const TextLmOptions& o, LmShape shape, uint64_t seed) {
  if (o.seq < 2) throw Error("a sequence needs at least 2 tokens (one predicted from the other)");
  if (shape.max_len < o.seq)
    throw Error("the model's " + std::to_string(shape.max_len) + " positions cannot hold sequences of " +
                std::to_string(o.seq) + " tokens");
  TextLm out;
  if (o.tokenizer == TextTokenizer::Bpe) {
    BpeTrainOptions b;
    b.vocab_size = o.vocab_size, b.min_frequency = o.min_count;
    const BpeVocabulary learned = train_byte_level_bpe(text, b);
    const std::string json = byte_level_bpe_json(learned);
    shape.vocab = static_cast<int>(learned.tokens.size());
    Model m = new_language_model(shape, seed);
    m.tokenizer = HfTokenizer::from_tokenizer_json(json, "the learned BPE");
    m.vocab = m.tokenizer->vocab();
    m.hf.tokenizer_files["tokenizer.json"] = json;
    out.model = as_hf_language_model(m);
  } else {
    const bool chars = o.tokenizer == TextTokenizer::Char;
    const TokenizerKind kind = chars ? TokenizerKind::Char : TokenizerKind::Word;
    const bool lowercase = !chars;  // characters keep their case; words are lower-cased
    Vocab vocab = build_vocab({Example{text, "", 1}}, kind, lowercase, o.vocab_size, o.min_count);
    if (vocab.size() <= 4)
      throw Error("the text has " + std::to_string(vocab.size() - 3) + " distinct " + (chars ? "character" : "word") +
                  (vocab.size() == 4 ? "" : "s") + "; a language model needs at least 2");
    shape.vocab = vocab.size();
    out.model = new_language_model(shape, seed);
    out.model.config.tokenizer = kind, out.model.config.lowercase = lowercase;
    out.model.vocab = std::move(vocab);
  }
  out.data = split_lm_text(out.model, text, o.seq);
  if (out.data.val.size() == 0)
    throw Error("the text makes one sequence of " + std::to_string(o.seq) +
                " tokens; it needs two (one held out): a longer text or shorter sequences");
  return out;
}

std::vector<bool> encoder_mask(const ModelConfig& c) {
  std::vector<bool> mask;
  for (const WeightEntry& e : weight_entries(c)) {
    const auto mm = e.spec->model_member;
    mask.push_back(!(mm == &ModelWeights::pooler_w || mm == &ModelWeights::pooler_b || mm == &ModelWeights::fc_w ||
                     mm == &ModelWeights::fc_b));
  }
  return mask;
}

TrainingSetup fine_tune_setup(const Model& base, const std::vector<Example>& train_rows,
                              const std::vector<Example>& val_rows, uint64_t seed) {
  if (base.config.causal)
    throw Error(base.source + ": fine-tuning trains encoders (attnlab's own models, BERT, DistilBERT); " +
                (base.is_hf() ? base.hf.architecture : std::string("this model")) +
                " is a causal language model: it fine-tunes on a text (attnlab-cli train --objective lm --init DIR "
                "--data FILE.txt), not as a classifier");
  const std::vector<std::string> labels = classifier_labels(train_rows);
  TrainingSetup s;
  s.model = base;
  ModelConfig& c = s.model.config;
  const bool had_pooler = c.pooler;
  c.num_classes = static_cast<int>(labels.size());
  c.labels = labels;
  if (base.is_hf()) {
    c.pooling = Pooling::Cls;  // BertForSequenceClassification / DistilBert...: the [CLS] position
    c.pooler = true;           // BERT's pooler (kept when the base has one), DistilBERT's pre_classifier
    s.model.hf.architecture = hf_class_name(base.hf.model_type, true);  // *ForSequenceClassification
  }
  c.validate();
  ModelWeights w = empty_weights(c);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (const WeightEntry& e : weight_entries(c)) {
    const auto mm = e.spec->model_member;
    const bool pooler = mm == &ModelWeights::pooler_w || mm == &ModelWeights::pooler_b;
    const bool fc = mm == &ModelWeights::fc_w || mm == &ModelWeights::fc_b;
    Tensor& t = e.in(w);
    if (fc || (pooler && !had_pooler)) {  // new: normal(0, 0.02) weights, zero biases
      t = Tensor(e.shape);
      if (e.shape.size() == 2)
        for (float& v : t.data) v = normal(rng);
    } else {
      t = e.in(base.weights);
    }
  }
  for (size_t l = 0; l < w.layers.size(); ++l) w.layers[l].half = base.weights.layers[l].half;  // widened by training
  w.version = next_weights_version();
  s.model.weights = std::move(w);
  s.train = encode_examples(s.model, train_rows);
  s.val = encode_examples(s.model, val_rows);
  return s;
}

TrainResult train_model(Model& model, const EncodedData& train, const EncodedData& val, const TrainConfig& cfg,
                        const TrainCallbacks& cb) {
  if (train.size() == 0) throw Error("no training examples");
  if (cfg.batch <= 0 || cfg.epochs <= 0) throw Error("epochs and batch size must be positive");
  auto ops = make_ops(cfg.backend);
  TrainResult result;
  const int steps_per_epoch =
      static_cast<int>((train.size() + static_cast<size_t>(cfg.batch) - 1) / static_cast<size_t>(cfg.batch));
  OptimizerConfig oc = cfg.optimizer;
  oc.total_steps = steps_per_epoch * cfg.epochs;
  if (cfg.max_steps > 0) oc.total_steps = std::min(oc.total_steps, cfg.max_steps);
  widen_all(model.weights);  // training updates float32 tensors: a BF16 folder's 16-bit matrices widened once
  Adam adam(model.weights, oc);
  if (cfg.freeze_encoder) adam.set_frozen(encoder_mask(model.config));
  ModelWeights grads = zeros_like(model.weights);
  ModelWeights best = model.weights;
  double best_acc = -1, best_loss = INFINITY;
  std::mt19937_64 rng(cfg.seed);
  std::vector<size_t> order(train.size());
  int step = 0;

  for (int epoch = 1; epoch <= cfg.epochs; ++epoch) {
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    const auto t0 = std::chrono::steady_clock::now();
    double loss_sum = 0;
    size_t seen = 0;
    long long correct = 0, scored = 0;
    for (int b = 0; b < steps_per_epoch; ++b) {
      if (cb.control && !cb.control->wait_while_paused()) {
        result.cancelled = true;
        result.message = "training stopped by the user after " + std::to_string(step) + " steps";
        break;
      }
      if (step >= oc.total_steps) break;  // max_steps reached
      const size_t start = static_cast<size_t>(b) * static_cast<size_t>(cfg.batch);
      const size_t end = std::min(train.size(), start + static_cast<size_t>(cfg.batch));
      std::vector<size_t> rows;
      for (size_t k = start; k < end; ++k) rows.push_back(order[k]);
      for (Tensor* g : parameters(grads)) std::fill(g->data.begin(), g->data.end(), 0.0f);
      StepOptions so;
      so.dropout = cfg.dropout;
      so.dropout_seed = cfg.seed * 1000003ULL + static_cast<uint64_t>(step);
      so.head_only = cfg.freeze_encoder;
      so.checkpoint = cfg.checkpoint;
      const StepOutput s = train_step(model, *ops, batch_of(model, train, rows), so, &grads);
      const double gn = grad_norm(grads);
      if (!std::isfinite(s.loss) || !std::isfinite(gn)) {
        // The update is not applied: the weights are still the last good ones.
        result.diverged = true;
        result.message = "training diverged at step " + std::to_string(step + 1) + " (loss " + std::to_string(s.loss) +
                         "); stopped and kept the last good weights. Try a lower learning rate (now " +
                         std::to_string(cfg.optimizer.lr) + ") or stronger gradient clipping.";
        break;
      }
      adam.step(model.weights, grads);
      ++step;
      loss_sum += s.loss * static_cast<double>(end - start);
      correct += s.correct, scored += s.scored;
      seen += end - start;
      if (cb.on_step) {
        TrainProgress p;
        p.epoch = epoch, p.epochs = cfg.epochs, p.step = step, p.total_steps = oc.total_steps, p.loss = s.loss;
        p.samples_per_s = static_cast<double>(seen) /
                          std::max(1e-9, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        p.lr = adam.current_lr();
        cb.on_step(p);
      }
    }
    if (seen == 0) break;
    EpochReport rep;
    rep.epoch = epoch;
    rep.train_loss = loss_sum / static_cast<double>(seen);
    rep.train_acc = scored > 0 ? static_cast<double>(correct) / static_cast<double>(scored) : NAN;
    rep.samples_per_s = static_cast<double>(seen) /
                        std::max(1e-9, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const bool last = epoch == cfg.epochs || step >= oc.total_steps || result.cancelled || result.diverged;
    const bool evaluated = val.size() > 0 && (last || epoch % std::max(1, cfg.eval_every) == 0);
    if (evaluated) {
      const EvalResult ev = evaluate(model, *ops, val);
      rep.val_loss = ev.loss;
      rep.val_acc = ev.accuracy;
    } else {
      rep.val_loss = NAN;
      rep.val_acc = NAN;
    }
    result.epochs.push_back(rep);
    if (cb.on_epoch) cb.on_epoch(rep);
    // Best = highest validation accuracy, ties broken by lower validation loss (training loss
    // when there is no validation data).
    const double acc = std::isnan(rep.val_acc) ? 0.0 : rep.val_acc;
    const double loss = std::isnan(rep.val_loss) ? rep.train_loss : rep.val_loss;
    if ((evaluated || val.size() == 0) && (acc > best_acc || (acc == best_acc && loss < best_loss))) {
      best_acc = acc;
      best_loss = loss;
      best = model.weights;
      result.best_epoch = epoch;
    }
    if (result.cancelled || result.diverged || step >= oc.total_steps) break;
  }
  if (cfg.keep_best && result.best_epoch > 0) model.weights = best;
  return result;
}

}  // namespace attnlab
