// BpeTrainer::do_train (tokenizers, models/bpe/trainer.rs) step for step: words counted, each
// spelled in alphabet ids; pair counts weighted by word counts with the words each pair occurs
// in; a max-heap of (count, pair) whose stale entries are re-pushed with their current count
// when popped; a merge rewrites only the words its pair occurred in (Word::merge: left to right,
// non-overlapping) and pushes the pairs it created.
#include "engine/text/bpe_trainer.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <queue>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "engine/core/tensor.h"
#include "engine/text/hf_tokenizer.h"
#include "engine/text/hf_tokenizer_detail.h"
#include "engine/text/unicode.h"

namespace attnlab {
namespace {

using Pair = std::pair<uint32_t, uint32_t>;
struct PairHash {
  size_t operator()(const Pair& p) const { return std::hash<uint64_t>()((uint64_t{p.first} << 32) | p.second); }
};

struct Merge {
  Pair pair;
  uint64_t count = 0;
  std::vector<size_t> pos;  // words the pair occurred in when pushed
};
// tokenizers' Ord for Merge: the larger count first, then the smaller pair ("ascending order").
struct MergeLess {
  bool operator()(const Merge& a, const Merge& b) const {
    if (a.count != b.count) return a.count < b.count;
    return a.pair > b.pair;
  }
};

// Word::merge: every non-overlapping (c1, c2) from the left becomes `to`; the changes to the
// neighbouring pairs' counts (per occurrence of the word).
void merge_word(std::vector<uint32_t>& w, Pair p, uint32_t to, std::vector<std::pair<Pair, int>>& changes) {
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] != p.first || i + 1 >= w.size() || w[i + 1] != p.second) continue;
    if (i > 0) {
      changes.push_back({{w[i - 1], p.first}, -1});
      changes.push_back({{w[i - 1], to}, 1});
    }
    w[i] = to;
    w.erase(w.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    if (i + 1 < w.size()) {
      changes.push_back({{p.second, w[i + 1]}, -1});
      changes.push_back({{to, w[i + 1]}, 1});
    }
  }
}

// GPT-2's pipeline as tokenizers writes it (ByteLevelBPETokenizer, add_prefix_space false).
nlohmann::ordered_json gpt2_pipeline(const BpeVocabulary& v) {
  using json = nlohmann::ordered_json;
  json added = json::array();
  for (int i = 0; i < v.specials; ++i)
    added.push_back({{"id", i},
                     {"content", v.tokens[static_cast<size_t>(i)]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  const json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  json vocab = json::object();
  for (size_t i = 0; i < v.tokens.size(); ++i) vocab[v.tokens[i]] = i;
  json merges = json::array();
  // "a b" strings: every tokenizers version reads them (lists of two came with 0.20), and a
  // byte-level token has no space (U+0020 is drawn as U+0120).
  for (const auto& [a, b] : v.merges) merges.push_back(a + " " + b);
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor",
           {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", merges}}}};
}

}  // namespace

BpeVocabulary train_byte_level_bpe(const std::string& text, const BpeTrainOptions& o) {
  const int specials = static_cast<int>(o.special_tokens.size());
  if (o.vocab_size < specials + 256)
    throw Error("a byte-level BPE vocabulary holds its " + std::to_string(specials) +
                " special token(s) and the 256 bytes: --vocab-size must be at least " + std::to_string(specials + 256) +
                ", got " + std::to_string(o.vocab_size));
  BpeVocabulary v;
  v.specials = specials;
  std::unordered_map<std::string, uint32_t> ids;
  auto add = [&](const std::string& token) {
    if (ids.count(token)) return ids[token];
    ids[token] = static_cast<uint32_t>(v.tokens.size());
    v.tokens.push_back(token);
    return ids[token];
  };
  for (const std::string& s : o.special_tokens) add(s);
  // The alphabet: the 256 byte characters (ByteLevel.alphabet(), tokenizers' initial_alphabet),
  // sorted by code point, as compute_alphabet orders it. Every byte-level word is spelled in it.
  std::vector<char32_t> alphabet(std::begin(hf_detail::byte_table().to_char),
                                 std::end(hf_detail::byte_table().to_char));
  std::sort(alphabet.begin(), alphabet.end());
  for (char32_t c : alphabet) add(unicode::encode(c));

  // Words as GPT-2's pre-tokenizer cuts the text (the pipeline of the tokenizer being made).
  BpeVocabulary bytes_only = v;
  const auto splitter = HfTokenizer::from_tokenizer_json(byte_level_bpe_json(bytes_only), "the BPE trainer");
  std::map<std::string, uint64_t> counted;  // ordered: the same words in the same order on every run
  for (const std::string& w : splitter->pre_tokenize(splitter->normalize(text))) ++counted[w];
  std::vector<std::vector<uint32_t>> words;
  std::vector<uint64_t> counts;
  for (const auto& [w, n] : counted) {
    std::vector<uint32_t> spelled;
    for (char32_t c : unicode::decode(w)) spelled.push_back(ids.at(unicode::encode(c)));
    words.push_back(std::move(spelled));
    counts.push_back(n);
  }

  std::unordered_map<Pair, int64_t, PairHash> pair_counts;
  std::unordered_map<Pair, std::set<size_t>, PairHash> where;
  for (size_t i = 0; i < words.size(); ++i)
    for (size_t k = 0; k + 1 < words[i].size(); ++k) {
      const Pair p{words[i][k], words[i][k + 1]};
      pair_counts[p] += static_cast<int64_t>(counts[i]);
      where[p].insert(i);
    }
  std::priority_queue<Merge, std::vector<Merge>, MergeLess> queue;
  auto push_where = [&] {
    for (auto& [p, pos] : where)
      if (pair_counts[p] > 0)
        queue.push(Merge{p, static_cast<uint64_t>(pair_counts[p]), std::vector<size_t>(pos.begin(), pos.end())});
    where.clear();
  };
  push_where();

  std::vector<std::pair<Pair, int>> changes;
  while (static_cast<int>(ids.size()) < o.vocab_size && !queue.empty()) {
    Merge top = queue.top();
    queue.pop();
    const uint64_t now = static_cast<uint64_t>(std::max<int64_t>(0, pair_counts[top.pair]));
    if (top.count != now) {  // stale: back with its current count
      top.count = now;
      queue.push(std::move(top));
      continue;
    }
    if (top.count < 1 || top.count < static_cast<uint64_t>(std::max(0, o.min_frequency))) break;
    const std::string joined = v.tokens[top.pair.first] + v.tokens[top.pair.second];
    const uint32_t to = add(joined);
    v.merges.push_back({v.tokens[top.pair.first], v.tokens[top.pair.second]});
    for (size_t i : top.pos) {
      changes.clear();
      merge_word(words[i], top.pair, to, changes);
      for (const auto& [p, change] : changes) {
        pair_counts[p] += change * static_cast<int64_t>(counts[i]);
        if (change > 0) where[p].insert(i);
      }
    }
    push_where();
  }
  return v;
}

std::string byte_level_bpe_json(const BpeVocabulary& v) {
  return gpt2_pipeline(v).dump(2) + "\n";
}

}  // namespace attnlab
