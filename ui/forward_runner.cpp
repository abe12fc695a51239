// ForwardRunner: one BackgroundJob with a one-slot "latest request" queue.
#include "ui/forward_runner.h"

#include <QCoreApplication>
#include <algorithm>
#include <cstdlib>
#include <exception>
#include <functional>
#include <thread>

#include "engine/analysis/head_patterns.h"

#include "engine/compute/hooks.h"
#include "engine/core/memory.h"

namespace attnlab {

namespace {

// Every head's pooled map (out.heads) and the head patterns (out.patterns) of out.result, layer by
// layer: on demand a layer's rows are recomputed once, here; the heads over the cores (each reads
// its own rows and fills its own slot). With the maps and pattern sums of the last pass, whose
// first `shared` rows are this one's, the rows before the last pass's checkpoint are taken from
// them and only the rest is read (computed, on demand). Returns the pattern sums for the next.
std::shared_ptr<const HeadPatternScan> draw_heads(ForwardOutcome& out, const ForwardJob& job,
                                                  const std::vector<HeatmapData>* last_heads,
                                                  std::shared_ptr<const HeadPatternScan> last_patterns, int shared) {
  const std::shared_ptr<const ForwardResult>& r = out.result;
  // the encoder's maps of an encoder-decoder are its own layers and heads
  const ModelConfig& c =
      job.seq2seq_part == Seq2SeqPart::Encoder && job.model->encoder ? job.model->encoder->config : job.model->config;
  const int L = c.num_layers, H = c.num_heads;
  const int T = static_cast<int>(r->ids.size()), S = r->is_cross() ? static_cast<int>(r->cross_ids.size()) : T;
  std::shared_ptr<HeadPatternScan> scan;
  if (!r->is_cross()) scan = std::make_shared<HeadPatternScan>(*r, H, std::move(last_patterns), shared);
  // the first row read: the patterns' checkpoint, down to the start of a drawn row, when every
  // last map pools as this pass's will (else every row is drawn, and the scan skips its rows)
  int first = scan ? scan->first_row() : 0;
  if (first > 0 && last_heads && !last_heads->empty()) first -= first % std::max(1, last_heads->front().row_factor);
  const bool extend = first > 0 && last_heads && last_heads->size() == static_cast<size_t>(L) * H &&
                      std::all_of(last_heads->begin(), last_heads->end(),
                                  [&](const HeatmapData& d) { return extends(d, T, S, job.display_cells, first); });
  if (!extend) first = 0;
  auto heads = std::make_shared<std::vector<HeatmapData>>(static_cast<size_t>(L) * H);
  // f(k) for k in [0, n) over the cores, each task on its own slots; the first failure (out of
  // memory on a helper, say) is the pass's error, not a crash
  const int workers = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 4);
  auto over_cores = [workers](int n, const std::function<void(int)>& f) {
    std::atomic<int> next{0};
    std::vector<std::exception_ptr> failed(static_cast<size_t>(workers));
    auto work = [&](int w) {
      try {
        for (int k = next++; k < n; k = next++) f(k);
      } catch (...) {
        failed[static_cast<size_t>(w)] = std::current_exception();
        next = n;
      }
    };
    std::vector<std::thread> helpers;
    for (int w = 1; w < workers && w < n; ++w) helpers.emplace_back(work, w);
    work(0);
    for (std::thread& t : helpers) t.join();
    for (const std::exception_ptr& e : failed)
      if (e) std::rethrow_exception(e);
  };
  if (extend) {  // a few new rows a layer: all of them first, then every (layer, head) in one go
    std::vector<std::shared_ptr<const Tensor>> rows(static_cast<size_t>(L));
    for (int l = 0; l < L; ++l) {
      if (job.cancel && job.cancel->load()) throw Cancelled();
      if (r->has_probs(l)) rows[static_cast<size_t>(l)] = r->layer_rows(l, first);
    }
    over_cores(L * H, [&](int k) {
      const int l = k / H, h = k % H;
      const Tensor* t = rows[static_cast<size_t>(l)].get();
      if (!t) return;
      (*heads)[static_cast<size_t>(k)] =
          head_heatmap_rows(r, l, h, job.display_cells, rows[static_cast<size_t>(l)], first, &(*last_heads)[k]);
      if (scan) scan->add_head(l, h, *t, first);
    });
  } else {  // layer by layer: on demand a layer's probabilities are held while its heads are read
    for (int l = 0; l < L; ++l) {
      if (job.cancel && job.cancel->load()) throw Cancelled();
      if (!r->has_probs(l)) continue;
      const std::shared_ptr<const Tensor> rows = r->layer_rows(l, 0);
      over_cores(H, [&](int h) {
        (*heads)[static_cast<size_t>(l * H + h)] = head_heatmap_rows(r, l, h, job.display_cells, rows, 0, nullptr);
        if (scan) scan->add_head(l, h, *rows, 0);
      });
    }
  }
  out.heads = std::move(heads);
  out.drawn_from = first;
  if (scan) out.patterns = scan->patterns();
  return scan;
}

}  // namespace

ForwardRunner::ForwardRunner(QObject* parent) : QObject(parent) {
  qRegisterMetaType<ForwardOutcome>();
  // ATTNLAB_KEEP_ATTENTION_MB=N: keep every probability up to N MB of them (the benchmark's
  // baseline for attention on demand, docs/performance.md)
  if (const char* mb = std::getenv("ATTNLAB_KEEP_ATTENTION_MB")) on_demand_bytes = std::atof(mb) * 1e6;
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
      [job = std::move(job), prefix = prefix_, on_demand_bytes = on_demand_bytes,
       reuse_on_demand_bytes = reuse_on_demand_bytes](const std::atomic<bool>*, const BackgroundJob::Post&) mutable {
        ForwardOutcome out;
        out.id = job.id;
        out.submitted_ns = job.submitted_ns;
        try {
          if (job.fixed) {  // an attention file: its probabilities are the result, drawn in the worker
            out.result = job.fixed;
            out.backend = "file";
            out.device = "no pass";
            for (const Tensor& t : out.result->is_cross() ? out.result->cross_attention : out.result->attention)
              out.memory.attention += static_cast<double>(t.numel()) * sizeof(float);
            out.memory.available = available_bytes();
            draw_heads(out, job, nullptr, nullptr, 0);
            out.mask = mask_heatmap(out.result, 0, job.display_cells);
            return out;
          }
          auto backend = make_backend(job.backend);
          // ATTNLAB_NO_PREFIX_REUSE=1: every pass whole (the benchmark's baseline, docs/performance.md)
          static const bool disabled = std::getenv("ATTNLAB_NO_PREFIX_REUSE") != nullptr;
          // the cpu backends run a cached pass (OpenCL would hand it to the host: its passes stay whole)
          const bool host = backend_runs_kv_cache(job.backend);
          const bool reuse = !disabled && host && reusable(*job.model, job.request) && !job.token_view;
          {  // attention on demand above the budget (not through a token view, which regroups kept probabilities)
            const ModelConfig& c = job.model->config;
            const double T = static_cast<double>(job.request.ids.size());
            const double S = job.request.cross_ids.empty() ? T : static_cast<double>(job.request.cross_ids.size());
            int kept = 0;
            for (int l = 0; l < c.num_layers; ++l)
              kept += job.request.keep_attention.empty() || job.request.keep_attention[static_cast<size_t>(l)];
            const double free = available_bytes(),
                         budget = std::min(free > 0 ? std::min(on_demand_bytes, free / 4) : on_demand_bytes,
                                           reuse ? reuse_on_demand_bytes : on_demand_bytes);
            if (!job.token_view && static_cast<double>(kept) * c.num_heads * T * S * 4.0 > budget) {
              job.request.attention_on_demand = true;
              job.request.keep_attention.assign(static_cast<size_t>(c.num_layers), false);
            }
          }
          job.request.cancel = job.cancel.get();
          if (reuse) {
            Prefix& p = *prefix;
            if (p.model != job.model || p.backend != job.backend)
              p = Prefix{job.model, job.backend, {}, nullptr, {}, 0, {}};
            // the cached rows can be merged only from a result that kept every layer this pass keeps
            const size_t L = static_cast<size_t>(job.model->config.num_layers);
            bool rows = p.last && p.last->attention.size() == L;
            if (job.request.attention_on_demand)  // and on demand, every layer's queries
              rows = rows && p.last->on_demand && p.last->on_demand->queries.size() == L;
            for (size_t l = 0; rows && l < p.last->attention.size(); ++l)
              rows = p.last->attention[l].numel() > 0 ||
                     (!job.request.keep_attention.empty() && !job.request.keep_attention[l]);
            if (!rows) p.kv.clear();
            job.request.kv = &p.kv;
            job.request.token_types.clear();  // all 0 (checked by reusable)
          } else {
            *prefix = Prefix{};  // nothing kept for a pass of another kind
          }
          {  // the result held is a whole pass's (cached rows merged in), beside the cache the pass left
            ForwardRequest whole = job.request;
            whole.kv = nullptr;
            out.memory = estimate_pass_memory(*job.model, whole);
            if (reuse)
              out.memory.kv_cache =
                  static_cast<double>(kv_bytes_per_position(job.model->config)) * job.request.ids.size();
          }
          ForwardResult r = run_forward(*job.model, *backend, job.request);
          if (r.on_demand) r.on_demand->pin = job.model;  // the recompute reads the model's weights
          out.reused = r.first_position;
          const int shared = reuse ? r.first_position : 0;  // rows equal to the last pass's
          if (shared > 0) merge_cached_rows(*prefix->last, r);
          if (job.seq2seq_part) r = seq2seq_part(std::move(r), *job.seq2seq_part);
          out.seq2seq_part = job.seq2seq_part;
          if (job.token_view) apply_token_view(r, job.token_view->first, job.token_view->second);
          out.token_view = job.token_view;
          out.result = std::make_shared<const ForwardResult>(std::move(r));
          out.backend = QString::fromStdString(backend->name());
          out.device = QString::fromStdString(backend->device());
          // The rows before the last pass's checkpoint are drawn and scanned already. The cache now
          // holds this pass's keys: the result goes with it at once, and the last maps and sums
          // are taken out, so that a pass cancelled while drawing leaves none that belong to
          // another result (the next one then draws every row).
          std::shared_ptr<const std::vector<HeatmapData>> last_heads;
          std::shared_ptr<const HeadPatternScan> last_patterns;
          if (reuse) {
            if (shared > 0 && prefix->display_cells == job.display_cells) {
              last_heads = std::move(prefix->heads);
              last_patterns = std::move(prefix->patterns);
            }
            prefix->last = out.result;
            prefix->heads.reset();
            prefix->patterns.reset();
          }
          std::shared_ptr<const HeadPatternScan> patterns =
              draw_heads(out, job, last_heads.get(), std::move(last_patterns), shared);
          out.mask = mask_heatmap(out.result, 0, job.display_cells);
          if (reuse) {
            prefix->heads = out.heads;
            prefix->display_cells = job.display_cells;
            prefix->patterns = std::move(patterns);
          }
        } catch (const Cancelled&) {
          out.cancelled = true;
          out.result.reset();
          out.heads.reset();
        } catch (const std::bad_alloc&) {
          out.error = "out of memory: the input is too long for this machine";
          *prefix = Prefix{};  // a pass that failed after its forward leaves no cache behind
        } catch (const std::exception& e) {
          out.error = QString::fromStdString(e.what());
          *prefix = Prefix{};
        }
        return out;
      },
      [this](std::shared_ptr<const ForwardOutcome> out, const QString&) { onDone(*out); });
}

bool ForwardRunner::reusable(const Model& model, const ForwardRequest& r) {
  const ModelConfig& c = model.config;
  if (!c.causal || c.num_classes > 0 || c.positional == Positional::Relative) return false;
  if (!r.cross_ids.empty() || !r.source_ids.empty() || !r.ablate.empty() || (r.hooks && !r.hooks->empty()) || r.start ||
      r.keep_layer_inputs)
    return false;
  return std::all_of(r.token_types.begin(), r.token_types.end(), [](int t) { return t == 0; });
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
