// TrainView: the Train tab, a composer of three panels (ui/train/): the data (a shipped dataset
// or a TSV / CSV file), the model and optimiser form, and the run (Train / Pause / Stop, live
// curves, a probe sentence's heads with a timeline of snapshots, the confusion matrix). Training
// runs in a TrainController off the GUI thread; the trained model can be saved or opened in Explore.
#pragma once

#include <QWidget>
#include <memory>

#include "engine/compute/forward.h"
#include "engine/train/trainer.h"
#include "ui/train_controller.h"

class QLabel;
class QPushButton;
class QTableWidget;

namespace attnlab {

class CurveView;
class DatasetPanel;
class ModelForm;
class RunPanel;
struct ShippedText;

class TrainView : public QWidget {
  Q_OBJECT
 public:
  explicit TrainView(QWidget* parent = nullptr);
  ~TrainView() override;

  void setDataDir(const QString& dir);  // where the shipped datasets are; loads the first
  // Loads a TSV/CSV for training. Problems are listed row by row; returns false if there are any.
  bool loadDataset(const QString& path);
  // A language-model preset (engine/train/tasks.h's lm_presets, by name) in place of a dataset:
  // its generated task, its architecture in the form, its heads scored as it trains.
  bool chooseLmPreset(const QString& name);
  // A text file for a new language model (GPT-2-style, its characters or words the vocabulary, the
  // form's sizes): trained on its sequences, the last tenth held out, its heads shown on a held-out
  // piece. False, with the message shown, when it cannot be read or is empty.
  // A shipped text (engine/train/tasks.h's shipped_texts) comes with its row's settings (else the
  // epochs are set for ~600 steps).
  bool loadLmText(const QString& path, const ShippedText* row = nullptr);
  // A text's model read by "char", "word" or "bpe" (the form's choice); false when not offered.
  bool setTextTokenizer(const QString& name);
  CurveView* scoresCurve() const;
  int phaseChangeStep() const;
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
  CurveView* lossCurve() const;
  CurveView* accuracyCurve() const;
  int snapshotCount() const;
  QPushButton* trainButton() const;
  QString progressText() const;
  QTableWidget* confusionTable() const;
  QLabel* messageLabel() const;
  QString datasetChoiceText() const;
  QString probeText() const;
  int memorisedStep() const;  // grokking: see RunPanel
  int generalisedStep() const;

 signals:
  // text: what Explore should show it (a language-model preset's probe), or empty (keep the text).
  void openInExplore(std::shared_ptr<const attnlab::Model> model, const QString& name, const QString& text);
  void status(const QString& message);

 protected:
  void dragEnterEvent(class QDragEnterEvent* e) override;
  void dropEvent(class QDropEvent* e) override;

 private:
  void onFinished(const TrainOutcome& outcome);
  void fail(const QString& message);
  void estimateTextEpochs();  // a user's text: epochs for ~600 steps at the form's tokenizer and length

  DatasetPanel* data_;
  ModelForm* form_;
  RunPanel* run_;
  TrainController* controller_;
  std::shared_ptr<const Model> trained_;
  const ShippedText* text_row_ = nullptr;    // the shipped text chosen (its epochs are its row's), or null
  QString lm_probe_shown_, sentence_probe_;  // a preset's probe in the box (Explore's text); the sentence it replaced
};

}  // namespace attnlab
