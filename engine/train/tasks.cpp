// Toy task generators.
#include "engine/train/tasks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <utility>

namespace attnlab {

namespace {
template <class T>
const T& pick(const std::vector<T>& v, std::mt19937_64& rng) {
  return v[static_cast<size_t>(rng() % v.size())];
}
}  // namespace

std::vector<Example> make_negation_task(int n, uint64_t seed) {
  static const std::vector<std::string> subjects = {"the film", "the movie", "this book", "the food",  "the service",
                                                    "my day",   "the show",  "the plot",  "the music", "the hotel",
                                                    "the game", "our trip",  "the class", "the room",  "the story"};
  static const std::vector<std::string> verbs = {"was", "is", "seemed", "felt", "looked"};
  static const std::vector<std::string> intensifiers = {"", "", "very", "really", "quite", "so", "truly", "rather"};
  static const std::vector<std::string> positive = {"good",      "great",    "fine", "nice",   "excellent",
                                                    "wonderful", "pleasant", "fun",  "lovely", "superb"};
  static const std::vector<std::string> negative = {"bad",  "awful",    "terrible", "boring", "poor",
                                                    "dull", "horrible", "sad",      "weak",   "nasty"};
  static const std::vector<std::string> prefixes = {"",         "",        "",           "i think",
                                                    "honestly", "overall", "to be fair", "sadly"};
  static const std::vector<std::string> suffixes = {"", "", "", "at all", "today", "to me", "in the end", "this time"};
  std::mt19937_64 rng(seed);
  std::vector<Example> out;
  for (int i = 0; i < n; ++i) {
    const bool pos = rng() % 2 == 0;
    const bool negated = rng() % 2 == 0;
    std::string s;
    auto add = [&](const std::string& w) {
      if (!w.empty()) s += (s.empty() ? "" : " ") + w;
    };
    add(pick(prefixes, rng));
    add(pick(subjects, rng));
    add(pick(verbs, rng));
    if (negated) add("not");
    add(pick(intensifiers, rng));
    add(pos ? pick(positive, rng) : pick(negative, rng));
    add(pick(suffixes, rng));
    out.push_back({s, (pos != negated) ? "positive" : "negative", i + 2});
  }
  return out;
}

std::vector<Example> make_first_last_task(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Example> out;
  for (int i = 0; i < n; ++i) {
    const int len = 4 + static_cast<int>(rng() % 9);
    std::string s;
    for (int k = 0; k < len; ++k) s += static_cast<char>('a' + rng() % 8);
    const bool same = rng() % 2 == 0;
    if (same)
      s.back() = s.front();
    else
      while (s.back() == s.front()) s.back() = static_cast<char>('a' + rng() % 8);
    out.push_back({s, same ? "same" : "different", i + 2});
  }
  return out;
}

std::vector<Example> make_task(const std::string& name, int n, uint64_t seed) {
  if (n <= 0) throw Error("the number of examples must be positive");
  if (name == "negation") return make_negation_task(n, seed);
  if (name == "first_last") return make_first_last_task(n, seed);
  throw Error("unknown task \"" + name + "\" (expected negation or first_last)");
}

namespace {
void check_task_name(const LmTask& t) {
  std::string names;
  for (const std::string& k : lm_task_names()) {
    if (k == t.name) return;
    names += (names.empty() ? "" : ", ") + k;
  }
  throw Error("unknown language-model task \"" + t.name + "\" (expected " + names + ")");
}

// Every "a b = c" once, shuffled with the seed; the first train_frac to train on.
LmData make_modadd(const LmTask& t, uint64_t seed) {
  if (t.p < 2 || t.p > 1000) throw Error("the modadd task's modulus must be 2 to 1000, got " + std::to_string(t.p));
  if (!(t.train_frac > 0 && t.train_frac < 1)) {
    char got[32];
    std::snprintf(got, sizeof got, "%g", t.train_frac);
    throw Error(std::string("the modadd task's training share must be between 0 and 1 (both left out), got ") + got);
  }
  std::vector<std::pair<int, int>> pairs;
  for (int a = 0; a < t.p; ++a)
    for (int b = 0; b < t.p; ++b) pairs.emplace_back(a, b);
  std::mt19937_64 rng(seed);
  std::shuffle(pairs.begin(), pairs.end(), rng);
  const size_t all = pairs.size();
  const size_t n_train =
      std::clamp<size_t>(static_cast<size_t>(std::llround(t.train_frac * static_cast<double>(all))), 1, all - 1);
  LmData d;
  for (size_t k = 0; k < all; ++k) {
    const auto [a, b] = pairs[k];
    EncodedData& side = k < n_train ? d.train : d.val;
    side.seqs.push_back({t.first_id + a, t.first_id + b, t.first_id + t.p, t.first_id + (a + b) % t.p});
    side.loss_from.push_back(2);  // "=" predicts c; a and b are the prompt
  }
  return d;
}
}  // namespace

int lm_task_vocab(const LmTask& t) {
  check_task_name(t);
  return t.name == "modadd" ? t.first_id + t.p + 1 : t.vocab;
}

int lm_task_length(const LmTask& t) {
  check_task_name(t);
  return t.name == "modadd" ? 4 : 2 * t.seq;
}

Vocab lm_task_vocabulary(const LmTask& t) {
  ModelConfig c;  // new_language_model's vocabulary: [PAD], [UNK], [CLS], w0, w1, ...
  c.vocab_size = lm_task_vocab(t), c.tokenizer = TokenizerKind::Word;
  std::vector<std::string> tokens = default_vocab(c).tokens();
  if (t.name == "modadd")
    for (int k = 0; k <= t.p; ++k)
      tokens[static_cast<size_t>(t.first_id + k)] = k < t.p ? std::to_string(k) : std::string("=");
  return Vocab(std::move(tokens));
}

LmData make_lm_data(const LmTask& t, int n, uint64_t seed) {
  check_task_name(t);
  if (t.name == "modadd") return make_modadd(t, seed);
  if (n < 1) throw Error("the number of sequences must be positive, got " + std::to_string(n));
  return {make_lm_task(t, n, 2 * seed + 1), make_lm_task(t, std::clamp(n / 10, 1, 256), 2 * seed + 2)};
}

EncodedData make_lm_task(const LmTask& t, int n, uint64_t seed) {
  check_task_name(t);
  if (t.name == "modadd")
    throw Error("the modadd task's sequences are every pair once: they are split, not drawn (make_lm_data)");
  if (t.seq < 2) throw Error("the induction task needs a sequence of at least 2 tokens, got " + std::to_string(t.seq));
  if (t.vocab - t.first_id < 2)
    throw Error("the induction task needs at least 2 tokens to draw from (vocabulary " + std::to_string(t.vocab) + ")");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> draw(t.first_id, t.vocab - 1);
  // The copies' length varies (from seq / 2 to seq), after random filler that keeps every sequence
  // 2 seq long: with one length, a head could find the earlier copy by position alone (attend
  // back seq - 1) and no induction head would be needed.
  std::uniform_int_distribution<int> length(std::max(2, t.seq / 2), t.seq);
  EncodedData d;
  for (int i = 0; i < n; ++i) {
    const int L = length(rng), filler = 2 * (t.seq - L);
    std::vector<int> s(static_cast<size_t>(2 * t.seq));
    for (int k = 0; k < filler; ++k) s[static_cast<size_t>(k)] = draw(rng);
    for (int k = 0; k < L; ++k) s[static_cast<size_t>(filler + k)] = s[static_cast<size_t>(filler + L + k)] = draw(rng);
    d.seqs.push_back(std::move(s));
    d.loss_from.push_back(filler + L);  // the second copy's first token predicts its second, and so on
  }
  return d;
}

std::vector<std::string> lm_task_names() {
  return {"induction", "modadd"};
}

std::string examples_to_tsv(const std::vector<Example>& rows) {
  std::string out = "text\tlabel\n";
  for (const auto& r : rows) out += r.text + "\t" + r.label + "\n";
  return out;
}

const std::vector<LmPreset>& lm_presets() {
  static const std::vector<LmPreset> rows = [] {
    LmPreset induction;
    induction.name = "induction";
    induction.label = "Induction heads (generated; a 2-layer attention-only language model)";
    induction.task.name = "induction", induction.task.seq = 10, induction.task.vocab = 64;
    induction.shape.arch = "llama", induction.shape.layers = 2, induction.shape.heads = 1, induction.shape.dim = 32;
    induction.shape.ff = 0, induction.shape.max_len = 20, induction.shape.vocab = 64;
    induction.sequences = 9600, induction.epochs = 10, induction.batch = 32;  // 300 steps an epoch
    induction.lr = 3e-3f, induction.warmup = 100, induction.cosine = true, induction.seed = 4;
    induction.what =
        "Sequences of 20 tokens whose last part repeats an earlier part (5 to 10 random tokens, twice); only the "
        "repeat is scored. Watch the loss sit near log 61 = 4.1, then fall within a few hundred steps (the phase "
        "change), as layer 1's head starts to attend from each token to the one after its earlier occurrence: its "
        "induction score crosses 0.5, fed by a previous-token head in layer 0 (Olsson et al. 2022).";
    LmPreset grok;
    grok.name = "grokking";
    grok.label = "Grokking (generated; sums mod 59, a 1-layer transformer)";
    grok.task.name = "modadd", grok.task.p = 59, grok.task.train_frac = 0.3;
    grok.shape.arch = "llama", grok.shape.layers = 1, grok.shape.heads = 4, grok.shape.dim = 64, grok.shape.ff = 256;
    grok.shape.max_len = 4, grok.shape.vocab = 3 + 59 + 1;
    grok.sequences = 1044, grok.batch = 1044, grok.epochs = 1500;  // the full batch (30% of 59^2): a step an epoch
    // AdamW with decay 1 and beta2 0.98 as Nanda et al.; lr 3e-3 (at 1e-3 the jump came after ~3,000 steps)
    grok.lr = 3e-3f, grok.weight_decay = 1.0f, grok.beta2 = 0.98f, grok.warmup = 10, grok.seed = 0;
    grok.what =
        "Every sum a + b mod 59 written \"a b = c\", 30% of them trained on (all at once, each step) and the rest "
        "held out. Watch the training pairs' accuracy reach 1 within about 100 steps while the held-out pairs stay "
        "near 0.3 (memorised, not understood); then, some 600 steps later, the held-out accuracy jumps to 1: "
        "the model has found the general algorithm (grokking, Power et al. 2022). Weight decay drives it (Nanda et "
        "al. 2023): set it to 0 and the jump does not come. Afterwards the loss spikes now and then (Adam's "
        "\"slingshot\"); the run keeps the weights of its best held-out step. The steps are on a log scale.";
    return std::vector<LmPreset>{induction, grok};
  }();
  return rows;
}

const LmPreset& lm_preset(const std::string& name) {
  std::string names;
  for (const LmPreset& p : lm_presets()) {
    if (name == p.name) return p;
    names += (names.empty() ? "" : ", ") + std::string(p.name);
  }
  throw Error("unknown language-model preset \"" + name + "\" (expected " + names + ")");
}

const std::vector<ShippedDataset>& shipped_datasets() {
  static const std::vector<ShippedDataset> rows = {
      {"negation.tsv", "negation sentiment (word level)", "word", 32, "the film was not very good"},
      {"first-names.tsv", "first names: female / male (character level)", "char", 16, "christina"},
      {"first-last.tsv", "first letter = last letter? (character level)", "char", 16, "abcdefa"},
  };
  return rows;
}

}  // namespace attnlab
