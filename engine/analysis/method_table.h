// Every analysis method, listed once (as CLBlast lists its kernels' parameters as rows): its name
// (the CLI's), the other names it answers to (the app's, the papers'), what it returns, which
// models it needs and where it is offered. The CLI's `analyze --method`, the app's `--method` and
// the Beyond attention page all read it; a new method is a row plus its code. No Qt.
#pragma once

#include <string>
#include <vector>

#include "engine/analysis/methods.h"

namespace attnlab {

enum class MethodId {
  Rollout,
  GradAttention,
  ValueNorm,
  MeanHeads,
  MeanLayers,
  HeadImportance,
  HeadPatterns,
  LogitLens,
  Induction,
  PreviousToken,
  DuplicateToken,
  LogitAttribution,
  SelectedQueries,
  SelectedKeys,
  Compare,
};

struct MethodRow {
  MethodId id;
  const char* name;                  // canonical: the CLI's --method
  std::vector<const char*> aliases;  // other names accepted everywhere (the app's, the papers')
  const char* shape;                 // what it returns, e.g. "[T, T]"
  const char* value;                 // what a cell holds (a map's colour-bar title)
  bool needs_prediction;             // a classifier or a language model (a logit to explain)
  bool cli;                          // attnlab-cli analyze --method NAME
  bool from_probabilities;           // read from the probabilities alone: works on an attention file
  int page_index;                    // position on the Beyond attention page, -1: not there
};

// The rows, in MethodId's order (checked in method_table.cpp).
const std::vector<MethodRow>& method_table();
const MethodRow& method_row(MethodId id);
// The row whose name or alias is `name`; Error naming the choices (CLI rows, or page rows) if none.
const MethodRow& find_method(const std::string& name, bool for_page = false);
// "rollout, grad-attention, ..." : the CLI's names, or the page's in page order.
std::string method_names(bool for_page = false);

// The [T, T] / [L, H, T, T] / [L, T, T] maps, computed the one way both the CLI and the app do:
// rollout, grad-attention (target < 0: the prediction; *used gets the one explained), value-norm,
// mean-heads, mean-layers. Error for a method that is not a map of one input.
// A map method's result read from a pass's (or an attention file's) probabilities alone, with no
// model: rollout, mean-heads, mean-layers (the rows with from_probabilities that are maps). Error
// naming those for any other, and for cross attention.
Tensor probability_map(MethodId id, const ForwardResult& result);

Tensor compute_method_map(MethodId id, const Model& model, Backend& backend, const ForwardRequest& request,
                          int target = -1, int* used = nullptr);

}  // namespace attnlab
