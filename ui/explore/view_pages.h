// The Explore tab's pages that draw the current result of one layer or of all layers:
// LinesPage (BertViz's line view), LayersPage (every head of every layer, small) and HeadPage
// (one head, large, at full resolution up to 1,024 cells per axis).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "ui/explore/explore_page.h"
#include "ui/heatmap_data.h"

class QComboBox;
class QGridLayout;
class QSpinBox;

class QLabel;
class QScrollArea;

namespace attnlab {

class HeatmapView;
class LineView;

class LinesPage : public ExplorePage {
  Q_OBJECT
 public:
  explicit LinesPage(ExploreState* state, QWidget* parent = nullptr);
  LineView* lineView() const { return lines_; }

 protected:
  void refresh() override;
  void modelChanged() override;

 private:
  QComboBox* head_;
  QSpinBox* first_;  // the window's first token, shown when a side has more than LineView::kMaxTokens
  QLabel* first_label_;
  LineView* lines_;
};

class LayersPage : public ExplorePage {
  Q_OBJECT
 public:
  explicit LayersPage(ExploreState* state, QWidget* parent = nullptr);

 protected:
  void refresh() override;
  void modelChanged() override;
  void resizeEvent(QResizeEvent* e) override;

 private:
  void sizeThumbs();  // square thumbnails that share the page's width (they were stretched tall)
  // Hands the waiting maps to the thumbnails now in the scroll area's view.
  // A 12 x 12 model shows ~4 layers at 1280x720: drawing all 144 thumbnails at every key took
  // ~100 ms of a keystroke on a 1,000-token text, the thumbnails out of view most of it.
  void drawVisible();
  bool inView(const QWidget* thumb) const;
  QLabel* note_;  // says the thumbnails are raw attention while the Heads tab is value-weighted
  QScrollArea* scroll_ = nullptr;
  QWidget* inner_;
  QGridLayout* grid_;
  std::vector<QWidget*> cells_;  // labels and thumbnails, rebuilt per model
  std::vector<HeatmapView*> thumbs_;
  // The outcome's maps, shared with the pass (not copied: 144 maps of 128 x 128 with their labels
  // were ~37 MB a key, most of them for thumbnails out of view); a thumbnail's copy is made when
  // it comes into view.
  std::shared_ptr<const std::vector<HeatmapData>> grids_;
  struct Waiting {
    QString title;  // "head h · badge (ablated)"
    bool hatched = false;
  };
  // per thumbnail, what it has not drawn yet (empty: it shows the current outcome)
  std::vector<std::optional<Waiting>> waiting_;
};

class HeadPage : public ExplorePage {
  Q_OBJECT
 public:
  explicit HeadPage(ExploreState* state, QWidget* parent = nullptr);

 protected:
  void refresh() override;
  void modelChanged() override;

 private:
  QComboBox* box_;
  HeatmapView* big_;
};

}  // namespace attnlab
