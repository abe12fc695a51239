// CircuitsPage: activation patching in the app (engine/analysis/patching.h). A clean and a
// corrupted prompt (the corrupted one starts as the clean one with a word to change), the answer
// and the wrong answer (a classifier's classes, or one token each), what to patch and how: exact
// (one patched run per cell, in the background with progress and cancel), the first-order
// estimate (attribution patching: one backward), or both side by side. The result is a layer x
// position (or layer x head) map of the share of the clean answer each patched activation
// restores. Logit attribution draws the clean run's direct contributions as a layer x (heads +
// MLP) map. Clicking a head's cell opens that head's pattern on the clean prompt (the Head tab);
// Export writes the map shown (PNG, SVG, PDF, CSV, .npy).
#pragma once

#include <memory>

#include "ui/background_job.h"
#include "ui/explore/explore_page.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;

namespace attnlab {

class HeatmapView;
struct PatchResult;

class CircuitsPage : public ExplorePage {
  Q_OBJECT
 public:
  explicit CircuitsPage(ExploreState* state, QWidget* parent = nullptr);
  void setPrompts(const QString& clean, const QString& corrupted);
  QString cleanText() const;
  void setAnswers(const QString& answer, const QString& wrong);
  void setTarget(const QString& what);  // resid_pre, attn_out, mlp_out, z
  void setMethod(const QString& how);   // exact, attribution, both
  void compute();                       // the patching
  void computeLogitAttribution();
  void exportTo(const QString& path, int dpi);  // the main map; Error when there is none
  void wait() { job_.wait(); }
  bool running() const;
  HeatmapView* map() const { return map_; }
  HeatmapView* estimateMap() const { return map2_; }  // "both": the attribution estimate beside
  QString status() const;
  const PatchResult* result() const { return result_.get(); }

 signals:
  // A head's cell was clicked (z patching or logit attribution): open its pattern on `text`.
  void headRequested(const QString& text, int layer, int head);

 protected:
  void refresh() override {}  // computed on request only
  void modelChanged() override;

 private:
  struct Inputs;
  bool readInputs(Inputs& in);  // false: the mistake is said in the status line
  void showMap(HeatmapView* view, const Tensor& values, const QStringList& cols, const QString& title,
               const QString& col_axis);
  void fail(const QString& message);

  QLineEdit *clean_, *corrupted_, *answer_, *wrong_;
  QComboBox *what_, *how_;
  QPushButton *run_, *dla_, *export_, *stop_;
  QProgressBar* progress_;
  QLabel* status_;
  HeatmapView *map_, *map2_;
  BackgroundJob job_{this};
  std::shared_ptr<const PatchResult> result_;
  bool heads_shown_ = false;  // the map's columns are heads (a click opens one)
  QString shown_text_;        // the prompt the map was computed on
};

}  // namespace attnlab
