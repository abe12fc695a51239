// The model around the layer stack (see plan.h): attention arguments, the embedding and its hook
// names, the final norm, the classifier head and the language-model logits, forward and backward.
#include "engine/compute/plan.h"

#include <algorithm>
#include <cmath>

#include "engine/compute/hooks.h"
#include "engine/compute/linear_half.h"

namespace attnlab {

AttnArgs attention_args(const ModelConfig& c, const ModelWeights& w, int B, int T, int S) {
  AttnArgs a;
  a.B = B, a.T = T, a.S = S, a.H = c.num_heads, a.D = c.head_dim();
  a.rel = c.positional == Positional::Relative ? &w.rel_pos : nullptr;
  a.max_len = c.max_len;
  a.KV = c.kv_heads();
  a.scale = c.attn_scale;
  a.softcap = c.attn_softcap;
  return a;
}

Tensor lm_logits(const Model& model, Ops& ops, const Tensor& x) {
  if (!model.config.lm_head) throw Error("this model has no language-model head");
  const auto member = model.config.tied_lm_head ? &ModelWeights::embedding : &ModelWeights::lm_head;
  Tensor logits;
  if (const HalfTensor* h = half_of(model.weights, member)) {  // 16 bits: a block of the vocabulary at a time
    HalfScratch scratch;
    linear_half(ops, x, *h, Tensor(), logits, scratch);
  } else {
    ops.linear(x, model.weights.*member, Tensor(), logits);
  }
  if (!model.weights.lm_bias.empty()) {  // BART's final_logits_bias [1, vocab], on every row
    const int64_t V = logits.dim(1);
    for (int64_t r = 0; r < logits.dim(0); ++r)
      for (int64_t v = 0; v < V; ++v) logits.data[static_cast<size_t>(r * V + v)] += model.weights.lm_bias.data[v];
  }
  if (const float cap = model.config.final_softcap; cap > 0)  // Gemma 2: logits / cap, tanh, * cap
    for (float& v : logits.data) v = std::tanh(v / cap) * cap;
  return logits;
}

float lm_softcap_grad(const ModelConfig& c, float logit) {
  if (c.final_softcap <= 0) return 1.0f;
  const float t = logit / c.final_softcap;  // tanh(raw / cap), from the capped logit
  return 1.0f - t * t;
}

Tensor sinusoid_table(int T, int E) {
  Tensor pe({T, E});
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < E / 2; ++k) {
      const double angle = t / std::pow(10000.0, 2.0 * k / E);
      pe.at(t, 2 * k) = static_cast<float>(std::sin(angle));
      pe.at(t, 2 * k + 1) = static_cast<float>(std::cos(angle));
    }
  return pe;
}

// x (B*T, E) = embedding[ids] + positional term (learned: a table row per position;
// sinusoidal: added unscaled; relative: none here, it enters every attention score)
// [+ token-type embedding] [-> LayerNorm].
std::vector<std::string> embed_hook_names(const ModelConfig& c) {
  // TransformerLens: HookedTransformer's hook_embed / hook_pos_embed at the top; HookedEncoder's
  // BertEmbed (post-norm encoders) under embed., with its hook_token_type_embed
  const std::string pre = c.norm == NormPlacement::Post ? "embed." : "";
  std::vector<std::string> names = {pre + "hook_embed"};
  if (c.positional == Positional::Learned || c.positional == Positional::Sinusoidal)
    names.push_back(pre + "hook_pos_embed");
  if (c.type_vocab_size > 0) names.push_back(pre + "hook_token_type_embed");
  return names;
}

Tensor embed_forward(const Model& model, Ops& ops, const std::vector<int>& ids, const std::vector<int>& types, int T,
                     NormState& norm, HookRun* hooks, int first) {
  const ModelConfig& c = model.config;
  const ModelWeights& w = model.weights;
  const int N = static_cast<int>(ids.size()), E = c.embed_size;
  // The parts, row n of each a table row: token, positional term, token type; summed in that
  // order. With hooks each part is made whole and named (hooks.h), so it can be kept or edited
  // before the sum; without, its rows are added straight into x (no buffer per part: training
  // and every pass run this).
  const Tensor pe = c.positional == Positional::Sinusoidal ? sinusoid_table(std::min(T, first + N), E) : Tensor();
  Tensor tokens;  // a 16-bit embedding's rows of these ids, widened
  if (half_of(w, &ModelWeights::embedding)) {
    tokens = Tensor({N, E});
    for (int n = 0; n < N; ++n)
      weight_row(w, &ModelWeights::embedding, ids[static_cast<size_t>(n)], tokens.ptr() + static_cast<int64_t>(n) * E);
  }
  std::vector<std::function<const float*(int)>> parts = {[&](int n) {
    return tokens.empty() ? w.embedding.ptr() + static_cast<size_t>(ids[static_cast<size_t>(n)]) * E
                          : tokens.ptr() + static_cast<int64_t>(n) * E;
  }};
  if (c.positional == Positional::Learned || c.positional == Positional::Sinusoidal) {
    const Tensor& table = c.positional == Positional::Sinusoidal ? pe : w.pos_embedding;
    // BART's learned positions start at row 2 (BartLearnedPositionalEmbedding's offset)
    const int offset = c.positional == Positional::Learned ? c.pos_offset : 0;
    parts.push_back([&table, T, E, first, offset](int n) {
      return table.ptr() + static_cast<int64_t>(offset + (first + n) % T) * E;
    });
  }
  if (c.type_vocab_size > 0)
    parts.push_back([&](int n) {
      return w.type_embedding.ptr() + static_cast<size_t>(types.empty() ? 0 : types[static_cast<size_t>(n)]) * E;
    });
  const std::vector<std::string> names = hooks ? embed_hook_names(c) : std::vector<std::string>();
  Tensor x({N, E});
  for (size_t k = 0; k < parts.size(); ++k) {
    Tensor part;
    // Gemma: the token embedding times sqrt(hidden) (a float32 product, as its scaled embedding)
    const bool scaled = k == 0 && c.embed_scale > 0;
    if (hooks) {
      part = Tensor({N, E});
      for (int n = 0; n < N; ++n) std::copy_n(parts[k](n), E, part.ptr() + static_cast<int64_t>(n) * E);
      if (scaled)
        for (float& v : part.data) v *= c.embed_scale;
      hooks->visit(names[k], part, part.shape);
    }
    for (int n = 0; n < N; ++n) {
      const float* row = hooks ? part.ptr() + static_cast<int64_t>(n) * E : parts[k](n);
      float* dst = x.ptr() + static_cast<int64_t>(n) * E;
      if (k == 0) {
        std::copy_n(row, E, dst);
        if (scaled && !hooks)
          for (int e = 0; e < E; ++e) dst[e] *= c.embed_scale;
      } else {
        for (int e = 0; e < E; ++e) dst[e] += row[e];
      }
    }
  }
  if (c.embedding_norm) {
    Tensor y;
    ops.layer_norm(x, w.emb_ln_g, w.emb_ln_b, c.layer_norm_eps, y, norm.xhat, norm.rstd);
    x = std::move(y);
  }
  return x;
}

void embed_backward(const Model& model, Ops& ops, const std::vector<int>& ids, const std::vector<int>& types, int T,
                    Tensor dx, const NormState& norm, ModelWeights& G) {
  const ModelConfig& c = model.config;
  const int E = c.embed_size;
  if (c.embedding_norm) {
    Tensor d;
    ops.layer_norm_backward(norm.xhat, norm.rstd, model.weights.emb_ln_g, dx, d, G.emb_ln_g, G.emb_ln_b);
    dx = std::move(d);
  }
  for (size_t n = 0; n < ids.size(); ++n) {
    const int id = ids[n], t = static_cast<int>(n) % T;
    const int type = types.empty() ? 0 : types[n];
    const float token_scale = c.embed_scale > 0 ? c.embed_scale : 1.0f;
    for (int e = 0; e < E; ++e) {
      const float g = dx.at(static_cast<int64_t>(n), e);
      G.embedding.at(id, e) += g * token_scale;
      if (c.positional == Positional::Learned) G.pos_embedding.at(c.pos_offset + t, e) += g;
      if (c.type_vocab_size > 0) G.type_embedding.at(type, e) += g;
    }
  }
}

void final_forward(const Model& model, Ops& ops, Tensor& x, NormState& norm) {
  if (!model.config.final_norm) return;
  Tensor y;
  if (model.config.norm_kind == NormKind::RmsNorm) {
    ops.rms_norm(x, model.weights.final_ln_g, model.config.layer_norm_eps, y);
    norm.xhat = std::move(x);  // RMSNorm's backward reads its input
    x = std::move(y);
    return;
  }
  ops.layer_norm(x, model.weights.final_ln_g, model.weights.final_ln_b, model.config.layer_norm_eps, y, norm.xhat,
                 norm.rstd);
  x = std::move(y);
}

void final_backward(const Model& model, Ops& ops, const NormState& norm, Tensor& dx, ModelWeights& G) {
  if (!model.config.final_norm) return;
  Tensor d;
  if (model.config.norm_kind == NormKind::RmsNorm) {
    ops.rms_norm_backward(norm.xhat, model.weights.final_ln_g, model.config.layer_norm_eps, dx, d, G.final_ln_g);
    dx = std::move(d);
    return;
  }
  ops.layer_norm_backward(norm.xhat, norm.rstd, model.weights.final_ln_g, dx, d, G.final_ln_g, G.final_ln_b);
  dx = std::move(d);
}

Tensor head_forward(const Model& model, Ops& ops, const Tensor& x, const std::vector<uint8_t>& is_pad, int B, int T,
                    HeadState& st) {
  const ModelConfig& c = model.config;
  const ModelWeights& W = model.weights;
  const int E = c.embed_size;
  st.pooled = Tensor({B, E});
  st.pool_w.clear();
  for (int b = 0; b < B; ++b) {
    const std::vector<float> w = pooling_weights(c.pooling, is_pad.data() + static_cast<size_t>(b) * T, T);
    st.pool_w.insert(st.pool_w.end(), w.begin(), w.end());
    for (int t = 0; t < T; ++t)
      if (w[static_cast<size_t>(t)] != 0.0f)
        for (int e = 0; e < E; ++e) st.pooled.at(b, e) += w[static_cast<size_t>(t)] * x.at(b * T + t, e);
  }
  const Tensor* fc_in = &st.pooled;
  if (c.pooler) {  // BERT's pooler: tanh(dense(pooled)); DistilBERT's pre_classifier: relu(dense(pooled))
    ops.linear(st.pooled, W.pooler_w, W.pooler_b, st.pooler_out);
    for (float& v : st.pooler_out.data) v = c.pooler_relu ? std::max(v, 0.0f) : std::tanh(v);
    fc_in = &st.pooler_out;
  }
  Tensor logits;
  ops.linear(*fc_in, W.fc_w, W.fc_b, logits);
  return logits;
}

void head_backward(const Model& model, Ops& ops, const HeadState& st, const Tensor& dlogits, int B, int T, Tensor& dx,
                   ModelWeights& G) {
  const ModelConfig& c = model.config;
  const ModelWeights& W = model.weights;
  const int E = c.embed_size;
  Tensor dpooled;
  if (c.pooler) {  // d tanh(z) / dz = 1 - tanh(z)^2; d relu(z) / dz = [z > 0] (= [relu(z) > 0])
    Tensor dp;
    ops.linear_backward(st.pooler_out, W.fc_w, dlogits, &dp, G.fc_w, G.fc_b);
    for (size_t k = 0; k < dp.data.size(); ++k) {
      const float y = st.pooler_out.data[k];
      dp.data[k] *= c.pooler_relu ? (y > 0.0f ? 1.0f : 0.0f) : 1.0f - y * y;
    }
    ops.linear_backward(st.pooled, W.pooler_w, dp, &dpooled, G.pooler_w, G.pooler_b);
  } else {
    ops.linear_backward(st.pooled, W.fc_w, dlogits, &dpooled, G.fc_w, G.fc_b);
  }
  dx = Tensor({static_cast<int64_t>(B) * T, E});
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const float w = st.pool_w[static_cast<size_t>(b * T + t)];
      if (w != 0.0f)
        for (int e = 0; e < E; ++e) dx.at(b * T + t, e) = w * dpooled.at(b, e);
    }
}

}  // namespace attnlab
