// Tuning values in one place, as data with a default and the reason for it (CLBlast keeps its
// per-device parameters the same way). Fast paths read them from here; nothing else hard-codes
// a block size or a threshold. apply_process_tuning() sets the process-wide ones (malloc).
#pragma once

namespace attnlab {

struct Tuning {
  // Queries handled together by one cpu attention task: one GEMM per (head, block) over the key
  // range the block can see. Small enough that a sliding window skips most blocked keys, large
  // enough for an efficient GEMM.
  int query_block = 64;
  // cpu passes below this many FLOPs run on one thread: below a few tens of MFLOP the fork/join
  // and barrier costs of a second thread outweigh the work, and on a busy 2-core machine (the
  // GUI thread painting) a descheduled worker turns a 0.3 ms pass into a 40 ms one.
  double single_thread_flops = 5e7;
  // fp32 products below this many FLOPs go to Eigen even where oneDNN's sgemm is chosen: oneDNN
  // generates its sgemm kernels on the first call (30 ms here, measured: the default model's first
  // pass took 31 ms through oneDNN and 0.8 ms through Eigen), which a small model's products never
  // win back; above it (T >= 16 at head size 64, say) oneDNN's rate decides as measured.
  double onednn_min_flops = 65536;
  // Largest OpenCL work-group our row kernels (LayerNorm, softmax) use: a power of two; larger
  // groups gave no gain on PoCL and are not available on every device.
  int opencl_max_work_group = 256;
  // glibc malloc: allocations above this are mmapped (fresh zero pages), below it come from the
  // heap. Eigen allocates its GEMM packing buffers (hundreds of KB) on every product; with
  // glibc's default of 128 KB each one was a new mapping whose pages fault in and are zeroed by
  // the kernel (10-15% of a d = 512 forward). Tensors above it (the large [heads, T, T]
  // probability arrays of long inputs) are still mmapped, so their never-written zeros are free.
  long malloc_mmap_threshold = 32L << 20;
  // The app's passes keep every layer's probabilities up to this many bytes of them (and a
  // quarter of the memory available); above it they keep each layer's queries and keys and
  // recompute a layer's probabilities when a view shows it (attention on demand). Keeping is
  // quicker while it fits: typing into a 998-token prompt of GPT-2 small's shape (576 MB of
  // probabilities) took p50 956 ms a key keeping them and 1,498 ms on demand (every layer
  // recomputed for the overview; 1.3 against 2.1 GB peak). 2 GB: TinyLlama's 22 x 32 heads keep
  // everything to ~850 tokens, a 12 x 12 model to ~1,900.
  double keep_attention_bytes = 2e9;
  // The same for the app's passes that start from the last pass's KV cache (typing into a causal
  // model's text): keeping, each key copies the probabilities of every earlier row into the new
  // result (576 MB for GPT-2 small at 1,000 tokens: 0.2 s); on demand it copies the queries and
  // computes the new rows only. Below this (GPT-2 small to ~330 tokens) keeping costs no more.
  double reuse_keep_attention_bytes = 64e6;
  // Head patterns keep their sums over a causal pass's rows up to a multiple of this many rows,
  // so the next pass (typing at the end) scans its new rows and at most this many more: a few
  // ms at 1,000 tokens and 144 heads (each row is a log per key), where a whole scan took 0.4 s.
  int pattern_checkpoint_rows = 16;
  // Products with a BF16 matrix read its 16 bits directly (bf16_rows_product) for at most this
  // many rows of input, and widen it a block at a time for more (bf16_direct_rows() picks the
  // row for the kernel built). Measured (Intel Xeon, 2 cores, TinyLlama shape, bench --model
  // --seq N, widened / direct): N = 1 441 / 112 ms, 8 528 / 248, 32 769 / 567, 64 1,061 / 1,335.
  // Without AVX-512 the direct product is plain loops: N = 1 164 ms, 4 411, 8 635.
  int half_direct_rows_avx512 = 32;
  int half_direct_rows_plain = 4;
  // Free heap memory kept for reuse before it is given back to the system.
  long malloc_trim_threshold = 128L << 20;
};

inline constexpr Tuning kTuning{};

// Applies the process-wide settings once (called when a cpu backend or cpu ops are made).
void apply_process_tuning();

}  // namespace attnlab
