// The whole model's training pass: a batch forward that keeps what the backward needs, the
// backward to every weight, and the cross-entropy loss. Composes the TrainOps (linear,
// LayerNorm, attention) with plain shared code for embedding, activations, dropout, residuals,
// pooling and the classifier.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model.h"
#include "engine/train_ops.h"

namespace attnlab {

// A padded batch: B sequences of length T (the longest in the batch), [PAD] after each end.
struct TrainBatch {
  int B = 0, T = 0;
  std::vector<int> ids;         // [B * T]
  std::vector<uint8_t> is_pad;  // [B * T]
  std::vector<int> labels;      // [B]
};

// Pads (and truncates to max_len) sequences into a batch. Error when a sequence is empty.
TrainBatch make_batch(const Model& model, const std::vector<std::vector<int>>& seqs, const std::vector<int>& labels);

struct StepOutput {
  double loss = 0;  // mean cross-entropy over the batch
  int correct = 0;
  std::vector<int> predicted;  // [B]
};

struct StepOptions {
  float dropout = 0.0f;  // on attention probabilities and on both residual branches
  uint64_t dropout_seed = 0;
  bool causal = false;  // train with a causal mask as well as the padding mask
};

// Forward (and, when grads is not null, backward: grads are accumulated, scaled for the mean loss).
StepOutput train_step(const Model& model, TrainOps& ops, const TrainBatch& batch, const StepOptions& options,
                      ModelWeights* grads);

}  // namespace attnlab
