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

const std::vector<ShippedDataset>& shipped_datasets() {
  static const std::vector<ShippedDataset> rows = {
      {"negation.tsv", "negation sentiment (word level)", "word", 32, "the film was not very good"},
      {"first-names.tsv", "first names: female / male (character level)", "char", 16, "christina"},
      {"first-last.tsv", "first letter = last letter? (character level)", "char", 16, "abcdefa"},
  };
  return rows;
}

}  // namespace attnlab
