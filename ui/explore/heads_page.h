// HeadsPage: every head of the current layer as one grid that shares its token axes (BertViz's
// single token column, matplotlib's sharex / sharey): query tokens once per grid row, key tokens
// once under each column, one colour bar, the axis titles once; the maps keep their matrix's
// shape (square cells) and take the page. A badge after a head's name says what it mostly
// attends to; double-click enlarges a head, right-click ablates it.
#pragma once

#include <QRect>
#include <QSize>
#include <vector>

#include "ui/explore/explore_page.h"

class QAction;
class QCustomPlot;
class QCPColorScale;

namespace attnlab {

class HeatmapView;
class AxisTitle;

// Where a grid of n maps of T x S cells goes in a page: the column count and the maps' size that
// give the largest maps with square cells (the shape clamped to 1:4), preferring full rows (while
// they keep 60% of the largest maps' area) and then balanced ones (4 maps 2 x 2, 12 maps 4 x 3 or
// 6 x 2, within 70% of the best full-row area).
struct HeadGridPlan {
  int cols = 1, rows = 1;
  int map_w = 0, map_h = 0;  // pixels of every map
};
// room: the page's size less the bands (labels, titles, colour bar); title: a map's title row;
// gap: between maps.
HeadGridPlan plan_head_grid(int n, int T, int S, QSize room, int title, int gap);

class HeadsPage : public ExplorePage {
  Q_OBJECT
 public:
  explicit HeadsPage(ExploreState* state, QWidget* parent = nullptr);
  HeatmapView* view(int head) const { return heads_.at(static_cast<size_t>(head)); }
  int count() const { return static_cast<int>(heads_.size()); }
  const HeadGridPlan& plan() const { return plan_; }
  int labelSides() const { return sides_; }  // 2: labels alternate between opposite sides
  QString rowTitle() const;                  // "queries (every 2nd)": the grid's axis titles
  QString colTitle() const;
  QCPColorScale* colourBar() const { return bar_scale_; }

 protected:
  void refresh() override;
  void modelChanged() override;
  void resizeEvent(QResizeEvent* e) override;

 private:
  void layoutGrid();
  void applyDisplay();

  std::vector<HeatmapView*> heads_;
  std::vector<QAction*> ablate_actions_;  // one per head view
  AxisTitle *row_title_, *col_title_;
  QCustomPlot* bar_;
  QCPColorScale* bar_scale_;
  HeadGridPlan plan_;
  int sides_ = 1;
};

}  // namespace attnlab
