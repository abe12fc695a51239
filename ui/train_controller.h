// TrainController: the Train tab's engine side, without widgets. It runs one training job at a
// time off the GUI thread (a BackgroundJob, as every engine computation), with a real pause (the trainer
// blocks before its next batch) and a stop seen before the next batch, and takes snapshots of a
// probe sentence's heads about five times per epoch. Progress arrives as signals carrying
// values; nothing on the GUI thread touches the model being trained.
#pragma once

#include <QObject>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/compute/forward.h"
#include "engine/train/trainer.h"
#include "ui/background_job.h"

namespace attnlab {

struct Snapshot {
  int step = 0;
  std::shared_ptr<const ForwardResult> result;  // labelled by its own tokens
  // A language-model preset's probe (a random sequence repeated, TrainController::setProbeIds):
  // every head's detector scores on it, [layers, heads] (engine/analysis/detectors.h); else empty.
  Tensor induction, previous_token, duplicate_token;
  // The model's weight norms at this step, each layer's then the rest's (weight_norms in
  // engine/model/weights.h): what weight decay shrinks. Empty for a classifier.
  std::vector<double> weight_norms;
};

struct TrainJob {
  std::shared_ptr<Model> model;  // trained in place on the worker; handed back when finished
  EncodedData train, val;
  TrainConfig config;
};

struct TrainOutcome {
  TrainResult result;
  EvalResult eval;  // on the validation split, with the final weights
  std::shared_ptr<const Model> model;
};

class TrainController : public QObject {
  Q_OBJECT
 public:
  explicit TrainController(QObject* parent = nullptr);
  ~TrainController() override;  // stops a run and waits for it

  void start(TrainJob job);
  void setPaused(bool paused);
  bool paused() const { return control_.paused(); }
  void stop();
  bool running() const { return running_; }
  // The probe sentence: read by the worker at each snapshot.
  void setProbeText(const std::string& text);
  // Instead of the sentence (a language-model task): these ids, seq random tokens repeated twice,
  // scored by the head detectors at each snapshot. Empty: the sentence again.
  void setProbeIds(std::vector<int> ids, int seq);
  // Processes events until the run has ended and its outcome is delivered (tests).
  void waitForFinish();

 signals:
  void stepped(const attnlab::TrainProgress& progress);
  void epochDone(const attnlab::EpochReport& report);
  void snapshotTaken(const attnlab::Snapshot& snapshot);
  void finished(const attnlab::TrainOutcome& outcome);

 private:
  TrainOutcome run(TrainJob job, const BackgroundJob::Post& post);
  void snapshot(const Model& model, int step, const BackgroundJob::Post& post);

  RunControl control_;
  bool running_ = false;
  std::mutex probe_mutex_;
  std::string probe_text_;
  std::vector<int> probe_ids_;
  int probe_seq_ = 0;
  BackgroundJob job_{this};  // last: stopped and waited for before the members it reads go
};

}  // namespace attnlab

Q_DECLARE_METATYPE(attnlab::TrainProgress)
Q_DECLARE_METATYPE(attnlab::EpochReport)
Q_DECLARE_METATYPE(attnlab::Snapshot)
Q_DECLARE_METATYPE(attnlab::TrainOutcome)
