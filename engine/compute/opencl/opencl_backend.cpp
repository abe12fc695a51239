// The opencl backend: the whole forward pass on the device. CLBlast runs the matrix products
// (plain GEMMs for projections and feed-forward, strided-batched GEMMs for the per-head score
// and context products); our kernels (engine/compute/opencl/kernels/*.cl) do the rest, following the one
// layer plan (engine/compute/plan.h). Activations stay on the device from the embedding to the final
// norm; the host receives the final hidden states and the probabilities of the layers it asked
// for (the classifier head, a few thousand multiply-adds, runs on the host). Weights are uploaded once per
// model and workspaces are reused between passes. Any OpenCL failure moves the backend to cpu,
// with notice() saying why.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <cstring>

#include "engine/compute/backend.h"
#include "engine/compute/hooks.h"
#include "engine/compute/mask.h"
#include "engine/compute/plan.h"
#include "engine/compute/rope.h"
#include "engine/compute/opencl/cl_runtime.h"

namespace attnlab {

namespace {

using cl::Buffer;
using cl::Runtime;

// Device copies of the weights: one buffer per weight-table entry, found by the same member
// the host code uses (w.at(l, &LayerWeights::wq) where the cpu code reads L(&LayerWeights::wq)).
struct DeviceWeights {
  std::vector<WeightEntry> entries;
  std::vector<Buffer> buffers;  // parallel to entries

  const Buffer& at(int layer, Tensor LayerWeights::*member) const { return find(layer, nullptr, member); }
  const Buffer& at(Tensor ModelWeights::*member) const { return find(-1, member, nullptr); }

 private:
  const Buffer& find(int layer, Tensor ModelWeights::*model_member, Tensor LayerWeights::*layer_member) const {
    for (size_t i = 0; i < entries.size(); ++i)
      if (entries[i].layer == layer && entries[i].spec->model_member == model_member &&
          entries[i].spec->layer_member == layer_member)
        return buffers[i];
    throw Error("internal: a weight the model does not have was asked of the device");
  }
};

// A value of the layer plan on the device: a (rows, cols) float matrix.
struct DeviceValue {
  Buffer buf;
  int rows = 0, cols = 0;
};

// A mask on the device: the pass's, or its sliding layers' (Gemma 2's alternating layers).
struct DeviceMask {
  Buffer blocked, additive;
  const AttnMask* host = nullptr;  // what was uploaded (this pass)
  bool has_blocked = false, has_additive = false;
  int planes = 1;
};

struct Workspace {
  std::vector<DeviceValue> v;  // the plan's values, reused from pass to pass
  Buffer ids, pos, p, g;
  DeviceMask masks[2];    // [0] the pass's mask, [1] its sliding layers' when it has one
  Buffer cos[2], sin[2];  // rotary tables [T, D / 2]: [0] rope_theta's, [1] Gemma 3's local base
};

class OpenClBackend final : public Backend {
 public:
  explicit OpenClBackend(const std::string& spec) {
    try {
      rt_ = Runtime::get(cl::resolve_device(spec));
    } catch (const std::exception& e) {
      fall_back(e.what());
    }
  }

  std::string name() const override { return fallback_ ? "cpu" : "opencl"; }
  std::string device() const override {
    return fallback_ ? "CPU" : rt_->device().name + " (" + rt_->device().platform + ")";
  }
  std::string notice() const override { return notice_.empty() ? model_notice_ : notice_; }
  void set_profiling(bool on) override {
    if (fallback_) return;
    std::lock_guard<std::mutex> lock(rt_->mutex());
    rt_->set_profiling(on);
  }
  std::pair<double, double> take_device_profile() override {
    if (fallback_) return {0, 0};
    std::lock_guard<std::mutex> lock(rt_->mutex());
    const auto p = rt_->take_profile();
    return {p.transfer_ms, p.kernel_ms};
  }

  EncodeOutput encode(const Model& m, const std::vector<int>& ids, const AttnMask& mask,
                      const EncodeOptions& o) override {
    // a pass the host runs keeps the host's queries and keys: the cpu backend recomputes them
    const auto on_host = [&](const std::string& what) {
      EncodeOutput out = host(what)->encode(m, ids, mask, o);
      out.recomputed_by = host_->name();
      return out;
    };
    if (!fallback_ && !device_runs(m.config)) return on_host("this model's layers");
    if (!fallback_ && !o.ablate.empty()) return on_host("head ablation");
    if (!fallback_ && o.hooks && !o.hooks->empty()) return on_host("named activations (hooks)");
    if (!fallback_ && o.start) return on_host("a resumed pass");
    if (!fallback_ && o.kv) return on_host("a KV-cached pass");
    model_notice_.clear();
    if (!fallback_) {
      try {
        return encode_cl(m, ids, mask, o);
      } catch (const std::exception& e) {
        fall_back(e.what());
      }
    }
    return fallback_->encode(m, ids, mask, o);
  }

  // Attention on demand: the probabilities from the queries and keys a device pass downloaded, by
  // the same GEMMs and softmax kernel on the same shapes, so the values the pass computed.
  bool recomputes_attention() const override { return true; }
  Tensor self_attention(const Model& m, int layer, const Tensor& q, const Tensor& k, const AttnMask& mask) override {
    if (fallback_) return fallback_->self_attention(m, layer, q, k, mask);
    if (!device_runs(m.config)) {
      if (!host_) host_ = make_cpu_backend();
      return host_->self_attention(m, layer, q, k, mask);
    }
    try {
      return self_attention_cl(m, q, k, mask);
    } catch (const std::exception& e) {
      fall_back(e.what());
    }
    return fallback_->self_attention(m, layer, q, k, mask);
  }

  Tensor cross_attention(const Model& m, int layer, const Tensor& xa, const Tensor& xb, const AttnMask& mask) override {
    // rotary tables and head norms are made per pass length: cross mode's two lengths stay on the host
    if (!fallback_ && (!device_runs(m.config) || m.config.positional == Positional::Rotary || m.config.qk_norm))
      return host("this model's cross mode")->cross_attention(m, layer, xa, xb, mask);
    if (!fallback_) {
      try {
        return cross_cl(m, layer, xa, xb, mask);
      } catch (const std::exception& e) {
        fall_back(e.what());
      }
    }
    return fallback_->cross_attention(m, layer, xa, xb, mask);
  }

 private:
  // What the device kernels cover: every step kind of the layer plan (run_steps), every
  // activation, grouped-query heads, soft caps, windowed and full layers, rotary tables per layer
  // kind. What is left: relative positions with heads of another width than hidden / heads, and
  // Gemma's embedding scale together with added positions (no such model exists). Models that need
  // more run on the cpu backend, per model, said in notice().
  static bool device_runs(const ModelConfig& c) {
    if (c.cross_attention || c.pos_offset > 0) return false;  // encoder-decoders run on the host for now
    if (c.positional == Positional::Relative && (c.attn_width() != c.embed_size || c.kv_heads() != c.num_heads))
      return false;
    if (c.embed_scale > 0 &&
        (c.positional == Positional::Learned || c.positional == Positional::Sinusoidal || c.type_vocab_size > 0))
      return false;
    return c.positional != Positional::Rotary || c.head_dim() % 2 == 0;
  }
  Backend* host(const std::string& what) {
    if (!host_) host_ = make_cpu_backend();
    model_notice_ = "the OpenCL kernels do not cover " + what + " yet; this pass ran on the cpu backend";
    return host_.get();
  }

  void fall_back(const std::string& why) {
    notice_ = why + "; using the cpu backend";
    fallback_ = make_cpu_backend();
  }

  void up(Buffer& b, const Tensor& t) { rt_->upload(b, t.ptr(), t.data.size() * sizeof(float)); }

  // The model's weights on the device, uploaded once per weights version.
  DeviceWeights& weights(const Model& m) {
    const std::string key = "weights";
    auto& cache = rt_->cache();
    auto it = cache.find(key);
    const uint64_t version = m.weights.version;
    if (it != cache.end() && version != 0 && static_cast<Entry*>(it->second.get())->version == version)
      return static_cast<Entry*>(it->second.get())->w;
    auto e = std::make_shared<Entry>();
    e->version = version;
    e->w.entries = weight_entries(m.config);
    e->w.buffers.resize(e->w.entries.size());
    Tensor wide16;  // a matrix kept in 16 bits goes up as float32
    for (size_t i = 0; i < e->w.entries.size(); ++i) {
      const WeightEntry& we = e->w.entries[i];
      // the LM head runs on the host (run_forward, from the hidden states): it stays there
      if (we.spec->model_member == &ModelWeights::lm_head) continue;
      const Tensor& t = we.layer >= 0
                            ? wide(m.weights.layers[static_cast<size_t>(we.layer)], we.spec->layer_member, wide16)
                            : wide(m.weights, we.spec->model_member, wide16);
      up(e->w.buffers[i], t);
      if (&t == &wide16) rt_->finish();  // wide16 is reused by the next upload (uploads are asynchronous)
    }
    rt_->finish();
    cache[key] = e;  // one model at a time: a new model replaces the old one's buffers
    return e->w;
  }

  Workspace& workspace() {
    auto& slot = rt_->cache()["workspace"];
    if (!slot) slot = std::make_shared<Workspace>();
    return *static_cast<Workspace*>(slot.get());
  }

  // y (rows, out) = x (rows, in) W^T [+ b]
  void linear(const Buffer& x, int rows, int in, const Buffer& W, const Buffer* b, int out, Buffer& y) {
    rt_->reserve(y, static_cast<size_t>(rows) * out * 4);
    rt_->gemm(true, rows, out, in, x, 0, in, W, 0, in, y, 0, out);
    if (b) rt_->add_bias(y, *b, rows, out);
  }

  // Per head h: C_h (T, cols) = A_h B_g(h)^T (scores: A = Q, B = K) or A_h B_g(h) (context: A = P,
  // B = V), g(h) = h / (H / KV) the key / value head query head h reads (transformers' repeat_kv,
  // here a stride of 0 over a group of query heads). a_head / c_head: the element offsets from one
  // head's A / C to the next; B's heads are D columns apart in rows of KV * D.
  void per_head_gemm(const ModelConfig& c, bool scores, int T, int S, const Buffer& A, size_t lda, size_t a_head,
                     const Buffer& B, Buffer& C, size_t ldc, size_t c_head) {
    const int H = c.num_heads, KV = c.kv_heads(), D = c.head_dim(), group = H / KV;
    const size_t ldb = static_cast<size_t>(KV) * D;
    const size_t m = T, n = scores ? S : D, k = scores ? D : S;
    if (KV == H) {
      rt_->gemm(scores, m, n, k, A, 0, lda, B, 0, ldb, C, 0, ldc, H, a_head, D, c_head);
      return;
    }
    for (int g = 0; g < KV; ++g)
      rt_->gemm(scores, m, n, k, A, a_head * g * group, lda, B, static_cast<size_t>(g) * D, ldb, C, c_head * g * group,
                ldc, group, a_head, 0, c_head);
  }

  // P (H, T, S) = Q K^T [+ relative] per head (unscaled: the softmax kernel scales); Q (T, H * D),
  // K (S, KV * D).
  void scores(const Model& m, const Buffer& Q, const Buffer& K, int T, int S, Workspace& ws, const DeviceWeights* w) {
    const ModelConfig& c = m.config;
    const int H = c.num_heads, D = c.head_dim(), E = c.embed_size;
    rt_->reserve(ws.p, static_cast<size_t>(H) * T * S * 4);
    per_head_gemm(c, true, T, S, Q, c.attn_width(), D, K, ws.p, S, static_cast<size_t>(T) * S);
    if (c.positional == Positional::Relative) {  // device_runs: heads of hidden / H, no grouped heads
      const int lo = relative_index(0, S - 1, c.max_len), hi = relative_index(T - 1, 0, c.max_len), nrel = hi - lo + 1;
      rt_->reserve(ws.g, static_cast<size_t>(H) * T * nrel * 4);
      rt_->gemm(true, T, nrel, D, Q, 0, E, w->at(&ModelWeights::rel_pos), static_cast<size_t>(lo) * E, E, ws.g, 0, nrel,
                H, D, D, static_cast<size_t>(T) * nrel);
      rt_->add_relative(ws.p, ws.g, H, T, S, nrel, lo, c.max_len);
    }
  }

  // The pass's mask and, when it has one, its sliding layers' (AttnMask::sliding), on the device.
  void upload_masks(const AttnMask& mask, const AttnMask* sliding, Workspace& ws) {
    const AttnMask* host[2] = {&mask, sliding};
    for (int i = 0; i < 2; ++i) {
      DeviceMask& d = ws.masks[i];
      d.host = host[i];
      if (!d.host) continue;
      d.has_blocked = !d.host->blocked.empty(), d.has_additive = !d.host->additive.empty();
      d.planes = d.host->planes;
      if (d.has_blocked) rt_->upload(d.blocked, d.host->blocked.data(), d.host->blocked.size());
      if (d.has_additive) rt_->upload(d.additive, d.host->additive.data(), d.host->additive.size() * 4);
    }
  }

  // The scale, soft cap and mask of the softmax, as the host's attention op applies them
  // (AttnArgs::score_scale, softcap), with the mask the layer uses (layer_mask).
  void softmax(const ModelConfig& c, int T, int S, const DeviceMask& mask, Workspace& ws) {
    const float scale = c.attn_scale > 0 ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim()));
    rt_->masked_softmax(ws.p, c.num_heads, T, S, scale, mask.has_blocked ? &mask.blocked : nullptr,
                        mask.has_additive ? &mask.additive : nullptr, mask.planes, c.attn_softcap);
  }
  const DeviceMask& mask_for(const ModelConfig& c, int layer, const Workspace& ws) {
    const AttnMask& want = layer_mask(*ws.masks[0].host, c, layer);
    return &want == ws.masks[1].host ? ws.masks[1] : ws.masks[0];
  }

  // The rotary tables of a pass of T positions: rope_theta's (with its scaling) and, for Gemma 3's
  // sliding layers, the local base's, as the host computes them (rope_tables).
  void upload_rope(const ModelConfig& c, int T, Workspace& ws, Tensor (&keep)[4]) {
    if (c.positional != Positional::Rotary) return;
    rope_tables(T, c.head_dim(), c, keep[0], keep[1]);
    up(ws.cos[0], keep[0]), up(ws.sin[0], keep[1]);
    if (c.local_rope_theta > 0) {
      ModelConfig lc = c;
      lc.rope_theta = c.local_rope_theta, lc.rope_scaling = RopeScaling{};
      rope_tables(T, c.head_dim(), lc, keep[2], keep[3]);
      up(ws.cos[1], keep[2]), up(ws.sin[1], keep[3]);
    }
  }

  // The device executor of the layer plan (engine/compute/plan.h): the same steps as the host forward,
  // on device buffers. Steps that are the last reader of their input take its buffer over, so
  // residuals and post-norm LayerNorms run in place as before.
  void run_steps(const Model& m, int layer, const LayerPlan& plan, const std::vector<int>& which, Workspace& ws,
                 const DeviceWeights& w, const DeviceMask* mask, Tensor* probs, Tensor* queries = nullptr,
                 Tensor* keys = nullptr) {
    const ModelConfig& c = m.config;
    const auto W = [&](Tensor LayerWeights::*member) -> const Buffer& { return w.at(layer, member); };
    for (const int i : which) {
      const Step& s = plan.steps[static_cast<size_t>(i)];
      DeviceValue& out = ws.v[static_cast<size_t>(s.out)];
      DeviceValue& in0 = ws.v[static_cast<size_t>(s.in[0])];
      const bool last_use = plan.last_use[static_cast<size_t>(s.in[0])] == i;
      // out = in0, by taking its buffer at its last use, else by a device copy
      auto take_or_copy = [&] {
        if (last_use) {
          std::swap(out.buf, in0.buf);
        } else {
          rt_->reserve(out.buf, static_cast<size_t>(in0.rows) * in0.cols * 4);
          rt_->copy(out.buf, in0.buf, in0.rows * in0.cols);
        }
        out.rows = in0.rows, out.cols = in0.cols;
      };
      switch (s.op) {
        case OpKind::Linear: {
          const LayerWeights& lw = m.weights.layers[static_cast<size_t>(layer)];
          const HalfTensor* h16 = half_of(lw, s.w);
          const int n_out = static_cast<int>(h16 ? h16->shape[0] : (lw.*s.w).dim(0));
          const bool bias = s.b && !(lw.*s.b).empty();
          linear(in0.buf, in0.rows, in0.cols, W(s.w), bias ? &W(s.b) : nullptr, n_out, out.buf);
          out.rows = in0.rows, out.cols = n_out;
          break;
        }
        case OpKind::LayerNorm:
          take_or_copy();
          rt_->layer_norm(out.buf, W(s.w), W(s.b), out.rows, out.cols, c.layer_norm_eps);
          break;
        case OpKind::Activation:
          take_or_copy();
          rt_->activation(out.buf, out.rows * out.cols, c.activation);
          break;
        case OpKind::Attention: {
          const DeviceValue &q = in0, &k = ws.v[static_cast<size_t>(s.in[1])];
          const int T = q.rows, S = k.rows, H = c.num_heads, D = c.head_dim(), AW = c.attn_width();
          if (queries) {  // attention on demand: what P is recomputed from
            *queries = Tensor({T, q.cols}), *keys = Tensor({S, k.cols});
            rt_->download(q.buf, queries->ptr(), queries->data.size() * 4);
            rt_->download(k.buf, keys->ptr(), keys->data.size() * 4);
          }
          scores(m, q.buf, k.buf, T, S, ws, &w);  // P (H, T, S)
          softmax(c, T, S, *mask, ws);
          if (probs) {
            *probs = Tensor({H, T, S});
            rt_->download(ws.p, probs->ptr(), probs->data.size() * 4);
          }
          // ctx_h = P_h V_g(h), written into head h's columns
          rt_->reserve(out.buf, static_cast<size_t>(T) * AW * 4);
          per_head_gemm(c, false, T, S, ws.p, S, static_cast<size_t>(T) * S, ws.v[static_cast<size_t>(s.in[2])].buf,
                        out.buf, AW, D);
          out.rows = T, out.cols = AW;
          break;
        }
        case OpKind::Add:
          take_or_copy();
          rt_->add_inplace(out.buf, ws.v[static_cast<size_t>(s.in[1])].buf, out.rows * out.cols);
          break;
        case OpKind::Dropout:  // inference: identity
          take_or_copy();
          break;
        case OpKind::RmsNorm:
          take_or_copy();
          rt_->rms_norm(out.buf, W(s.w), out.rows, out.cols, c.layer_norm_eps);
          break;
        case OpKind::HeadRmsNorm:  // the rows of D values, one per (position, head), normalised alone
          take_or_copy();
          rt_->rms_norm(out.buf, W(s.w), out.rows * (out.cols / c.head_dim()), c.head_dim(), c.layer_norm_eps);
          break;
        case OpKind::Rope: {  // Gemma 3: the sliding layers' own base
          take_or_copy();
          const int kind = c.layer_local_rope(layer) ? 1 : 0;
          rt_->rope(out.buf, ws.cos[kind], ws.sin[kind], out.rows, out.cols, c.head_dim());
          break;
        }
        case OpKind::Mul:
          take_or_copy();
          rt_->mul_inplace(out.buf, ws.v[static_cast<size_t>(s.in[1])].buf, out.rows * out.cols);
          break;
        case OpKind::CrossAttention:  // device_runs keeps encoder-decoders on the host
          throw Error("internal: the OpenCL executor met a cross-attention step");
      }
    }
  }

  EncodeOutput encode_cl(const Model& m, const std::vector<int>& ids, const AttnMask& mask, const EncodeOptions& opt) {
    std::lock_guard<std::mutex> lock(rt_->mutex());
    const ModelConfig& c = m.config;
    const int T = static_cast<int>(ids.size()), E = c.embed_size;
    const size_t TE = static_cast<size_t>(T) * E;
    DeviceWeights& w = weights(m);
    Workspace& ws = workspace();
    EncodeOutput out;
    out.attention.resize(static_cast<size_t>(c.num_layers));
    const LayerPlan plan = make_layer_plan(c);
    ws.v.resize(static_cast<size_t>(plan.values));
    std::vector<int> all(plan.steps.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);

    rt_->upload(ws.ids, ids.data(), ids.size() * sizeof(int));
    // The term added to each token's embedding: learned positions from the device copy, or,
    // with sinusoidal positions (computed in double on the host: float sin() of angles up to
    // max_len loses ~1e-4) or token types, a [T, E] table made on the host.
    const Buffer* pos = nullptr;
    Tensor add;  // lives until the pass ends: uploads are asynchronous
    if (c.positional == Positional::Learned && c.type_vocab_size == 0) {
      pos = &w.at(&ModelWeights::pos_embedding);
    } else if (c.positional == Positional::Sinusoidal || c.positional == Positional::Learned || c.type_vocab_size > 0) {
      add = c.positional == Positional::Sinusoidal ? sinusoid_table(T, E) : Tensor({T, E});
      for (int t = 0; t < T; ++t) {
        const int type = opt.token_types.empty() ? 0 : opt.token_types[static_cast<size_t>(t)];
        for (int e = 0; e < E; ++e) {
          if (c.positional == Positional::Learned) add.at(t, e) += m.weights.pos_embedding.at(t, e);
          if (c.type_vocab_size > 0) add.at(t, e) += m.weights.type_embedding.at(type, e);
        }
      }
      up(ws.pos, add);
      pos = &ws.pos;
    }
    DeviceValue& x = ws.v[0];
    rt_->reserve(x.buf, TE * 4);
    rt_->embed(ws.ids, w.at(&ModelWeights::embedding), pos, T, E, x.buf);
    x.rows = T, x.cols = E;
    if (c.embed_scale > 0) rt_->scale_inplace(x.buf, c.embed_scale, T * E);  // Gemma (device_runs: no positions added)
    if (c.embedding_norm)
      rt_->layer_norm(x.buf, w.at(&ModelWeights::emb_ln_g), w.at(&ModelWeights::emb_ln_b), T, E, c.layer_norm_eps);
    upload_masks(mask, mask.sliding.get(), ws);
    Tensor tables[4];  // live until the pass ends: uploads are asynchronous
    upload_rope(c, T, ws, tables);
    if (opt.attention_on_demand)
      out.queries.resize(static_cast<size_t>(c.num_layers)), out.keys.resize(out.queries.size());

    for (int l = 0; l < c.num_layers; ++l) {
      if (opt.cancel && opt.cancel->load()) throw Cancelled();
      if (opt.on_layer) opt.on_layer(l);
      if (opt.keep_layer_inputs) {
        Tensor in({T, E});
        rt_->download(ws.v[0].buf, in.ptr(), TE * 4);
        out.layer_inputs.push_back(std::move(in));
      }
      const bool keep = opt.keep_attention.empty() || opt.keep_attention[static_cast<size_t>(l)];
      const size_t li = static_cast<size_t>(l);
      run_steps(m, l, plan, all, ws, w, &mask_for(c, l, ws), keep ? &out.attention[li] : nullptr,
                opt.attention_on_demand ? &out.queries[li] : nullptr,
                opt.attention_on_demand ? &out.keys[li] : nullptr);
      std::swap(ws.v[0], ws.v[static_cast<size_t>(plan.output)]);  // the output is the next layer's input
    }
    if (c.final_norm && c.norm_kind == NormKind::RmsNorm)
      rt_->rms_norm(ws.v[0].buf, w.at(&ModelWeights::final_ln_g), T, E, c.layer_norm_eps);
    else if (c.final_norm)
      rt_->layer_norm(ws.v[0].buf, w.at(&ModelWeights::final_ln_g), w.at(&ModelWeights::final_ln_b), T, E,
                      c.layer_norm_eps);
    out.hidden = Tensor({T, E});  // the head (pooling, pooler, classifier) runs on the host: run_forward
    rt_->download(ws.v[0].buf, out.hidden.ptr(), TE * 4);
    rt_->finish();
    return out;
  }

  // The steps leading to the attention's q (from xa) and k (from xb), then the scores.
  Tensor cross_cl(const Model& m, int layer, const Tensor& xa, const Tensor& xb, const AttnMask& mask) {
    std::lock_guard<std::mutex> lock(rt_->mutex());
    const ModelConfig& c = m.config;
    DeviceWeights& w = weights(m);
    Workspace& ws = workspace();
    const LayerPlan plan = make_layer_plan(c);
    const Step& att = plan.steps[static_cast<size_t>(plan.attention_step)];
    ws.v.resize(static_cast<size_t>(plan.values));
    std::vector<DeviceValue> qk(2);
    for (int side = 0; side < 2; ++side) {
      const Tensor& x = side == 0 ? xa : xb;
      up(ws.v[0].buf, x);
      ws.v[0].rows = static_cast<int>(x.dim(0)), ws.v[0].cols = c.embed_size;
      const int target = att.in[side];
      run_steps(m, layer, plan, steps_for(plan, target), ws, w, nullptr, nullptr);
      std::swap(qk[static_cast<size_t>(side)], ws.v[static_cast<size_t>(target)]);
    }
    upload_masks(mask, mask.sliding.get(), ws);
    const int T = qk[0].rows, S = qk[1].rows, H = c.num_heads;
    scores(m, qk[0].buf, qk[1].buf, T, S, ws, &w);
    softmax(c, T, S, mask_for(c, layer, ws), ws);
    Tensor probs({H, T, S});
    rt_->download(ws.p, probs.ptr(), probs.data.size() * 4);
    rt_->finish();
    return probs;
  }

  Tensor self_attention_cl(const Model& m, const Tensor& q, const Tensor& k, const AttnMask& mask) {
    std::lock_guard<std::mutex> lock(rt_->mutex());
    const ModelConfig& c = m.config;
    // only the relative table is read: other models' weights are not uploaded for this
    const DeviceWeights* w = c.positional == Positional::Relative ? &weights(m) : nullptr;
    Workspace& ws = workspace();
    ws.v.resize(std::max<size_t>(ws.v.size(), 2));
    up(ws.v[0].buf, q), up(ws.v[1].buf, k);
    upload_masks(mask, nullptr, ws);  // the layer's own mask
    const int T = static_cast<int>(q.dim(0)), S = static_cast<int>(k.dim(0));
    scores(m, ws.v[0].buf, ws.v[1].buf, T, S, ws, w);
    softmax(c, T, S, ws.masks[0], ws);
    Tensor probs({c.num_heads, T, S});
    rt_->download(ws.p, probs.ptr(), probs.data.size() * 4);
    rt_->finish();
    return probs;
  }

  struct Entry {
    uint64_t version = 0;
    DeviceWeights w;
  };

  std::shared_ptr<Runtime> rt_;
  std::unique_ptr<Backend> fallback_;
  std::string notice_;
  std::unique_ptr<Backend> host_;  // for models the device path does not cover
  std::string model_notice_;
};

}  // namespace

std::unique_ptr<Backend> make_opencl_backend(const std::string& spec) {
  return std::make_unique<OpenClBackend>(spec);
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names = {"cpu", "reference"};
  if (bf16_available()) names.insert(names.begin() + 1, "cpu-bf16");
  try {
    for (const auto& d : cl::list_devices()) names.push_back("opencl:" + std::to_string(d.index));
  } catch (const std::exception&) {
  }
  return names;
}

bool opencl_compiled_in() {
  return true;
}

std::string backend_description(const std::string& name) {
  if (name == "cpu-bf16") return bf16_notice().empty() ? "CPU, bf16 products (oneDNN)" : bf16_notice();
  if (name.rfind("opencl", 0) != 0) return "CPU";
  try {
    const int i = cl::resolve_device(name);
    const auto d = cl::list_devices()[static_cast<size_t>(i)];
    return d.name + " (" + d.platform + (d.gpu ? ", GPU" : ", CPU") + ")";
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace attnlab
