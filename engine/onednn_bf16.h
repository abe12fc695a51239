// The bf16 path of the cpu ops (--backend cpu-bf16): linear layers as oneDNN matmuls with bf16
// inputs and float32 accumulation and output (the articles' mixed precision on the CPU: bf16
// products, fp32 everything else). Weights are converted once per weights version into the
// blocked layout oneDNN's bf16 kernels read (AVX512-BF16 / AMX where the CPU has them);
// primitives are made once per shape and reused. Built only with oneDNN.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/tensor.h"

namespace attnlab {

class Bf16Linear {
 public:
  Bf16Linear();
  ~Bf16Linear();
  // y (N, out) = bf16(x) bf16(W)^T + b, accumulated in float32. W is float32 [out, in].
  void run(const Tensor& x, const Tensor& W, const Tensor& b, Tensor& y);
  // Weights of another version: converted weights are dropped.
  void set_weights_version(uint64_t version);
  // "avx512_core_bf16", "avx512_core_amx", ...: the instruction set oneDNN's kernels use here.
  static std::string isa();
  // True when the CPU has bf16 instructions (AVX512-BF16 or AMX); false: oneDNN emulates them.
  static bool native();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnlab
