// BackgroundJob: the app's one way to run engine work off the GUI thread (as hotspot's job
// tracker). A job runs on attnlab's thread pool; its result is delivered on the owner's (GUI)
// thread. A new start() or cancel() supersedes what runs: the engine sees the cancel flag (and
// throws Cancelled) and a result that still arrives is dropped; nothing waits for it, so the GUI
// thread never blocks on a superseded job. Forward passes (ForwardRunner), the logit lens, head
// importance, value-weighted heads, the Beyond attention page and training each use one.
#pragma once

#include <QCoreApplication>
#include <QFuture>
#include <QMetaObject>
#include <QObject>
#include <QPointer>
#include <QString>
#include <atomic>
#include <functional>
#include <memory>
#include <new>
#include <vector>

#include "engine/compute/forward.h"

class QThreadPool;

namespace attnlab {

// The pool every BackgroundJob runs on: threads only drive engine calls (which parallelise with
// OpenMP themselves), so a long job (training) never keeps a short one (a pass) waiting.
QThreadPool* job_pool();

class BackgroundJob {
 public:
  // owner: the object whose thread receives results; the job must not outlive it (a member).
  explicit BackgroundJob(QObject* owner) : owner_(owner) {}
  // Cancels and waits for this job's threads (they stop at the engine's next cancel check).
  ~BackgroundJob() { shutdown(); }
  BackgroundJob(const BackgroundJob&) = delete;
  BackgroundJob& operator=(const BackgroundJob&) = delete;

  // Posts f to the owner's thread if the job it belongs to is still the current one (progress).
  using Post = std::function<void(std::function<void()>)>;

  // Runs work(cancel, post) on the pool (superseding the previous job without waiting for it);
  // then, on the owner's thread and only if nothing superseded it, done(result, "") or
  // done(nullptr, error). Out of memory is an error message, not a crash.
  template <class R>
  void start(std::function<R(const std::atomic<bool>* cancel, const Post& post)> work,
             std::function<void(std::shared_ptr<const R>, const QString& error)> done) {
    cancel();
    auto flag = std::make_shared<std::atomic<bool>>(false);
    cancel_ = flag;
    const int generation = ++generation_;
    QPointer<QObject> owner(owner_);
    BackgroundJob* self = this;  // alive while owner is (a member of it)
    auto current = [owner, self, generation] { return owner && generation == self->generation_; };
    Post post = [owner, current](std::function<void()> f) {
      QMetaObject::invokeMethod(
          owner,
          [current, f = std::move(f)] {
            if (current()) f();
          },
          Qt::QueuedConnection);
    };
    running_ = true;
    run([owner, self, flag, current, post, work = std::move(work), done = std::move(done)] {
      std::shared_ptr<const R> result;
      QString error;
      try {
        result = std::make_shared<const R>(work(flag.get(), post));
      } catch (const Cancelled&) {
        return;
      } catch (const std::bad_alloc&) {
        error = "out of memory: the input is too long for this machine";
      } catch (const std::exception& e) {
        error = QString::fromUtf8(e.what());
      }
      if (flag->load()) return;
      QMetaObject::invokeMethod(
          owner,
          [self, current, result, error, done] {
            if (!current()) return;
            self->running_ = false;
            done(result, error);
          },
          Qt::QueuedConnection);
    });
  }

  // Supersedes the running job: it is asked to stop and its result, if any, is dropped.
  void cancel() {
    if (cancel_) cancel_->store(true);
    ++generation_;
    running_ = false;
  }
  // Waits for the newest job and lets its result reach done (tests, screenshots, export).
  void wait();
  // Cancels and waits for every thread this job started (the owner's destructor).
  void shutdown();
  bool running() const { return running_; }  // started, not yet delivered nor cancelled

 private:
  void run(std::function<void()> task);  // on job_pool(); keeps the future for wait()

  QObject* owner_;
  std::vector<QFuture<void>> futures_;  // unfinished ones (finished ones are pruned at each run)
  std::shared_ptr<std::atomic<bool>> cancel_;
  int generation_ = 0;  // read and written on the owner's thread only
  bool running_ = false;
};

}  // namespace attnlab
