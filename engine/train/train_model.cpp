// The training pass: the layer plan (plan.h) over a padded batch with caches and dropout, then
// pooling, the classifier and cross-entropy, and the backward through the same plan in reverse.
#include "engine/train/train_model.h"

#include <cmath>

#include <optional>

#include "engine/compute/plan.h"

namespace attnlab {

TrainBatch make_batch(const Model& model, const std::vector<std::vector<int>>& seqs, const std::vector<int>& labels,
                      const std::vector<int>& loss_from) {
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
  if (model.config.lm_head && model.config.num_classes == 0) {
    b.targets.assign(b.ids.size(), -1);
    for (int i = 0; i < b.B; ++i) {
      const int n = std::min(static_cast<int>(seqs[static_cast<size_t>(i)].size()), b.T);
      const int from = loss_from.empty() ? 0 : std::max(0, loss_from[static_cast<size_t>(i)]);
      for (int t = from; t + 1 < n; ++t)
        b.targets[static_cast<size_t>(i * b.T + t)] = b.ids[static_cast<size_t>(i * b.T + t + 1)];
    }
  }
  return b;
}

namespace {

// Next-token cross-entropy over the scored rows of logits (N, V): the mean loss, how many rows'
// argmax is the target, and d loss / d logits (softmax - one-hot, over the scored count; zero on
// rows not scored). In double, as the classifier's. Rows are independent: split over the threads,
// each row's exponentials computed once; the loss is summed in row order afterwards, so the result
// is the same for any split (serial, the 2 N V double exponentials were ~2% of a step).
void lm_loss(const Tensor& logits, const std::vector<int>& targets, StepOutput& out, Tensor& dlogits) {
  const int64_t N = logits.shape[0], V = logits.shape[1];
  dlogits = Tensor({N, V});
  for (int target : targets) {
    out.scored += target >= 0;
    if (target >= V) throw Error("a training target (" + std::to_string(target) + ") is outside the vocabulary");
  }
  if (out.scored == 0) return;
  std::vector<double> row_loss(static_cast<size_t>(N), 0.0);
  std::vector<uint8_t> row_correct(static_cast<size_t>(N), 0);
  const double scored = out.scored;
#pragma omp parallel if (N * V >= (1 << 15))
  {
    std::vector<double> e(static_cast<size_t>(V));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const int y = targets[static_cast<size_t>(n)];
      if (y < 0) continue;
      const float* row = logits.data.data() + n * V;
      float m = row[0];
      int best = 0;
      for (int64_t k = 1; k < V; ++k)
        if (row[k] > m) m = row[k], best = static_cast<int>(k);
      double z = 0;
      for (int64_t k = 0; k < V; ++k) z += (e[static_cast<size_t>(k)] = std::exp(static_cast<double>(row[k]) - m));
      row_loss[static_cast<size_t>(n)] = -(static_cast<double>(row[y]) - m - std::log(z));
      row_correct[static_cast<size_t>(n)] = best == y;
      float* d = dlogits.data.data() + n * V;
      for (int64_t k = 0; k < V; ++k) d[k] = static_cast<float>((e[static_cast<size_t>(k)] / z - (k == y)) / scored);
    }
  }
  for (int64_t n = 0; n < N; ++n) {
    out.loss += row_loss[static_cast<size_t>(n)];
    out.correct += row_correct[static_cast<size_t>(n)];
  }
  out.loss /= out.scored;
}

}  // namespace

StepOutput train_step(const Model& model, Ops& ops, const TrainBatch& batch, const StepOptions& opt,
                      ModelWeights* grads) {
  const ModelConfig& c = model.config;
  const ModelWeights& W = model.weights;
  const bool lm = c.num_classes == 0 && c.lm_head;
  if (c.cross_attention)
    throw Error(
        "training (and lm-loss's gradients) does not run encoder-decoders yet: their decoder reads a source through "
        "cross-attention (forward --text SOURCE --target TEXT shows a target teacher-forced)");
  if (c.num_classes <= 0 && !lm) throw Error("training needs a classifier (num_classes > 0) or a language-model head");
  if (lm && batch.targets.size() != batch.ids.size()) throw Error("internal: a language model's batch without targets");
  const int B = batch.B, T = batch.T;
  const std::vector<int> types;  // single-segment inputs: token type 0 everywhere

  // ---- the embedding, the layers of the plan and the final norm, keeping what the backward needs
  NormState embed_norm, final_norm;
  Tensor x = embed_forward(model, ops, batch.ids, types, T, embed_norm);  // (N, E)
  AttnArgs attn = attention_args(c, W, B, T, T);
  attn.key_blocked = &batch.is_pad;
  attn.causal = opt.causal || c.causal;  // a decoder's mask is part of the model
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
  // each layer's window (Mistral's on every layer, Gemma 2's on every other)
  auto layer_attn = [&](int l) {
    AttnArgs a = attn;
    a.window = c.layer_slides(l) ? c.sliding_window : 0;
    return a;
  };
  for (int l = 0; l < c.num_layers; ++l) {
    run.probs = opt.keep_attention ? &out.attention[static_cast<size_t>(l)] : nullptr;
    run.layer = l;  // the layer's own rotary base (Gemma 3)
    if (checkpoint) {
      inputs.push_back(x);
      if (dropout) draws.push_back(*dropout);
    }
    layer_forward(c, plan, W.layers[static_cast<size_t>(l)], ops, layer_attn(l), x,
                  states[checkpoint ? 0 : static_cast<size_t>(l)], run);
  }
  final_forward(model, ops, x, final_norm);

  // The backward from d loss / d (the final norm's output) to every weight below it.
  auto backward_layers = [&](Tensor& dx) {
    ModelWeights& G = *grads;
    final_backward(model, ops, final_norm, dx, G);
    for (int l = c.num_layers - 1; l >= 0; --l) {
      LayerState& st = states[checkpoint ? 0 : static_cast<size_t>(l)];
      if (checkpoint) {  // the layer again from its input, drawing the same dropout masks
        LayerRun again;
        again.for_backward = true;
        again.layer = l;
        std::optional<Dropout> replay;
        if (dropout) replay.emplace(draws[static_cast<size_t>(l)]);
        again.dropout = replay ? &*replay : nullptr;
        Tensor y = std::move(inputs[static_cast<size_t>(l)]);
        layer_forward(c, plan, W.layers[static_cast<size_t>(l)], ops, layer_attn(l), y, st, again);
      }
      layer_backward(c, plan, W.layers[static_cast<size_t>(l)], G.layers[static_cast<size_t>(l)], ops, layer_attn(l),
                     st, dropout ? dropout->scale() : 1.0f, dx, &G.rel_pos);
    }
    embed_backward(model, ops, batch.ids, types, T, std::move(dx), embed_norm, G);
  };

  if (lm) {  // ---- the LM head (lm_head or the tied embedding) and next-token cross-entropy
    const Tensor& Wlm = c.tied_lm_head ? W.embedding : W.lm_head;
    Tensor dlogits;
    const Tensor logits = lm_logits(model, ops, x);
    lm_loss(logits, batch.targets, out, dlogits);
    if (!grads) return out;
    if (c.final_softcap > 0)  // Gemma 2's cap on the logits: d capped / d product = 1 - tanh^2
      for (size_t k = 0; k < dlogits.data.size(); ++k) dlogits.data[k] *= lm_softcap_grad(c, logits.data[k]);
    Tensor dx, no_bias;
    ops.linear_backward(x, Wlm, dlogits, &dx, c.tied_lm_head ? grads->embedding : grads->lm_head, no_bias);
    backward_layers(dx);
    return out;
  }

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
  out.scored = B;
  out.logits = logits;
  if (!grads) return out;

  // ---- backward: the same pieces in reverse
  Tensor dx;
  head_backward(model, ops, head, dlogits, B, T, dx, *grads);
  if (opt.head_only) return out;
  backward_layers(dx);
  return out;
}

}  // namespace attnlab
