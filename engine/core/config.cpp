// ModelConfig parsing, validation and serialisation (config.json of a model folder).
#include "engine/core/config.h"

#include <algorithm>
#include <iterator>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/core/io_util.h"
#include "engine/core/tensor.h"

namespace attnlab {

using json = nlohmann::json;

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// Every enum's names, written once: to_string and the parsers are both read from these rows, so
// a name that is written can always be read back (they had drifted: "rotary" and "silu" were
// written and never parsed). Each table is checked against its enum's size at compile time.
namespace {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

constexpr EnumName<Positional> kPositional[] = {{Positional::None, "none"},
                                                {Positional::Sinusoidal, "sinusoidal"},
                                                {Positional::Learned, "learned"},
                                                {Positional::Relative, "relative"},
                                                {Positional::Rotary, "rotary"}};
constexpr EnumName<NormPlacement> kNormPlacement[] = {{NormPlacement::Post, "post"}, {NormPlacement::Pre, "pre"}};
constexpr EnumName<Activation> kActivation[] = {{Activation::Relu, "relu"},
                                                {Activation::Gelu, "gelu"},
                                                {Activation::GeluTanh, "gelu_tanh"},
                                                {Activation::Silu, "silu"}};
constexpr EnumName<NormKind> kNormKind[] = {{NormKind::LayerNorm, "layer_norm"}, {NormKind::RmsNorm, "rms_norm"}};
constexpr EnumName<Pooling> kPooling[] = {
    {Pooling::Mean, "mean"}, {Pooling::MaskedMean, "masked_mean"}, {Pooling::Cls, "cls"}};
constexpr EnumName<TokenizerKind> kTokenizerKind[] = {{TokenizerKind::Word, "word"}, {TokenizerKind::Char, "char"}};

// A table lists every value once, in the enum's order (so to_string can index it).
template <class E, size_t N>
constexpr bool complete(const EnumName<E> (&rows)[N], E last) {
  if (static_cast<size_t>(last) + 1 != N) return false;
  for (size_t k = 0; k < N; ++k)
    if (static_cast<size_t>(rows[k].value) != k) return false;
  return true;
}
static_assert(complete(kPositional, Positional::Rotary));
static_assert(complete(kNormPlacement, NormPlacement::Pre));
static_assert(complete(kActivation, Activation::Silu));
static_assert(complete(kNormKind, NormKind::RmsNorm));
static_assert(complete(kPooling, Pooling::Cls));
static_assert(complete(kTokenizerKind, TokenizerKind::Char));

template <class E, size_t N>
const char* name_of(const EnumName<E> (&rows)[N], E v) {
  const size_t k = static_cast<size_t>(v);
  return k < N ? rows[k].name : "?";
}

template <class E, size_t N>
E parse_name(const EnumName<E> (&rows)[N], const char* key, const std::string& s) {
  std::string allowed;
  for (const auto& r : rows) {
    if (s == r.name) return r.value;
    allowed += (allowed.empty() ? "" : " | ") + std::string(r.name);
  }
  throw Error(std::string(key) + ": unknown value \"" + s + "\" (expected " + allowed + ")");
}

}  // namespace

const char* to_string(Positional p) {
  return name_of(kPositional, p);
}
const char* to_string(NormPlacement n) {
  return name_of(kNormPlacement, n);
}
const char* to_string(Activation a) {
  return name_of(kActivation, a);
}
const char* to_string(NormKind n) {
  return name_of(kNormKind, n);
}
const char* to_string(Pooling p) {
  return name_of(kPooling, p);
}
const char* to_string(TokenizerKind t) {
  return name_of(kTokenizerKind, t);
}

Positional parse_positional(const std::string& s) {
  return parse_name(kPositional, "positional", s);
}
NormPlacement parse_norm(const std::string& s) {
  return parse_name(kNormPlacement, "norm", s);
}
Activation parse_activation(const std::string& s) {
  return parse_name(kActivation, "activation", s);
}
NormKind parse_norm_kind(const std::string& s) {
  return parse_name(kNormKind, "norm_kind", s);
}
Pooling parse_pooling(const std::string& s) {
  return parse_name(kPooling, "pooling", s);
}
TokenizerKind parse_tokenizer(const std::string& s) {
  return parse_name(kTokenizerKind, "tokenizer", s);
}

void ModelConfig::validate() const {
  auto positive = [](const char* key, long long v) {
    if (v <= 0) throw Error(std::string(key) + " must be positive, got " + std::to_string(v));
  };
  positive("vocab_size", vocab_size);
  positive("embed_size", embed_size);
  positive("num_heads", num_heads);
  positive("num_layers", num_layers);
  positive("max_len", max_len);
  if (ff_dim < 0) throw Error("ff_dim must be >= 0, got " + std::to_string(ff_dim));
  if (num_classes < 0) throw Error("num_classes must be >= 0, got " + std::to_string(num_classes));
  if (type_vocab_size < 0 || type_vocab_size > 1024)
    throw Error("type_vocab_size must be in [0, 1024], got " + std::to_string(type_vocab_size));
  if (head_size < 0) throw Error("head_dim must be positive, got " + std::to_string(head_size));
  if (head_size == 0 && embed_size % num_heads != 0)
    throw Error("num_heads (" + std::to_string(num_heads) + ") does not divide embed_size (" +
                std::to_string(embed_size) + ")");
  if (positional == Positional::Sinusoidal && embed_size % 2 != 0)
    throw Error("sinusoidal positions need an even embed_size, got " + std::to_string(embed_size));
  if (!(layer_norm_eps > 0.0f && layer_norm_eps < 1.0f)) throw Error("layer_norm_eps must be in (0, 1)");
  if (num_kv_heads < 0 || (num_kv_heads > 0 && num_heads % num_kv_heads != 0))
    throw Error("num_key_value_heads (" + std::to_string(num_kv_heads) + ") must divide num_heads (" +
                std::to_string(num_heads) + ")");
  if (positional == Positional::Rotary && head_dim() % 2 != 0)
    throw Error("rotary positions need an even head size, got " + std::to_string(head_dim()));
  if (positional == Positional::Rotary && !(rope_theta > 1.0f)) throw Error("rope_theta must be > 1");
  if (positional == Positional::Rotary) {
    const RopeScaling& r = rope_scaling;
    static const char* kTypes[] = {"default", "linear", "dynamic", "yarn", "longrope", "llama3"};
    if (std::find(std::begin(kTypes), std::end(kTypes), r.type) == std::end(kTypes))
      throw Error("rope_type \"" + r.type +
                  "\" is not supported (attnlab computes default, linear, dynamic, yarn, longrope and llama3 as "
                  "transformers does)");
    const bool needs_factor = r.type == "linear" || r.type == "dynamic" || r.type == "llama3";
    if (needs_factor && !(r.factor > 0)) throw Error("rope_type " + r.type + " needs a positive factor");
    if (r.factor < 0) throw Error("the rotary scaling factor must be positive");
    if (r.original_max < 0) throw Error("original_max_position_embeddings must be positive");
    if (r.type == "llama3" && !(r.high_freq_factor > r.low_freq_factor && r.low_freq_factor > 0))
      throw Error("rope_type llama3 needs 0 < low_freq_factor < high_freq_factor");
    const size_t half = static_cast<size_t>(head_dim() / 2);
    if (r.type == "longrope" && (r.short_factor.size() != half || r.long_factor.size() != half))
      throw Error("rope_type longrope needs short_factor and long_factor of head_dim / 2 = " + std::to_string(half) +
                  " values each, got " + std::to_string(r.short_factor.size()) + " and " +
                  std::to_string(r.long_factor.size()));
  }
  if (sliding_window < 0) throw Error("sliding_window must be >= 0");
  if (!sliding_layers.empty() && static_cast<int>(sliding_layers.size()) != num_layers)
    throw Error("layer_types lists " + std::to_string(sliding_layers.size()) + " layers but the model has " +
                std::to_string(num_layers));
  for (float cap : {attn_softcap, final_softcap})
    if (cap < 0 || !std::isfinite(cap)) throw Error("a soft-capping value must be a positive number");
  if (embed_scale < 0 || !std::isfinite(embed_scale)) throw Error("the embedding scale must be a positive number");
  if (tied_lm_head && !lm_head) throw Error("internal: a tied LM head without an LM head");
  if (!labels.empty() && static_cast<int>(labels.size()) != num_classes)
    throw Error("labels has " + std::to_string(labels.size()) + " entries but num_classes is " +
                std::to_string(num_classes));
  // Guard against absurd sizes that would only end in a failed allocation.
  const long long big = 1LL << 31;
  if (static_cast<long long>(vocab_size) * embed_size > big || static_cast<long long>(ff_dim) * embed_size > big ||
      max_len > (1 << 20) || num_layers > 1024)
    throw Error("config describes a model too large to load (" + std::to_string(parameter_count()) + " parameters)");
}

ModelConfig parse_config_json(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse errors, and out_of_range for numbers like 1e99999
    throw Error(where + ": not valid JSON (" + json_error_text(e.what()) + ")");
  }
  if (!j.is_object()) throw Error(where + ": expected a JSON object");
  ModelConfig c;
  auto get_int = [&](const char* key, int& out, bool required) {
    auto it = j.find(key);
    if (it == j.end()) {
      if (required) throw Error(where + ": missing required key \"" + key + "\"");
      return;
    }
    if (!it->is_number_integer() && !it->is_number_unsigned())
      throw Error(where + ": \"" + key + "\" must be an integer");
    long long v = it->get<long long>();
    if (v < -(1LL << 31) || v > (1LL << 31) - 1) throw Error(where + ": \"" + key + "\" out of range");
    out = static_cast<int>(v);
  };
  auto get_str = [&](const char* key) -> std::string {
    auto it = j.find(key);
    if (it == j.end()) return {};
    if (!it->is_string()) throw Error(where + ": \"" + key + "\" must be a string");
    return it->get<std::string>();
  };
  get_int("vocab_size", c.vocab_size, true);
  get_int("embed_size", c.embed_size, true);
  get_int("num_heads", c.num_heads, true);
  get_int("num_layers", c.num_layers, true);
  get_int("max_len", c.max_len, true);
  get_int("ff_dim", c.ff_dim, false);
  get_int("num_classes", c.num_classes, false);
  get_int("type_vocab_size", c.type_vocab_size, false);
  try {
    if (auto s = get_str("positional"); !s.empty()) c.positional = parse_positional(s);
    if (auto s = get_str("norm"); !s.empty()) c.norm = parse_norm(s);
    if (auto s = get_str("activation"); !s.empty()) c.activation = parse_activation(s);
    if (auto s = get_str("pooling"); !s.empty()) c.pooling = parse_pooling(s);
    if (auto s = get_str("tokenizer"); !s.empty()) c.tokenizer = parse_tokenizer(s);
    if (auto s = get_str("norm_kind"); !s.empty()) c.norm_kind = parse_norm_kind(s);
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  auto get_float = [&](const char* key, float& out) {
    auto it = j.find(key);
    if (it == j.end()) return;
    if (!it->is_number()) throw Error(where + ": \"" + key + "\" must be a number");
    out = it->get<float>();
  };
  get_float("layer_norm_eps", c.layer_norm_eps);
  if (auto it = j.find("lowercase"); it != j.end()) {
    if (!it->is_boolean()) throw Error(where + ": \"lowercase\" must be true or false");
    c.lowercase = it->get<bool>();
  }
  auto get_bool = [&](const char* key, bool& out) {
    auto it = j.find(key);
    if (it == j.end()) return;
    if (!it->is_boolean()) throw Error(where + ": \"" + key + "\" must be true or false");
    out = it->get<bool>();
  };
  get_bool("embedding_norm", c.embedding_norm);
  get_bool("final_norm", c.final_norm);
  get_bool("pooler", c.pooler);
  if (auto s = get_str("pooler_activation"); !s.empty()) {
    if (s != "tanh" && s != "relu")
      throw Error(where + ": pooler_activation: unknown value \"" + s + "\" (expected tanh | relu)");
    c.pooler_relu = s == "relu";
  }
  // Folders written before "add_cls" existed prepended [CLS] exactly when they pooled on it.
  c.add_cls = c.pooling == Pooling::Cls;
  if (auto it = j.find("add_cls"); it != j.end()) {
    if (!it->is_boolean()) throw Error(where + ": \"add_cls\" must be true or false");
    c.add_cls = it->get<bool>();
  }
  // Decoders (attnlab's own language models, engine/train): written only when there is an LM head.
  get_bool("causal", c.causal);
  get_bool("lm_head", c.lm_head);
  get_bool("tied_lm_head", c.tied_lm_head);
  get_bool("gated_ff", c.gated_ff);
  get_bool("qkv_bias", c.qkv_bias);
  get_bool("out_bias", c.out_bias);
  get_bool("ff_bias", c.ff_bias);
  get_int("num_kv_heads", c.num_kv_heads, false);
  get_int("head_dim", c.head_size, false);
  get_int("sliding_window", c.sliding_window, false);
  get_float("rope_theta", c.rope_theta);
  if (auto it = j.find("labels"); it != j.end()) {
    if (!it->is_array()) throw Error(where + ": \"labels\" must be an array of strings");
    for (const auto& l : *it) {
      if (!l.is_string()) throw Error(where + ": \"labels\" must be an array of strings");
      c.labels.push_back(l.get<std::string>());
    }
  }
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  return c;
}

ModelConfig load_config(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_config_json(ss.str(), path);
}

bool ModelConfig::mixed_windows() const {
  if (sliding_window <= 0 || sliding_layers.empty()) return false;
  return std::find(sliding_layers.begin(), sliding_layers.end(), 0) != sliding_layers.end();
}

std::string config_to_json(const ModelConfig& c) {
  // attnlab's own config.json has no keys for Gemma 2's parts: such a model is saved as the
  // Hugging Face folder it came from (write_hf_folder), never as a config that would drop them
  if (c.embed_scale > 0 || c.attn_softcap > 0 || c.final_softcap > 0 || c.sandwich_norm || c.norm_unit_offset ||
      !c.sliding_layers.empty() || c.local_rope_theta > 0 || c.pos_offset > 0 || c.cross_attention || c.lm_head_bias)
    throw Error(
        "this model (soft-capping, sandwich norms or per-layer windows as Gemma 2; an encoder-decoder) is saved as a "
        "Hugging Face folder, "
        "not in attnlab's own format");
  json j;
  j["vocab_size"] = c.vocab_size;
  j["embed_size"] = c.embed_size;
  j["num_heads"] = c.num_heads;
  j["num_layers"] = c.num_layers;
  j["ff_dim"] = c.ff_dim;
  j["num_classes"] = c.num_classes;
  j["max_len"] = c.max_len;
  j["positional"] = to_string(c.positional);
  j["norm"] = to_string(c.norm);
  j["activation"] = to_string(c.activation);
  char eps[32];
  std::snprintf(eps, sizeof eps, "%.7g", static_cast<double>(c.layer_norm_eps));  // 1e-05, not 9.99999974e-06
  j["layer_norm_eps"] = std::stod(eps);
  j["pooling"] = to_string(c.pooling);
  j["tokenizer"] = to_string(c.tokenizer);
  j["lowercase"] = c.lowercase;
  j["add_cls"] = c.add_cls;
  j["type_vocab_size"] = c.type_vocab_size;
  j["embedding_norm"] = c.embedding_norm;
  j["final_norm"] = c.final_norm;
  j["pooler"] = c.pooler;
  if (c.pooler) j["pooler_activation"] = c.pooler_relu ? "relu" : "tanh";
  j["labels"] = c.labels;
  if (c.lm_head) {  // a language model trained here (engine/train)
    j["causal"] = c.causal;
    j["lm_head"] = true;
    j["tied_lm_head"] = c.tied_lm_head;
    j["norm_kind"] = to_string(c.norm_kind);
    j["gated_ff"] = c.gated_ff;
    j["qkv_bias"] = c.qkv_bias;
    j["out_bias"] = c.out_bias;
    j["ff_bias"] = c.ff_bias;
    j["num_kv_heads"] = c.num_kv_heads;
    if (c.head_size > 0) j["head_dim"] = c.head_size;
    if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
    if (c.positional == Positional::Rotary) j["rope_theta"] = c.rope_theta;
  }
  return j.dump(2) + "\n";
}

}  // namespace attnlab
