// attnlab's own model folders (reading with layout detection and shape checks, writing), random
// init. Which kind a folder is, and replacing one atomically: model_folder.cpp.
#include "engine/model/model.h"

#include "engine/core/memory.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "engine/core/io_util.h"

namespace attnlab {

namespace fs = std::filesystem;

const std::string& Model::label(int c) const {
  static const std::string none;
  if (c >= 0 && c < static_cast<int>(config.labels.size())) return config.labels[static_cast<size_t>(c)];
  return none;
}

std::string Model::readable_token(int id) const {
  const std::string t = tokenizer ? tokenizer->readable_token(id) : token_name(id);
  // A character model's space (its own tokenizer, or the WordPiece of its Hugging Face folder)
  // drawn as the byte-level labels draw one, not as nothing.
  if (t.empty() || t.find_first_not_of(" \t\n") != std::string::npos) return t;
  std::string shown;
  for (char c : t) shown += c == ' ' ? "\u2423" : c == '\n' ? "\u21B5" : "\u21E5";
  return shown;
}

std::string Model::token_name(int id) const {
  return id >= 0 && id < vocab.size() ? vocab.token(id) : "#" + std::to_string(id);
}

std::string Model::summary() const {
  const ModelConfig& c = config;
  if (probabilities_only)  // "Attention file: 6 layers, 12 heads, 9 tokens"
    return "Attention file: " + std::to_string(c.num_layers) + (c.num_layers == 1 ? " layer, " : " layers, ") +
           std::to_string(c.num_heads) + (c.num_heads == 1 ? " head, " : " heads, ") + std::to_string(c.max_len) +
           (c.max_len == 1 ? " token" : " tokens") + " (probabilities only, no weights)";
  char params[32];
  const double n = static_cast<double>(c.parameter_count());
  if (n < 1e5)  // a small model trained here: "12,384", not "0.0 M"
    std::snprintf(params, sizeof params, "%s", thousands(c.parameter_count()).c_str());
  else
    std::snprintf(params, sizeof params, "%.1f M", n / 1e6);
  const std::string arch = is_hf()             ? hf.architecture
                           : c.num_classes > 0 ? "TextClassifier"
                           : c.lm_head         ? "Language model (causal)"
                                               : "Encoder";
  if (encoder) {  // "BartForConditionalGeneration: encoder 6 layers, decoder 6 layers, 12 heads, ..."
    const ModelConfig& e = encoder->config;
    const double both = n + static_cast<double>(e.parameter_count()) -
                        static_cast<double>(e.vocab_size) * e.embed_size;  // the shared embedding once
    if (both < 1e5)
      std::snprintf(params, sizeof params, "%s", thousands(static_cast<long long>(both)).c_str());
    else
      std::snprintf(params, sizeof params, "%.1f M", both / 1e6);
    return arch + ": encoder " + std::to_string(e.num_layers) + " x " + std::to_string(e.num_heads) +
           " heads, decoder " + std::to_string(c.num_layers) + " x " + std::to_string(c.num_heads) + " heads, hidden " +
           std::to_string(c.embed_size) + ", vocabulary " + thousands(c.vocab_size) + ", " + params + " parameters";
  }
  return arch + ": " + std::to_string(c.num_layers) + (c.num_layers == 1 ? " layer, " : " layers, ") +
         std::to_string(c.num_heads) + (c.num_heads == 1 ? " head" : " heads") +
         // grouped-query attention: the query heads share fewer key/value heads (every query head is shown)
         (c.kv_heads() != c.num_heads ? " (" + std::to_string(c.kv_heads()) + " key/value heads)" : std::string()) +
         // a head width set apart from hidden / heads (Qwen3-0.6B: 16 heads of 128 over 1,024)
         (c.head_size > 0 ? ", " + std::to_string(c.head_dim()) + " wide" : std::string()) + ", hidden " +
         std::to_string(c.embed_size) + ", vocabulary " + thousands(c.vocab_size) + ", " + params + " parameters";
}

namespace {

// Which layout a set of tensor names follows, from the name of its first attention weight.
WeightLayout detect_layout(const ModelConfig& c, const TensorMap& tensors) {
  WeightLayout layout;
  if (tensors.count("layers.0.self_attn.in_proj_weight"))
    layout = WeightLayout::TorchEncoder;
  else if (tensors.count("layers.0.attention.query.weight"))
    layout = WeightLayout::Article;
  else if (tensors.count("attention.query.weight"))
    layout = WeightLayout::ArticleSingleLayer;
  else
    throw Error(
        "model.safetensors: no attention weights found (expected \"layers.0.attention.query.weight\", "
        "\"layers.0.self_attn.in_proj_weight\" or \"attention.query.weight\")");
  if (layout == WeightLayout::ArticleSingleLayer && c.num_layers != 1)
    throw Error("model.safetensors: single-layer TextClassifier weights (\"attention.*\") but num_layers is " +
                std::to_string(c.num_layers));
  return layout;
}

}  // namespace

namespace {

// Both ways in: `movable` (when not null) is `tensors`, and a tensor only one weight reads as it
// is stored is moved into the model instead of copied (a 1 B model's weights are not held twice).
ModelWeights fill_weights(const ModelConfig& c, const TensorMap& tensors, TensorMap* movable, WeightLayout layout,
                          const std::string& prefix, std::set<std::string>* used, const std::string& where,
                          HalfMap* halves) {
  ModelWeights w = empty_weights(c);
  std::map<std::string, int> readers;  // how many weights read each stored name
  if (movable)
    for (const WeightEntry& e : weight_entries(c)) {
      const LayoutName n = layout_name(layout, e, c);
      ++readers[(n.head ? "" : prefix) + n.name];
    }
  for (const WeightEntry& e : weight_entries(c)) {
    const LayoutName n = layout_name(layout, e, c);
    const std::string name = (n.head ? "" : prefix) + n.name;
    auto it = tensors.find(name);
    if (it == tensors.end() && name.size() > 17 && name.find("LayerNorm.") != std::string::npos) {
      // TF-era BERT checkpoints call LayerNorm's parameters gamma and beta
      const std::string old = name.substr(0, name.rfind('.')) + (name.back() == 't' ? ".gamma" : ".beta");
      it = tensors.find(old);
    }
    if (it == tensors.end())
      throw Error(where + ": missing tensor \"" + name + "\" (expected shape " + shape_str(n.stored_shape) + ")");
    if (used) used->insert(it->first);
    if (it->second.shape != n.stored_shape)
      throw Error(where + ": tensor \"" + it->first + "\" has shape " + shape_str(it->second.shape) + ", expected " +
                  shape_str(n.stored_shape));
    const Tensor* src = &it->second;
    Tensor widened;  // a 16-bit tensor this weight is not kept in 16 bits as (positions, Conv1D's)
    HalfTensor* half = nullptr;
    if (halves && src->empty())
      if (auto hi = halves->find(it->first); hi != halves->end()) half = &hi->second;
    if (half) {
      HalfTensor& h = *half;
      const bool alone = movable && readers[it->first] == 1;
      // a layer's matrix, the token embedding and the LM head are kept in 16 bits
      const bool model_matrix = e.layer < 0 && (e.spec->model_member == &ModelWeights::embedding ||
                                                e.spec->model_member == &ModelWeights::lm_head);
      if ((e.layer >= 0 || model_matrix) && e.shape.size() == 2 && !n.transposed) {
        HalfTensor part;
        if (n.rows < 0 && alone) {
          part = std::move(h);
        } else {
          const int64_t r0 = n.rows < 0 ? 0 : n.row0, cols = e.shape[1];
          part.shape = e.shape;
          part.bf16 = h.bf16;
          part.bits.assign(h.bits.begin() + r0 * cols, h.bits.begin() + (r0 + e.shape[0]) * cols);
        }
        if (model_matrix)
          w.half.emplace_back(e.spec->model_member, std::move(part));
        else
          w.layers[static_cast<size_t>(e.layer)].half.emplace_back(e.spec->layer_member, std::move(part));
        continue;
      }
      widened = Tensor(h.shape);
      widen_rows(h, 0, h.shape[0], widened.ptr());
      if (alone) h = HalfTensor{};
      src = &widened;
    }
    const Tensor& t = *src;
    Tensor& dst = e.in(w);
    if (n.transposed) {  // [in, out] (Conv1D), our rows [row0, row0 + rows) are its columns
      dst = Tensor(e.shape);
      const int64_t R = e.shape[0], C = e.shape[1], ld = t.shape[1];
      for (int64_t r = 0; r < R; ++r)
        for (int64_t k = 0; k < C; ++k)
          dst.data[static_cast<size_t>(r * C + k)] = t.data[static_cast<size_t>(k * ld + n.row0 + r)];
    } else if (n.rows < 0 && src == &widened) {
      dst = std::move(widened);
    } else if (n.rows < 0 && movable && readers[it->first] == 1) {
      dst = std::move(movable->at(it->first));
    } else if (n.rows < 0) {
      dst = t;
    } else {  // rows [row0, row0 + rows) of a fused tensor
      dst = Tensor(e.shape);
      const int64_t cols = Tensor::numel_of(e.shape) / n.rows;
      std::copy(t.data.begin() + n.row0 * cols, t.data.begin() + (n.row0 + n.rows) * cols, dst.data.begin());
    }
  }
  w.version = next_weights_version();
  return w;
}

}  // namespace

ModelWeights weights_from_layout(const ModelConfig& c, const TensorMap& tensors, WeightLayout layout,
                                 const std::string& prefix, std::set<std::string>* used, const std::string& where) {
  return fill_weights(c, tensors, nullptr, layout, prefix, used, where, nullptr);
}

ModelWeights take_weights_from_layout(const ModelConfig& c, TensorMap& tensors, WeightLayout layout,
                                      const std::string& prefix, std::set<std::string>* used, const std::string& where,
                                      HalfMap* halves) {
  return fill_weights(c, tensors, &tensors, layout, prefix, used, where, halves);
}

ModelWeights weights_from_tensors(const ModelConfig& c, const TensorMap& tensors, WeightLayout* layout_out) {
  const WeightLayout layout = detect_layout(c, tensors);
  if (layout_out) *layout_out = layout;
  return weights_from_layout(c, tensors, layout, "", nullptr, "model.safetensors");
}

TensorMap weights_to_tensors(const ModelConfig& c, const ModelWeights& w) {
  if (has_half(w)) {  // float32, as every file attnlab writes
    ModelWeights full = w;
    widen_all(full);
    return weights_to_tensors(c, full);
  }
  TensorMap m;
  for (const WeightEntry& e : weight_entries(c)) m[e.name()] = e.in(w);
  return m;
}

Model load_attnlab_folder(const std::string& dir) {
  Model m;
  m.source = dir;
  m.config = load_config((fs::path(dir) / "config.json").string());
  check_weights_fit(m.config, available_bytes(), dir);
  const std::string st = (fs::path(dir) / "model.safetensors").string();
  try {
    TensorMap tensors = load_safetensors(st);
    m.weights =
        take_weights_from_layout(m.config, tensors, detect_layout(m.config, tensors), "", nullptr, "model.safetensors");
  } catch (const Error& e) {
    const std::string msg = e.what();
    throw Error(msg.rfind(st, 0) == 0 ? msg : fs::path(dir).string() + "/" + msg);
  }
  const std::string vpath = (fs::path(dir) / "vocab.txt").string();
  m.vocab = load_vocab(vpath);
  if (m.vocab.size() > m.config.vocab_size)
    throw Error(vpath + ": has " + std::to_string(m.vocab.size()) + " tokens but config.json says vocab_size " +
                std::to_string(m.config.vocab_size));
  if (m.config.num_classes > 0 && m.config.labels.empty())
    for (int k = 0; k < m.config.num_classes; ++k) m.config.labels.push_back("class_" + std::to_string(k));
  return m;
}

void write_attnlab_folder(const Model& model, const std::string& dir) {
  const fs::path d(dir);
  write_file_atomic((d / "model.safetensors").string(),
                    serialize_safetensors(weights_to_tensors(model.config, model.weights)));
  if (const char* pause = std::getenv("ATTNLAB_TEST_SAVE_PAUSE_MS"))  // tests kill a save here
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(pause)));
  write_file_atomic((d / "vocab.txt").string(), vocab_to_text(model.vocab));
  write_file_atomic((d / "config.json").string(), config_to_json(model.config));
}

ModelWeights random_weights(const ModelConfig& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);  // one stream for every Normal tensor, in table order
  ModelWeights w = empty_weights(c);
  int64_t fan_in = 1;  // a bias follows its weight in the table and shares its fan-in
  for (const WeightEntry& e : weight_entries(c)) {
    Tensor& t = e.in(w);
    t = Tensor(e.shape, e.spec->init == Init::Ones ? 1.0f : 0.0f);
    if (e.spec->init == Init::Normal) {
      for (float& v : t.data) v = normal(rng);
    } else if (e.spec->init == Init::FanInUniform) {
      // nn.Linear: weight and bias both U(-1/sqrt(in), 1/sqrt(in)) with in = the weight's second axis
      if (e.shape.size() == 2) fan_in = e.shape[1];
      const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
      std::uniform_real_distribution<float> u(-bound, bound);
      for (float& v : t.data) v = u(rng);
    }
  }
  w.version = next_weights_version();
  return w;
}

Vocab default_vocab(const ModelConfig& c) {
  std::vector<std::string> tokens = {kPadToken, kUnkToken, kClsToken};
  if (c.tokenizer == TokenizerKind::Char) {
    tokens.push_back(" ");
    for (char ch = '!'; ch <= '~' && static_cast<int>(tokens.size()) < c.vocab_size; ++ch) {
      if (c.lowercase && ch >= 'A' && ch <= 'Z') continue;
      tokens.emplace_back(1, ch);
    }
  } else {
    for (int k = 0; static_cast<int>(tokens.size()) < c.vocab_size; ++k) tokens.push_back("w" + std::to_string(k));
  }
  if (static_cast<int>(tokens.size()) > c.vocab_size) tokens.resize(static_cast<size_t>(std::max(0, c.vocab_size)));
  return Vocab(std::move(tokens));
}

}  // namespace attnlab
