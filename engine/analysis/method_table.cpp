// The analysis methods' table (see the header) and the one dispatch of the map methods.
#include "engine/analysis/method_table.h"

#include <algorithm>

namespace attnlab {

const std::vector<MethodRow>& method_table() {
  static const std::vector<MethodRow> rows = {
      {MethodId::Rollout, "rollout", {"attention-rollout"}, "[T, T]", "rollout", false, true, true, 0},
      {MethodId::GradAttention, "grad-attention", {"relevance"}, "[T, T]", "relevance", true, true, false, 1},
      {MethodId::ValueNorm,
       "value-norm",
       {"value-weighted", "norm-based"},
       "[L, H, T, T]",
       "norm-weighted attention",
       false,
       true,
       false,
       2},
      {MethodId::MeanHeads, "mean-heads", {}, "[L, T, T]", "mean probability", false, true, true, 3},
      {MethodId::MeanLayers, "mean-layers", {}, "[T, T]", "mean probability", false, true, true, 4},
      {MethodId::HeadImportance,
       "head-importance",
       {"importance"},
       "[L, H]",
       "probability drop",
       true,
       true,
       false,
       -1},
      {MethodId::HeadPatterns, "head-patterns", {}, "table (--json)", "", false, true, true, -1},
      {MethodId::LogitLens, "logit-lens", {"lens"}, "[2, L, T]", "top token, probability", true, true, false, -1},
      {MethodId::Induction, "induction", {"induction-score"}, "[L, H]", "induction score", false, true, false, -1},
      {MethodId::PreviousToken,
       "previous-token",
       {"prev-token"},
       "[L, H]",
       "previous-token score",
       false,
       true,
       false,
       -1},
      {MethodId::DuplicateToken, "duplicate-token", {}, "[L, H]", "duplicate-token score", false, true, false, -1},
      {MethodId::LogitAttribution,
       "logit-attribution",
       {"dla", "direct-logit-attribution"},
       "[L, H + 1]",
       "direct contribution to the logit difference",
       true,
       true,
       false,
       -1},
      {MethodId::SelectedQueries, "selected-queries", {}, "[H, T]", "summed probability", false, false, true, 5},
      {MethodId::SelectedKeys, "selected-keys", {}, "[H, T]", "summed probability", false, false, true, 6},
      {MethodId::Compare, "compare", {}, "[L, H, T, T]", "difference (A - B)", false, false, false, 7},
  };
  return rows;
}

namespace {
// The rows stand in MethodId's order, and the page's indices run 0, 1, 2, ... without gaps.
bool table_is_consistent() {
  const auto& rows = method_table();
  int page = 0;
  for (size_t k = 0; k < rows.size(); ++k) {
    if (static_cast<size_t>(rows[k].id) != k) return false;
    if (rows[k].page_index >= 0) ++page;
  }
  for (int p = 0; p < page; ++p) {
    int found = 0;
    for (const auto& r : rows) found += r.page_index == p;
    if (found != 1) return false;
  }
  return rows.size() == static_cast<size_t>(MethodId::Compare) + 1;
}
}  // namespace

const MethodRow& method_row(MethodId id) {
  static const bool ok = table_is_consistent();
  if (!ok) throw Error("internal: the analysis method table is out of order");
  return method_table().at(static_cast<size_t>(id));
}

std::string method_names(bool for_page) {
  std::vector<const MethodRow*> shown;
  for (const auto& r : method_table())
    if (for_page ? r.page_index >= 0 : r.cli) shown.push_back(&r);
  if (for_page)
    std::sort(shown.begin(), shown.end(),
              [](const MethodRow* a, const MethodRow* b) { return a->page_index < b->page_index; });
  std::string out;
  for (const MethodRow* r : shown) out += (out.empty() ? "" : ", ") + std::string(r->name);
  return out;
}

const MethodRow& find_method(const std::string& name, bool for_page) {
  for (const auto& r : method_table()) {
    if (for_page ? r.page_index < 0 : !r.cli) continue;
    bool match = name == r.name;
    for (const char* a : r.aliases) match = match || name == a;
    if (match) return method_row(r.id);
  }
  // the names the user may know too: "grad-attention (relevance)"
  std::string names;
  for (const auto& r : method_table()) {
    if (for_page ? r.page_index < 0 : !r.cli) continue;
    std::string also;
    for (const char* a : r.aliases) also += (also.empty() ? " (" : ", ") + std::string(a);
    names += (names.empty() ? "" : ", ") + std::string(r.name) + (also.empty() ? "" : also + ")");
  }
  throw Error("expected one of " + names + ", got \"" + name + "\"");
}

Tensor probability_map(MethodId id, const ForwardResult& result) {
  const MethodRow& row = method_row(id);
  if (!row.from_probabilities) {
    std::string names;
    for (const auto& r : method_table())
      if (r.from_probabilities && r.cli) names += (names.empty() ? "" : ", ") + std::string(r.name);
    throw Error(std::string(row.name) + " needs a model (its weights or a prediction); attention alone gives " + names);
  }
  if (id != MethodId::Rollout && id != MethodId::MeanHeads && id != MethodId::MeanLayers)
    throw Error(std::string("internal: ") + row.name + " is not a map of one input's probabilities");
  if (result.is_cross())
    throw Error(std::string(row.name) + " reads self-attention; this attention is cross attention");
  if (id == MethodId::Rollout) return rollout_of(result.attention);
  const Tensor all = result.stacked_probs();
  return id == MethodId::MeanHeads ? mean_over_heads(all) : mean_over_layers(all);
}

Tensor compute_method_map(MethodId id, const Model& model, Backend& backend, const ForwardRequest& request, int target,
                          int* used) {
  switch (id) {
    case MethodId::Rollout:
      return attention_rollout(model, backend, request);
    case MethodId::GradAttention:
      return grad_attention(model, request, target, used);
    case MethodId::ValueNorm:
      return value_norm_attention(model, backend, request);
    case MethodId::MeanHeads:
    case MethodId::MeanLayers: {
      ForwardRequest full = request;
      full.keep_attention.clear();
      const Tensor all = run_forward(model, backend, full).stacked_probs();
      return id == MethodId::MeanHeads ? mean_over_heads(all) : mean_over_layers(all);
    }
    default:
      throw Error(std::string("internal: ") + method_row(id).name + " is not a map of one input");
  }
}

}  // namespace attnlab
