// Error bounds for comparing float32 results, derived from the computation: the unit roundoff,
// the reduction length and the values' scale. A bound written here holds on every CPU of our
// kind (AMD or Intel, any oneDNN instruction set, Eigen instead of oneDNN), because it does not
// depend on the order in which a particular kernel sums. Python's twin is tests/crosscheck/pyutil.py.
#pragma once

#include <algorithm>
#include <cmath>

namespace attnlab::test {

// float32 unit roundoff u = 2^-24 (half of FLT_EPSILON): a correctly rounded +, *, /, sqrt or a
// fused multiply-add errs by at most u relative.
inline constexpr double kU32 = 0x1p-24;
// bf16's unit roundoff (8 significant bits): 2^-8.
inline constexpr double kUBf16 = 0x1p-8;

// gamma_K = K u / (1 - K u): a float32 sum of K terms, in any order, errs by at most gamma_K times
// the sum of the terms' magnitudes (Higham, Accuracy and Stability of Numerical Algorithms,
// 2nd ed., eq. 3.5; a dot product adds one rounding per product, hence K + 1).
inline double gamma32(double K) {
  return K * kU32 / (1.0 - K * kU32);
}

// |a - b| for two float32 evaluations of one sum of K terms whose magnitudes add up to
// `abs_sum` (for a dot product, sum_k |x_k y_k|), in any two orders (blocked, vectorised, with
// or without FMA): each errs by at most gamma_{K+1} abs_sum, so they differ by at most twice
// that. Rigorous, on any CPU.
inline double sum_bound(double K, double abs_sum) {
  return 2.0 * gamma32(K + 1) * abs_sum;
}

// The same, probabilistically: independent roundings add like a random walk, so with
// probability at least 1 - 2 exp(-lambda^2 / 2) each evaluation errs by at most
// lambda sqrt(K) u abs_sum (Higham & Mary, "A new approach to probabilistic rounding error
// analysis", SIAM J. Sci. Comput. 2019, Thm. 2.4). lambda = 8: 2.5e-14 per entry, so a test
// comparing a million entries fails by chance once in 4e7 runs. Use it where the rigorous
// bound is too loose to still catch a wrong result (long reductions, deep stacks).
inline double sum_bound_prob(double K, double abs_sum, double lambda = 8.0) {
  return 2.0 * lambda * std::sqrt(K + 1) * kU32 * abs_sum;
}

// sum_bound and sum_bound_prob are both bounds (the second with the probability stated there), so
// the smaller one is too: the rigorous one wins for K + 1 < lambda^2 = 64 terms, the random-walk
// one for longer sums (T = 1000 keys, N = 200 rows of a weight gradient).
inline double sum_bound_best(double K, double abs_sum) {
  return std::min(sum_bound(K, abs_sum), sum_bound_prob(K, abs_sum));
}

// Softmax over T entries whose inputs (scores) are known to within `score_err` (absolute):
// p_i = e^{s_i} / sum_j e^{s_j} moves by at most p_i (e^{2 score_err} - 1) from the inputs,
// plus the roundings of exp (a few ulp: Eigen's and libm's float exp are within 2 ulp), the
// row sum of T terms (gamma_T) and the division; p_i <= 1 makes that an absolute bound.
inline double softmax_bound(double T, double score_err) {
  return std::expm1(2.0 * score_err) + 2.0 * (gamma32(T) + 4.0 * kU32);
}

// An error that each of `layers` blocks adds (`per_layer`) and that each later block can
// amplify by at most `gain` (its Lipschitz constant at the values involved):
// per_layer (1 + gain + ... + gain^{layers-1}).
inline double through_layers(double per_layer, int layers, double gain) {
  double total = 0, g = 1;
  for (int l = 0; l < layers; ++l, g *= gain) total += per_layer * g;
  return total;
}

// Central finite differences (f(x+h) - f(x-h)) / 2h of a function computed in float32:
// truncation error h^2/6 |f'''| (`third_scale` bounds |f'''| near x) plus the two evaluations'
// own float32 errors (`f_err` each) divided by 2h.
inline double central_diff_bound(double h, double f_err, double third_scale) {
  return h * h / 6.0 * third_scale + f_err / h;
}

// bf16 against float32 after `stages` chained products whose operands were rounded to bf16. Round
// to nearest makes independent errors spread evenly within +-u_b relative (standard deviation
// u_b / sqrt 3 each): a product of two rounded operands errs by sqrt(2/3) u_b relative in standard
// deviation, a sum of such products by that much of the 2-norm of its terms; later stages carry an
// error on with rms gain <= 1 (tests/engine/pass_bound.h's typical rule) and add their own, independent:
// sqrt(2 stages / 3) u_b after `stages`. Their sum is near-Gaussian: lambda standard deviations,
// exceeded with probability ~2 exp(-lambda^2 / 2) per value (lambda = 6: 3e-8). A worst case (2 u_b
// of every sum's abs_sum, adding up stage by stage) is 5 to 20 times what bf16 does and would let
// anything pass. Relative to the 2-norm of the terms of the value compared.
inline double bf16_rel(double stages, double lambda = 6.0) {
  return lambda * std::sqrt(2.0 * stages / 3.0) * kUBf16;
}

// The step of a central difference taken in float32: x + h and x - h each round by at most
// u |x +- h|, so the step actually taken differs from 2h by at most 2u (|x| + h), and the quotient
// (f(x+h) - f(x-h)) / 2h misses the derivative `grad` by a further |grad| u (|x| + h) / h.
inline double step_rounding_bound(double h, double x, double grad) {
  return std::fabs(grad) * kU32 * (std::fabs(x) + h) / h;
}

// A central difference checked with f''' measured rather than assumed: f evaluated at x +- h and
// x +- 2h (up, down, up2, down2), f''' from the five-point stencil
// (f(x+2h) - 2 f(x+h) + 2 f(x-h) - f(x-2h)) / 2h^3 plus that stencil's own rounding 3 f_err / h^3,
// twice over (f''' varies over the step); then central_diff_bound and the step's rounding.
inline double measured_central_diff_bound(double h, double x, double f_err, double up, double down, double up2,
                                          double down2) {
  const double h3 = h * h * h, fd = (up - down) / (2 * h);
  const double third = 2 * (std::fabs(up2 - 2 * up + 2 * down - down2) / (2 * h3) + 3 * f_err / h3);
  return central_diff_bound(h, f_err, third) + step_rounding_bound(h, x, fd);
}

}  // namespace attnlab::test
