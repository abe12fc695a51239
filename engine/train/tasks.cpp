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

std::string format_share(double x) {
  char got[32];
  std::snprintf(got, sizeof got, "%g", x);
  return got;
}

// Every "a b = c" once, shuffled with the seed; the first train_frac to train on.
LmData make_modadd(const LmTask& t, uint64_t seed) {
  if (t.p < 2 || t.p > 1000) throw Error("the modadd task's modulus must be 2 to 1000, got " + std::to_string(t.p));
  if (!(t.train_frac > 0 && t.train_frac < 1))
    throw Error("the modadd task's training share must be between 0 and 1 (both left out), got " +
                format_share(t.train_frac));
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

void check_drawn(const LmTask& t, int min_seq, int tokens_needed) {
  if (t.seq < min_seq)
    throw Error("the " + t.name + " task needs a sequence of at least " + std::to_string(min_seq) + " tokens, got " +
                std::to_string(t.seq));
  if (t.seq > 4096)
    throw Error("the " + t.name + " task's sequences are at most 4,096 tokens, got " + std::to_string(t.seq));
  if (t.vocab - t.first_id < tokens_needed)
    throw Error("the " + t.name + " task needs at least " + std::to_string(tokens_needed) +
                " tokens to draw from (vocabulary " + std::to_string(t.vocab) + ")");
}

EncodedData make_induction(const LmTask& t, int n, uint64_t seed) {
  check_drawn(t, 2, 2);
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

// copy and reverse: L tokens, "|" (id vocab - 1), the L again, forwards or backwards. The length
// varies (seq / 2 to seq) so that no head finds its source by a fixed offset: it has to find "|".
EncodedData make_copy_or_reverse(const LmTask& t, int n, uint64_t seed, bool reverse) {
  check_drawn(t, 2, 3);  // "|" and at least two tokens to draw
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> draw(t.first_id, t.vocab - 2);
  std::uniform_int_distribution<int> length(std::max(2, t.seq / 2), t.seq);
  EncodedData d;
  for (int i = 0; i < n; ++i) {
    const int L = length(rng);
    std::vector<int> s(static_cast<size_t>(2 * L + 1));
    for (int k = 0; k < L; ++k) s[static_cast<size_t>(k)] = draw(rng);
    s[static_cast<size_t>(L)] = t.vocab - 1;
    for (int k = 0; k < L; ++k) s[static_cast<size_t>(L + 1 + k)] = s[static_cast<size_t>(reverse ? L - 1 - k : k)];
    d.seqs.push_back(std::move(s));
    d.loss_from.push_back(L);  // "|" predicts the output's first token, and so on
  }
  return d;
}
EncodedData make_copy(const LmTask& t, int n, uint64_t seed) {
  return make_copy_or_reverse(t, n, seed, false);
}
EncodedData make_reverse(const LmTask& t, int n, uint64_t seed) {
  return make_copy_or_reverse(t, n, seed, true);
}

bool balanced(const std::vector<int>& s, int open) {
  int depth = 0;
  for (int id : s)
    if ((depth += id == open ? 1 : -1) < 0) return false;
  return depth == 0;
}

// parens: 2 m parentheses (m from 1 to seq / 2), "=", "yes" or "no". Balanced strings are drawn
// by a walk that opens or closes with equal odds where both are allowed.
EncodedData make_parens(const LmTask& t, int n, uint64_t seed) {
  check_drawn(t, 2, 0);
  const int open = t.first_id, close = t.first_id + 1, eq = t.first_id + 2, yes = t.first_id + 3, no = t.first_id + 4;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> pairs(1, t.seq / 2);
  auto coin = [&] { return rng() % 2 == 0; };
  auto walk = [&](int m) {
    std::vector<int> s;
    for (int opened = 0, depth = 0; static_cast<int>(s.size()) < 2 * m;) {
      const bool opens = opened < m && (depth == 0 || coin());
      s.push_back(opens ? open : close);
      opened += opens, depth += opens ? 1 : -1;
    }
    return s;
  };
  EncodedData d;
  for (int i = 0; i < n; ++i) {
    const int m = pairs(rng);
    std::vector<int> s = walk(m);
    const bool is_balanced = coin();
    if (!is_balanced) {
      if (coin()) {  // as many of each in a wrong order: shuffled until a prefix closes too many
        do std::shuffle(s.begin(), s.end(), rng);
        while (balanced(s, open));
      } else {  // one flipped: the counts differ by two
        int& k = s[static_cast<size_t>(rng() % s.size())];
        k = k == open ? close : open;
      }
    }
    const int answer = balanced(s, open) ? yes : no;
    s.push_back(eq);
    s.push_back(answer);
    d.loss_from.push_back(2 * m);  // "=" predicts the answer; the string is the prompt
    d.seqs.push_back(std::move(s));
  }
  return d;
}

struct TaskRow {
  LmTaskKind kind;
  int (*vocab)(const LmTask&);
  int (*length)(const LmTask&);
  EncodedData (*draw)(const LmTask&, int, uint64_t);  // drawn tasks
  LmData (*split)(const LmTask&, uint64_t);           // fixed sets
  std::vector<const char*> tokens;  // the task's own tokens' names, from first_id (or the last id: "|")
};

int vocab_given(const LmTask& t) {
  return t.vocab;
}
int parens_vocab(const LmTask& t) {
  return t.first_id + 5;
}
int modadd_vocab(const LmTask& t) {
  return t.first_id + t.p + 1;
}

const std::vector<TaskRow>& task_rows() {
  static const std::vector<TaskRow> rows = [] {
    auto copy_length = [](const LmTask& t) { return 2 * t.seq + 1; };
    std::vector<TaskRow> r(5);
    r[0].kind = {.name = "induction",
                 .summary = "L random tokens, then the same L again; the repeat is scored",
                 .uses_vocab = true,
                 .uses_seq = true,
                 .probe_repeats = true};
    r[0].vocab = vocab_given, r[0].length = [](const LmTask& t) { return 2 * t.seq; }, r[0].draw = make_induction;
    r[1].kind = {.name = "copy",
                 .summary = "L random tokens, \"|\", the same L; the copy is scored",
                 .uses_vocab = true,
                 .uses_seq = true};
    r[1].vocab = vocab_given, r[1].length = copy_length, r[1].draw = make_copy, r[1].tokens = {"|"};
    r[2].kind = {.name = "reverse",
                 .summary = "L random tokens, \"|\", the L backwards; the reversal is scored",
                 .uses_vocab = true,
                 .uses_seq = true};
    r[2].vocab = vocab_given, r[2].length = copy_length, r[2].draw = make_reverse, r[2].tokens = {"|"};
    r[3].kind = {.name = "parens",
                 .summary = "parentheses, \"=\", then yes if they are balanced or no; the answer is scored",
                 .uses_seq = true};
    r[3].vocab = parens_vocab, r[3].length = [](const LmTask& t) { return t.seq / 2 * 2 + 2; };
    r[3].draw = make_parens, r[3].tokens = {"(", ")", "=", "yes", "no"};
    r[4].kind = {.name = "modadd",
                 .summary = "\"a b = c\" for every a, b below p, c = a + b mod p; a share trained on, c scored",
                 .fixed_set = true,
                 .keeps_best = true,
                 .accuracy_curves = true};
    r[4].vocab = modadd_vocab, r[4].length = [](const LmTask&) { return 4; }, r[4].split = make_modadd;
    return r;
  }();
  return rows;
}

const TaskRow& task_row(const std::string& name) {
  std::string names;
  for (const TaskRow& r : task_rows()) {
    if (name == r.kind.name) return r;
    names += (names.empty() ? "" : ", ") + std::string(r.kind.name);
  }
  throw Error("unknown language-model task \"" + name + "\" (expected " + names + ")");
}

}  // namespace

const std::vector<LmTaskKind>& lm_task_kinds() {
  static const std::vector<LmTaskKind> kinds = [] {
    std::vector<LmTaskKind> k;
    for (const TaskRow& r : task_rows()) k.push_back(r.kind);
    return k;
  }();
  return kinds;
}

const LmTaskKind& lm_task_kind(const std::string& name) {
  return task_row(name).kind;
}

int lm_task_vocab(const LmTask& t) {
  return task_row(t.name).vocab(t);
}

int lm_task_length(const LmTask& t) {
  return task_row(t.name).length(t);
}

Vocab lm_task_vocabulary(const LmTask& t) {
  const TaskRow& row = task_row(t.name);
  ModelConfig c;  // new_language_model's vocabulary: [PAD], [UNK], [CLS], w0, w1, ...
  c.vocab_size = row.vocab(t), c.tokenizer = TokenizerKind::Word;
  std::vector<std::string> tokens = default_vocab(c).tokens();
  if (t.name == "modadd")
    for (int k = 0; k <= t.p; ++k)
      tokens[static_cast<size_t>(t.first_id + k)] = k < t.p ? std::to_string(k) : std::string("=");
  else if (row.tokens.size() == 1)  // copy, reverse: "|" is the last id
    tokens.back() = row.tokens.front();
  else
    for (size_t k = 0; k < row.tokens.size(); ++k) tokens[static_cast<size_t>(t.first_id) + k] = row.tokens[k];
  return Vocab(std::move(tokens));
}

LmData make_lm_data(const LmTask& t, int n, uint64_t seed) {
  const TaskRow& row = task_row(t.name);
  if (row.split) return row.split(t, seed);
  if (n < 1) throw Error("the number of sequences must be positive, got " + std::to_string(n));
  return {row.draw(t, n, 2 * seed + 1), row.draw(t, std::clamp(n / 10, 1, 256), 2 * seed + 2)};
}

EncodedData make_lm_task(const LmTask& t, int n, uint64_t seed) {
  const TaskRow& row = task_row(t.name);
  if (!row.draw)
    throw Error("the " + t.name + " task's sequences are every case once: they are split, not drawn (make_lm_data)");
  return row.draw(t, n, seed);
}

std::vector<int> lm_task_probe(const LmTask& t, uint64_t seed) {
  if (lm_task_kind(t.name).probe_repeats) {
    std::mt19937_64 rng(0);
    std::uniform_int_distribution<int> draw(t.first_id, t.vocab - 1);
    std::vector<int> ids(static_cast<size_t>(2 * t.seq));
    for (int k = 0; k < t.seq; ++k) ids[static_cast<size_t>(k)] = ids[static_cast<size_t>(k + t.seq)] = draw(rng);
    return ids;
  }
  std::vector<int> s = make_lm_data(t, 1, seed).val.seqs.front();
  s.pop_back();
  return s;
}

std::vector<std::string> lm_task_names() {
  std::vector<std::string> names;
  for (const LmTaskKind& k : lm_task_kinds()) names.push_back(k.name);
  return names;
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
        "\"slingshot\"); the run keeps the weights of its best held-out step. The accuracy chart's steps are on a log "
        "scale.";
    LmPreset rev;
    rev.name = "reverse";
    rev.label = "Reverse a sequence (generated; a 2-layer transformer)";
    rev.task.name = "reverse", rev.task.seq = 8, rev.task.vocab = 16;
    rev.shape.arch = "gpt2", rev.shape.layers = 2, rev.shape.heads = 2, rev.shape.dim = 64, rev.shape.ff = 128;
    rev.shape.max_len = 17, rev.shape.vocab = 16;
    rev.sequences = 8000, rev.epochs = 6, rev.batch = 32;  // 250 steps an epoch
    rev.lr = 3e-3f, rev.warmup = 100, rev.cosine = true, rev.seed = 0;
    rev.what =
        "4 to 8 random tokens, \"|\", then the same tokens backwards; only the reversal is scored. Each output "
        "must read the token as far before \"|\" as it is after it, and the length varies, so a head has to find "
        "\"|\" first. Watch the held-out accuracy climb past 0.98 within about 3 epochs while the heads draw the "
        "anti-diagonal: each row of the reversal attends to its mirror image before \"|\".";
    return std::vector<LmPreset>{induction, grok, rev};
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

const std::vector<ShippedText>& shipped_texts() {
  static const std::vector<ShippedText> rows = [] {
    ShippedText verses;
    verses.file = "dhammapada.txt";
    verses.label = "Verses: the Dhammapada (a text for a new language model)";
    verses.what =
        "About 70,000 characters of verse (the Dhammapada in John Richards's 1993 translation, public domain), "
        "read a character at a time: 77 characters and the 3 special tokens. The loss starts at ln 80 = 4.4, "
        "sits near 2.4 for some ten epochs (the model has the letters' and spaces' frequencies), then falls "
        "below 2 as it learns whole words; the held-out next-character accuracy reaches about 0.42 after 20 "
        "epochs (300 steps, about a minute here). Open it in Explore and generate from \"Mind precedes\".";
    verses.opening = "THE DHAMMAPADA";  // after the archive's FTP notice, which the model reads too
    verses.shape.arch = "gpt2";
    verses.shape.layers = 2, verses.shape.heads = 4, verses.shape.dim = 128, verses.shape.ff = 512;
    verses.shape.max_len = 128;
    verses.text.tokenizer = TextTokenizer::Char, verses.text.seq = 128;
    verses.epochs = 20, verses.batch = 32, verses.lr = 3e-3f, verses.dropout = 0.1f;
    return std::vector<ShippedText>{verses};
  }();
  return rows;
}

}  // namespace attnlab
