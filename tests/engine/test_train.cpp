// Training: every backward is checked by central finite differences (reference ops and the whole
// model), the fast ops are held to the reference ops on awkward shapes, and the training
// forward agrees with the inference forward.
#include <cmath>

#include <array>
#include <cstring>
#include <map>

#include "engine/compute/plan.h"
#include "engine/train/train_model.h"
#include "tests/engine/fd_check.h"
#include "tests/engine/pass_bound.h"
#include "tests/engine/test_util.h"
#include "tests/engine/tolerance.h"

using namespace attnlab;
using namespace attnlab::test;

namespace {

double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (size_t k = 0; k < a.data.size(); ++k) s += static_cast<double>(a.data[k]) * b.data[k];
  return s;
}

double abs_dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (size_t k = 0; k < a.data.size(); ++k) s += std::fabs(static_cast<double>(a.data[k]) * b.data[k]);
  return s;
}

// Central difference of f at x[k], in double around float perturbations.
template <class F>
double central_diff(Tensor& x, size_t k, F f, float h = 1e-2f) {
  const float keep = x.data[k];
  x.data[k] = keep + h;
  const double up = f();
  x.data[k] = keep - h;
  const double down = f();
  x.data[k] = keep;
  return (up - down) / (2.0 * h);
}

// A backward against a float32 central difference: the caller's bound is tolerance.h's
// central_diff_bound (the step h, the loss's float32 error f_err, a bound on |f'''| near x) plus
// step_rounding_bound. The backward's own float error (a few u of its terms) is far below f_err / h,
// which already counts u of the loss's terms a hundred times over (h = 1e-2), and is left in it.
// The reference attention rounds P to float (u each) before ctx = (dropped) P V in double, then
// ctx once: |d ctx_id| <= u (sum_j keep sd P_ij |V_jd| + |ctx_id|), so dot(ctx, R) (in double)
// errs by at most u sum_{i,d} |R_id| times that.
double attention_loss_err(const AttnArgs& s, const Tensor& P, const Tensor& V, const Tensor& ctx, const Tensor& R) {
  const int B = s.B, T = s.T, H = s.H, D = s.D;
  double err = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i) {
        const size_t row = ((static_cast<size_t>(b) * H + h) * T + i) * T;
        for (int d = 0; d < D; ++d) {
          double a = std::fabs(ctx.at(b * T + i, h * D + d));
          for (int j = 0; j < T; ++j) {
            const double kd = s.drop_keep ? ((*s.drop_keep)[row + static_cast<size_t>(j)] ? s.drop_scale : 0.0) : 1.0;
            a += kd * P.data[row + static_cast<size_t>(j)] * std::fabs(V.at(b * T + j, h * D + d));
          }
          err += kU32 * std::fabs(R.at(b * T + i, h * D + d)) * a;
        }
      }
  return err;
}

// cpu's float act'(h) (glibc's erff, expf, tanhf: within fn_err u) times da against the
// reference's double, per entry. GELU Phi + h phi: the erf term errs by (fn_err / 2 + 1.3) u
// (erf's own error, its argument's rounding, 1 + erf), h phi by (0.25 (fn_err + 3) + 0.25) u (exp's
// error, its argument's 0.5 h^2 u, three products; |h| phi <= 0.25, |h|^3 phi <= 0.5), the sum by
// u |g|: within (fn_err + 8) u |da| with the two roundings of da g. The tanh form 0.5 (1 + t) +
// c (1 - t^2), c = 0.5 |h| k (1 + 3 a h^2): t errs by (fn_err + 3.2) u (its argument rounds 7
// times, tanh'(z) z <= 0.45), which 1 - t^2 turns into 2 c (fn_err + 3.2) u, and c's 8 products
// round: (fn_err / 2 + 6 + c (2 fn_err + 19)) u |da|. ReLU: exact.
// SiLU s (1 + w), s = 1 / (1 + e^-h), w = h (1 - s): s errs by (fn_err + 2) u s (exp, the sum, the
// division), 1 - s by that plus u (1 - s), w by |h| times that plus u |w|, 1 + w by u (1 + |w|),
// and the product by u |g|: (fn_err + 2) s |1 + w| + s (|h| ((fn_err + 2) s + 2 (1 - s)) + 1 + |w|)
// + 2 |g| in u, times |da| (with the two roundings of da g in the 2 |g|).
double act_grad_bound(Activation act, const Tensor& h, const Tensor& da) {
  if (act == Activation::Relu) return 0;
  const double fn = kCpuPass.fn_err;
  double m = 0;
  for (size_t k = 0; k < h.data.size(); ++k) {
    if (act == Activation::Silu) {
      const double v = h.data[k], sg = 1 / (1 + std::exp(-v)), w = v * (1 - sg), g = sg * (1 + w);
      const double coef = (fn + 2) * sg * std::fabs(1 + w) +
                          sg * (std::fabs(v) * ((fn + 2) * sg + 2 * (1 - sg)) + 1 + std::fabs(w)) + 2 * std::fabs(g);
      m = std::max(m, coef * kU32 * std::fabs(da.data[k]));
      continue;
    }
    const double v = h.data[k], c = 0.5 * std::fabs(v) * 0.7978845608028654 * (1 + 3 * 0.044715 * v * v);
    const double coef = act == Activation::Gelu ? fn + 8 : fn / 2 + 6 + c * (2 * fn + 19);
    m = std::max(m, coef * kU32 * std::fabs(da.data[k]));
  }
  return m;
}

// LayerNorm's backward, cpu against reference, each from its own forward (xhat, rstd: apart by
// the forward's rounding, measured here). dx = r (dh - m1 - xhat m2), dh = dy g, m1 = mean(dh),
// m2 = mean(dh xhat): the cpu rounds dh and dh xhat (u), sums E terms and scales: m1 within
// gamma_{E+2} mean|dh|, m2 within gamma_{E+3} mean|dh xhat|; the subtractions and products round
// 4 times (4 u of |dh| + |m1| + |xhat m2|), dh once more (u), the reference once (u |dx|). The
// other side's xhat and r move dx by |dr / r| |dx| + r (|dxhat| |m2| + |xhat| mean(|dh| |dxhat|)).
// dg (sum_n dy xhat) and db (sum_n dy): N float products and additions on each side:
// sum_bound_best of their abs_sum, plus sum_n |dy| |dxhat| for dg.
struct LnGradBound {
  double dx = 0, dg = 0, db = 0;
};
LnGradBound ln_backward_bound(const Tensor& ha, const Tensor& ra, const Tensor& hb, const Tensor& rb, const Tensor& g,
                              const Tensor& dy, const Tensor& dxa) {
  const int64_t N = ha.dim(0), E = ha.dim(1);
  const double u = kU32, m1e = gamma32(static_cast<double>(E + 2)), m2e = gamma32(static_cast<double>(E + 3));
  std::vector<double> dg_abs(static_cast<size_t>(E)), dg_move(dg_abs.size()), db_abs(dg_abs.size());
  LnGradBound out;
  for (int64_t n = 0; n < N; ++n) {
    const double r = ra.data[static_cast<size_t>(n)], dr = std::fabs(rb.data[static_cast<size_t>(n)] - r) / r;
    double m1 = 0, m2 = 0, a1 = 0, a2 = 0, mv = 0;
    for (int64_t e = 0; e < E; ++e) {
      const double dh = static_cast<double>(dy.at(n, e)) * g.data[static_cast<size_t>(e)], xh = ha.at(n, e);
      const double dxh = std::fabs(static_cast<double>(hb.at(n, e)) - xh);
      m1 += dh, m2 += dh * xh, a1 += std::fabs(dh), a2 += std::fabs(dh * xh), mv += std::fabs(dh) * dxh;
      dg_abs[static_cast<size_t>(e)] += std::fabs(dy.at(n, e) * xh);
      dg_move[static_cast<size_t>(e)] += std::fabs(dy.at(n, e)) * dxh;
      db_abs[static_cast<size_t>(e)] += std::fabs(dy.at(n, e));
    }
    const double inv = 1.0 / static_cast<double>(E);
    m1 *= inv, m2 *= inv, a1 *= inv, a2 *= inv, mv *= inv;
    for (int64_t e = 0; e < E; ++e) {
      const double dh = static_cast<double>(dy.at(n, e)) * g.data[static_cast<size_t>(e)], xh = ha.at(n, e);
      const double dxh = std::fabs(static_cast<double>(hb.at(n, e)) - xh), dx = std::fabs(dxa.at(n, e));
      const double local = r * (u * std::fabs(dh) + m1e * a1 + std::fabs(xh) * m2e * a2 +
                                4 * u * (std::fabs(dh) + std::fabs(m1) + std::fabs(xh * m2))) +
                           u * dx;
      const double move = dr * dx + r * (dxh * std::fabs(m2) + std::fabs(xh) * mv);
      out.dx = std::max(out.dx, local + move);
    }
  }
  for (size_t e = 0; e < dg_abs.size(); ++e) {
    out.dg = std::max(out.dg, dg_move[e] + sum_bound_best(static_cast<double>(N), dg_abs[e]));
    out.db = std::max(out.db, sum_bound_best(static_cast<double>(N), db_abs[e]));
  }
  return out;
}

AttnArgs attn_shape(int B, int T, int H, int D, const std::vector<uint8_t>* pad, bool causal, const Tensor* rel,
                    int max_len, const std::vector<uint8_t>* keep) {
  AttnArgs s;
  s.B = B, s.T = T, s.H = H, s.D = D, s.key_blocked = pad, s.causal = causal, s.rel = rel, s.max_len = max_len;
  s.drop_keep = keep;
  s.drop_scale = keep ? 1.0f / 0.8f : 1.0f;
  return s;
}

}  // namespace

TEST_CASE("reference linear and LayerNorm backward match finite differences", "[train][fd]") {
  auto ops = make_reference_ops();
  Tensor x = random_tensor({3, 5}, 1), W = random_tensor({4, 5}, 2), b = random_tensor({4}, 3),
         R = random_tensor({3, 4}, 4);
  // Each loss below records its own float32 error: the reference rounds y once (u |y|) from
  // double and the dot is in double, so u sum |y R|; f_err keeps the largest of an entry's two.
  double f_err = 0;
  auto loss = [&] {
    Tensor y;
    ops->linear(x, W, b, y);
    f_err = std::max(f_err, kU32 * abs_dot(y, R));
    return dot(y, R);
  };
  // The loss is linear in x, W and b: no truncation error (f''' = 0).
  auto check_linear = [&](Tensor& t, size_t k, double an, const char* what) {
    const float h = 1e-2f;
    f_err = 0;
    const double fd = central_diff(t, k, loss, h);
    check_grad(fd, an, central_diff_bound(h, f_err, 0.0) + step_rounding_bound(h, t.data[k], fd), what);
  };
  Tensor dx, dW({4, 5}), db({4});
  ops->linear_backward(x, W, R, &dx, dW, db);
  for (size_t k = 0; k < x.data.size(); ++k) check_linear(x, k, dx.data[k], "linear dx");
  for (size_t k = 0; k < W.data.size(); ++k) check_linear(W, k, dW.data[k], "linear dW");
  for (size_t k = 0; k < b.data.size(); ++k) check_linear(b, k, db.data[k], "linear db");

  Tensor g = random_tensor({6}, 5), beta = random_tensor({6}, 6), xl = random_tensor({4, 6}, 7),
         Rl = random_tensor({4, 6}, 8);
  auto ln_loss = [&] {
    Tensor y, xh, rs;
    ops->layer_norm(xl, g, beta, 1e-5f, y, xh, rs);
    f_err = std::max(f_err, kU32 * abs_dot(y, Rl));
    return dot(y, Rl);
  };
  Tensor y, xh, rs, dxl, dg({6}), dbeta({6});
  ops->layer_norm(xl, g, beta, 1e-5f, y, xh, rs);
  ops->layer_norm_backward(xh, rs, g, Rl, dxl, dg, dbeta);
  auto check_ln = [&](Tensor& t, size_t k, float h, double third, double an, const char* what) {
    f_err = 0;
    const double fd = central_diff(t, k, ln_loss, h);
    check_grad(fd, an, central_diff_bound(h, f_err, third) + step_rounding_bound(h, t.data[k], fd), what);
  };
  // Along x_k (row n, E = 6 entries), xhat_e = (d_e + t a_e) phi(t rstd), a = e_k - 1/E, phi(s) =
  // (1 + (2 s xhat_k + (1 - 1/E) s^2) / E)^(-1/2), so f''' = rstd^3 sum_e R_e g_e (3 a_e phi'' +
  // xhat_e phi''') at 0, with |phi''| <= 3 xhat_k^2 / E^2 + 1/E <= 4 / E and |phi'''| <= 15
  // |xhat_k|^3 / E^3 + 9 |xhat_k| / E^2 <= 24 / E^1.5 (|xhat| <= sqrt(E)): |f'''| <= 36 / E rstd^3
  // sum_e |R_e g_e|; twice that covers rstd moving over the step (h rstd < 0.01 here). The step is
  // 1e-3 there; g and beta enter linearly (f''' = 0).
  for (size_t k = 0; k < xl.data.size(); ++k) {
    const int64_t n = static_cast<int64_t>(k) / 6;
    double rg = 0;
    for (int64_t e = 0; e < 6; ++e) rg += std::fabs(static_cast<double>(Rl.at(n, e)) * g.data[static_cast<size_t>(e)]);
    const double third = 2 * 36.0 / 6 * std::pow(rs.data[static_cast<size_t>(n)], 3) * rg;
    check_ln(xl, k, 1e-3f, third, dxl.data[k], "layer_norm dx");
  }
  for (size_t k = 0; k < g.data.size(); ++k) check_ln(g, k, 1e-2f, 0.0, dg.data[k], "layer_norm dg");
  for (size_t k = 0; k < beta.data.size(); ++k) check_ln(beta, k, 1e-2f, 0.0, dbeta.data[k], "layer_norm db");
}

TEST_CASE("reference attention backward matches finite differences with masks, dropout, relative", "[train][fd]") {
  auto ops = make_reference_ops();
  const int B = 2, T = 4, H = 2, D = 3, E = H * D, max_len = 5;
  std::vector<uint8_t> pad = {0, 0, 0, 0, 0, 0, 1, 1};  // second sequence: two [PAD] keys
  Tensor rel = random_tensor({2 * max_len - 1, E}, 9, 0.5f);
  std::vector<uint8_t> keep(static_cast<size_t>(B * H * T * T));
  std::mt19937 rng(3);
  for (auto& k : keep) k = rng() % 5 != 0;
  for (const bool causal : {false, true})
    for (const bool use_rel : {false, true})
      for (const bool use_drop : {false, true}) {
        CAPTURE(causal, use_rel, use_drop);
        const AttnArgs s =
            attn_shape(B, T, H, D, &pad, causal, use_rel ? &rel : nullptr, max_len, use_drop ? &keep : nullptr);
        Tensor Q = random_tensor({B * T, E}, 10), K = random_tensor({B * T, E}, 11), V = random_tensor({B * T, E}, 12);
        const Tensor R = random_tensor({B * T, E}, 13);
        double f_err = 0;  // the largest float32 error of the loss evaluations since the last reset
        auto loss = [&] {
          Tensor P, ctx;
          ops->attention(s, Q, K, V, P, ctx);
          f_err = std::max(f_err, attention_loss_err(s, P, V, ctx, R));
          return dot(ctx, R);
        };
        Tensor P, ctx, dQ, dK, dV, drel(rel.shape);
        ops->attention(s, Q, K, V, P, ctx);
        ops->attention_backward(s, Q, K, V, P, R, dQ, dK, dV, use_rel ? &drel : nullptr);
        // |f'''| along one entry of Q, K or rel. The loss is a sum over rows (b, h, i) of
        // sum_j p_j w_j, w_j = keep sd V_j . R_i over the head's columns; moving the entry by t moves
        // the row's scores by t c_j, and p_j''' = p_j ((c_j - mu)^3 - 3 (c_j - mu) sigma^2 - kappa_3)
        // with mu, sigma^2, kappa_3 the moments of c under p: at most 3 R^3 p_j for the range R of c
        // over the visible keys (|c - mu| <= R, sigma^2 <= R^2 / 4, |kappa_3| <= R^3); over |t| <= h,
        // p_j grows by at most e^{h R}. V enters linearly (f''' = 0).
        const float step = 1e-2f;
        const double scale = s.score_scale();
        auto row_third = [&](int b, int hh, int i, const std::vector<double>& c) {
          const size_t row = ((static_cast<size_t>(b) * H + hh) * T + i) * T;
          double lo = INFINITY, hi = -INFINITY, pw = 0;
          for (int j = 0; j < T; ++j) {
            const double p = P.data[row + static_cast<size_t>(j)];
            if (p == 0.0) continue;  // blocked: the score does not matter
            lo = std::min(lo, c[static_cast<size_t>(j)]), hi = std::max(hi, c[static_cast<size_t>(j)]);
            double w = 0;
            for (int e = 0; e < D; ++e)
              w += static_cast<double>(V.at(b * T + j, hh * D + e)) * R.at(b * T + i, hh * D + e);
            pw += p * std::fabs(w) * (use_drop ? (keep[row + static_cast<size_t>(j)] ? s.drop_scale : 0.0) : 1.0);
          }
          const double range = hi > lo ? hi - lo : 0.0;
          return 3 * std::pow(range, 3) * std::exp(step * range) * pw;
        };
        // Q entry (row n, column col): its own row's scores, slopes scale (k_j + r_ij)
        auto q_third = [&](size_t k) {
          const int n = static_cast<int>(k) / E, col = static_cast<int>(k) % E, b = n / T, i = n % T;
          std::vector<double> c(static_cast<size_t>(T));
          for (int j = 0; j < T; ++j)
            c[static_cast<size_t>(j)] =
                scale * (K.at(b * T + j, col) + (use_rel ? rel.at(relative_index(i, j, max_len), col) : 0.0f));
          return row_third(b, col / D, i, c);
        };
        // K entry (key j0) or rel entry (relative row r): one score per row moves, slope scale q_i
        auto key_third = [&](int b, int j0, int i, int col) {
          std::vector<double> c(static_cast<size_t>(T), 0.0);
          c[static_cast<size_t>(j0)] = scale * Q.at(b * T + i, col);
          return row_third(b, col / D, i, c);
        };
        auto k_third = [&](size_t k) {
          const int n = static_cast<int>(k) / E, col = static_cast<int>(k) % E;
          double t3 = 0;
          for (int i = 0; i < T; ++i) t3 += key_third(n / T, n % T, i, col);
          return t3;
        };
        auto rel_third = [&](size_t k) {
          const int r = static_cast<int>(k) / E, col = static_cast<int>(k) % E;
          double t3 = 0;
          for (int b = 0; b < B; ++b)
            for (int i = 0; i < T; ++i)
              for (int j = 0; j < T; ++j)
                if (relative_index(i, j, max_len) == r) t3 += key_third(b, j, i, col);
          return t3;
        };
        auto check = [&](Tensor& t, size_t k, double third, double an, const char* what) {
          f_err = 0;
          const double fd = central_diff(t, k, loss, step);
          check_grad(fd, an, central_diff_bound(step, f_err, third) + step_rounding_bound(step, t.data[k], fd), what);
        };
        for (size_t k = 0; k < Q.data.size(); ++k) check(Q, k, q_third(k), dQ.data[k], "dQ");
        for (size_t k = 0; k < K.data.size(); ++k) check(K, k, k_third(k), dK.data[k], "dK");
        for (size_t k = 0; k < V.data.size(); ++k) check(V, k, 0.0, dV.data[k], "dV");
        if (use_rel)
          for (size_t k = 0; k < rel.data.size(); ++k) check(rel, k, rel_third(k), drel.data[k], "drel");
        // blocked keys get no gradient
        for (int t = 6; t < 8; ++t)
          for (int e = 0; e < E; ++e) {
            CHECK(dK.at(t, e) == 0.0f);
            CHECK(dV.at(t, e) == 0.0f);
          }
      }
}

TEST_CASE("activation ops: cpu matches the reference, GELU and SiLU are exact and independent of alignment",
          "[train][cpu]") {
  auto ref = make_reference_ops();
  auto cpu = make_ops("cpu");
  for (const int64_t n : {1, 7, 4095, 4096, 4097, 20000})
    for (const Activation act : {Activation::Relu, Activation::Gelu, Activation::GeluTanh, Activation::Silu}) {
      CAPTURE(n, to_string(act));
      const Tensor h = random_tensor({n}, static_cast<uint64_t>(n), 3.0f);
      Tensor a1, a2;
      ref->activation(h, act, a1);
      cpu->activation(h, act, a2);
      CHECK(max_abs_diff(a1, a2) <= activation_bound(act, h));  // Eigen's float erf vs the double one
      // GELU(x) = x * Phi(x): spot values from the definition
      for (int64_t k = 0; k < n; k += 997) {
        const double x = h.data[static_cast<size_t>(k)];
        const double want = act == Activation::Relu   ? std::max(0.0, x)
                            : act == Activation::Gelu ? 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)))
                            : act == Activation::GeluTanh
                                ? 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)))
                                : x / (1.0 + std::exp(-x));
        // one float32 side against exact values: within the (two-sided) allowance of activation_bound
        CHECK(std::fabs(a2.data[static_cast<size_t>(k)] - want) <= (kCpuPass.fn_err + 4) * kU32 * std::fabs(x));
      }
      // the same values one float further into a buffer give the same bits
      if (n > 1) {
        Tensor shifted({n + 1});
        std::copy(h.data.begin(), h.data.end(), shifted.data.begin() + 1);
        Tensor a3;
        cpu->activation(shifted, act, a3);
        CHECK(std::equal(a2.data.begin(), a2.data.end(), a3.data.begin() + 1));
      }
      const Tensor da = random_tensor({n}, 5);
      Tensor d1 = da, d2 = da;
      ref->activation_backward(h, act, d1);
      cpu->activation_backward(h, act, d2);
      CHECK(max_abs_diff(d1, d2) <= act_grad_bound(act, h, da));
      // and the backward, too, gives the same bits one float further into a buffer
      if (n > 1) {
        Tensor hs({n + 1}), ds({n + 1});
        std::copy(h.data.begin(), h.data.end(), hs.data.begin() + 1);
        std::copy(da.data.begin(), da.data.end(), ds.data.begin() + 1);
        cpu->activation_backward(hs, act, ds);
        CHECK(std::equal(d2.data.begin(), d2.data.end(), ds.data.begin() + 1));
      }
    }
}

TEST_CASE("cpu training ops match the reference on awkward shapes", "[train][cpu]") {
  auto ref = make_reference_ops();
  auto cpu = make_ops("cpu");
  struct S {
    int B, T, H, D;
  };
  for (const S sh : {S{1, 1, 1, 1}, S{1, 1, 8, 4}, S{3, 7, 2, 5}, S{2, 33, 16, 2}, S{1, 200, 4, 8}}) {
    CAPTURE(sh.B, sh.T, sh.H, sh.D);
    const int E = sh.H * sh.D, N = sh.B * sh.T, max_len = 256;
    const Tensor x = random_tensor({N, E}, 1), W = random_tensor({E + 3, E}, 2), b = random_tensor({E + 3}, 3);
    // Each product below is a sum in any order (the reference's in double, rounded once): within
    // sum_bound_best of its length and its terms' largest abs_sum, measured.
    Tensor y1, y2;
    ref->linear(x, W, b, y1);
    cpu->linear(x, W, b, y2);
    CHECK(max_abs_diff(y1, y2) <= sum_bound_best(E, max_abs_product(x, false, W, true, &b)));
    const Tensor dy = random_tensor({N, E + 3}, 4);
    Tensor dx1, dx2, dW1({E + 3, E}), dW2({E + 3, E}), db1({E + 3}), db2({E + 3});
    ref->linear_backward(x, W, dy, &dx1, dW1, db1);
    cpu->linear_backward(x, W, dy, &dx2, dW2, db2);
    double dy_cols = 0;  // largest column sum of |dy|: db's abs_sum
    for (int o = 0; o < E + 3; ++o) {
      double c = 0;
      for (int n = 0; n < N; ++n) c += std::fabs(dy.at(n, o));
      dy_cols = std::max(dy_cols, c);
    }
    CHECK(max_abs_diff(dx1, dx2) <= sum_bound_best(E + 3, max_abs_product(dy, false, W, false)));
    CHECK(max_abs_diff(dW1, dW2) <= sum_bound_best(N, max_abs_product(dy, true, x, false)));  // sums over N rows
    CHECK(max_abs_diff(db1, db2) <= sum_bound_best(N, dy_cols));

    const Tensor g = random_tensor({E}, 5), bb = random_tensor({E}, 6);
    Tensor ya, yb, ha, hb, ra, rb;
    ref->layer_norm(x, g, bb, 1e-5f, ya, ha, ra);
    cpu->layer_norm(x, g, bb, 1e-5f, yb, hb, rb);
    CHECK(max_abs_diff(ya, yb) <= layer_norm_bound(x, g, ra, ya));  // tests/engine/pass_bound.h
    Tensor dxa, dxb, dga({E}), dgb({E}), dba({E}), dbb({E});
    const Tensor dyl = random_tensor({N, E}, 7);
    ref->layer_norm_backward(ha, ra, g, dyl, dxa, dga, dba);
    cpu->layer_norm_backward(hb, rb, g, dyl, dxb, dgb, dbb);
    const LnGradBound ln_tol = ln_backward_bound(ha, ra, hb, rb, g, dyl, dxa);
    if (E > 1) CHECK(max_abs_diff(dxa, dxb) <= ln_tol.dx);  // E == 1 normalises to 0: dx is noise / rstd
    CHECK(max_abs_diff(dga, dgb) <= ln_tol.dg);
    CHECK(max_abs_diff(dba, dbb) <= ln_tol.db);

    std::vector<uint8_t> pad(static_cast<size_t>(N), 0);
    for (int bi = 0; bi < sh.B; ++bi)
      if (bi % 2 == 1 && sh.T > 2) pad[static_cast<size_t>(bi * sh.T + sh.T - 1)] = 1;
    std::vector<uint8_t> keep(static_cast<size_t>(sh.B * sh.H * sh.T * sh.T));
    std::mt19937 rng(5);
    for (auto& k : keep) k = rng() % 4 != 0;
    const Tensor rel = random_tensor({2 * max_len - 1, E}, 8, 0.3f);
    for (const bool variant : {false, true}) {
      const AttnArgs s = attn_shape(sh.B, sh.T, sh.H, sh.D, &pad, variant, variant ? &rel : nullptr, max_len,
                                    variant ? &keep : nullptr);
      const Tensor Q = random_tensor({N, E}, 9), K = random_tensor({N, E}, 10), V = random_tensor({N, E}, 11);
      Tensor P1, P2, c1, c2;
      ref->attention(s, Q, K, V, P1, c1);
      cpu->attention(s, Q, K, V, P2, c2);
      // Probabilities: the scores' own rounding (pass_bound.h's scores_local: D products, 2 D with
      // the relative term, 5 u for the scale and the shift), softmax_bound over T keys relative to p.
      // Context: sum_j keep sd P_ij V_j over T keys; |dP| <= P sigma reaches it as sd sigma sum_j P_ij
      // |V_j| (dropout breaks the cancellation pass_bound uses), the dropped P's rounding adds u of
      // it, and the sum rounds: sum_bound_best of sd sum_j P_ij |V_j|.
      pass_detail::AttnInfo info;
      info.scale = s.score_scale(), info.D = sh.D, info.rel = variant;
      info.Q2 = pass_detail::max_block_norm(Q, sh.D), info.K2 = pass_detail::max_block_norm(K, sh.D);
      info.R2 = variant ? pass_detail::max_block_norm(rel, sh.D) : 0.0;
      const double sigma = softmax_bound(sh.T, pass_detail::scores_local(info, 0.0) + kCpuPass.fn_err * kU32);
      double pv = 0;  // largest sum_j keep sd P_ij |V_jd|
      for (int bh = 0; bh < sh.B * sh.H; ++bh)
        for (int i = 0; i < sh.T; ++i)
          for (int d = 0; d < sh.D; ++d) {
            const int bi = bh / sh.H, hi = bh % sh.H;
            const size_t row = (static_cast<size_t>(bh) * sh.T + i) * sh.T;
            double a = 0;
            for (int j = 0; j < sh.T; ++j) {
              const double kd = variant ? (keep[row + static_cast<size_t>(j)] ? s.drop_scale : 0.0) : 1.0;
              a += kd * P1.data[row + static_cast<size_t>(j)] * std::fabs(V.at(bi * sh.T + j, hi * sh.D + d));
            }
            pv = std::max(pv, a);
          }
      CHECK(max_abs_diff(P1, P2) <= max_abs(P1) * sigma);
      CHECK(max_abs_diff(c1, c2) <= pv * (sigma + kU32) + sum_bound_best(sh.T, pv));
      const Tensor dc = random_tensor({N, E}, 12);
      Tensor q1, k1, v1, q2, k2, v2, r1(rel.shape), r2(rel.shape);
      ref->attention_backward(s, Q, K, V, P1, dc, q1, k1, v1, variant ? &r1 : nullptr);
      cpu->attention_backward(s, Q, K, V, P2, dc, q2, k2, v2, variant ? &r2 : nullptr);
      // each side given its own forward's P: tests/engine/test_util.h
      const AttnGradBound grad_tol = attention_backward_bound(s, Q, K, V, P1, P2, dc);
      CHECK(max_abs_diff(q1, q2) <= grad_tol.dq);
      CHECK(max_abs_diff(k1, k2) <= grad_tol.dk);
      CHECK(max_abs_diff(v1, v2) <= grad_tol.dv);
      if (variant) CHECK(max_abs_diff(r1, r2) <= grad_tol.drel);
    }
  }
}

namespace {

Model tiny_model(NormPlacement norm, Activation act, Positional pos, Pooling pool, uint64_t seed, int ff = 6,
                 bool extras = false) {
  ModelConfig c;
  c.vocab_size = 12, c.embed_size = 8, c.num_heads = 2, c.num_layers = 2, c.ff_dim = ff, c.max_len = 6;
  c.num_classes = 3, c.norm = norm, c.activation = act, c.positional = pos, c.pooling = pool;
  c.labels = {"a", "b", "c"};
  if (extras) add_extras(c);
  Model m = random_model(c, seed);
  // Non-trivial LayerNorm gains and biases, so their gradients are exercised too.
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.2f);
  std::vector<Tensor*> norms = {&m.weights.emb_ln_g, &m.weights.emb_ln_b, &m.weights.final_ln_g, &m.weights.final_ln_b};
  for (auto& L : m.weights.layers)
    for (Tensor* t : {&L.ln1_g, &L.ln1_b, &L.ln2_g, &L.ln2_b}) norms.push_back(t);
  for (Tensor* t : norms)
    for (float& v : t->data) v += n(rng);
  return m;
}

// What one float32 training step on seqs (padded to the longest, the padding mask, no causal mask)
// can err by, from pass_bound of each sequence run as inference the same way (the same math):
//   loss: the batch's mean cross-entropy has gradient (softmax - one-hot) / B with respect to each
//     sequence's logits, of 1-norm at most 2 / B, so it moves by at most 2 max_b |d logits_b|;
//   rel: the hidden states' bound over their size, the forward's relative error.
// Dropout scales the kept attention probabilities and both residual branches by 1 / (1 - p), and
// the roundings they carry with them: at most two such factors on any path through a layer.
struct StepBound {
  double loss = 0, rel = 0;
};
StepBound step_bound(const Model& m, const std::vector<std::vector<int>>& seqs, float dropout,
                     const PassSetup& setup = kCpuPass) {
  size_t T = 0;
  for (const auto& q : seqs) T = std::max(T, q.size());
  auto ref = make_backend("reference");
  const double grow = std::pow(1.0 / (1.0 - dropout), 2 * m.config.num_layers);
  StepBound out;
  for (const auto& q : seqs) {
    ForwardRequest req;
    req.ids = pad_ids(m, q, static_cast<int>(T));
    req.mask.padding = true;
    const ForwardResult r = run_forward(m, *ref, req);
    const PassBound pb = pass_bound(m, req, r, setup);
    out.loss = std::max(out.loss, 2 * pb.logits * grow);
    out.rel = std::max(out.rel, pb.hidden * grow / max_abs(r.hidden));
  }
  return out;
}

// Parameter gradients of two float32 steps: each entry sums, over the batch's N rows, products of
// the forward's values with the backward's; the backward mirrors the forward's reductions (the
// same lengths, transposed), so the terms carry twice the forward's relative error rel, and the
// row sum rounds (sum_bound_best(N, 1) relative), both relative to the terms' abs_sum. That abs_sum
// is a stated bound, not a measured one: N times the step's largest gradient entry (no row's term
// exceeds the largest gradient in these small random models, whose rows do not cancel
// systematically).
double grad_bound(const StepBound& sb, int N, const std::vector<Tensor*>& grads) {
  double gmax = 0;
  for (const Tensor* t : grads) gmax = std::max(gmax, max_abs(*t));
  return (2 * sb.rel + sum_bound_best(N, 1.0)) * N * gmax;
}

}  // namespace

TEST_CASE("whole-model backward matches finite differences", "[train][fd]") {
  struct V {
    NormPlacement norm;
    Activation act;
    Positional pos;
    Pooling pool;
    float dropout;
    int ff;
    bool extras = false;
  };
  for (const V v :
       {V{NormPlacement::Post, Activation::Gelu, Positional::Learned, Pooling::Mean, 0.0f, 6},
        V{NormPlacement::Pre, Activation::Gelu, Positional::Relative, Pooling::MaskedMean, 0.0f, 6},
        V{NormPlacement::Post, Activation::Gelu, Positional::Sinusoidal, Pooling::Cls, 0.2f, 6},
        V{NormPlacement::Pre, Activation::Relu, Positional::Learned, Pooling::MaskedMean, 0.3f, 6},
        V{NormPlacement::Post, Activation::Relu, Positional::None, Pooling::Mean, 0.0f, 0},
        V{NormPlacement::Post, Activation::GeluTanh, Positional::Learned, Pooling::Cls, 0.0f, 6, true},
        V{NormPlacement::Pre, Activation::GeluTanh, Positional::Relative, Pooling::MaskedMean, 0.2f, 6, true}}) {
    CAPTURE(to_string(v.norm), to_string(v.act), to_string(v.pos), to_string(v.pool), v.dropout, v.ff, v.extras);
    Model m = tiny_model(v.norm, v.act, v.pos, v.pool, 17, v.ff, v.extras);
    auto ops = make_reference_ops();
    const std::vector<std::vector<int>> seqs = {{3, 4, 5, 6, 7}, {8, 9, 3}, {10, 11, 4, 5}};
    const TrainBatch batch = make_batch(m, seqs, {0, 2, 1});
    StepOptions opt;
    opt.dropout = v.dropout;
    opt.dropout_seed = 99;  // the same dropout masks for every evaluation below
    ModelWeights grads = zeros_like(m.weights);
    train_step(m, *ops, batch, opt, &grads);
    auto loss = [&] { return train_step(m, *ops, batch, opt, nullptr).loss; };
    // The loss's float32 error (step_bound of the reference ops against exact arithmetic; the steps
    // below move the model's scales by O(h), left out), and the loss itself at the unperturbed weights.
    const double f_err = step_bound(m, seqs, v.dropout, kReferencePass).loss, base = loss();
    const auto params = parameters(m.weights);
    const auto gparams = parameters(grads);
    REQUIRE(params.size() == gparams.size());
    const int checked = check_parameter_grads(params, gparams, loss, f_err, 1, [&](float h, double up, double down) {
      // ReLU makes f only piecewise smooth: where a unit switches inside +-h, the central difference
      // averages the two one-sided slopes and misses the backward's by half their difference,
      // which the one-sided differences measure: |f(x+h) - 2 f(x) + f(x-h)| / 2h, with its own
      // rounding 2 f_err / h (one switching unit; it also counts h |f''| / 2 where f is smooth).
      return v.act == Activation::Relu ? std::fabs(up - 2 * base + down) / (2.0 * h) + 2 * f_err / h : 0.0;
    });
    CHECK(checked > 60);
  }
}

TEST_CASE("cpu training step matches the reference step", "[train][cpu]") {
  for (const Positional pos : {Positional::Sinusoidal, Positional::Relative}) {
    Model m = tiny_model(NormPlacement::Post, Activation::Gelu, pos, Pooling::MaskedMean, 5);
    m.config.max_len = 6;
    auto ref = make_reference_ops();
    auto cpu = make_ops("cpu");
    const std::vector<std::vector<int>> seqs = {{3, 4, 5, 6, 7, 8}, {8, 9, 3}, {10}};
    const TrainBatch batch = make_batch(m, seqs, {0, 2, 1});
    StepOptions opt;
    opt.dropout = 0.1f;
    opt.dropout_seed = 4;
    ModelWeights g1 = zeros_like(m.weights), g2 = zeros_like(m.weights);
    const StepOutput a = train_step(m, *ref, batch, opt, &g1);
    const StepOutput b = train_step(m, *cpu, batch, opt, &g2);
    const StepBound tol = step_bound(m, seqs, opt.dropout);
    CHECK(std::fabs(a.loss - b.loss) <= tol.loss);
    const auto p1 = parameters(g1), p2 = parameters(g2);
    const double grad_tol = grad_bound(tol, batch.B * batch.T, p1);
    for (size_t p = 0; p < p1.size(); ++p) CHECK(max_abs_diff(*p1[p], *p2[p]) <= grad_tol);
  }
}

TEST_CASE("activation checkpointing: the same loss and bit-identical gradients, dropout included",
          "[train][checkpoint]") {
  for (const NormPlacement norm : {NormPlacement::Post, NormPlacement::Pre})
    for (const char* backend : {"reference", "cpu"}) {
      Model m = tiny_model(norm, Activation::Gelu, Positional::Relative, Pooling::MaskedMean, 5);
      m.config.max_len = 6;
      auto ops = make_ops(backend);
      const TrainBatch batch = make_batch(m, {{3, 4, 5, 6, 7, 8}, {8, 9, 3}, {10}}, {0, 2, 1});
      StepOptions opt;
      opt.dropout = 0.2f;
      opt.dropout_seed = 11;
      ModelWeights g1 = zeros_like(m.weights), g2 = zeros_like(m.weights);
      const StepOutput a = train_step(m, *ops, batch, opt, &g1);
      opt.checkpoint = true;
      const StepOutput b = train_step(m, *ops, batch, opt, &g2);
      CHECK(a.loss == b.loss);
      const auto p1 = parameters(g1), p2 = parameters(g2);
      REQUIRE(p1.size() == p2.size());
      double worst = 0, total = 0;
      for (size_t p = 0; p < p1.size(); ++p) {
        worst = std::max(worst, max_abs_diff(*p1[p], *p2[p]));
        for (float v : p1[p]->data) total += std::fabs(v);
      }
      CHECK(worst == 0.0);
      CHECK(total > 0.0);  // gradients that exist
    }
}

TEST_CASE("training forward equals inference forward over the whole sweep", "[train][plan]") {
  // Both run the one layer plan, but through different attention kernels (batches with padding
  // and causal flags vs one sequence with any mask) and different callers: any drift between
  // training and what the app shows fails here. Two float32 passes of the same values (the
  // training step's head runs on the cpu ops, inference's on the reference ops): pass_bound.
  auto cpu_ops = make_ops("cpu");
  auto cpu = make_backend("cpu");
  for (const int H : {1, 2, 8, 16})
    for (const Pooling pool : {Pooling::Mean, Pooling::MaskedMean, Pooling::Cls})
      for_each_config({{1, 16, H, 2, 24}, {7, 16, H, 2, 24}, {200, 16, H, 2, 24}},
                      [&](const ShapeCase& sh, ModelConfig c) {
                        CAPTURE(to_string(pool));
                        c.max_len = 256;
                        c.pooling = pool;
                        const Model m = random_model(c, static_cast<uint64_t>(sh.T * 31 + H));
                        const std::vector<int> ids = random_ids(sh.T, c.vocab_size, static_cast<uint64_t>(H));
                        StepOptions opt;
                        opt.keep_attention = true;
                        const StepOutput s = train_step(m, *cpu_ops, make_batch(m, {ids}, {1}), opt, nullptr);
                        ForwardRequest req;
                        req.ids = ids;
                        const ForwardResult r = run_forward(m, *cpu, req);
                        const PassBound tol = pass_bound(m, req, r);
                        for (int l = 0; l < c.num_layers; ++l) {
                          Tensor p = s.attention[static_cast<size_t>(l)];
                          p.shape.erase(p.shape.begin());  // batch of one
                          CHECK(max_abs_diff(p, r.probs(l)) <= tol.probs[static_cast<size_t>(l)]);
                        }
                        for (int k = 0; k < c.num_classes; ++k)
                          CHECK(std::fabs(s.logits.at(0, k) - r.logits[static_cast<size_t>(k)]) <= tol.logits);
                        CHECK(s.predicted[0] == r.predicted);
                      });
}

TEST_CASE("a padded training batch equals inference of each padded sequence with the padding mask", "[train][plan]") {
  for (const Positional pos : {Positional::Learned, Positional::Relative})
    for (const NormPlacement norm : {NormPlacement::Post, NormPlacement::Pre}) {
      ModelConfig c = small_config(16, 4, 2, 24, 64);
      c.positional = pos, c.norm = norm, c.pooling = Pooling::MaskedMean;
      const Model m = random_model(c, 9);
      for (const std::string ops_name : {"reference", "cpu"}) {
        CAPTURE(to_string(pos), to_string(norm), ops_name);
        auto ops = make_ops(ops_name);
        auto backend = make_backend(ops_name);
        const std::vector<std::vector<int>> seqs = {random_ids(1, c.vocab_size, 1), random_ids(9, c.vocab_size, 2),
                                                    random_ids(30, c.vocab_size, 3)};
        StepOptions opt;
        opt.keep_attention = true;
        const StepOutput s = train_step(m, *ops, make_batch(m, seqs, {0, 1, 2}), opt, nullptr);
        const std::vector<ForwardResult> r = run_forward_batch(m, *backend, seqs, MaskSpec{});
        const int64_t per_seq = s.attention[0].numel() / 3;
        for (int b = 0; b < 3; ++b) {
          // the same math as inference of the padded sequence with the padding mask: pass_bound
          ForwardRequest padded;
          padded.ids = r[static_cast<size_t>(b)].ids;
          padded.mask.padding = true;
          const PassBound tol = pass_bound(m, padded, r[static_cast<size_t>(b)]);
          for (int l = 0; l < c.num_layers; ++l) {
            const Tensor& all = s.attention[static_cast<size_t>(l)];
            Tensor p({c.num_heads, 30, 30});
            std::copy(all.data.begin() + b * per_seq, all.data.begin() + (b + 1) * per_seq, p.data.begin());
            CHECK(max_abs_diff(p, r[static_cast<size_t>(b)].probs(l)) <= tol.probs[static_cast<size_t>(l)]);
          }
          for (int k = 0; k < c.num_classes; ++k)
            CHECK(std::fabs(s.logits.at(b, k) - r[static_cast<size_t>(b)].logits[static_cast<size_t>(k)]) <=
                  tol.logits);
        }
      }
    }
}

TEST_CASE("the layer plan: one list of steps per norm placement", "[train][plan]") {
  for (const NormPlacement norm : {NormPlacement::Post, NormPlacement::Pre})
    for (const int ff : {0, 24}) {
      CAPTURE(to_string(norm), ff);
      ModelConfig c = small_config(16, 2, 1, ff, 20);
      c.norm = norm;
      const LayerPlan plan = make_layer_plan(c);
      INFO(plan.describe());
      std::map<OpKind, int> count;
      std::vector<int> written(static_cast<size_t>(plan.values), 0);
      for (const Step& s : plan.steps) {
        ++count[s.op];
        ++written[static_cast<size_t>(s.out)];
        for (int in : s.in) CHECK(in < s.out);  // reads only values written before
      }
      CHECK(std::count(written.begin() + 1, written.end(), 1) == plan.values - 1);  // each value written once
      CHECK(count[OpKind::Attention] == 1);
      CHECK(count[OpKind::LayerNorm] == (ff > 0 ? 2 : 1));
      CHECK(count[OpKind::Activation] == (ff > 0 ? 1 : 0));
      CHECK(count[OpKind::Linear] == (ff > 0 ? 6 : 4));
      CHECK(count[OpKind::Add] == (ff > 0 ? 2 : 1));
      const OpKind last = plan.steps.back().op;
      CHECK(plan.steps.back().out == plan.output);
      // post-norm ends in a LayerNorm, pre-norm in the residual Add; pre-norm's q reads LN1(x)
      CHECK(last == (norm == NormPlacement::Post ? OpKind::LayerNorm : OpKind::Add));
      const Step& att = plan.steps[static_cast<size_t>(plan.attention_step)];
      const std::vector<int> q_steps = steps_for(plan, att.in[0]);
      CHECK(q_steps.size() == (norm == NormPlacement::Pre ? 2u : 1u));
      CHECK(plan.steps[static_cast<size_t>(q_steps.back())].w == &LayerWeights::wq);
    }
}

TEST_CASE("bf16 training: backward products against a plain reference on bf16-rounded inputs, and a step near fp32",
          "[train][bf16]") {
  if (!bf16_available()) {
    CHECK_THROWS_WITH(make_ops("cpu-bf16"), Catch::Contains("oneDNN"));
    return;
  }
  auto bf = make_ops("cpu-bf16");
  auto round = [](float v) {
    const uint32_t u = static_cast<uint32_t>(to_bf16_bits(v)) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return static_cast<double>(f);
  };
  // linear_backward: dx = dy W and dW += dy^T x, both as bf16 products with fp32 sums
  for (const auto& [N, in, out] : std::vector<std::array<int, 3>>{{1, 1, 1}, {1, 5, 3}, {7, 17, 9}, {130, 96, 33}}) {
    CAPTURE(N, in, out);
    const Tensor x = random_tensor({N, in}, 1), W = random_tensor({out, in}, 2), dy = random_tensor({N, out}, 3);
    Tensor dx, dW = random_tensor({out, in}, 4), db({out});
    const Tensor dW0 = dW;
    bf->linear_backward(x, W, dy, &dx, dW, db);
    double worst = 0;
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < in; ++k) {
        double s = 0, mag = 0;
        for (int o = 0; o < out; ++o)
          s += round(dy.at(n, o)) * round(W.at(o, k)), mag += std::fabs(round(dy.at(n, o)) * round(W.at(o, k)));
        // mag > 0 here (random inputs); 1e-6 only keeps a 0 / 0 out of an all-zero row
        worst = std::max(worst, std::fabs(dx.at(n, k) - s) / (mag + 1e-6));
      }
    for (int o = 0; o < out; ++o)
      for (int k = 0; k < in; ++k) {
        double s = dW0.at(o, k), mag = std::fabs(s);
        for (int n = 0; n < N; ++n)
          s += round(dy.at(n, o)) * round(x.at(n, k)), mag += std::fabs(round(dy.at(n, o)) * round(x.at(n, k)));
        worst = std::max(worst, std::fabs(dW.at(o, k) - s) / (mag + 1e-6));  // accumulated onto what was there
      }
    // bf16 products are exact in fp32: only the fp32 sums round, in any order: dx sums out terms,
    // dW N terms onto dW0; gamma of the longer, relative to mag (s is in double)
    CHECK(worst <= gamma32(std::max(out, N + 1) + 1));
  }
  // a whole step: the loss and gradients near fp32's (bf16 keeps 8 bits of mantissa)
  Model m = tiny_model(NormPlacement::Post, Activation::Gelu, Positional::Learned, Pooling::MaskedMean, 30, 16);
  const std::vector<std::vector<int>> seqs = {{3, 4, 5, 6, 7}, {8, 9, 3}, {10, 11, 4, 5}};
  const TrainBatch batch = make_batch(m, seqs, {0, 2, 1});
  ModelWeights g32 = zeros_like(m.weights), g16 = zeros_like(m.weights);
  auto cpu = make_ops("cpu");
  const StepOutput a = train_step(m, *cpu, batch, {}, &g32);
  const StepOutput b = train_step(m, *bf, batch, {}, &g16);
  // Every linear layer's products run in bf16 here (attention stays float32 in training), so the
  // logits come after 4 L + 1 chained bf16 products (per layer the value and output projections
  // and the two feed-forward ones, then the classifier): bf16_rel(4 L + 1) of the 2-norm of the
  // classifier's terms, sqrt(sum_k (x_k w_ck)^2) + |b_c| (measured on each sequence's reference
  // pass). The loss moves by at most 2 max |d logits| (step_bound's argument); plus both steps'
  // float32 roundings (step_bound).
  const int L = m.config.num_layers;
  double terms = 0;
  {
    auto ref = make_backend("reference");
    auto ref_ops = make_reference_ops();
    for (const auto& q : seqs) {
      ForwardRequest req;
      req.ids = pad_ids(m, q, batch.T);
      req.mask.padding = true;
      const ForwardResult r = run_forward(m, *ref, req);
      HeadState st;
      head_forward(m, *ref_ops, r.hidden, pad_flags(m, req.ids), 1, batch.T, st);
      const Tensor& in = m.config.pooler ? st.pooler_out : st.pooled;
      for (int64_t c = 0; c < m.weights.fc_w.dim(0); ++c) {
        double t2 = 0;
        for (int64_t e = 0; e < in.dim(1); ++e)
          t2 += std::pow(static_cast<double>(in.at(0, e)) * m.weights.fc_w.at(c, e), 2);
        terms = std::max(terms, std::sqrt(t2) + std::fabs(m.weights.fc_b.data[static_cast<size_t>(c)]));
      }
    }
  }
  const StepBound fp32_tol = step_bound(m, seqs, 0.0f);
  CHECK(std::fabs(b.loss - a.loss) <= 2 * bf16_rel(4.0 * L + 1) * terms + fp32_tol.loss);
  // Gradients: the backward mirrors those products (each linear layer's dx and dW round dy and W or
  // x to bf16), after the forward's: bf16_rel(2 (4 L + 1)) relative to each tensor's 2-norm (the
  // typical rule: errors of independent entries keep their relative size in the 2-norm); plus the
  // float32 part as grad_bound counts it (twice the forward's relative error and the N-row sum's),
  // relative to the same norm.
  const auto p32 = parameters(g32), p16 = parameters(g16);
  const double rel = bf16_rel(2 * (4.0 * L + 1)) + 2 * fp32_tol.rel + sum_bound_best(batch.B * batch.T, 1.0);
  auto norm2 = [](const Tensor& t) {
    double n = 0;
    for (float v : t.data) n += static_cast<double>(v) * v;
    return std::sqrt(n);
  };
  for (size_t p = 0; p < p32.size(); ++p) {
    double diff = 0;
    for (size_t k = 0; k < p32[p]->data.size(); ++k)
      diff += std::pow(static_cast<double>(p32[p]->data[k]) - p16[p]->data[k], 2);
    // The key bias's gradient is zero in exact arithmetic (adding q . b_k to every score of a row
    // leaves the softmax unchanged): both sides hold only the rounding of sum_j dk_j, whose terms
    // dS_ij q_i have the size of the query bias's gradient terms dS_ij k_j, so its norm stands in.
    double scale = norm2(*p32[p]);
    for (size_t l = 0; l < g32.layers.size(); ++l)
      if (p32[p] == &g32.layers[l].bk) scale = std::max(scale, norm2(g32.layers[l].bq));
    INFO("parameter " << p);
    CHECK(std::sqrt(diff) <= rel * scale);
  }
}
