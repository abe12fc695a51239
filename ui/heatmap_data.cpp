// Heatmap data builders (no widgets: safe on worker threads).
#include "ui/heatmap_data.h"

#include <cmath>
#include <limits>

namespace attnlab {

namespace {

int pool_factor(int n, int max_cells) {
  return std::max(1, static_cast<int>(std::ceil(n / static_cast<double>(std::max(1, max_cells)))));
}

void draw(HeatmapData& d, int max_cells) {
  d.row_factor = pool_factor(d.rows, max_cells);
  d.col_factor = pool_factor(d.cols, max_cells);
  d.drawn_rows = (d.rows + d.row_factor - 1) / d.row_factor;
  d.drawn_cols = (d.cols + d.col_factor - 1) / d.col_factor;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  d.drawn.assign(static_cast<size_t>(d.drawn_rows) * d.drawn_cols, nan);
  d.vmax = 0;
  for (int i = 0; i < d.rows; ++i) {
    float* out = d.drawn.data() + static_cast<size_t>(i / d.row_factor) * d.drawn_cols;
    const float* v = d.values + static_cast<size_t>(i) * d.cols;
    const uint8_t* b = d.blocked ? d.blocked + static_cast<size_t>(i) * d.cols : nullptr;
    for (int j = 0; j < d.cols; ++j) {
      if (b && b[j]) continue;
      const float x = std::isfinite(v[j]) ? v[j] : 0.0f;
      float& o = out[j / d.col_factor];
      if (std::isnan(o) || x > o) o = x;
      if (x > d.vmax) d.vmax = x;
    }
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
  draw(d, max_cells);
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
  draw(d, max_cells);
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
  draw(d, max_cells);
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
  d.drawn_rows = r;
  d.drawn_cols = c;
  d.row_factor *= fr;
  d.col_factor *= fc;
}

}  // namespace attnlab
