// ExploreController: input preparation, debounce and the forward runner for the Explore tab.
#include "ui/explore_controller.h"

#include <QCoreApplication>
#include <QTimer>

namespace attnlab {

ExploreController::ExploreController(QObject* parent) : QObject(parent) {
  clock_.start();
  debounce_ = new QTimer(this);
  debounce_->setSingleShot(true);
  debounce_->setInterval(30);
  connect(debounce_, &QTimer::timeout, this, [this] {
    if (!dirty_) return;
    dirty_ = false;
    debounce_->start();  // the next window: inputs during it are coalesced again
    recompute();
  });
  connect(&runner_, &ForwardRunner::finished, this, &ExploreController::onFinished);
}

// Waiting with waitForIdle() here would process events, and a result arriving then would reach
// half-destroyed receivers: shut the runner down silently instead.
ExploreController::~ExploreController() {
  runner_.shutdown();
}

void ExploreController::shutdown() {
  runner_.shutdown();
}

void ExploreController::setModel(std::shared_ptr<const Model> model) {
  model_ = std::move(model);
  shown_id_ = next_id_;  // a pass of the model before, still in flight, is stale: its shape is not this one's
  fixed_.reset();
  result_.reset();
  outcome_ = {};
  setInput(input_);
}

void ExploreController::setAttention(std::shared_ptr<const Model> model, std::shared_ptr<const ForwardResult> result) {
  model_ = std::move(model);
  fixed_ = std::move(result);
  result_.reset();
  outcome_ = {};
  // the input as the views label it: the file's tokens, their ids numbering the distinct strings
  auto input_of = [](const std::vector<int>& ids, const std::vector<std::string>& tokens) {
    PreparedInput in;
    in.ids = ids;
    in.tokens = tokens;
    in.unknown.assign(ids.size(), 0);
    in.special.assign(ids.size(), 0);
    in.token_types.assign(ids.size(), 0);
    in.words.assign(ids.size(), -1);
    return in;
  };
  prepared_ = input_of(fixed_->ids, fixed_->tokens);
  prepared_cross_ = fixed_->is_cross() ? input_of(fixed_->cross_ids, fixed_->cross_tokens) : PreparedInput{};
  emit inputPrepared({});
  shown_id_ = ++next_id_;  // a pass of the model before, still in flight, is stale
  schedule();
}

void ExploreController::setBackend(const QString& name) {
  backend_ = name;
  schedule();
}

void ExploreController::setInput(ExploreInput input) {
  input_ = std::move(input);
  if (fixed_) return;  // an attention file's tokens are its input: typed text waits for a model
  QStringList notices;
  auto prepare = [&](const std::string& text, const char* what, bool with_pair) {
    if (!model_) return PreparedInput{};
    InputOptions o;
    o.overflow = Overflow::Cut;
    o.pad_to = input_.pad_to;
    o.what = what;
    if (with_pair && input_.pair && !input_.pair_text.empty()) o.pair = input_.pair_text;
    try {
      PreparedInput in = prepare_text(*model_, text, o);
      for (const auto& n : in.notices) notices << QString::fromStdString(n);
      return in;
    } catch (const Error& e) {
      notices << QString::fromStdString(e.what());
      return PreparedInput{};
    }
  };
  if (seq2seq()) {  // the source and the target: no cross mode, pair or token view
    prepared_ = prepare(input_.text, "source", false);
    const int pad_to = input_.pad_to;
    input_.pad_to = 0;  // padding is the source's (the decoder reads the target unpadded, as the CLI does)
    prepared_cross_ = input_.target.empty() ? PreparedInput{} : prepare(input_.target, "target", false);
    input_.pad_to = pad_to;
    if (prepared_cross_.ids.empty())
      notices << "Type a target: the decoder reads it as transformers trains (after its start token, shifted right), "
                 "and its cross-attention reads the source.";
    input_.view = {};
  } else {
    prepared_ = prepare(input_.text, "text", true);
    prepared_cross_ = input_.cross ? prepare(input_.cross_text, "cross text", false) : PreparedInput{};
    if (input_.cross && prepared_cross_.ids.empty()) notices << "Type a second text for cross-attention.";
  }
  // Say what the token view does only when it does something to this input.
  bool any_special = false, any_pieces = false;
  for (const PreparedInput* in : {&prepared_, &prepared_cross_}) {
    for (uint8_t sp : in->special) any_special = any_special || sp;
    for (size_t i = 1; i < in->words.size(); ++i)
      any_pieces = any_pieces || (in->words[i] >= 0 && in->words[i] == in->words[i - 1]);
  }
  if (input_.view.hide_special && any_special)
    notices << "Special tokens hidden: their rows and columns are left out, so rows sum to less than 1.";
  if (input_.view.merge_pieces && any_pieces)
    notices << "Word pieces merged: attention to a word is the sum over its pieces, from a word the mean.";
  emit inputPrepared(notices);
  schedule();
}

// Throttle with a leading edge: an input after a quiet spell is computed at once; inputs
// arriving within the next 30 ms are coalesced into one computation when that window closes
// (the window is not restarted by each key, so continuous typing is computed every 30 ms, not
// only when it stops). The runner keeps only the newest request and restarts a pass in flight,
// so fast typing never builds a backlog.
void ExploreController::schedule() {
  last_input_ns_ = clock_.nsecsElapsed();
  if (!debounce_->isActive() && !runner_.busy()) {
    dirty_ = false;
    debounce_->start();
    recompute();
  } else {
    dirty_ = true;
    if (!debounce_->isActive()) debounce_->start();
  }
}

void ExploreController::recompute() {
  if (!model_) return;
  if (fixed_) {  // drawn in the worker as a pass's result is, so a long file never blocks the window
    ForwardJob job;
    job.model = model_;
    job.fixed = fixed_;
    job.id = next_id_++;
    job.submitted_ns = last_input_ns_;
    runner_.submit(std::move(job));
    return;
  }
  const bool empty = prepared_.ids.empty() || ((input_.cross || seq2seq()) && prepared_cross_.ids.empty());
  if (empty) {
    ++next_id_;  // results of earlier inputs still in flight are stale now
    shown_id_ = next_id_;
    result_.reset();
    outcome_ = {};
    emit resultCleared();
    return;
  }
  ForwardJob job;
  job.model = model_;
  job.backend = backend_.toStdString();
  job.request.ids = prepared_.ids;
  job.request.tokens = prepared_.tokens;
  job.request.token_types = prepared_.token_types;
  if (seq2seq()) {  // teacher-forced as transformers trains: labels = the target, shifted right
    job.request.source_ids = prepared_.ids;
    job.request.source_tokens = prepared_.tokens;
    job.request.target_ids = prepared_cross_.ids;
    job.request.target_tokens = prepared_cross_.tokens;
    job.request.ids = decoder_input_ids(*model_, prepared_cross_.ids);
    job.request.tokens = {model_->readable_token(model_->config.decoder_start_id)};
    job.request.tokens.insert(job.request.tokens.end(), prepared_cross_.tokens.begin(),
                              prepared_cross_.tokens.end() - 1);
    job.request.token_types.clear();
    job.seq2seq_part = input_.part;
    const ModelConfig& e = model_->encoder->config;  // the views draw the decoder's layers x heads
    if (input_.part == Seq2SeqPart::Encoder &&
        (e.num_layers != model_->config.num_layers || e.num_heads != model_->config.num_heads))
      job.seq2seq_part = Seq2SeqPart::Cross;
  } else if (input_.cross) {
    job.request.cross_ids = prepared_cross_.ids;
    job.request.cross_tokens = prepared_cross_.tokens;
    job.request.cross_token_types = prepared_cross_.token_types;
  }
  if (input_.view.active()) {
    const PreparedInput& a = prepared_;
    const PreparedInput& b = input_.cross ? prepared_cross_ : prepared_;
    job.token_view = std::make_pair(group_tokens(a.tokens, a.special, a.words, input_.view),
                                    group_tokens(b.tokens, b.special, b.words, input_.view));
    if (job.token_view->first.members.empty() || job.token_view->second.members.empty())
      job.token_view.reset();  // nothing but special tokens: show them rather than nothing
  }
  if (mask_provider_) job.request.mask = mask_provider_();
  if (seq2seq()) {
    job.request.mask.custom.reset();  // the mask editor paints one sequence's mask
    job.request.mask.global.clear();  // (the strip's ticks are the source's positions)
  } else {
    job.request.ablate = ablated_;
  }
  if (request_hook_) request_hook_(job.request);
  job.id = next_id_++;
  job.submitted_ns = last_input_ns_;  // latency is measured from the input, debounce included
  runner_.submit(std::move(job));
}

void ExploreController::onFinished(const ForwardOutcome& out) {
  if (out.id < shown_id_) return;  // an older pass finishing late, or one for a cleared input
  shown_id_ = out.id;
  if (!out.result) {
    emit failed(out.error);
    return;
  }
  result_ = out.result;
  outcome_ = out;
  emit resultChanged(out);
}

void ExploreController::flush() {
  if (debounce_->isActive()) {
    debounce_->stop();
    if (dirty_) recompute();
    dirty_ = false;
  }
  runner_.waitForIdle();
  QCoreApplication::processEvents();
}

}  // namespace attnlab
