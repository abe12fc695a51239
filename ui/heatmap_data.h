// HeatmapData: what a HeatmapView shows, built by plain functions that run on any thread (the
// forward worker builds them, so the GUI thread never walks millions of cells). Full-resolution
// values are views into a shared, immutable owner (a ForwardResult); the drawn grid is
// max-pooled to at most max_cells per axis (each axis by its own factor), with NaN marking blocks
// whose cells are all blocked.
#pragma once

#include <QStringList>
#include <memory>
#include <vector>

#include "engine/compute/forward.h"

namespace attnlab {

struct HeatmapData {
  int rows = 0, cols = 0;  // full resolution: T queries x S keys
  std::shared_ptr<const void> owner;
  const float* values = nullptr;       // [rows * cols], owned by `owner`; null: the drawn grid only
  const uint8_t* blocked = nullptr;    // [rows * cols] or null
  int row_factor = 1, col_factor = 1;  // drawn cell = row_factor x col_factor full cells (per axis:
                                       // a 2,048 x 4 cross map pools its queries, not its 4 keys)
  int drawn_rows = 0, drawn_cols = 0;
  std::vector<float> drawn;  // [drawn_rows * drawn_cols], max of each block, NaN = all blocked
  // The colour scale's top: the largest visible value of the queries that see more than one key
  // (one that sees a single key gives it all its attention, 1 that says nothing about the head:
  // a causal map's first row), or the largest visible value where no query sees two.
  float vmax = 0;
  std::vector<float> row_top;  // [drawn_rows]: each drawn row's part of vmax (-1: none)
  QStringList row_labels, col_labels;
  QString title;
  QString row_axis = "queries", col_axis = "keys";  // the axis titles
  bool diverging = false;
  bool hatched = false;  // drawn with diagonal hatching over it (an ablated head)  // signed values (differences):
                         // colours centred on 0, -max|v| to +max|v|

  bool empty() const { return rows == 0 || cols == 0; }
  // The full-resolution value; for a map that keeps only its drawn grid (values null: the
  // overview maps of a pass with attention on demand), the value of the drawn block it lies in.
  float value(int i, int j) const {
    if (values) return values[static_cast<size_t>(i) * cols + j];
    const float v = drawn[static_cast<size_t>(i / row_factor) * drawn_cols + j / col_factor];
    return v == v ? v : 0.0f;  // NaN: an all-blocked block
  }
  bool is_blocked(int i, int j) const { return blocked && blocked[static_cast<size_t>(i) * cols + j]; }
};

// One head of one layer of a result (self or cross), pooled to at most max_cells per axis.
HeatmapData head_heatmap(const std::shared_ptr<const ForwardResult>& result, int layer, int head, int max_cells);
// The same map drawn from `rows` ([heads, T - first, S]: the layer's rows from `first` on,
// ForwardResult::layer_rows), the drawn rows above `first` taken from `previous`, the same head's
// map of an earlier pass whose first rows are these (a causal model's rows before a KV-cached
// pass's first position), which must extend() to this one; first = 0 with previous null draws
// every row. The values are the result's kept ones; on demand only the drawn grid is held.
HeatmapData head_heatmap_rows(const std::shared_ptr<const ForwardResult>& result, int layer, int head, int max_cells,
                              const std::shared_ptr<const Tensor>& rows, int first, const HeatmapData* previous);
// Whether a map of rows x cols pooled to max_cells pools as `previous` did, with `first` at the
// start of a drawn row, so that its drawn rows above `first` can be previous's.
bool extends(const HeatmapData& previous, int rows, int cols, int max_cells, int first);
// The effective mask of a result (plane of `head`): visible cells 0.5, blocked NaN.
HeatmapData mask_heatmap(const std::shared_ptr<const ForwardResult>& result, int head, int max_cells);
// Owning variant for values that are not part of a result (tests, the training tab).
HeatmapData owned_heatmap(std::vector<float> values, std::vector<uint8_t> blocked, int rows, int cols, int max_cells);
// Pools an already drawn grid further (max of each block), so that neither axis exceeds max_cells.
void pool_drawn(HeatmapData& d, int max_cells);
// The same with a limit per axis (rows, columns; 0 = no limit).
void pool_drawn(HeatmapData& d, int max_rows, int max_cols);

}  // namespace attnlab
