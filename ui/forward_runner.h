// ForwardRunner: runs forward passes off the GUI thread, newest request wins. While a pass runs,
// a new request replaces any waiting one instead of queueing behind it (the model of Qt's
// mandelbrot example); finished results carry the request's id so the view can drop stale ones.
// Inputs are copied in, results come back as immutable shared values.
#pragma once

#include <QElapsedTimer>
#include <QFutureWatcher>
#include <QObject>
#include <memory>
#include <optional>

#include "engine/forward.h"
#include "ui/heatmap_data.h"

namespace attnlab {

struct ForwardJob {
  std::shared_ptr<const Model> model;
  std::string backend = "cpu";
  ForwardRequest request;
  quint64 id = 0;
  qint64 submitted_ns = 0;  // for keystroke-to-result latency
  int display_cells = 256;  // heatmap grids are pooled to this many cells per axis in the worker
};

struct ForwardOutcome {
  quint64 id = 0;
  std::shared_ptr<const ForwardResult> result;  // null on error
  std::vector<HeatmapData> heads;               // [layer * heads + head], ready to draw
  HeatmapData mask;                             // the effective mask (head 0's plane)
  QString error;
  QString backend, device;  // what actually ran (after any fallback)
  qint64 submitted_ns = 0;
};

class ForwardRunner : public QObject {
  Q_OBJECT
 public:
  explicit ForwardRunner(QObject* parent = nullptr);
  ~ForwardRunner() override;
  void submit(ForwardJob job);
  bool busy() const { return running_; }
  // Blocks until the current and pending jobs have finished, delivering their results (tests).
  void waitForIdle();
  // For the owner's destructor: drops the waiting job, waits for the running one and delivers
  // nothing (no signal, no event processing: the receivers are being destroyed).
  void shutdown();

 signals:
  void finished(const attnlab::ForwardOutcome& outcome);

 private:
  void start(ForwardJob job);
  void onDone();

  QFutureWatcher<ForwardOutcome> watcher_;
  std::optional<ForwardJob> pending_;
  bool running_ = false;
};

}  // namespace attnlab

Q_DECLARE_METATYPE(attnlab::ForwardOutcome)
