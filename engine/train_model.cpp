// Batch forward with caches, backward, loss. Each sub-layer is a forward/backward pair below.
#include "engine/train_model.h"

#include <cmath>

#include "engine/backend.h"  // embed_tokens

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

namespace {

// Cheap, seedable generator for dropout masks (splitmix64): millions of draws per step.
struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
};

std::vector<uint8_t> keep_mask(size_t n, float p, SplitMix& rng) {
  std::vector<uint8_t> keep(n);
  const uint32_t threshold = static_cast<uint32_t>(static_cast<double>(p) * 4294967296.0);
  for (size_t k = 0; k < n; k += 2) {
    const uint64_t r = rng.next();
    keep[k] = static_cast<uint32_t>(r) >= threshold;
    if (k + 1 < n) keep[k + 1] = static_cast<uint32_t>(r >> 32) >= threshold;
  }
  return keep;
}

void apply_keep(Tensor& t, const std::vector<uint8_t>& keep, float scale) {
  for (size_t k = 0; k < t.data.size(); ++k) t.data[k] = keep[k] ? t.data[k] * scale : 0.0f;
}

void add_into(Tensor& a, const Tensor& b) {
  for (size_t k = 0; k < a.data.size(); ++k) a.data[k] += b.data[k];
}

float act_forward(float v, Activation a) {
  if (a == Activation::Relu) return v > 0 ? v : 0.0f;
  return 0.5f * v * (1.0f + std::erf(v * static_cast<float>(M_SQRT1_2)));
}
// d act / d v
float act_grad(float v, Activation a) {
  if (a == Activation::Relu) return v > 0 ? 1.0f : 0.0f;
  const float cdf = 0.5f * (1.0f + std::erf(v * static_cast<float>(M_SQRT1_2)));
  const float pdf = std::exp(-0.5f * v * v) * 0.3989422804014327f;
  return cdf + v * pdf;
}

struct LayerCache {
  Tensor x_in;                  // layer input (N, E)
  Tensor n1, n1_hat, n1_rstd;   // pre-norm: LN1(x_in)
  Tensor Q, K, V, P, ctx;       // attention
  std::vector<uint8_t> p_keep;  // attention dropout
  std::vector<uint8_t> o_keep;  // residual dropout after fc_out
  Tensor x1, x1_hat, x1_rstd;   // post: LN1(x + o); pre: x + o (x1_hat unused)
  Tensor n2, n2_hat, n2_rstd;   // pre-norm: LN2(x1)
  Tensor h, a;                  // feed-forward pre-activation and activation (N, F)
  std::vector<uint8_t> f_keep;  // residual dropout after fc2
  Tensor x2_hat, x2_rstd;       // post: LN2 of (x1 + f)
};

}  // namespace

StepOutput train_step(const Model& model, TrainOps& ops, const TrainBatch& batch, const StepOptions& opt,
                      ModelWeights* grads) {
  const ModelConfig& c = model.config;
  const ModelWeights& W = model.weights;
  if (c.num_classes <= 0) throw Error("training needs a classifier (num_classes > 0)");
  const int B = batch.B, T = batch.T, E = c.embed_size, N = B * T;
  const float eps = c.layer_norm_eps;
  const bool drop = opt.dropout > 0.0f;
  const float drop_scale = drop ? 1.0f / (1.0f - opt.dropout) : 1.0f;
  SplitMix rng{opt.dropout_seed};

  // ---- embedding + positions: x (N, E)
  Tensor x({N, E});
  for (int b = 0; b < B; ++b) {
    const std::vector<int> ids(batch.ids.begin() + b * T, batch.ids.begin() + (b + 1) * T);
    const Tensor e = embed_tokens(model, ids);
    std::copy(e.data.begin(), e.data.end(), x.data.begin() + static_cast<std::ptrdiff_t>(b) * T * E);
  }

  AttnShape shape;
  shape.B = B, shape.T = T, shape.H = c.num_heads, shape.D = c.head_dim();
  shape.key_blocked = &batch.is_pad;
  shape.causal = opt.causal;
  shape.rel = c.positional == Positional::Relative ? &W.rel_pos : nullptr;
  shape.max_len = c.max_len;
  shape.drop_scale = drop_scale;

  // ---- layers
  std::vector<LayerCache> caches(static_cast<size_t>(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = W.layers[static_cast<size_t>(l)];
    LayerCache& k = caches[static_cast<size_t>(l)];
    k.x_in = x;
    const bool pre = c.norm == NormPlacement::Pre;
    if (pre) ops.layer_norm(x, L.ln1_g, L.ln1_b, eps, k.n1, k.n1_hat, k.n1_rstd);
    const Tensor& a_in = pre ? k.n1 : x;
    ops.linear(a_in, L.wq, L.bq, k.Q);
    ops.linear(a_in, L.wk, L.bk, k.K);
    ops.linear(a_in, L.wv, L.bv, k.V);
    if (drop) k.p_keep = keep_mask(static_cast<size_t>(B) * c.num_heads * T * T, opt.dropout, rng);
    shape.drop_keep = drop ? &k.p_keep : nullptr;
    ops.attention(shape, k.Q, k.K, k.V, k.P, k.ctx);
    Tensor o;
    ops.linear(k.ctx, L.wo, L.bo, o);
    if (drop) {
      k.o_keep = keep_mask(o.data.size(), opt.dropout, rng);
      apply_keep(o, k.o_keep, drop_scale);
    }
    add_into(o, x);  // o = x + dropout(fc_out(ctx))
    if (pre) {
      k.x1 = std::move(o);
    } else {
      ops.layer_norm(o, L.ln1_g, L.ln1_b, eps, k.x1, k.x1_hat, k.x1_rstd);
    }
    x = k.x1;
    if (c.ff_dim > 0) {
      if (pre) ops.layer_norm(k.x1, L.ln2_g, L.ln2_b, eps, k.n2, k.n2_hat, k.n2_rstd);
      ops.linear(pre ? k.n2 : k.x1, L.w1, L.b1, k.h);
      k.a = k.h;
      for (float& v : k.a.data) v = act_forward(v, c.activation);
      Tensor f;
      ops.linear(k.a, L.w2, L.b2, f);
      if (drop) {
        k.f_keep = keep_mask(f.data.size(), opt.dropout, rng);
        apply_keep(f, k.f_keep, drop_scale);
      }
      add_into(f, k.x1);
      if (pre) {
        x = std::move(f);
      } else {
        ops.layer_norm(f, L.ln2_g, L.ln2_b, eps, x, k.x2_hat, k.x2_rstd);
      }
    }
  }

  // ---- pooling (B, E), classifier, softmax cross-entropy
  const int C = c.num_classes;
  Tensor pooled({B, E});
  std::vector<float> pool_w;  // d pooled_b / d x_(b,t), [B * T]
  for (int b = 0; b < B; ++b) {
    const std::vector<float> w = pooling_weights(c.pooling, batch.is_pad.data() + static_cast<size_t>(b) * T, T);
    pool_w.insert(pool_w.end(), w.begin(), w.end());
    for (int t = 0; t < T; ++t)
      if (w[static_cast<size_t>(t)] != 0.0f)
        for (int e = 0; e < E; ++e) pooled.at(b, e) += w[static_cast<size_t>(t)] * x.at(b * T + t, e);
  }
  Tensor logits;
  ops.linear(pooled, W.fc_w, W.fc_b, logits);
  StepOutput out;
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
  if (!grads) return out;

  // ---- backward
  ModelWeights& G = *grads;
  Tensor dpooled;
  ops.linear_backward(pooled, W.fc_w, dlogits, &dpooled, G.fc_w, G.fc_b);
  Tensor dx({N, E});
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const float w = pool_w[static_cast<size_t>(b * T + t)];
      if (w != 0.0f)
        for (int e = 0; e < E; ++e) dx.at(b * T + t, e) = w * dpooled.at(b, e);
    }
  for (int l = c.num_layers - 1; l >= 0; --l) {
    const LayerWeights& L = W.layers[static_cast<size_t>(l)];
    LayerWeights& GL = G.layers[static_cast<size_t>(l)];
    LayerCache& k = caches[static_cast<size_t>(l)];
    const bool pre = c.norm == NormPlacement::Pre;
    shape.drop_keep = drop ? &k.p_keep : nullptr;
    // dx is d loss / d (layer output). First the feed-forward sub-layer.
    Tensor dx1;
    if (c.ff_dim > 0) {
      Tensor ds2;  // d / d (x1 + dropout(f))
      if (pre)
        ds2 = dx;
      else
        ops.layer_norm_backward(k.x2_hat, k.x2_rstd, L.ln2_g, dx, ds2, GL.ln2_g, GL.ln2_b);
      Tensor df = ds2;
      if (drop) apply_keep(df, k.f_keep, drop_scale);
      Tensor da;
      ops.linear_backward(k.a, L.w2, df, &da, GL.w2, GL.b2);
      for (size_t i = 0; i < da.data.size(); ++i) da.data[i] *= act_grad(k.h.data[i], c.activation);
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
    if (drop) apply_keep(dout, k.o_keep, drop_scale);
    Tensor dctx, dQ, dK, dV;
    ops.linear_backward(k.ctx, L.wo, dout, &dctx, GL.wo, GL.bo);
    ops.attention_backward(shape, k.Q, k.K, k.V, k.P, dctx, dQ, dK, dV, shape.rel ? &G.rel_pos : nullptr);
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
  // ---- embedding and learned positions (sinusoidal has no weights)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const int id = batch.ids[static_cast<size_t>(b * T + t)];
      for (int e = 0; e < E; ++e) {
        G.embedding.at(id, e) += dx.at(b * T + t, e);
        if (c.positional == Positional::Learned) G.pos_embedding.at(t, e) += dx.at(b * T + t, e);
      }
    }
  return out;
}

}  // namespace attnlab
