// The model written once: the embedding, then each encoder layer as a flat sequence of op calls
// (llm.c's gpt2_forward), and the backward walking the same sequence in reverse. Inference (the
// reference and cpu backends, through encode) and training (train_step) run this same code
// with different ops and options, so they cannot drift apart. The OpenCL backend follows the
// same sequence with device ops (engine/opencl/opencl_backend.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "engine/backend.h"
#include "engine/model.h"
#include "engine/ops.h"

namespace attnlab {

// One layer's intermediate values. Inference reuses one for every layer; training keeps one per
// layer for the backward.
struct LayerCache {
  Tensor x_in;                  // layer input (N, E) (kept for the backward only)
  Tensor n1, n1_hat, n1_rstd;   // pre-norm: LN1(x_in)
  Tensor Q, K, V, P, ctx;       // attention; P (B, H, T, T) is kept for the backward only
  std::vector<uint8_t> p_keep;  // attention dropout
  std::vector<uint8_t> o_keep;  // residual dropout after fc_out
  Tensor o, f;                  // fc_out and fc2 outputs (work buffers)
  Tensor x1, x1_hat, x1_rstd;   // post: LN1(x + o); pre: x + o (x1_hat unused)
  Tensor n2, n2_hat, n2_rstd;   // pre-norm: LN2(x1)
  Tensor h, a;                  // feed-forward pre-activation and activation (N, F)
  std::vector<uint8_t> f_keep;  // residual dropout after fc2
  Tensor x2_hat, x2_rstd;       // post: LN2 of (x1 + f)
};

// Dropout (training): on the attention probabilities and on both residual branches, with a
// cheap seedable generator (splitmix64; millions of draws per step), drawn in plan order.
class Dropout {
 public:
  Dropout(float p, uint64_t seed) : p_(p), scale_(1.0f / (1.0f - p)), state_(seed) {}
  float scale() const { return scale_; }
  std::vector<uint8_t> keep_mask(size_t n);  // 1 = kept
  // t <- t * keep * scale
  void apply(Tensor& t, const std::vector<uint8_t>& keep) const;

 private:
  uint64_t next();
  float p_, scale_;
  uint64_t state_;
};

struct LayerRun {
  bool for_backward = false;   // keep in the cache what layer_backward needs
  Dropout* dropout = nullptr;  // training only
  Tensor* probs = nullptr;     // receives the (B, H, T, S) probabilities when not null (inference)
};

// AttnArgs of a model's attention for B sequences of T queries and S keys (no mask yet).
AttnArgs attention_args(const ModelConfig& c, const ModelWeights& w, int B, int T, int S);

// Token embedding + positional term for B sequences of T ids (ids is [B * T]): x (B*T, E).
Tensor embed_forward(const Model& model, const std::vector<int>& ids, int T);
// Accumulates d loss / d (embedding, learned positions) from dx (B*T, E).
void embed_backward(const Model& model, const std::vector<int>& ids, int T, const Tensor& dx, ModelWeights& grads);
// Vaswani et al.: PE(t, 2k) = sin(t / 10000^(2k/E)), PE(t, 2k+1) = cos(same), [T, E], in double.
Tensor sinusoid_table(int T, int E);

// One encoder layer on x (N, E), in place.
void layer_forward(const ModelConfig& c, const LayerWeights& L, Ops& ops, const AttnArgs& attn, Tensor& x,
                   LayerCache& k, const LayerRun& run);
// dx: d loss / d (layer output) in, d loss / d (layer input) out. Weight gradients are
// accumulated into G (and drel, the relative table's, when the model has one).
void layer_backward(const ModelConfig& c, const LayerWeights& L, LayerWeights& G, Ops& ops, const AttnArgs& attn,
                    const LayerCache& k, float drop_scale, Tensor& dx, Tensor* drel);

// Inference on one sequence: the encoder stack, keeping what options ask for. Throws Cancelled
// when options.cancel is set (checked before every layer).
EncodeOutput encode(const Model& model, Ops& ops, const std::vector<int>& ids, const AttnMask& mask,
                    const EncodeOptions& options);
// Layer `layer`'s attention probabilities [heads, T_a, T_b], queries from xa and keys from xb
// (each that layer's input; pre-norm models normalise them first, as the layer does).
Tensor cross_attention_probs(const Model& model, Ops& ops, int layer, const Tensor& xa, const Tensor& xb,
                             const AttnMask& mask);

}  // namespace attnlab
