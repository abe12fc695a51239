// AlignmentPage: an encoder-decoder's alignment, which source tokens each target token reads: the
// decoder's cross-attention averaged over the chosen layers and heads (engine/analysis/alignment.h),
// drawn as a matrix (target tokens down, source tokens across) and as lines between the two
// sentences, the strongest source token of each target token drawn boldest; hover a target token
// in the lines to light its source tokens. Rows are labelled with the target token each decoder
// position predicts (position i reads the target's tokens before i), as translation alignments are.
#pragma once

#include <vector>

#include "engine/analysis/alignment.h"
#include "ui/explore/explore_page.h"

class QCheckBox;
class QHBoxLayout;
class QLabel;

namespace attnlab {

class HeatmapView;
class LineView;

class AlignmentPage : public ExplorePage {
  Q_OBJECT
 public:
  explicit AlignmentPage(ExploreState* state, QWidget* parent = nullptr);
  // The layers and heads averaged (tests, --align-layers); an empty list: every one.
  void choose(const std::vector<int>& layers, const std::vector<int>& heads);
  std::vector<int> chosenLayers() const;
  std::vector<int> chosenHeads() const;
  const Alignment& alignment() const { return alignment_; }
  HeatmapView* map() const { return map_; }
  LineView* lines() const { return lines_; }
  QString status() const;
  // .png .svg .pdf (the matrix with its labels), .csv or .npy (its values); Error otherwise.
  void exportTo(const QString& path, int dpi);

 protected:
  void refresh() override;
  void modelChanged() override;

 private:
  std::vector<QCheckBox*> layer_boxes_, head_boxes_;
  QHBoxLayout *layer_row_, *head_row_;
  QLabel* status_;
  HeatmapView* map_;
  LineView* lines_;
  Alignment alignment_;
  QStringList rows_, cols_;  // the alignment's target and source labels
};

}  // namespace attnlab
