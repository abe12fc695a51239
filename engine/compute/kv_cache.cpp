// The KV cache's bookkeeping: what a new pass may reuse (see kv_cache.h). The pass itself is the
// layer plan's (plan.cpp), which reads and extends the cache at its attention step.
#include "engine/compute/kv_cache.h"

#include <algorithm>
#include <cstring>

namespace attnlab {

void KvCache::clear() {
  ids.clear();
  rows.clear();
  for (Tensor& t : k) t = Tensor();
  for (Tensor& t : v) t = Tensor();
  kept = 0;
}

void KvCache::truncate(int n) {
  if (n <= 0) return clear();
  if (n < size()) {
    ids.resize(static_cast<size_t>(n));
    rows.resize(static_cast<size_t>(n));
  }
  // every layer cut to the positions held: a pass cancelled between layers appended rows to
  // some layers only, and those rows are dropped here
  for (auto* layers : {&k, &v})
    for (Tensor& t : *layers) {
      if (t.empty() || t.dim(0) <= size()) continue;
      const int64_t width = t.dim(1);
      t.data.resize(static_cast<size_t>(size() * width));
      t.shape = {size(), width};
    }
}

int64_t KvCache::bytes() const {
  int64_t n = 0;
  for (const Tensor& t : k) n += t.numel();
  for (const Tensor& t : v) n += t.numel();
  return n * static_cast<int64_t>(sizeof(float));
}

bool backend_runs_kv_cache(const std::string& backend) {
  return backend == "cpu" || backend == "cpu-bf16" || backend == "reference";
}

int64_t kv_bytes_per_position(const ModelConfig& c) {
  return 2LL * c.num_layers * c.kv_heads() * c.head_dim() * static_cast<int64_t>(sizeof(float));
}

uint64_t mask_row_hash(const AttnMask& mask, int i) {
  // FNV-1a over the row's blocked flags and additive terms, keys 0..i of every plane
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t k = 0; k < n; ++k) h = (h ^ b[k]) * 1099511628211ULL;
  };
  // empty flags or terms hash as zeros: a mask stored without them is the same mask
  const int keys = std::min(i + 1, mask.S);
  for (int plane = 0; plane < mask.planes; ++plane)
    for (int j = 0; j < keys; ++j) {
      const uint8_t b = mask.blocked.empty() ? 0 : mask.blocked[mask.index(plane, i, j)];
      const float a = mask.additive.empty() ? 0.0f : mask.additive[mask.index(plane, i, j)];
      mix(&b, 1);
      if (a != 0.0f) {  // 0 and -0 alike
        mix(&j, sizeof j);
        mix(&a, sizeof a);
      }
    }
  mix(&mask.planes, sizeof mask.planes);
  return h;
}

int reuse_prefix(KvCache& cache, const Model& model, const std::vector<int>& ids, const AttnMask& mask,
                 const std::vector<float>& rope) {
  const int layers = model.config.num_layers;
  if (cache.weights_version == 0 || cache.weights_version != model.weights.version || cache.rope != rope ||
      static_cast<int>(cache.k.size()) != layers || static_cast<int>(cache.v.size()) != layers) {
    cache.clear();
    cache.k.assign(static_cast<size_t>(layers), Tensor());
    cache.v.assign(static_cast<size_t>(layers), Tensor());
    cache.weights_version = model.weights.version;
    cache.rope = rope;
    return 0;
  }
  cache.truncate(cache.size());  // rows a cancelled pass left in some layers only
  for (int l = 0; l < layers && cache.size() > 0; ++l)
    if (cache.k[static_cast<size_t>(l)].empty() || cache.k[static_cast<size_t>(l)].dim(0) != cache.size()) {
      cache.clear();  // a layer holds fewer rows than the cache's ids (never expected): start over
      return 0;
    }
  const int most = std::min(cache.size(), static_cast<int>(ids.size()) - 1);
  int p = 0;
  while (p < most && cache.ids[static_cast<size_t>(p)] == ids[static_cast<size_t>(p)] &&
         cache.rows[static_cast<size_t>(p)] == mask_row_hash(mask, p))
    ++p;
  cache.truncate(p);
  cache.kept = p;
  return p;
}

}  // namespace attnlab
