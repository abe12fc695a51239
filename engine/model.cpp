// Model folders: loading (with layout detection and shape checks), saving, random init.
#include "engine/model.h"

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

#include "engine/io_util.h"

namespace attnlab {

namespace fs = std::filesystem;

const std::string& Model::label(int c) const {
  static const std::string none;
  if (c >= 0 && c < static_cast<int>(config.labels.size())) return config.labels[static_cast<size_t>(c)];
  return none;
}

namespace {

class TensorTaker {
 public:
  TensorTaker(const TensorMap& m) : map_(m) {}
  Tensor take(const std::string& name, std::vector<int64_t> shape) const {
    auto it = map_.find(name);
    if (it == map_.end())
      throw Error("model.safetensors: missing tensor \"" + name + "\" (expected shape " + shape_str(shape) + ")");
    if (it->second.shape != shape)
      throw Error("model.safetensors: tensor \"" + name + "\" has shape " + shape_str(it->second.shape) +
                  ", expected " + shape_str(shape));
    return it->second;
  }
  bool has(const std::string& name) const { return map_.count(name) != 0; }

 private:
  const TensorMap& map_;
};

// Rows [r0, r0 + n) of a 2-D tensor, or elements [r0, r0 + n) of a 1-D one.
Tensor slice_rows(const Tensor& t, int64_t r0, int64_t n) {
  const int64_t cols = t.rank() == 2 ? t.dim(1) : 1;
  Tensor out(t.rank() == 2 ? std::vector<int64_t>{n, cols} : std::vector<int64_t>{n});
  std::copy(t.data.begin() + r0 * cols, t.data.begin() + (r0 + n) * cols, out.data.begin());
  return out;
}

}  // namespace

ModelWeights weights_from_tensors(const ModelConfig& c, const TensorMap& tensors, WeightLayout* layout_out) {
  const TensorTaker t(tensors);
  const int64_t E = c.embed_size, F = c.ff_dim, V = c.vocab_size;
  WeightLayout layout;
  if (t.has("layers.0.self_attn.in_proj_weight"))
    layout = WeightLayout::TorchEncoder;
  else if (t.has("layers.0.attention.query.weight"))
    layout = WeightLayout::Article;
  else if (t.has("attention.query.weight"))
    layout = WeightLayout::ArticleSingleLayer;
  else
    throw Error(
        "model.safetensors: no attention weights found (expected \"layers.0.attention.query.weight\", "
        "\"layers.0.self_attn.in_proj_weight\" or \"attention.query.weight\")");
  if (layout == WeightLayout::ArticleSingleLayer && c.num_layers != 1)
    throw Error("model.safetensors: single-layer TextClassifier weights (\"attention.*\") but num_layers is " +
                std::to_string(c.num_layers));
  if (layout_out) *layout_out = layout;

  ModelWeights w;
  w.embedding = t.take("embedding.weight", {V, E});
  if (c.positional == Positional::Learned) w.pos_embedding = t.take("pos_embedding.weight", {c.max_len, E});
  if (c.positional == Positional::Relative) w.rel_pos = t.take("rel_pos.embedding.weight", {2LL * c.max_len - 1, E});
  for (int i = 0; i < c.num_layers; ++i) {
    LayerWeights L;
    if (layout == WeightLayout::TorchEncoder) {
      const std::string p = "layers." + std::to_string(i) + ".";
      const Tensor in_w = t.take(p + "self_attn.in_proj_weight", {3 * E, E});
      const Tensor in_b = t.take(p + "self_attn.in_proj_bias", {3 * E});
      L.wq = slice_rows(in_w, 0, E), L.wk = slice_rows(in_w, E, E), L.wv = slice_rows(in_w, 2 * E, E);
      L.bq = slice_rows(in_b, 0, E), L.bk = slice_rows(in_b, E, E), L.bv = slice_rows(in_b, 2 * E, E);
      L.wo = t.take(p + "self_attn.out_proj.weight", {E, E});
      L.bo = t.take(p + "self_attn.out_proj.bias", {E});
      L.ln1_g = t.take(p + "norm1.weight", {E});
      L.ln1_b = t.take(p + "norm1.bias", {E});
      if (F > 0) {
        L.w1 = t.take(p + "linear1.weight", {F, E});
        L.b1 = t.take(p + "linear1.bias", {F});
        L.w2 = t.take(p + "linear2.weight", {E, F});
        L.b2 = t.take(p + "linear2.bias", {E});
        L.ln2_g = t.take(p + "norm2.weight", {E});
        L.ln2_b = t.take(p + "norm2.bias", {E});
      }
    } else {
      const std::string p = layout == WeightLayout::Article ? "layers." + std::to_string(i) + "." : "";
      const std::string a = p + "attention.";
      L.wq = t.take(a + "query.weight", {E, E}), L.bq = t.take(a + "query.bias", {E});
      L.wk = t.take(a + "key.weight", {E, E}), L.bk = t.take(a + "key.bias", {E});
      L.wv = t.take(a + "value.weight", {E, E}), L.bv = t.take(a + "value.bias", {E});
      L.wo = t.take(a + "fc_out.weight", {E, E}), L.bo = t.take(a + "fc_out.bias", {E});
      L.ln1_g = t.take(a + "layer_norm.weight", {E}), L.ln1_b = t.take(a + "layer_norm.bias", {E});
      if (F > 0) {
        const std::string f = p + "ffn.";
        L.w1 = t.take(f + "fc1.weight", {F, E}), L.b1 = t.take(f + "fc1.bias", {F});
        L.w2 = t.take(f + "fc2.weight", {E, F}), L.b2 = t.take(f + "fc2.bias", {E});
        L.ln2_g = t.take(f + "layer_norm.weight", {E}), L.ln2_b = t.take(f + "layer_norm.bias", {E});
      }
    }
    w.layers.push_back(std::move(L));
  }
  if (c.num_classes > 0) {
    w.fc_w = t.take("fc.weight", {c.num_classes, E});
    w.fc_b = t.take("fc.bias", {c.num_classes});
  }
  return w;
}

TensorMap weights_to_tensors(const ModelConfig& c, const ModelWeights& w) {
  TensorMap m;
  m["embedding.weight"] = w.embedding;
  if (c.positional == Positional::Learned) m["pos_embedding.weight"] = w.pos_embedding;
  if (c.positional == Positional::Relative) m["rel_pos.embedding.weight"] = w.rel_pos;
  for (int i = 0; i < c.num_layers; ++i) {
    const LayerWeights& L = w.layers[static_cast<size_t>(i)];
    const std::string p = "layers." + std::to_string(i) + ".";
    m[p + "attention.query.weight"] = L.wq, m[p + "attention.query.bias"] = L.bq;
    m[p + "attention.key.weight"] = L.wk, m[p + "attention.key.bias"] = L.bk;
    m[p + "attention.value.weight"] = L.wv, m[p + "attention.value.bias"] = L.bv;
    m[p + "attention.fc_out.weight"] = L.wo, m[p + "attention.fc_out.bias"] = L.bo;
    m[p + "attention.layer_norm.weight"] = L.ln1_g, m[p + "attention.layer_norm.bias"] = L.ln1_b;
    if (c.ff_dim > 0) {
      m[p + "ffn.fc1.weight"] = L.w1, m[p + "ffn.fc1.bias"] = L.b1;
      m[p + "ffn.fc2.weight"] = L.w2, m[p + "ffn.fc2.bias"] = L.b2;
      m[p + "ffn.layer_norm.weight"] = L.ln2_g, m[p + "ffn.layer_norm.bias"] = L.ln2_b;
    }
  }
  if (c.num_classes > 0) m["fc.weight"] = w.fc_w, m["fc.bias"] = w.fc_b;
  return m;
}

Model load_model(const std::string& dir) {
  if (!fs::exists(dir)) throw Error(dir + ": no such model folder");
  if (!fs::is_directory(dir))
    throw Error(dir + ": not a folder (a model is a folder with config.json, model.safetensors, vocab.txt)");
  Model m;
  m.source = dir;
  m.config = load_config((fs::path(dir) / "config.json").string());
  const std::string st = (fs::path(dir) / "model.safetensors").string();
  try {
    m.weights = weights_from_tensors(m.config, load_safetensors(st));
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

// A model folder is replaced as a whole: the new files go into a sibling temporary folder,
// which is then exchanged with the old folder in one atomic rename (renameat2 RENAME_EXCHANGE),
// so a crash or kill at any moment leaves either the complete old model or the complete new one.
void save_model(const Model& model, const std::string& dir_in) {
  const fs::path dir = fs::path(dir_in).lexically_normal();
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (fs::exists(dir) && !fs::is_directory(dir)) throw Error(dir.string() + ": exists and is not a folder");
  const fs::path tmp = parent / ("." + dir.filename().string() + ".saving-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec))
    throw Error(dir.string() + ": cannot create a temporary folder beside it (" + ec.message() + ")");
  try {
    write_file_atomic((tmp / "model.safetensors").string(),
                      serialize_safetensors(weights_to_tensors(model.config, model.weights)));
    if (const char* pause = std::getenv("ATTNLAB_TEST_SAVE_PAUSE_MS"))  // tests kill a save here
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(pause)));
    write_file_atomic((tmp / "vocab.txt").string(), vocab_to_text(model.vocab));
    write_file_atomic((tmp / "config.json").string(), config_to_json(model.config));
    if (fs::exists(dir)) {
      if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0)
        throw Error(dir.string() + ": cannot replace the folder (" + std::strerror(errno) + ")");
      fs::remove_all(tmp, ec);  // now holds the previous model
    } else {
      fs::rename(tmp, dir, ec);
      if (ec) throw Error(dir.string() + ": cannot create (" + ec.message() + ")");
    }
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

ModelWeights random_weights(const ModelConfig& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto normal_t = [&](std::vector<int64_t> shape) {
    Tensor t(std::move(shape));
    for (float& v : t.data) v = normal(rng);
    return t;
  };
  auto linear = [&](int64_t out, int64_t in, Tensor& w, Tensor& b) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(in));
    std::uniform_real_distribution<float> u(-bound, bound);
    w = Tensor({out, in});
    b = Tensor({out});
    for (float& v : w.data) v = u(rng);
    for (float& v : b.data) v = u(rng);
  };
  const int64_t E = c.embed_size, F = c.ff_dim;
  ModelWeights w;
  w.embedding = normal_t({c.vocab_size, E});
  if (c.positional == Positional::Learned) w.pos_embedding = normal_t({c.max_len, E});
  if (c.positional == Positional::Relative) w.rel_pos = normal_t({2LL * c.max_len - 1, E});
  for (int i = 0; i < c.num_layers; ++i) {
    LayerWeights L;
    linear(E, E, L.wq, L.bq);
    linear(E, E, L.wk, L.bk);
    linear(E, E, L.wv, L.bv);
    linear(E, E, L.wo, L.bo);
    L.ln1_g = Tensor({E}, 1.0f), L.ln1_b = Tensor({E}, 0.0f);
    if (F > 0) {
      linear(F, E, L.w1, L.b1);
      linear(E, F, L.w2, L.b2);
      L.ln2_g = Tensor({E}, 1.0f), L.ln2_b = Tensor({E}, 0.0f);
    }
    w.layers.push_back(std::move(L));
  }
  if (c.num_classes > 0) linear(c.num_classes, E, w.fc_w, w.fc_b);
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
