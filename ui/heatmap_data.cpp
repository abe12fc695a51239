// Heatmap data builders (no widgets: safe on worker threads).
#include "ui/heatmap_data.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnlab {

namespace {

int pool_factor(int n, int max_cells) {
  return std::max(1, static_cast<int>(std::ceil(n / static_cast<double>(std::max(1, max_cells)))));
}

void set_factors(HeatmapData& d, int max_cells) {
  d.row_factor = pool_factor(d.rows, max_cells);
  d.col_factor = pool_factor(d.cols, max_cells);
  d.drawn_rows = (d.rows + d.row_factor - 1) / d.row_factor;
  d.drawn_cols = (d.cols + d.col_factor - 1) / d.col_factor;
}

// Pools rows first..rows-1 into d.drawn (max of each block's visible cells; NaN where all are
// blocked): `values` is row `first`'s start, rows d.cols apart. The drawn rows above first come
// from `previous` (the same factors; first a multiple of the row factor), NaN past its columns,
// with their row tops. vmax: the largest row top, or (no query sees two keys) the largest value.
void draw(HeatmapData& d, int max_cells, const float* values, int first = 0, const HeatmapData* previous = nullptr) {
  set_factors(d, max_cells);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int fc = d.col_factor, dc = d.drawn_cols;
  const int kept = previous ? first / d.row_factor : 0;  // drawn rows taken as they are
  if (kept > 0 && previous->drawn_cols == dc) {          // one copy (typing within a column block)
    d.drawn.reserve(static_cast<size_t>(d.drawn_rows) * dc);
    d.drawn.assign(previous->drawn.begin(), previous->drawn.begin() + static_cast<std::ptrdiff_t>(kept) * dc);
  } else {
    // keys past the earlier text stay NaN: blocked for its rows (causal)
    d.drawn.assign(static_cast<size_t>(kept) * dc, nan);
    const int pc = std::min(previous ? previous->drawn_cols : 0, dc);
    for (int i = 0; i < kept; ++i)
      std::copy_n(previous->drawn.data() + static_cast<size_t>(i) * previous->drawn_cols, pc,
                  d.drawn.data() + static_cast<size_t>(i) * dc);
  }
  d.drawn.resize(static_cast<size_t>(d.drawn_rows) * dc, nan);  // the rows pooled below
  d.row_top.assign(static_cast<size_t>(d.drawn_rows), -1.0f);
  if (kept > 0) std::copy_n(previous->row_top.begin(), kept, d.row_top.begin());
  float any = 0;  // the largest visible value of the rows pooled here
  auto clean = [](float x) { return std::isfinite(x) ? x : 0.0f; };
  for (int i = first; i < d.rows; ++i) {
    float* out = d.drawn.data() + static_cast<size_t>(i / d.row_factor) * dc;
    const float* v = values + static_cast<size_t>(i - first) * d.cols;
    const uint8_t* b = d.blocked ? d.blocked + static_cast<size_t>(i) * d.cols : nullptr;
    float row_max = -std::numeric_limits<float>::infinity();
    int seen = b ? 0 : d.cols;  // the keys this query sees
    for (int c = 0, j0 = 0; c < dc; ++c, j0 += fc) {
      const int j1 = std::min(j0 + fc, d.cols);
      float m = -std::numeric_limits<float>::infinity();
      if (b) {
        for (int j = j0; j < j1; ++j)
          if (!b[j]) m = std::max(m, clean(v[j])), ++seen;
      } else {
        for (int j = j0; j < j1; ++j) m = std::max(m, clean(v[j]));
      }
      if (m == -std::numeric_limits<float>::infinity()) continue;  // every cell of the block blocked
      float& o = out[c];
      if (std::isnan(o) || m > o) o = m;
      row_max = std::max(row_max, m);
    }
    if (row_max == -std::numeric_limits<float>::infinity()) continue;  // a fully blocked row
    any = std::max(any, row_max);
    float& top = d.row_top[static_cast<size_t>(i / d.row_factor)];
    if (seen > 1) top = std::max(top, row_max);
  }
  d.vmax = -1;
  for (const float t : d.row_top) d.vmax = std::max(d.vmax, t);
  if (d.vmax < 0) {  // no query sees two keys: the largest value, the kept rows' included
    for (int k = 0; k < kept * dc; ++k)
      if (d.drawn[static_cast<size_t>(k)] > any) any = d.drawn[static_cast<size_t>(k)];  // NaN compares false
    d.vmax = any;
  }
}

}  // namespace

HeatmapData head_heatmap(const std::shared_ptr<const ForwardResult>& r, int layer, int head, int max_cells) {
  HeatmapData d;
  if (!r->has_probs(layer)) return d;
  const std::shared_ptr<const Tensor> tp = r->layer_probs(layer);  // kept, or recomputed (on demand)
  const Tensor& t = *tp;
  if (t.empty()) return d;
  d.rows = static_cast<int>(t.dim(1));
  d.cols = static_cast<int>(t.dim(2));
  const size_t n = static_cast<size_t>(d.rows) * d.cols;
  // the values live in the result, or in a recomputed layer the result's cache may drop: both held
  d.owner = std::make_shared<std::pair<std::shared_ptr<const ForwardResult>, std::shared_ptr<const Tensor>>>(r, tp);
  d.values = t.data.data() + static_cast<size_t>(head) * n;
  const AttnMask& m = r->mask_of(layer);  // a windowed layer's own (Gemma 2's alternate)
  if (!m.blocked.empty()) d.blocked = m.blocked.data() + static_cast<size_t>(m.plane_of_head(head)) * n;
  draw(d, max_cells, d.values);
  return d;
}

bool extends(const HeatmapData& previous, int rows, int cols, int max_cells, int first) {
  return !previous.drawn.empty() && previous.row_factor == pool_factor(rows, max_cells) &&
         previous.col_factor == pool_factor(cols, max_cells) && first % previous.row_factor == 0 &&
         first <= previous.rows;
}

HeatmapData head_heatmap_rows(const std::shared_ptr<const ForwardResult>& r, int layer, int head, int max_cells,
                              const std::shared_ptr<const Tensor>& rows, int first, const HeatmapData* previous) {
  HeatmapData d;
  if (!rows || rows->empty()) return d;
  d.rows = static_cast<int>(rows->dim(1)) + first;
  d.cols = static_cast<int>(rows->dim(2));
  if (previous && !extends(*previous, d.rows, d.cols, max_cells, first))
    throw Error("internal: a heatmap extended from a map pooled otherwise");
  if (!previous && first != 0)
    throw Error("internal: a heatmap from rows " + std::to_string(first) + " needs the map above them");
  const size_t n = static_cast<size_t>(d.rows) * d.cols;
  const float* from = rows->data.data() + static_cast<size_t>(head) * (d.rows - first) * d.cols;
  if (r->probs(layer).numel() > 0) {  // kept: the map's values are the result's
    d.owner = r;
    d.values = r->probs(layer).data.data() + static_cast<size_t>(head) * n;
  } else {  // on demand: the drawn grid only (a head shown large recomputes its layer)
    d.owner = r;
  }
  const AttnMask& m = r->mask_of(layer);
  if (!m.blocked.empty()) d.blocked = m.blocked.data() + static_cast<size_t>(m.plane_of_head(head)) * n;
  draw(d, max_cells, from, first, previous);
  return d;
}

HeatmapData mask_heatmap(const std::shared_ptr<const ForwardResult>& r, int head, int max_cells) {
  auto values = std::make_shared<std::vector<float>>(static_cast<size_t>(r->mask.T) * r->mask.S, 0.5f);
  HeatmapData d;
  d.rows = r->mask.T;
  d.cols = r->mask.S;
  d.values = values->data();
  if (!r->mask.blocked.empty())
    d.blocked = r->mask.blocked.data() + static_cast<size_t>(r->mask.plane_of_head(head)) * values->size();
  d.owner = std::shared_ptr<const void>(
      new std::pair<std::shared_ptr<const ForwardResult>, std::shared_ptr<std::vector<float>>>(r, values),
      [](const void* p) {
        delete static_cast<const std::pair<std::shared_ptr<const ForwardResult>, std::shared_ptr<std::vector<float>>>*>(
            p);
      });
  draw(d, max_cells, d.values);
  return d;
}

HeatmapData owned_heatmap(std::vector<float> values, std::vector<uint8_t> blocked, int rows, int cols, int max_cells) {
  struct Store {
    std::vector<float> v;
    std::vector<uint8_t> b;
  };
  auto s = std::make_shared<Store>(Store{std::move(values), std::move(blocked)});
  HeatmapData d;
  d.rows = rows;
  d.cols = cols;
  d.values = s->v.data();
  d.blocked = s->b.empty() ? nullptr : s->b.data();
  d.owner = s;
  draw(d, max_cells, d.values);
  return d;
}

void pool_drawn(HeatmapData& d, int max_cells) {
  pool_drawn(d, max_cells, max_cells);
}

void pool_drawn(HeatmapData& d, int max_rows, int max_cols) {
  const int fr = max_rows > 0 ? pool_factor(d.drawn_rows, max_rows) : 1;
  const int fc = max_cols > 0 ? pool_factor(d.drawn_cols, max_cols) : 1;
  if (fr == 1 && fc == 1) return;
  const int r = (d.drawn_rows + fr - 1) / fr, c = (d.drawn_cols + fc - 1) / fc;
  std::vector<float> out(static_cast<size_t>(r) * c, std::numeric_limits<float>::quiet_NaN());
  for (int i = 0; i < d.drawn_rows; ++i)
    for (int j = 0; j < d.drawn_cols; ++j) {
      const float x = d.drawn[static_cast<size_t>(i) * d.drawn_cols + j];
      float& o = out[static_cast<size_t>(i / fr) * c + j / fc];
      if (!std::isnan(x) && (std::isnan(o) || x > o)) o = x;
    }
  d.drawn = std::move(out);
  if (!d.row_top.empty()) {  // each drawn row's top over the rows merged into it
    std::vector<float> top(static_cast<size_t>(r), -1.0f);
    for (int i = 0; i < d.drawn_rows && i < static_cast<int>(d.row_top.size()); ++i)
      top[static_cast<size_t>(i / fr)] = std::max(top[static_cast<size_t>(i / fr)], d.row_top[static_cast<size_t>(i)]);
    d.row_top = std::move(top);
  }
  d.drawn_rows = r;
  d.drawn_cols = c;
  d.row_factor *= fr;
  d.col_factor *= fc;
}

}  // namespace attnlab
