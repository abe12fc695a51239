// The op interface: forward/backward pairs for the ops that do real work (linear, LayerNorm,
// activations, multi-head attention). The model is written once over it (engine/compute/plan.h), and
// inference and training both run that plan. Two implementations: "reference" (plain loops
// with double accumulators, checked by finite differences) and "cpu" (Eigen + OpenMP, checked
// against the reference). Shapes in comments: N = B * T rows, E = embed, H heads of D = E / H.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/config.h"
#include "engine/core/half.h"
#include "engine/compute/mask.h"
#include "engine/core/tensor.h"

namespace attnlab {

// What the attention op needs to know beyond Q, K, V: the batch shape and which keys each
// query may see, in one of two forms.
struct AttnArgs {
  int B = 1, T = 1, H = 1, D = 1;
  int S = 0;  // keys per sequence; 0 = T (self-attention)
  // Grouped-query attention: K and V hold KV heads (B*S, KV * D), query head h reads key/value
  // head h / (H / KV) (transformers' repeat_kv). 0 = H (every head its own).
  int KV = 0;
  float scale = 0.0f;    // score scale; 0 = 1 / sqrt(D)
  float softcap = 0.0f;  // > 0: scaled scores become softcap * tanh(score / softcap) before the mask (Gemma 2)
  // (a) any mask the engine builds, [planes, T, S] with additive terms; a single sequence (B == 1)
  const AttnMask* mask = nullptr;
  // (b) batches: 1 where the key is [PAD] ([B, S]; may be null), plus an optional causal mask
  const std::vector<uint8_t>* key_blocked = nullptr;
  bool causal = false;
  int window = 0;  // with causal: key j is blocked for query i when i - j > window (a sliding layer); 0 = none
  const Tensor* rel = nullptr;  // relative table [2 * max_len - 1, E] or null
  int max_len = 0;
  const std::vector<uint8_t>* drop_keep = nullptr;  // [B, H, T, S] dropout keep flags on P; null = no dropout
  float drop_scale = 1.0f;                          // 1 / (1 - p)

  int keys() const { return S > 0 ? S : T; }
  int kv_heads() const { return KV > 0 ? KV : H; }
  int kv_head(int h) const { return h / (H / kv_heads()); }
  double score_scale() const { return scale > 0.0f ? scale : 1.0 / std::sqrt(static_cast<double>(D)); }
};

// Row index into the relative-position table for query i and key j: (i - j) + max_len - 1,
// clipped to the table. Shaw et al. 2018 with the article's RelativePositionEmbedding
// orientation (positions[:, None] - positions[None, :]).
inline int relative_index(int i, int j, int max_len) {
  int d = i - j;
  if (d > max_len - 1) d = max_len - 1;
  if (d < -(max_len - 1)) d = -(max_len - 1);
  return d + max_len - 1;
}

class Ops {
 public:
  virtual ~Ops() = default;
  virtual std::string name() const = 0;
  // The weights the next calls read (ModelWeights::version; 0 = unknown): ops that keep converted
  // copies of weights (the bf16 path) drop them when it changes.
  virtual void set_weights_version(uint64_t) {}
  // W's buffer now holds other values than at its last use (a 16-bit matrix's rows widened into a
  // reused buffer): whatever was cached for its address is stale.
  virtual void transient_weights(const Tensor& W) { (void)W; }

  // y = x W^T + b. x (N, in), W (out, in), b (out, or empty: no bias), y (N, out).
  virtual void linear(const Tensor& x, const Tensor& W, const Tensor& b, Tensor& y) = 0;
  // The same with W in 16 bits, read as it is, where the ops have a product for these shapes
  // (true: y written); false: the caller widens W (linear_half.h).
  virtual bool linear_half(const Tensor& x, const HalfTensor& W, const Tensor& b, Tensor& y) {
    (void)x, (void)W, (void)b, (void)y;
    return false;
  }
  // dx = dy W (overwritten; skipped when dx is null), dW += dy^T x (skipped when dW is empty: input
  // gradients only), db += colsum(dy) (when db is not empty).
  virtual void linear_backward(const Tensor& x, const Tensor& W, const Tensor& dy, Tensor* dx, Tensor& dW,
                               Tensor& db) = 0;

  // y = (x - mean) * rstd * g + b per row; saves xhat (N, E) and rstd (N) for the backward.
  virtual void layer_norm(const Tensor& x, const Tensor& g, const Tensor& b, float eps, Tensor& y, Tensor& xhat,
                          Tensor& rstd) = 0;
  // dx overwritten; dg, db accumulated (skipped when empty).
  virtual void layer_norm_backward(const Tensor& xhat, const Tensor& rstd, const Tensor& g, const Tensor& dy,
                                   Tensor& dx, Tensor& dg, Tensor& db) = 0;

  // a = act(h) elementwise (ReLU, exact GELU as nn.GELU(), tanh GELU, SiLU).
  virtual void activation(const Tensor& h, Activation act, Tensor& a) = 0;
  // dh = da * act'(h), in place on da.
  virtual void activation_backward(const Tensor& h, Activation act, Tensor& da) = 0;

  // Llama's RMSNorm per row of x (N, E): y = g * x * r, r = 1 / sqrt(mean(x^2) + eps).
  virtual void rms_norm(const Tensor& x, const Tensor& g, float eps, Tensor& y) = 0;
  // dx = r (g dy) - x r^3 mean(g dy x) (overwritten), dg += dy x r (skipped when dg is empty).
  virtual void rms_norm_backward(const Tensor& x, const Tensor& g, float eps, const Tensor& dy, Tensor& dx,
                                 Tensor& dg) = 0;
  // Hugging Face's apply_rotary_pos_emb on x (N, heads * D) in place: x cos + rotate_half(x) sin per
  // head, rotate_half(x) = cat(-x2, x1) over the head's halves, row n at position n % T, with the
  // tables of rope_tables (plan.h). inverse rotates by the opposite angles: the backward.
  virtual void rope(Tensor& x, const Tensor& cos, const Tensor& sin, int D, int T, bool inverse) = 0;
  // a *= b elementwise (SwiGLU's gate times up; the backward is two such products).
  virtual void mul(Tensor& a, const Tensor& b) = 0;

  // P (B, H, T, S) = softmax(Q K^T / sqrt(D) [+ relative term] [+ additive mask]) with blocked
  // keys at exactly 0 (a row with every key blocked is all 0); ctx (N, E) = dropout(P) V, head h
  // in columns [h*D, (h+1)*D). Q is (B*T, E), K and V (B*S, E). P may be null (not kept), and
  // V and ctx may be null (probabilities only).
  virtual void attention(const AttnArgs& a, const Tensor& Q, const Tensor& K, const Tensor* V, Tensor* P,
                         Tensor* ctx) = 0;
  void attention(const AttnArgs& a, const Tensor& Q, const Tensor& K, const Tensor& V, Tensor& P, Tensor& ctx) {
    attention(a, Q, K, &V, &P, &ctx);
  }
  // Self-attention batches only (form (b); a single sequence's mask acts through P alone, so it
  // runs as form (b) with no mask), grouped-query heads included. dQ, dK, dV overwritten; drel
  // (when the args have a relative table) accumulated.
  virtual void attention_backward(const AttnArgs& a, const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P,
                                  const Tensor& dctx, Tensor& dQ, Tensor& dK, Tensor& dV, Tensor* drel) = 0;
};

// The row kernels of RMSNorm and RoPE, written once: the reference runs them row after row, the
// cpu ops split the rows over threads (the same result). Sums in double.
inline void rms_norm_row(const float* x, const float* g, int64_t E, float eps, float* y) {
  double ss = 0;
  for (int64_t e = 0; e < E; ++e) ss += static_cast<double>(x[e]) * x[e];
  const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(E) + eps));
  for (int64_t e = 0; e < E; ++e) y[e] = g[e] * (x[e] * r);
}
// dx = r g dy - x r^3 mean(g dy x); dg += dy x r when dg is not null.
inline void rms_norm_backward_row(const float* x, const float* g, const float* dy, int64_t E, float eps, float* dx,
                                  float* dg) {
  double ss = 0, m = 0;
  for (int64_t e = 0; e < E; ++e) {
    ss += static_cast<double>(x[e]) * x[e];
    m += static_cast<double>(g[e]) * dy[e] * x[e];
  }
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(E) + eps);
  m /= static_cast<double>(E);
  for (int64_t e = 0; e < E; ++e) {
    dx[e] = static_cast<float>(r * g[e] * dy[e] - x[e] * r * r * r * m);
    if (dg) dg[e] += static_cast<float>(dy[e] * x[e] * r);
  }
}
inline void rope_row(Tensor& x, int64_t n, const Tensor& cos, const Tensor& sin, int D, int T, bool inverse) {
  const int half = D / 2;
  const float sign = inverse ? -1.0f : 1.0f;
  const int64_t width = x.dim(1);
  const float* cs = cos.ptr() + (n % T) * half;
  const float* sn = sin.ptr() + (n % T) * half;
  for (int64_t h0 = 0; h0 < width; h0 += D) {
    float* x1 = x.ptr() + n * width + h0;
    float* x2 = x1 + half;
    for (int i = 0; i < half; ++i) {
      const float a = x1[i], b = x2[i], s = sign * sn[i];
      x1[i] = a * cs[i] - b * s;
      x2[i] = b * cs[i] + a * s;
    }
  }
}

// The scores the attention op takes the softmax of, [B, H, T, S]: q . (k + r) / sqrt(D) plus the
// additive mask, -inf where a key is blocked (TransformerLens's hook_attn_scores). Plain loops
// (the reference's own score), for the values a hook keeps or edits.
Tensor attention_scores(const AttnArgs& a, const Tensor& Q, const Tensor& K);

std::unique_ptr<Ops> make_reference_ops();
std::unique_ptr<Ops> make_cpu_ops();
// The cpu ops with the linear layers' products in bf16 (fp32 accumulation, fp32 everything
// else) through oneDNN; Error when built without oneDNN.
std::unique_ptr<Ops> make_cpu_bf16_ops();
bool bf16_available();  // built with oneDNN, and oneDNN has bf16 kernels here (AVX-512)
// v rounded to bfloat16 (to nearest even, as PyTorch's .to(torch.bfloat16)); NaN stays a quiet
// NaN. Branch-free, so loops over it vectorise.
inline uint16_t to_bf16_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}
// out[k] = to_bf16_bits(x[k]) for k < n, over the threads when n is large (the same result).
void to_bf16(const float* x, uint16_t* out, int64_t n);
std::string bf16_notice();  // empty, or why bf16 is slow here (emulated, or measured slower than fp32)
std::unique_ptr<Ops> make_ops(const std::string& name);  // "reference" | "cpu"

// "3.4.0": the Eigen the cpu ops were built with (for --version and Help > About).
std::string eigen_version();
// "2.6.3 on avx512_core_bf16": the oneDNN library and the instruction set it picked; "" without it.
std::string onednn_version();

}  // namespace attnlab
