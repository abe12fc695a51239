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
