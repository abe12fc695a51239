// Finite-difference checks of a backward: each parameter entry's central difference against the
// gradient the backward gave, within the bound measured from the loss itself (tolerance.h).
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/core/tensor.h"
#include "tests/engine/tolerance.h"

namespace attnlab::test {

inline void check_grad(double fd, double an, double bound, const std::string& what) {
  INFO(what << ": finite difference " << fd << ", backward " << an << ", bound " << bound);
  CHECK(std::fabs(fd - an) <= bound);
}

// A few entries of every parameter tensor (all of the small ones; the others drawn with `seed`):
// (f(x + h) - f(x - h)) / 2h against grads, within measured_central_diff_bound (the third
// derivative measured from f(x +- 2h)) plus extra(h, f(x + h), f(x - h)) (a piecewise-smooth
// loss's share). Returns how many entries were checked.
template <class Loss, class Extra>
int check_parameter_grads(const std::vector<Tensor*>& params, const std::vector<Tensor*>& grads, Loss loss,
                          double f_err, unsigned seed, Extra extra) {
  std::mt19937 pick(seed);
  int checked = 0;
  for (size_t p = 0; p < params.size(); ++p) {
    const size_t n = params[p]->data.size();
    for (int r = 0; r < 4; ++r) {
      const size_t k = n <= 4 ? static_cast<size_t>(r) : pick() % n;
      if (k >= n) break;
      Tensor& x = *params[p];
      const float h = 1e-2f, keep = x.data[k];
      auto at = [&](float d) {
        x.data[k] = keep + d;
        const double f = loss();
        x.data[k] = keep;
        return f;
      };
      const double up = at(h), down = at(-h), up2 = at(2 * h), down2 = at(-2 * h);
      const double bound = measured_central_diff_bound(h, keep, f_err, up, down, up2, down2) + extra(h, up, down);
      check_grad((up - down) / (2.0 * h), grads[p]->data[k], bound, "parameter " + std::to_string(p));
      ++checked;
    }
  }
  return checked;
}

}  // namespace attnlab::test
