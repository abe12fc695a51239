// A causal model's keys and values of a prefix, per layer, as its attention reads them (after the
// q/k norm and the rotary embedding): transformers' DynamicCache, llama.cpp's KV cache. A pass
// given one (PassOptions::kv) computes only the positions after the longest prefix it shares with
// the cache, and appends them; for a causal model nothing at a position depends on a later one,
// so the rows it computes equal a full pass's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/compute/mask.h"
#include "engine/core/tensor.h"
#include "engine/model/model.h"

namespace attnlab {

struct KvCache {
  std::vector<int> ids;        // the tokens held, positions 0..size()-1
  std::vector<Tensor> k, v;    // per layer [size(), KV * D]
  std::vector<uint64_t> rows;  // per position: a hash of its mask row (keys 0..position), so a changed mask recomputes
  std::vector<float> rope;     // the rotary frequencies the keys were rotated with (longrope's change with length)
  uint64_t weights_version = 0;  // the weights they were computed with (0: never reused)
  int64_t kept = 0;              // positions reused by the last pass (for callers and tests)

  int size() const { return static_cast<int>(ids.size()); }
  void clear();
  // Keeps positions 0..n-1 (and drops rows past size() that a cancelled pass left in some layers).
  void truncate(int n);
  // Bytes the keys and values hold: 2 x layers x kv_heads x d_head x 4 per position.
  int64_t bytes() const;
};

// Whether a backend runs KV-cached passes itself: the host backends (cpu, cpu-bf16, reference).
// OpenCL would hand such a pass to the host, so callers keep its passes whole.
bool backend_runs_kv_cache(const std::string& backend);

// Bytes of cache per position for a config (float32 keys and values of every layer).
int64_t kv_bytes_per_position(const ModelConfig& c);

// A hash of mask row i over its keys 0..i (every plane): what the cached row i was computed with.
uint64_t mask_row_hash(const AttnMask& mask, int i);

// How many leading positions of ids a pass can take from the cache: the shared prefix of ids,
// of the mask rows and of the weights, at most ids.size() - 1 (the last position is always
// computed, it gives the next token). The cache is truncated to that many; 0 clears it.
int reuse_prefix(KvCache& cache, const Model& model, const std::vector<int>& ids, const AttnMask& mask,
                 const std::vector<float>& rope);

}  // namespace attnlab
