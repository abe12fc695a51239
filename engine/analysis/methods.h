// Beyond raw attention (issue [analysis]): methods that read a model's attention in the ways
// researchers have shown to be more faithful, each with its paper and exact formula, on any
// model attnlab opens. No Qt. Every method takes the model, a backend and one input.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/forward.h"

namespace attnlab {

// Attention rollout (Abnar & Zuidema 2020), with the residual:
//   A~_l = rownorm(0.5 * mean_h A_l + 0.5 * I),   R = A~_L ... A~_2 A~_1
// -> [T, T]: how much query i's final representation draws on input token j. Every row sums to 1
// (a row whose keys are all blocked keeps only the residual).
Tensor attention_rollout(const Model& model, Backend& backend, const ForwardRequest& request);

// Norm-based attention (Kobayashi et al. 2020): || a^h_ij f^h(x_j) ||_2 with
// f^h(x) = (x W_V^h + b_V^h) W_O^h, W_O^h the columns of the output projection that read head h
// (no output bias), x what the layer's attention reads (the normalised input for pre-norm
// models). -> [L, H, T, T].
Tensor value_norm_attention(const Model& model, Backend& backend, const ForwardRequest& request);

// Head importance (Michel et al. 2019's head mask): p_t(full) - p_t(head h of layer l ablated),
// one head at a time, t = target (the predicted class when < 0). Classifiers: class t; language
// models: the next-token probability of token t after the last position (default: the top one).
// -> [L, H]. progress(done, total) is called after each head; cancel stops it (Cancelled).
Tensor head_importance(const Model& model, Backend& backend, const ForwardRequest& request, int target,
                       const std::function<void(int, int)>& progress = {},
                       const std::atomic<bool>* cancel = nullptr);

// Head patterns (Clark et al. 2019, "What does BERT look at?"): per head, the mean over queries
// of the attention to the previous token, the next token, itself, the first token, separator
// tokens ([SEP], </s>, <|endoftext|>), punctuation, and the mean entropy of the rows (in nats),
// with a label when one pattern takes more than half the attention on average ("prev", "next",
// "self", "first", "sep", "punct"), or "broad" when the mean entropy is at least 0.9 of the
// uniform row's.
struct HeadPattern {
  double prev = 0, next = 0, self = 0, first = 0, sep = 0, punct = 0, entropy = 0;
  std::string label;  // "" when no pattern dominates
};
std::vector<std::vector<HeadPattern>> head_patterns(const ForwardResult& result);  // [layer][head]

}  // namespace attnlab
