// Sparse autoencoder features in SAELens's format (see sae.h).
#include "engine/analysis/sae.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>

#include "engine/core/io_util.h"
#include "engine/formats/safetensors.h"

namespace attnlab {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapMat = Eigen::Map<RowMat>;
using CMapMat = Eigen::Map<const RowMat>;

const json* find_key(const json& cfg, const char* key) {
  if (cfg.contains(key)) return &cfg[key];
  if (cfg.contains("metadata") && cfg["metadata"].is_object() && cfg["metadata"].contains(key))
    return &cfg["metadata"][key];
  return nullptr;
}

Tensor take(TensorMap& w, const std::string& name, std::vector<int64_t> shape, const std::string& where) {
  const auto it = w.find(name);
  if (it == w.end()) throw Error(where + ": no tensor " + name + " (SAELens's weights are W_enc, b_enc, W_dec, b_dec)");
  Tensor t = std::move(it->second);
  if (t.shape != shape) {
    std::string want, got;
    for (int64_t d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
    for (int64_t d : t.shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
    throw Error(where + ": " + name + " is [" + got + "], cfg.json's d_in and d_sae need [" + want + "]");
  }
  return t;
}

// The rows' normalisation (sae.h) and its inverse.
struct RowNorm {
  // norm_in(x) = (x - shift) * scale; norm_out(y) = y * out + shift. SAELens's layer_norm divides
  // by (std + 1e-5) on the way in and multiplies by std alone on the way out: out != 1 / scale.
  std::vector<double> scale, shift, out;
};

RowNorm row_norm(const Sae& sae, const Tensor& x) {
  const int64_t T = x.dim(0), E = sae.d_in;
  RowNorm n;
  n.scale.assign(static_cast<size_t>(T), 1.0);
  n.shift.assign(static_cast<size_t>(T), 0.0);
  n.out.assign(static_cast<size_t>(T), 1.0);
  for (int64_t t = 0; t < T && sae.norm != Sae::Norm::None; ++t) {
    const float* r = x.ptr() + t * E;
    if (sae.norm == Sae::Norm::ConstantNormRescale) {  // sqrt(d_in) / ||x||
      double ss = 0;
      for (int64_t e = 0; e < E; ++e) ss += static_cast<double>(r[e]) * r[e];
      n.scale[static_cast<size_t>(t)] = std::sqrt(static_cast<double>(E)) / std::sqrt(ss);
      n.out[static_cast<size_t>(t)] = 1.0 / n.scale[static_cast<size_t>(t)];
    } else {  // torch's x.std: unbiased (E - 1); SAELens adds eps = 1e-5 to it
      double mu = 0, ss = 0;
      for (int64_t e = 0; e < E; ++e) mu += r[e];
      mu /= static_cast<double>(E);
      for (int64_t e = 0; e < E; ++e) ss += (r[e] - mu) * (r[e] - mu);
      n.shift[static_cast<size_t>(t)] = mu;
      const double sd = std::sqrt(ss / static_cast<double>(E - 1));
      n.scale[static_cast<size_t>(t)] = 1.0 / (sd + 1e-5);
      n.out[static_cast<size_t>(t)] = sd;
    }
  }
  return n;
}

Tensor encode(const Sae& sae, const Tensor& x, const RowNorm& n) {
  const int64_t T = x.dim(0), E = sae.d_in, S = sae.d_sae;
  RowMat xin(T, E);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < E; ++e) {
      const double v = (x.at(t, e) - n.shift[static_cast<size_t>(t)]) * n.scale[static_cast<size_t>(t)];
      xin(t, e) = static_cast<float>(v) - (sae.apply_b_dec_to_input ? sae.b_dec.data[static_cast<size_t>(e)] : 0.0f);
    }
  Tensor f({T, S});
  MapMat F(f.ptr(), T, S);
  F.noalias() = xin * CMapMat(sae.W_enc.ptr(), E, S);
  F.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(sae.b_enc.ptr(), S);
  std::vector<int> order(static_cast<size_t>(S));
  for (int64_t t = 0; t < T; ++t) {
    float* row = f.ptr() + t * S;
    if (sae.rescale_acts_by_decoder_norm)
      for (int64_t i = 0; i < S; ++i) row[i] *= sae.dec_norm[static_cast<size_t>(i)];
    switch (sae.kind) {
      case Sae::Kind::Standard:
        for (int64_t i = 0; i < S; ++i) row[i] = std::max(row[i], 0.0f);
        break;
      case Sae::Kind::JumpRelu:
        for (int64_t i = 0; i < S; ++i)
          row[i] = row[i] > sae.threshold.data[static_cast<size_t>(i)] ? std::max(row[i], 0.0f) : 0.0f;
        break;
      case Sae::Kind::TopK: {
        std::iota(order.begin(), order.end(), 0);
        const int k = std::min<int>(sae.k, static_cast<int>(S));
        std::nth_element(order.begin(), order.begin() + k, order.end(), [&](int a, int b) { return row[a] > row[b]; });
        std::vector<float> kept(static_cast<size_t>(S), 0.0f);
        for (int j = 0; j < k; ++j)
          kept[static_cast<size_t>(order[static_cast<size_t>(j)])] = std::max(row[order[static_cast<size_t>(j)]], 0.0f);
        std::copy(kept.begin(), kept.end(), row);
        break;
      }
    }
  }
  return f;
}

Tensor decode(const Sae& sae, const Tensor& f, const RowNorm& n) {
  const int64_t T = f.dim(0), E = sae.d_in, S = sae.d_sae;
  RowMat fs = CMapMat(f.ptr(), T, S);
  if (sae.rescale_acts_by_decoder_norm)
    for (int64_t i = 0; i < S; ++i) fs.col(i) /= sae.dec_norm[static_cast<size_t>(i)];
  Tensor y({T, E});
  MapMat Y(y.ptr(), T, E);
  Y.noalias() = fs * CMapMat(sae.W_dec.ptr(), S, E);
  Y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(sae.b_dec.ptr(), E);
  for (int64_t t = 0; t < T && sae.norm != Sae::Norm::None; ++t)
    for (int64_t e = 0; e < E; ++e)
      y.at(t, e) = static_cast<float>(y.at(t, e) * n.out[static_cast<size_t>(t)] + n.shift[static_cast<size_t>(t)]);
  return y;
}

void check_width(const Sae& sae, const Tensor& x) {
  const int64_t rows = x.empty() ? 0 : x.dim(0);
  if (rows == 0 || static_cast<int64_t>(x.data.size()) != rows * sae.d_in)
    throw Error(sae.hook_name + ": the activation has " + std::to_string(rows ? x.data.size() / rows : 0) +
                " numbers per position, the sparse autoencoder reads d_in = " + std::to_string(sae.d_in));
}

}  // namespace

Sae load_sae(const std::string& dir) {
  const fs::path cfg_path = fs::path(dir) / "cfg.json", w_path = fs::path(dir) / "sae_weights.safetensors";
  if (!fs::is_directory(dir))
    throw Error(dir + ": not a folder (a sparse autoencoder is a folder with cfg.json and sae_weights.safetensors)");
  if (!fs::exists(cfg_path))
    throw Error(dir + ": no cfg.json (SAELens saves a sparse autoencoder as cfg.json and sae_weights.safetensors)");
  if (!fs::exists(w_path)) throw Error(dir + ": no sae_weights.safetensors (SAELens's weights file)");
  json cfg;
  try {
    cfg = json::parse(read_file_bytes(cfg_path.string()));
  } catch (const json::exception& e) {
    throw Error(cfg_path.string() + ": not JSON (" + e.what() + ")");
  }
  const std::string where = cfg_path.string();
  Sae s;
  s.folder = dir;
  try {
    const json* hook = find_key(cfg, "hook_name");
    if (!hook) hook = find_key(cfg, "hook_point");  // before SAELens 6
    if (!hook || !hook->is_string()) throw Error(where + ": no hook_name (metadata.hook_name in SAELens 6)");
    s.hook_name = hook->get<std::string>();
    if (!cfg.contains("d_in") || !cfg.contains("d_sae")) throw Error(where + ": needs d_in and d_sae");
    s.d_in = cfg["d_in"].get<int>(), s.d_sae = cfg["d_sae"].get<int>();
    if (s.d_in <= 0 || s.d_sae <= 0) throw Error(where + ": d_in and d_sae must be positive");
    std::string act = "relu";
    if (const json* a = find_key(cfg, "activation_fn")) act = a->get<std::string>();
    if (const json* a = find_key(cfg, "activation_fn_str")) act = a->get<std::string>();
    s.architecture = cfg.value("architecture", act == "topk" ? "topk" : "standard");
    if (s.architecture == "standard") {
      s.kind = Sae::Kind::Standard;
    } else if (s.architecture == "jumprelu") {
      s.kind = Sae::Kind::JumpRelu;
    } else if (s.architecture == "topk") {
      s.kind = Sae::Kind::TopK;
      if (cfg.contains("k"))
        s.k = cfg["k"].get<int>();
      else if (cfg.contains("activation_fn_kwargs") && cfg["activation_fn_kwargs"].contains("k"))
        s.k = cfg["activation_fn_kwargs"]["k"].get<int>();
      else
        s.k = 100;  // TopKSAEConfig's default
      if (s.k <= 0) throw Error(where + ": k must be positive");
      s.rescale_acts_by_decoder_norm = cfg.value("rescale_acts_by_decoder_norm", false);
    } else {
      throw Error(where + ": architecture \"" + s.architecture + "\" is not read here (standard, jumprelu, topk)");
    }
    s.apply_b_dec_to_input = cfg.value("apply_b_dec_to_input", true);
    std::string norm = "none";
    if (cfg.contains("normalize_activations")) {
      const json& n = cfg["normalize_activations"];
      norm = n.is_boolean() ? (n.get<bool>() ? "expected_average_only_in" : "none")
             : n.is_null()  ? "none"
                            : n.get<std::string>();
    }
    if (norm == "constant_norm_rescale")
      s.norm = Sae::Norm::ConstantNormRescale;
    else if (norm == "layer_norm")
      s.norm = Sae::Norm::LayerNorm;
    else if (norm != "none" && norm != "expected_average_only_in")
      throw Error(where + ": normalize_activations \"" + norm +
                  "\" (none, expected_average_only_in, constant_norm_rescale, layer_norm)");
  } catch (const json::exception& e) {
    throw Error(where + ": a field has the wrong type (" + e.what() + ")");
  }
  TensorMap w = load_safetensors(w_path.string());
  const std::string ww = w_path.string();
  s.W_enc = take(w, "W_enc", {s.d_in, s.d_sae}, ww);
  s.b_enc = take(w, "b_enc", {s.d_sae}, ww);
  s.W_dec = take(w, "W_dec", {s.d_sae, s.d_in}, ww);
  s.b_dec = take(w, "b_dec", {s.d_in}, ww);
  if (s.kind == Sae::Kind::JumpRelu) s.threshold = take(w, "threshold", {s.d_sae}, ww);
  if (s.rescale_acts_by_decoder_norm) {
    s.dec_norm.resize(static_cast<size_t>(s.d_sae));
    for (int i = 0; i < s.d_sae; ++i) {
      double ss = 0;
      for (int e = 0; e < s.d_in; ++e) ss += static_cast<double>(s.W_dec.at(i, e)) * s.W_dec.at(i, e);
      s.dec_norm[static_cast<size_t>(i)] = static_cast<float>(std::sqrt(ss));
    }
  }
  for (const Tensor* t : {&s.W_enc, &s.b_enc, &s.W_dec, &s.b_dec, &s.threshold})
    for (float v : t->data)
      if (!std::isfinite(v)) throw Error(ww + ": a weight is not finite (NaN or infinity)");
  return s;
}

SaeOutput sae_forward(const Sae& sae, const Tensor& x) {
  Tensor flat = x;
  if (!flat.empty())
    flat.shape = {flat.dim(0), static_cast<int64_t>(flat.data.size()) / std::max<int64_t>(flat.dim(0), 1)};
  check_width(sae, flat);
  const RowNorm n = row_norm(sae, flat);
  SaeOutput out;
  out.features = encode(sae, flat, n);
  out.reconstruction = decode(sae, out.features, n);
  return out;
}

FeatureClamp parse_feature_clamp(const std::string& text) {
  const std::string usage = "--clamp \"" + text + "\": expected FEATURE=VALUE[:POSITIONS], e.g. 12=5.0 or 12=0:3,4";
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) throw Error(usage);
  FeatureClamp c;
  const std::string feature = text.substr(0, eq);
  std::string rest = text.substr(eq + 1);
  try {
    size_t used = 0;
    c.feature = std::stoi(feature, &used);
    if (used != feature.size() || c.feature < 0) throw Error(usage);
    const size_t colon = rest.find(':');
    const std::string value = rest.substr(0, colon);
    c.value = std::stof(value, &used);
    if (used != value.size() || !std::isfinite(c.value)) throw Error(usage);
    if (colon != std::string::npos) {
      std::string list = rest.substr(colon + 1);
      size_t at = 0;
      while (at <= list.size()) {
        const size_t comma = std::min(list.find(',', at), list.size());
        const std::string p = list.substr(at, comma - at);
        const int pos = std::stoi(p, &used);
        if (used != p.size() || pos < 0) throw Error(usage);
        c.positions.push_back(pos);
        at = comma + 1;
      }
    }
  } catch (const std::logic_error&) {
    throw Error(usage);
  }
  return c;
}

HookEdit sae_clamp_edit(const Sae& sae, const std::vector<FeatureClamp>& clamps) {
  for (const FeatureClamp& c : clamps)
    if (c.feature < 0 || c.feature >= sae.d_sae)
      throw Error("--clamp: no feature " + std::to_string(c.feature) + " (the sparse autoencoder has " +
                  std::to_string(sae.d_sae) + ")");
  HookEdit e;
  e.kind = HookEdit::Kind::Apply;
  e.name = sae.hook_name;
  e.apply = [&sae, clamps](Tensor& x) {
    check_width(sae, x);
    const int64_t T = x.dim(0);
    for (const FeatureClamp& c : clamps)
      for (int p : c.positions)
        if (p >= T)
          throw Error("--clamp " + std::to_string(c.feature) + ": no position " + std::to_string(p) +
                      " (the input has " + std::to_string(T) + ")");
    const RowNorm n = row_norm(sae, x);
    const Tensor f = encode(sae, x, n);
    Tensor g = f;
    for (const FeatureClamp& c : clamps) {
      if (c.positions.empty())
        for (int64_t t = 0; t < T; ++t) g.at(t, c.feature) = c.value;
      else
        for (int p : c.positions) g.at(p, c.feature) = c.value;
    }
    // x^(g) + (x - x^(f)) = x + (x^(g) - x^(f)); the decoder is linear up to each row's norm_out,
    // so the difference is the changed features' decoder rows alone, times norm_out's factor
    // (b_dec and the shift cancel): exact where SAELens's two full reconstructions would round each
    for (int64_t t = 0; t < T; ++t) {
      const double out = n.out[static_cast<size_t>(t)];
      for (int64_t i = 0; i < sae.d_sae; ++i) {
        double d = static_cast<double>(g.at(t, i)) - f.at(t, i);
        if (d == 0) continue;
        if (sae.rescale_acts_by_decoder_norm) d /= sae.dec_norm[static_cast<size_t>(i)];
        for (int64_t e = 0; e < sae.d_in; ++e)
          x.at(t, e) = static_cast<float>(x.at(t, e) + d * sae.W_dec.at(i, e) * out);
      }
    }
  };
  return e;
}

}  // namespace attnlab
