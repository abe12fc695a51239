// Adam / AdamW (Kingma & Ba; Loshchilov & Hutter), as torch.optim.Adam / AdamW compute it.
#include "engine/train/optimizer.h"

#include <cmath>
#include <cstdint>

#include "engine/train/train_model.h"

namespace attnlab {

double grad_norm(const ModelWeights& grads) {
  double s = 0;
  for (const Tensor* t : parameters(grads))
    for (float v : t->data) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

Adam::Adam(const ModelWeights& like, OptimizerConfig config)
    : cfg_(config), m_(zeros_like(like)), v_(zeros_like(like)) {
  // Decay matrices only: 1-D tensors (biases, LayerNorm gains) are left alone, as is customary.
  for (const Tensor* t : parameters(like)) decay_.push_back(t->rank() == 2);
}

float Adam::current_lr() const {
  const int t = std::max(t_, 1);
  double lr = cfg_.lr;
  if (cfg_.warmup_steps > 0 && t <= cfg_.warmup_steps) return static_cast<float>(lr * t / cfg_.warmup_steps);
  if (cfg_.cosine && cfg_.total_steps > cfg_.warmup_steps) {
    const double progress =
        std::min(1.0, static_cast<double>(t - cfg_.warmup_steps) / (cfg_.total_steps - cfg_.warmup_steps));
    lr *= 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  return static_cast<float>(lr);
}

double Adam::step(ModelWeights& weights, const ModelWeights& grads) {
  ++t_;
  weights.version = next_weights_version();  // new values: device caches must not reuse the old ones
  const double norm = grad_norm(grads);
  const double clip = cfg_.clip_norm > 0 && norm > cfg_.clip_norm ? cfg_.clip_norm / (norm + 1e-6) : 1.0;
  const double lr = current_lr();
  const double bc1 = 1.0 - std::pow(cfg_.beta1, t_), bc2 = 1.0 - std::pow(cfg_.beta2, t_);
  auto w = parameters(weights);
  const auto g = parameters(grads);
  auto m = parameters(m_), v = parameters(v_);
  for (size_t p = 0; p < w.size(); ++p) {
    if (p < frozen_.size() && frozen_[p]) continue;
    const float decay = cfg_.weight_decay > 0 && decay_[p] ? static_cast<float>(lr * cfg_.weight_decay) : 0.0f;
    float* wp = w[p]->ptr();
    const float* gp = g[p]->ptr();
    float* mp = m[p]->ptr();
    float* vp = v[p]->ptr();
    const int64_t n = static_cast<int64_t>(w[p]->data.size());
    // each weight's update is its own: over the threads, the same result for any split
#pragma omp parallel for schedule(static) if (n >= (1 << 15))
    for (int64_t k = 0; k < n; ++k) {
      const float gk = static_cast<float>(gp[k] * clip);
      mp[k] = cfg_.beta1 * mp[k] + (1 - cfg_.beta1) * gk;
      vp[k] = cfg_.beta2 * vp[k] + (1 - cfg_.beta2) * gk * gk;
      const double mhat = mp[k] / bc1, vhat = vp[k] / bc2;
      wp[k] -= decay * wp[k];
      wp[k] -= static_cast<float>(lr * mhat / (std::sqrt(vhat) + cfg_.eps));
    }
  }
  return norm;
}

}  // namespace attnlab
