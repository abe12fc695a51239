// BackgroundJob: one engine computation at a time on a thread of its own, its result delivered
// on the owner's (GUI) thread. A new start() or cancel() supersedes what runs: the engine sees
// the cancel flag (and throws Cancelled), and a result that still arrives is dropped. The logit
// lens, head importance, value-weighted heads and the Beyond attention page use one each.
#pragma once

#include <QCoreApplication>
#include <QMetaObject>
#include <QObject>
#include <QPointer>
#include <QString>
#include <atomic>
#include <functional>
#include <memory>
#include <new>
#include <thread>

#include "engine/forward.h"

namespace attnlab {

class BackgroundJob {
 public:
  // owner: the object whose thread receives results; the job must not outlive it (a member).
  explicit BackgroundJob(QObject* owner) : owner_(owner) {}
  ~BackgroundJob() { stop(); }
  BackgroundJob(const BackgroundJob&) = delete;
  BackgroundJob& operator=(const BackgroundJob&) = delete;

  // Posts f to the owner's thread if the job it belongs to is still the current one (progress).
  using Post = std::function<void(std::function<void()>)>;

  // Runs work(cancel, post) on a new thread (after stopping the previous one); then, on the
  // owner's thread and only if nothing superseded it, done(result, "") or done(nullptr, error).
  template <class R>
  void start(std::function<R(const std::atomic<bool>* cancel, const Post& post)> work,
             std::function<void(std::shared_ptr<const R>, const QString& error)> done) {
    stop();
    auto flag = std::make_shared<std::atomic<bool>>(false);
    cancel_ = flag;
    const int generation = ++generation_;
    QPointer<QObject> owner(owner_);
    BackgroundJob* self = this;  // alive while owner is (a member of it)
    auto current = [owner, self, generation] { return owner && generation == self->generation_; };
    Post post = [owner, current](std::function<void()> f) {
      QMetaObject::invokeMethod(owner, [current, f = std::move(f)] { if (current()) f(); }, Qt::QueuedConnection);
    };
    running_ = true;
    thread_ = std::thread([owner, self, flag, current, post, work = std::move(work), done = std::move(done)] {
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
      QMetaObject::invokeMethod(owner, [self, current, result, error, done] {
        if (!current()) return;
        self->running_ = false;
        done(result, error);
      }, Qt::QueuedConnection);
    });
  }

  // Supersedes the running job: it is asked to stop and its result, if any, is dropped.
  void cancel() {
    if (cancel_) cancel_->store(true);
    ++generation_;
    running_ = false;
  }
  // Cancels and waits for the thread.
  void stop() {
    cancel();
    if (thread_.joinable()) thread_.join();
  }
  // Waits for the running job and lets its result reach done (tests, screenshots).
  void wait() {
    if (thread_.joinable()) thread_.join();
    QCoreApplication::processEvents();
  }
  bool running() const { return running_; }  // started, not yet delivered nor cancelled

 private:
  QObject* owner_;
  std::thread thread_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  int generation_ = 0;  // read and written on the owner's thread only
  bool running_ = false;
};

}  // namespace attnlab
