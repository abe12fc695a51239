// Model: config + weights + vocabulary, loaded from or saved to a model folder
// (config.json, model.safetensors, vocab.txt). Tensor names follow the modules people train
// in PyTorch: the seed articles' layout (what we write) and nn.TransformerEncoder's.
#pragma once

#include <cstdint>
#include <string>

#include "engine/config.h"
#include "engine/safetensors.h"
#include "engine/tensor.h"
#include "engine/tokenizer.h"
#include "engine/weights.h"

namespace attnlab {

struct Model {
  ModelConfig config;
  ModelWeights weights;
  Vocab vocab;
  std::string source;  // folder it came from, or "random-init"

  const std::string& label(int c) const;
};

Model load_model(const std::string& dir);
// Builds weights from named tensors (any supported layout). Error names a missing or mis-shaped tensor.
ModelWeights weights_from_tensors(const ModelConfig& config, const TensorMap& tensors, WeightLayout* layout = nullptr);
// The articles' layout, which is what save_model writes.
TensorMap weights_to_tensors(const ModelConfig& config, const ModelWeights& w);
// Writes DIR/config.json, DIR/model.safetensors, DIR/vocab.txt (each file atomically).
void save_model(const Model& model, const std::string& dir);

// PyTorch-like initialisation (Linear: U(-1/sqrt(in), 1/sqrt(in)); Embedding: N(0, 1); LayerNorm: 1, 0),
// deterministic for a seed.
ModelWeights random_weights(const ModelConfig& config, uint64_t seed);
// A vocabulary for random-init models: [PAD], [UNK], [CLS], then printable ASCII (char) or
// placeholder words w0, w1, ... (word), up to vocab_size.
Vocab default_vocab(const ModelConfig& config);

}  // namespace attnlab
