// 16-bit floats (see half.h).
#include "engine/core/half.h"

#include <cstring>
#include <stdexcept>

namespace attnlab {

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal half -> normal float
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void widen_bits(const void* src, float* out, int64_t n, bool bf16) {
  const char* p = static_cast<const char*>(src);
  if (bf16) {  // BF16 is float32's top half
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      const uint32_t bits = static_cast<uint32_t>(h) << 16;
      std::memcpy(out + i, &bits, 4);
    }
  } else {
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      out[i] = half_to_float(h);
    }
  }
}

void widen_rows(const HalfTensor& h, int64_t r0, int64_t r1, float* out) {
  if (h.shape.size() != 2 || r0 < 0 || r1 < r0 || r1 > h.shape[0])
    throw std::logic_error("widen_rows: rows out of range");
  const int64_t cols = h.shape[1];
  widen_bits(h.bits.data() + r0 * cols, out, (r1 - r0) * cols, h.bf16);
}

}  // namespace attnlab
