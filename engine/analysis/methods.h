// Beyond raw attention (issue [analysis]): methods that read a model's attention in the ways
// researchers have shown to be more faithful, each with its paper and exact formula, on any
// model attnlab opens. No Qt. Every method takes the model, a backend and one input.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/analysis/head_patterns.h"
#include "engine/compute/forward.h"

namespace attnlab {

// Attention rollout (Abnar & Zuidema 2020), with the residual:
//   A~_l = rownorm(0.5 * mean_h A_l + 0.5 * I),   R = A~_L ... A~_2 A~_1
// -> [T, T]: how much query i's final representation draws on input token j. Every row sums to 1
// (a row whose keys are all blocked keeps only the residual).
Tensor attention_rollout(const Model& model, Backend& backend, const ForwardRequest& request);
// The same from probabilities already at hand (per layer [H, T, T], layer 0 first): an opened
// attention file's, say.
Tensor rollout_of(const std::vector<Tensor>& attention);

// Norm-based attention (Kobayashi et al. 2020): || a^h_ij f^h(x_j) ||_2 with
// f^h(x) = (x W_V^h + b_V^h) W_O^h, W_O^h the columns of the output projection that read head h
// (no output bias), x what the layer's attention reads (the normalised input for pre-norm
// models). -> [L, H, T, T].
Tensor value_norm_attention(const Model& model, Backend& backend, const ForwardRequest& request);

// The gradient of one prediction y with respect to every layer's attention probabilities, by
// backward through the same layer plan training uses (fp32, host ops). y is the logit of class
// `target` (classifiers) or, for language models, the next-token logit of token id `target`
// after the last position; target < 0 takes the predicted class / the top next token. Ablated
// heads (request.ablate) stay ablated. When grads is not null (shaped like the weights, or with
// empty tensors for what is not wanted), d y / d weights is accumulated into it.
struct PredictionGradients {
  int target = -1;
  double y = 0;                // the logit explained (or the logit difference, options.wrong)
  std::vector<Tensor> probs;   // per layer [H, T, T]: A_l
  std::vector<Tensor> dprobs;  // per layer [H, T, T]: d y / d A_l
  // options.hooks: each named activation of the pass (hooks.h's names and shapes) and d y / d it,
  // the same shape (zeros where y does not depend on it)
  std::map<std::string, Tensor> activations, gradients;
};
struct GradientOptions {
  int target = -1;                 // as above
  int wrong = -1;                  // >= 0: y = logit[target] - logit[wrong], activation patching's metric
  std::vector<std::string> hooks;  // names ('*' globs) of the activations whose gradients are kept
  ModelWeights* grads = nullptr;   // as above
};
PredictionGradients prediction_gradients(const Model& model, const ForwardRequest& request,
                                         const GradientOptions& options);
PredictionGradients prediction_gradients(const Model& model, const ForwardRequest& request, int target,
                                         ModelWeights* grads = nullptr);

// Gradient-weighted attention relevance (Chefer et al., ICCV 2021, "Generic Attention-model
// Explainability"): R = I; for each layer from the first to the last,
//   A_bar_l = mean_h((d y / d A_l * A_l)^+)   (elementwise product, negatives clipped),
//   R <- R + A_bar_l R.
// -> [T, T]: row i is how much each input token is relevant to token i's representation, in y's
// terms. The cost is one forward keeping what the backward needs plus one backward without
// weight gradients.
Tensor grad_attention(const Model& model, const ForwardRequest& request, int target, int* used_target = nullptr);

// What a [T, T] relevance map says about the prediction: the rows the model reads out (the
// classifier's pooling weights, or a language model's last position), with each token's own
// identity term removed: r_j = sum_i w_i (R_ij - [i == j]). -> [T].
std::vector<float> readout_relevance(const Model& model, const std::vector<int>& ids, const Tensor& R);

// Aggregates of [L, H, T, S] maps (or a ForwardResult's probabilities): the mean over heads of
// each layer -> [L, T, S], and the mean over layers and heads -> [T, S].
Tensor mean_over_heads(const Tensor& lhts);
Tensor mean_over_layers(const Tensor& lhts);

// Head importance (Michel et al. 2019's head mask): p_t(full) - p_t(head h of layer l ablated),
// one head at a time, t = target (the predicted class when < 0). Classifiers: class t; language
// models: the next-token probability of token t after the last position (default: the top one).
// -> [L, H]. progress(done, total) is called after each head; cancel stops it (Cancelled).
Tensor head_importance(const Model& model, Backend& backend, const ForwardRequest& request, int target,
                       const std::function<void(int, int)>& progress = {}, const std::atomic<bool>* cancel = nullptr);

}  // namespace attnlab
