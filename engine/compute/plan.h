// The model written once. A layer is a LayerPlan: a flat list of op steps over numbered values
// (llm.c's gpt2_forward as data), made from the config in one place (make_layer_plan). Three
// executors walk it: the host forward (reference and cpu ops; inference and training), the host
// backward (the same steps in reverse, calling each op's *_backward), and the OpenCL backend's
// device forward. A new architecture is a new plan builder plus any op it lacks.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/compute/backend.h"
#include "engine/compute/linear_half.h"
#include "engine/compute/ops.h"
#include "engine/compute/rope.h"
#include "engine/model/model.h"

namespace attnlab {

enum class OpKind {
  Linear,          // out = in0 W^T + b                          (weights w, b)
  LayerNorm,       // out = LN(in0) * g + b                       (weights w = g, b)
  Activation,      // out = act(in0)                              (the config's activation)
  Attention,       // out = concat_h(softmax(q k^T / sqrt(d) ...) v), in = {q, k, v}
  Add,             // out = in0 + in1                              (residual)
  Dropout,         // out = dropout(in0) when training, else in0
  RmsNorm,         // out = in0 / rms(in0) * g                    (weight w = g; Llama's RMSNorm)
  Rope,            // out = in0 with each head's halves rotated by position (rotary embedding)
  Mul,             // out = in0 * in1 elementwise                 (SwiGLU's gate times up)
  HeadRmsNorm,     // out = each head's D values of in0 / their rms * g   (weight w = g [D]; Qwen3's q/k norm)
  CrossAttention,  // as Attention, the keys and values from the encoder's output (LayerPlan::memory)
  // the last kind: plan.cpp's name table is checked against it
};

struct Step {
  OpKind op;
  std::array<int, 3> in = {-1, -1, -1};  // value numbers read
  int out = -1;                          // value number written (each value is written once)
  Tensor LayerWeights::*w = nullptr;     // weight, or LayerNorm gain
  Tensor LayerWeights::*b = nullptr;     // bias
};

struct LayerPlan {
  std::vector<Step> steps;
  int values = 1;             // value 0 is the layer input
  int output = 0;             // the value that is the layer output
  int attention_step = -1;    // the step whose probabilities are the layer's attention
  int memory = -1;            // an encoder-decoder's decoder: the value that holds the encoder's output [S, E]
  int cross_step = -1;        // and the step that attends to it
  std::vector<int> last_use;  // per value: the last step that reads it (-1: none)
  // per value: its hook name within the block ("attn.hook_z", engine/compute/hooks.h), or null
  std::vector<const char*> hooks;
  // "x1 = LayerNorm(x0 + ...)": one line per step, for messages and documentation.
  std::string describe() const;
};

// The articles' TransformerLayer for the config: post-norm (x = LN1(x + MHA(x)); x = LN2(x +
// FFN(x))) or pre-norm (x = x + MHA(LN1(x)); x = x + FFN(LN2(x))), with dropout steps on both
// residual branches, and without the feed-forward half when ff_dim is 0. Decoders add their
// parts where the config asks: RMSNorm for LayerNorm, rotary positions on q and k, a gated
// (SwiGLU) feed-forward; grouped-query heads are the attention op's (AttnArgs::KV). An
// encoder-decoder's decoder layer (config.cross_attention) has a cross-attention sub-layer between
// the two, normalised as they are (BART: x = LN3(x + CrossMHA(x, memory))).
LayerPlan make_layer_plan(const ModelConfig& config);

// Dropout (training): on the attention probabilities and on both residual branches, with a
// cheap seedable generator (splitmix64; millions of draws per step), drawn in plan order.
class Dropout {
 public:
  Dropout(float p, uint64_t seed) : p_(p), scale_(1.0f / (1.0f - p)), state_(seed) {}
  float scale() const { return scale_; }
  std::vector<uint8_t> keep_mask(size_t n);  // 1 = kept

 private:
  uint64_t next();
  float p_, scale_;
  uint64_t state_;
};

// The host executor's state for one layer: every value of the plan, and what each step keeps for
// the backward. Inference reuses one for every layer (buffers circulate, nothing is allocated
// after the first layer); training keeps one per layer.
struct LayerState {
  std::vector<Tensor> v;                         // by value number
  std::vector<Tensor> xhat, rstd;                // by step: LayerNorm's saved normalised input, 1/std
  std::vector<std::vector<uint8_t>> keep;        // by step: dropout keep flags (Dropout, Attention)
  Tensor P;                                      // the attention probabilities (training)
  Tensor rope_cos, rope_sin;                     // [T, D / 2] rotary tables, made once per length
  int rope_first = 0;                            // the position of the tables' first row (KV cache)
  bool rope_local = false;                       // the tables are of local_rope_theta (Gemma 3's sliding layers)
  const std::vector<uint8_t>* ablate = nullptr;  // the heads the forward ablated (LayerRun::ablate)
  HalfScratch half;                              // a 16-bit matrix's rows widened, its bias and output rows
  Tensor wide;                                   // a 16-bit matrix widened whole (the backward)
};

class HookRun;

struct LayerRun {
  bool for_backward = false;                     // keep in the state what layer_backward needs
  HookRun* hooks = nullptr;                      // named values kept, replaced or added to (hooks.h)
  int layer = 0;                                 // for the hook names (blocks.{layer}.)
  Dropout* dropout = nullptr;                    // training only
  Tensor* probs = nullptr;                       // receives the (B, H, T, S) probabilities when not null
  const std::vector<uint8_t>* ablate = nullptr;  // [H]: 1 = the head's context is zeroed (head mask)
  KvCache* kv = nullptr;                         // the attention appends k, v to the layer's and reads it all
  int first = 0;                                 // the position of the first row (after the cache's prefix)
  Tensor* queries = nullptr;                     // receive the attention's queries and keys when not null
  Tensor* keys = nullptr;                        // (attention on demand; the keys the cached ones included)
  // An encoder-decoder's decoder layer: the encoder's output [S, E] its cross-attention reads, that
  // attention's arguments (S keys, the encoder's padding mask), and where its (1, H, T, S)
  // probabilities go when not null.
  const Tensor* memory = nullptr;
  const AttnArgs* cross = nullptr;
  Tensor* cross_probs = nullptr;
};

// AttnArgs of a model's attention for B sequences of T queries and S keys (no mask yet).
AttnArgs attention_args(const ModelConfig& c, const ModelWeights& w, int B, int T, int S);

// What a LayerNorm outside the layers (embedding, final) keeps for its backward.
struct NormState {
  Tensor xhat, rstd;
};

// The embedding for B sequences of T ids (ids and types are [B * T]; types empty = all 0):
// token embedding + positional term [+ token-type embedding], then [embedding LayerNorm].
// x (B*T, E). hooks (a single sequence): the parts' names (embed_hook_names) kept or edited.
// first (a single sequence after a KV cache's prefix): ids are positions first, first + 1, ...
Tensor embed_forward(const Model& model, Ops& ops, const std::vector<int>& ids, const std::vector<int>& types, int T,
                     NormState& norm, HookRun* hooks = nullptr, int first = 0);
// The embedding's hook names, in the order of its parts: hook_embed, [hook_pos_embed] (learned or
// sinusoidal positions), [hook_token_type_embed]; under embed. for post-norm encoders.
std::vector<std::string> embed_hook_names(const ModelConfig& c);
// Accumulates d loss / d (embedding, learned positions, token types, embedding LayerNorm).
void embed_backward(const Model& model, Ops& ops, const std::vector<int>& ids, const std::vector<int>& types, int T,
                    Tensor dx, const NormState& norm, ModelWeights& grads);
// Language models: the LM head's logits for hidden rows x (N, E) -> (N, vocab), through
// lm_head or the tied embedding.
Tensor lm_logits(const Model& model, Ops& ops, const Tensor& x);
// d (capped logit) / d (the head's product) at a capped logit: 1 - tanh^2, or 1 without a cap
// (Gemma 2's final_logit_softcapping).
float lm_softcap_grad(const ModelConfig& c, float logit);

// After the last layer: [final LayerNorm], in place; and its backward (dx in place).
void final_forward(const Model& model, Ops& ops, Tensor& x, NormState& norm);
void final_backward(const Model& model, Ops& ops, const NormState& norm, Tensor& dx, ModelWeights& grads);

// The classifier head on the hidden states x (B*T, E) of B padded sequences: pooled = sum_t
// w_t x_t with the pooling weights, [pooler: tanh(dense(pooled))], logits = fc(.). Keeps what
// head_backward needs.
struct HeadState {
  std::vector<float> pool_w;  // [B * T]
  Tensor pooled, pooler_out;  // (B, E)
};
Tensor head_forward(const Model& model, Ops& ops, const Tensor& x, const std::vector<uint8_t>& is_pad, int B, int T,
                    HeadState& st);
// dx (B*T, E) overwritten from dlogits (B, C); weight gradients accumulated.
void head_backward(const Model& model, Ops& ops, const HeadState& st, const Tensor& dlogits, int B, int T, Tensor& dx,
                   ModelWeights& grads);
// Vaswani et al.: PE(t, 2k) = sin(t / 10000^(2k/E)), PE(t, 2k+1) = cos(same), [T, E], in double.
Tensor sinusoid_table(int T, int E);

// One layer on x (N, E), in place.
void layer_forward(const ModelConfig& c, const LayerPlan& plan, const LayerWeights& L, Ops& ops, const AttnArgs& attn,
                   Tensor& x, LayerState& state, const LayerRun& run);
// dx: d loss / d (layer output) in, d loss / d (layer input) out. Weight gradients are
// accumulated into G (and drel, the relative table's, when the model has one); a weight whose
// gradient tensor in G is empty gets none (analysis asks only for input gradients). dprobs, when
// not null, receives d loss / d P, the gradient at the attention probabilities (B, H, T, S).
// dhooks, when not null, receives by value number d loss / d value for every value with a hook
// name (plan.hooks; empty where nothing downstream reads it): attribution patching's gradients.
void layer_backward(const ModelConfig& c, const LayerPlan& plan, const LayerWeights& L, LayerWeights& G, Ops& ops,
                    const AttnArgs& attn, LayerState& state, float drop_scale, Tensor& dx, Tensor* drel,
                    Tensor* dprobs = nullptr, std::vector<Tensor>* dhooks = nullptr);

// Inference on one sequence: the embedding, the layer stack, the final norm, keeping what
// options ask for. Throws Cancelled when options.cancel is set (checked before every layer).
EncodeOutput encode(const Model& model, Ops& ops, const std::vector<int>& ids, const AttnMask& mask,
                    const EncodeOptions& options);
// Layer `layer`'s attention probabilities [heads, T_a, T_b], queries from xa and keys from xb
// (each that layer's input): the plan's steps that lead to the attention's q (from xa) and k
// (from xb), then the attention op without values.
Tensor cross_attention_probs(const Model& model, Ops& ops, int layer, const Tensor& xa, const Tensor& xb,
                             const AttnMask& mask);
// A layer's probabilities [heads, T, S] from the queries q (T, H * D) and keys k (S, KV * D)
// its attention op took (EncodeOutput::queries, keys) and the mask it applied: the same op, so
// the same values.
Tensor self_attention_probs(const Model& model, Ops& ops, const Tensor& q, const Tensor& k, const AttnMask& mask);

// The values the attention of layer `layer` weights, (T, KV * D), computed from that layer's
// input x (pre-norm models normalise it first, as the layer does).
Tensor attention_values(const Model& model, Ops& ops, int layer, const Tensor& x);

// Every hook name (engine/compute/hooks.h) a pass of this model reaches, in the order it reaches them.
std::vector<std::string> hook_names(const ModelConfig& c);
// How many numbers the activation `name` holds for T queries and S keys (S 0: T).
int64_t hook_numel(const ModelConfig& c, const std::string& name, int T, int S = 0);

// Steps (indices, in plan order) that value `target` depends on.
std::vector<int> steps_for(const LayerPlan& plan, int target);

// For the executors in plan.cpp (defined in plan_hooks.cpp).
namespace plan_detail {
// A named value of the plan just computed: its edits applied and, when asked for, a copy kept.
void visit_hook(const LayerPlan& plan, const AttnArgs& a, const LayerRun& run, int value, Tensor& t);
// One attention's attn.hook_attn_scores and attn.hook_pattern kept or edited (a single sequence);
// every changed row's context computed again from its new probabilities.
void attention_hooks(const std::string& block, const AttnArgs& a, const Tensor& Q, const Tensor& K, const Tensor& V,
                     HookRun& hooks, Tensor* P, Tensor& ctx);
}  // namespace plan_detail

}  // namespace attnlab
