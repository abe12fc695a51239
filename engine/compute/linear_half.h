// The linear product with a matrix kept in 16 bits (a BF16 / F16 folder's, engine/core/half.h):
// y = x W^T + b, W widened a block of rows at a time into a float32 buffer of about kHalfBlock
// floats and multiplied by the ops' own float32 linear, so the float32 copy never exceeds one
// block (a few MB, in cache while it is used) and the memory read per pass is the 16-bit matrix.
// Each output element is the same dot product over the full input as with W in float32 (only the
// ops' blocking of the product may differ). The layers' matrices and the LM head use it.
#pragma once

#include <cstdint>

#include "engine/compute/ops.h"
#include "engine/core/half.h"
#include "engine/core/tensor.h"

namespace attnlab {

inline constexpr int64_t kHalfBlock = int64_t(1) << 20;

// Buffers reused from call to call: the widened rows, their bias, their output columns.
struct HalfScratch {
  Tensor wide, wide_b, wide_y;
};

// y [N, out] = x [N, in] W^T + b, W [out, in] in 16 bits; b empty or [out]. The ops' own
// Ops::linear_half when they have one for these shapes, else W widened a block at a time.
void linear_half(Ops& ops, const Tensor& x, const HalfTensor& W, const Tensor& b, Tensor& y, HalfScratch& st);

// The same for a few rows of x (a KV-cached pass's new tokens, a generation step) and a BF16 W,
// without a widened copy: each row of W is read once for every row of x, widened in registers
// (BF16 is float32's top half) and multiplied in 16 lanes of float32 partial sums, added at the
// end (another order of the same in-term dot product than a GEMM's). Widening the whole matrix
// each pass wrote and read twice its bytes again in float32: the memory a one-token pass is
// bound by. Error for an F16 W (the cpu ops widen those).
void bf16_rows_product(const Tensor& x, const HalfTensor& W, const Tensor& b, Tensor& y);
// Up to how many rows of x the cpu ops use it (Tuning: with AVX-512 kernels or plain loops, as built).
int bf16_direct_rows();

}  // namespace attnlab
