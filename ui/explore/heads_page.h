// HeadsPage: every head of the current layer, as large square maps (Heads tab). A badge after a
// head's name says what it mostly attends to; double-click enlarges a head, right-click ablates it.
#pragma once

#include <vector>

#include "ui/explore/explore_page.h"

class QAction;
class QGridLayout;

namespace attnlab {

class HeatmapView;

class HeadsPage : public ExplorePage {
  Q_OBJECT
 public:
  explicit HeadsPage(ExploreState* state, QWidget* parent = nullptr);
  HeatmapView* view(int head) const { return heads_.at(static_cast<size_t>(head)); }
  int count() const { return static_cast<int>(heads_.size()); }

 protected:
  void refresh() override;
  void modelChanged() override;
  void resizeEvent(QResizeEvent* e) override;

 private:
  void layoutGrid();
  void syncLabelSteps();
  void applyDisplay();

  QGridLayout* grid_;
  std::vector<HeatmapView*> heads_;
  std::vector<QAction*> ablate_actions_;  // one per head view
  int grid_cols_ = 0;
};

}  // namespace attnlab
