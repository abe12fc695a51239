// The training ops: forward/backward pairs for the layers that do real work (linear,
// LayerNorm, batched multi-head attention). One narrow interface, two implementations:
// "reference" (plain loops, checked by finite differences) and "cpu" (Eigen + OpenMP, checked
// against the reference). Elementwise ops, pooling and the loss are plain shared code in
// train_model.cpp. Shapes in comments: N = B * T rows, E = embed, H heads of D = E / H.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace attnlab {

// What the attention op needs to know about a batch beyond Q, K, V.
struct AttnShape {
  int B = 1, T = 1, H = 1, D = 1;
  const std::vector<uint8_t>* key_blocked = nullptr;  // [B, T]: 1 where the key is [PAD]; may be null
  bool causal = false;
  const Tensor* rel = nullptr;  // relative table [2 * max_len - 1, E] or null
  int max_len = 0;
  const std::vector<uint8_t>* drop_keep = nullptr;  // [B, H, T, T] dropout keep flags on P; null = no dropout
  float drop_scale = 1.0f;                          // 1 / (1 - p)
};

class TrainOps {
 public:
  virtual ~TrainOps() = default;
  virtual std::string name() const = 0;

  // y = x W^T + b. x (N, in), W (out, in), b (out), y (N, out).
  virtual void linear(const Tensor& x, const Tensor& W, const Tensor& b, Tensor& y) = 0;
  // dx = dy W (overwritten; skipped when dx is null), dW += dy^T x, db += colsum(dy).
  virtual void linear_backward(const Tensor& x, const Tensor& W, const Tensor& dy, Tensor* dx, Tensor& dW,
                               Tensor& db) = 0;

  // y = (x - mean) * rstd * g + b per row; saves xhat (N, E) and rstd (N) for the backward.
  virtual void layer_norm(const Tensor& x, const Tensor& g, const Tensor& b, float eps, Tensor& y, Tensor& xhat,
                          Tensor& rstd) = 0;
  // dx overwritten; dg, db accumulated.
  virtual void layer_norm_backward(const Tensor& xhat, const Tensor& rstd, const Tensor& g, const Tensor& dy,
                                   Tensor& dx, Tensor& dg, Tensor& db) = 0;

  // P (B, H, T, T) = softmax(Q K^T / sqrt(D) [+ relative term] with blocked keys at 0);
  // ctx (N, E) = dropout(P) V, head h in columns [h*D, (h+1)*D).
  virtual void attention(const AttnShape& s, const Tensor& Q, const Tensor& K, const Tensor& V, Tensor& P,
                         Tensor& ctx) = 0;
  // dQ, dK, dV overwritten; drel (when the shape has a relative table) accumulated.
  virtual void attention_backward(const AttnShape& s, const Tensor& Q, const Tensor& K, const Tensor& V,
                                  const Tensor& P, const Tensor& dctx, Tensor& dQ, Tensor& dK, Tensor& dV,
                                  Tensor* drel) = 0;
};

std::unique_ptr<TrainOps> make_reference_train_ops();
std::unique_ptr<TrainOps> make_cpu_train_ops();
std::unique_ptr<TrainOps> make_train_ops(const std::string& name);  // "reference" | "cpu"

}  // namespace attnlab
