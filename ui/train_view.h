// TrainView: the Train tab. Pick a shipped dataset or open a TSV/CSV (preview, label counts,
// column choice, parse errors row by row), set the model and optimiser, then Train / Pause /
// Stop. Training runs on its own thread; the tab shows live loss and accuracy curves, a probe
// sentence's heads refreshed during training with a timeline of snapshots, and at the end
// per-class accuracy and a confusion matrix. The trained model can be saved or opened in Explore.
#pragma once

#include <QWidget>
#include <memory>

#include "engine/forward.h"
#include "engine/trainer.h"
#include "ui/train_controller.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QListWidget;
class QProgressBar;
class QPushButton;
class QSlider;
class QSpinBox;
class QTableView;
class QTableWidget;
class QGridLayout;

namespace attnlab {

class CurveView;
class DatasetTableModel;
class HeatmapView;

class TrainView : public QWidget {
  Q_OBJECT
 public:
  explicit TrainView(QWidget* parent = nullptr);
  ~TrainView() override;

  void setDataDir(const QString& dir);  // where the shipped datasets are
  // Loads a TSV/CSV for training. Problems are listed row by row; returns false if there are any.
  bool loadDataset(const QString& path);
  void applyPreset(const QString& name);  // "tiny (fast)", "article model (d=128, 8 heads)", "default"
  // The model open in Explore: "Start from" can fine-tune it (a new classifier on its encoder).
  void setBaseModel(std::shared_ptr<const Model> model, const QString& name);
  // true: fine-tune the base model (freeze: the encoder stays, only the head trains); false: a new model.
  void setFineTune(bool on, bool freeze = false);
  void setEpochs(int epochs);
  // Starts training with the form's settings; false (with a visible message) when it cannot.
  bool startTraining();
  void setPaused(bool paused);
  void stopTraining();
  bool isTraining() const { return controller_->running(); }
  void waitForFinish();  // processes events until the training thread has ended (tests)
  std::shared_ptr<const Model> trainedModel() const { return trained_; }
  bool saveModel(const QString& dir);
  QString message() const;
  CurveView* lossCurve() const { return loss_; }
  CurveView* accuracyCurve() const { return acc_; }
  int snapshotCount() const { return static_cast<int>(snapshots_.size()); }
  QPushButton* trainButton() const { return train_; }
  QString progressText() const;
  QTableWidget* confusionTable() const { return confusion_; }
  QLabel* messageLabel() const { return message_; }
  QString datasetChoiceText() const;

 signals:
  void openInExplore(std::shared_ptr<const attnlab::Model> model, const QString& name);
  void status(const QString& message);

 protected:
  void dragEnterEvent(class QDragEnterEvent* e) override;
  void dropEvent(class QDropEvent* e) override;

 private:
  ModelConfig configFromForm() const;
  void showSnapshot(int index);
  void onStep(const TrainProgress& p);
  void onEpoch(const EpochReport& r);
  void onFinished(const TrainOutcome& outcome);
  void onSnapshot(const Snapshot& s);
  void setRunning(bool running);
  void resetRunViews();
  void showDatasetChoice();
  void fail(const QString& message);

  // data
  Dataset dataset_;
  QString dataset_path_, data_dir_;
  QComboBox* data_choice_;
  QComboBox *text_col_, *label_col_;
  QTableView* preview_;
  DatasetTableModel* preview_model_;
  QLabel* data_summary_;
  QListWidget* issues_;
  QDoubleSpinBox* val_split_;
  // settings
  QComboBox* preset_;
  QComboBox* start_from_;
  QCheckBox* freeze_;
  std::shared_ptr<const Model> base_;
  QString base_name_;
  void updateStartFrom();
  QSpinBox *layers_, *heads_, *dim_, *ff_, *max_len_, *batch_, *epochs_, *seed_;
  QComboBox* precision_;  // fp32 or bf16 products (cpu-bf16)
  QComboBox *positional_, *norm_, *activation_, *tokenizer_, *pooling_;
  QDoubleSpinBox *dropout_, *lr_, *weight_decay_, *clip_;
  // run
  QPushButton *train_, *pause_, *stop_, *save_, *explore_;
  QProgressBar* progress_;
  QLabel* progress_label_;
  QLabel* message_;
  CurveView* loss_;
  CurveView* acc_;
  double smoothed_ = -1;
  // live heads
  QLineEdit* probe_;
  QSpinBox* probe_layer_;
  QSlider* timeline_;
  QLabel* timeline_label_;
  QGridLayout* heads_grid_;
  std::vector<HeatmapView*> head_views_;
  std::vector<Snapshot> snapshots_;
  // results
  QTableWidget* confusion_;

  TrainController* controller_;
  std::shared_ptr<const Model> trained_;
  qint64 start_ms_ = 0;
};

}  // namespace attnlab
