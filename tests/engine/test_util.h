// Helpers shared by the engine tests: small random models, random ids, tensor comparison.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <cmath>
#include <random>
#include <string>

#include <catch2/catch.hpp>

#include "engine/compute/forward.h"
#include "engine/compute/kv_cache.h"
#include "tests/engine/tolerance.h"

namespace attnlab::test {

// An empty scratch folder of this process under the system's temporary directory.
inline std::string scratch_dir(const std::string& kind, const std::string& name) {
  const std::filesystem::path p =
      std::filesystem::temp_directory_path() / ("attnlab-test-" + kind + "-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p.string();
}

// A pass over ids[0, split) that leaves a KV cache, then one over all of ids from that cache
// (req's ids and kv replaced; the cache lives only for the two passes: a result keeps copies).
// rest.first_position is split; with merge, rest's rows before split come from first
// (merge_cached_rows).
struct CachedPasses {
  ForwardResult first, rest;
};
inline CachedPasses cached_passes(const Model& m, Backend& backend, ForwardRequest req, const std::vector<int>& ids,
                                  int split, bool merge = true) {
  KvCache cache;
  req.kv = &cache;
  req.ids.assign(ids.begin(), ids.begin() + split);
  CachedPasses out{run_forward(m, backend, req), ForwardResult()};
  req.ids = ids;
  out.rest = run_forward(m, backend, req);
  REQUIRE(out.rest.first_position == split);
  if (merge) merge_cached_rows(out.first, out.rest);
  return out;
}

inline ModelConfig small_config(int E = 16, int H = 2, int layers = 2, int ff = 24, int max_len = 64) {
  ModelConfig c;
  c.vocab_size = 40;
  c.embed_size = E;
  c.num_heads = H;
  c.num_layers = layers;
  c.ff_dim = ff;
  c.max_len = max_len;
  c.num_classes = 3;
  c.labels = {"a", "b", "c"};
  c.positional = Positional::Sinusoidal;
  return c;
}

inline Model random_model(const ModelConfig& c, uint64_t seed = 7) {
  Model m;
  m.config = c;
  m.weights = random_weights(c, seed);
  m.vocab = default_vocab(c);
  m.source = "test";
  return m;
}

inline std::vector<int> random_ids(int T, int vocab, uint64_t seed = 3, int lowest = 3) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::vector<int> ids(static_cast<size_t>(T));
  for (int& id : ids) id = lowest + static_cast<int>(rng() % static_cast<unsigned>(vocab - lowest));
  return ids;
}

inline Tensor random_tensor(std::vector<int64_t> shape, uint64_t seed, float scale = 1.0f) {
  Tensor t(std::move(shape));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, scale);
  for (float& v : t.data) v = n(rng);
  return t;
}

// Every combination of the mask kinds for T x T with `heads` heads (64 specs): padding, causal,
// window 3, stride 4, global {0, 5}, and a random custom mask (bool, or float with -inf
// entries; per-head when the window is on).
inline std::vector<MaskSpec> all_mask_combinations(int T, int heads) {
  std::vector<MaskSpec> specs;
  for (int bits = 0; bits < 64; ++bits) {
    MaskSpec s;
    s.padding = bits & 1;
    s.causal = bits & 2;
    if (bits & 4) s.window = 3;
    if (bits & 8) s.stride = 4;
    if (bits & 16) s.global = {0, 5};
    if (bits & 32) {
      NpyArray custom;
      custom.kind = (bits & 1) ? NpyKind::Float : NpyKind::Bool;
      custom.tensor = Tensor(bits & 4 ? std::vector<int64_t>{heads, T, T} : std::vector<int64_t>{T, T});
      std::mt19937 rng(static_cast<unsigned>(bits));
      for (float& v : custom.tensor.data)
        v = custom.kind == NpyKind::Bool ? static_cast<float>(rng() % 4 == 0)
                                         : (rng() % 5 == 0 ? -INFINITY : static_cast<float>(rng() % 7) * 0.3f - 1.0f);
      s.custom = custom;
      s.custom_source = "generated";
    }
    specs.push_back(s);
  }
  return specs;
}

struct ShapeCase {
  int T, E, H, layers, ff;
};

// The parts around the layer stack that BERT-like models add: token types, embedding
// LayerNorm, final LayerNorm, pooler.
inline void add_extras(ModelConfig& c) {
  c.type_vocab_size = 2;
  c.embedding_norm = true;
  c.final_norm = true;
  c.pooler = true;
}

// Calls fn(shape, config) for every shape x norm (post, pre) x activation (relu, gelu, and
// gelu_tanh with every extra part: token types, embedding and final norms, pooler) x
// positional kind, with the failing combination captured in the test's output.
template <class F>
void for_each_config(const std::vector<ShapeCase>& shapes, F fn) {
  for (const ShapeCase& s : shapes)
    for (const NormPlacement norm : {NormPlacement::Post, NormPlacement::Pre})
      for (const Activation act : {Activation::Relu, Activation::Gelu, Activation::GeluTanh})
        for (const Positional pos :
             {Positional::None, Positional::Sinusoidal, Positional::Learned, Positional::Relative}) {
          CAPTURE(s.T, s.E, s.H, s.layers, s.ff, to_string(norm), to_string(act), to_string(pos));
          ModelConfig c = small_config(s.E, s.H, s.layers, s.ff, 40);
          c.norm = norm, c.activation = act, c.positional = pos;
          if (act == Activation::GeluTanh) add_extras(c);
          fn(s, c);
        }
}

// Largest |t_k| (0 for an empty tensor).
inline double max_abs(const Tensor& t) {
  double m = 0;
  for (float v : t.data) m = std::max(m, static_cast<double>(std::fabs(v)));
  return m;
}

// max over (i, j) of sum_k |op(A)_ik| |op(B)_kj| (+ |bias_j|), op(X) = X^T when its flag is set: the
// abs_sum that bounds a matrix product's rounding (tolerance.h's sum_bound) over all its entries.
inline double max_abs_product(const Tensor& A, bool ta, const Tensor& B, bool tb, const Tensor* bias = nullptr) {
  const int64_t M = ta ? A.dim(1) : A.dim(0), K = ta ? A.dim(0) : A.dim(1), N = tb ? B.dim(0) : B.dim(1);
  double m = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = bias && !bias->empty() ? std::fabs(bias->data[static_cast<size_t>(j)]) : 0.0;
      for (int64_t k = 0; k < K; ++k)
        s += std::fabs(static_cast<double>(ta ? A.at(k, i) : A.at(i, k))) * std::fabs(tb ? B.at(j, k) : B.at(k, j));
      m = std::max(m, s);
    }
  return m;
}

// Bounds on |cpu - reference| of attention_backward's dQ, dK, dV and relative-table gradient, for
// self-attention batches (form (b)) given the same Q, K, V, dctx and each side's own forward
// probabilities (P_ref, P_other: equal, or apart by the forward's rounding). Computed in double
// along the backward's steps (the reference's own), per entry:
//   dP_ij = keep sd dctx_i . V_j over D terms: sum_bound_best(D, its abs_sum a_ij), + 2 u a_ij for
//     the cpu's dropout product;
//   dot_i = sum_j P_ij dP_ij over T: sum_bound_best(T, sum_j P_ij |dP_ij|), + u of it for the
//     cpu's products, + sum_j P_ij of dP's errors;
//   dS_ij = scale P_ij (dP_ij - dot_i): P_ij (dP's and dot's errors + 4 u (|dP_ij| + |dot_i|) for
//     the subtraction, two products and the scale's rounding), plus the first-order effect of the
//     other side's probabilities: |dP_ref - dP_other| (|dP_ij - dot_i|) + P_ij sum_k |dP_ik| |...|;
//   dQ, dK, dV, drel: the sums of dS (K + r), dS Q, keep sd P dctx over their terms carry those
//     errors times the other factor, and round: sum_bound_best of their abs_sum over T (2 T with
//     the relative term: the cpu adds it in a second pass), (H / KV) T, (H / KV) T and B T terms.
struct AttnGradBound {
  double dq = 0, dk = 0, dv = 0, drel = 0;
};
inline AttnGradBound attention_backward_bound(const AttnArgs& s, const Tensor& Q, const Tensor& K, const Tensor& V,
                                              const Tensor& P_ref, const Tensor& P_other, const Tensor& dctx) {
  const int B = s.B, T = s.T, H = s.H, D = s.D, G = H / s.kv_heads();
  const double scale = s.score_scale(), u = kU32;
  const int64_t rows = static_cast<int64_t>(B) * T, qw = static_cast<int64_t>(H) * D, kw = K.dim(1);
  const int64_t rel_rows = s.rel ? s.rel->dim(0) : 0;
  std::vector<double> qa(static_cast<size_t>(rows * qw)), qe(qa.size()), ka(static_cast<size_t>(rows * kw)),
      ke(ka.size()), va(ka.size()), ve(ka.size()), ra(static_cast<size_t>(rel_rows * qw)), re(ra.size());
  std::vector<double> dP(static_cast<size_t>(T)), aP(dP.size()), edP(dP.size()), ddP(dP.size()), kp(dP.size());
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int g = s.kv_head(h);
      for (int i = 0; i < T; ++i) {
        const size_t row = ((static_cast<size_t>(b) * H + h) * T + i) * T;
        const int64_t qi = static_cast<int64_t>(b) * T + i;
        double dot = 0, adot = 0, edot = 0, pdp = 0;
        for (int j = 0; j < T; ++j) {
          const size_t ju = static_cast<size_t>(j);
          kp[ju] = s.drop_keep ? ((*s.drop_keep)[row + ju] ? s.drop_scale : 0.0) : 1.0;
          const int64_t kj = static_cast<int64_t>(b) * T + j;
          double d = 0, a = 0;
          for (int e = 0; e < D; ++e) {
            const double t = static_cast<double>(dctx.at(qi, h * D + e)) * V.at(kj, g * D + e);
            d += t, a += std::fabs(t);
          }
          dP[ju] = kp[ju] * d, aP[ju] = kp[ju] * a;
          edP[ju] = sum_bound_best(D, aP[ju]) + 2 * u * aP[ju];
          ddP[ju] = std::fabs(static_cast<double>(P_other.data[row + ju]) - P_ref.data[row + ju]);
          const double p = P_ref.data[row + ju];
          dot += p * dP[ju], adot += p * std::fabs(dP[ju]), edot += p * edP[ju], pdp += ddP[ju] * std::fabs(dP[ju]);
        }
        edot += sum_bound_best(T, adot) + u * adot;
        for (int j = 0; j < T; ++j) {
          const size_t ju = static_cast<size_t>(j);
          const double p = P_ref.data[row + ju];
          const int64_t kj = static_cast<int64_t>(b) * T + j;
          // a soft cap (Gemma 2) multiplies dS by f = 1 - tanh^2(z / cap), z = scale q . k, which the
          // cpu recomputes in float32: z's D-term product and scaling, the division, tanh's own few
          // units (8 u) and the square's and subtraction's rounding give f's error ef
          double f = 1, ef = 0;
          if (s.softcap > 0) {
            double z = 0, az = 0;
            for (int e = 0; e < D; ++e) {
              const double t = static_cast<double>(Q.at(qi, h * D + e)) * K.at(kj, g * D + e);
              z += t, az += std::fabs(t);
            }
            z *= scale, az *= scale;
            const double t = std::tanh(z / s.softcap);
            const double et = (sum_bound_best(D, az) + 2 * u * std::fabs(z)) / s.softcap + 8 * u * std::fabs(t);
            f = 1 - t * t, ef = 2 * std::fabs(t) * et + 3 * u;
          }
          const double dS = scale * p * (dP[ju] - dot) * f;
          const double eS = scale *
                                (p * (edP[ju] + edot + 4 * u * (std::fabs(dP[ju]) + std::fabs(dot))) +
                                 ddP[ju] * std::fabs(dP[ju] - dot) + p * pdp) *
                                f +
                            scale * p * std::fabs(dP[ju] - dot) * ef;
          const int r = s.rel ? relative_index(i, j, s.max_len) : 0;
          for (int e = 0; e < D; ++e) {
            const size_t q_at = static_cast<size_t>(qi * qw + h * D + e);
            const size_t k_at = static_cast<size_t>(kj * kw + g * D + e);
            const double kr = static_cast<double>(K.data[k_at]) + (s.rel ? s.rel->at(r, h * D + e) : 0.0);
            const double qv = std::fabs(Q.data[q_at]), dc = std::fabs(dctx.data[q_at]);
            qa[q_at] += std::fabs(dS * kr), qe[q_at] += eS * std::fabs(kr);
            ka[k_at] += std::fabs(dS) * qv, ke[k_at] += eS * qv;
            va[k_at] += kp[ju] * p * dc, ve[k_at] += kp[ju] * (ddP[ju] + u * p) * dc;
            if (s.rel) {
              const size_t r_at = static_cast<size_t>(static_cast<int64_t>(r) * qw + h * D + e);
              ra[r_at] += std::fabs(dS) * qv, re[r_at] += eS * qv;
            }
          }
        }
      }
    }
  AttnGradBound out;
  for (size_t k = 0; k < qa.size(); ++k) out.dq = std::max(out.dq, qe[k] + sum_bound_best(s.rel ? 2.0 * T : T, qa[k]));
  for (size_t k = 0; k < ka.size(); ++k) {
    out.dk = std::max(out.dk, ke[k] + sum_bound_best(static_cast<double>(G) * T, ka[k]));
    out.dv = std::max(out.dv, ve[k] + sum_bound_best(static_cast<double>(G) * T, va[k]));
  }
  for (size_t k = 0; k < ra.size(); ++k)
    out.drel = std::max(out.drel, re[k] + sum_bound_best(static_cast<double>(B) * T, ra[k]));
  return out;
}

// Largest |a - b|; NaN anywhere counts as infinite so it can never pass a bound.
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape == b.shape);
  double m = 0;
  for (size_t k = 0; k < a.data.size(); ++k) {
    const double d = std::fabs(static_cast<double>(a.data[k]) - b.data[k]);
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

}  // namespace attnlab::test
