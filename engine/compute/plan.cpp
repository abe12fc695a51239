// The layer plan (make_layer_plan), its host executors (forward and backward), inference
// encode and cross-attention (see plan.h). The model around the layers is in plan_model.cpp, the
// hooks in plan_hooks.cpp.
#include "engine/compute/plan.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <optional>

#include "engine/compute/hooks.h"
#include "engine/compute/kv_cache.h"
#include "engine/compute/linear_half.h"

namespace attnlab {

namespace {

void add_into(Tensor& a, const Tensor& b) {
  float* pa = a.ptr();
  const float* pb = b.ptr();
  for (size_t k = 0; k < a.data.size(); ++k) pa[k] += pb[k];
}

// t (rows, width) grows by the rows of r (n, width); an empty t takes r's width.
void append_rows(Tensor& t, const Tensor& r) {
  const int64_t width = r.dim(1), rows = t.empty() ? 0 : t.dim(0);
  if (!t.empty() && t.dim(1) != width) throw Error("internal: a KV cache's rows changed width");
  t.data.resize(static_cast<size_t>((rows + r.dim(0)) * width));  // every new element is overwritten next
  std::copy(r.data.begin(), r.data.end(), t.data.begin() + rows * width);
  t.shape = {rows + r.dim(0), width};
}

void check_cancel(const EncodeOptions& o) {
  if (o.cancel && o.cancel->load(std::memory_order_relaxed)) throw Cancelled();
}

// Appends steps, numbering each new value.
class PlanBuilder {
 public:
  using LW = LayerWeights;
  int linear(int x, Tensor LW::*w, Tensor LW::*b) { return add(OpKind::Linear, {x, -1, -1}, w, b); }
  int layer_norm(int x, Tensor LW::*g, Tensor LW::*b) { return add(OpKind::LayerNorm, {x, -1, -1}, g, b); }
  int activation(int x) { return add(OpKind::Activation, {x, -1, -1}); }
  int attention(int q, int k, int v) {
    plan_.attention_step = static_cast<int>(plan_.steps.size());
    return add(OpKind::Attention, {q, k, v});
  }
  int cross_attention(int q, int k, int v) {
    plan_.cross_step = static_cast<int>(plan_.steps.size());
    return add(OpKind::CrossAttention, {q, k, v});
  }
  int input() {  // a value the caller fills, as value 0 (the encoder's output)
    plan_.memory = plan_.values;
    return plan_.values++;
  }
  int residual(int branch, int x) { return add(OpKind::Add, {branch, x, -1}); }
  int dropout(int x) { return add(OpKind::Dropout, {x, -1, -1}); }
  int rms_norm(int x, Tensor LW::*g) { return add(OpKind::RmsNorm, {x, -1, -1}, g); }
  int rope(int x) { return add(OpKind::Rope, {x, -1, -1}); }
  int head_rms_norm(int x, Tensor LW::*g) { return add(OpKind::HeadRmsNorm, {x, -1, -1}, g); }
  int mul(int a, int b) { return add(OpKind::Mul, {a, b, -1}); }
  int hook(int v, const char* name) {  // names value v (TransformerLens's name within the block)
    plan_.hooks.resize(static_cast<size_t>(plan_.values), nullptr);
    plan_.hooks[static_cast<size_t>(v)] = name;
    return v;
  }

  LayerPlan finish(int output) {
    plan_.output = output;
    plan_.hooks.resize(static_cast<size_t>(plan_.values), nullptr);
    plan_.last_use.assign(static_cast<size_t>(plan_.values), -1);
    for (size_t i = 0; i < plan_.steps.size(); ++i)
      for (int in : plan_.steps[i].in)
        if (in >= 0) plan_.last_use[static_cast<size_t>(in)] = static_cast<int>(i);
    return plan_;
  }

 private:
  int add(OpKind op, std::array<int, 3> in, Tensor LW::*w = nullptr, Tensor LW::*b = nullptr) {
    Step s;
    s.op = op, s.in = in, s.out = plan_.values++, s.w = w, s.b = b;
    plan_.steps.push_back(s);
    return s.out;
  }
  LayerPlan plan_;
};

}  // namespace

LayerPlan make_layer_plan(const ModelConfig& c) {
  using LW = LayerWeights;
  PlanBuilder p;
  const bool pre = c.norm == NormPlacement::Pre;
  const bool rms = c.norm_kind == NormKind::RmsNorm;
  auto norm = [&](int v, Tensor LW::*g, Tensor LW::*b) { return rms ? p.rms_norm(v, g) : p.layer_norm(v, g, b); };
  const int x = p.hook(0, "hook_resid_pre");
  const int memory = c.cross_attention ? p.input() : -1;
  // ---- attention sub-layer (MultiHeadAttention: query/key/value, heads, fc_out); the values'
  // names are TransformerLens's (engine/compute/hooks.h)
  const int a_in = pre ? p.hook(norm(x, &LW::ln1_g, &LW::ln1_b), "ln1.hook_normalized") : x;
  // (N, E) = (N, H * D): head h is columns [h*D, (h+1)*D)
  int q = p.hook(p.linear(a_in, &LW::wq, &LW::bq), "attn.hook_q");
  // (N, KV * D): grouped-query models have fewer key heads
  int k = p.hook(p.linear(a_in, &LW::wk, &LW::bk), "attn.hook_k");
  const int v = p.hook(p.linear(a_in, &LW::wv, &LW::bv), "attn.hook_v");
  if (c.qk_norm)  // Qwen3: q_norm / k_norm over each head's D values, then the rotation
    q = p.head_rms_norm(q, &LW::q_norm), k = p.head_rms_norm(k, &LW::k_norm);
  if (c.positional == Positional::Rotary)
    q = p.hook(p.rope(q), "attn.hook_rot_q"), k = p.hook(p.rope(k), "attn.hook_rot_k");
  const int ctx = p.hook(p.attention(q, k, v), "attn.hook_z");
  // Gemma 2's sandwich: the output projection's result normalised (post_attention_layernorm)
  // before the residual; hook_attn_out is what is added to the stream, as TransformerLens names it
  const int o_proj = p.linear(ctx, &LW::wo, &LW::bo);
  const int o = p.dropout(p.hook(c.sandwich_norm ? norm(o_proj, &LW::ln1_post_g, nullptr) : o_proj, "hook_attn_out"));
  // an attention-only pre-norm layer's output is its resid_post (TransformerLens's attn_only
  // blocks: resid_post = resid_pre + attn_out, no resid_mid)
  const int s1 = p.hook(p.residual(o, x), pre && c.ff_dim == 0 ? "hook_resid_post" : "hook_resid_mid");
  // post-norm (TransformerLens's BertBlock): LN1 of resid_mid is the MLP's input
  int x1 = pre ? s1 : p.hook(norm(s1, &LW::ln1_g, &LW::ln1_b), "ln1.hook_normalized");
  if (c.cross_attention) {
    // ---- an encoder-decoder's cross-attention: queries from here, keys and values from the
    // encoder's output (modeling_bart.py's encoder_attn and encoder_attn_layer_norm)
    const int c_in = pre ? norm(x1, &LW::ln3_g, &LW::ln3_b) : x1;
    const int cq = p.linear(c_in, &LW::cwq, &LW::cbq);
    const int ck = p.linear(memory, &LW::cwk, &LW::cbk);
    const int cv = p.linear(memory, &LW::cwv, &LW::cbv);
    const int co = p.dropout(p.linear(p.cross_attention(cq, ck, cv), &LW::cwo, &LW::cbo));
    const int s = p.residual(co, x1);
    x1 = pre ? s : norm(s, &LW::ln3_g, &LW::ln3_b);
  }
  if (c.ff_dim == 0) return p.finish(x1);  // the article's TextClassifier: attention only
  // ---- feed-forward sub-layer: fc2(act(fc1(.))), or gated: fc2(act(fc1(.)) * up(.))
  const int f_in = pre ? p.hook(norm(x1, &LW::ln2_g, &LW::ln2_b), "ln2.hook_normalized") : x1;
  const int h = p.hook(p.linear(f_in, &LW::w1, &LW::b1), "mlp.hook_pre");  // (N, F)
  int a = p.activation(h);
  if (c.gated_ff) a = p.mul(a, p.hook(p.linear(f_in, &LW::w3, nullptr), "mlp.hook_pre_linear"));
  p.hook(a, "mlp.hook_post");
  const int f_proj = p.linear(a, &LW::w2, &LW::b2);
  const int f = p.dropout(p.hook(c.sandwich_norm ? norm(f_proj, &LW::ln2_post_g, nullptr) : f_proj, "hook_mlp_out"));
  const int s2 = p.hook(p.residual(f, x1), "hook_resid_post");
  return p.finish(pre ? s2 : p.hook(norm(s2, &LW::ln2_g, &LW::ln2_b), "hook_normalized_resid_post"));
}

// Each step kind's name, in OpKind's order (checked below).
constexpr const char* kOpNames[] = {"Linear",  "LayerNorm", "Activation", "Attention",   "Add",           "Dropout",
                                    "RMSNorm", "RoPE",      "Mul",        "HeadRMSNorm", "CrossAttention"};
static_assert(std::size(kOpNames) == static_cast<size_t>(OpKind::CrossAttention) + 1,
              "one name per OpKind, in its order");

std::string LayerPlan::describe() const {
  const auto& names = kOpNames;
  std::string out;
  for (const Step& s : steps) {
    out += "x" + std::to_string(s.out) + " = " + names[static_cast<int>(s.op)] + "(";
    for (size_t j = 0; j < s.in.size() && s.in[j] >= 0; ++j) out += (j ? ", x" : "x") + std::to_string(s.in[j]);
    out += ")\n";
  }
  return out + "output x" + std::to_string(output) + "\n";
}

std::vector<int> steps_for(const LayerPlan& plan, int target) {
  std::vector<bool> needed(static_cast<size_t>(plan.values), false);
  needed[static_cast<size_t>(target)] = true;
  std::vector<int> steps;
  for (int i = static_cast<int>(plan.steps.size()) - 1; i >= 0; --i) {
    const Step& s = plan.steps[static_cast<size_t>(i)];
    if (!needed[static_cast<size_t>(s.out)]) continue;
    steps.insert(steps.begin(), i);
    for (int in : s.in)
      if (in >= 0) needed[static_cast<size_t>(in)] = true;
  }
  return steps;
}

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

namespace {

using plan_detail::attention_hooks;
using plan_detail::visit_hook;

// Runs the given steps of the plan on the state's values (value 0 must hold the layer input).
void run_steps(const ModelConfig& c, const LayerPlan& plan, const LayerWeights& L, Ops& ops, const AttnArgs& attn_in,
               LayerState& st, const LayerRun& run, const std::vector<int>& which) {
  Dropout* drop = run.dropout;
  for (const int i : which) {
    const Step& s = plan.steps[static_cast<size_t>(i)];
    Tensor& out = st.v[static_cast<size_t>(s.out)];
    Tensor& in0 = st.v[static_cast<size_t>(s.in[0])];
    // Inference may take over an input's buffer at its last use (nothing else reads it, and
    // there is no backward): buffers then circulate and nothing is allocated per layer.
    const bool steal = !run.for_backward && plan.last_use[static_cast<size_t>(s.in[0])] == i;
    auto take_or_copy = [&] {  // out = in0, by taking its buffer when stealing, else by a copy
      if (steal) {
        std::swap(out, in0);
      } else {
        out.reshape_for_overwrite(in0.shape);
        std::copy(in0.data.begin(), in0.data.end(), out.data.begin());
      }
    };
    switch (s.op) {
      case OpKind::Linear: {
        static const Tensor kNoBias;
        if (const HalfTensor* h = half_of(L, s.w))
          linear_half(ops, in0, *h, s.b ? L.*s.b : kNoBias, out, st.half);
        else
          ops.linear(in0, L.*s.w, s.b ? L.*s.b : kNoBias, out);
        break;
      }
      case OpKind::LayerNorm:
        ops.layer_norm(in0, L.*s.w, L.*s.b, c.layer_norm_eps, out, st.xhat[static_cast<size_t>(i)],
                       st.rstd[static_cast<size_t>(i)]);
        break;
      case OpKind::Activation:
        ops.activation(in0, c.activation, out);
        break;
      case OpKind::Attention: {
        AttnArgs a = attn_in;
        std::vector<uint8_t>& keep = st.keep[static_cast<size_t>(i)];
        if (drop) keep = drop->keep_mask(static_cast<size_t>(a.B) * a.H * a.T * a.keys());
        a.drop_keep = drop ? &keep : nullptr;
        a.drop_scale = drop ? drop->scale() : 1.0f;
        // q, k, v -> ctx (N, E); P (B, H, T, S) kept for the backward or handed to the caller
        const std::string block = "blocks." + std::to_string(run.layer) + ".";
        // the scores and the pattern as hooks see them; edits in a single forward pass only
        const bool keep_scores = run.hooks && run.hooks->kept(block + "attn.hook_attn_scores");
        const bool edited = run.hooks && (!run.hooks->edits_of(block + "attn.hook_attn_scores").empty() ||
                                          !run.hooks->edits_of(block + "attn.hook_pattern").empty());
        if (edited && (run.for_backward || a.B != 1))
          throw Error(
              "attention scores and patterns can be edited in a single forward pass only (not with a backward)");
        if (keep_scores && a.B != 1) throw Error("attention scores can be kept for a single sequence only");
        Tensor hooked_p;  // the probabilities an edit needs when nobody keeps them
        Tensor* P = run.for_backward ? &st.P : run.probs ? run.probs : edited ? &hooked_p : nullptr;
        const Tensor* kp = &st.v[static_cast<size_t>(s.in[1])];
        const Tensor* vp = &st.v[static_cast<size_t>(s.in[2])];
        if (run.kv) {  // the new positions' keys and values after the cached ones; attend over all
          Tensor& ck = run.kv->k[static_cast<size_t>(run.layer)];
          Tensor& cv = run.kv->v[static_cast<size_t>(run.layer)];
          append_rows(ck, *kp);
          append_rows(cv, *vp);
          kp = &ck, vp = &cv;
        }
        const Tensor &K = *kp, &V = *vp;
        if (run.queries) *run.queries = in0;  // attention on demand: what P is recomputed from
        if (run.keys) *run.keys = K;
        ops.attention(a, in0, K, &V, P, &out);
        if (edited || keep_scores)
          attention_hooks(block, a, in0, K, V, *run.hooks, P, out);
        else if (run.hooks)
          run.hooks->met.insert(block + "attn.hook_attn_scores");
        if (run.for_backward && run.probs) *run.probs = st.P;
        if (run.for_backward) st.ablate = run.ablate;  // the backward zeroes the same heads' gradients
        if (run.ablate) {  // head mask: P_h * 0 weights the values, so head h's context columns are 0
          const int64_t rows = out.dim(0), width = out.dim(1);
          for (int h = 0; h < a.H; ++h)
            if ((*run.ablate)[static_cast<size_t>(h)])
              for (int64_t n = 0; n < rows; ++n)
                std::fill(out.ptr() + n * width + h * a.D, out.ptr() + n * width + (h + 1) * a.D, 0.0f);
        }
        break;
      }
      case OpKind::CrossAttention:  // q (T, H * D) from this pass, k and v (S, KV * D) from the encoder's output
        if (!run.cross) throw Error("internal: a cross-attention step without the encoder's output");
        if (drop) throw Error("training an encoder-decoder is not supported yet");
        ops.attention(*run.cross, in0, st.v[static_cast<size_t>(s.in[1])], &st.v[static_cast<size_t>(s.in[2])],
                      run.cross_probs, &out);
        break;
      case OpKind::Add: {
        const Tensor& in1 = st.v[static_cast<size_t>(s.in[1])];
        take_or_copy();
        add_into(out, in1);
        break;
      }
      case OpKind::RmsNorm:
        ops.rms_norm(in0, L.*s.w, c.layer_norm_eps, out);
        break;
      case OpKind::HeadRmsNorm: {  // the rows of D values, one per (position, head), normalised alone
        const std::vector<int64_t> shape = in0.shape;
        in0.shape = {in0.dim(0) * (in0.dim(1) / attn_in.D), attn_in.D};
        ops.rms_norm(in0, L.*s.w, c.layer_norm_eps, out);
        in0.shape = shape;
        out.shape = shape;
        break;
      }
      case OpKind::Rope: {
        // Gemma 3: the sliding layers rotate with their own base, the full ones with rope_theta
        // and its scaling (rope_parameters' sliding_attention and full_attention)
        const bool local = c.layer_local_rope(run.layer);
        if (st.rope_cos.empty() || st.rope_cos.dim(0) != attn_in.T || st.rope_first != run.first ||
            st.rope_local != local) {
          if (local) {
            ModelConfig lc = c;
            lc.rope_theta = c.local_rope_theta, lc.rope_scaling = RopeScaling{};
            rope_tables(attn_in.T, attn_in.D, lc, st.rope_cos, st.rope_sin, run.first);
          } else {
            rope_tables(attn_in.T, attn_in.D, c, st.rope_cos, st.rope_sin, run.first);
          }
          st.rope_first = run.first, st.rope_local = local;
        }
        take_or_copy();
        ops.rope(out, st.rope_cos, st.rope_sin, attn_in.D, attn_in.T, false);
        break;
      }
      case OpKind::Mul: {
        const Tensor& in1 = st.v[static_cast<size_t>(s.in[1])];
        take_or_copy();
        ops.mul(out, in1);
        break;
      }
      case OpKind::Dropout: {
        take_or_copy();
        if (drop) {
          std::vector<uint8_t>& keep = st.keep[static_cast<size_t>(i)];
          keep = drop->keep_mask(out.data.size());
          const float scale = drop->scale();
          for (size_t k = 0; k < out.data.size(); ++k) out.data[k] = keep[k] ? out.data[k] * scale : 0.0f;
        }
        break;
      }
    }
    if (run.hooks) visit_hook(plan, attn_in, run, s.out, out);
  }
}

// d loss / d P from d loss / d ctx: ctx_i = sum_j keep_ij P_ij V_j (per head), so
// dP_ij = keep_ij * scale * dctx_i . V_j, one (T, S) matrix product per sequence and head.
void attention_probs_gradient(Ops& ops, const AttnArgs& a, const Tensor& dctx, const Tensor& V,
                              const std::vector<uint8_t>& keep, float drop_scale, Tensor& dP) {
  const int B = a.B, T = a.T, S = a.keys(), H = a.H, D = a.D;
  dP = Tensor({B, H, T, S});
  const int64_t cw = dctx.dim(1), vw = V.dim(1);
  Tensor dc({T, D}), vh({S, D}), out;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int g = a.kv_head(h);
      for (int i = 0; i < T; ++i)
        std::copy_n(dctx.ptr() + (static_cast<int64_t>(b) * T + i) * cw + h * D, D,
                    dc.ptr() + static_cast<int64_t>(i) * D);
      for (int j = 0; j < S; ++j)
        std::copy_n(V.ptr() + (static_cast<int64_t>(b) * S + j) * vw + g * D, D,
                    vh.ptr() + static_cast<int64_t>(j) * D);
      ops.linear(dc, vh, Tensor(), out);  // (T, S) = dc vh^T
      float* dst = dP.ptr() + (static_cast<size_t>(b) * H + h) * T * S;
      for (size_t k = 0; k < static_cast<size_t>(T) * S; ++k) {
        const size_t at = (static_cast<size_t>(b) * H + h) * T * S + k;
        dst[k] = keep.empty() ? out.data[k] : (keep[at] ? out.data[k] * drop_scale : 0.0f);
      }
    }
}

void size_state(const LayerPlan& plan, LayerState& st) {
  st.v.resize(static_cast<size_t>(plan.values));
  st.xhat.resize(plan.steps.size());
  st.rstd.resize(plan.steps.size());
  st.keep.resize(plan.steps.size());
}

std::vector<int> all_steps(const LayerPlan& plan) {
  std::vector<int> all(plan.steps.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  return all;
}

}  // namespace

void layer_forward(const ModelConfig& c, const LayerPlan& plan, const LayerWeights& L, Ops& ops, const AttnArgs& attn,
                   Tensor& x, LayerState& st, const LayerRun& run) {
  size_state(plan, st);
  std::swap(st.v[0], x);   // value 0: the layer input (kept for the backward)
  if (plan.memory >= 0) {  // an encoder-decoder's decoder layer: the encoder's output beside it
    if (!run.memory || !run.cross)
      throw Error("internal: a decoder layer with cross-attention needs the encoder's output");
    st.v[static_cast<size_t>(plan.memory)] = *run.memory;
  }
  if (run.hooks) visit_hook(plan, attn, run, 0, st.v[0]);
  run_steps(c, plan, L, ops, attn, st, run, all_steps(plan));
  std::swap(x, st.v[static_cast<size_t>(plan.output)]);
}

void layer_backward(const ModelConfig& c, const LayerPlan& plan, const LayerWeights& L, LayerWeights& G, Ops& ops,
                    const AttnArgs& attn_in, LayerState& st, float drop_scale, Tensor& dx, Tensor* drel, Tensor* dprobs,
                    std::vector<Tensor>* dhooks) {
  std::vector<Tensor> d(static_cast<size_t>(plan.values));  // d loss / d value
  if (dhooks) dhooks->assign(static_cast<size_t>(plan.values), Tensor());
  d[static_cast<size_t>(plan.output)] = std::move(dx);
  auto accumulate = [&](int value, Tensor&& g) {
    Tensor& acc = d[static_cast<size_t>(value)];
    if (acc.empty())
      acc = std::move(g);
    else
      add_into(acc, g);
  };
  auto dropped = [&](Tensor& t, const std::vector<uint8_t>& keep) {
    for (size_t k = 0; k < t.data.size(); ++k) t.data[k] = keep[k] ? t.data[k] * drop_scale : 0.0f;
  };
  for (int i = static_cast<int>(plan.steps.size()) - 1; i >= 0; --i) {
    const Step& s = plan.steps[static_cast<size_t>(i)];
    Tensor dout = std::move(d[static_cast<size_t>(s.out)]);
    if (dout.empty()) continue;  // nothing downstream depends on this value
    // every step that reads the value has been walked: its gradient is complete
    if (dhooks && plan.hooks[static_cast<size_t>(s.out)]) (*dhooks)[static_cast<size_t>(s.out)] = dout;
    const Tensor& in0 = st.v[static_cast<size_t>(s.in[0])];
    const std::vector<uint8_t>& keep = st.keep[static_cast<size_t>(i)];
    Tensor g;
    switch (s.op) {
      case OpKind::Linear:
        if (s.b) {
          ops.linear_backward(in0, wide(L, s.w, st.wide), dout, &g, G.*s.w, G.*s.b);
        } else {
          Tensor no_bias;
          ops.linear_backward(in0, wide(L, s.w, st.wide), dout, &g, G.*s.w, no_bias);
        }
        accumulate(s.in[0], std::move(g));
        break;
      case OpKind::LayerNorm:
        ops.layer_norm_backward(st.xhat[static_cast<size_t>(i)], st.rstd[static_cast<size_t>(i)], L.*s.w, dout, g,
                                G.*s.w, G.*s.b);
        accumulate(s.in[0], std::move(g));
        break;
      case OpKind::Activation:
        ops.activation_backward(in0, c.activation, dout);
        accumulate(s.in[0], std::move(dout));
        break;
      case OpKind::Attention: {
        AttnArgs a = attn_in;
        a.mask = nullptr;  // a mask reaches the backward only through P (blocked: P = 0)
        a.drop_keep = keep.empty() ? nullptr : &keep;
        a.drop_scale = drop_scale;
        if (st.ablate) {  // an ablated head's context was zeroed: nothing flows back through it
          const int64_t rows = dout.dim(0), width = dout.dim(1);
          for (int h = 0; h < a.H; ++h)
            if ((*st.ablate)[static_cast<size_t>(h)])
              for (int64_t n = 0; n < rows; ++n)
                std::fill(dout.ptr() + n * width + h * a.D, dout.ptr() + n * width + (h + 1) * a.D, 0.0f);
        }
        if (dprobs)
          attention_probs_gradient(ops, a, dout, st.v[static_cast<size_t>(s.in[2])], keep, drop_scale, *dprobs);
        Tensor dQ, dK, dV;
        ops.attention_backward(a, in0, st.v[static_cast<size_t>(s.in[1])], st.v[static_cast<size_t>(s.in[2])], st.P,
                               dout, dQ, dK, dV, a.rel ? drel : nullptr);
        accumulate(s.in[0], std::move(dQ));
        accumulate(s.in[1], std::move(dK));
        accumulate(s.in[2], std::move(dV));
        break;
      }
      case OpKind::CrossAttention:
        throw Error("gradients through an encoder-decoder's cross-attention are not supported yet");
      case OpKind::Add:
        accumulate(s.in[0], Tensor(dout));
        accumulate(s.in[1], std::move(dout));
        break;
      case OpKind::Dropout:
        if (!keep.empty()) dropped(dout, keep);
        accumulate(s.in[0], std::move(dout));
        break;
      case OpKind::RmsNorm:
        ops.rms_norm_backward(in0, L.*s.w, c.layer_norm_eps, dout, g, G.*s.w);
        accumulate(s.in[0], std::move(g));
        break;
      case OpKind::HeadRmsNorm: {  // as RmsNorm over the (position, head) rows of D values
        Tensor rows = in0;
        const std::vector<int64_t> shape = in0.shape;
        rows.shape = {in0.dim(0) * (in0.dim(1) / attn_in.D), attn_in.D};
        dout.shape = rows.shape;
        ops.rms_norm_backward(rows, L.*s.w, c.layer_norm_eps, dout, g, G.*s.w);
        g.shape = shape;
        accumulate(s.in[0], std::move(g));
        break;
      }
      case OpKind::Rope:
        ops.rope(dout, st.rope_cos, st.rope_sin, attn_in.D, attn_in.T, true);
        accumulate(s.in[0], std::move(dout));
        break;
      case OpKind::Mul: {  // out = a * b: da = dout * b, db = dout * a
        const Tensor& in1 = st.v[static_cast<size_t>(s.in[1])];
        g = dout;
        ops.mul(g, in1);
        ops.mul(dout, in0);
        accumulate(s.in[0], std::move(g));
        accumulate(s.in[1], std::move(dout));
        break;
      }
    }
  }
  if (dhooks) (*dhooks)[0] = d[0];
  dx = std::move(d[0]);
}

EncodeOutput encode(const Model& model, Ops& ops, const std::vector<int>& ids, const AttnMask& mask,
                    const EncodeOptions& options) {
  const ModelConfig& c = model.config;
  const int T = static_cast<int>(ids.size());
  EncodeOutput out;
  out.attention.resize(static_cast<size_t>(c.num_layers));
  const LayerPlan plan = make_layer_plan(c);
  NormState norm;
  const int first = options.start ? options.first_layer : 0;
  if (first < 0 || first >= c.num_layers)
    throw Error("a pass cannot start at layer " + std::to_string(first) + " (the model has " +
                std::to_string(c.num_layers) + ")");
  if (options.start && (options.start->dim(0) != T || options.start->dim(1) != c.embed_size))
    throw Error("a resumed pass needs layer " + std::to_string(first) + "'s input as [" + std::to_string(T) + ", " +
                std::to_string(c.embed_size) + "]");
  std::optional<HookRun> hooks;
  if (options.hooks && !options.hooks->empty()) hooks.emplace(*options.hooks);
  // With a KV cache, positions 0..P-1 come from it: the pass runs the rows P..T-1 (n of them)
  // against all T keys, with those rows of the mask.
  KvCache* kv = options.kv;
  int P = 0;
  AttnMask rows_mask;
  if (kv) {
    if (!c.causal) throw Error("a KV cache is for causal language models (an encoder's positions see every other)");
    if (hooks || !options.ablate.empty() || options.start || options.keep_layer_inputs ||
        c.positional == Positional::Relative || !options.token_types.empty())
      throw Error("internal: a KV-cached pass takes no hooks, ablation, resumed start, layer inputs or token types");
    const std::vector<float> rope =
        c.positional == Positional::Rotary ? rope_frequencies(c, c.head_dim(), T).inv_freq : std::vector<float>();
    P = reuse_prefix(*kv, model, ids, mask, rope);
    out.first_position = P;
    rows_mask = mask_rows(mask, P);
  }
  const int n = T - P;
  // An encoder-decoder's decoder: every layer's cross-attention reads the encoder's output
  AttnArgs cross;
  if (c.cross_attention) {
    if (!options.memory || !options.memory_mask || options.memory->dim(1) != c.embed_size)
      throw Error(
          "this is an encoder-decoder's decoder: its pass reads the encoder's output of a source "
          "(attnlab-cli forward --text SOURCE --target TEXT)");
    if (hooks || kv || options.start || options.attention_on_demand)
      throw Error("an encoder-decoder's pass takes no hooks, KV cache, resumed start or attention on demand yet");
    cross = attention_args(c, model.weights, 1, n, static_cast<int>(options.memory->dim(0)));
    cross.mask = options.memory_mask;
    cross.rel = nullptr;
    out.cross_attention.resize(static_cast<size_t>(c.num_layers));
  }
  // (n, E): the embedding, or the given input of layer `first`
  Tensor x;
  if (options.start)
    x = *options.start;
  else if (P > 0)
    x = embed_forward(model, ops, std::vector<int>(ids.begin() + P, ids.end()), {}, T, norm, nullptr, P);
  else
    x = embed_forward(model, ops, ids, options.token_types, T, norm, hooks ? &*hooks : nullptr);
  AttnArgs attn = attention_args(c, model.weights, 1, n, T);
  const AttnMask& pass_mask = kv ? rows_mask : mask;
  LayerState state;  // reused by every layer: inference keeps nothing of a layer once it is done
  std::vector<Tensor> patterns(static_cast<size_t>(c.num_layers));  // attn.hook_pattern kept for hooks only
  for (int l = first; l < c.num_layers; ++l) {
    check_cancel(options);
    if (options.on_layer) options.on_layer(l);
    if (options.keep_layer_inputs) out.layer_inputs.push_back(x);
    LayerRun run;
    run.layer = l;
    run.hooks = hooks ? &*hooks : nullptr;
    run.kv = kv;
    run.first = P;
    const std::string pattern = "blocks." + std::to_string(l) + ".attn.hook_pattern";
    const bool keep_pattern = hooks && hooks->kept(pattern);
    // Layers the caller does not keep never hold a [H, T, T] buffer.
    if (options.keep_attention.empty() || options.keep_attention[static_cast<size_t>(l)])
      run.probs = &out.attention[static_cast<size_t>(l)];
    else if (keep_pattern)
      run.probs = &patterns[static_cast<size_t>(l)];
    if (!options.ablate.empty() && !options.ablate[static_cast<size_t>(l)].empty())
      run.ablate = &options.ablate[static_cast<size_t>(l)];
    if (options.attention_on_demand) {
      out.queries.resize(static_cast<size_t>(c.num_layers));
      out.keys.resize(static_cast<size_t>(c.num_layers));
      run.queries = &out.queries[static_cast<size_t>(l)];
      run.keys = &out.keys[static_cast<size_t>(l)];
    }
    if (c.cross_attention) {
      run.memory = options.memory, run.cross = &cross;
      if (options.keep_attention.empty() || options.keep_attention[static_cast<size_t>(l)])
        run.cross_probs = &out.cross_attention[static_cast<size_t>(l)];
    }
    attn.mask = &layer_mask(pass_mask, c, l);  // Gemma 2: windowed and full layers alternate
    layer_forward(c, plan, model.weights.layers[static_cast<size_t>(l)], ops, attn, x, state, run);
    if (run.probs) run.probs->shape.erase(run.probs->shape.begin());                    // (1, H, T, T) -> (H, T, T)
    if (run.cross_probs) run.cross_probs->shape.erase(run.cross_probs->shape.begin());  // (H, T, S)
    if (hooks) {
      hooks->met.insert(pattern);
      if (keep_pattern) hooks->cache[pattern] = *run.probs;
    }
    if (options.keep_values)
      out.values.push_back(
          kv ? kv->v[static_cast<size_t>(l)]
             : state.v[static_cast<size_t>(plan.steps[static_cast<size_t>(plan.attention_step)].in[2])]);
  }
  if (kv) {  // the cache now holds the whole sequence
    kv->ids = ids;
    kv->rows.resize(static_cast<size_t>(P));
    for (int i = P; i < T; ++i) kv->rows.push_back(mask_row_hash(mask, i));
  }
  final_forward(model, ops, x, norm);
  if (hooks && c.final_norm) hooks->visit("ln_final.hook_normalized", x, x.shape);
  if (hooks) {
    hooks->check_all_met();
    out.cache = std::move(hooks->cache);
  }
  out.hidden = std::move(x);
  return out;
}

Tensor attention_values(const Model& model, Ops& ops, int layer, const Tensor& x) {
  const ModelConfig& c = model.config;
  const LayerPlan plan = make_layer_plan(c);
  const int target = plan.steps[static_cast<size_t>(plan.attention_step)].in[2];
  LayerState st;
  size_state(plan, st);
  st.v[0] = x;
  AttnArgs attn = attention_args(c, model.weights, 1, static_cast<int>(x.dim(0)), static_cast<int>(x.dim(0)));
  run_steps(c, plan, model.weights.layers.at(static_cast<size_t>(layer)), ops, attn, st, LayerRun{},
            steps_for(plan, target));
  return std::move(st.v[static_cast<size_t>(target)]);
}

Tensor cross_attention_probs(const Model& model, Ops& ops, int layer, const Tensor& xa, const Tensor& xb,
                             const AttnMask& mask) {
  const ModelConfig& c = model.config;
  const LayerWeights& L = model.weights.layers.at(static_cast<size_t>(layer));
  const LayerPlan plan = make_layer_plan(c);
  const Step& att = plan.steps[static_cast<size_t>(plan.attention_step)];
  // The value an attention input is computed from the layer input x (pre-norm: Linear(LN1(x))).
  auto value_from = [&](int target, const Tensor& x) {
    LayerState st;
    size_state(plan, st);
    st.v[0] = x;
    run_steps(c, plan, L, ops, AttnArgs{}, st, LayerRun{}, steps_for(plan, target));
    return std::move(st.v[static_cast<size_t>(target)]);
  };
  const Tensor q = value_from(att.in[0], xa), k = value_from(att.in[1], xb);
  AttnArgs attn = attention_args(c, model.weights, 1, static_cast<int>(xa.dim(0)), static_cast<int>(xb.dim(0)));
  attn.mask = &mask;
  Tensor probs;
  ops.attention(attn, q, k, nullptr, &probs, nullptr);
  probs.shape.erase(probs.shape.begin());  // (1, H, T, S) -> (H, T, S)
  return probs;
}

Tensor self_attention_probs(const Model& model, Ops& ops, const Tensor& q, const Tensor& k, const AttnMask& mask) {
  AttnArgs attn =
      attention_args(model.config, model.weights, 1, static_cast<int>(q.dim(0)), static_cast<int>(k.dim(0)));
  attn.mask = &mask;
  Tensor probs;
  ops.attention(attn, q, k, nullptr, &probs, nullptr);
  probs.shape.erase(probs.shape.begin());  // (1, H, T, S) -> (H, T, S)
  return probs;
}

}  // namespace attnlab
