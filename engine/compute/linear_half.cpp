#include "engine/compute/linear_half.h"

#include "engine/core/tuning.h"

#include <algorithm>
#include <bit>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <cstring>
#include <string>

namespace attnlab {

namespace {

constexpr int kLanes = 16;  // float32 partial sums a register holds (512 bits)

// y[r][c] = sum_i x[r][i] w[c][i] for RX rows of x (in apart) and RW rows of a BF16 matrix (in
// apart), written at y[r * ys + c]: RX x RW sums of kLanes float32 lanes each, added at the end;
// the last in % 16 terms one by one. With AVX-512 they live in registers (a widening shift and a
// multiply-add a vector; RX x RW <= 16 accumulators, each x and w vector loaded once a step);
// else plain loops of the same sums.
#if defined(__AVX512F__)
template <int RX, int RW>
void bf16_block(const float* x, int64_t in, const uint16_t* w, float* y, int64_t ys) {
  __m512 acc[RX][RW];
  for (int r = 0; r < RX; ++r)
    for (int c = 0; c < RW; ++c) acc[r][c] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + kLanes <= in; i += kLanes) {
    __m512 wv[RW];
    for (int c = 0; c < RW; ++c) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + c * in + i));
      wv[c] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    for (int r = 0; r < RX; ++r) {
      const __m512 xv = _mm512_loadu_ps(x + r * in + i);
      for (int c = 0; c < RW; ++c) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < RX; ++r)
    for (int c = 0; c < RW; ++c) {
      float s = _mm512_reduce_add_ps(acc[r][c]);
      for (int64_t k = i; k < in; ++k) s += x[r * in + k] * bf16_to_float(w[c * in + k]);
      y[r * ys + c] = s;
    }
}
#else
template <int RX, int RW>
void bf16_block(const float* x, int64_t in, const uint16_t* w, float* y, int64_t ys) {
  for (int r = 0; r < RX; ++r)
    for (int c = 0; c < RW; ++c) {
      float acc[kLanes] = {};
      int64_t i = 0;
      for (; i + kLanes <= in; i += kLanes)
        for (int l = 0; l < kLanes; ++l)
          acc[l] += x[r * in + i + l] * std::bit_cast<float>(static_cast<uint32_t>(w[c * in + i + l]) << 16);
      float s = 0;
      for (int l = 0; l < kLanes; ++l) s += acc[l];
      for (int64_t k = i; k < in; ++k) s += x[r * in + k] * bf16_to_float(w[c * in + k]);
      y[r * ys + c] = s;
    }
}
#endif

// Rows t0.. (up to 4) of x by RW rows of W.
template <int RW>
void bf16_rows_block(const float* x, int64_t n, int64_t in, const uint16_t* w, float* y, int64_t ys) {
  switch (n) {
    case 4:
      return bf16_block<4, RW>(x, in, w, y, ys);
    case 3:
      return bf16_block<3, RW>(x, in, w, y, ys);
    case 2:
      return bf16_block<2, RW>(x, in, w, y, ys);
    default:
      return bf16_block<1, RW>(x, in, w, y, ys);
  }
}

}  // namespace

void bf16_rows_product(const Tensor& x, const HalfTensor& W, const Tensor& b, Tensor& y) {
  if (!W.bf16) throw Error("internal: the direct 16-bit product reads BF16 matrices");
  const int64_t N = x.dim(0), out = W.shape[0], in = W.shape[1];
  if (x.dim(1) != in || (!b.empty() && b.numel() != out))
    throw Error("internal: a 16-bit product of " + shape_str(x.shape) + " by [" + std::to_string(out) + ", " +
                std::to_string(in) + "]");
  y.reshape_for_overwrite({N, out});
  const float* xs = x.ptr();
  float* ys = y.ptr();
  const int64_t blocks = (out + 3) / 4;  // four rows of W at a time, each by four rows of x at a time
#pragma omp parallel for schedule(static) if (static_cast <double>(N) * out * in > 1e6)
  for (int64_t k = 0; k < blocks; ++k) {
    const int64_t o = 4 * k;
    const uint16_t* w = W.bits.data() + o * in;
    for (int64_t t0 = 0; t0 < N; t0 += 4) {
      const int64_t n = std::min<int64_t>(4, N - t0);
      float* yo = ys + t0 * out + o;
      if (o + 4 <= out) {
        bf16_rows_block<4>(xs + t0 * in, n, in, w, yo, out);
      } else {
        for (int64_t c = 0; o + c < out; ++c) bf16_rows_block<1>(xs + t0 * in, n, in, w + c * in, yo + c, out);
      }
    }
  }
  if (!b.empty())
    for (int64_t t = 0; t < N; ++t)
      for (int64_t o = 0; o < out; ++o) ys[t * out + o] += b.ptr()[o];
}

int bf16_direct_rows() {
#if defined(__AVX512F__)
  return kTuning.half_direct_rows_avx512;
#else
  return kTuning.half_direct_rows_plain;
#endif
}

void linear_half(Ops& ops, const Tensor& x, const HalfTensor& W, const Tensor& b, Tensor& y, HalfScratch& st) {
  if (ops.linear_half(x, W, b, y)) return;
  const int64_t N = x.dim(0), out = W.shape[0], in = W.shape[1];
  const int64_t rows = std::max<int64_t>(16, kHalfBlock / std::max<int64_t>(1, in) / 16 * 16);
  if (rows >= out) {  // one block: straight into y
    st.wide.reshape_for_overwrite({out, in});
    widen_rows(W, 0, out, st.wide.ptr());
    ops.transient_weights(st.wide);
    ops.linear(x, st.wide, b, y);
    return;
  }
  y.reshape_for_overwrite({N, out});
  for (int64_t r0 = 0; r0 < out; r0 += rows) {
    const int64_t r1 = std::min(out, r0 + rows), n = r1 - r0;
    st.wide.reshape_for_overwrite({n, in});
    widen_rows(W, r0, r1, st.wide.ptr());
    if (!b.empty()) {
      st.wide_b.reshape_for_overwrite({n});
      std::copy(b.ptr() + r0, b.ptr() + r1, st.wide_b.ptr());
    }
    ops.transient_weights(st.wide);
    ops.linear(x, st.wide, b.empty() ? b : st.wide_b, st.wide_y);
    for (int64_t t = 0; t < N; ++t)
      std::copy(st.wide_y.ptr() + t * n, st.wide_y.ptr() + (t + 1) * n, y.ptr() + t * out + r0);
  }
}

}  // namespace attnlab
