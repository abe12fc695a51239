// TrainController: the training job, its pause/stop control and the probe snapshots.
#include "ui/train_controller.h"

#include <QCoreApplication>
#include <QMetaObject>
#include <QThread>

#include "engine/analysis/detectors.h"
#include "engine/text/input.h"

namespace attnlab {

TrainController::TrainController(QObject* parent) : QObject(parent) {
  qRegisterMetaType<TrainProgress>();
  qRegisterMetaType<EpochReport>();
  qRegisterMetaType<Snapshot>();
  qRegisterMetaType<TrainOutcome>();
}

// Closing while training stops it cleanly: the trainer sees the stop before its next batch
// (a paused run wakes up for it), and nothing is delivered to the receivers being destroyed.
TrainController::~TrainController() {
  blockSignals(true);
  control_.stop();
  job_.shutdown();
}

void TrainController::setProbeText(const std::string& text) {
  std::lock_guard<std::mutex> lock(probe_mutex_);
  probe_text_ = text;
}

void TrainController::setProbeIds(std::vector<int> ids, int seq) {
  std::lock_guard<std::mutex> lock(probe_mutex_);
  probe_ids_ = std::move(ids);
  probe_seq_ = seq;
}

void TrainController::start(TrainJob job) {
  if (running_) throw Error("a training run is already in progress");
  control_.reset();
  running_ = true;
  // A stopped run still delivers its outcome (the weights so far): stop is the trainer's control,
  // not the job's cancel.
  job_.start<TrainOutcome>(
      [this, job = std::move(job)](const std::atomic<bool>*, const BackgroundJob::Post& post) mutable {
        return run(std::move(job), post);
      },
      [this](std::shared_ptr<const TrainOutcome> out, const QString& error) {
        running_ = false;
        TrainOutcome o;
        if (out)
          o = *out;
        else
          o.result.message = error.toStdString(), o.result.diverged = true;  // out of memory
        emit finished(o);
      });
}

void TrainController::setPaused(bool paused) {
  control_.set_paused(paused);
}

void TrainController::stop() {
  control_.stop();
}

void TrainController::waitForFinish() {
  while (running_) {
    QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
    QThread::msleep(5);
  }
  QCoreApplication::processEvents();
}

// On the worker: the probe sentence through the model as it is now, handed to the GUI as a value.
void TrainController::snapshot(const Model& model, int step, const BackgroundJob::Post& post) {
  std::string text;
  std::vector<int> ids;
  int seq = 0;
  {
    std::lock_guard<std::mutex> lock(probe_mutex_);
    text = probe_text_;
    ids = probe_ids_;
    seq = probe_seq_;
  }
  try {
    auto backend = make_backend("cpu");
    ForwardRequest req;
    if (ids.empty()) {
      InputOptions o;
      o.what = "probe sentence";
      const PreparedInput in = prepare_text(model, text, o);  // cut at max_len, as everywhere
      if (in.ids.empty()) return;
      req.ids = in.ids, req.tokens = in.tokens;
    } else {  // labelled as the views label tokens: a byte-level "Ġwho" as "␣who", a character's space as "␣"
      req.ids = ids;
      for (int id : ids) req.tokens.push_back(model.readable_token(id));
    }
    Snapshot s;
    s.step = step;
    s.result = std::make_shared<const ForwardResult>(run_forward(model, *backend, req));
    if (!ids.empty() && seq > 0) {  // a task with a repeat (induction): its heads' detector scores
      s.induction = head_detector_scores(*s.result, HeadDetector::Induction, seq);
      s.previous_token = head_detector_scores(*s.result, HeadDetector::PreviousToken, seq);
      s.duplicate_token = head_detector_scores(*s.result, HeadDetector::DuplicateToken, seq);
    }
    if (!ids.empty()) s.weight_norms = weight_norms(model.config, model.weights);  // a language model's run
    post([this, s] { emit snapshotTaken(s); });
  } catch (const Error&) {
    // a probe the model cannot read (no vocabulary match) is simply not shown
  }
}

TrainOutcome TrainController::run(TrainJob job, const BackgroundJob::Post& post) {
  Model& model = *job.model;
  const int steps_per_epoch = static_cast<int>((job.train.size() + static_cast<size_t>(job.config.batch) - 1) /
                                               static_cast<size_t>(std::max(1, job.config.batch)));
  // ~5 per epoch; a run of one-step epochs (grokking's full batch: thousands) ~200 in all
  const int total_steps = steps_per_epoch * job.config.epochs;
  const int snapshot_every = steps_per_epoch > 1 ? std::max(1, steps_per_epoch / 5) : std::max(1, total_steps / 200);
  snapshot(model, 0, post);
  int last_step = 0, last_snapshot = 0;
  TrainCallbacks cb;
  cb.control = &control_;
  cb.on_step = [&](const TrainProgress& p) {
    post([this, p] { emit stepped(p); });
    last_step = p.step;
    if (p.step % snapshot_every == 0) snapshot(model, last_snapshot = p.step, post);
  };
  cb.on_epoch = [&](const EpochReport& r) { post([this, r] { emit epochDone(r); }); };
  TrainOutcome out;
  try {
    out.result = train_model(model, job.train, job.val, job.config, cb);
    auto ops = make_ops("cpu");
    out.eval = evaluate(model, *ops, job.val);
    if (last_step != last_snapshot) snapshot(model, last_step, post);  // the final weights (best epoch restored)
  } catch (const std::exception& e) {
    out.result.message = e.what();
    out.result.diverged = true;
  }
  out.model = job.model;
  return out;
}

}  // namespace attnlab
