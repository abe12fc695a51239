// Helpers shared by the engine tests: small random models, random ids, tensor comparison.
#pragma once

#include <cmath>
#include <random>
#include <string>

#include <catch2/catch.hpp>

#include "engine/forward.h"

namespace attnlab::test {

inline ModelConfig small_config(int E = 16, int H = 2, int layers = 2, int ff = 24, int max_len = 64) {
  ModelConfig c;
  c.vocab_size = 40;
  c.embed_size = E;
  c.num_heads = H;
  c.num_layers = layers;
  c.ff_dim = ff;
  c.max_len = max_len;
  c.num_classes = 3;
  c.labels = {"a", "b", "c"};
  c.positional = Positional::Sinusoidal;
  return c;
}

inline Model random_model(const ModelConfig& c, uint64_t seed = 7) {
  Model m;
  m.config = c;
  m.weights = random_weights(c, seed);
  m.vocab = default_vocab(c);
  m.source = "test";
  return m;
}

inline std::vector<int> random_ids(int T, int vocab, uint64_t seed = 3, int lowest = 3) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::vector<int> ids(static_cast<size_t>(T));
  for (int& id : ids) id = lowest + static_cast<int>(rng() % static_cast<unsigned>(vocab - lowest));
  return ids;
}

inline Tensor random_tensor(std::vector<int64_t> shape, uint64_t seed, float scale = 1.0f) {
  Tensor t(std::move(shape));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, scale);
  for (float& v : t.data) v = n(rng);
  return t;
}

// Every combination of the mask kinds for T x T with `heads` heads (64 specs): padding, causal,
// window 3, stride 4, global {0, 5}, and a random custom mask (bool, or float with -inf
// entries; per-head when the window is on).
inline std::vector<MaskSpec> all_mask_combinations(int T, int heads) {
  std::vector<MaskSpec> specs;
  for (int bits = 0; bits < 64; ++bits) {
    MaskSpec s;
    s.padding = bits & 1;
    s.causal = bits & 2;
    if (bits & 4) s.window = 3;
    if (bits & 8) s.stride = 4;
    if (bits & 16) s.global = {0, 5};
    if (bits & 32) {
      NpyArray custom;
      custom.kind = (bits & 1) ? NpyKind::Float : NpyKind::Bool;
      custom.tensor = Tensor(bits & 4 ? std::vector<int64_t>{heads, T, T} : std::vector<int64_t>{T, T});
      std::mt19937 rng(static_cast<unsigned>(bits));
      for (float& v : custom.tensor.data)
        v = custom.kind == NpyKind::Bool ? static_cast<float>(rng() % 4 == 0)
                                         : (rng() % 5 == 0 ? -INFINITY : static_cast<float>(rng() % 7) * 0.3f - 1.0f);
      s.custom = custom;
      s.custom_source = "generated";
    }
    specs.push_back(s);
  }
  return specs;
}

struct ShapeCase {
  int T, E, H, layers, ff;
};

// The parts around the layer stack that BERT-like models add: token types, embedding
// LayerNorm, final LayerNorm, pooler.
inline void add_extras(ModelConfig& c) {
  c.type_vocab_size = 2;
  c.embedding_norm = true;
  c.final_norm = true;
  c.pooler = true;
}

// Calls fn(shape, config) for every shape x norm (post, pre) x activation (relu, gelu, and
// gelu_tanh with every extra part: token types, embedding and final norms, pooler) x
// positional kind, with the failing combination captured in the test's output.
template <class F>
void for_each_config(const std::vector<ShapeCase>& shapes, F fn) {
  for (const ShapeCase& s : shapes)
    for (const NormPlacement norm : {NormPlacement::Post, NormPlacement::Pre})
      for (const Activation act : {Activation::Relu, Activation::Gelu, Activation::GeluTanh})
        for (const Positional pos :
             {Positional::None, Positional::Sinusoidal, Positional::Learned, Positional::Relative}) {
          CAPTURE(s.T, s.E, s.H, s.layers, s.ff, to_string(norm), to_string(act), to_string(pos));
          ModelConfig c = small_config(s.E, s.H, s.layers, s.ff, 40);
          c.norm = norm, c.activation = act, c.positional = pos;
          if (act == Activation::GeluTanh) add_extras(c);
          fn(s, c);
        }
}

// Largest |a - b|; NaN anywhere counts as infinite so it can never pass a bound.
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape == b.shape);
  double m = 0;
  for (size_t k = 0; k < a.data.size(); ++k) {
    const double d = std::fabs(static_cast<double>(a.data[k]) - b.data[k]);
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

}  // namespace attnlab::test
