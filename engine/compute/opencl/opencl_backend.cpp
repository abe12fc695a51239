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

#include "engine/compute/hooks.h"
#include "engine/compute/backend.h"
#include "engine/compute/plan.h"
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

struct Workspace {
  std::vector<DeviceValue> v;  // the plan's values, reused from pass to pass
  Buffer ids, pos, p, g, blocked, additive;
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
    if (!fallback_ && !device_runs(m.config)) return host("this model's decoder layers")->encode(m, ids, mask, o);
    if (!fallback_ && !o.ablate.empty()) return host("head ablation")->encode(m, ids, mask, o);
    if (!fallback_ && o.hooks && !o.hooks->empty()) return host("named activations (hooks)")->encode(m, ids, mask, o);
    if (!fallback_ && o.start) return host("a resumed pass")->encode(m, ids, mask, o);
    if (!fallback_ && o.kv) return host("a KV-cached pass")->encode(m, ids, mask, o);
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

  Tensor cross_attention(const Model& m, int layer, const Tensor& xa, const Tensor& xb, const AttnMask& mask) override {
    if (!fallback_ && !device_runs(m.config))
      return host("this model's decoder layers")->cross_attention(m, layer, xa, xb, mask);
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
  // What the device kernels cover, derived from the model's layer plan: every step kind it needs
  // must be one run_steps implements (not RMSNorm, RoPE or Mul yet), with an activation that has
  // a kernel (not SiLU yet); then what the attention step's arguments and the parts around the
  // stack add (grouped-query heads, missing biases, another score scale, an RMS final norm).
  // Models that need more run on the cpu backend, per model, said in notice().
  static bool device_runs(const ModelConfig& c) {
    static constexpr OpKind kDeviceOps[] = {OpKind::Linear,    OpKind::LayerNorm, OpKind::Activation,
                                            OpKind::Attention, OpKind::Add,       OpKind::Dropout};
    for (const Step& s : make_layer_plan(c).steps)
      if (std::find(std::begin(kDeviceOps), std::end(kDeviceOps), s.op) == std::end(kDeviceOps)) return false;
    const bool activation_kernel =
        c.activation == Activation::Relu || c.activation == Activation::Gelu || c.activation == Activation::GeluTanh;
    return activation_kernel && c.norm_kind == NormKind::LayerNorm && c.kv_heads() == c.num_heads && c.qkv_bias &&
           c.out_bias && c.ff_bias && c.attn_scale == 0.0f;
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
      up(e->w.buffers[i], we.layer >= 0
                              ? wide(m.weights.layers[static_cast<size_t>(we.layer)], we.spec->layer_member, wide16)
                              : we.in(m.weights));
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

  // y (rows, out) = x (rows, in) W^T + b
  void linear(const Buffer& x, int rows, int in, const Buffer& W, const Buffer& b, int out, Buffer& y) {
    rt_->reserve(y, static_cast<size_t>(rows) * out * 4);
    rt_->gemm(true, rows, out, in, x, 0, in, W, 0, in, y, 0, out);
    rt_->add_bias(y, b, rows, out);
  }

  // P (H, T, S) = masked softmax of (Q K^T [+ relative]) / sqrt(D); Q (T, E), K (S, E).
  void scores(const Model& m, const Buffer& Q, const Buffer& K, int T, int S, Workspace& ws, const DeviceWeights& w) {
    const ModelConfig& c = m.config;
    const int H = c.num_heads, D = c.head_dim(), E = c.embed_size;
    rt_->reserve(ws.p, static_cast<size_t>(H) * T * S * 4);
    rt_->gemm(true, T, S, D, Q, 0, E, K, 0, E, ws.p, 0, S, H, D, D, static_cast<size_t>(T) * S);
    if (c.positional == Positional::Relative) {
      const int lo = relative_index(0, S - 1, c.max_len), hi = relative_index(T - 1, 0, c.max_len), nrel = hi - lo + 1;
      rt_->reserve(ws.g, static_cast<size_t>(H) * T * nrel * 4);
      rt_->gemm(true, T, nrel, D, Q, 0, E, w.at(&ModelWeights::rel_pos), static_cast<size_t>(lo) * E, E, ws.g, 0, nrel,
                H, D, D, static_cast<size_t>(T) * nrel);
      rt_->add_relative(ws.p, ws.g, H, T, S, nrel, lo, c.max_len);
    }
  }

  void upload_mask(const AttnMask& mask, Workspace& ws, const Buffer*& blocked, const Buffer*& additive) {
    blocked = additive = nullptr;
    if (!mask.blocked.empty()) {
      rt_->upload(ws.blocked, mask.blocked.data(), mask.blocked.size());
      blocked = &ws.blocked;
    }
    if (!mask.additive.empty()) {
      rt_->upload(ws.additive, mask.additive.data(), mask.additive.size() * 4);
      additive = &ws.additive;
    }
  }

  // The device executor of the layer plan (engine/compute/plan.h): the same steps as the host forward,
  // on device buffers. Steps that are the last reader of their input take its buffer over, so
  // residuals and post-norm LayerNorms run in place as before.
  void run_steps(const Model& m, int layer, const LayerPlan& plan, const std::vector<int>& which, Workspace& ws,
                 const DeviceWeights& w, const Buffer* blocked, const Buffer* additive, int planes, Tensor* probs) {
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
          linear(in0.buf, in0.rows, in0.cols, W(s.w), W(s.b), n_out, out.buf);
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
          const int T = q.rows, S = k.rows, H = c.num_heads, D = c.head_dim(), E = c.embed_size;
          scores(m, q.buf, k.buf, T, S, ws, w);  // P (H, T, S)
          rt_->masked_softmax(ws.p, H, T, S, 1.0f / std::sqrt(static_cast<float>(D)), blocked, additive, planes);
          if (probs) {
            *probs = Tensor({H, T, S});
            rt_->download(ws.p, probs->ptr(), probs->data.size() * 4);
          }
          // ctx_h = P_h V_h, written into head h's columns
          rt_->reserve(out.buf, static_cast<size_t>(T) * E * 4);
          rt_->gemm(false, T, D, S, ws.p, 0, S, ws.v[static_cast<size_t>(s.in[2])].buf, 0, E, out.buf, 0, E, H,
                    static_cast<size_t>(T) * S, D, D);
          out.rows = T, out.cols = E;
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
        case OpKind::Rope:
        case OpKind::Mul:
        case OpKind::HeadRmsNorm:
          throw Error("internal: the OpenCL plan has no " + std::string(s.op == OpKind::Rope ? "RoPE" : "decoder") +
                      " op (device_runs should have sent this model to the cpu backend)");
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
    if (c.embedding_norm)
      rt_->layer_norm(x.buf, w.at(&ModelWeights::emb_ln_g), w.at(&ModelWeights::emb_ln_b), T, E, c.layer_norm_eps);
    const Buffer *blocked, *additive;
    upload_mask(mask, ws, blocked, additive);

    for (int l = 0; l < c.num_layers; ++l) {
      if (opt.cancel && opt.cancel->load()) throw Cancelled();
      if (opt.on_layer) opt.on_layer(l);
      if (opt.keep_layer_inputs) {
        Tensor in({T, E});
        rt_->download(ws.v[0].buf, in.ptr(), TE * 4);
        out.layer_inputs.push_back(std::move(in));
      }
      const bool keep = opt.keep_attention.empty() || opt.keep_attention[static_cast<size_t>(l)];
      run_steps(m, l, plan, all, ws, w, blocked, additive, mask.planes,
                keep ? &out.attention[static_cast<size_t>(l)] : nullptr);
      std::swap(ws.v[0], ws.v[static_cast<size_t>(plan.output)]);  // the output is the next layer's input
    }
    if (c.final_norm)
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
      run_steps(m, layer, plan, steps_for(plan, target), ws, w, nullptr, nullptr, 1, nullptr);
      std::swap(qk[static_cast<size_t>(side)], ws.v[static_cast<size_t>(target)]);
    }
    const Buffer *blocked, *additive;
    upload_mask(mask, ws, blocked, additive);
    const int T = qk[0].rows, S = qk[1].rows, H = c.num_heads;
    scores(m, qk[0].buf, qk[1].buf, T, S, ws, w);
    rt_->masked_softmax(ws.p, H, T, S, 1.0f / std::sqrt(static_cast<float>(c.head_dim())), blocked, additive,
                        mask.planes);
    Tensor probs({H, T, S});
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
