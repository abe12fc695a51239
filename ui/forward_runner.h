// ForwardRunner: runs forward passes off the GUI thread (a BackgroundJob), newest request wins. A new request
// replaces any waiting one instead of queueing behind it, and restarts a pass in flight (it is
// cancelled before its next layer and never delivers), as in Qt's mandelbrot example; but when
// no result has been delivered for max_result_gap_ms the pass in flight is left to finish, so
// continuous typing still shows intermediate results. Results carry the request's id so the
// receiver can drop stale ones. Inputs are copied in, results come back as immutable values.
// For a causal model the runner keeps the last pass's KV cache, so typing at the end of a long
// text recomputes a few positions, not the whole text (the result is the same).
#pragma once

#include <QElapsedTimer>
#include <QObject>
#include <atomic>
#include <memory>
#include <optional>

#include "engine/analysis/methods.h"
#include "engine/compute/forward.h"
#include "engine/compute/kv_cache.h"
#include "engine/core/tuning.h"
#include "engine/text/token_view.h"
#include "ui/background_job.h"
#include "ui/heatmap_data.h"

namespace attnlab {

struct ForwardJob {
  std::shared_ptr<const Model> model;
  std::string backend = "cpu";
  ForwardRequest request;
  quint64 id = 0;
  qint64 submitted_ns = 0;  // for keystroke-to-result latency
  int display_cells = 256;  // heatmap grids are pooled to this many cells per axis in the worker
  // Display transform of the result's tokens (hide special tokens, merge word pieces), applied in
  // the worker after the pass: rows = queries, cols = keys.
  std::optional<std::pair<TokenGroups, TokenGroups>> token_view;
  std::shared_ptr<std::atomic<bool>> cancel;  // set by the runner (restart); the pass stops at its next layer
  // An attention file's result (model->probabilities_only): drawn as it is, no pass run.
  std::shared_ptr<const ForwardResult> fixed;
  // An encoder-decoder's pass: the part the views draw (seq2seq_part, applied in the worker).
  std::optional<Seq2SeqPart> seq2seq_part;
};

struct ForwardOutcome {
  quint64 id = 0;
  std::shared_ptr<const ForwardResult> result;  // null on error
  // [layer * heads + head], ready to draw; shared, so an outcome is copied without its grids
  std::shared_ptr<const std::vector<HeatmapData>> heads;
  HeatmapData mask;                                // the effective mask (head 0's plane)
  std::vector<std::vector<HeadPattern>> patterns;  // [layer][head] (Clark et al. 2019), self mode
  // The token view the result was drawn through (rows, cols), when one was active.
  std::optional<std::pair<TokenGroups, TokenGroups>> token_view;
  QString error;
  QString backend, device;  // what actually ran (after any fallback)
  int reused = 0;           // positions taken from the previous pass's KV cache (causal models)
  // The first row whose maps and head patterns this pass read; those of the rows before it were
  // the previous pass's (0: every row read).
  int drawn_from = 0;
  std::optional<Seq2SeqPart> seq2seq_part;  // an encoder-decoder's: the part the result shows
  PassMemory memory;  // what the result (a whole pass's worth) and the KV cache kept take, estimated
  qint64 submitted_ns = 0;
  bool cancelled = false;  // never delivered
};

class ForwardRunner : public QObject {
  Q_OBJECT
 public:
  explicit ForwardRunner(QObject* parent = nullptr);
  ~ForwardRunner() override;
  void submit(ForwardJob job);
  bool busy() const { return running_; }
  // A pass in flight is restarted by newer input unless no result was delivered for this long.
  static constexpr qint64 max_result_gap_ms = 250;
  // Passes whose probabilities would take more bytes (or more than a quarter of the memory
  // available) keep queries and keys instead (attention on demand: each layer recomputed when
  // shown); tests set 0 to run every pass that way.
  double on_demand_bytes = kTuning.keep_attention_bytes;
  // The same for the passes that start from the last one's KV cache (a causal model's, typing):
  // above this they keep queries and keys, so that an edit copies neither the probabilities of
  // the rows before it nor reads them again (tests set it to compare both ways).
  double reuse_on_demand_bytes = kTuning.reuse_keep_attention_bytes;
  int cancelledCount() const { return cancelled_; }  // passes stopped in flight (tests)
  // Whether a pass of this request can start from the previous pass's KV cache: a causal model's
  // plain self-attention pass (no hooks, ablation, cross sequence, token types).
  static bool reusable(const Model& model, const ForwardRequest& request);
  // Blocks until the current and pending jobs have finished, delivering their results (tests).
  void waitForIdle();
  // For the owner's destructor: drops the waiting job, waits for the running one and delivers
  // nothing (no signal, no event processing: the receivers are being destroyed).
  void shutdown();

 signals:
  void finished(const attnlab::ForwardOutcome& outcome);

 private:
  void start(ForwardJob job);
  void onDone(const ForwardOutcome& out);

  // Prefix reuse while typing (causal models): the keys and values of the last pass, its result
  // and what the worker drew from it, so an edit at token p recomputes positions >= p only
  // (engine/compute/kv_cache.h) and pools and scans their rows only (the rows before p are the
  // last pass's). Touched by one pass at a time, on the job's thread.
  struct Prefix {
    std::shared_ptr<const Model> model;
    std::string backend;
    KvCache kv;
    std::shared_ptr<const ForwardResult> last;              // the full result the cache's ids belong to
    std::shared_ptr<const std::vector<HeatmapData>> heads;  // last's pooled maps
    int display_cells = 0;                                  // what they were pooled to
    std::shared_ptr<const HeadPatternScan> patterns;        // last's head-pattern sums
  };
  std::shared_ptr<Prefix> prefix_ = std::make_shared<Prefix>();
  BackgroundJob job_{this};  // one pass at a time; a cancelled one still reports that it ended
  std::optional<ForwardJob> pending_;
  std::shared_ptr<std::atomic<bool>> current_cancel_;
  QElapsedTimer since_delivery_;  // since the last delivered result (or the first submit)
  bool running_ = false;
  int cancelled_ = 0;
};

}  // namespace attnlab

Q_DECLARE_METATYPE(attnlab::ForwardOutcome)
