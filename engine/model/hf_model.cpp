// Hugging Face folders (see hf_model.h): config mapping per model_type, weights from one file or
// shards, the prefix of the base model ("bert." in BertForSequenceClassification), the tokenizer.
#include "engine/model/hf_model.h"

#include "engine/core/memory.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/core/io_util.h"

namespace attnlab {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

json parse_json_file_text(const std::string& text, const std::string& where) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw Error(where + ": not valid JSON (" + json_error_text(e.what()) + ")");
  }
}

struct Keys {
  const json& j;
  const std::string& where;
  int integer(const char* key, bool required, int fallback = 0) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
      if (required) throw Error(where + ": missing required key \"" + key + "\"");
      return fallback;
    }
    if (!it->is_number_integer()) throw Error(where + ": \"" + key + "\" must be an integer");
    const long long v = it->get<long long>();
    if (v < 0 || v > (1LL << 30)) throw Error(where + ": \"" + key + "\" out of range (" + std::to_string(v) + ")");
    return static_cast<int>(v);
  }
  std::string str(const char* key, const std::string& fallback) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_string()) throw Error(where + ": \"" + key + "\" must be a string");
    return it->get<std::string>();
  }
  double number(const char* key, double fallback) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_number()) throw Error(where + ": \"" + key + "\" must be a number");
    return it->get<double>();
  }
  bool boolean(const char* key, bool fallback) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) throw Error(where + ": \"" + key + "\" must be true or false");
    return it->get<bool>();
  }
};

Activation hf_activation(const std::string& act, const std::string& where) {
  if (act == "gelu") return Activation::Gelu;  // transformers' "gelu" is the exact erf form
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") return Activation::GeluTanh;
  if (act == "relu") return Activation::Relu;
  if (act == "silu" || act == "swish") return Activation::Silu;
  throw Error(where + ": activation \"" + act +
              "\" is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu, silu are)");
}

// id2label {"0": "NEGATIVE", "1": "POSITIVE"} -> labels in id order; empty when absent or not 0..n-1.
std::vector<std::string> hf_labels(const json& j) {
  std::vector<std::string> labels;
  auto it = j.find("id2label");
  if (it == j.end() || !it->is_object()) return labels;
  std::map<long, std::string> byid;
  for (const auto& [k, v] : it->items()) {
    char* end = nullptr;
    const long id = std::strtol(k.c_str(), &end, 10);
    if (k.empty() || *end != '\0' || id < 0 || id > 100000 || !v.is_string()) return {};
    byid[id] = v.get<std::string>();
  }
  long expect = 0;
  for (const auto& [id, name] : byid) {
    if (id != expect++) return {};
    labels.push_back(name);
  }
  return labels;
}

TensorMap load_weights(const fs::path& dir, HalfMap* halves) {
  const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  if (fs::exists(single)) return load_safetensors(single.string(), halves);
  if (fs::exists(index)) {
    TensorMap all;
    for (const std::string& file : parse_shard_index(read_file_bytes(index.string()), index.string())) {
      const fs::path shard = dir / file;
      if (!fs::exists(shard))
        throw Error(index.string() + ": shard \"" + file + "\" is listed but missing from the folder");
      TensorMap part = load_safetensors(shard.string(), halves);
      for (auto& [name, t] : part) all[name] = std::move(t);
    }
    return all;
  }
  for (const char* pickle : {"pytorch_model.bin", "pytorch_model.bin.index.json"})
    if (fs::exists(dir / pickle))
      throw Error(dir.string() + ": has only " + pickle +
                  " (a Python pickle, which can run code when read; attnlab never reads one). Convert it once "
                  "where you trust the file: python3 -c \"from transformers import AutoModel; "
                  "AutoModel.from_pretrained('DIR').save_pretrained('DIR', safe_serialization=True)\"");
  throw Error(dir.string() + ": no weights (expected model.safetensors or model.safetensors.index.json)");
}

// The base model's name prefix the tensors use: "bert." (task models) or "" (the base model).
std::string find_prefix(const TensorMap& t, const std::string& prefix, const std::string& probe,
                        const std::string& model_type, const std::string& where) {
  for (const std::string& p : {prefix, std::string()})
    if (t.count(p + probe)) return p;
  std::string seen;
  int n = 0;
  for (const auto& [name, _] : t) {
    if (n++ == 3) break;
    seen += (seen.empty() ? "" : ", ") + name;
  }
  throw Error(where + ": no \"" + probe + "\" or \"" + prefix + probe + "\" tensor (found " + seen +
              (t.size() > 3 ? ", ..." : "") + "): not a " + model_type + " model's weights");
}

// Each family's config.json reader: its keys (and the class defaults save_pretrained leaves out)
// onto the ModelConfig that parse_hf_config has set up with the encoders' defaults.
using ConfigReader = void (*)(const Keys& k, const json& j, const std::string& model_type, ModelConfig& c,
                              const std::string& where);

void read_bert(const Keys& k, const json&, const std::string&, ModelConfig& c, const std::string& where) {
  c.vocab_size = k.integer("vocab_size", true);
  c.embed_size = k.integer("hidden_size", true);
  c.num_heads = k.integer("num_attention_heads", true);
  c.num_layers = k.integer("num_hidden_layers", true);
  c.ff_dim = k.integer("intermediate_size", true);
  c.max_len = k.integer("max_position_embeddings", false, 512);
  c.type_vocab_size = k.integer("type_vocab_size", false, 2);
  c.layer_norm_eps = static_cast<float>(k.number("layer_norm_eps", 1e-12));
  c.activation = hf_activation(k.str("hidden_act", "gelu"), where);
  const std::string pos = k.str("position_embedding_type", "absolute");
  if (pos != "absolute")
    throw Error(where + ": position_embedding_type \"" + pos + "\" is not supported (absolute is)");
  if (k.boolean("is_decoder", false)) throw Error(where + ": BERT as a decoder (is_decoder) is not supported");
}

void read_distilbert(const Keys& k, const json&, const std::string&, ModelConfig& c, const std::string& where) {
  c.vocab_size = k.integer("vocab_size", true);
  c.embed_size = k.integer("dim", true);
  c.num_heads = k.integer("n_heads", true);
  c.num_layers = k.integer("n_layers", true);
  c.ff_dim = k.integer("hidden_dim", true);
  c.max_len = k.integer("max_position_embeddings", false, 512);
  c.layer_norm_eps = 1e-12f;  // modeling_distilbert.py: nn.LayerNorm(dim, eps=1e-12), not configurable
  c.activation = hf_activation(k.str("activation", "gelu"), where);
  k.boolean("sinusoidal_pos_embds", false);  // checked here, used in load_hf_model
  c.pooler_relu = true;                      // pre_classifier then ReLU
}

void read_gpt2(const Keys& k, const json&, const std::string&, ModelConfig& c, const std::string& where) {
  // GPT2Config's defaults: save_pretrained writes only the keys that differ from them.
  c.vocab_size = k.integer("vocab_size", false, 50257);
  c.embed_size = k.integer("n_embd", false, 768);
  c.num_layers = k.integer("n_layer", false, 12);
  c.num_heads = k.integer("n_head", false, 12);
  c.ff_dim = k.integer("n_inner", false, 4 * c.embed_size);
  c.max_len = k.integer("n_positions", false, 1024);
  c.activation = hf_activation(k.str("activation_function", "gelu_new"), where);
  c.layer_norm_eps = static_cast<float>(k.number("layer_norm_epsilon", 1e-5));
  c.norm = NormPlacement::Pre;
  c.embedding_norm = false;
  c.final_norm = true;
  c.causal = true;
  c.lm_head = true;
  c.tied_lm_head = k.boolean("tie_word_embeddings", true);
  c.pooling = Pooling::Mean;
  if (!k.boolean("scale_attn_weights", true)) c.attn_scale = 1.0f;  // scores not divided by sqrt(d)
  if (k.boolean("scale_attn_by_inverse_layer_idx", false))
    throw Error(where + ": scale_attn_by_inverse_layer_idx is not supported");
  if (k.boolean("add_cross_attention", false)) throw Error(where + ": GPT-2 with cross-attention is not supported");
}

// BART (modeling_bart.py, BartConfig's defaults for what save_pretrained leaves out): the
// decoder's config; bart_encoder_config makes the encoder's. Post-LN layers, learned positions
// from row 2 of their table, layernorm_embedding, nn.LayerNorm's default epsilon (BART's config
// has none), the token embedding times sqrt(d_model) when scale_embedding, tied LM head.
void read_bart(const Keys& k, const json&, const std::string&, ModelConfig& c, const std::string& where) {
  c.vocab_size = k.integer("vocab_size", false, 50265);
  c.embed_size = k.integer("d_model", false, 1024);
  c.num_layers = k.integer("decoder_layers", false, 12);
  c.num_heads = k.integer("decoder_attention_heads", false, 16);
  c.ff_dim = k.integer("decoder_ffn_dim", false, 4096);
  c.max_len = k.integer("max_position_embeddings", false, 1024);
  c.activation = hf_activation(k.str("activation_function", "gelu"), where);
  c.layer_norm_eps = 1e-5f;
  c.pos_offset = 2;  // BartLearnedPositionalEmbedding: "if padding_idx is specified then offset the embedding ids by 2"
  c.embedding_norm = true;
  c.final_norm = false;
  if (k.boolean("scale_embedding", false)) c.embed_scale = std::sqrt(static_cast<float>(c.embed_size));
  c.causal = true;
  c.cross_attention = true;
  c.lm_head = true;
  c.tied_lm_head = k.boolean("tie_word_embeddings", true);
  c.decoder_start_id = k.integer("decoder_start_token_id", false, 2);
  c.pad_token_id = k.integer("pad_token_id", false, 1);
  c.pooling = Pooling::Mean;
  for (const auto& [key, id] :
       {std::pair{"decoder_start_token_id", c.decoder_start_id}, {"pad_token_id", c.pad_token_id}})
    if (id >= c.vocab_size) throw Error(where + ": " + key + " " + std::to_string(id) + " is outside the vocabulary");
}

ModelConfig bart_encoder_config(const Keys& k, const ModelConfig& decoder) {
  ModelConfig c = decoder;
  c.num_layers = k.integer("encoder_layers", false, 12);
  c.num_heads = k.integer("encoder_attention_heads", false, 16);
  c.ff_dim = k.integer("encoder_ffn_dim", false, 4096);
  c.causal = c.cross_attention = c.lm_head = c.tied_lm_head = c.lm_head_bias = false;
  c.decoder_start_id = -1;
  if (c.num_heads > 0 && c.embed_size % c.num_heads != 0)
    throw Error(k.where + ": d_model " + std::to_string(c.embed_size) + " is not divisible by the " +
                std::to_string(c.num_heads) + " encoder_attention_heads");
  c.validate();
  return c;
}

// The rotary settings: rope_theta and the frequency scaling, from transformers 4.x's rope_theta
// and rope_scaling, or 5.x's rope_parameters {rope_type, rope_theta, factor, ...} (both spell the
// type rope_type, older folders type). Where a folder has both, it is read as 5.x reads it
// (convert_rope_params_to_dict): a non-empty rope_scaling is the dict, and the dict's rope_theta
// comes before a top-level one. Phi-3 keeps original_max_position_embeddings beside them and
// transformers gives that one priority (standardize_rope_params).
void read_rope(const Keys& k, const json& j, ModelConfig& c, const std::string& where) {
  c.rope_theta = static_cast<float>(k.number("rope_theta", 10000.0));
  const json* params = nullptr;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_object()) throw Error(where + ": \"" + key + "\" must be an object");
    if (!params && !it->empty()) params = &*it;
  }
  RopeScaling& r = c.rope_scaling;
  if (params) {
    const Keys p{*params, where};
    if (auto t = params->find("rope_theta"); t != params->end() && t->is_number()) c.rope_theta = t->get<float>();
    r.type = p.str("rope_type", p.str("type", "default"));
    r.factor = p.number("factor", 0);
    r.original_max = p.integer("original_max_position_embeddings", false, 0);
    r.low_freq_factor = p.number("low_freq_factor", 1);
    r.high_freq_factor = p.number("high_freq_factor", 4);
    r.beta_fast = p.number("beta_fast", 32);
    r.beta_slow = p.number("beta_slow", 1);
    r.mscale = p.number("mscale", 0);
    r.mscale_all_dim = p.number("mscale_all_dim", 0);
    r.attention_factor = p.number("attention_factor", -1);
    r.truncate = p.boolean("truncate", true);
    for (auto [key, out] : {std::pair<const char*, std::vector<float>*>{"short_factor", &r.short_factor},
                            {"long_factor", &r.long_factor}}) {
      auto it = params->find(key);
      if (it == params->end() || it->is_null()) continue;
      if (!it->is_array()) throw Error(where + ": rope " + key + " must be a list of numbers");
      for (const auto& v : *it) {
        if (!v.is_number()) throw Error(where + ": rope " + key + " must be a list of numbers");
        out->push_back(v.get<float>());
      }
    }
    if (params->contains("partial_rotary_factor") && p.number("partial_rotary_factor", 1.0) != 1.0)
      throw Error(where + ": partial_rotary_factor other than 1 is not supported (attnlab rotates the whole head)");
  }
  if (auto it = j.find("original_max_position_embeddings"); it != j.end() && it->is_number_integer())
    r.original_max = k.integer("original_max_position_embeddings", false, 0);  // Phi-3: outside, and first
  if (j.contains("partial_rotary_factor") && k.number("partial_rotary_factor", 1.0) != 1.0)
    throw Error(where + ": partial_rotary_factor other than 1 is not supported (attnlab rotates the whole head)");
  if (r.type == "default") r = RopeScaling{};
  if (!(c.rope_theta > 0)) throw Error(where + ": rope_theta must be a positive number");
}

// Llama, and the families that share its modules and names (Mistral, Qwen2; Phi-3 with its fused
// projections, WeightLayout::HfPhi3).
void read_llama_family(const Keys& k, const json& j, const std::string& model_type, ModelConfig& c,
                       const std::string& where) {
  // LlamaConfig / MistralConfig / Qwen2Config / Phi3Config defaults (transformers 4.40 and 5.24
  // agree on them), for keys left out.
  const bool mistral = model_type == "mistral", qwen2 = model_type == "qwen2", phi3 = model_type == "phi3";
  const bool qwen3 = model_type == "qwen3";
  c.vocab_size = k.integer("vocab_size", false, qwen2 || qwen3 ? 151936 : phi3 ? 32064 : 32000);
  c.embed_size = k.integer("hidden_size", false, phi3 ? 3072 : 4096);
  c.ff_dim = k.integer("intermediate_size", false, mistral ? 14336 : qwen2 || qwen3 ? 22016 : phi3 ? 8192 : 11008);
  c.num_layers = k.integer("num_hidden_layers", false, 32);
  c.num_heads = k.integer("num_attention_heads", false, 32);
  c.num_kv_heads = k.integer("num_key_value_heads", false, mistral ? 8 : qwen3 ? 32 : c.num_heads);
  c.max_len = k.integer("max_position_embeddings", false,
                        mistral          ? 131072
                        : qwen2 || qwen3 ? 32768
                        : phi3           ? 4096
                                         : 2048);
  c.activation = hf_activation(k.str("hidden_act", "silu"), where);
  c.layer_norm_eps = static_cast<float>(k.number("rms_norm_eps", phi3 ? 1e-5 : 1e-6));
  read_rope(k, j, c, where);
  c.tied_lm_head = k.boolean("tie_word_embeddings", false);
  // head_dim (transformers 5.x's attention: getattr(config, "head_dim", hidden // heads), None
  // meaning that): a head's width when it is set apart from the hidden size; Qwen3Config's
  // defaults to 128 whatever the hidden size (Qwen3-0.6B: 16 heads of 128 over 1,024)
  if (auto it = j.find("head_dim"); (it != j.end() && !it->is_null()) || qwen3) {
    if (it != j.end() && !it->is_null() && !(it->is_number_integer() && it->get<long long>() > 0))
      throw Error(where + ": head_dim must be a positive integer, got " + it->dump());
    const long long D = it != j.end() && !it->is_null() ? it->get<long long>() : 128;
    if (D > 4096) throw Error(where + ": head_dim " + std::to_string(D) + " is implausibly large");
    if (c.num_heads <= 0 || D * c.num_heads != c.embed_size) c.head_size = static_cast<int>(D);
  }
  c.qk_norm = qwen3;  // Qwen3Attention's q_norm / k_norm over head_dim
  if (c.num_kv_heads > 0 && c.num_heads % c.num_kv_heads != 0)
    throw Error(where + ": num_key_value_heads (" + std::to_string(c.num_kv_heads) +
                ") does not divide num_attention_heads (" + std::to_string(c.num_heads) +
                "): grouped-query attention needs whole groups");
  // Biases: Llama's attention_bias (q, k, v, o) and mlp_bias; Qwen2 has q, k, v biases only.
  const bool attention_bias = !phi3 && k.boolean("attention_bias", false);  // Phi-3: no biases at all
  // (Qwen3, unlike Qwen2, has q/k/v biases only with attention_bias)
  c.qkv_bias = qwen2 || attention_bias;
  c.out_bias = attention_bias;
  c.ff_bias = !phi3 && k.boolean("mlp_bias", false);
  // Sliding window (Mistral; Qwen2 when use_sliding_window): query i sees the W keys i - W + 1 .. i,
  // as transformers masks it since 4.53 (masking_utils.sliding_window_overlay: kv > q - W; 4.40's
  // eager mask let one more key through); attnlab's window counts the keys before i.
  // Phi-3 (5.x): a window when sliding_window is set (create_sliding_window_causal_mask), none when null
  if (phi3) {
    auto it = j.find("sliding_window");
    const int W = it == j.end() || it->is_null() ? 0 : k.integer("sliding_window", false, 0);
    if (W == 1) throw Error(where + ": sliding_window 1 (each token sees only itself) is not supported");
    c.sliding_window = W > 0 ? W - 1 : 0;
  }
  if (mistral || ((qwen2 || qwen3) && k.boolean("use_sliding_window", false))) {
    auto it = j.find("sliding_window");  // absent: the class default 4096; null: no window
    const int W = it == j.end() ? 4096 : it->is_null() ? 0 : k.integer("sliding_window", false, 0);
    if (W == 1) throw Error(where + ": sliding_window 1 (each token sees only itself) is not supported");
    c.sliding_window = W > 0 ? W - 1 : 0;
  }
  // transformers 5.x lists each layer's attention: one kind for every layer is what attnlab runs
  if (auto it = j.find("layer_types"); it != j.end() && it->is_array() && !it->empty()) {
    std::set<std::string> kinds;
    for (const auto& t : *it)
      if (t.is_string()) kinds.insert(t.get<std::string>());
    if (kinds.size() > 1)
      throw Error(where + ": layer_types mixes attention kinds per layer; attnlab runs one kind for every layer");
    const bool sliding = kinds.count("sliding_attention") > 0;
    if (sliding != (c.sliding_window > 0))
      throw Error(where + ": layer_types says " + (sliding ? "sliding" : "full") + " attention but sliding_window " +
                  (c.sliding_window > 0 ? "is set" : "is not") + "; the two disagree");
  }
  c.positional = Positional::Rotary;
  c.norm = NormPlacement::Pre;
  c.norm_kind = NormKind::RmsNorm;
  c.embedding_norm = false;
  c.final_norm = true;
  c.gated_ff = true;
  c.causal = true;
  c.lm_head = true;
  c.pooling = Pooling::Mean;
  c.type_vocab_size = 0;
}

// Gemma 2 (modeling_gemma2.py, Gemma2Config's defaults for keys left out): Llama's rotary,
// grouped-query and gated steps, with the token embedding times sqrt(hidden) (in float32, as
// Gemma2TextScaledWordEmbedding's buffer), RMSNorm scaling by 1 + w, a norm on each sub-layer's
// output as well (the "sandwich"), GeGLU (hidden_activation, the tanh GELU), scores scaled by
// query_pre_attn_scalar^-1/2 and soft-capped (cap * tanh(s / cap)) before the mask, the logits
// soft-capped too, and layer_types' alternating sliding-window and full layers.
//
// Gemma 3's text model (model_type gemma3_text, Gemma3ForCausalLM: Gemma 3 270M, 1B) takes the
// same steps with Gemma2's q_norm / k_norm (1 + w, over each head), no score cap (Gemma3Attention
// passes none to the attention, whatever the config says), five sliding layers to each full one
// by default (sliding_window_pattern 6), and a rotary base per layer kind: 5.x's rope_parameters
// {sliding_attention: {...}, full_attention: {...}}, 4.x's rope_local_base_freq for the sliding
// layers and rope_theta / rope_scaling for the full ones (Gemma3TextConfig's defaults 1e4, 1e6).
void read_gemma2(const Keys& k, const json& j, const std::string& model_type, ModelConfig& c,
                 const std::string& where) {
  const bool gemma3 = model_type == "gemma3_text";
  c.vocab_size = k.integer("vocab_size", false, gemma3 ? 262208 : 256000);
  c.embed_size = k.integer("hidden_size", false, 2304);
  c.ff_dim = k.integer("intermediate_size", false, 9216);
  c.num_layers = k.integer("num_hidden_layers", false, 26);
  c.num_heads = k.integer("num_attention_heads", false, 8);
  c.num_kv_heads = k.integer("num_key_value_heads", false, 4);
  c.max_len = k.integer("max_position_embeddings", false, gemma3 ? 131072 : 8192);
  c.activation = hf_activation(k.str("hidden_activation", k.str("hidden_act", "gelu_pytorch_tanh")), where);
  c.layer_norm_eps = static_cast<float>(k.number("rms_norm_eps", 1e-6));
  auto params = j.find("rope_parameters");
  const bool per_kind = gemma3 && params != j.end() && params->is_object() &&
                        (params->contains("full_attention") || params->contains("sliding_attention"));
  if (!gemma3) {
    read_rope(k, j, c, where);
  } else {
    // each kind's parameters as read_rope reads a single set
    auto kind = [&](const char* name, double theta) {
      json one = json::object();
      one["rope_theta"] = theta;
      if (per_kind) {
        if (auto it = params->find(name); it != params->end() && it->is_object()) one["rope_parameters"] = *it;
      } else if (std::string(name) == "full_attention") {
        one["rope_theta"] = k.number("rope_theta", theta);
        if (auto it = j.find("rope_scaling"); it != j.end()) one["rope_scaling"] = *it;
      } else {
        one["rope_theta"] = k.number("rope_local_base_freq", theta);
      }
      ModelConfig r;
      read_rope(Keys{one, where}, one, r, where);
      return r;
    };
    const ModelConfig full = kind("full_attention", 1e6), local = kind("sliding_attention", 1e4);
    c.rope_theta = full.rope_theta, c.rope_scaling = full.rope_scaling;
    if (!local.rope_scaling.is_default())
      throw Error(where + ": a rope_type for the sliding layers (" + local.rope_scaling.type +
                  ") is not supported (their default rotation is)");
    c.local_rope_theta = local.rope_theta;
  }
  c.tied_lm_head = k.boolean("tie_word_embeddings", true);
  const int D = k.integer("head_dim", false, 256);
  if (D <= 0 || D > 4096) throw Error(where + ": head_dim must be a positive integer, got " + std::to_string(D));
  if (c.num_heads <= 0 || D * c.num_heads != c.embed_size) c.head_size = D;
  if (c.num_kv_heads > 0 && c.num_heads % c.num_kv_heads != 0)
    throw Error(where + ": num_key_value_heads (" + std::to_string(c.num_kv_heads) +
                ") does not divide num_attention_heads (" + std::to_string(c.num_heads) + ")");
  const bool bias = k.boolean("attention_bias", false);
  c.qkv_bias = c.out_bias = bias;
  c.ff_bias = false;
  if (k.boolean("use_bidirectional_attention", false))
    throw Error(where + ": use_bidirectional_attention (Gemma as an encoder) is not supported");
  // self.scaling = query_pre_attn_scalar ** -0.5, a Python float the float32 scores are multiplied by
  const double qpas = k.number("query_pre_attn_scalar", 256);
  if (!(qpas > 0)) throw Error(where + ": query_pre_attn_scalar must be a positive number");
  c.attn_scale = static_cast<float>(std::pow(qpas, -0.5));
  c.attn_softcap = gemma3 ? 0.0f : static_cast<float>(k.number("attn_logit_softcapping", 50.0));
  c.final_softcap = static_cast<float>(k.number("final_logit_softcapping", gemma3 ? 0.0 : 30.0));
  if (j.contains("attn_logit_softcapping") && j["attn_logit_softcapping"].is_null()) c.attn_softcap = 0;
  if (j.contains("final_logit_softcapping") && j["final_logit_softcapping"].is_null()) c.final_softcap = 0;
  if (c.attn_softcap < 0 || c.final_softcap < 0) throw Error(where + ": a soft-capping value must be positive");
  c.embed_scale = static_cast<float>(std::sqrt(static_cast<double>(c.embed_size)));  // torch.tensor(hidden ** 0.5)
  c.sandwich_norm = true;
  c.norm_unit_offset = true;
  c.qk_norm = gemma3;  // Gemma3Attention's q_norm / k_norm (Gemma3RMSNorm over head_dim)
  // layer_types (5.x), else Gemma2Config's pattern: even layers slide ((i + 1) % 2, as 4.x's
  // not bool(layer_idx % 2)); the window covers the W keys i - W + 1 .. i (kv > q - W)
  c.sliding_layers.assign(static_cast<size_t>(c.num_layers), 0);
  if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || static_cast<int>(it->size()) != c.num_layers)
      throw Error(where + ": layer_types must list one attention kind per layer (" + std::to_string(c.num_layers) +
                  ")");
    for (size_t l = 0; l < it->size(); ++l) {
      const json& t = (*it)[l];
      const std::string kind = t.is_string() ? t.get<std::string>() : "";
      if (kind != "sliding_attention" && kind != "full_attention")
        throw Error(where + ": layer_types[" + std::to_string(l) + "] is " + t.dump() +
                    " (sliding_attention or full_attention)");
      c.sliding_layers[l] = kind == "sliding_attention";
    }
  } else {
    // Gemma2Config: (i + 1) % 2; Gemma3TextConfig: (i + 1) % sliding_window_pattern (6)
    const int pattern = gemma3 ? k.integer("sliding_window_pattern", false, 6) : 2;
    if (pattern <= 0) throw Error(where + ": sliding_window_pattern must be positive");
    for (int l = 0; l < c.num_layers; ++l) c.sliding_layers[static_cast<size_t>(l)] = (l + 1) % pattern != 0;
  }
  auto it = j.find("sliding_window");  // absent: the class default 4096; null: no window
  const int W = it == j.end() ? 4096 : it->is_null() ? 0 : k.integer("sliding_window", false, 0);
  if (W == 1) throw Error(where + ": sliding_window 1 (each token sees only itself) is not supported");
  c.sliding_window = W > 0 ? W - 1 : 0;  // (0: no window; the layer kinds still pick Gemma 3's rotary bases)
  c.positional = Positional::Rotary;
  c.norm = NormPlacement::Pre;
  c.norm_kind = NormKind::RmsNorm;
  c.embedding_norm = false;
  c.final_norm = true;
  c.gated_ff = true;
  c.causal = true;
  c.lm_head = true;
  c.pooling = Pooling::Mean;
  c.type_vocab_size = 0;
}

// The architecture table (llama.cpp's src/llama-arch.cpp keeps its architectures the same way):
// one row per model_type with what attnlab needs to know of it. Adding a family that reuses a
// layout is a row; a new layout adds its WeightLayout column (engine/model/weights.cpp) and its reader.
struct HfArch {
  const char* model_type;
  bool decoder;            // a causal language model (next-token views) rather than an encoder
  const char* base_class;  // transformers' class of the base model
  const char* task_class;  // of the task model attnlab reads and writes (LM head or classifier)
  WeightLayout layout;     // the tensor names (engine/model/weights.cpp)
  const char* prefix;      // the base model's name prefix inside a task model's tensors
  const char* probe;       // a base-model tensor whose name shows that prefix
  ConfigReader read;
  bool seq2seq = false;  // an encoder-decoder: this row's reader gives the decoder's config (load_seq2seq)
};

const std::vector<HfArch>& arch_table() {
  static const std::vector<HfArch> rows = {
      {"bert", false, "BertModel", "BertForSequenceClassification", WeightLayout::HfBert, "bert.",
       "embeddings.word_embeddings.weight", read_bert},
      {"distilbert", false, "DistilBertModel", "DistilBertForSequenceClassification", WeightLayout::HfDistilBert,
       "distilbert.", "embeddings.word_embeddings.weight", read_distilbert},
      {"gpt2", true, "GPT2Model", "GPT2LMHeadModel", WeightLayout::HfGpt2, "transformer.", "wte.weight", read_gpt2},
      {"llama", true, "LlamaModel", "LlamaForCausalLM", WeightLayout::HfLlama, "model.", "embed_tokens.weight",
       read_llama_family},
      {"mistral", true, "MistralModel", "MistralForCausalLM", WeightLayout::HfLlama, "model.", "embed_tokens.weight",
       read_llama_family},
      {"qwen2", true, "Qwen2Model", "Qwen2ForCausalLM", WeightLayout::HfLlama, "model.", "embed_tokens.weight",
       read_llama_family},
      {"phi3", true, "Phi3Model", "Phi3ForCausalLM", WeightLayout::HfPhi3, "model.", "embed_tokens.weight",
       read_llama_family},
      {"qwen3", true, "Qwen3Model", "Qwen3ForCausalLM", WeightLayout::HfLlama, "model.", "embed_tokens.weight",
       read_llama_family},
      {"gemma2", true, "Gemma2Model", "Gemma2ForCausalLM", WeightLayout::HfGemma2, "model.", "embed_tokens.weight",
       read_gemma2},
      {"gemma3_text", true, "Gemma3TextModel", "Gemma3ForCausalLM", WeightLayout::HfGemma2, "model.",
       "embed_tokens.weight", read_gemma2},
      {"bart", false, "BartModel", "BartForConditionalGeneration", WeightLayout::HfBart, "model.", "shared.weight",
       read_bart, true},
  };
  return rows;
}

const HfArch* find_arch(const std::string& model_type) {
  for (const HfArch& a : arch_table())
    if (model_type == a.model_type) return &a;
  return nullptr;
}

const HfArch& arch_of(const std::string& model_type) {
  const HfArch* a = find_arch(model_type);
  if (!a) throw Error("internal: no architecture row for model_type \"" + model_type + "\"");
  return *a;
}

}  // namespace

std::string supported_hf_model_types() {
  std::string out;
  for (const HfArch& a : arch_table()) out += (out.empty() ? "" : ", ") + std::string(a.model_type);
  return out;
}

bool is_decoder_type(const std::string& model_type) {
  const HfArch* a = find_arch(model_type);
  return a && a->decoder;
}

bool is_seq2seq_type(const std::string& model_type) {
  const HfArch* a = find_arch(model_type);
  return a && a->seq2seq;
}

std::string hf_class_name(const std::string& model_type, bool task) {
  const HfArch& a = arch_of(model_type);
  return task ? a.task_class : a.base_class;
}

WeightLayout hf_layout(const std::string& model_type) {
  return arch_of(model_type).layout;
}

std::string hf_prefix(const std::string& model_type) {
  return arch_of(model_type).prefix;
}

std::vector<std::string> parse_shard_index(const std::string& text, const std::string& where) {
  const json j = parse_json_file_text(text, where);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw Error(where + ": expected an object with a \"weight_map\" of tensor name -> shard file");
  std::vector<std::string> files;
  std::set<std::string> seen;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) throw Error(where + ": the shard of \"" + name + "\" must be a file name");
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." || f == "..")
      throw Error(where + ": shard \"" + f + "\" must be a plain file name in the model folder");
    if (seen.insert(f).second) files.push_back(f);
  }
  if (files.empty()) throw Error(where + ": \"weight_map\" is empty");
  return files;
}

ModelConfig parse_hf_config(const std::string& text, HfInfo& info, const std::string& where) {
  const json j = parse_json_file_text(text, where);
  if (!j.is_object()) throw Error(where + ": expected a JSON object");
  const Keys k{j, where};
  info.model_type = k.str("model_type", "");
  info.config_text = text;
  if (auto it = j.find("architectures"); it != j.end() && it->is_array() && !it->empty() && (*it)[0].is_string())
    info.architecture = (*it)[0].get<std::string>();
  ModelConfig c;
  c.positional = Positional::Learned;
  c.norm = NormPlacement::Post;
  c.embedding_norm = true;
  c.pooling = Pooling::Cls;  // the classifier reads the first token, [CLS]
  c.add_cls = false;         // special tokens come from the folder's tokenizer
  c.tokenizer = TokenizerKind::Word;
  const HfArch* arch = find_arch(info.model_type);
  if (info.model_type.empty()) throw Error(where + ": no \"model_type\" (not a Hugging Face config?)");
  if (!arch)
    throw Error(where + ": model_type \"" + info.model_type +
                "\" is not supported (supported: " + supported_hf_model_types() + ")");
  arch->read(k, j, info.model_type, c, where);
  if (c.embed_size > 0 && c.num_heads > 0 && c.embed_size % c.num_heads != 0)
    throw Error(where + ": the hidden size " + std::to_string(c.embed_size) + " is not divisible by the " +
                std::to_string(c.num_heads) + " attention heads");
  try {
    c.validate();  // labels come later, from the classifier's size (load_hf_model)
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  return c;
}

bool is_hf_folder(const std::string& dir) {
  const fs::path p = fs::path(dir) / "config.json";
  if (!fs::exists(p)) return false;
  try {
    const json j = json::parse(read_file_bytes(p.string()));
    return j.is_object() && j.contains("model_type");
  } catch (...) {
    return false;
  }
}

namespace {

// The folder's tokenizer, and its files kept for a saved copy.
void load_tokenizer(Model& m, const fs::path& dir) {
  m.tokenizer = HfTokenizer::from_folder(dir.string());
  for (const char* f :
       {"tokenizer.json", "vocab.txt", "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"})
    if (fs::exists(dir / f)) m.hf.tokenizer_files[f] = read_file_bytes((dir / f).string());
  if (m.tokenizer->vocab_size() > m.config.vocab_size)
    throw Error(dir.string() + ": the tokenizer has " + std::to_string(m.tokenizer->vocab_size()) +
                " tokens but the embedding has only " + std::to_string(m.config.vocab_size) + " rows (vocab_size)");
  m.vocab = m.tokenizer->vocab();
}

// Lists tensors the model did not read (pre-training heads, buffers) as a note.
void note_unused(Model& m, const TensorMap& tensors, const std::set<std::string>& used, const std::string& what) {
  std::vector<std::string> unused;
  for (const auto& [name, t] : tensors)
    if (!used.count(name) && t.numel() > 0 && name.find("position_ids") == std::string::npos &&
        name.find("rotary_emb.inv_freq") == std::string::npos && name.find("attn.bias") == std::string::npos &&
        name.find("attn.masked_bias") == std::string::npos)
      unused.push_back(name);
  if (unused.empty()) return;
  std::string list;
  for (size_t i = 0; i < unused.size() && i < 3; ++i) list += (i ? ", " : "") + unused[i];
  if (unused.size() > 3) list += ", ...";
  m.hf.notes.push_back(std::to_string(unused.size()) + " tensors not used (" + list + "): " + what);
}

// GPT-2 and the Llama family: the base model under "transformer." / "model." (causal-LM
// models) or at the top level (base models), and an LM head: lm_head.weight, or the token
// embedding when tie_word_embeddings says so (GPT-2's default).
void load_decoder(Model& m, TensorMap& tensors, HalfMap& halves, const fs::path& dir) {
  const std::string where = dir.string();
  ModelConfig& c = m.config;
  const HfArch& arch = arch_of(m.hf.model_type);
  const std::string probe = arch.probe, prefixed = arch.prefix;
  if (tensors.count(prefixed + probe))
    m.hf.prefix = prefixed;
  else if (tensors.count(probe))
    m.hf.prefix = "";
  else
    throw Error(where + ": no \"" + prefixed + probe + "\" or \"" + probe + "\" tensor: not a " + m.hf.model_type +
                " model's weights");
  const bool has_head = tensors.count("lm_head.weight") > 0;
  if (!c.tied_lm_head && !has_head) {
    if (m.hf.architecture.find("CausalLM") != std::string::npos ||
        m.hf.architecture.find("LMHead") != std::string::npos)
      throw Error(where + ": " + m.hf.architecture + " without \"lm_head.weight\" (and tie_word_embeddings is false)");
    c.lm_head = false;  // a base model: hidden states only, no next-token views
    m.hf.notes.push_back("no language-model head (lm_head.weight) and untied embeddings: next-token views are off");
  }
  if (m.hf.architecture.empty()) m.hf.architecture = m.hf.prefix.empty() ? arch.base_class : arch.task_class;

  load_tokenizer(m, dir);
  std::set<std::string> used;
  m.weights = take_weights_from_layout(c, tensors, arch.layout, m.hf.prefix, &used, where, &halves);
  if (c.norm_unit_offset)  // Gemma2RMSNorm: output * (1.0 + weight.float()), the same float32 sum once
    for (Tensor* g : rms_gains(c, m.weights))
      for (float& v : g->data) v = 1.0f + v;
  if (c.tied_lm_head && has_head) used.insert("lm_head.weight");  // tied: transformers uses the embedding
  if (c.ff_dim == 0 && arch.layout == WeightLayout::HfLlama)      // an attention-only Llama: its empty MLP's norm
    for (int l = 0; l < c.num_layers; ++l)
      used.insert(m.hf.prefix + "layers." + std::to_string(l) + ".post_attention_layernorm.weight");
  note_unused(m, tensors, used, "attnlab shows the decoder and its LM head");
}

// An encoder-decoder (BART): BartForConditionalGeneration's tensors under "model." with an LM head
// (lm_head.weight, or the shared embedding when tied) and final_logits_bias, or a BartModel's at
// the top level without them. The shared embedding is each stack's embed_tokens (save_pretrained
// keeps one of the tied copies). The decoder is `m`, the encoder m.encoder.
void load_seq2seq(Model& m, TensorMap& tensors, HalfMap& halves, const fs::path& dir, const std::string& cfg_text,
                  const std::string& cfg_path) {
  const std::string where = dir.string();
  ModelConfig& c = m.config;
  const HfArch& arch = arch_of(m.hf.model_type);
  std::string P;
  if (tensors.count("model.encoder.embed_positions.weight"))
    P = "model.";
  else if (!tensors.count("encoder.embed_positions.weight"))
    throw Error(where +
                ": no \"model.encoder.embed_positions.weight\" or \"encoder.embed_positions.weight\" tensor: not a " +
                m.hf.model_type + " model's weights");
  std::set<std::string> used;
  const std::string shared = P + "shared.weight";
  for (const char* side : {"encoder.", "decoder."}) {
    const std::string name = P + side + "embed_tokens.weight";
    if (tensors.count(name)) continue;
    auto it = tensors.find(shared);
    if (it == tensors.end())
      throw Error(where + ": missing tensor \"" + shared + "\" (the token embedding the encoder and decoder share)");
    used.insert(shared);
    tensors[name] = it->second;
    if (auto h = halves.find(shared); h != halves.end()) halves[name] = h->second;
  }
  const bool has_head = tensors.count("lm_head.weight") > 0;
  c.lm_head_bias = tensors.count("final_logits_bias") > 0;
  if (P.empty() || (!c.tied_lm_head && !has_head)) {
    if (!P.empty())
      throw Error(where + ": " + arch.task_class + " without \"lm_head.weight\" (and tie_word_embeddings is false)");
    c.lm_head = false, c.lm_head_bias = false;  // a base model: hidden states and attention only
    m.hf.notes.push_back("a " + std::string(arch.base_class) +
                         " without a language-model head: next-token views are off");
  }
  if (m.hf.architecture.empty() || (c.lm_head && m.hf.architecture == arch.base_class))
    m.hf.architecture = c.lm_head ? arch.task_class : arch.base_class;
  load_tokenizer(m, dir);
  const json j = parse_json_file_text(cfg_text, cfg_path);
  auto enc = std::make_shared<Model>();
  try {
    enc->config = bart_encoder_config(Keys{j, cfg_path}, c);
  } catch (const Error& e) {
    const std::string msg = e.what();
    throw Error(msg.rfind(cfg_path, 0) == 0 ? msg : cfg_path + ": " + msg);
  }
  enc->vocab = m.vocab;
  enc->tokenizer = m.tokenizer;
  enc->source = m.source;
  enc->hf = m.hf;
  enc->hf.prefix = P + "encoder.";
  enc->hf.tokenizer_files.clear();
  enc->weights = take_weights_from_layout(enc->config, tensors, arch.layout, enc->hf.prefix, &used, where, &halves);
  m.hf.prefix = P + "decoder.";
  m.weights = take_weights_from_layout(c, tensors, arch.layout, m.hf.prefix, &used, where, &halves);
  if (c.tied_lm_head && has_head) used.insert("lm_head.weight");  // tied: transformers uses the embedding
  m.encoder = std::move(enc);
  note_unused(m, tensors, used, "attnlab shows the encoder, the decoder and its LM head");
}

}  // namespace

Model load_hf_model(const std::string& dir_in) {
  const fs::path dir(dir_in);
  Model m;
  m.source = dir_in;
  const std::string cfg_path = (dir / "config.json").string();
  const std::string cfg_text = read_file_bytes(cfg_path);
  m.config = parse_hf_config(cfg_text, m.hf, cfg_path);
  // A BF16 / F16 folder's layer matrices stay in 16 bits (engine/core/half.h)
  std::string dtype;  // transformers 5.x writes dtype, 4.x torch_dtype
  for (const json raw = json::parse(cfg_text); const char* key : {"dtype", "torch_dtype"})
    if (raw.contains(key) && raw[key].is_string()) {
      dtype = raw[key].get<std::string>();
      break;
    }
  check_weights_fit(m.config, available_bytes(), dir.string(),
                    dtype == "bfloat16" || dtype == "float16");  // before a byte of them is allocated
  HalfMap halves;
  TensorMap tensors = load_weights(dir, &halves);
  if (is_decoder_type(m.hf.model_type)) {
    load_decoder(m, tensors, halves, dir);
    return m;
  }
  if (is_seq2seq_type(m.hf.model_type)) {
    load_seq2seq(m, tensors, halves, dir, cfg_text, cfg_path);
    return m;
  }
  const std::string where = dir.string();
  const HfArch& arch = arch_of(m.hf.model_type);
  m.hf.prefix = find_prefix(tensors, arch.prefix, arch.probe, m.hf.model_type, where);
  const bool bert = m.hf.model_type == "bert";  // the pooler: BERT's pooler.dense, DistilBERT's pre_classifier
  const WeightLayout layout = arch.layout;
  const std::string& P = m.hf.prefix;

  // What the weights hold decides the head: a classifier (+ pooler / pre_classifier) or none.
  ModelConfig& c = m.config;
  if (auto it = tensors.find("classifier.weight"); it != tensors.end() && it->second.shape.size() == 2) {
    c.num_classes = static_cast<int>(it->second.shape[0]);
    c.pooler = tensors.count(bert ? P + "pooler.dense.weight" : "pre_classifier.weight") > 0;
    if (!bert && !c.pooler) throw Error(where + ": classifier.weight without pre_classifier.weight");
  } else {
    c.pooler = bert && tensors.count(P + "pooler.dense.weight");  // kept for fine-tuning a classifier on it
  }
  const json cfg = json::parse(cfg_text);  // parse_hf_config has checked it
  if (!bert && !tensors.count(P + "embeddings.position_embeddings.weight")) {
    // sinusoidal_pos_embds: the table is a frozen buffer that files usually hold; computed otherwise.
    if (cfg.value("sinusoidal_pos_embds", false)) c.positional = Positional::Sinusoidal;
  }
  const std::vector<std::string> id2label = hf_labels(cfg);
  if (c.num_classes > 0) {
    if (static_cast<int>(id2label.size()) == c.num_classes)
      c.labels = id2label;
    else
      for (int i = 0; i < c.num_classes; ++i) c.labels.push_back("LABEL_" + std::to_string(i));
  }
  if (m.hf.architecture.empty() || (c.num_classes > 0) != (m.hf.architecture == arch.task_class))
    m.hf.architecture = c.num_classes > 0 ? arch.task_class : arch.base_class;

  load_tokenizer(m, dir);
  std::set<std::string> used;
  m.weights = take_weights_from_layout(c, tensors, layout, P, &used, where, &halves);
  note_unused(m, tensors, used,
              "attnlab shows the encoder" + std::string(c.num_classes ? " and its classifier" : "") +
                  "; pre-training heads are left out");
  return m;
}

}  // namespace attnlab
