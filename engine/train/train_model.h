// The whole model's training pass: the layer plan (plan.h) run over a padded batch keeping what
// the backward needs, then the loss (a classifier's: pooling, the classifier and cross-entropy;
// a language model's: the LM head and next-token cross-entropy at every scored position, as
// transformers' ForCausalLMLoss on labels shifted by one), and the backward to every weight
// through the same plan in reverse.
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
  std::vector<int> labels;      // [B] (classifiers)
  // Language models: the id each position is trained to predict, [B * T]: the next token of its
  // sequence, -1 where nothing is scored (the last position, padding, a task's prompt).
  std::vector<int> targets;
};

// Pads (and truncates to max_len) sequences into a batch. Error when a sequence is empty. For a
// language model (an LM head, no classifier) the targets are each position's next token, scored
// from position loss_from[i] of sequence i on (empty: from 0).
TrainBatch make_batch(const Model& model, const std::vector<std::vector<int>>& seqs, const std::vector<int>& labels,
                      const std::vector<int>& loss_from = {});

struct StepOutput {
  double loss = 0;                // mean cross-entropy over the batch (a language model's: over its scored positions)
  int correct = 0;                // rows (a language model's scored positions) whose likeliest class (token) is right
  int scored = 0;                 // the rows the loss is the mean of: B, or a language model's scored positions
  std::vector<int> predicted;     // [B] (classifiers)
  Tensor logits;                  // [B, classes] (classifiers)
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
