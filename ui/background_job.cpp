// BackgroundJob's pool and futures (see background_job.h).
#include "ui/background_job.h"

#include <QThreadPool>
#include <QtConcurrent/QtConcurrentRun>
#include <algorithm>

namespace attnlab {

QThreadPool* job_pool() {
  static QThreadPool* pool = [] {
    auto* p = new QThreadPool;  // never deleted: jobs may still be finishing at exit
    // Every kind of job can have one running and one superseded (finishing at its next cancel
    // check): forward, lens, importance, value norm, Beyond attention, training.
    p->setMaxThreadCount(16);
    return p;
  }();
  return pool;
}

void BackgroundJob::run(std::function<void()> task) {
  futures_.erase(
      std::remove_if(futures_.begin(), futures_.end(), [](const QFuture<void>& f) { return f.isFinished(); }),
      futures_.end());
  futures_.push_back(QtConcurrent::run(job_pool(), std::move(task)));
}

void BackgroundJob::wait() {
  if (!futures_.empty()) futures_.back().waitForFinished();
  QCoreApplication::processEvents();  // the queued delivery
}

void BackgroundJob::shutdown() {
  cancel();
  for (QFuture<void>& f : futures_) f.waitForFinished();
  futures_.clear();
}

}  // namespace attnlab
