// ModelConfig: the hyper-parameters in a model folder's config.json, with validation.
// Unknown keys are ignored; a missing required key or an inconsistent value is an Error
// that names the key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnlab {

enum class Positional {
  None,
  Sinusoidal,
  Learned,
  Relative,
  Rotary,  // RoPE (Su et al.) on queries and keys, Hugging Face's half-split rotate_half
};
enum class NormPlacement { Post, Pre };
enum class NormKind {
  LayerNorm,  // (x - mean) / std * g + b
  RmsNorm,    // x / rms(x) * g (Llama's LlamaRMSNorm; no bias, no centring)
};
enum class Activation {
  Relu,
  Gelu,      // exact: x * Phi(x), nn.GELU()
  GeluTanh,  // tanh approximation, nn.GELU(approximate="tanh") (GPT-2's and BERT's "gelu_new")
  Silu,      // x * sigmoid(x), nn.SiLU() (Llama's gate)
};
enum class Pooling { Mean, MaskedMean, Cls };
enum class TokenizerKind { Word, Char };

// The rotary embedding's frequency scaling, as transformers' rope_parameters (5.x) / rope_scaling
// (4.x) give it: rope_type and its parameters, for ROPE_INIT_FUNCTIONS (modeling_rope_utils.py).
struct RopeScaling {
  std::string type = "default";  // default, linear, dynamic, yarn, longrope, llama3
  double factor = 0;             // 0: not given (yarn and longrope then take max_len / original_max)
  int original_max = 0;          // original_max_position_embeddings (0: max_len)
  double low_freq_factor = 1, high_freq_factor = 4;  // llama3
  double beta_fast = 32, beta_slow = 1;              // yarn
  double mscale = 0, mscale_all_dim = 0;             // yarn (0: not given)
  double attention_factor = -1;                      // yarn, longrope: the cos / sin scale (< 0: derived)
  bool truncate = true;                              // yarn: the correction range rounded outwards
  std::vector<float> short_factor, long_factor;      // longrope: one per frequency (head_dim / 2)

  bool is_default() const { return type == "default"; }
};

struct ModelConfig {
  int vocab_size = 0;
  int embed_size = 0;
  int num_heads = 0;
  int num_layers = 0;
  int ff_dim = 0;       // 0: no feed-forward sub-layer (the article's TextClassifier)
  int num_classes = 0;  // 0: encoder only, no classifier head
  int max_len = 0;
  Positional positional = Positional::None;
  NormPlacement norm = NormPlacement::Post;
  Activation activation = Activation::Relu;
  float layer_norm_eps = 1e-5f;
  Pooling pooling = Pooling::Mean;
  TokenizerKind tokenizer = TokenizerKind::Word;
  bool lowercase = true;
  bool add_cls = false;  // the tokenizer prepends [CLS] (config "add_cls"; see parse_config_json)
  // The parts around the layer stack (BERT has all four; the articles' models none):
  int type_vocab_size = 0;      // token-type (segment) embedding rows, added to the embedding; 0 = none
  bool embedding_norm = false;  // LayerNorm after the embedding sum
  bool final_norm = false;      // LayerNorm after the last layer (pre-norm stacks usually have one)
  bool pooler = false;          // dense + activation on the pooled vector before the classifier
  bool pooler_relu = false;     // the pooler's activation: tanh (BERT's pooler) or ReLU (DistilBERT's pre_classifier)
  std::vector<std::string> labels;
  // Decoder language models (GPT-2, Llama family; engine/model/hf_model.cpp). Defaults are the encoders'.
  NormKind norm_kind = NormKind::LayerNorm;
  int num_kv_heads =
      0;  // grouped-query attention: key/value heads, each serving a group of query heads (0 = num_heads)
  float rope_theta = 10000.0f;  // rotary base (Positional::Rotary)
  RopeScaling rope_scaling;     // its frequencies' scaling (Llama 3.1 / 3.2's llama3, Phi-3's longrope, ...)
  bool causal = false;          // the causal mask is part of the model (always on, not a user choice)
  int sliding_window = 0;  // with causal: key j is visible to query i only when i - j <= sliding_window (0 = no limit)
  bool gated_ff = false;   // SwiGLU feed-forward: fc2(act(fc1 x) * up x) (Llama's gate/up/down)
  bool qkv_bias = true;    // biases on the query/key/value projections
  bool qk_norm = false;    // Qwen3: RMSNorm over each head's query and key (q_norm, k_norm [D]) before RoPE
  bool out_bias = true;    // bias on the attention output projection
  bool ff_bias = true;     // biases on the feed-forward projections
  bool lm_head = false;    // a language-model head: logits over the vocabulary at every position
  bool tied_lm_head = false;  // its weight is the token embedding (tie_word_embeddings)
  float attn_scale = 0.0f;    // score scale; 0 = 1 / sqrt(head_dim)
  int head_size = 0;          // a head's width when not embed_size / num_heads (head_dim above); 0 = that
  // Gemma 2 (engine/model/hf_model.cpp's read_gemma2), each 0 / false / empty for every other model:
  float embed_scale = 0.0f;       // the token embedding times this (Gemma: sqrt(hidden) in float32); 0 = 1
  float attn_softcap = 0.0f;      // scores = cap * tanh(scores / cap) before the mask (attn_logit_softcapping)
  float final_softcap = 0.0f;     // logits = cap * tanh(logits / cap) (final_logit_softcapping)
  bool sandwich_norm = false;     // a norm on each sub-layer's output too (post_attention / post_feedforward_layernorm)
  bool norm_unit_offset = false;  // RMSNorm scales by 1 + w: the folder stores w, the gains held here are 1 + w
  // per layer: 1 where sliding_window applies (layer_types' "sliding_attention"); empty: every layer
  std::vector<uint8_t> sliding_layers;
  float local_rope_theta =
      0.0f;  // Gemma 3: the rotary base of the sliding layers (their own, unscaled); 0 = rope_theta
  // Encoder-decoders (BART; engine/model/seq2seq.h), each 0 / false for every other model:
  int pos_offset = 0;            // learned positions start at this row of the table (BART's 2)
  bool cross_attention = false;  // each layer attends to an encoder's output after its self-attention
  bool lm_head_bias = false;     // a bias on the LM head's logits (BART's final_logits_bias [1, vocab])
  int decoder_start_id = -1;     // the decoder's first input id (decoder_start_token_id)
  int pad_token_id = -1;         // padding's id when the vocabulary's is not "[PAD]" (BART's <pad>); -1: that

  int kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  // Whether layer l's attention has the sliding window (Gemma 2 alternates windowed and full layers).
  bool layer_slides(int l) const {
    return sliding_window > 0 && (sliding_layers.empty() || sliding_layers.at(static_cast<size_t>(l)) != 0);
  }
  // Whether layer l rotates with local_rope_theta (Gemma 3's sliding layers, window or not).
  bool layer_local_rope(int l) const {
    return local_rope_theta > 0 && !sliding_layers.empty() && sliding_layers.at(static_cast<size_t>(l)) != 0;
  }
  // Some layers slide and some do not: a pass needs both masks (AttnMask::sliding).
  bool mixed_windows() const;
  bool is_language_model() const { return lm_head; }

  // Each head's width: embed_size / num_heads, or head_size when a config sets it apart from the
  // hidden size (Hugging Face's head_dim: Qwen3-0.6B has 16 heads of 128 over a hidden size of
  // 1,024); the queries then have num_heads * head_dim columns, the output projection as many inputs.
  int head_dim() const { return head_size > 0 ? head_size : embed_size / num_heads; }
  int attn_width() const { return num_heads * head_dim(); }  // the queries' and the heads' context width
  // Throws Error naming the first inconsistent value.
  void validate() const;
  // Number of float parameters the weights hold (from the weight table, engine/model/weights.cpp).
  long long parameter_count() const;
  // the parameters 16 bits can hold: the layers' matrices, the token embedding and the LM head
  long long half_matrix_count() const;
};

ModelConfig parse_config_json(const std::string& text, const std::string& where = "config.json");
ModelConfig load_config(const std::string& path);
std::string config_to_json(const ModelConfig& c);

const char* to_string(Positional p);
const char* to_string(NormPlacement n);
const char* to_string(Activation a);
const char* to_string(NormKind n);
const char* to_string(Pooling p);
const char* to_string(TokenizerKind t);
Positional parse_positional(const std::string& s);
NormPlacement parse_norm(const std::string& s);
Activation parse_activation(const std::string& s);
NormKind parse_norm_kind(const std::string& s);
Pooling parse_pooling(const std::string& s);
TokenizerKind parse_tokenizer(const std::string& s);

}  // namespace attnlab
