// Adam / AdamW with gradient-norm clipping and an optional linear warm-up + cosine decay of the
// learning rate. State lives beside the weights it updates (same ModelWeights structure).
#pragma once

#include "engine/model/model.h"

namespace attnlab {

struct OptimizerConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0.0f;  // > 0: AdamW (decoupled decay, skipped for biases, LayerNorm and embeddings' norms)
  float clip_norm = 1.0f;     // <= 0: no clipping
  int warmup_steps = 0;
  int total_steps = 0;  // > 0 with cosine: decay to 0 at total_steps
  bool cosine = false;
};

class Adam {
 public:
  Adam(const ModelWeights& like, OptimizerConfig config);
  // One update; returns the gradient norm before clipping.
  double step(ModelWeights& weights, const ModelWeights& grads);
  float current_lr() const;
  int steps() const { return t_; }
  // Per parameter tensor (parameters() order): true = left as it is (a frozen encoder).
  void set_frozen(std::vector<bool> frozen) { frozen_ = std::move(frozen); }

 private:
  OptimizerConfig cfg_;
  ModelWeights m_, v_;
  std::vector<bool> decay_;  // per parameter tensor: apply weight decay?
  std::vector<bool> frozen_;  // per parameter tensor: not updated (empty: none)
  int t_ = 0;
};

// Euclidean norm over every gradient tensor.
double grad_norm(const ModelWeights& grads);

}  // namespace attnlab
