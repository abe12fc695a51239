// The whole model's training pass: the layer plan (plan.h) run over a padded batch keeping what
// the backward needs, pooling, the classifier and the cross-entropy loss, and the backward to
// every weight through the same plan in reverse.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/model.h"
#include "engine/compute/ops.h"

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
  std::vector<int> predicted;     // [B]
  Tensor logits;                  // [B, classes]
  std::vector<Tensor> attention;  // per layer [B, heads, T, T], when StepOptions::keep_attention
};

struct StepOptions {
  float dropout = 0.0f;  // on attention probabilities and on both residual branches
  uint64_t dropout_seed = 0;
  bool causal = false;          // train with a causal mask as well as the padding mask
  bool keep_attention = false;  // return every layer's probabilities (tests, training probes)
  bool head_only = false;       // backward through the head only (a frozen encoder gets no gradients)
  // Activation checkpointing (torch.utils.checkpoint, article 003): keep only each layer's input
  // and recompute the layer, with the same dropout draws, just before its backward. Gradients
  // are bit-identical; memory falls from every value of every layer to one layer's worth.
  bool checkpoint = false;
};

// Forward (and, when grads is not null, backward: grads are accumulated, scaled for the mean loss).
StepOutput train_step(const Model& model, Ops& ops, const TrainBatch& batch, const StepOptions& options,
                      ModelWeights* grads);

}  // namespace attnlab
