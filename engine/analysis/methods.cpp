// The analysis methods (see methods.h).
#include "engine/analysis/methods.h"

#include <cctype>
#include <algorithm>
#include <cmath>
#include <optional>

#include "engine/compute/hooks.h"
#include "engine/compute/lm.h"
#include "engine/compute/plan.h"

namespace attnlab {

namespace {

// out = A R (+ R when add_r) for T x T maps: one matrix product (oneDNN / Eigen through the
// cpu ops; R transposed because linear computes x W^T). T = 2,000 takes milliseconds, not the
// seconds a plain triple loop took.
void multiply(Ops& ops, const Tensor& A, const Tensor& R, Tensor& out, bool add_r) {
  const int64_t T = R.dim(0);
  Tensor Rt({T, T});
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) Rt.at(j, i) = R.at(i, j);
  ops.linear(A, Rt, Tensor(), out);
  if (add_r)
    for (size_t k = 0; k < out.data.size(); ++k) out.data[k] += R.data[k];
}

Tensor identity(int T) {
  Tensor I({T, T});
  for (int i = 0; i < T; ++i) I.at(i, i) = 1.0f;
  return I;
}

// sum_k x_k^2 in double, over eight independent partial sums (one serial sum is a chain of
// dependent additions: 4 ms of the 72 heads' norms at T = 128 instead of under 1)
double sum_of_squares(const float* x, int n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int k = 0;
  for (; k + 8 <= n; k += 8)
    for (int u = 0; u < 8; ++u) acc[u] += static_cast<double>(x[k + u]) * x[k + u];
  for (; k < n; ++k) acc[0] += static_cast<double>(x[k]) * x[k];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

void require_self(const ForwardRequest& r, const char* what) {
  if (!r.cross_ids.empty()) throw Error(std::string(what) + " reads self-attention; cross mode has none");
}

}  // namespace

Tensor rollout_of(const std::vector<Tensor>& attention) {
  if (attention.empty()) throw Error("attention rollout needs at least one layer");
  const int T = static_cast<int>(attention[0].dim(1));
  if (attention[0].dim(2) != T) throw Error("attention rollout needs self-attention (as many keys as queries)");
  auto ops = make_cpu_ops();
  Tensor R = identity(T), A({T, T}), next;
  for (const Tensor& P : attention) {  // [H, T, T], layer 1 first
    const int H = static_cast<int>(P.dim(0));
    for (int i = 0; i < T; ++i) {
      double sum = 0;
      for (int j = 0; j < T; ++j) {
        double m = 0;
        for (int h = 0; h < H; ++h) m += P.data[(static_cast<size_t>(h) * T + i) * T + j];
        const double v = 0.5 * m / H + (i == j ? 0.5 : 0.0);
        A.at(i, j) = static_cast<float>(v);
        sum += v;
      }
      for (int j = 0; j < T; ++j) A.at(i, j) = static_cast<float>(A.at(i, j) / sum);  // sum >= 0.5: never 0
    }
    multiply(*ops, A, R, next, false);  // R <- A~_l R (later layers on the left)
    std::swap(R, next);
  }
  return R;
}

Tensor attention_rollout(const Model& model, Backend& backend, const ForwardRequest& request) {
  require_self(request, "attention rollout");
  ForwardRequest req = request;
  req.keep_attention.clear();  // every layer
  return rollout_of(run_forward(model, backend, req).attention);
}

Tensor value_norm_attention(const Model& model, Backend& backend, const ForwardRequest& request) {
  require_self(request, "norm-based attention");
  const ModelConfig& c = model.config;
  ForwardRequest req = request;
  req.keep_attention.clear();
  req.keep_values = true;        // the cpu and reference backends hand over each layer's values
  req.keep_layer_inputs = true;  // the others: values recomputed from each layer's input
  const ForwardResult r = run_forward(model, backend, req);
  const int L = c.num_layers, H = c.num_heads, D = c.head_dim(), E = c.embed_size, KV = c.kv_heads();
  const int T = static_cast<int>(r.ids.size());
  auto ops = make_cpu_ops();
  Tensor out({L, H, T, T});
  Tensor vh({T, D}), wh({E, D}), f, wo16;
  std::vector<double> norm(static_cast<size_t>(H) * T);  // ||f^h(x_j)|| of one layer, by head
  for (int l = 0; l < L; ++l) {
    const Tensor v = r.values.size() == static_cast<size_t>(L)
                         ? r.values[static_cast<size_t>(l)]
                         : attention_values(model, *ops, l, r.layer_inputs[static_cast<size_t>(l)]);  // (T, KV*D)
    const Tensor& Wo = wide(model.weights.layers[static_cast<size_t>(l)], &LayerWeights::wo, wo16);   // [E, H*D]
    const int64_t wo_cols = Wo.dim(1);
    const int group = H / KV;
    for (int h = 0; h < H; ++h) {
      const int g = h / group;
      // F = v^h W_O[:, hD:(h+1)D]^T, (T, E): row j is f^h(x_j); one matrix product per head
      for (int j = 0; j < T; ++j) std::copy_n(v.ptr() + static_cast<int64_t>(j) * KV * D + g * D, D, vh.ptr() + j * D);
      for (int e = 0; e < E; ++e)
        std::copy_n(Wo.ptr() + static_cast<int64_t>(e) * wo_cols + h * D, D, wh.ptr() + e * D);
      ops->linear(vh, wh, Tensor(), f);
      for (int j = 0; j < T; ++j)
        norm[static_cast<size_t>(h) * T + j] = std::sqrt(sum_of_squares(f.ptr() + static_cast<int64_t>(j) * E, E));
    }
    // a^h_ij ||f^h(x_j)||, row by row, the heads in parallel
    const std::shared_ptr<const Tensor> probs = r.layer_probs(l);  // kept, or recomputed (on demand)
    const Tensor& P = *probs;
#pragma omp parallel for schedule(static)
    for (int h = 0; h < H; ++h) {
      const double* nh = norm.data() + static_cast<size_t>(h) * T;
      const float* p = P.ptr() + static_cast<int64_t>(h) * T * T;
      float* o = out.ptr() + (static_cast<int64_t>(l) * H + h) * T * T;
      for (int i = 0; i < T; ++i, p += T, o += T)
        for (int j = 0; j < T; ++j) o[j] = static_cast<float>(p[j] * nh[j]);
    }
  }
  return out;
}

PredictionGradients prediction_gradients(const Model& model, const ForwardRequest& request, int target,
                                         ModelWeights* grads) {
  GradientOptions o;
  o.target = target, o.grads = grads;
  return prediction_gradients(model, request, o);
}

PredictionGradients prediction_gradients(const Model& model, const ForwardRequest& request,
                                         const GradientOptions& options) {
  require_self(request, "grad-attention");
  const ModelConfig& c = model.config;
  const ModelWeights& W = model.weights;
  if (c.cross_attention)
    throw Error(
        "gradients (grad-attention, relevance) do not run encoder-decoders yet: their decoder reads a source through "
        "cross-attention (forward --text SOURCE --target TEXT shows its attention)");
  if (c.num_classes == 0 && !c.lm_head)
    throw Error(
        "relevance (grad-attention) explains a prediction: it needs a classifier, or a language model's next token; "
        "this model has neither");
  const AttnMask mask = self_attention_mask(model, request);
  const std::vector<std::vector<uint8_t>> ablate = ablation_flags(c, request.ablate);
  const int T = static_cast<int>(request.ids.size()), L = c.num_layers, E = c.embed_size;
  const int n_out = c.num_classes > 0 ? c.num_classes : c.vocab_size;
  if (options.wrong >= 0 && (options.target < 0 || options.target == options.wrong))
    throw Error("a logit difference needs two different logits (answer " + std::to_string(options.target) + ", wrong " +
                std::to_string(options.wrong) + ")");
  if (options.wrong >= n_out)
    throw Error((c.num_classes > 0 ? "no class " : "no token id ") + std::to_string(options.wrong) +
                " (the model has " + std::to_string(n_out) + ")");
  auto ops = make_cpu_ops();
  ops->set_weights_version(W.version);
  HookSpec keep;
  keep.cache = options.hooks;
  std::optional<HookRun> hooks;
  if (!keep.cache.empty()) hooks.emplace(keep);

  // ---- forward, every layer keeping what its backward needs
  NormState embed_norm, final_norm;
  Tensor x = embed_forward(model, *ops, request.ids, request.token_types, T, embed_norm);
  AttnArgs attn = attention_args(c, W, 1, T, T);
  attn.mask = &mask;
  const LayerPlan plan = make_layer_plan(c);
  std::vector<LayerState> states(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) {
    if (request.cancel && request.cancel->load()) throw Cancelled();
    LayerRun run;
    run.for_backward = true;
    run.layer = l;
    if (hooks) run.hooks = &*hooks;
    if (!ablate.empty() && !ablate[static_cast<size_t>(l)].empty()) run.ablate = &ablate[static_cast<size_t>(l)];
    attn.mask = &layer_mask(mask, c, l);
    layer_forward(c, plan, W.layers[static_cast<size_t>(l)], *ops, attn, x, states[static_cast<size_t>(l)], run);
  }
  final_forward(model, *ops, x, final_norm);

  // ---- y and d y / d (final hidden states): y = sum_k coef_k logit[id_k]
  ModelWeights none;
  none.layers.resize(static_cast<size_t>(L));
  ModelWeights& G = options.grads ? *options.grads : none;
  PredictionGradients out;
  Tensor dx({T, E});
  auto pick = [&](const auto& logits) {
    int t = options.target;
    if (t < 0) t = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (t >= n_out)
      throw Error(c.num_classes > 0
                      ? "--target: no class " + std::to_string(t) + " (the model has " + std::to_string(n_out) + ")"
                      : "--target: no token id " + std::to_string(t) + " in the vocabulary");
    out.target = t;
    std::vector<std::pair<int, float>> terms = {{t, 1.0f}};
    if (options.wrong >= 0) terms.push_back({options.wrong, -1.0f});
    out.y = 0;
    for (const auto& [id, coef] : terms) out.y += coef * static_cast<double>(logits[static_cast<size_t>(id)]);
    return terms;
  };
  if (c.num_classes > 0) {
    HeadState head;
    const Tensor logits = head_forward(model, *ops, x, pad_flags(model, request.ids), 1, T, head);
    Tensor dlogits({1, c.num_classes});
    for (const auto& [id, coef] : pick(logits.data)) dlogits.data[static_cast<size_t>(id)] += coef;
    head_backward(model, *ops, head, dlogits, 1, T, dx, G);
  } else {
    Tensor last({1, E});
    std::copy_n(x.ptr() + static_cast<int64_t>(T - 1) * E, E, last.ptr());
    const Tensor logits = lm_logits(model, *ops, last);
    // y = sum_k coef_k h_{T-1} . W_lm[id_k]: d y / d h_{T-1} = sum_k coef_k W_lm[id_k], and
    // d y / d W_lm[id_k] = coef_k h_{T-1}
    const auto unembed = c.tied_lm_head ? &ModelWeights::embedding : &ModelWeights::lm_head;
    Tensor& Glm = c.tied_lm_head ? G.embedding : G.lm_head;
    std::vector<float> wrow(static_cast<size_t>(E));
    for (const auto& [id, coef_logit] : pick(logits.data)) {
      // through Gemma 2's soft cap on the logit: times 1 - tanh^2
      const float coef = coef_logit * lm_softcap_grad(c, logits.data[static_cast<size_t>(id)]);
      weight_row(W, unembed, id, wrow.data());
      for (int e = 0; e < E; ++e) {
        dx.at(T - 1, e) += coef * wrow[static_cast<size_t>(e)];
        if (!Glm.empty()) Glm.at(id, e) += coef * last.data[static_cast<size_t>(e)];
      }
    }
  }

  // ---- backward through the layers, keeping d y / d A_l (and the named activations' gradients)
  final_backward(model, *ops, final_norm, dx, G);
  out.probs.resize(static_cast<size_t>(L));
  out.dprobs.resize(static_cast<size_t>(L));
  std::vector<Tensor> dvalues;
  for (int l = L - 1; l >= 0; --l) {
    if (request.cancel && request.cancel->load()) throw Cancelled();
    LayerState& st = states[static_cast<size_t>(l)];
    Tensor& dP = out.dprobs[static_cast<size_t>(l)];
    layer_backward(c, plan, W.layers[static_cast<size_t>(l)], G.layers[static_cast<size_t>(l)], *ops, attn, st, 1.0f,
                   dx, G.rel_pos.empty() ? nullptr : &G.rel_pos, &dP, hooks ? &dvalues : nullptr);
    if (dP.empty()) dP = Tensor({1, c.num_heads, T, T});  // nothing downstream reads this layer's attention
    dP.shape.erase(dP.shape.begin());                     // (1, H, T, T) -> (H, T, T)
    out.probs[static_cast<size_t>(l)] = std::move(st.P);
    out.probs[static_cast<size_t>(l)].shape.erase(out.probs[static_cast<size_t>(l)].shape.begin());
    for (size_t v = 0; hooks && v < dvalues.size(); ++v) {
      if (!plan.hooks[v]) continue;
      const std::string name = "blocks." + std::to_string(l) + "." + plan.hooks[v];
      const auto kept = hooks->cache.find(name);
      if (kept == hooks->cache.end()) continue;
      Tensor g = dvalues[v].empty() ? Tensor(kept->second.shape) : std::move(dvalues[v]);
      g.shape = kept->second.shape;  // the same elements, shaped as the activation is
      out.gradients[name] = std::move(g);
    }
    st = LayerState();  // free the layer's values as the backward passes it
  }
  if (hooks) {
    for (auto& [name, value] : hooks->cache)
      if (out.gradients.count(name)) out.activations[name] = std::move(value);
    if (out.activations.empty())
      throw Error("no activation with a gradient matches " + keep.cache.front() +
                  " (gradients are kept for the layers' named values: blocks.{l}.hook_resid_pre, attn.hook_z, ...)");
  }
  if (options.grads)
    embed_backward(model, *ops, request.ids, request.token_types, T, std::move(dx), embed_norm, *options.grads);
  return out;
}

Tensor grad_attention(const Model& model, const ForwardRequest& request, int target, int* used_target) {
  const PredictionGradients g = prediction_gradients(model, request, target);
  if (used_target) *used_target = g.target;
  const int T = static_cast<int>(request.ids.size());
  auto ops = make_cpu_ops();
  Tensor R = identity(T), A({T, T}), next;
  std::vector<double> acc(static_cast<size_t>(T) * T);
  for (size_t l = 0; l < g.probs.size(); ++l) {  // the first layer first
    const Tensor &P = g.probs[l], &dP = g.dprobs[l];
    const int H = static_cast<int>(P.dim(0));
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int h = 0; h < H; ++h)
      for (size_t k = 0; k < acc.size(); ++k) {
        const double v = static_cast<double>(dP.data[h * acc.size() + k]) * P.data[h * acc.size() + k];
        if (v > 0) acc[k] += v / H;
      }
    for (size_t k = 0; k < acc.size(); ++k) A.data[k] = static_cast<float>(acc[k]);
    multiply(*ops, A, R, next, true);  // R <- R + A_bar R
    std::swap(R, next);
  }
  return R;
}

std::vector<float> readout_relevance(const Model& model, const std::vector<int>& ids, const Tensor& R) {
  const int T = static_cast<int>(ids.size());
  std::vector<float> w(static_cast<size_t>(T), 0.0f);
  if (model.config.num_classes > 0) {
    const std::vector<uint8_t> pad = pad_flags(model, ids);
    w = pooling_weights(model.config.pooling, pad.data(), T);
  } else {
    w[static_cast<size_t>(T - 1)] = 1.0f;
  }
  std::vector<float> r(static_cast<size_t>(T), 0.0f);
  for (int i = 0; i < T; ++i)
    for (int j = 0; j < T; ++j)
      r[static_cast<size_t>(j)] += w[static_cast<size_t>(i)] * (R.at(i, j) - (i == j ? 1.0f : 0.0f));
  return r;
}

Tensor mean_over_heads(const Tensor& m) {
  if (m.rank() != 4) throw Error("mean over heads: expected [layers, heads, T, S]");
  const int64_t L = m.dim(0), H = m.dim(1), TS = m.dim(2) * m.dim(3);
  Tensor out({L, m.dim(2), m.dim(3)});
  for (int64_t l = 0; l < L; ++l)
    for (int64_t k = 0; k < TS; ++k) {
      double s = 0;
      for (int64_t h = 0; h < H; ++h) s += m.data[static_cast<size_t>((l * H + h) * TS + k)];
      out.data[static_cast<size_t>(l * TS + k)] = static_cast<float>(s / static_cast<double>(H));
    }
  return out;
}

Tensor mean_over_layers(const Tensor& m) {
  const Tensor per_layer = mean_over_heads(m);
  const int64_t L = per_layer.dim(0), TS = per_layer.dim(1) * per_layer.dim(2);
  Tensor out({per_layer.dim(1), per_layer.dim(2)});
  for (int64_t k = 0; k < TS; ++k) {
    double s = 0;
    for (int64_t l = 0; l < L; ++l) s += per_layer.data[static_cast<size_t>(l * TS + k)];
    out.data[static_cast<size_t>(k)] = static_cast<float>(s / static_cast<double>(L));
  }
  return out;
}

Tensor head_importance(const Model& model, Backend& backend, const ForwardRequest& request, int target,
                       const std::function<void(int, int)>& progress, const std::atomic<bool>* cancel) {
  require_self(request, "head importance");
  const ModelConfig& c = model.config;
  if (c.num_classes == 0 && !c.lm_head)
    throw Error("head importance needs a prediction: a classifier, or a language model's next token");
  ForwardRequest req = request;
  req.keep_attention.assign(static_cast<size_t>(c.num_layers), false);  // no probabilities needed
  req.cancel = cancel;
  const ForwardResult full = run_forward(model, backend, req);
  int t = target;
  if (c.num_classes > 0) {
    if (t < 0) t = full.predicted;
    if (t >= c.num_classes)
      throw Error("--target: no class " + std::to_string(t) + " (the model has " + std::to_string(c.num_classes) + ")");
  } else {
    if (t < 0) t = full.next_tokens.at(0).first;
    if (t >= c.vocab_size) throw Error("--target: no token id " + std::to_string(t) + " in the vocabulary");
  }
  auto p_target = [&](const ForwardResult& r) {
    return c.num_classes > 0 ? static_cast<double>(r.class_probs[static_cast<size_t>(t)])
                             : next_token_probability(model, r.hidden, static_cast<int>(r.ids.size()) - 1, t);
  };
  const double base = p_target(full);
  const int L = c.num_layers, H = c.num_heads;
  Tensor out({L, H});
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) {
      if (cancel && cancel->load()) throw Cancelled();
      req.ablate = {{l, h}};
      out.at(l, h) = static_cast<float>(base - p_target(run_forward(model, backend, req)));
      if (progress) progress(l * H + h + 1, L * H);
    }
  return out;
}

}  // namespace attnlab
