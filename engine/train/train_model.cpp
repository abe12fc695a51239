// The training pass: the layer plan (plan.h) over a padded batch with caches and dropout, then
// pooling, the classifier and cross-entropy, and the backward through the same plan in reverse.
#include "engine/train/train_model.h"

#include <cmath>

#include <optional>

#include "engine/compute/plan.h"

namespace attnlab {

TrainBatch make_batch(const Model& model, const std::vector<std::vector<int>>& seqs, const std::vector<int>& labels) {
  TrainBatch b;
  b.B = static_cast<int>(seqs.size());
  for (const auto& s : seqs) {
    if (s.empty()) throw Error("a training sequence is empty");
    b.T = std::max(b.T, std::min(static_cast<int>(s.size()), model.config.max_len));
  }
  const int pad = std::max(0, model.vocab.pad_id());
  b.ids.assign(static_cast<size_t>(b.B) * b.T, pad);
  b.is_pad.assign(b.ids.size(), 1);
  for (int i = 0; i < b.B; ++i)
    for (int t = 0; t < b.T && t < static_cast<int>(seqs[static_cast<size_t>(i)].size()); ++t) {
      b.ids[static_cast<size_t>(i * b.T + t)] = seqs[static_cast<size_t>(i)][static_cast<size_t>(t)];
      b.is_pad[static_cast<size_t>(i * b.T + t)] = 0;
    }
  b.labels = labels;
  return b;
}

StepOutput train_step(const Model& model, Ops& ops, const TrainBatch& batch, const StepOptions& opt,
                      ModelWeights* grads) {
  const ModelConfig& c = model.config;
  const ModelWeights& W = model.weights;
  if (c.num_classes <= 0) throw Error("training needs a classifier (num_classes > 0)");
  const int B = batch.B, T = batch.T;
  const std::vector<int> types;  // single-segment inputs: token type 0 everywhere

  // ---- the embedding, the layers of the plan and the final norm, keeping what the backward needs
  NormState embed_norm, final_norm;
  Tensor x = embed_forward(model, ops, batch.ids, types, T, embed_norm);  // (N, E)
  AttnArgs attn = attention_args(c, W, B, T, T);
  attn.key_blocked = &batch.is_pad;
  attn.causal = opt.causal;
  std::optional<Dropout> dropout;
  if (opt.dropout > 0.0f) dropout.emplace(opt.dropout, opt.dropout_seed);
  const LayerPlan plan = make_layer_plan(c);
  // Checkpointing keeps each layer's input and the dropout generator as the layer found it
  // (one LayerState then serves every layer); otherwise every layer keeps its whole state.
  const bool checkpoint = opt.checkpoint && grads != nullptr && !opt.head_only;
  std::vector<LayerState> states(checkpoint ? 1 : static_cast<size_t>(c.num_layers));
  std::vector<Tensor> inputs;
  std::vector<Dropout> draws;
  LayerRun run;
  run.for_backward = grads != nullptr && !checkpoint;
  run.dropout = dropout ? &*dropout : nullptr;
  StepOutput out;
  if (opt.keep_attention) out.attention.resize(static_cast<size_t>(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l) {
    run.probs = opt.keep_attention ? &out.attention[static_cast<size_t>(l)] : nullptr;
    if (checkpoint) {
      inputs.push_back(x);
      if (dropout) draws.push_back(*dropout);
    }
    layer_forward(c, plan, W.layers[static_cast<size_t>(l)], ops, attn, x, states[checkpoint ? 0 : static_cast<size_t>(l)],
                  run);
  }
  final_forward(model, ops, x, final_norm);

  // ---- the head (pooling, [pooler], classifier), softmax cross-entropy
  const int C = c.num_classes;
  HeadState head;
  const Tensor logits = head_forward(model, ops, x, batch.is_pad, B, T, head);
  Tensor dlogits({B, C});
  for (int b = 0; b < B; ++b) {
    float m = logits.at(b, 0);
    int best = 0;
    for (int k = 1; k < C; ++k)
      if (logits.at(b, k) > m) m = logits.at(b, k), best = k;
    double z = 0;
    for (int k = 0; k < C; ++k) z += std::exp(static_cast<double>(logits.at(b, k)) - m);
    const int y = batch.labels[static_cast<size_t>(b)];
    out.loss += -(logits.at(b, y) - m - std::log(z));
    out.predicted.push_back(best);
    out.correct += best == y;
    for (int k = 0; k < C; ++k)
      dlogits.at(b, k) = static_cast<float>((std::exp(static_cast<double>(logits.at(b, k)) - m) / z - (k == y)) / B);
  }
  out.loss /= B;
  out.logits = logits;
  if (!grads) return out;

  // ---- backward: the same pieces in reverse
  ModelWeights& G = *grads;
  Tensor dx;
  head_backward(model, ops, head, dlogits, B, T, dx, G);
  if (opt.head_only) return out;
  final_backward(model, ops, final_norm, dx, G);
  for (int l = c.num_layers - 1; l >= 0; --l) {
    LayerState& st = states[checkpoint ? 0 : static_cast<size_t>(l)];
    if (checkpoint) {  // the layer again from its input, drawing the same dropout masks
      LayerRun again;
      again.for_backward = true;
      std::optional<Dropout> replay;
      if (dropout) replay.emplace(draws[static_cast<size_t>(l)]);
      again.dropout = replay ? &*replay : nullptr;
      Tensor y = std::move(inputs[static_cast<size_t>(l)]);
      layer_forward(c, plan, W.layers[static_cast<size_t>(l)], ops, attn, y, st, again);
    }
    layer_backward(c, plan, W.layers[static_cast<size_t>(l)], G.layers[static_cast<size_t>(l)], ops, attn, st,
                   dropout ? dropout->scale() : 1.0f, dx, &G.rel_pos);
  }
  embed_backward(model, ops, batch.ids, types, T, std::move(dx), embed_norm, G);
  return out;
}

}  // namespace attnlab
