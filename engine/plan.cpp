// The one layer plan: embedding, encoder layer forward and backward, inference encode and
// cross-attention, all as sequences of Ops calls (see plan.h).
#include "engine/plan.h"

#include <cmath>

namespace attnlab {

namespace {

void add_into(Tensor& a, const Tensor& b) {
  float* pa = a.ptr();
  const float* pb = b.ptr();
  for (size_t k = 0; k < a.data.size(); ++k) pa[k] += pb[k];
}

void check_cancel(const EncodeOptions& o) {
  if (o.cancel && o.cancel->load(std::memory_order_relaxed)) throw Cancelled();
}

}  // namespace

uint64_t Dropout::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::vector<uint8_t> Dropout::keep_mask(size_t n) {
  std::vector<uint8_t> keep(n);
  const uint32_t threshold = static_cast<uint32_t>(static_cast<double>(p_) * 4294967296.0);
  for (size_t k = 0; k < n; k += 2) {
    const uint64_t r = next();
    keep[k] = static_cast<uint32_t>(r) >= threshold;
    if (k + 1 < n) keep[k + 1] = static_cast<uint32_t>(r >> 32) >= threshold;
  }
  return keep;
}

void Dropout::apply(Tensor& t, const std::vector<uint8_t>& keep) const {
  for (size_t k = 0; k < t.data.size(); ++k) t.data[k] = keep[k] ? t.data[k] * scale_ : 0.0f;
}

AttnArgs attention_args(const ModelConfig& c, const ModelWeights& w, int B, int T, int S) {
  AttnArgs a;
  a.B = B, a.T = T, a.S = S, a.H = c.num_heads, a.D = c.head_dim();
  a.rel = c.positional == Positional::Relative ? &w.rel_pos : nullptr;
  a.max_len = c.max_len;
  return a;
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
// sinusoidal: added unscaled; relative: none here, it enters every attention score).
Tensor embed_forward(const Model& model, const std::vector<int>& ids, int T) {
  const ModelConfig& c = model.config;
  const int N = static_cast<int>(ids.size()), E = c.embed_size;
  Tensor x({N, E});
  const Tensor pe = c.positional == Positional::Sinusoidal ? sinusoid_table(std::min(T, N), E) : Tensor();
  for (int n = 0; n < N; ++n) {
    const int t = n % T;
    const float* row = model.weights.embedding.ptr() + static_cast<size_t>(ids[static_cast<size_t>(n)]) * E;
    for (int e = 0; e < E; ++e) x.at(n, e) = row[e];
    if (c.positional == Positional::Learned)
      for (int e = 0; e < E; ++e) x.at(n, e) += model.weights.pos_embedding.at(t, e);
    else if (c.positional == Positional::Sinusoidal)
      for (int e = 0; e < E; ++e) x.at(n, e) += pe.at(t, e);
  }
  return x;
}

void embed_backward(const Model& model, const std::vector<int>& ids, int T, const Tensor& dx, ModelWeights& G) {
  const ModelConfig& c = model.config;
  const int E = c.embed_size;
  for (size_t n = 0; n < ids.size(); ++n) {
    const int id = ids[n], t = static_cast<int>(n) % T;
    for (int e = 0; e < E; ++e) {
      G.embedding.at(id, e) += dx.at(static_cast<int64_t>(n), e);
      if (c.positional == Positional::Learned) G.pos_embedding.at(t, e) += dx.at(static_cast<int64_t>(n), e);
    }
  }
}

// The articles' TransformerLayer, post-norm:  x = LN1(x + MHA(x));      x = LN2(x + FFN(x))
//                        pre-norm (norm_first): x = x + MHA(LN1(x));    x = x + FFN(LN2(x))
// with dropout on P and on each residual branch when training.
void layer_forward(const ModelConfig& c, const LayerWeights& L, Ops& ops, const AttnArgs& attn_in, Tensor& x,
                   LayerCache& k, const LayerRun& run) {
  const float eps = c.layer_norm_eps;
  const bool pre = c.norm == NormPlacement::Pre;
  Dropout* drop = run.dropout;
  if (run.for_backward) k.x_in = x;
  // ---- attention sub-layer
  if (pre) ops.layer_norm(x, L.ln1_g, L.ln1_b, eps, k.n1, k.n1_hat, k.n1_rstd);
  const Tensor& a_in = pre ? k.n1 : x;  // (N, E)
  ops.linear(a_in, L.wq, L.bq, k.Q);    // (N, E) = (N, H * D): head h is columns [h*D, (h+1)*D)
  ops.linear(a_in, L.wk, L.bk, k.K);
  ops.linear(a_in, L.wv, L.bv, k.V);
  AttnArgs attn = attn_in;
  if (drop) k.p_keep = drop->keep_mask(static_cast<size_t>(attn.B) * attn.H * attn.T * attn.keys());
  attn.drop_keep = drop ? &k.p_keep : nullptr;
  attn.drop_scale = drop ? drop->scale() : 1.0f;
  ops.attention(attn, k.Q, k.K, &k.V, run.for_backward ? &k.P : run.probs, &k.ctx);  // P (B, H, T, S), ctx (N, E)
  if (run.for_backward && run.probs) *run.probs = k.P;
  // Buffers are swapped rather than moved, so a cache reused by the next layer keeps every
  // buffer it had (no allocation and no page faults per layer).
  ops.linear(k.ctx, L.wo, L.bo, k.o);  // fc_out
  if (drop) {
    k.o_keep = drop->keep_mask(k.o.data.size());
    drop->apply(k.o, k.o_keep);
  }
  add_into(k.o, x);  // o = x + dropout(fc_out(ctx))
  if (pre)
    std::swap(k.x1, k.o);
  else
    ops.layer_norm(k.o, L.ln1_g, L.ln1_b, eps, k.x1, k.x1_hat, k.x1_rstd);
  if (c.ff_dim == 0) {  // the article's TextClassifier: attention only
    if (run.for_backward)
      x = k.x1;
    else
      std::swap(x, k.x1);
    return;
  }
  // ---- feed-forward sub-layer: fc2(act(fc1(.)))
  if (pre) ops.layer_norm(k.x1, L.ln2_g, L.ln2_b, eps, k.n2, k.n2_hat, k.n2_rstd);
  ops.linear(pre ? k.n2 : k.x1, L.w1, L.b1, k.h);  // (N, F)
  ops.activation(k.h, c.activation, k.a);
  ops.linear(k.a, L.w2, L.b2, k.f);  // (N, E)
  if (drop) {
    k.f_keep = drop->keep_mask(k.f.data.size());
    drop->apply(k.f, k.f_keep);
  }
  add_into(k.f, k.x1);
  if (pre)
    std::swap(x, k.f);
  else
    ops.layer_norm(k.f, L.ln2_g, L.ln2_b, eps, x, k.x2_hat, k.x2_rstd);
}

void layer_backward(const ModelConfig& c, const LayerWeights& L, LayerWeights& GL, Ops& ops, const AttnArgs& attn_in,
                    const LayerCache& k, float drop_scale, Tensor& dx, Tensor* drel) {
  const bool pre = c.norm == NormPlacement::Pre;
  const bool drop = !k.p_keep.empty();
  auto apply_keep = [&](Tensor& t, const std::vector<uint8_t>& keep) {
    for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = keep[i] ? t.data[i] * drop_scale : 0.0f;
  };
  // dx is d loss / d (layer output). First the feed-forward sub-layer.
  Tensor dx1;
  if (c.ff_dim > 0) {
    Tensor ds2;  // d / d (x1 + dropout(f))
    if (pre)
      ds2 = dx;
    else
      ops.layer_norm_backward(k.x2_hat, k.x2_rstd, L.ln2_g, dx, ds2, GL.ln2_g, GL.ln2_b);
    Tensor df = ds2;
    if (drop) apply_keep(df, k.f_keep);
    Tensor da;
    ops.linear_backward(k.a, L.w2, df, &da, GL.w2, GL.b2);
    ops.activation_backward(k.h, c.activation, da);
    Tensor dffn_in;
    ops.linear_backward(pre ? k.n2 : k.x1, L.w1, da, &dffn_in, GL.w1, GL.b1);
    if (pre) {
      Tensor dn2;
      ops.layer_norm_backward(k.n2_hat, k.n2_rstd, L.ln2_g, dffn_in, dn2, GL.ln2_g, GL.ln2_b);
      dx1 = std::move(ds2);
      add_into(dx1, dn2);
    } else {
      dx1 = std::move(ds2);
      add_into(dx1, dffn_in);
    }
  } else {
    dx1 = std::move(dx);
  }
  // Then the attention sub-layer: x1 = [LN1](x + dropout(fc_out(attn))).
  Tensor ds1;
  if (pre)
    ds1 = dx1;
  else
    ops.layer_norm_backward(k.x1_hat, k.x1_rstd, L.ln1_g, dx1, ds1, GL.ln1_g, GL.ln1_b);
  Tensor dout = ds1;
  if (drop) apply_keep(dout, k.o_keep);
  Tensor dctx, dQ, dK, dV;
  ops.linear_backward(k.ctx, L.wo, dout, &dctx, GL.wo, GL.bo);
  AttnArgs attn = attn_in;
  attn.drop_keep = drop ? &k.p_keep : nullptr;
  attn.drop_scale = drop_scale;
  ops.attention_backward(attn, k.Q, k.K, k.V, k.P, dctx, dQ, dK, dV, attn.rel ? drel : nullptr);
  const Tensor& a_in = pre ? k.n1 : k.x_in;
  Tensor da_in, tmp;
  ops.linear_backward(a_in, L.wq, dQ, &da_in, GL.wq, GL.bq);
  ops.linear_backward(a_in, L.wk, dK, &tmp, GL.wk, GL.bk);
  add_into(da_in, tmp);
  ops.linear_backward(a_in, L.wv, dV, &tmp, GL.wv, GL.bv);
  add_into(da_in, tmp);
  dx = std::move(ds1);  // residual path
  if (pre) {
    Tensor dn1;
    ops.layer_norm_backward(k.n1_hat, k.n1_rstd, L.ln1_g, da_in, dn1, GL.ln1_g, GL.ln1_b);
    add_into(dx, dn1);
  } else {
    add_into(dx, da_in);
  }
}

EncodeOutput encode(const Model& model, Ops& ops, const std::vector<int>& ids, const AttnMask& mask,
                    const EncodeOptions& options) {
  const ModelConfig& c = model.config;
  const int T = static_cast<int>(ids.size());
  EncodeOutput out;
  out.attention.resize(static_cast<size_t>(c.num_layers));
  Tensor x = embed_forward(model, ids, T);  // (T, E)
  AttnArgs attn = attention_args(c, model.weights, 1, T, T);
  attn.mask = &mask;
  LayerCache cache;  // reused by every layer: inference keeps nothing of a layer once it is done
  for (int l = 0; l < c.num_layers; ++l) {
    check_cancel(options);
    if (options.keep_layer_inputs) out.layer_inputs.push_back(x);
    LayerRun run;
    // Layers the caller does not keep never hold a [H, T, T] buffer.
    if (options.keep_attention.empty() || options.keep_attention[static_cast<size_t>(l)])
      run.probs = &out.attention[static_cast<size_t>(l)];
    layer_forward(c, model.weights.layers[static_cast<size_t>(l)], ops, attn, x, cache, run);
    if (run.probs) run.probs->shape.erase(run.probs->shape.begin());  // (1, H, T, T) -> (H, T, T)
  }
  out.hidden = std::move(x);
  return out;
}

Tensor cross_attention_probs(const Model& model, Ops& ops, int layer, const Tensor& xa, const Tensor& xb,
                             const AttnMask& mask) {
  const ModelConfig& c = model.config;
  const LayerWeights& L = model.weights.layers.at(static_cast<size_t>(layer));
  const int T = static_cast<int>(xa.dim(0)), S = static_cast<int>(xb.dim(0));
  Tensor Q, K, probs;
  if (c.norm == NormPlacement::Pre) {  // the layer's attention reads LN1 of its input
    Tensor na, nb, hat, rstd;
    ops.layer_norm(xa, L.ln1_g, L.ln1_b, c.layer_norm_eps, na, hat, rstd);
    ops.layer_norm(xb, L.ln1_g, L.ln1_b, c.layer_norm_eps, nb, hat, rstd);
    ops.linear(na, L.wq, L.bq, Q);
    ops.linear(nb, L.wk, L.bk, K);
  } else {
    ops.linear(xa, L.wq, L.bq, Q);
    ops.linear(xb, L.wk, L.bk, K);
  }
  AttnArgs attn = attention_args(c, model.weights, 1, T, S);
  attn.mask = &mask;
  ops.attention(attn, Q, K, nullptr, &probs, nullptr);
  probs.shape.erase(probs.shape.begin());  // (1, H, T, S) -> (H, T, S)
  return probs;
}

}  // namespace attnlab
