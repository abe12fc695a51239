// The weight table: every parameter of the model declared once, with its role, its shape from
// the config and when it exists (llm.c's fill_in_parameter_sizes, llama.cpp's tensor tables).
// Loading each naming scheme, saving, random initialisation, the optimiser's parameter list,
// the OpenCL upload and the parameter count all walk this table; a new parameter is one row.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/config.h"
#include "engine/core/half.h"
#include "engine/core/tensor.h"

namespace attnlab {

// nn.Linear convention: weight is [out, in], y = x W^T + b.
struct LayerWeights {
  Tensor wq, bq, wk, bk, wv, bv;  // [E, E], [E]
  Tensor wo, bo;                  // output projection (fc_out / out_proj)
  Tensor q_norm, k_norm;          // per-head RMSNorm gains of the query and key [D] (Qwen3; else empty)
  Tensor ln1_g, ln1_b;            // the attention sub-layer's LayerNorm
  Tensor w1, b1, w2, b2;          // feed-forward [F, E], [F], [E, F], [E]; empty when ff_dim == 0
  Tensor w3;                      // gated feed-forward's up projection [F, E] (w1 is the gate)
  Tensor ln2_g, ln2_b;            // the feed-forward sub-layer's LayerNorm
  Tensor ln1_post_g, ln2_post_g;  // sandwich norms on the attention's and the feed-forward's outputs (Gemma 2)
  // An encoder-decoder's decoder layer (ModelConfig::cross_attention): queries from the layer, keys
  // and values from the encoder's output, and the sub-layer's LayerNorm (BART's encoder_attn)
  Tensor cwq, cbq, cwk, cbk, cwv, cbv, cwo, cbo, ln3_g, ln3_b;
  // Matrices kept in 16 bits as a BF16 / F16 folder stores them, their float32 member then empty:
  // the plan's linear layers widen them a block of rows at a time as they multiply, anything else
  // reads them through wide(). Half the memory, the same values (widening is exact).
  std::vector<std::pair<Tensor LayerWeights::*, HalfTensor>> half;
};

struct ModelWeights {
  Tensor embedding;           // [vocab, E]
  Tensor pos_embedding;       // learned: [max_len, E]
  Tensor rel_pos;             // relative: [2 * max_len - 1, E], split per head along E
  Tensor type_embedding;      // token types: [type_vocab_size, E]
  Tensor emb_ln_g, emb_ln_b;  // embedding LayerNorm [E]
  std::vector<LayerWeights> layers;
  Tensor final_ln_g, final_ln_b;  // LayerNorm after the last layer [E]
  Tensor pooler_w, pooler_b;      // pooler dense [E, E], [E] (then tanh)
  Tensor fc_w, fc_b;              // classifier [classes, E], [classes]
  Tensor lm_head;                 // language-model head [vocab, E] (empty when tied to the embedding)
  Tensor lm_bias;                 // added to the logits [1, vocab] (BART's final_logits_bias; else empty)
  // The token embedding and the LM head kept in 16 bits as a BF16 / F16 folder stores them, their
  // float32 member then empty: a pass widens the rows it looks up (weight_row) and multiplies the
  // LM head a block of rows at a time (lm_logits). A 256k vocabulary's 2.4 GB become 1.2 GB.
  std::vector<std::pair<Tensor ModelWeights::*, HalfTensor>> half;
  // Identifies these values: a fresh number whenever weights are made, loaded or updated, so a
  // device cache keyed on it is never stale (copies share it: they hold the same values).
  // 0 = unknown (never cached).
  uint64_t version = 0;
};

// A new, process-wide unique weights version.
uint64_t next_weights_version();

// How a parameter is initialised by random_weights (PyTorch's defaults).
enum class Init {
  Normal,        // nn.Embedding: N(0, 1)
  FanInUniform,  // nn.Linear weight and bias: U(-1/sqrt(in), 1/sqrt(in))
  Ones,          // LayerNorm gain
  Zeros,         // LayerNorm bias
};

// One row of the table, per model-level tensor or per layer tensor.
struct WeightSpec {
  const char* name;  // the articles' name (what save_model writes), after "layers.{i}." for layer tensors
  Tensor ModelWeights::*model_member;  // model-level tensors
  Tensor LayerWeights::*layer_member;  // per-layer tensors
  Init init;
  // Shape for a config, or {} when the tensor does not exist for it.
  std::vector<int64_t> (*shape)(const ModelConfig&);
};

// A concrete parameter of one model: its row and its layer (-1 for model-level tensors).
struct WeightEntry {
  const WeightSpec* spec;
  int layer;
  std::vector<int64_t> shape;
  std::string name() const;  // full articles' name, e.g. "layers.0.attention.query.weight"
  Tensor& in(ModelWeights& w) const;
  const Tensor& in(const ModelWeights& w) const;
};

// Every parameter that exists for a config, in the fixed order used for allocation, random
// initialisation and the optimiser: embeddings, then each layer's tensors, then the classifier.
std::vector<WeightEntry> weight_entries(const ModelConfig& config);

// Which PyTorch module layout a set of tensor names follows.
enum class WeightLayout {
  Article,             // the seed articles' modules (what attnlab writes for its own models)
  ArticleSingleLayer,  // the articles' one-layer TextClassifier (no "layers.0.")
  TorchEncoder,        // nn.TransformerEncoder(Layer)
  HfBert,              // Hugging Face BertModel (+ BertForSequenceClassification's classifier)
  HfDistilBert,        // Hugging Face DistilBertModel (+ pre_classifier and classifier)
  HfGpt2,              // Hugging Face GPT2Model / GPT2LMHeadModel (Conv1D weights, fused c_attn)
  HfLlama,             // Hugging Face LlamaModel / LlamaForCausalLM (and Mistral, Qwen2: same names)
  HfPhi3,              // Hugging Face Phi3Model / Phi3ForCausalLM: Llama's names, q/k/v fused as qkv_proj
                       // and gate/up as gate_up_proj
  HfGemma2,            // Hugging Face Gemma2Model / Gemma2ForCausalLM: Llama's names, four norms a layer
  HfBart,              // Hugging Face BartModel / BartForConditionalGeneration: the encoder's or the decoder's
                       // names after "model.encoder." / "model.decoder." (engine/model/seq2seq.cpp)
};

// A tensor's name in a layout, and the rows of it that hold this parameter (a fused tensor such
// as nn.MultiheadAttention's in_proj holds q, k and v stacked along its first axis).
struct LayoutName {
  std::string name;
  int64_t row0 = 0;                   // first row of the parameter in the named tensor
  int64_t rows = -1;                  // -1: the whole tensor
  std::vector<int64_t> stored_shape;  // shape of the named tensor
  bool head = false;                  // Hugging Face: a task head's tensor, outside the base model's prefix ("bert.")
  bool transposed = false;            // stored as [in, out] (GPT-2's Conv1D); row0/rows then count its columns
};
LayoutName layout_name(WeightLayout layout, const WeightEntry& entry, const ModelConfig& config);

// The RMSNorm gains of an RMSNorm model that exist in w (each layer's, the sandwich norms', the
// q/k norms', the final norm's): what Gemma's 1 + w offset applies to.
std::vector<Tensor*> rms_gains(const ModelConfig& config, ModelWeights& w);

// A layer's member kept in 16 bits, or null when it is float32 (or absent).
const HalfTensor* half_of(const LayerWeights& L, Tensor LayerWeights::*member);
// A layer's member as float32: itself, or its 16-bit matrix widened into scratch.
const Tensor& wide(const LayerWeights& L, Tensor LayerWeights::*member, Tensor& scratch);
// The same for the model-level matrices (the token embedding, the LM head).
const HalfTensor* half_of(const ModelWeights& w, Tensor ModelWeights::*member);
const Tensor& wide(const ModelWeights& w, Tensor ModelWeights::*member, Tensor& scratch);
// Row r of a model-level matrix as float32 into out (its columns), kept in 16 bits or not.
void weight_row(const ModelWeights& w, Tensor ModelWeights::*member, int64_t r, float* out);
// Whether any matrix of w is kept in 16 bits.
bool has_half(const ModelWeights& w);
// Every 16-bit matrix of w widened into its float32 member (what training, saving and a device
// upload need: parameters() then sees every tensor).
void widen_all(ModelWeights& w);
// The bytes w holds (float32 tensors at 4, 16-bit matrices at 2).
double resident_bytes(const ModelWeights& w);
// The L2 norm of each layer's parameters taken together (every weight, bias and gain of layer l,
// 16-bit matrices widened), then that of the rest (embeddings, final norm, heads): layers + 1
// values. What weight decay shrinks; a model that groks loses weight norm as it generalises
// (Nanda et al. 2023), and the Train tab draws these as it trains.
std::vector<double> weight_norms(const ModelConfig& config, const ModelWeights& w);

// Every tensor of w, in weight_entries order (empty ones skipped; 16-bit matrices are not in it:
// widen_all first).
std::vector<Tensor*> parameters(ModelWeights& w);
std::vector<const Tensor*> parameters(const ModelWeights& w);
// Same structure, all zeros (float32, 16-bit matrices included).
ModelWeights zeros_like(const ModelWeights& w);
// Empty weights of the config's structure (layers allocated, tensors empty).
ModelWeights empty_weights(const ModelConfig& config);

}  // namespace attnlab
