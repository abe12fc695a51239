// What this machine measures, instead of what we assume: the rates of the three matrix-product
// paths (Eigen's sgemm, oneDNN's sgemm, oneDNN's bf16 matmul), measured once per machine and kept
// as data in the user's cache (CLBlast keeps its per-device tuning the same way), and the choices
// made from them: which fp32 product the cpu ops use, and whether cpu-bf16 is slower than cpu.
#pragma once

#include <string>

namespace attnlab {

struct MatmulRates {
  int n = 0;               // the n x n x n product measured
  double eigen = 0;        // GFLOP/s, medians
  double onednn = 0;       // 0 without oneDNN
  double onednn_bf16 = 0;  // bf16 operands, fp32 accumulation; 0 without oneDNN
  std::string machine;     // CPU model, oneDNN version and instruction set: the cache key
};

// Measures now (n x n x n, median of `repeat`, on every thread), without the cache.
MatmulRates measure_matmul_rates(int n, int repeat);

// This machine's rates: from the cache file (matmul-rates-<key>.json under $ATTNLAB_CACHE, else
// $XDG_CACHE_HOME/attnlab, else ~/.cache/attnlab), else measured (n = 384, median of 9: about
// 40 ms) and saved. The first process to save wins, so every later run on this machine makes the
// same choices (a retraining is bit-for-bit reproducible). Read once per process.
const MatmulRates& matmul_rates();

// Saves rates as this machine's (overwriting: `bench --sgemm` measures again on purpose).
// Returns the file's path, or "" when it could not be written (a read-only home: not an error).
std::string save_matmul_rates(const MatmulRates& r);

// The fp32 product the cpu ops use: "onednn" or "eigen". ATTNLAB_GEMM=eigen|onednn overrides;
// else oneDNN unless Eigen measured at least 10% faster (nearer than that is noise on a shared
// machine, and oneDNN's per-shape matmuls for the linear layers beat its sgemm besides).
std::string fp32_gemm_choice();

// "" when cpu-bf16 is at least as fast as cpu here, else a sentence saying it is slower, with
// the measured rates (an Intel Xeon of our kind: bf16 152 against fp32 234 GFLOP/s).
std::string bf16_speed_notice();

}  // namespace attnlab
