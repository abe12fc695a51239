// The analysis methods (see methods.h).
#include "engine/analysis/methods.h"

#include <cctype>
#include <cmath>

#include "engine/lm.h"
#include "engine/plan.h"

namespace attnlab {

namespace {

void require_self(const ForwardRequest& r, const char* what) {
  if (!r.cross_ids.empty()) throw Error(std::string(what) + " reads self-attention; cross mode has none");
}

}  // namespace

Tensor attention_rollout(const Model& model, Backend& backend, const ForwardRequest& request) {
  require_self(request, "attention rollout");
  ForwardRequest req = request;
  req.keep_layers.clear();  // every layer
  const ForwardResult r = run_forward(model, backend, req);
  const int T = static_cast<int>(r.ids.size());
  std::vector<double> R(static_cast<size_t>(T) * T, 0.0), next(R.size());
  for (int i = 0; i < T; ++i) R[static_cast<size_t>(i * T + i)] = 1.0;
  std::vector<double> A(R.size());
  for (const Tensor& P : r.attention) {  // [H, T, T], layer 1 first
    const int H = static_cast<int>(P.dim(0));
    for (int i = 0; i < T; ++i) {
      double sum = 0;
      for (int j = 0; j < T; ++j) {
        double m = 0;
        for (int h = 0; h < H; ++h) m += P.data[(static_cast<size_t>(h) * T + i) * T + j];
        const double v = 0.5 * m / H + (i == j ? 0.5 : 0.0);
        A[static_cast<size_t>(i * T + j)] = v;
        sum += v;
      }
      for (int j = 0; j < T; ++j) A[static_cast<size_t>(i * T + j)] /= sum;  // sum >= 0.5: never 0
    }
    // R <- A~_l R (later layers on the left)
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < T; ++j) {
        double s = 0;
        for (int k = 0; k < T; ++k) s += A[static_cast<size_t>(i * T + k)] * R[static_cast<size_t>(k * T + j)];
        next[static_cast<size_t>(i * T + j)] = s;
      }
    std::swap(R, next);
  }
  Tensor out({T, T});
  for (size_t k = 0; k < R.size(); ++k) out.data[k] = static_cast<float>(R[k]);
  return out;
}

Tensor value_norm_attention(const Model& model, Backend& backend, const ForwardRequest& request) {
  require_self(request, "norm-based attention");
  const ModelConfig& c = model.config;
  ForwardRequest req = request;
  req.keep_layers.clear();
  req.keep_layer_inputs = true;  // the values are computed from each layer's input: one pass
  const ForwardResult r = run_forward(model, backend, req);
  const int L = c.num_layers, H = c.num_heads, D = c.head_dim(), E = c.embed_size;
  const int T = static_cast<int>(r.ids.size());
  auto ops = make_cpu_ops();
  Tensor out({L, H, T, T});
  Tensor vh({T, D}), wh({E, D}), f;
  for (int l = 0; l < L; ++l) {
    const Tensor v = attention_values(model, *ops, l, r.layer_inputs[static_cast<size_t>(l)]);  // (T, KV*D)
    const Tensor& Wo = model.weights.layers[static_cast<size_t>(l)].wo;                         // [E, E]
    const Tensor& P = r.attention[static_cast<size_t>(l)];
    const int group = H / c.kv_heads();
    for (int h = 0; h < H; ++h) {
      const int g = h / group;
      // F = v^h W_O[:, hD:(h+1)D]^T, (T, E): row j is f^h(x_j); one matrix product per head
      for (int j = 0; j < T; ++j)
        for (int d = 0; d < D; ++d) vh.at(j, d) = v.at(j, g * D + d);
      for (int e = 0; e < E; ++e)
        for (int d = 0; d < D; ++d) wh.at(e, d) = Wo.at(e, h * D + d);
      ops->linear(vh, wh, Tensor(), f);
      for (int j = 0; j < T; ++j) {
        double ss = 0;
        for (int e = 0; e < E; ++e) ss += static_cast<double>(f.at(j, e)) * f.at(j, e);
        const double norm = std::sqrt(ss);
        for (int i = 0; i < T; ++i) {
          const size_t k = ((static_cast<size_t>(l) * H + h) * T + i) * T + j;
          out.data[k] = static_cast<float>(P.data[(static_cast<size_t>(h) * T + i) * T + j] * norm);
        }
      }
    }
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
  req.keep_layers.assign(static_cast<size_t>(c.num_layers), false);  // no probabilities needed
  req.cancel = cancel;
  const ForwardResult full = run_forward(model, backend, req);
  int t = target;
  if (c.num_classes > 0) {
    if (t < 0) t = full.predicted;
    if (t >= c.num_classes) throw Error("--target: no class " + std::to_string(t) + " (the model has " +
                                        std::to_string(c.num_classes) + ")");
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

std::vector<std::vector<HeadPattern>> head_patterns(const ForwardResult& r) {
  if (r.is_cross()) throw Error("head patterns read self-attention; cross mode has none");
  const int T = static_cast<int>(r.ids.size());
  // separators and punctuation, from the labels the views show
  std::vector<uint8_t> sep(static_cast<size_t>(T), 0), punct(static_cast<size_t>(T), 0);
  for (int j = 0; j < T; ++j) {
    const std::string& s = r.tokens[static_cast<size_t>(j)];
    sep[static_cast<size_t>(j)] = s == "[SEP]" || s == "</s>" || s == "<|endoftext|>" || s == "<|eot_id|>";
    bool any = false, all = true;
    for (unsigned char ch : s) {
      if (ch == ' ' || ch >= 0x80) continue;  // the visible-space mark and other non-ASCII bytes do not count
      any = true;
      all = all && std::ispunct(ch) && ch != '[' && ch != ']' && ch != '<' && ch != '>' && ch != '|';
    }
    punct[static_cast<size_t>(j)] = any && all;
  }
  std::vector<std::vector<HeadPattern>> out;
  for (const Tensor& P : r.attention) {
    std::vector<HeadPattern> layer;
    if (P.empty()) {
      out.push_back(layer);
      continue;
    }
    const int H = static_cast<int>(P.dim(0));
    for (int h = 0; h < H; ++h) {
      HeadPattern p;
      int rows = 0;
      for (int i = 0; i < T; ++i) {
        const float* row = P.ptr() + (static_cast<size_t>(h) * T + i) * T;
        double sum = 0, ent = 0;
        for (int j = 0; j < T; ++j) {
          sum += row[j];
          if (row[j] > 0) ent -= row[j] * std::log(static_cast<double>(row[j]));
          if (sep[static_cast<size_t>(j)]) p.sep += row[j];
          if (punct[static_cast<size_t>(j)]) p.punct += row[j];
        }
        if (sum == 0) continue;  // a fully blocked row says nothing
        ++rows;
        if (i > 0) p.prev += row[i - 1];
        if (i + 1 < T) p.next += row[i + 1];
        p.self += row[i];
        p.first += row[0];
        p.entropy += ent;
      }
      if (rows > 0)
        for (double* v : {&p.prev, &p.next, &p.self, &p.first, &p.sep, &p.punct, &p.entropy}) *v /= rows;
      const std::pair<const char*, double> cands[] = {{"prev", p.prev}, {"next", p.next}, {"self", p.self},
                                                     {"first", p.first}, {"sep", p.sep},   {"punct", p.punct}};
      double best = 0.5;
      for (const auto& [name, v] : cands)
        if (v > best) best = v, p.label = name;
      if (p.label.empty() && T > 1 && p.entropy >= 0.9 * std::log(static_cast<double>(T))) p.label = "broad";
      layer.push_back(p);
    }
    out.push_back(layer);
  }
  return out;
}

}  // namespace attnlab
