// Head patterns (see head_patterns.h): per-row sums, a checkpoint carried between passes.
#include "engine/analysis/head_patterns.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <exception>
#include <optional>
#include <unordered_map>

#include "engine/core/tuning.h"

namespace attnlab {

namespace {

bool is_separator(const std::string& s) {
  return s == "[SEP]" || s == "</s>" || s == "<|endoftext|>" || s == "<|eot_id|>";
}

// A token label that is punctuation only (the visible-space mark and other non-ASCII bytes do not
// count; brackets of special tokens are not punctuation).
bool is_punctuation(const std::string& s) {
  bool any = false, all = true;
  for (unsigned char ch : s) {
    if (ch == ' ' || ch >= 0x80) continue;
    any = true;
    all = all && std::ispunct(ch) && ch != '[' && ch != ']' && ch != '<' && ch != '>' && ch != '|';
  }
  return any && all;
}

// Adds query row i (`row`: its T keys) to a head's sums.
void add_row(HeadPatternSums& p, const float* row, int i, int T, const std::vector<uint8_t>& sep,
             const std::vector<uint8_t>& punct, const std::vector<int>& after_earlier) {
  double sum = 0, ent = 0, s_sep = 0, s_punct = 0;
  int seen = 0;  // the keys the row gives any attention (a blocked one gets exactly 0)
  double* column = p.column.data();
  for (int j = 0; j < T; ++j) {
    const float x = row[j];
    if (x == 0.0f) continue;  // a blocked key (probability exactly 0) adds nothing to any sum
    sum += x;
    if (x > 0) ent -= x * std::log(static_cast<double>(x)), ++seen;
    column[j] += x;
    if (sep[static_cast<size_t>(j)]) s_sep += x;
    if (punct[static_cast<size_t>(j)]) s_punct += x;
  }
  if (sum == 0) return;  // a fully blocked row says nothing
  // the separator and punctuation shares of the row, added as the whole scan adds them
  p.sep += s_sep, p.punct += s_punct;
  ++p.rows;
  for (int k : after_earlier) p.induction += row[k];
  if (i > 0) p.prev += row[i - 1];
  if (i + 1 < T) p.next += row[i + 1];
  p.self += row[i];
  p.first += row[0];
  p.entropy += ent;
  if (seen > 1) p.even += std::log(static_cast<double>(seen));
}

}  // namespace

HeadPatternScan::HeadPatternScan(const ForwardResult& r, int heads, std::shared_ptr<const HeadPatternScan> previous,
                                 int shared) {
  if (r.is_cross()) throw Error("head patterns read self-attention; cross mode has none");
  T_ = static_cast<int>(r.ids.size());
  H_ = heads;
  ids_ = r.ids;
  // separators and punctuation, from the labels the views show
  sep_.assign(static_cast<size_t>(T_), 0);
  punct_.assign(static_cast<size_t>(T_), 0);
  for (int j = 0; j < T_; ++j) {
    const std::string& s = r.tokens[static_cast<size_t>(j)];
    sep_[static_cast<size_t>(j)] = is_separator(s);
    punct_[static_cast<size_t>(j)] = is_punctuation(s);
  }
  // induction (Olsson et al. 2022): for a query whose token occurred before, the keys right after
  // its earlier occurrences, as TransformerLens's induction detector reads a repeated sequence;
  // the previous token and the query itself are left out (a repeated token's previous-token or
  // self head is not an induction head), and rows without such an occurrence do not count.
  // Each token's occurrences so far, in order: the keys j + 1 for j + 2 < i.
  after_earlier_.assign(static_cast<size_t>(T_), {});
  std::unordered_map<int, std::vector<int>> seen;
  for (int i = 0; i < T_; ++i) {
    const std::vector<int>& before = seen[ids_[static_cast<size_t>(i)]];
    std::vector<int>& keys = after_earlier_[static_cast<size_t>(i)];
    for (int j : before)
      if (j + 2 < i) keys.push_back(j + 1);
    repeated_rows_ += !keys.empty();
    seen[ids_[static_cast<size_t>(i)]].push_back(i);
  }
  const int L = static_cast<int>(r.attention.size());
  patterns_.assign(static_cast<size_t>(L), std::vector<HeadPattern>(static_cast<size_t>(H_)));
  HeadPatternSums none;
  none.rows = -1;
  at_checkpoint_.assign(static_cast<size_t>(L), std::vector<HeadPatternSums>(static_cast<size_t>(H_), none));
  heads_left_ = L * H_;
  const int block = std::max(1, kTuning.pattern_checkpoint_rows);
  checkpoint_ = T_ > 0 ? (T_ - 1) / block * block : 0;
  // The previous scan's sums hold when its checkpoint's rows are this pass's rows and every key
  // they read is labelled alike; each of its layers must have been scanned.
  if (previous && previous->checkpoint_ > 0 && previous->checkpoint_ <= std::min(shared, T_ - 1) &&
      static_cast<int>(previous->at_checkpoint_.size()) == L) {
    const int c = previous->checkpoint_;
    bool same = std::equal(ids_.begin(), ids_.begin() + c, previous->ids_.begin()) &&
                std::equal(sep_.begin(), sep_.begin() + c, previous->sep_.begin()) &&
                std::equal(punct_.begin(), punct_.begin() + c, previous->punct_.begin());
    for (const auto& layer : previous->at_checkpoint_) {
      same = same && layer.size() == static_cast<size_t>(H_);
      for (const HeadPatternSums& h : layer) same = same && h.rows >= 0;
    }
    if (same) {
      first_row_ = c;
      previous_ = std::move(previous);
    }
  }
}

void HeadPatternScan::check(int layer, int head, const Tensor& rows, int first) const {
  if (layer < 0 || layer >= static_cast<int>(patterns_.size()) || head < 0 || head >= H_)
    throw Error("head patterns: no head " + std::to_string(layer) + ":" + std::to_string(head));
  if (first < 0 || first > first_row_ || rows.rank() != 3 || rows.dim(0) != H_ || rows.dim(1) != T_ - first ||
      rows.dim(2) != T_)
    throw Error("internal: head patterns need rows " + std::to_string(first_row_) + ".." + std::to_string(T_ - 1) +
                " of " + std::to_string(T_) + " keys");
}

void HeadPatternScan::add_head(int layer, int head, const Tensor& rows, int first) {
  check(layer, head, rows, first);
  const int T = T_, h = head;
  const size_t l = static_cast<size_t>(layer);
  HeadPatternSums s;
  if (first_row_ > 0) {  // rows < first_row_ from the previous pass; keys past them got nothing (causal)
    s = previous_->at_checkpoint_[l][static_cast<size_t>(h)];
    s.column.resize(static_cast<size_t>(T), 0.0);
  } else {
    s.column.assign(static_cast<size_t>(T), 0.0);
  }
  for (int i = first_row_; i < T; ++i) {
    if (i == checkpoint_) {
      HeadPatternSums& c = at_checkpoint_[l][static_cast<size_t>(h)];
      c = s;
      c.column.resize(static_cast<size_t>(checkpoint_));  // causal: rows < checkpoint_ see no later key
    }
    add_row(s, rows.ptr() + (static_cast<size_t>(h) * (T - first) + (i - first)) * T, i, T, sep_, punct_,
            after_earlier_[static_cast<size_t>(i)]);
  }
  HeadPattern p;
  if (s.rows > 0) {
    const double n = s.rows;
    p.prev = s.prev / n, p.next = s.next / n, p.self = s.self / n, p.first = s.first / n;
    p.sep = s.sep / n, p.punct = s.punct / n, p.entropy = s.entropy / n;
    p.focus = static_cast<int>(std::max_element(s.column.begin(), s.column.end()) - s.column.begin());
    p.focus_share = s.column[static_cast<size_t>(p.focus)] / n;
  }
  // a mean over the rows that repeat a token; a label only where a quarter of the rows do
  p.induction = repeated_rows_ > 0 ? s.induction / repeated_rows_ : 0.0;
  const bool repeats = repeated_rows_ >= 2 && 4 * repeated_rows_ >= T;
  const std::pair<const char*, double> cands[] = {{"prev", p.prev},
                                                  {"next", p.next},
                                                  {"self", p.self},
                                                  {"first", p.first},
                                                  {"sep", p.sep},
                                                  {"punct", p.punct},
                                                  {"induction", repeats ? p.induction : 0.0}};
  // One token: every head attends to it alone, which says nothing about the head (no badge).
  double best = 0.5;
  for (const auto& [name, v] : cands)
    if (T > 1 && v > best) best = v, p.label = name;
  if (p.label.empty() && T > 1 && p.focus_share > 0.5) p.label = "token";
  // broad: the rows nearly as spread as even rows over the keys each sees (ln T for an encoder;
  // under a causal mask ~ln T - 1, which 0.9 ln T never reached below ~22,000 tokens)
  if (p.label.empty() && T > 1 && s.rows > 0 && s.even > 0 && p.entropy >= 0.9 * (s.even / s.rows)) p.label = "broad";
  patterns_[l][static_cast<size_t>(h)] = std::move(p);
  if (--heads_left_ == 0) previous_.reset();  // atomic: the last head added lets go
}

void HeadPatternScan::add_layer(int layer, const Tensor& rows, int first) {
  check(layer, 0, rows, first);  // before the threads: an exception may not leave them
  const int n = T_ - first_row_;
  std::vector<std::exception_ptr> failed(static_cast<size_t>(H_));
#pragma omp parallel for schedule(dynamic, 1) if (static_cast <double>(H_) * n * T_ > 1e6)
  for (int h = 0; h < H_; ++h) {
    try {
      add_head(layer, h, rows, first);
    } catch (...) {  // out of memory, say: thrown after the loop
      failed[static_cast<size_t>(h)] = std::current_exception();
    }
  }
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);
}

std::vector<std::vector<HeadPattern>> head_patterns(const ForwardResult& r) {
  // layer by layer: one layer's probabilities at a time (kept, or recomputed on demand)
  std::optional<HeadPatternScan> scan;
  for (int l = 0; l < static_cast<int>(r.attention.size()); ++l) {
    if (!r.has_probs(l)) continue;
    const std::shared_ptr<const Tensor> probs = r.layer_probs(l);
    if (!scan) scan.emplace(r, static_cast<int>(probs->dim(0)));
    scan->add_layer(l, *probs, 0);
  }
  return scan ? scan->patterns() : std::vector<std::vector<HeadPattern>>(r.attention.size());
}

}  // namespace attnlab
