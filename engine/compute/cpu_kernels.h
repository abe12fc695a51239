// Small Eigen kernels of the cpu ops (ops_cpu.cpp): fixed-order sums, row-wise LayerNorm,
// masked softmax rows. Everything here is written so results do not depend on the alignment of
// the buffers (see stable_sum and masked_softmax_row).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include <Eigen/Core>

namespace attnlab::kernels {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Sum in a fixed order, whatever the buffer's alignment: Eigen's vectorised .sum() starts its
// packets at the first aligned element, so the same row summed from two allocations can differ
// in the last bit, and results would change with the heap. Eight lanes still vectorise.
inline float stable_sum(const float* v, Eigen::Index n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  Eigen::Index j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k) acc[k] += v[j + k];
  float tail = 0;
  for (; j < n; ++j) tail += v[j];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

// Sum of squares in the same fixed order.
inline float stable_sum_sq(const float* v, Eigen::Index n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  Eigen::Index j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k) acc[k] += v[j + k] * v[j + k];
  float tail = 0;
  for (; j < n; ++j) tail += v[j] * v[j];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

// One row of LayerNorm in place: x <- (x - mean) * rstd, returns rstd. The caller applies g, b.
inline float normalize_row(float* p, Eigen::Index n, float eps) {
  Eigen::Map<Eigen::ArrayXf> row(p, n);
  const float inv_n = 1.0f / static_cast<float>(n);
  const float mean = stable_sum(p, n) * inv_n;
  row -= mean;
  const float rstd = 1.0f / std::sqrt(stable_sum_sq(p, n) * inv_n + eps);
  row *= rstd;
  return rstd;
}

// Softmax of one score row in place, over the keys the mask leaves visible. Blocked keys end at
// exactly 0 (Eigen's exp clamps -inf to a tiny positive number, so they are zeroed explicitly);
// a row with every key blocked ends all zeros. The work happens in `buf` (aligned, owned by the
// caller): Eigen computes an unaligned row's first elements with std::exp and the rest with its
// own vectorised exp, which differ in the last bit, so working in place would make results
// depend on where the row happens to start in memory.
inline void masked_softmax_row(float* row, int S, const uint8_t* blocked, const float* additive, Eigen::ArrayXf& buf) {
  buf = Eigen::Map<const Eigen::ArrayXf>(row, S);
  if (additive) buf += Eigen::Map<const Eigen::ArrayXf>(additive, S);
  if (blocked) {
    bool any_visible = false;
    for (int j = 0; j < S; ++j) {
      if (blocked[j])
        buf[j] = -std::numeric_limits<float>::infinity();
      else
        any_visible = true;
    }
    if (!any_visible) {
      std::fill(row, row + S, 0.0f);
      return;
    }
  }
  const float m = buf.maxCoeff();
  buf = (buf - m).exp();
  if (blocked)
    for (int j = 0; j < S; ++j)
      if (blocked[j]) buf[j] = 0.0f;
  const float inv = 1.0f / stable_sum(buf.data(), S);
  for (int j = 0; j < S; ++j) row[j] = buf[j] * inv;
}

}  // namespace attnlab::kernels
