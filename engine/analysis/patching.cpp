// Activation patching (see patching.h).
#include "engine/analysis/patching.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "engine/analysis/methods.h"
#include "engine/compute/hooks.h"
#include "engine/compute/lm.h"
#include "engine/compute/plan.h"
#include "engine/text/input.h"

namespace attnlab {

PatchTarget parse_patch_target(const std::string& name) {
  if (name == "resid_pre") return PatchTarget::ResidPre;
  if (name == "attn_out") return PatchTarget::AttnOut;
  if (name == "mlp_out") return PatchTarget::MlpOut;
  if (name == "z") return PatchTarget::Z;
  if (name == "pattern") return PatchTarget::Pattern;
  throw Error("--what: expected resid_pre, attn_out, mlp_out, z or pattern, got \"" + name + "\"");
}

int resolve_answer(const Model& model, const std::string& text, const std::string& what) {
  const ModelConfig& c = model.config;
  if (c.num_classes > 0) {
    std::string names;
    for (int k = 0; k < c.num_classes; ++k) {
      if (model.label(k) == text) return k;
      names += (k ? ", " : "") + model.label(k);
    }
    throw Error(what + ": no class \"" + text + "\" (the classes are " + names + ")");
  }
  InputOptions o;
  o.what = what;
  const PreparedInput in = prepare_text(model, text, o);
  std::vector<int> ids;
  std::string pieces;
  for (size_t t = 0; t < in.ids.size(); ++t)
    if (!in.special[t]) ids.push_back(in.ids[t]), pieces += (pieces.empty() ? "" : " | ") + in.tokens[t];
  if (ids.size() != 1)
    throw Error(what + " \"" + text + "\" is " + std::to_string(ids.size()) + " tokens (" + pieces +
                "), not one: give one token (a leading space matters to byte-level tokenizers) or its id");
  return ids[0];
}

double logit_difference(const Model& model, const ForwardResult& r, int answer, int wrong) {
  const ModelConfig& c = model.config;
  std::vector<float> logits;
  if (c.num_classes > 0)
    logits = r.logits;
  else if (c.lm_head)
    logits = next_token_logits(model, r.hidden, static_cast<int>(r.hidden.dim(0)) - 1);
  else
    throw Error("activation patching reads a prediction: this model has neither a classifier nor an LM head");
  const int n = static_cast<int>(logits.size());
  for (int id : {answer, wrong})
    if (id < 0 || id >= n)
      throw Error((c.num_classes > 0 ? "no class " : "no token id ") + std::to_string(id) + " (the model has " +
                  std::to_string(n) + ")");
  return static_cast<double>(logits[static_cast<size_t>(answer)]) - logits[static_cast<size_t>(wrong)];
}

namespace {

// What both kinds of patching check first; returns the hook name patched within each block.
const char* check_pair(const Model& model, const ForwardRequest& clean, const ForwardRequest& corrupted, int answer,
                       int wrong, PatchTarget what) {
  const ModelConfig& c = model.config;
  const size_t T = clean.ids.size();
  if (corrupted.ids.size() != T)
    throw Error("clean and corrupted inputs must have the same number of tokens: the clean one has " +
                std::to_string(T) + ", the corrupted one " + std::to_string(corrupted.ids.size()));
  if (answer == wrong)
    throw Error("the answer and the one it is measured against are the same (" + std::to_string(answer) +
                "): their logit difference is always 0");
  if (what == PatchTarget::MlpOut && c.ff_dim == 0) throw Error("--what mlp_out: this model has no MLP");
  return what == PatchTarget::ResidPre  ? "hook_resid_pre"
         : what == PatchTarget::AttnOut ? "hook_attn_out"
         : what == PatchTarget::MlpOut  ? "hook_mlp_out"
         : what == PatchTarget::Z       ? "attn.hook_z"
                                        : "attn.hook_pattern";
}

// m(clean) - m(corrupted), refused when the two runs agree to float32 rounding of the logits:
// there is nothing to restore.
double checked_span(const PatchResult& p) {
  const double span = p.clean - p.corrupted;
  const double tiny = 1e-5 * std::max({1.0, std::fabs(p.clean), std::fabs(p.corrupted)});
  if (std::fabs(span) < tiny)
    throw Error("the clean and corrupted inputs give the same logit difference (" + std::to_string(p.clean) +
                "): there is nothing for a patch to restore");
  return span;
}

// The patched runs of one layer can run as one batch (B sequences of T rows through the layer
// plan, as training runs them) when the attention needs no per-query mask beyond causality: no
// mask at all, or exactly the causal one, no additive terms, no ablated heads, host fp32 ops.
bool batchable(const Model& model, const ForwardRequest& r, const Backend& backend, bool& causal) {
  if (backend.name() != "cpu" || !r.ablate.empty()) return false;
  const AttnMask m = self_attention_mask(model, r);
  if (!m.additive.empty() || m.sliding) return false;  // a per-layer window is not the causal mask alone
  causal = !m.blocked.empty();
  if (!causal) return true;
  for (int p = 0; p < m.planes; ++p)
    for (int i = 0; i < m.T; ++i)
      for (int j = 0; j < m.S; ++j)
        if ((m.blocked[m.index(p, i, j)] != 0) != (j > i)) return false;
  return true;
}

// The metric of B copies of the corrupted run resumed at layer l from its input x_l [T, E], copy
// b changed by edits[b] (positions within its own sequence; a layer-input edit is applied before
// the layer, the others through the layer's hooks).
std::vector<double> batched_metrics(const Model& model, Ops& ops, const LayerPlan& plan, const Tensor& x_l, int l,
                                    const std::vector<HookEdit>& edits, bool causal, int answer, int wrong,
                                    const std::vector<uint8_t>& pad) {
  const ModelConfig& c = model.config;
  const int B = static_cast<int>(edits.size()), T = static_cast<int>(x_l.dim(0)), E = c.embed_size;
  Tensor x({static_cast<int64_t>(B) * T, E});
  for (int b = 0; b < B; ++b) std::copy(x_l.data.begin(), x_l.data.end(), x.ptr() + static_cast<int64_t>(b) * T * E);
  HookSpec inside;  // the edits within layer l, moved to their sequence's rows
  for (int b = 0; b < B; ++b) {
    HookEdit e = edits[static_cast<size_t>(b)];
    std::vector<int> rows;
    if (e.positions.empty())
      for (int t = 0; t < T; ++t) rows.push_back(b * T + t);
    else
      for (int t : e.positions) rows.push_back(b * T + t);
    if (e.name.size() > 14 && e.name.compare(e.name.size() - 14, 14, "hook_resid_pre") == 0) {
      const int64_t width = static_cast<int64_t>(e.value.data.size()) / static_cast<int64_t>(rows.size());
      for (size_t r = 0; r < rows.size(); ++r)
        std::copy_n(e.value.ptr() + static_cast<int64_t>(r) * width, width,
                    x.ptr() + static_cast<int64_t>(rows[r]) * E);
      continue;
    }
    e.positions = rows;
    inside.edits.push_back(std::move(e));
  }
  AttnArgs attn = attention_args(c, model.weights, B, T, T);
  attn.causal = causal;
  LayerState state;
  std::optional<HookRun> hooks;
  if (!inside.edits.empty()) hooks.emplace(inside);
  for (int k = l; k < c.num_layers; ++k) {
    LayerRun run;
    run.layer = k;
    if (k == l && hooks) run.hooks = &*hooks;
    layer_forward(c, plan, model.weights.layers[static_cast<size_t>(k)], ops, attn, x, state, run);
  }
  if (hooks) hooks->check_all_met();
  NormState norm;
  final_forward(model, ops, x, norm);
  std::vector<double> m(static_cast<size_t>(B));
  if (c.num_classes > 0) {
    std::vector<uint8_t> is_pad;
    for (int b = 0; b < B; ++b) is_pad.insert(is_pad.end(), pad.begin(), pad.end());
    HeadState head;
    const Tensor logits = head_forward(model, ops, x, is_pad, B, T, head);
    for (int b = 0; b < B; ++b)
      m[static_cast<size_t>(b)] = static_cast<double>(logits.at(b, answer)) - logits.at(b, wrong);
  } else {
    Tensor last({B, E});
    for (int b = 0; b < B; ++b)
      std::copy_n(x.ptr() + (static_cast<int64_t>(b) * T + T - 1) * E, E, last.ptr() + static_cast<int64_t>(b) * E);
    const Tensor logits = lm_logits(model, ops, last);
    for (int b = 0; b < B; ++b)
      m[static_cast<size_t>(b)] = static_cast<double>(logits.at(b, answer)) - logits.at(b, wrong);
  }
  return m;
}

}  // namespace

PatchResult activation_patching(const Model& model, Backend& backend, const ForwardRequest& clean,
                                const ForwardRequest& corrupted, int answer, int wrong, PatchTarget what,
                                const std::function<void(int, int)>& progress, const std::atomic<bool>* cancel) {
  const ModelConfig& c = model.config;
  const int T = static_cast<int>(clean.ids.size()), L = c.num_layers, H = c.num_heads;
  const char* hook = check_pair(model, clean, corrupted, answer, wrong, what);
  auto name_at = [&](int l) { return "blocks." + std::to_string(l) + "." + hook; };
  // the clean run keeps what is patched in; the corrupted run keeps every layer's input, where
  // each patched run resumes
  HookSpec keep_clean, keep_corrupted;
  keep_clean.cache = {std::string("blocks.*.") + hook};
  keep_corrupted.cache = {"blocks.*.hook_resid_pre"};
  ForwardRequest rc = clean, rk = corrupted;
  rc.hooks = &keep_clean, rk.hooks = &keep_corrupted;
  rc.keep_attention = rk.keep_attention = std::vector<bool>(static_cast<size_t>(L), false);
  const ForwardResult clean_run = run_forward(model, backend, rc), corrupted_run = run_forward(model, backend, rk);
  PatchResult out;
  out.clean = logit_difference(model, clean_run, answer, wrong);
  out.corrupted = logit_difference(model, corrupted_run, answer, wrong);
  const double span = checked_span(out);

  const bool per_head = what == PatchTarget::Z || what == PatchTarget::Pattern;
  const int cols = per_head ? H : T;
  out.values = Tensor({L, cols});
  // One edit per cell: the clean value of one position's row, or one head's columns everywhere
  // (z), or one head's attention pattern, every query row (pattern).
  auto edit_for = [&](int l, int j) {
    const Tensor& clean_value = clean_run.cache.at(name_at(l));
    const int64_t width = static_cast<int64_t>(clean_value.data.size()) / T;
    HookEdit e;
    e.name = name_at(l);
    if (what == PatchTarget::Pattern) {  // [heads, T, S]: head j's T x S block
      const int64_t block = static_cast<int64_t>(T) * clean_value.dim(2);
      e.head = j;
      e.value = Tensor({T, clean_value.dim(2)});
      std::copy_n(clean_value.ptr() + j * block, block, e.value.ptr());
    } else if (what == PatchTarget::Z) {  // head j at every position: its d_head columns of each row
      const int64_t D = clean_value.dim(2);
      e.head = j;
      e.value = Tensor({T, D});
      for (int t = 0; t < T; ++t)
        std::copy_n(clean_value.ptr() + t * width + j * D, D, e.value.ptr() + static_cast<int64_t>(t) * D);
    } else {  // position j
      e.positions = {j};
      e.value = Tensor({1, width});
      std::copy_n(clean_value.ptr() + static_cast<int64_t>(j) * width, width, e.value.ptr());
    }
    return e;
  };
  int done = 0;
  bool causal = false;
  if (what != PatchTarget::Pattern && batchable(model, corrupted, backend, causal)) {
    // Each layer's patched runs as batches of up to 4,096 rows: the products see B * T rows
    // instead of T, which is where a short input's time goes. A resid_pre patch that makes the
    // layer input equal to the clean run's (or leaves it the corrupted run's) is that run: its
    // metric is taken, not recomputed, so the changed token at layer 0 restores exactly 1.
    auto ops = make_cpu_ops();
    ops->set_weights_version(model.weights.version);
    const LayerPlan plan = make_layer_plan(c);
    const std::vector<uint8_t> pad = pad_flags(model, corrupted.ids);
    const int chunk = std::max(1, 4096 / std::max(T, 1));
    for (int l = 0; l < L; ++l) {
      const Tensor& x_l = corrupted_run.cache.at("blocks." + std::to_string(l) + ".hook_resid_pre");
      const Tensor& clean_l = clean_run.cache.at(name_at(l));
      for (int j0 = 0; j0 < cols; j0 += chunk) {
        if (cancel && cancel->load()) throw Cancelled();
        std::vector<HookEdit> edits;
        std::vector<int> which;
        for (int j = j0; j < std::min(cols, j0 + chunk); ++j) {
          if (what == PatchTarget::ResidPre) {
            const int64_t E = x_l.dim(1);
            const bool same_row =
                std::equal(clean_l.ptr() + static_cast<int64_t>(j) * E, clean_l.ptr() + static_cast<int64_t>(j + 1) * E,
                           x_l.ptr() + static_cast<int64_t>(j) * E);
            bool rest_clean = true;  // every other row of the corrupted input equals the clean one
            for (int t = 0; t < T && rest_clean; ++t)
              rest_clean = t == j || std::equal(clean_l.ptr() + static_cast<int64_t>(t) * E,
                                                clean_l.ptr() + static_cast<int64_t>(t + 1) * E,
                                                x_l.ptr() + static_cast<int64_t>(t) * E);
            if (same_row || rest_clean) {
              out.values.at(l, j) = same_row ? 0.0f : 1.0f;
              continue;
            }
          }
          edits.push_back(edit_for(l, j));
          which.push_back(j);
        }
        if (!edits.empty()) {
          const std::vector<double> m = batched_metrics(model, *ops, plan, x_l, l, edits, causal, answer, wrong, pad);
          for (size_t k = 0; k < which.size(); ++k)
            out.values.at(l, which[k]) = static_cast<float>((m[k] - out.corrupted) / span);
        }
        done += std::min(cols, j0 + chunk) - j0;
        if (progress) progress(done, L * cols);
      }
    }
    return out;
  }
  for (int l = 0; l < L; ++l) {
    for (int j = 0; j < cols; ++j) {
      if (cancel && cancel->load()) throw Cancelled();
      HookSpec spec;
      spec.edits.push_back(edit_for(l, j));
      ForwardRequest r = corrupted;
      r.hooks = &spec;
      r.start = &corrupted_run.cache.at("blocks." + std::to_string(l) + ".hook_resid_pre");
      r.first_layer = l;
      r.keep_attention = std::vector<bool>(static_cast<size_t>(L), false);
      const double m = logit_difference(model, run_forward(model, backend, r), answer, wrong);
      out.values.at(l, j) = static_cast<float>((m - out.corrupted) / span);
      if (progress) progress(++done, L * cols);
    }
  }
  return out;
}

PatchResult attribution_patching(const Model& model, Backend& backend, const ForwardRequest& clean,
                                 const ForwardRequest& corrupted, int answer, int wrong, PatchTarget what) {
  const ModelConfig& c = model.config;
  const int T = static_cast<int>(clean.ids.size()), L = c.num_layers, H = c.num_heads;
  const std::string keep = std::string("blocks.*.") + check_pair(model, clean, corrupted, answer, wrong, what);
  // the clean run: its activations (any backend)
  HookSpec keep_clean;
  keep_clean.cache = {keep};
  ForwardRequest rc = clean;
  rc.hooks = &keep_clean;
  rc.keep_attention = std::vector<bool>(static_cast<size_t>(L), false);
  const ForwardResult clean_run = run_forward(model, backend, rc);
  // the corrupted run, forward and backward: its activations and d m / d them
  GradientOptions o;
  o.target = answer, o.wrong = wrong;
  if (what != PatchTarget::Pattern) o.hooks = {keep};  // the pattern and its gradient: probs, dprobs
  const PredictionGradients g = prediction_gradients(model, corrupted, o);
  PatchResult out;
  out.clean = logit_difference(model, clean_run, answer, wrong);
  out.corrupted = g.y;
  const double span = checked_span(out);
  const bool per_head = what == PatchTarget::Z || what == PatchTarget::Pattern;
  const int cols = per_head ? H : T;
  out.values = Tensor({L, cols});
  if (what == PatchTarget::Pattern) {  // sum over head j's T x S block of (P_clean - P_corr) dP
    for (int l = 0; l < L; ++l) {
      const Tensor &P_clean = clean_run.cache.at("blocks." + std::to_string(l) + ".attn.hook_pattern"),
                   &P_corr = g.probs[static_cast<size_t>(l)], &dP = g.dprobs[static_cast<size_t>(l)];
      const size_t block = P_corr.data.size() / static_cast<size_t>(H);
      for (int h = 0; h < H; ++h) {
        double acc = 0;
        for (size_t k = h * block; k < (h + 1) * block; ++k)
          acc += (static_cast<double>(P_clean.data[k]) - P_corr.data[k]) * dP.data[k];
        out.values.at(l, h) = static_cast<float>(acc / span);
      }
    }
    return out;
  }
  for (const auto& [name, grad] : g.gradients) {
    const int l = std::stoi(name.substr(7));  // "blocks.{l}."
    const Tensor &a_clean = clean_run.cache.at(name), &a_corr = g.activations.at(name);
    const int64_t width = static_cast<int64_t>(grad.data.size()) / T;
    const int64_t D = what == PatchTarget::Z ? grad.dim(2) : width;  // the columns one entry sums
    std::vector<double> acc(static_cast<size_t>(cols), 0.0);
    for (int t = 0; t < T; ++t)
      for (int64_t e = 0; e < width; ++e) {
        const int64_t k = t * width + e;
        const double term = (static_cast<double>(a_clean.data[k]) - a_corr.data[k]) * grad.data[k];
        acc[static_cast<size_t>(what == PatchTarget::Z ? e / D : t)] += term;
      }
    for (int j = 0; j < cols; ++j) out.values.at(l, j) = static_cast<float>(acc[static_cast<size_t>(j)] / span);
  }
  return out;
}

}  // namespace attnlab
