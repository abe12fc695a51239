// Next tokens and the logit lens (see lm.h).
#include "engine/compute/lm.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/compute/mask.h"
#include "engine/compute/plan.h"

namespace attnlab {

namespace {

// Softmax statistics of one row of logits: the arg-max and log-sum-exp, in double.
struct RowTop {
  int id = -1;
  float prob = 0;
};
RowTop row_top(const float* logits, int V) {
  const int best = static_cast<int>(std::max_element(logits, logits + V) - logits);
  double sum = 0;
  for (int v = 0; v < V; ++v) sum += std::exp(static_cast<double>(logits[v]) - logits[best]);
  return {best, static_cast<float>(1.0 / sum)};
}

Ops& cpu_ops() {
  static thread_local std::unique_ptr<Ops> ops = make_cpu_ops();
  return *ops;
}

// The LM head's logits [1, vocab] at one position of hidden [T, E].
Tensor logits_at(const Model& model, const Tensor& hidden, int position) {
  const int T = static_cast<int>(hidden.dim(0)), E = static_cast<int>(hidden.dim(1));
  if (position < 0 || position >= T) throw Error("position " + std::to_string(position) + " is outside the input");
  Tensor row({1, E});
  std::copy(hidden.ptr() + static_cast<size_t>(position) * E, hidden.ptr() + static_cast<size_t>(position + 1) * E,
            row.ptr());
  return lm_logits(model, cpu_ops(), row);
}

}  // namespace

std::vector<float> next_token_logits(const Model& model, const Tensor& hidden, int position) {
  const Tensor logits = logits_at(model, hidden, position);
  return std::vector<float>(logits.data.begin(), logits.data.end());
}

double next_token_probability(const Model& model, const Tensor& hidden, int position, int id) {
  const Tensor logits = logits_at(model, hidden, position);
  const float* l = logits.ptr();
  const int V = static_cast<int>(logits.dim(1));
  if (id < 0 || id >= V) throw Error("no token id " + std::to_string(id) + " in the vocabulary");
  const double mx = *std::max_element(l, l + V);
  double sum = 0;
  for (int v = 0; v < V; ++v) sum += std::exp(static_cast<double>(l[v]) - mx);
  return std::exp(static_cast<double>(l[id]) - mx) / sum;
}

std::vector<std::pair<int, float>> top_next_tokens(const Model& model, const Tensor& hidden, int position, int k) {
  return top_of_logits(next_token_logits(model, hidden, position), k);
}

std::vector<std::pair<int, float>> top_of_logits(const std::vector<float>& logits, int k) {
  const int V = static_cast<int>(logits.size());
  if (V == 0) return {};
  const float* l = logits.data();
  const float mx = *std::max_element(l, l + V);
  double sum = 0;
  for (int v = 0; v < V; ++v) sum += std::exp(static_cast<double>(l[v]) - mx);
  std::vector<int> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  k = std::min(k, V);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  std::vector<std::pair<int, float>> out;
  for (int i = 0; i < k; ++i)
    out.emplace_back(order[static_cast<size_t>(i)],
                     static_cast<float>(std::exp(static_cast<double>(l[order[static_cast<size_t>(i)]]) - mx) / sum));
  return out;
}

LogitLens logit_lens(const Model& model, Backend& backend, const std::vector<int>& ids, const std::atomic<bool>* cancel,
                     int first, int count) {
  const ModelConfig& c = model.config;
  if (!c.lm_head) throw Error("the logit lens needs a language model (a model with an LM head)");
  const int T = static_cast<int>(ids.size());
  AttnMask mask = build_mask(model_mask(c, MaskSpec{}), T, T, c.num_heads, ids, model.vocab.pad_id());
  apply_model_window(mask, c);
  EncodeOptions opts;
  opts.keep_attention.assign(static_cast<size_t>(c.num_layers), false);
  opts.keep_layer_inputs = true;
  opts.cancel = cancel;
  if (ids.empty()) throw Error("the sequence is empty");
  if (T > c.max_len)
    throw Error("the sequence has " + std::to_string(T) + " tokens, more than the model's " +
                std::to_string(c.max_len));
  for (size_t t = 0; t < ids.size(); ++t)
    if (ids[t] < 0 || ids[t] >= c.vocab_size)
      throw Error("id " + std::to_string(ids[t]) + " at position " + std::to_string(t) + " is outside the vocabulary");
  if (count < 0) count = T - first;
  if (first < 0 || first >= T || count < 1 || first + count > T)
    throw Error("the logit lens reads positions " + std::to_string(first) + ".." + std::to_string(first + count - 1) +
                " of a sequence of " + std::to_string(T));
  EncodeOutput enc = backend.encode(model, ids, mask, opts);
  LogitLens lens;
  lens.layers = c.num_layers, lens.T = count, lens.first = first;
  lens.top_id.resize(static_cast<size_t>(c.num_layers) * count);
  lens.top_prob.resize(lens.top_id.size());
  const int E = c.embed_size, block = 64;
  for (int l = 0; l < c.num_layers; ++l) {
    // Layer l's output is layer l+1's input; the last layer's, through the final norm, is hidden.
    const bool last = l == c.num_layers - 1;
    const Tensor& x = last ? enc.hidden : enc.layer_inputs[static_cast<size_t>(l + 1)];
    for (int t0 = 0; t0 < count; t0 += block) {
      if (cancel && cancel->load()) throw Cancelled();
      const int n = std::min(block, count - t0);
      Tensor rows({n, E});
      std::copy(x.ptr() + static_cast<size_t>(first + t0) * E, x.ptr() + static_cast<size_t>(first + t0 + n) * E,
                rows.ptr());
      if (!last) {
        NormState norm;
        final_forward(model, cpu_ops(), rows, norm);
      }
      const Tensor logits = lm_logits(model, cpu_ops(), rows);
      const int V = static_cast<int>(logits.dim(1));
      for (int i = 0; i < n; ++i) {
        const RowTop top = row_top(logits.ptr() + static_cast<size_t>(i) * V, V);
        lens.top_id[static_cast<size_t>(l) * count + t0 + i] = top.id;
        lens.top_prob[static_cast<size_t>(l) * count + t0 + i] = top.prob;
      }
    }
  }
  return lens;
}

}  // namespace attnlab
