// HeadsPage (see heads_page.h).
#include "ui/explore/heads_page.h"

#include <QAction>
#include <QGridLayout>
#include <QTimer>
#include <algorithm>

#include <qcustomplot.h>

#include "ui/heatmap_view.h"

namespace attnlab {

HeadsPage::HeadsPage(ExploreState* state, QWidget* parent)
    : ExplorePage(state, OnResult | OnLayer | OnDisplay | OnAblation, /*eager=*/true, parent) {
  grid_ = new QGridLayout(this);
  grid_->setSpacing(4);
  setToolTip(
      "Every head of the layer. A badge after a head's name says what it mostly attends to (Clark et al. 2019), when "
      "one thing takes more than half its attention on average: prev / next (the neighbouring token), self, first "
      "(or [CLS]), [SEP], punct, → a particular token; broad: spread almost evenly. Double-click a head to enlarge it; "
      "right-click to ablate it.");
}

void HeadsPage::modelChanged() {
  for (HeatmapView* h : heads_) h->deleteLater();
  heads_.clear();
  ablate_actions_.clear();
  grid_cols_ = 0;
  for (int h = 0; h < state_->heads(); ++h) {
    auto* v = new HeatmapView(this);
    v->setMaxCells(256);  // the worker pools to 256 already
    v->setToolTip("Double-click to enlarge");
    connect(v, &HeatmapView::clicked, this, [this, h] { state_->openHead(h); });
    connect(v, &HeatmapView::labelStepsNeeded, this, &HeadsPage::syncLabelSteps, Qt::QueuedConnection);
    auto* act = new QAction("Ablate this head (its probabilities times 0 before they weight the values)", v);
    act->setCheckable(true);
    v->setContextMenuPolicy(Qt::ActionsContextMenu);
    v->addAction(act);
    connect(act, &QAction::triggered, this, [this, h](bool on) { state_->setAblated(state_->layer(), h, on); });
    ablate_actions_.push_back(act);
    heads_.push_back(v);
  }
  layoutGrid();
}

void HeadsPage::applyDisplay() {
  const float top = state_->colourTop(state_->layer());
  for (HeatmapView* h : heads_) {
    h->setGradient(state_->colormap());
    h->setAnnotate(state_->annotate());
    h->setColourTop(top);
  }
}

void HeadsPage::refresh() {
  const int layer = state_->layer();
  for (size_t h = 0; h < heads_.size(); ++h) {
    const int head = static_cast<int>(h);
    heads_[h]->setData(state_->result() ? state_->headMap(layer, head, 0, false) : HeatmapData{});
    if (h < ablate_actions_.size()) ablate_actions_[h]->setChecked(state_->isAblated(layer, head));
  }
  syncLabelSteps();
  applyDisplay();
}

// The column count that gives each head the largest square plot on the page (8 heads at 1280x720:
// 4 x 2; 4 heads: 2 x 2; MiniLM's 12: 4 x 3, no scrolling), redone when the window is resized.
void HeadsPage::layoutGrid() {
  const int n = static_cast<int>(heads_.size());
  if (n == 0) return;
  // a plot's labels, title and colour bar take about 140 px across and 100 px down whatever its size
  const int W = std::max(width(), 200), H = std::max(height(), 150);
  int best_cols = 1, best_side = -1000000;
  for (int c = 1; c <= n; ++c) {
    const int rows = (n + c - 1) / c;
    const int side = std::min(W / c - 140, H / rows - 100);
    if (side >= best_side) best_side = side, best_cols = c;  // ties: more columns
  }
  if (best_cols == grid_cols_) return;
  grid_cols_ = best_cols;
  QTimer::singleShot(0, this, [this] { syncLabelSteps(); });  // once the heads have their new sizes
  for (HeatmapView* v : heads_) grid_->removeWidget(v);
  for (int c = 0; c < grid_->columnCount(); ++c) grid_->setColumnStretch(c, 0);
  for (int r = 0; r < grid_->rowCount(); ++r) grid_->setRowStretch(r, 0);
  for (int h = 0; h < n; ++h) grid_->addWidget(heads_[static_cast<size_t>(h)], h / best_cols, h % best_cols);
  for (int c = 0; c < best_cols; ++c) grid_->setColumnStretch(c, 1);
  for (int r = 0; r < (n + best_cols - 1) / best_cols; ++r) grid_->setRowStretch(r, 1);
}

void HeadsPage::resizeEvent(QResizeEvent* e) {
  ExplorePage::resizeEvent(e);
  QTimer::singleShot(0, this, [this] {  // after the heads have their new sizes
    layoutGrid();
    syncLabelSteps();
  });
}

// One label step for every head of the grid (the densest any of them needs), so all heads show
// the same tokens; one small-cell layout for the whole grid (heads in different rows differ by a pixel).
void HeadsPage::syncLabelSteps() {
  bool small = false;
  for (HeatmapView* h : heads_) small = small || h->plot()->height() < 200 || h->plot()->width() < 220;
  for (HeatmapView* h : heads_) h->setSmallMode(small ? 1 : 0);
  QSize k(1, 1);
  for (HeatmapView* h : heads_) {
    if (h->data().empty()) return;
    k = k.expandedTo(h->autoLabelSteps());
  }
  for (HeatmapView* h : heads_) h->setLabelSteps(k);
}

}  // namespace attnlab
