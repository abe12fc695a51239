// RunPanel: the Train tab's run: Train / Pause / Stop / Save / Open in Explore, progress, live
// loss and accuracy curves, a probe sentence's heads refreshed during training with a timeline
// of snapshots, and at the end the confusion matrix with per-class accuracy. A language model's
// run draws its heads' induction and previous-token scores (or duplicate-token scores, chosen
// beside Export curves) instead of the confusion matrix, and marks the phase change: the first
// snapshot where a head's induction score reaches 0.5; every language model's run draws its
// layers' weight norms. Grokking's
// run (modular addition) draws the training and held-out accuracy over log-scaled steps and marks
// where each reaches its threshold. It draws what the TrainController reports; the Train tab starts
// and stops the run.
#pragma once

#include <QWidget>
#include <vector>

#include "engine/analysis/detectors.h"
#include "ui/train_controller.h"

class QComboBox;
class QGridLayout;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSlider;
class QSpinBox;
class QTableWidget;

namespace attnlab {

class CurveView;
class HeatmapView;

class RunPanel : public QWidget {
  Q_OBJECT
 public:
  explicit RunPanel(QWidget* parent = nullptr);
  // What a run's charts show: a classifier's accuracy and confusion matrix; an induction run's
  // head scores; grokking's training and held-out accuracy over log-scaled steps.
  // Classifier: accuracy by epoch and a confusion matrix; Induction: the heads' detector scores on
  // a repeated probe; Grokking: training and held-out accuracy by step, log-scaled; Task: a
  // language-model task's held-out next-token accuracy by epoch (copy, reverse, parens).
  enum class Charts { Classifier, Induction, Grokking, Task };
  void reset();  // nothing of an earlier run or dataset stays on screen
  void begin(const ModelConfig& model, int total_steps, Charts charts);  // a run starts
  // The charts, before a run as well as at its start.
  void showCharts(Charts charts);
  void setRunning(bool running);
  void setPaused(bool paused);
  void onStep(const TrainProgress& p);
  void onEpoch(const EpochReport& r);
  void onSnapshot(const Snapshot& s);
  void finish(const TrainOutcome& outcome);  // the result, the confusion matrix, Save and Explore enabled
  void fail(const QString& message);         // a message in red
  void clearMessage();
  void setProbe(const QString& text);
  QString probe() const;

  QString message() const;
  QString progressText() const;
  CurveView* lossCurve() const { return loss_; }
  CurveView* accuracyCurve() const { return acc_; }
  CurveView* scoresCurve() const { return scores_; }
  CurveView* grokCurve() const { return grok_; }
  CurveView* normsCurve() const { return norms_; }         // a language model's weight norm per layer, by step
  QComboBox* scoreKindBox() const { return score_kind_; }  // induction & previous-token, or duplicate-token
  // grokking: the first step where the training pairs' accuracy reached 0.99, and the held-out
  // pairs' 0.95 (-1: not yet)
  int memorisedStep() const { return memorised_step_; }
  int generalisedStep() const { return generalised_step_; }
  int phaseChangeStep() const { return phase_step_; }  // -1: none (yet)
  int snapshotCount() const { return static_cast<int>(snapshots_.size()); }
  QPushButton* trainButton() const { return train_; }
  QTableWidget* confusionTable() const { return confusion_; }
  QLabel* messageLabel() const { return message_; }

 signals:
  void trainClicked();
  void pauseToggled(bool paused);
  void stopClicked();
  void saveClicked();
  void exploreClicked();
  void probeChanged(const QString& text);

 private:
  void showSnapshot(int index);
  // The head-score chart's series for the chosen detectors, redrawn from every snapshot so far.
  void drawScores();
  void appendScores(const Snapshot& s);

  QPushButton *train_, *pause_, *stop_, *save_, *explore_;
  QProgressBar* progress_;
  QLabel* progress_label_;
  QLabel* message_;
  CurveView* loss_;
  CurveView* acc_;
  CurveView* scores_;
  CurveView* grok_;
  CurveView* norms_;
  QComboBox* score_kind_;
  QLabel* score_kind_label_;
  int layers_ = 0, heads_ = 0;  // the run's model
  bool lm_ = false;
  Charts charts_ = Charts::Classifier;
  int phase_step_ = -1;
  int memorised_step_ = -1, generalised_step_ = -1;
  struct ScoreSeries {
    HeadDetector kind;
    int layer, head;  // head -1: the layer's best head
  };
  std::vector<ScoreSeries> score_series_;
  double smoothed_ = -1, smoothing_ = 0.95;  // the smoothed loss and its weight of the past
  qint64 start_ms_ = 0;
  QLineEdit* probe_;
  QSpinBox* probe_layer_;
  QSlider* timeline_;
  QLabel* timeline_label_;
  QGridLayout* heads_grid_;
  std::vector<HeatmapView*> head_views_;
  std::vector<Snapshot> snapshots_;
  QTableWidget* confusion_;
};

}  // namespace attnlab
