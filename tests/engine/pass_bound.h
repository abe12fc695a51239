// Bounds for comparing two float32 forward passes of one model: the reference ops against the cpu
// ops or OpenCL, or a pass against another pass of the same values (a training forward, a padded
// batch, cross mode with B = A). Derived from the computation, on any CPU. (bf16 against float32:
// tolerance.h's bf16_rel with what PassBound measures.)
//
// How. The pass is walked step by step (the model's layer plan) on a reference pass of the same
// input, so every value's size is measured, not assumed. Each step adds its own rounding: a
// worst-case bound from tolerance.h (sum_bound_best of its reduction length and the abs_sum of its
// terms, or a few u of the values for elementwise steps), 10 to 50 times the typical rounding
// error. Errors that reach a step from earlier steps are carried through it first-order, with one
// rule for sums over the entries of an error vector: rounding errors are independent, so such a
// sum grows like a random walk (sum_bound_prob's argument with lambda = 1: typical, not
// worst-case). A linear layer passes an error of entries e on as max_o ||W_o||_2 e (not
// ||W_o||_1 e), LayerNorm as max(rstd) max|g| e (its Jacobian is rstd diag(g) times a projection),
// the softmax's score errors reach the context weighted by ||p (v - ctx)||_2. Carrying errors
// worst-case instead would multiply by every layer's Lipschitz constant in the worst direction
// (about sqrt(E) per linear layer), which rounding errors do not follow, and give bounds of 1e-2
// and more; the margin is in the per-step terms. A layer's bound is affine in its input's error,
// local + gain * e, and the stack composes the layers with through_layers (largest local, largest
// gain). The pass bound costs one more reference pass plus loops of the attention's size.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/compute/forward.h"
#include "engine/compute/plan.h"
#include "tests/engine/test_util.h"
#include "tests/engine/tolerance.h"

namespace attnlab::test {

// How the pass held to the reference computes, beyond float32 sums in any order.
struct PassSetup {
  // Relative error of the library functions it calls (exp, erf, tanh, 1/sqrt), in units of u.
  double fn_err;
  // Extra relative error of a LayerNorm row's mean and 1/std, in units of u.
  double ln_err;
  // Instead: the reference ops alone against exact arithmetic (a loss's own float32 error): each
  // op sums in double and rounds its result to float once, u of it (the double sums' K 2^-53 of
  // their abs_sum is far below).
  bool reference;
};
// cpu: 4 ulp = 8 u. Eigen documents its float erf and tanh as "a couple of ulp" (exp and the
// rest are within 2); glibc's float functions are within 2 ulp.
inline constexpr PassSetup kCpuPass{8, 0, false};
// OpenCL 1.2's accuracy table: erf within 16 ulp (32 u), exp 3, tanh 5, rsqrt 2 ulp, and x / y
// within 2.5 ulp where the cpu's division is correctly rounded: the mean's division adds 4 u and
// 1/std's division and rsqrt 4 u more, hence 8 u on LayerNorm.
inline constexpr PassSetup kOpenClPass{32, 8, false};
inline constexpr PassSetup kReferencePass{8, 0, true};

struct PassBound {
  std::vector<double> probs;  // per layer: on |P_a - P_b| (self- or cross-attention probabilities)
  double hidden = 0;          // on |hidden_a - hidden_b|
  double logits = 0;          // on |logits_a - logits_b| (classifiers)
  // What the pass measured, per layer: the largest p (1 - p) over the probabilities, and a bound
  // on the 2-norm of a score's terms scale q_d (k_d + r_d), scale max|q| max ||k + r||_2.
  std::vector<double> pq, score_terms;
};

namespace pass_detail {

// An error bound on a value of a layer, affine in the bound e on the layer input's error.
struct Aff {
  double local = 0, gain = 0;
  double at(double e) const { return local + gain * e; }
};
inline Aff operator+(const Aff& a, const Aff& b) {
  return {a.local + b.local, a.gain + b.gain};
}
inline Aff operator*(double k, const Aff& a) {
  return {k * a.local, k * a.gain};
}
inline Aff add_local(const Aff& a, double local) {
  return {a.local + local, a.gain};
}

// The largest slope of the smooth activations: GELU'(x) = Phi(x) + x phi(x) peaks at 1.1289 (at
// x = sqrt 2); the tanh form's peak is within 1e-3 of it and SiLU's is 1.0998.
inline constexpr double kActSlope = 1.13;

// Largest 2-norm of a block of `width` columns (starting at a multiple of width) over the rows of
// a (rows, cols) tensor: an attention head's slice of q, k, v or of the relative table.
inline double max_block_norm(const Tensor& t, int64_t width) {
  if (t.empty() || width <= 0) return 0;
  const int64_t rows = t.dim(0), cols = t.numel() / rows;
  double m = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c0 = 0; c0 + width <= cols; c0 += width) {
      double s = 0;
      for (int64_t c = c0; c < c0 + width; ++c) {
        const double v = t.data[static_cast<size_t>(r * cols + c)];
        s += v * v;
      }
      m = std::max(m, s);
    }
  return std::sqrt(m);
}
inline double max_row_norm(const Tensor& t) {
  return t.empty() ? 0.0 : max_block_norm(t, t.numel() / t.dim(0));
}

inline double max_additive(const AttnMask* m) {
  double a = 0;
  if (m)
    for (float v : m->additive)
      if (std::isfinite(v)) a = std::max(a, static_cast<double>(std::fabs(v)));
  return a;
}

// y = x W^T + b over K = W's columns: each entry's abs_sum A (measured) in sum_bound_best (the
// reference alone: u A >= u |y|). Gain: max_o ||W_o||_2.
inline Aff linear_err(const Tensor& x, const Tensor& W, const Tensor& b, const Aff& in, const PassSetup& s) {
  const double A = max_abs_product(x, false, W, true, &b);
  return add_local(max_row_norm(W) * in, s.reference ? kU32 * A : sum_bound_best(static_cast<double>(W.dim(1)), A));
}

// LayerNorm of rows of E, the cpu's normalize_row against the reference's double. The mean errs
// by gamma_{E+1} mean|x| (E-term sum, 1/E and the product), which 1/std turns into r gamma_{E+1}
// mean|x| on xhat; the variance's E squares and sum err by gamma_{E+5} relative (with the
// rounding of x - mean, the scaling and eps), 1/std by half that plus 2 u (sqrt, division), and
// xhat, g xhat and + b round once each: |g| (r gamma_{E+1} mean|x| + |xhat| (gamma_{E+5} / 2 +
// 5 u)) + 2 u |y| with the reference's rounding (the reference alone: u |y|). Gain: max(rstd) max|g|.
inline Aff layer_norm_err(const Tensor& x, const Tensor& g, const Tensor& rstd, const Tensor& y, const Aff& in,
                          const PassSetup& s) {
  const int64_t N = x.dim(0), E = x.dim(1);
  const double mean_err = gamma32(static_cast<double>(E + 1)) + s.ln_err * kU32;
  const double rel_err = gamma32(static_cast<double>(E + 5)) / 2 + (5 + s.ln_err) * kU32;
  double local = 0, rmax = 0;
  for (int64_t n = 0; n < N; ++n) {
    const double r = rstd.data[static_cast<size_t>(n)];
    double mean = 0, mean_abs = 0;
    for (int64_t e = 0; e < E; ++e) mean += x.at(n, e), mean_abs += std::fabs(x.at(n, e));
    mean /= static_cast<double>(E), mean_abs /= static_cast<double>(E);
    rmax = std::max(rmax, r);
    for (int64_t e = 0; e < E; ++e) {
      const double xhat = std::fabs((x.at(n, e) - mean) * r);
      local = std::max(local, std::fabs(g.data[static_cast<size_t>(e)]) * (r * mean_err * mean_abs + xhat * rel_err) +
                                  2 * kU32 * std::fabs(y.at(n, e)));
    }
  }
  if (s.reference) local = kU32 * max_abs(y);
  return add_local((rmax * max_abs(g)) * in, local);
}

// RMSNorm (the host's code sums in double): each side rounds r, x r and g (x r) once, 3 u |y|
// each. A device (s.ln_err > 0) sums the E squares in float (relative gamma_{E+1}, half of it on
// r = 1/sqrt) and divides (2.5 ulp) and takes rsqrt (2 ulp) with its own accuracy: 7 u more on r,
// within the ln_err u counted. Gain: max(r) max|g| (r times a projection, as LayerNorm).
inline Aff rms_norm_err(const Tensor& x, const Tensor& g, float eps, const Tensor& y, const Aff& in,
                        const PassSetup& s) {
  const int64_t N = x.dim(0), E = x.dim(1);
  double rmax = 0;
  for (int64_t n = 0; n < N; ++n) {
    double ss = 0;
    for (int64_t e = 0; e < E; ++e) ss += static_cast<double>(x.at(n, e)) * x.at(n, e);
    rmax = std::max(rmax, 1.0 / std::sqrt(ss / static_cast<double>(E) + eps));
  }
  const double device = s.ln_err > 0 ? gamma32(static_cast<double>(E + 1)) / 2 + s.ln_err * kU32 : 0.0;
  return add_local((rmax * max_abs(g)) * in, (6 * kU32 + device) * max_abs(y));
}

// ReLU is exact. GELU 0.5 h (1 + erf(h / sqrt 2)): erf's own error (fn_err u of |erf| <= 1), its
// argument's rounding, 1 + erf and the products err by (fn_err / 2 + 3) u |h| on one side; the
// tanh form (its polynomial argument rounds 4 times, tanh' z <= 0.45) and SiLU h / (1 + e^-h)
// ((fn_err + 2) u |h|) stay within (fn_err + 4) u |h| with the reference's rounding (the
// reference alone: u |h|).
inline Aff activation_err(Activation act, const Tensor& h, const Aff& in, const PassSetup& s) {
  if (act == Activation::Relu) return in;
  return add_local(kActSlope * in, (s.reference ? 1.0 : s.fn_err + 4) * kU32 * max_abs(h));
}

// What the probabilities' bound needs of a layer's attention.
struct AttnInfo {
  Aff q, k, scores;  // errors of q, k and of the scores
  // largest per-head 2-norms of q, k and the relative rows, largest |q|, largest p and p (1 - p)
  double Q2 = 0, K2 = 0, R2 = 0, Qinf = 0, scale = 1, Pmax = 0, PQ = 0;
  double cap = 0;        // Gemma 2's soft cap on the scores (0: none)
  double cap_units = 8;  // the cap's rounding on both sides, in u of cap (scores_local)
  int D = 1, S = 1;
  bool rel = false;
};

// The scores' own rounding: q . (k + r) has abs_sum <= scale Q2 (K2 + R2) (Cauchy-Schwarz) over D
// terms (2 D with relative positions: q . k and q . r are two products, then added); 5 u of the
// score and the mask's additive term cover the scale's own rounding, the scaling, the addition
// and the shift by the row's maximum.
// A soft cap, cap tanh(z / cap), has slope <= 1 (the scores' error passes through it no larger)
// and rounds its division, tanh (Eigen's float tanh on the cpu, a few units; std::tanh in the
// reference) and product: 8 u of cap, its largest value, counted for both sides; a device whose
// functions are less accurate than the cpu's (PassSetup::fn_err) adds the difference.
inline double scores_local(const AttnInfo& a, double addmax) {
  const double As = a.scale * a.Q2 * (a.K2 + a.R2);
  return sum_bound_best(a.rel ? 2.0 * a.D : a.D, As) + 5 * kU32 * (As + addmax) + a.cap_units * kU32 * a.cap;
}

// ctx_i = sum_j p_ij v_j per head. First-order, dp_j = p_j (ds_j - sum_k p_k ds_k), so the score
// errors reach the context as sum_j p_j (v_j - ctx) ds_j: counted as the 2-norm of p (v - ctx)
// times the scores' error (the typical rule), split into its q part (k's norms) and k part (q's
// norm). The values' errors reach it through a convex combination (gain 1). Its own rounding: the
// row sum's (sum_bound_best(S, 1) relative, common to the row: times |ctx|), exp's and the
// division's (fn_err + 1) u per term, independent (times ||p (v - ctx)||_2), and the S-term sum
// of p v (sum_bound_best of max sum_j p |v|). The reference alone computes the scores exactly (in
// double from float q, k), rounds each probability (u) and the context (u): u (sum_j p |v| + |ctx|).
inline Aff attention_err(const AttnArgs& a, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& P,
                         const Aff& eq, const Aff& ek, const Aff& ev, const PassSetup& s, AttnInfo& info) {
  const int T = a.T, S = a.keys(), H = a.H, D = a.D;
  info.q = eq, info.k = ek;
  info.scale = a.score_scale(), info.D = D, info.S = S, info.rel = a.rel != nullptr, info.cap = a.softcap;
  info.cap_units = 8 + std::max(0.0, s.fn_err - kCpuPass.fn_err);
  info.Q2 = max_block_norm(q, D), info.K2 = max_block_norm(k, D), info.R2 = a.rel ? max_block_norm(*a.rel, D) : 0.0;
  info.Qinf = max_abs(q), info.Pmax = max_abs(P);
  const double ls = s.reference ? 0.0 : scores_local(info, max_additive(a.mask));
  info.scores = add_local(info.scale * (info.K2 + info.R2) * eq + info.scale * info.Q2 * ek, ls);
  const int64_t lq = q.dim(1), lk = k.dim(1), lv = v.dim(1);
  double mad2 = 0, mk = 0, mq = 0, pv = 0, cmax = 0, pq = 0;
  std::vector<double> c(static_cast<size_t>(D)), kn(static_cast<size_t>(S));
  for (int h = 0; h < H; ++h) {
    const int g = a.kv_head(h);
    for (int i = 0; i < T; ++i) {
      const float* p = P.ptr() + (static_cast<int64_t>(h) * T + i) * S;
      double qn = 0;
      for (int d = 0; d < D; ++d) qn += std::pow(q.data[static_cast<size_t>(i * lq + h * D + d)], 2);
      qn = std::sqrt(qn);
      std::fill(c.begin(), c.end(), 0.0);
      for (int j = 0; j < S; ++j) {
        if (p[j] == 0.0f) continue;
        pq = std::max(pq, p[j] * (1.0 - p[j]));
        double n2 = 0;
        for (int d = 0; d < D; ++d) {
          double kd = k.data[static_cast<size_t>(j * lk + g * D + d)];
          if (a.rel) kd += a.rel->at(relative_index(i, j, a.max_len), h * D + d);
          n2 += kd * kd;
          c[static_cast<size_t>(d)] += p[j] * static_cast<double>(v.data[static_cast<size_t>(j * lv + g * D + d)]);
        }
        kn[static_cast<size_t>(j)] = std::sqrt(n2);
      }
      for (int d = 0; d < D; ++d) {
        double m2 = 0, k2 = 0, s1 = 0;
        for (int j = 0; j < S; ++j) {
          if (p[j] == 0.0f) continue;
          const double vj = v.data[static_cast<size_t>(j * lv + g * D + d)];
          const double w = p[j] * (vj - c[static_cast<size_t>(d)]);
          m2 += w * w, k2 += std::pow(w * kn[static_cast<size_t>(j)], 2), s1 += p[j] * std::fabs(vj);
        }
        mad2 = std::max(mad2, std::sqrt(m2)), mk = std::max(mk, std::sqrt(k2)), mq = std::max(mq, qn * std::sqrt(m2));
        pv = std::max(pv, s1), cmax = std::max(cmax, std::fabs(c[static_cast<size_t>(d)]));
      }
    }
  }
  info.PQ = pq;
  const double own = s.reference ? kU32 * (pv + cmax)
                                 : (s.fn_err + 1) * kU32 * mad2 + sum_bound_best(S, 1.0) * cmax + sum_bound_best(S, pv);
  return add_local(info.scale * mk * eq + info.scale * mq * ek + ev, mad2 * ls + own);
}

struct LayerErr {
  Aff out;
  AttnInfo attn;
};

// Walks one layer's plan on the reference's values (st: a for_backward state, every value kept).
// Residual additions and the elementwise steps round once per side (2 u of the result; RoPE's
// rotation three times per side, 9 u of its input); dropout is the identity in a forward pass.
inline LayerErr layer_err(const ModelConfig& c, const LayerPlan& plan, const LayerWeights& L, const AttnArgs& a,
                          const LayerState& st, const PassSetup& s) {
  static const Tensor kNone;
  std::vector<Aff> e(static_cast<size_t>(plan.values));
  e[0] = Aff{0, 1};
  LayerErr out;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const Step& p = plan.steps[i];
    auto val = [&](int n) -> const Tensor& { return st.v[static_cast<size_t>(n)]; };
    const Tensor& x = val(p.in[0]);
    const Tensor& y = val(p.out);
    const Aff ex = e[static_cast<size_t>(p.in[0])];
    const Aff ex1 = p.in[1] >= 0 ? e[static_cast<size_t>(p.in[1])] : Aff{};
    Aff r;
    switch (p.op) {
      case OpKind::Linear:
        r = linear_err(x, L.*p.w, p.b ? L.*p.b : kNone, ex, s);
        break;
      case OpKind::LayerNorm:
        r = layer_norm_err(x, L.*p.w, st.rstd[i], y, ex, s);
        break;
      case OpKind::Activation:
        r = activation_err(c.activation, x, ex, s);
        break;
      case OpKind::Attention:
        r = attention_err(a, x, val(p.in[1]), val(p.in[2]), st.P, ex, ex1, e[static_cast<size_t>(p.in[2])], s,
                          out.attn);
        break;
      case OpKind::Add:
        r = add_local(ex + ex1, 2 * kU32 * max_abs(y));
        break;
      case OpKind::Dropout:
        r = ex;
        break;
      case OpKind::RmsNorm:
        r = rms_norm_err(x, L.*p.w, c.layer_norm_eps, y, ex, s);
        break;
      case OpKind::Rope:
        r = add_local(ex, 9 * kU32 * max_abs(x));
        break;
      case OpKind::Mul:
        r = add_local(max_abs(val(p.in[1])) * ex + max_abs(x) * ex1, 2 * kU32 * max_abs(y));
        break;
      case OpKind::HeadRmsNorm: {  // RMSNorm's bound on the (position, head) rows of D values
        Tensor rows = x;
        rows.shape = {x.dim(0) * (x.dim(1) / a.D), a.D};
        r = rms_norm_err(rows, L.*p.w, c.layer_norm_eps, y, ex, s);
        break;
      }
      case OpKind::CrossAttention:  // an encoder-decoder's: bounded against transformers (hf_seq2seq), not here
        throw Error("pass_bound: no bound for a decoder with cross-attention");
    }
    e[static_cast<size_t>(p.out)] = r;
  }
  out.out = e[static_cast<size_t>(plan.output)];
  return out;
}

struct StackErr {
  std::vector<LayerErr> layers;
  std::vector<double> inputs;  // per layer l (and l = layers: the stack's output), on its input's error
  Aff final_norm{0, 1};        // the final norm, in terms of the stack output's error
  Tensor hidden;               // the reference's hidden states
};

// The reference pass of ids with the mask, walked. The embedding sum is the same code on the cpu
// and reference backends; OpenCL's kernel may add in another order (2 u per side of the terms'
// sizes); the embedding LayerNorm then adds its own. Layers compose with through_layers.
inline StackErr stack_err(const Model& m, const std::vector<int>& ids, const std::vector<int>& types,
                          const AttnMask& mask, const std::vector<std::vector<uint8_t>>& ablate, const PassSetup& s) {
  const ModelConfig& c = m.config;
  const ModelWeights& W = m.weights;
  auto ops = make_reference_ops();
  const int T = static_cast<int>(ids.size());
  StackErr out;
  Model raw = m;  // the embedding sum before the embedding LayerNorm
  raw.config.embedding_norm = false;
  NormState unused;
  Tensor x = embed_forward(raw, *ops, ids, types, T, unused);
  // (Gemma's embedding times sqrt(hidden): one more rounding, within the 4 u of the scaled rows)
  double terms = max_abs(W.embedding) * (c.embed_scale > 0 ? c.embed_scale : 1.0) + max_abs(W.type_embedding);
  if (c.positional == Positional::Learned) terms += max_abs(W.pos_embedding);
  if (c.positional == Positional::Sinusoidal) terms += 1.0;
  double embed = 4 * kU32 * terms;
  if (c.embedding_norm) {
    Tensor y, xhat, rstd;
    ops->layer_norm(x, W.emb_ln_g, W.emb_ln_b, c.layer_norm_eps, y, xhat, rstd);
    embed = layer_norm_err(x, W.emb_ln_g, rstd, y, Aff{embed, 0}, s).local;
    x = std::move(y);
  }
  const LayerPlan plan = make_layer_plan(c);
  AttnArgs attn = attention_args(c, W, 1, T, T);
  for (int l = 0; l < c.num_layers; ++l) {
    attn.mask = &layer_mask(mask, c, l);  // Gemma 2: windowed and full layers
    const size_t ul = static_cast<size_t>(l);
    LayerState st;
    LayerRun run;
    run.for_backward = true;  // keep every value
    run.layer = l;
    if (ul < ablate.size() && !ablate[ul].empty()) run.ablate = &ablate[ul];
    layer_forward(c, plan, W.layers[ul], *ops, attn, x, st, run);
    st.v[static_cast<size_t>(plan.output)] = x;  // layer_forward hands the output back in x
    out.layers.push_back(layer_err(c, plan, W.layers[ul], attn, st, s));
  }
  double local = 0, gain = 0;
  for (const LayerErr& l : out.layers) local = std::max(local, l.out.local), gain = std::max(gain, l.out.gain);
  for (int l = 0; l <= c.num_layers; ++l)
    out.inputs.push_back(embed * std::pow(gain, l) + through_layers(local, l, gain));
  if (c.final_norm) {
    const Tensor before = x;
    NormState norm;
    final_forward(m, *ops, x, norm);
    out.final_norm = c.norm_kind == NormKind::RmsNorm
                         ? rms_norm_err(before, W.final_ln_g, c.layer_norm_eps, x, Aff{0, 1}, s)
                         : layer_norm_err(before, W.final_ln_g, norm.rstd, x, Aff{0, 1}, s);
  }
  out.hidden = std::move(x);
  return out;
}

// The classifier head on hidden states known to within hidden_err: pooling is a convex
// combination of rows (gain 1) whose T-term sums round (sum_bound_best of max|hidden|), then the
// pooler (tanh: slope <= 1, fn_err u of its output per side) and the classifier as linear layers.
inline double logits_err(const Model& m, const Tensor& hidden, const std::vector<int>& ids, double hidden_err,
                         const PassSetup& s) {
  const ModelConfig& c = m.config;
  if (c.num_classes == 0) return 0;
  auto ops = make_reference_ops();
  HeadState st;
  const int T = static_cast<int>(hidden.dim(0));
  head_forward(m, *ops, hidden, pad_flags(m, ids), 1, T, st);
  Aff e{hidden_err + sum_bound_best(T, max_abs(hidden)), 0};
  const Tensor* in = &st.pooled;
  if (c.pooler) {
    e = linear_err(st.pooled, m.weights.pooler_w, m.weights.pooler_b, e, s);
    if (!c.pooler_relu) e = add_local(e, 2 * s.fn_err * kU32 * max_abs(st.pooler_out));
    in = &st.pooler_out;
  }
  return linear_err(*in, m.weights.fc_w, m.weights.fc_b, e, s).local;
}

}  // namespace pass_detail

// The probabilities' bound from the scores' error ds: moving the scores by at most ds moves p_i by
// at most p_i (1 - p_i) (e^{2 ds} - 1) (p_i' - p_i = p_i (1 - p_i) (e^a - e^b) / (p_i e^a +
// (1 - p_i) e^b), a and b within +-ds; exp's own error counts as a score error, fn_err u), and the
// row sum's and division's roundings by softmax_bound(S, 0) of p_i.
inline double probs_err(double ds, double pq, double pmax, int S, const PassSetup& s) {
  return pq * std::expm1(2 * (ds + s.fn_err * kU32)) + pmax * softmax_bound(S, 0.0);
}

// The bound for two float32 passes of `req` on m, one of them `ref` (used for the cross-attention
// probabilities' sizes; the rest is measured on a reference pass made here).
inline PassBound pass_bound(const Model& m, const ForwardRequest& req, const ForwardResult& ref,
                            const PassSetup& s = kCpuPass) {
  using namespace pass_detail;
  const ModelConfig& c = m.config;
  const auto ablate = ablation_flags(c, req.ablate);
  const size_t L = static_cast<size_t>(c.num_layers);
  PassBound out;
  StackErr a;
  if (req.cross_ids.empty()) {
    a = stack_err(m, req.ids, req.token_types, self_attention_mask(m, req), ablate, s);
    for (size_t l = 0; l < L; ++l) {
      const AttnInfo& at = a.layers[l].attn;
      out.probs.push_back(probs_err(at.scores.at(a.inputs[l]), at.PQ, at.Pmax, at.S, s));
      out.pq.push_back(at.PQ);
      out.score_terms.push_back(at.scale * at.Qinf * (at.K2 + at.R2));
    }
  } else {
    // Each sequence is encoded with its padding mask only; layer l's queries come from A's input
    // to it, its keys from B's.
    ForwardRequest ra, rb;
    ra.ids = req.ids, ra.mask.padding = req.mask.padding;
    rb.ids = req.cross_ids, rb.mask.padding = req.mask.padding;
    a = stack_err(m, req.ids, req.token_types, self_attention_mask(m, ra), ablate, s);
    const StackErr b = stack_err(m, req.cross_ids, req.cross_token_types, self_attention_mask(m, rb), ablate, s);
    for (size_t l = 0; l < L; ++l) {
      AttnInfo x = a.layers[l].attn;
      const AttnInfo& kb = b.layers[l].attn;
      x.K2 = kb.K2, x.S = kb.S;
      const double ds = x.scale * (x.K2 + x.R2) * x.q.at(a.inputs[l]) + x.scale * x.Q2 * kb.k.at(b.inputs[l]) +
                        scores_local(x, max_additive(&ref.mask));
      const Tensor& P = ref.cross_attention.at(l);
      double pq = 0;
      for (float v : P.data) pq = std::max(pq, v * (1.0 - v));
      out.probs.push_back(probs_err(ds, pq, max_abs(P), x.S, s));
      out.pq.push_back(pq);
      out.score_terms.push_back(x.scale * x.Qinf * (x.K2 + x.R2));
    }
  }
  out.hidden = a.final_norm.at(a.inputs[L]);
  out.logits = logits_err(m, a.hidden, req.ids, out.hidden, s);
  return out;
}

// A LayerNorm (rows of x, the reference's rstd and output y) computed twice: its own rounding.
inline double layer_norm_bound(const Tensor& x, const Tensor& g, const Tensor& rstd, const Tensor& y,
                               const PassSetup& s = kCpuPass) {
  return pass_detail::layer_norm_err(x, g, rstd, y, {}, s).local;
}

// An activation of h computed twice: its own rounding (0 for ReLU).
inline double activation_bound(Activation act, const Tensor& h, const PassSetup& s = kCpuPass) {
  return pass_detail::activation_err(act, h, {}, s).local;
}

}  // namespace attnlab::test
