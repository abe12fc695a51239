// The narrow backend interface: a backend runs the encoder stack on one sequence and computes
// one layer's cross-attention probabilities. Everything else (tokens, masks, pooling, the
// classifier, warnings) is shared code in forward.cpp. Backends: "reference" and "cpu" run the
// one layer plan (engine/compute/plan.h) over the reference or cpu ops; "opencl" follows the same plan
// with device ops.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/compute/mask.h"
#include "engine/model/model.h"
#include "engine/compute/ops.h"

namespace attnlab {

// Thrown out of a pass whose cancel flag was set: not an error, there is nothing to show.
struct Cancelled : std::exception {
  const char* what() const noexcept override { return "cancelled"; }
};

// What a pass keeps besides its output and how it is driven: one set of fields for a whole
// forward pass (ForwardRequest) and for one encoding by a backend (EncodeOptions).
struct HookSpec;
struct KvCache;

struct PassOptions {
  // Which layers' [heads, T, S] probabilities to return; the others are left empty.
  std::vector<bool> keep_attention;           // empty = keep every layer
  bool keep_layer_inputs = false;             // return each layer's input [T, E] (cross-attention needs them)
  bool keep_values = false;                   // return each layer's attention values [T, KV * D] (may be ignored)
  const std::atomic<bool>* cancel = nullptr;  // when set, the pass throws Cancelled before its next layer
  std::function<void(int layer)> on_layer;    // called as each layer starts (progress, tests)
  // Named activations to keep, replace or add to (engine/compute/hooks.h); the cpu and reference
  // backends run them.
  const HookSpec* hooks = nullptr;
  // Resumes a pass: `start` [T, E] is layer `first_layer`'s input (a cached hook_resid_pre), so
  // the embedding and the layers before it are not run again (activation patching at layer l
  // recomputes layers >= l only). Null: from the embedding.
  const Tensor* start = nullptr;
  int first_layer = 0;
  // Causal models: the keys and values of the previous pass (engine/compute/kv_cache.h). The pass
  // computes only the positions after the prefix it shares with the cache (first_position of the
  // output), attends over the cached keys too, and leaves the cache holding the whole sequence.
  // Not with hooks, ablation, a resumed start or layer inputs; the cpu and reference backends
  // run it.
  KvCache* kv = nullptr;
  // Attention on demand: every layer keeps what its probabilities are recomputed from instead of
  // (or beside) them: its queries and keys as the attention op takes them (after RoPE and q/k
  // norms) in self mode, the two sequences' layer inputs in cross mode. ForwardResult::layer_probs
  // then gives any layer's [heads, T, S] in one attention op. Memory O(layers x T x d) instead of
  // O(layers x heads x T x S). Backends that cannot (recomputes_attention false) keep every
  // layer's probabilities instead.
  bool attention_on_demand = false;
};

struct EncodeOptions : PassOptions {
  std::vector<int> token_types;  // per position, for models with token types; empty = all 0
  // Head ablation (Michel et al. 2019's head mask): per layer, 1 for a head whose probabilities
  // are multiplied by 0 before they weight the values (it adds nothing to the output
  // projection; its probabilities are still returned). Empty = none.
  std::vector<std::vector<uint8_t>> ablate;
  // An encoder-decoder's decoder pass (ModelConfig::cross_attention): the encoder's final hidden
  // states [S, E] every layer's cross-attention reads, and the mask it applies [T, S] (the
  // encoder's padding). Not with hooks, a KV cache, a resumed start or attention on demand yet.
  const Tensor* memory = nullptr;
  const AttnMask* memory_mask = nullptr;
};

struct EncodeOutput {
  // With a KV cache: the first position computed (P); hidden and attention then hold the rows
  // of positions P..T-1 only ([T - P, E], [heads, T - P, T]). 0 without one.
  int first_position = 0;
  Tensor hidden;                        // [T, E] final hidden states
  std::vector<Tensor> attention;        // per layer: [heads, T, T] or empty
  std::vector<Tensor> cross_attention;  // a decoder pass with EncodeOptions::memory: per layer [heads, T, S]
  std::vector<Tensor> layer_inputs;     // per layer: [T, E] when asked for
  std::vector<Tensor> values;  // per layer: [T, KV * D] when asked for (empty where a backend does not keep them;
                               // every position's with a KV cache)
  std::map<std::string, Tensor> cache;  // the named activations kept (PassOptions::hooks)
  // PassOptions::attention_on_demand: per layer the attention's queries [T, H * D] (with a KV
  // cache the new rows only) and keys [S, KV * D] (every position's).
  std::vector<Tensor> queries, keys;
  // The backend whose self_attention recomputes these queries' probabilities exactly, when it is
  // not the one asked (an OpenCL pass its kernels do not cover ran on "cpu"); empty = the one asked.
  std::string recomputed_by;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::string device() const { return "CPU"; }
  // Why this backend is not what was asked for (an OpenCL fallback to cpu), or empty.
  virtual std::string notice() const { return {}; }
  // Device time split of the passes since the last call, for benchmarks: {transfers, kernels}
  // in ms. Backends without a device return {0, 0}.
  virtual std::pair<double, double> take_device_profile() { return {0, 0}; }
  virtual void set_profiling(bool) {}
  virtual EncodeOutput encode(const Model& model, const std::vector<int>& ids, const AttnMask& mask,
                              const EncodeOptions& options) = 0;
  // Layer `layer`'s attention probabilities [heads, T_a, T_b] with queries from xa and keys from
  // xb, both being that layer's inputs (pre-norm models normalise them first, as the layer does).
  virtual Tensor cross_attention(const Model& model, int layer, const Tensor& xa, const Tensor& xb,
                                 const AttnMask& mask) = 0;
  // Whether encode keeps queries and keys for PassOptions::attention_on_demand, and
  // self_attention recomputes a layer's probabilities from them.
  virtual bool recomputes_attention() const { return false; }
  // Layer `layer`'s probabilities [heads, T, S] from the queries q [T, H * D] and keys k
  // [S, KV * D] its pass kept, with the mask that layer applied: the values the pass computed.
  virtual Tensor self_attention(const Model& model, int layer, const Tensor& q, const Tensor& k, const AttnMask& mask);
};

std::unique_ptr<Backend> make_reference_backend();
std::unique_ptr<Backend> make_cpu_backend();
// The cpu backend with bf16 matrix products in the linear layers (fp32 accumulation, softmax,
// norms and everything else in fp32), through oneDNN; Error when built without it.
std::unique_ptr<Backend> make_cpu_bf16_backend();
// spec: "opencl" (prefers a GPU) or "opencl:N". Never fails: when OpenCL cannot run (no
// platform, no such device, kernels that do not build, a failed allocation), the backend runs
// on cpu and notice() says why.
std::unique_ptr<Backend> make_opencl_backend(const std::string& spec);
// "reference", "cpu", "cpu-bf16", "opencl", "opencl:N"; Error listing the choices otherwise.
std::unique_ptr<Backend> make_backend(const std::string& name);
// What a user can pick: cpu, cpu-bf16 (built with oneDNN), reference, and opencl:N for every
// OpenCL device found.
std::vector<std::string> backend_names();
bool opencl_compiled_in();
// This machine's practical limit for benchmarks: Eigen's SGEMM rate (GFLOP/s) on n x n x n,
// the median of `repeat` runs.
double sgemm_gflops(int n, int repeat);
// The same for oneDNN's sgemm (what the cpu ops' linear layers use when built with it); 0 without.
double onednn_sgemm_gflops(int n, int repeat);
// The same for a oneDNN matmul on bf16 operands (fp32 output): the bf16 path's ceiling; 0 without.
double onednn_bf16_gflops(int n, int repeat);
// A short description of a backend's device ("CPU", an OpenCL device's name) without starting it.
std::string backend_description(const std::string& name);

// Shared by the backends (plain code, cheap next to the layers):
// the weight of each position in the pooled vector: mean 1/T everywhere, masked_mean 1/n on
// the n positions that are not [PAD] (is_pad[t] != 0), cls 1 at position 0.
std::vector<float> pooling_weights(Pooling pooling, const uint8_t* is_pad, int T);
}  // namespace attnlab
