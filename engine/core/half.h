// 16-bit floats as files store them (BF16 and IEEE F16): a tensor kept in its file's dtype takes
// half the memory of float32, and is widened to float32 where it is used. Widening is exact (every
// BF16 and F16 value is a float32 value), so a pass over widened weights is the float32 pass.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/core/tensor.h"

namespace attnlab {

float half_to_float(uint16_t h);
float bf16_to_float(uint16_t b);

struct HalfTensor {
  std::vector<int64_t> shape;
  // row-major, as the file's bytes (little-endian hosts); calloc'd as tensors are: a file's
  // 2.2 GB of bits were zeroed by resize, then overwritten
  std::vector<uint16_t, ZeroedAllocator<uint16_t>> bits;
  bool bf16 = true;  // else IEEE half (F16)
  int64_t numel() const { return static_cast<int64_t>(bits.size()); }
  bool empty() const { return bits.empty(); }
};

// count 16-bit values at p (any alignment) to float32, over the threads when long (each element on
// its own: the same result in any split).
void widen_bits(const void* p, float* out, int64_t count, bool bf16);

// Rows [r0, r1) of a [rows, cols] HalfTensor to float32 at out ((r1 - r0) x cols).
void widen_rows(const HalfTensor& h, int64_t r0, int64_t r1, float* out);

}  // namespace attnlab
