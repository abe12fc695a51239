// ExploreController: the Explore tab's engine side, without widgets. It takes the user's input
// (text, cross text, masks, padding), prepares it with the engine, runs passes in a
// ForwardRunner (debounced, newest wins, restarts a pass in flight) and announces each new
// result with resultChanged. Any panel subscribes to that signal and draws from the outcome it
// is given: the result carries its own tokens, so labels never lag the grid they label.
#pragma once

#include <QElapsedTimer>
#include <QObject>
#include <functional>
#include <memory>

#include "engine/compute/forward.h"
#include "engine/text/input.h"
#include "engine/text/token_view.h"
#include "ui/forward_runner.h"

class QTimer;

namespace attnlab {

struct ExploreInput {
  std::string text, cross_text;
  bool cross = false;
  std::string pair_text;  // sentence B of a pair ([CLS] A [SEP] B [SEP]) when `pair` is on
  bool pair = false;
  int pad_to = 0;
  TokenViewOptions view;  // what the views show of the tokens (a display transform)
  // An encoder-decoder: `text` is the source, `target` the text the decoder is teacher-forced
  // on, and `part` which of its attentions the views draw.
  std::string target;
  Seq2SeqPart part = Seq2SeqPart::Cross;
};

class ExploreController : public QObject {
  Q_OBJECT
 public:
  explicit ExploreController(QObject* parent = nullptr);
  ~ExploreController() override;

  void setModel(std::shared_ptr<const Model> model);
  const std::shared_ptr<const Model>& model() const { return model_; }
  // An attention file (engine/formats/attention_file.h): `model` holds its shape only
  // (probabilities_only) and `result` is shown as it is, with no pass; the input is the file's
  // tokens, and typed text, masks and ablation do not apply until setModel opens a model.
  void setAttention(std::shared_ptr<const Model> model, std::shared_ptr<const ForwardResult> result);
  bool showsFile() const { return fixed_ != nullptr; }
  void setBackend(const QString& name);
  QString backend() const { return backend_; }
  // The mask of the next pass, asked for after inputPrepared (the mask editor takes the new
  // input's shape from that signal before its mask is read).
  void setMaskProvider(std::function<MaskSpec()> provider) { mask_provider_ = std::move(provider); }
  // Heads ablated in every pass from now on, (layer, head) (ForwardRequest::ablate).
  void setAblated(std::vector<std::pair<int, int>> heads) { ablated_ = std::move(heads); }
  // Tests: sees every request before it is submitted (to hold a pass at a layer, say).
  void setRequestHook(std::function<void(ForwardRequest&)> hook) { request_hook_ = std::move(hook); }
  // New input: prepared at once (inputPrepared), computed after the debounce.
  void setInput(ExploreInput input);
  // Something else that changes the pass (mask, backend): recompute with the same input.
  void schedule();
  // Runs any pending recomputation now and waits for it (tests, screenshots, export).
  void flush();
  // For the owner's destructor: stops without delivering anything.
  void shutdown();

  const std::shared_ptr<const ForwardResult>& result() const { return result_; }
  const ForwardOutcome& outcome() const { return outcome_; }
  const PreparedInput& prepared() const { return prepared_; }
  // The cross text's; an encoder-decoder's target (its labels, before the shift right).
  const PreparedInput& preparedCross() const { return prepared_cross_; }
  bool seq2seq() const { return model_ && model_->is_seq2seq() && !fixed_; }
  Seq2SeqPart part() const { return input_.part; }
  int cancelledPasses() const { return runner_.cancelledCount(); }
  // Time base of submitted_ns, for keystroke-to-result latency.
  qint64 nowNs() const { return clock_.nsecsElapsed(); }

 signals:
  // The input as the model reads it (tokens, ids, [UNK] flags) and notices about it.
  void inputPrepared(const QStringList& notices);
  // A new result for the newest input that has one; outcome() and result() describe it.
  void resultChanged(const attnlab::ForwardOutcome& outcome);
  // The input has nothing to compute (empty text): views clear themselves.
  void resultCleared();
  void failed(const QString& error);

 private:
  void recompute();
  void onFinished(const ForwardOutcome& out);

  std::shared_ptr<const Model> model_;
  QString backend_ = "cpu";
  ExploreInput input_;
  PreparedInput prepared_, prepared_cross_;
  std::function<MaskSpec()> mask_provider_;
  std::vector<std::pair<int, int>> ablated_;
  std::function<void(ForwardRequest&)> request_hook_;
  std::shared_ptr<const ForwardResult> result_;
  std::shared_ptr<const ForwardResult> fixed_;  // an attention file's result (setAttention)
  ForwardOutcome outcome_;
  ForwardRunner runner_;
  quint64 next_id_ = 1, shown_id_ = 0;
  QElapsedTimer clock_;
  qint64 last_input_ns_ = 0;
  bool dirty_ = false;  // an input arrived inside the debounce window
  QTimer* debounce_;
};

}  // namespace attnlab
