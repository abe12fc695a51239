// The cpu ops' linear layers as oneDNN matmul primitives, made once per shape and reused.
// fp32: the weights are read where they are (nn.Linear's [out, in] is the matmul's weights in
// column-major), no copy; ~1.1-2x oneDNN's sgemm on small and tall products here. bf16 (--backend
// cpu-bf16, the articles' mixed precision on the CPU): inputs rounded to bf16, fp32 accumulation
// and output; weights converted once per weights version into the blocked layout the bf16
// kernels read (AVX512-BF16 / AMX where the CPU has them). Built only with oneDNN.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/core/tensor.h"

namespace attnlab {

class OnednnLinear {
 public:
  explicit OnednnLinear(bool bf16);
  ~OnednnLinear();
  // y (N, out) = x W^T + b (bf16: bf16(x) bf16(W)^T + b, accumulated in float32). W is float32 [out, in].
  void run(const Tensor& x, const Tensor& W, const Tensor& b, Tensor& y);
  // C (M, N) = op(A) op(B) + beta C, row-major with leading dimensions, as sgemm; op(A) is A^T
  // when ta. A and B are rounded to bf16, the products accumulated in float32 (training's
  // backward products on the bf16 path). beta is 0 or 1.
  void gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                 int64_t ldb, float beta, float* C, int64_t ldc);
  // Weights of another version: converted (bf16) weights are dropped.
  void set_weights_version(uint64_t version);
  // Drops the bf16 conversion cached for W's address (its buffer holds new values).
  void forget(const Tensor& W);
  // "avx512_core_bf16", "avx512_core_amx", ...: the instruction set oneDNN's kernels use here.
  static std::string isa();
  // True when the CPU has bf16 instructions (AVX512-BF16 or AMX); false: oneDNN emulates them.
  static bool native();
  // True when oneDNN can make bf16 matmuls here at all (AVX-512 or above, natively or emulated).
  static bool bf16_supported();
  // The rate of an n x n x n matmul with bf16 operands already converted and fp32 output
  // (GFLOP/s, median of `repeat`): the ceiling of the bf16 path's products here.
  static double bf16_matmul_gflops(int n, int repeat);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Single-threaded bf16 products called from many threads at once: the attention blocks of
// cpu-bf16 (each (head, query block) task multiplies its own scores and context). C (M, N, ldc,
// fp32) = A (M, K, lda) op(B), op(B) = B^T for a B stored (N, K) when tb, else B stored (K, N);
// A and B in bf16, fp32 accumulation. Matmuls are made once per shape (under a lock) and run
// with a per-thread stream and scratchpad; inside an OpenMP parallel region oneDNN runs each on
// the calling thread.
class Bf16BlockGemm {
 public:
  Bf16BlockGemm();
  ~Bf16BlockGemm();
  void run(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool tb, const uint16_t* B, int64_t ldb,
           float* C, int64_t ldc);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnlab
