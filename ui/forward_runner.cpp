// ForwardRunner: one BackgroundJob with a one-slot "latest request" queue.
#include "ui/forward_runner.h"

#include <QCoreApplication>

namespace attnlab {

ForwardRunner::ForwardRunner(QObject* parent) : QObject(parent) {
  qRegisterMetaType<ForwardOutcome>();
}

ForwardRunner::~ForwardRunner() {
  shutdown();
}

void ForwardRunner::shutdown() {
  pending_.reset();
  if (current_cancel_) current_cancel_->store(true);  // nothing will be delivered: stop early
  blockSignals(true);
  job_.shutdown();
  running_ = false;
}

void ForwardRunner::submit(ForwardJob job) {
  if (!since_delivery_.isValid()) since_delivery_.start();
  if (running_) {
    pending_ = std::move(job);  // replaces an older waiting request: never a backlog
    // Restart: the pass in flight computes an input that is already out of date.
    if (current_cancel_ && since_delivery_.elapsed() < max_result_gap_ms) current_cancel_->store(true);
    return;
  }
  start(std::move(job));
}

void ForwardRunner::start(ForwardJob job) {
  running_ = true;
  current_cancel_ = std::make_shared<std::atomic<bool>>(false);
  job.cancel = current_cancel_;
  // The pass reports every ending itself (a cancelled one as cancelled), so the runner always
  // knows when the next may start: the job's own cancel is only for shutdown.
  job_.start<ForwardOutcome>(
      [job = std::move(job)](const std::atomic<bool>*, const BackgroundJob::Post&) mutable {
        ForwardOutcome out;
        out.id = job.id;
        out.submitted_ns = job.submitted_ns;
        try {
          auto backend = make_backend(job.backend);
          job.request.cancel = job.cancel.get();
          ForwardResult r = run_forward(*job.model, *backend, job.request);
          if (job.token_view) apply_token_view(r, job.token_view->first, job.token_view->second);
          out.token_view = job.token_view;
          out.result = std::make_shared<const ForwardResult>(std::move(r));
          out.backend = QString::fromStdString(backend->name());
          out.device = QString::fromStdString(backend->device());
          const int L = job.model->config.num_layers, H = job.model->config.num_heads;
          for (int l = 0; l < L; ++l)
            for (int h = 0; h < H; ++h) out.heads.push_back(head_heatmap(out.result, l, h, job.display_cells));
          out.mask = mask_heatmap(out.result, 0, job.display_cells);
          if (!out.result->is_cross()) out.patterns = head_patterns(*out.result);
        } catch (const Cancelled&) {
          out.cancelled = true;
          out.result.reset();
          out.heads.clear();
        } catch (const std::bad_alloc&) {
          out.error = "out of memory: the input is too long for this machine";
        } catch (const std::exception& e) {
          out.error = QString::fromStdString(e.what());
        }
        return out;
      },
      [this](std::shared_ptr<const ForwardOutcome> out, const QString&) { onDone(*out); });
}

void ForwardRunner::onDone(const ForwardOutcome& out) {
  running_ = false;
  current_cancel_.reset();
  if (pending_) {
    ForwardJob next = std::move(*pending_);
    pending_.reset();
    start(std::move(next));
  }
  if (out.cancelled) {
    ++cancelled_;
    return;  // a cancelled pass never delivers
  }
  since_delivery_.restart();
  emit finished(out);
}

void ForwardRunner::waitForIdle() {
  while (running_ || pending_) {
    job_.wait();
    QCoreApplication::processEvents(QEventLoop::AllEvents, 50);
  }
}

}  // namespace attnlab
