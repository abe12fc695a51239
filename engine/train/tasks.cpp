// Toy task generators.
#include "engine/train/tasks.h"

#include <random>

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

EncodedData make_lm_task(const LmTask& t, int n, uint64_t seed) {
  if (t.name != "induction") {
    std::string names;
    for (const std::string& k : lm_task_names()) names += (names.empty() ? "" : ", ") + k;
    throw Error("unknown language-model task \"" + t.name + "\" (expected " + names + ")");
  }
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
  return {"induction"};
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
    return std::vector<LmPreset>{induction};
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
