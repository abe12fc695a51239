// Head patterns (Clark et al. 2019, "What does BERT look at?"): what each head mostly attends to,
// from sums over its rows. A causal model's first rows do not change when text is added after
// them, so HeadPatternScan carries those rows' sums from one pass to the next: typing at the end
// of a long text reads the new rows only, and gives the values a whole scan gives.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "engine/compute/forward.h"

namespace attnlab {

// Per head, the mean over queries of the attention to the previous token, the next token, itself,
// the first token, separator tokens ([SEP], </s>, <|endoftext|>), punctuation, and the mean
// entropy of the rows (in nats), with a label when one pattern takes more than half the attention
// on average ("prev", "next", "self", "first", "sep", "punct"), else "token" when one other token
// does (Clark et al.'s heads that attend to a particular word: `focus` is its position), or
// "broad" when the mean entropy is at least 0.9 of that of even rows over the keys each row
// gives any attention (ln T for an encoder; ln(i + 1) for row i under a causal mask).
struct HeadPattern {
  double prev = 0, next = 0, self = 0, first = 0, sep = 0, punct = 0, entropy = 0;
  // the mean attention to the token after an earlier occurrence of the query's token, over the
  // rows whose token occurred before (Olsson et al. 2022's induction heads; 0 when none does)
  double induction = 0;
  int focus = -1;          // the key with the largest mean attention
  double focus_share = 0;  // its mean attention
  std::string label;       // "" when no pattern dominates
};

// The sums over a head's rows that a HeadPattern is the mean of (rows whose keys are all blocked
// left out), in row order.
struct HeadPatternSums {
  int rows = 0;  // -1: not summed
  double prev = 0, next = 0, self = 0, first = 0, sep = 0, punct = 0, entropy = 0, induction = 0;
  double even = 0;             // the entropy of even rows over the keys each row gives attention to
  std::vector<double> column;  // [keys]: the attention each key received
};

// Head patterns of one pass (self mode), head by head: add_head (or add_layer) with each head's
// rows from first_row() on, then patterns(). The scan keeps its sums over the rows before a
// checkpoint (a multiple of kTuning.pattern_checkpoint_rows below the last row), so that a later
// scan of the same model can start from them.
class HeadPatternScan {
 public:
  // `heads`: the model's heads a layer. `previous`: a scan of an earlier pass of the same causal
  // model whose first `shared` rows are this pass's (the rows before the first position a
  // KV-cached pass computed; 0 = none). Where its checkpoint lies within those rows and its labels
  // agree, first_row() is that checkpoint.
  HeadPatternScan(const ForwardResult& result, int heads, std::shared_ptr<const HeadPatternScan> previous = nullptr,
                  int shared = 0);
  int first_row() const { return first_row_; }
  // rows: layer `layer`'s probabilities of queries first..T-1, [heads, T - first, T], with
  // first <= first_row() (the rows before first_row() are skipped). Different heads may be added
  // from different threads at once. Once every head is added the previous scan is let go.
  void add_head(int layer, int head, const Tensor& rows, int first);
  void add_layer(int layer, const Tensor& rows, int first);  // every head of the layer, over the cores
  // [layer][head]; a head not added has label "" and no focus.
  const std::vector<std::vector<HeadPattern>>& patterns() const { return patterns_; }

 private:
  void check(int layer, int head, const Tensor& rows, int first) const;  // Error for rows that do not fit

  int T_ = 0, H_ = 0, first_row_ = 0, checkpoint_ = 0;
  std::vector<int> ids_;
  std::vector<uint8_t> sep_, punct_;             // [T]: separator and punctuation keys
  std::vector<std::vector<int>> after_earlier_;  // [T]: the keys after earlier occurrences of row i's token
  int repeated_rows_ = 0;
  // [layer][head]: the sums over rows < checkpoint_ (rows < 0 where the head was not added)
  std::vector<std::vector<HeadPatternSums>> at_checkpoint_;
  std::shared_ptr<const HeadPatternScan> previous_;  // while heads are still to come (first_row() > 0)
  std::atomic<int> heads_left_{0};
  std::vector<std::vector<HeadPattern>> patterns_;
};

// Every layer's head patterns of a result: a whole scan. Error in cross mode.
std::vector<std::vector<HeadPattern>> head_patterns(const ForwardResult& result);  // [layer][head]

}  // namespace attnlab
