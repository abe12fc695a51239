// The reference ops: plain loops with double accumulators, written to be read next to the seed
// articles (MultiHeadAttention.forward, FeedForward.forward); the definition the fast ops and
// the finite-difference checks are held to.
#include <cmath>

#include "engine/compute/ops.h"

namespace attnlab {

namespace {

class ReferenceOps final : public Ops {
 public:
  std::string name() const override { return "reference"; }

  void linear(const Tensor& x, const Tensor& W, const Tensor& b, Tensor& y) override {
    const int64_t N = x.dim(0), in = x.dim(1), out = W.dim(0);
    y = Tensor({N, out});
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < out; ++o) {
        double s = b.empty() ? 0.0 : b.data[static_cast<size_t>(o)];
        for (int64_t k = 0; k < in; ++k) s += static_cast<double>(x.at(n, k)) * W.at(o, k);
        y.at(n, o) = static_cast<float>(s);
      }
  }

  void linear_backward(const Tensor& x, const Tensor& W, const Tensor& dy, Tensor* dx, Tensor& dW,
                       Tensor& db) override {
    const int64_t N = x.dim(0), in = x.dim(1), out = W.dim(0);
    if (dx) {
      *dx = Tensor({N, in});
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < in; ++k) {
          double s = 0;
          for (int64_t o = 0; o < out; ++o) s += static_cast<double>(dy.at(n, o)) * W.at(o, k);
          dx->at(n, k) = static_cast<float>(s);
        }
    }
    for (int64_t o = 0; o < out; ++o) {
      double sb = 0;
      for (int64_t n = 0; n < N; ++n) sb += dy.at(n, o);
      if (!db.empty()) db.data[static_cast<size_t>(o)] += static_cast<float>(sb);
      if (dW.empty()) continue;
      for (int64_t k = 0; k < in; ++k) {
        double s = 0;
        for (int64_t n = 0; n < N; ++n) s += static_cast<double>(dy.at(n, o)) * x.at(n, k);
        dW.at(o, k) += static_cast<float>(s);
      }
    }
  }

  void layer_norm(const Tensor& x, const Tensor& g, const Tensor& b, float eps, Tensor& y, Tensor& xhat,
                  Tensor& rstd) override {
    const int64_t N = x.dim(0), E = x.dim(1);
    y = Tensor({N, E});
    xhat = Tensor({N, E});
    rstd = Tensor({N});
    for (int64_t n = 0; n < N; ++n) {
      double mean = 0, var = 0;
      for (int64_t e = 0; e < E; ++e) mean += x.at(n, e);
      mean /= static_cast<double>(E);
      for (int64_t e = 0; e < E; ++e) var += (x.at(n, e) - mean) * (x.at(n, e) - mean);
      var /= static_cast<double>(E);
      const double r = 1.0 / std::sqrt(var + eps);
      rstd.data[static_cast<size_t>(n)] = static_cast<float>(r);
      for (int64_t e = 0; e < E; ++e) {
        const double h = (x.at(n, e) - mean) * r;
        xhat.at(n, e) = static_cast<float>(h);
        y.at(n, e) = static_cast<float>(h * g.data[static_cast<size_t>(e)] + b.data[static_cast<size_t>(e)]);
      }
    }
  }

  // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * g
  void layer_norm_backward(const Tensor& xhat, const Tensor& rstd, const Tensor& g, const Tensor& dy, Tensor& dx,
                           Tensor& dg, Tensor& db) override {
    const int64_t N = xhat.dim(0), E = xhat.dim(1);
    dx = Tensor({N, E});
    for (int64_t n = 0; n < N; ++n) {
      double m1 = 0, m2 = 0;
      for (int64_t e = 0; e < E; ++e) {
        const double dh = static_cast<double>(dy.at(n, e)) * g.data[static_cast<size_t>(e)];
        m1 += dh;
        m2 += dh * xhat.at(n, e);
        if (!dg.empty()) dg.data[static_cast<size_t>(e)] += dy.at(n, e) * xhat.at(n, e);
        if (!db.empty()) db.data[static_cast<size_t>(e)] += dy.at(n, e);
      }
      m1 /= static_cast<double>(E);
      m2 /= static_cast<double>(E);
      for (int64_t e = 0; e < E; ++e) {
        const double dh = static_cast<double>(dy.at(n, e)) * g.data[static_cast<size_t>(e)];
        dx.at(n, e) = static_cast<float>(rstd.data[static_cast<size_t>(n)] * (dh - m1 - xhat.at(n, e) * m2));
      }
    }
  }

  void activation(const Tensor& h, Activation act, Tensor& a) override {
    a = Tensor(h.shape);
    for (size_t k = 0; k < h.data.size(); ++k) a.data[k] = static_cast<float>(act_forward(h.data[k], act));
  }

  void rms_norm(const Tensor& x, const Tensor& g, float eps, Tensor& y) override {
    const int64_t N = x.dim(0), E = x.dim(1);
    y.reshape_for_overwrite(x.shape);
    for (int64_t n = 0; n < N; ++n) rms_norm_row(x.ptr() + n * E, g.ptr(), E, eps, y.ptr() + n * E);
  }
  void rms_norm_backward(const Tensor& x, const Tensor& g, float eps, const Tensor& dy, Tensor& dx,
                         Tensor& dg) override {
    const int64_t N = x.dim(0), E = x.dim(1);
    dx.reshape_for_overwrite(x.shape);
    for (int64_t n = 0; n < N; ++n)
      rms_norm_backward_row(x.ptr() + n * E, g.ptr(), dy.ptr() + n * E, E, eps, dx.ptr() + n * E,
                            dg.empty() ? nullptr : dg.ptr());
  }
  void rope(Tensor& x, const Tensor& cos, const Tensor& sin, int D, int T, bool inverse) override {
    for (int64_t n = 0; n < x.dim(0); ++n) rope_row(x, n, cos, sin, D, T, inverse);
  }
  void mul(Tensor& a, const Tensor& b) override {
    for (size_t k = 0; k < a.data.size(); ++k) a.data[k] *= b.data[k];
  }

  void activation_backward(const Tensor& h, Activation act, Tensor& da) override {
    for (size_t k = 0; k < h.data.size(); ++k) da.data[k] = static_cast<float>(da.data[k] * act_grad(h.data[k], act));
  }

  static constexpr double kTanhK = 0.7978845608028654;  // sqrt(2 / pi)
  static constexpr double kTanhA = 0.044715;
  static double act_forward(double v, Activation a) {
    switch (a) {
      case Activation::Relu:
        return v > 0 ? v : 0.0;
      case Activation::Gelu:  // exact GELU, as nn.GELU()
        return 0.5 * v * (1.0 + std::erf(v * M_SQRT1_2));
      case Activation::GeluTanh:  // nn.GELU(approximate="tanh")
        return 0.5 * v * (1.0 + std::tanh(kTanhK * (v + kTanhA * v * v * v)));
      case Activation::Silu:  // x sigmoid(x)
        return v / (1.0 + std::exp(-v));
    }
    return 0;
  }
  static double act_grad(double v, Activation a) {
    switch (a) {
      case Activation::Relu:
        return v > 0 ? 1.0 : 0.0;
      case Activation::Gelu:  // cdf + x pdf
        return 0.5 * (1.0 + std::erf(v * M_SQRT1_2)) + v * std::exp(-0.5 * v * v) * 0.3989422804014327;
      case Activation::GeluTanh: {
        const double t = std::tanh(kTanhK * (v + kTanhA * v * v * v));
        return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * kTanhK * (1.0 + 3.0 * kTanhA * v * v);
      }
      case Activation::Silu: {  // sigmoid + x sigmoid (1 - sigmoid)
        const double sg = 1.0 / (1.0 + std::exp(-v));
        return sg * (1.0 + v * (1.0 - sg));
      }
    }
    return 0;
  }

  // Can query i of head h in sequence b see key j, and the additive term on its score.
  static bool blocked(const AttnArgs& s, int b, int h, int i, int j) {
    if (s.mask) return s.mask->is_blocked(h, i, j);
    if (s.causal && j > i) return true;
    if (s.window > 0 && i - j > s.window) return true;
    return s.key_blocked && (*s.key_blocked)[static_cast<size_t>(b * s.keys() + j)] != 0;
  }
  static double additive(const AttnArgs& s, int h, int i, int j) { return s.mask ? s.mask->add(h, i, j) : 0.0; }
  // Element d of head h at row `row` of sequence b, in a (B * rows, E) tensor.
  static float& el(Tensor& t, const AttnArgs& s, int rows, int b, int h, int row, int d) {
    return t.at(static_cast<int64_t>(b) * rows + row, h * s.D + d);
  }
  static float el(const Tensor& t, const AttnArgs& s, int rows, int b, int h, int row, int d) {
    return t.at(static_cast<int64_t>(b) * rows + row, h * s.D + d);
  }
  // The same for keys and values: query head h reads key/value head kv_head(h) (grouped-query).
  static float& kv(Tensor& t, const AttnArgs& s, int b, int h, int row, int d) {
    return t.at(static_cast<int64_t>(b) * s.keys() + row, s.kv_head(h) * s.D + d);
  }
  static float kv(const Tensor& t, const AttnArgs& s, int b, int h, int row, int d) {
    return t.at(static_cast<int64_t>(b) * s.keys() + row, s.kv_head(h) * s.D + d);
  }
  // The score of query i and key j in head h of sequence b (blocked or not):
  // q_i . (k_j + r_(i-j)) / sqrt(d) + the additive mask (Shaw et al. for the relative term)
  // (Gemma 2: the scaled score soft-capped, cap * tanh(z / cap), before the mask)
  static double scaled_score(const AttnArgs& s, const Tensor& Q, const Tensor& K, int b, int h, int i, int j) {
    double v = 0;
    for (int d = 0; d < s.D; ++d) {
      double k = kv(K, s, b, h, j, d);
      if (s.rel) k += s.rel->at(relative_index(i, j, s.max_len), h * s.D + d);
      v += el(Q, s, s.T, b, h, i, d) * k;
    }
    return v * s.score_scale();
  }
  static double score(const AttnArgs& s, const Tensor& Q, const Tensor& K, int b, int h, int i, int j) {
    const double z = scaled_score(s, Q, K, b, h, i, j);
    return (s.softcap > 0 ? std::tanh(z / s.softcap) * s.softcap : z) + additive(s, h, i, j);
  }
  static double keep(const AttnArgs& s, size_t pidx) {
    return s.drop_keep ? ((*s.drop_keep)[pidx] ? s.drop_scale : 0.0) : 1.0;
  }

  void attention(const AttnArgs& s, const Tensor& Q, const Tensor& K, const Tensor* V, Tensor* Pout,
                 Tensor* ctx) override {
    const int B = s.B, T = s.T, S = s.keys(), H = s.H, D = s.D;
    Tensor Plocal;
    Tensor& P = Pout ? *Pout : Plocal;
    P = Tensor({B, H, T, S});
    if (ctx) *ctx = Tensor({static_cast<int64_t>(B) * T, static_cast<int64_t>(H) * D});
    std::vector<double> sc(static_cast<size_t>(S));
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < T; ++i) {
          // scores = q_i . (k_j + r_(i-j)) / sqrt(d) + additive mask (Shaw et al. for the relative term)
          double best = -INFINITY;
          for (int j = 0; j < S; ++j) {
            if (blocked(s, b, h, i, j)) continue;
            const double v = score(s, Q, K, b, h, i, j);
            sc[static_cast<size_t>(j)] = v;
            best = std::max(best, v);
          }
          // softmax over the visible keys; blocked keys stay exactly 0, a fully blocked row all 0
          const size_t row = ((static_cast<size_t>(b) * H + h) * T + i) * S;
          if (best == -INFINITY) continue;
          double sum = 0;
          for (int j = 0; j < S; ++j)
            if (!blocked(s, b, h, i, j)) sum += std::exp(sc[static_cast<size_t>(j)] - best);
          for (int j = 0; j < S; ++j)
            P.data[row + j] =
                blocked(s, b, h, i, j) ? 0.0f : static_cast<float>(std::exp(sc[static_cast<size_t>(j)] - best) / sum);
          if (!ctx || !V) continue;
          // out_h = dropout(P_h) V_h, written into head h's columns of the concatenation
          for (int d = 0; d < D; ++d) {
            double v = 0;
            for (int j = 0; j < S; ++j) v += P.data[row + j] * keep(s, row + j) * kv(*V, s, b, h, j, d);
            el(*ctx, s, T, b, h, i, d) = static_cast<float>(v);
          }
        }
  }

  void attention_backward(const AttnArgs& s, const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P,
                          const Tensor& dctx, Tensor& dQ, Tensor& dK, Tensor& dV, Tensor* drel) override {
    const int B = s.B, T = s.T, S = s.keys(), H = s.H, D = s.D;
    const double scale = s.score_scale();
    dQ = Tensor(Q.shape);
    dK = Tensor(K.shape);
    dV = Tensor(V.shape);
    std::vector<double> dP(static_cast<size_t>(S));
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < T; ++i) {
          const size_t row = ((static_cast<size_t>(b) * H + h) * T + i) * S;
          // ctx_i = sum_j keep_ij P_ij V_j  =>  dV_j += keep_ij P_ij dctx_i,  dP_ij = keep_ij dctx_i . V_j
          double dot = 0;
          for (int j = 0; j < S; ++j) {
            double g = 0;
            for (int d = 0; d < D; ++d) {
              g += static_cast<double>(el(dctx, s, T, b, h, i, d)) * kv(V, s, b, h, j, d);
              kv(dV, s, b, h, j, d) +=
                  static_cast<float>(keep(s, row + j) * P.data[row + j] * el(dctx, s, T, b, h, i, d));
            }
            dP[static_cast<size_t>(j)] = g * keep(s, row + j);
            dot += dP[static_cast<size_t>(j)] * P.data[row + j];
          }
          // softmax: dscore_ij = P_ij (dP_ij - sum_k P_ik dP_ik); score = scale * q_i . (k_j + r_ij)
          for (int j = 0; j < S; ++j) {
            double ds = P.data[row + j] * (dP[static_cast<size_t>(j)] - dot) * scale;
            if (ds == 0.0) continue;
            if (s.softcap > 0) {  // d (cap tanh(z / cap)) / dz = 1 - tanh^2
              const double t = std::tanh(scaled_score(s, Q, K, b, h, i, j) / s.softcap);
              ds *= 1.0 - t * t;
            }
            for (int d = 0; d < D; ++d) {
              double k = kv(K, s, b, h, j, d);
              if (s.rel) {
                const int r = relative_index(i, j, s.max_len);
                k += s.rel->at(r, h * D + d);
                if (drel) drel->at(r, h * D + d) += static_cast<float>(ds * el(Q, s, T, b, h, i, d));
              }
              el(dQ, s, T, b, h, i, d) += static_cast<float>(ds * k);
              kv(dK, s, b, h, j, d) += static_cast<float>(ds * el(Q, s, T, b, h, i, d));
            }
          }
        }
  }
};

}  // namespace

Tensor attention_scores(const AttnArgs& a, const Tensor& Q, const Tensor& K) {
  const int S = a.keys();
  Tensor out({a.B, a.H, a.T, S});
  for (int b = 0; b < a.B; ++b)
    for (int h = 0; h < a.H; ++h)
      for (int i = 0; i < a.T; ++i) {
        float* row = out.ptr() + ((static_cast<int64_t>(b) * a.H + h) * a.T + i) * S;
        for (int j = 0; j < S; ++j)
          row[j] = ReferenceOps::blocked(a, b, h, i, j) ? -INFINITY
                                                        : static_cast<float>(ReferenceOps::score(a, Q, K, b, h, i, j));
      }
  return out;
}

std::unique_ptr<Ops> make_reference_ops() {
  return std::make_unique<ReferenceOps>();
}

std::unique_ptr<Ops> make_ops(const std::string& name) {
  if (name == "reference") return make_reference_ops();
  if (name == "cpu") return make_cpu_ops();
  if (name == "cpu-bf16") return make_cpu_bf16_ops();
  throw Error("unknown training backend \"" + name + "\" (expected cpu, cpu-bf16 or reference)");
}

}  // namespace attnlab
