// CircuitsPage: activation patching in the app (engine/analysis/patching.h). A clean and a
// corrupted prompt (the corrupted one starts as the clean one with a word to change), the answer
// and the wrong answer (a classifier's classes, or one token each), what to patch; the sweep runs
// in the background with progress and cancel, and the result is a layer x position (or layer x
// head) map of the share of the clean answer each patched activation restores.
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
  void compute();
  void wait() { job_.wait(); }
  bool running() const;
  HeatmapView* map() const { return map_; }
  QString status() const;
  const PatchResult* result() const { return result_.get(); }

 protected:
  void refresh() override {}  // computed on request only
  void modelChanged() override;

 private:
  QLineEdit *clean_, *corrupted_, *answer_, *wrong_;
  QComboBox* what_;
  QPushButton *run_, *stop_;
  QProgressBar* progress_;
  QLabel* status_;
  HeatmapView* map_;
  BackgroundJob job_{this};
  std::shared_ptr<const PatchResult> result_;
};

}  // namespace attnlab
