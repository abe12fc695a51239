// The hooks of a pass (see hooks.h): the named values of the layer plan kept or edited, the
// attention's scores and pattern edited row by row, and the names and sizes a model's pass reaches.
#include "engine/compute/plan.h"

#include <algorithm>
#include <cmath>

#include "engine/compute/hooks.h"

namespace attnlab {

namespace {

// Edits of a per-head [heads, T, S] value of one sequence (attn.hook_attn_scores,
// attn.hook_pattern): each replaces (or adds to) one head's rows (h >= 0: `value` is [rows, S];
// h < 0: every head, [H * rows, S] head by head). Returns the (head, row) pairs it changed.
std::vector<std::pair<int, int>> edit_head_rows(const std::string& name, int H, int T, int S,
                                                const std::vector<const HookEdit*>& edits, Tensor& X) {
  std::vector<std::pair<int, int>> changed;
  for (const HookEdit* e : edits) {
    if (e->kind == HookEdit::Kind::Apply)
      throw Error(name + ": a function of a per-head [heads, T, S] value is not supported");
    if (e->head >= H)
      throw Error(name + ": no head " + std::to_string(e->head) + " (it has " + std::to_string(H) + ")");
    std::vector<int> rows = e->positions;
    if (rows.empty())
      for (int t = 0; t < T; ++t) rows.push_back(t);
    for (int t : rows)
      if (t < 0 || t >= T)
        throw Error(name + ": no position " + std::to_string(t) + " (the input has " + std::to_string(T) + ")");
    std::vector<int> heads;
    if (e->head >= 0)
      heads = {e->head};
    else
      for (int h = 0; h < H; ++h) heads.push_back(h);
    const size_t need = heads.size() * rows.size() * static_cast<size_t>(S);
    const bool whole =
        e->head < 0 && e->value.data.size() == static_cast<size_t>(H) * T * S && rows.size() != static_cast<size_t>(T);
    if (e->value.data.size() != need && !whole)
      throw Error(name + ": the " + (e->kind == HookEdit::Kind::Add ? "added" : "patched") + " value has " +
                  std::to_string(e->value.data.size()) + " numbers; " + std::to_string(heads.size()) + " head(s) x " +
                  std::to_string(rows.size()) + " position(s) x " + std::to_string(S) + " keys need " +
                  std::to_string(need));
    for (size_t hi = 0; hi < heads.size(); ++hi)
      for (size_t r = 0; r < rows.size(); ++r) {
        const int h = heads[hi], t = rows[r];
        float* dst = X.ptr() + (static_cast<int64_t>(h) * T + t) * S;
        const float* src = e->value.ptr() + (whole ? (static_cast<int64_t>(h) * T + t) * S
                                                   : (static_cast<int64_t>(hi) * rows.size() + r) * S);
        for (int j = 0; j < S; ++j) dst[j] = e->kind == HookEdit::Kind::Replace ? src[j] : dst[j] + e->alpha * src[j];
        changed.emplace_back(h, t);
      }
  }
  return changed;
}

// Row t of head h of P from its scores as the attention op takes them: softmax over the keys,
// exp(-inf) = 0 (a row whose scores are all -inf is all 0, as a fully blocked row).
void softmax_row(const float* scores, int S, float* p) {
  double best = -INFINITY, sum = 0;
  for (int j = 0; j < S; ++j) best = std::max(best, static_cast<double>(scores[j]));
  if (best == -INFINITY) return std::fill(p, p + S, 0.0f);
  for (int j = 0; j < S; ++j) sum += std::exp(scores[j] - best);
  for (int j = 0; j < S; ++j) p[j] = static_cast<float>(std::exp(scores[j] - best) / sum);
}

}  // namespace

namespace plan_detail {

// A named value of the plan just computed: its edits applied and, when asked for, a copy kept
// (hooks.h), shaped [T, heads, d_head] for the per-head values as TransformerLens shapes them.
void visit_hook(const LayerPlan& plan, const AttnArgs& a, const LayerRun& run, int value, Tensor& t) {
  const char* hook = plan.hooks[static_cast<size_t>(value)];
  if (!hook) return;
  const std::string name = "blocks." + std::to_string(run.layer) + "." + hook;
  if (!run.hooks->wanted(name)) return run.hooks->met.insert(name), void();
  const std::string h = hook;
  std::vector<int64_t> shape = t.shape;
  if (h == "attn.hook_q" || h == "attn.hook_rot_q" || h == "attn.hook_z") shape = {t.dim(0), a.H, a.D};
  if (h == "attn.hook_k" || h == "attn.hook_v" || h == "attn.hook_rot_k") shape = {t.dim(0), a.kv_heads(), a.D};
  run.hooks->visit(name, t, shape);
}

// The hooks of one attention (a single sequence): attn.hook_attn_scores kept or edited (an edited
// row's probabilities are its softmax), then attn.hook_pattern edited; every changed row's context
// is computed again from its new probabilities: ctx_t = sum_j P_tj v_j.
void attention_hooks(const std::string& block, const AttnArgs& a, const Tensor& Q, const Tensor& K, const Tensor& V,
                     HookRun& hooks, Tensor* P, Tensor& ctx) {
  const int T = a.T, S = a.keys(), H = a.H, D = a.D;
  std::vector<std::pair<int, int>> changed;
  const std::string scores_name = block + "attn.hook_attn_scores", pattern_name = block + "attn.hook_pattern";
  hooks.met.insert(scores_name);
  if (hooks.wanted(scores_name)) {
    Tensor sc = attention_scores(a, Q, K);
    changed = edit_head_rows(scores_name, H, T, S, hooks.edits_of(scores_name), sc);
    for (const auto& [h, t] : changed) {
      const int64_t row = (static_cast<int64_t>(h) * T + t) * S;
      softmax_row(sc.ptr() + row, S, P->ptr() + row);
    }
    sc.shape = {H, T, S};
    if (hooks.kept(scores_name)) hooks.cache[scores_name] = std::move(sc);
  }
  if (changed.empty() && hooks.edits_of(pattern_name).empty()) return;  // kept only: P and ctx unchanged
  const std::vector<std::pair<int, int>> edited =
      edit_head_rows(pattern_name, H, T, S, hooks.edits_of(pattern_name), *P);
  changed.insert(changed.end(), edited.begin(), edited.end());
  const int64_t cw = ctx.dim(1);
  for (const auto& [h, t] : changed) {  // the head's context at t from its new row
    const float* p = P->ptr() + (static_cast<int64_t>(h) * T + t) * S;
    const int g = a.kv_head(h);
    for (int d = 0; d < D; ++d) {
      double acc = 0;
      for (int j = 0; j < S; ++j) acc += static_cast<double>(p[j]) * V.at(j, static_cast<int64_t>(g) * D + d);
      ctx.ptr()[static_cast<int64_t>(t) * cw + static_cast<int64_t>(h) * D + d] = static_cast<float>(acc);
    }
  }
}

}  // namespace plan_detail

std::vector<std::string> hook_names(const ModelConfig& c) {
  const LayerPlan plan = make_layer_plan(c);
  std::vector<std::string> names = embed_hook_names(c);
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    names.push_back(b + plan.hooks[0]);
    for (const Step& s : plan.steps) {
      if (s.op == OpKind::Attention)
        names.push_back(b + "attn.hook_attn_scores"), names.push_back(b + "attn.hook_pattern");
      if (plan.hooks[static_cast<size_t>(s.out)]) names.push_back(b + plan.hooks[static_cast<size_t>(s.out)]);
    }
  }
  if (c.final_norm) names.push_back("ln_final.hook_normalized");
  return names;
}

int64_t hook_numel(const ModelConfig& c, const std::string& name, int T, int S) {
  auto ends = [&](const char* suffix) {
    const size_t n = std::char_traits<char>::length(suffix);
    return name.size() >= n && name.compare(name.size() - n, n, suffix) == 0;
  };
  const int64_t t = T, D = c.head_dim();
  if (ends("attn.hook_pattern") || ends("attn.hook_attn_scores"))
    return static_cast<int64_t>(c.num_heads) * t * (S > 0 ? S : T);
  if (ends("attn.hook_q") || ends("attn.hook_rot_q") || ends("attn.hook_z")) return t * c.num_heads * D;
  if (ends("attn.hook_k") || ends("attn.hook_v") || ends("attn.hook_rot_k")) return t * c.kv_heads() * D;
  if (ends("mlp.hook_pre") || ends("mlp.hook_post") || ends("mlp.hook_pre_linear")) return t * c.ff_dim;
  return t * c.embed_size;
}

}  // namespace attnlab
