// The reference backend: plain loops written to be read next to the seed articles
// (MultiHeadAttention.forward, FeedForward.forward, TransformerLayer.forward). No tricks, double
// accumulators; every optimised backend is tested against this one.
#include <cmath>

#include "engine/backend.h"

namespace attnlab {

namespace {

// y = x W^T + b   (nn.Linear). x is (T, in), W is (out, in), y is (T, out).
Tensor linear(const Tensor& x, const Tensor& W, const Tensor& b) {
  const int64_t T = x.dim(0), in = x.dim(1), out = W.dim(0);
  Tensor y({T, out});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < out; ++o) {
      double s = b.data[static_cast<size_t>(o)];
      for (int64_t k = 0; k < in; ++k) s += static_cast<double>(x.at(t, k)) * W.at(o, k);
      y.at(t, o) = static_cast<float>(s);
    }
  return y;
}

// nn.LayerNorm over the last dimension: (x - mean) / sqrt(var + eps) * g + b, biased variance.
Tensor layer_norm(const Tensor& x, const Tensor& g, const Tensor& b, float eps) {
  const int64_t T = x.dim(0), E = x.dim(1);
  Tensor y({T, E});
  for (int64_t t = 0; t < T; ++t) {
    double mean = 0, var = 0;
    for (int64_t e = 0; e < E; ++e) mean += x.at(t, e);
    mean /= static_cast<double>(E);
    for (int64_t e = 0; e < E; ++e) var += (x.at(t, e) - mean) * (x.at(t, e) - mean);
    var /= static_cast<double>(E);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t e = 0; e < E; ++e)
      y.at(t, e) = static_cast<float>((x.at(t, e) - mean) * inv * g.data[static_cast<size_t>(e)] +
                                      b.data[static_cast<size_t>(e)]);
  }
  return y;
}

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor y = a;
  for (size_t k = 0; k < y.data.size(); ++k) y.data[k] += b.data[k];
  return y;
}

float activate(float v, Activation a) {
  if (a == Activation::Relu) return v > 0 ? v : 0.0f;
  return static_cast<float>(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));  // exact GELU, as nn.GELU()
}

// FeedForward without its residual: fc2(act(fc1(x))).
Tensor feed_forward(const Tensor& x, const LayerWeights& L, Activation act) {
  Tensor h = linear(x, L.w1, L.b1);
  for (float& v : h.data) v = activate(v, act);
  return linear(h, L.w2, L.b2);
}

// Multi-head attention without its residual. xq is (T, E), xkv is (S, E).
// probs (heads, T, S) receives softmax(QK^T / sqrt(d) + masks); returns fc_out(concat(P V)), (T, E).
Tensor multi_head_attention(const Model& model, const LayerWeights& L, const Tensor& xq, const Tensor& xkv,
                            const AttnMask& mask, Tensor& probs) {
  const ModelConfig& c = model.config;
  const int T = static_cast<int>(xq.dim(0)), S = static_cast<int>(xkv.dim(0));
  const int H = c.num_heads, D = c.head_dim(), E = c.embed_size;
  const Tensor Q = linear(xq, L.wq, L.bq);   // (T, E) = (T, H * D): head h is columns [h*D, (h+1)*D)
  const Tensor K = linear(xkv, L.wk, L.bk);  // (S, E)
  const Tensor V = linear(xkv, L.wv, L.bv);  // (S, E)
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const bool relative = c.positional == Positional::Relative;
  probs = Tensor({H, T, S});
  Tensor context({T, E});
  std::vector<double> score(static_cast<size_t>(S));
  for (int h = 0; h < H; ++h) {
    for (int i = 0; i < T; ++i) {
      // scores = Q_h K_h^T / sqrt(d), plus the relative-position term q_i . r_(i-j) (Shaw et al.)
      double best = -INFINITY;
      for (int j = 0; j < S; ++j) {
        if (mask.is_blocked(h, i, j)) continue;
        double s = 0;
        for (int d = 0; d < D; ++d) {
          double k = K.at(j, h * D + d);
          if (relative) k += model.weights.rel_pos.at(relative_index(i, j, c.max_len), h * D + d);
          s += Q.at(i, h * D + d) * k;
        }
        s = s * scale + mask.add(h, i, j);
        score[static_cast<size_t>(j)] = s;
        best = std::max(best, s);
      }
      // softmax over the visible keys; blocked keys stay exactly 0, a fully blocked row stays all 0
      float* p = probs.ptr() + (static_cast<size_t>(h) * T + i) * S;
      if (best == -INFINITY) continue;
      double sum = 0;
      for (int j = 0; j < S; ++j)
        if (!mask.is_blocked(h, i, j)) sum += std::exp(score[static_cast<size_t>(j)] - best);
      for (int j = 0; j < S; ++j)
        p[j] =
            mask.is_blocked(h, i, j) ? 0.0f : static_cast<float>(std::exp(score[static_cast<size_t>(j)] - best) / sum);
      // out_h = P_h V_h, written into head h's columns of the concatenation
      for (int d = 0; d < D; ++d) {
        double s = 0;
        for (int j = 0; j < S; ++j) s += static_cast<double>(p[j]) * V.at(j, h * D + d);
        context.at(i, h * D + d) = static_cast<float>(s);
      }
    }
  }
  return linear(context, L.wo, L.bo);
}

class ReferenceBackend final : public Backend {
 public:
  std::string name() const override { return "reference"; }

  EncodeOutput encode(const Model& model, const std::vector<int>& ids, const AttnMask& mask,
                      const EncodeOptions& options) override {
    const ModelConfig& c = model.config;
    const float eps = c.layer_norm_eps;
    EncodeOutput out;
    out.attention.resize(static_cast<size_t>(c.num_layers));
    Tensor x = embed_tokens(model, ids);  // (T, E)
    for (int l = 0; l < c.num_layers; ++l) {
      const LayerWeights& L = model.weights.layers[static_cast<size_t>(l)];
      if (options.keep_layer_inputs) out.layer_inputs.push_back(x);
      Tensor probs;
      if (c.norm == NormPlacement::Post) {
        // the articles' order: x = LN(x + MHA(x)); x = LN(x + FFN(x))
        x = layer_norm(add(x, multi_head_attention(model, L, x, x, mask, probs)), L.ln1_g, L.ln1_b, eps);
        if (c.ff_dim > 0) x = layer_norm(add(x, feed_forward(x, L, c.activation)), L.ln2_g, L.ln2_b, eps);
      } else {
        // pre-norm (norm_first=True): x = x + MHA(LN(x)); x = x + FFN(LN(x))
        const Tensor n = layer_norm(x, L.ln1_g, L.ln1_b, eps);
        x = add(x, multi_head_attention(model, L, n, n, mask, probs));
        if (c.ff_dim > 0) x = add(x, feed_forward(layer_norm(x, L.ln2_g, L.ln2_b, eps), L, c.activation));
      }
      if (options.keep_attention.empty() || options.keep_attention[static_cast<size_t>(l)])
        out.attention[static_cast<size_t>(l)] = std::move(probs);
    }
    out.hidden = std::move(x);
    return out;
  }

  Tensor cross_attention(const Model& model, int layer, const Tensor& xa, const Tensor& xb,
                         const AttnMask& mask) override {
    const ModelConfig& c = model.config;
    const LayerWeights& L = model.weights.layers[static_cast<size_t>(layer)];
    Tensor probs;
    if (c.norm == NormPlacement::Pre)
      multi_head_attention(model, L, layer_norm(xa, L.ln1_g, L.ln1_b, c.layer_norm_eps),
                           layer_norm(xb, L.ln1_g, L.ln1_b, c.layer_norm_eps), mask, probs);
    else
      multi_head_attention(model, L, xa, xb, mask, probs);
    return probs;
  }
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() {
  return std::make_unique<ReferenceBackend>();
}

}  // namespace attnlab
