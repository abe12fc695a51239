// ExploreState (see explore_state.h).
#include "ui/explore/explore_state.h"

#include <algorithm>

#include "engine/analysis/methods.h"

namespace attnlab {

QStringList to_labels(const std::vector<std::string>& tokens) {
  QStringList l;
  for (const auto& t : tokens) {
    QString s = t == " " ? QStringLiteral("\u2423") : QString::fromStdString(t);
    if (s.size() > 9) s = s.left(8) + QStringLiteral("\u2026");
    l << s;
  }
  return l;
}

ExploreState::ExploreState(ExploreController* controller, QObject* parent) : QObject(parent), controller_(controller) {}

ExploreState::~ExploreState() {
  vn_job_.shutdown();
}

void ExploreState::setModel(std::shared_ptr<const Model> model) {
  model_ = std::move(model);
  vn_job_.cancel();
  vn_.reset();
  outcome_ = {};
  row_labels_.clear();
  col_labels_.clear();
  ablated_.clear();
  controller_->setAblated({});
  if (model_ && layer_ >= model_->config.num_layers) layer_ = 0;
  if (model_ && opened_head_ >= model_->config.num_heads) opened_head_ = 0;
  emit modelChanged();
}

void ExploreState::setOutcome(const ForwardOutcome& outcome) {
  outcome_ = outcome;
  const ForwardResult& r = *outcome_.result;
  row_labels_ = to_labels(r.tokens);  // the result's own tokens: never another input's
  col_labels_ = to_labels(r.is_cross() ? r.cross_tokens : r.tokens);
  vn_.reset();  // value-weighted maps are of the previous input
  if (value_weighted_) startValueNorm();
  emit resultChanged();
}

void ExploreState::clearOutcome() {
  vn_job_.cancel();
  vn_.reset();
  outcome_ = {};
  row_labels_.clear();
  col_labels_.clear();
  emit resultChanged();
}

void ExploreState::setLayer(int layer) {
  if (!model_) return;
  layer = std::clamp(layer, 0, model_->config.num_layers - 1);
  if (layer == layer_) return;
  layer_ = layer;
  emit layerChanged(layer);
}

void ExploreState::openHead(int head) {
  if (head < 0 || head >= heads()) return;
  opened_head_ = head;
  emit headOpened(head);
  emit pageRequested("head");
}

void ExploreState::setColormap(const QString& name) {
  colormap_ = name;
  emit displayChanged();
}

void ExploreState::setAnnotate(bool on) {
  annotate_ = on;
  emit displayChanged();
}

void ExploreState::setScale(Scale s) {
  scale_ = s;
  emit displayChanged();
}

void ExploreState::setValueWeighted(bool on) {
  if (on == value_weighted_) return;
  value_weighted_ = on;
  if (on && !vn_) startValueNorm();
  emit displayChanged();
}

void ExploreState::waitForValueNorm() {
  controller_->flush();
  vn_job_.wait();
}

void ExploreState::setAblated(int layer, int head, bool ablated) {
  // (an encoder-decoder's heads are not ablated yet)
  if (!model_ || model_->is_seq2seq() || layer < 0 || layer >= model_->config.num_layers || head < 0 ||
      head >= model_->config.num_heads)
    return;
  if (ablated)
    ablated_.insert({layer, head});
  else
    ablated_.erase({layer, head});
  controller_->setAblated({ablated_.begin(), ablated_.end()});
  emit ablationChanged();
  controller_->schedule();
}

void ExploreState::setMaskProvider(std::function<MaskSpec()> provider) {
  mask_provider_ = provider;
  controller_->setMaskProvider(std::move(provider));
}

ForwardRequest ExploreState::analysisRequest() const {
  ForwardRequest req;
  req.ids = controller_->prepared().ids;
  req.token_types = controller_->prepared().token_types;
  req.mask = mask();
  req.ablate = {ablated_.begin(), ablated_.end()};
  if (result() && result()->is_cross()) req.cross_ids = controller_->preparedCross().ids;
  return req;
}

// Norm-based attention for the Heads and Head tabs, in the background (a forward's worth of work).
void ExploreState::startValueNorm() {
  vn_job_.cancel();
  if (!model_ || !result() || result()->is_seq2seq()) return;
  const ForwardRequest req = analysisRequest();
  if (req.ids.empty()) return;
  std::shared_ptr<const Model> model = model_;
  vn_job_.start<Tensor>(
      [model, req](const std::atomic<bool>* cancel, const BackgroundJob::Post&) {
        ForwardRequest r = req;
        r.cancel = cancel;
        auto backend = make_backend("cpu");
        return value_norm_attention(*model, *backend, r);
      },
      [this, model](std::shared_ptr<const Tensor> vn, const QString& error) {
        if (model_ != model) return;
        vn_ = vn;
        if (!vn) emit status("value-weighted attention: " + error);
        emit displayChanged();
      });
}

// The worker's attention grid, or its value-weighted counterpart when that is chosen and computed
// for this input.
HeatmapData ExploreState::headData(int layer, int head, int max_cells) const {
  const std::shared_ptr<const ForwardResult>& r = result();
  const int H = heads();
  HeatmapData d = max_cells > 0 ? head_heatmap(r, layer, head, max_cells)
                                : outcome_.heads->at(static_cast<size_t>(layer * H + head));
  const int T = static_cast<int>(r->ids.size());
  if (value_weighted_ && vn_ && !r->is_cross() && vn_->dim(2) == T && vn_->dim(0) > layer && vn_->dim(1) > head) {
    const size_t TT = static_cast<size_t>(T) * T;
    const float* src = vn_->ptr() + (static_cast<size_t>(layer) * vn_->dim(1) + head) * TT;
    std::vector<uint8_t> blocked(TT, 0);
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < T; ++j) blocked[static_cast<size_t>(i) * T + j] = r->mask_of(layer).is_blocked(head, i, j);
    d = owned_heatmap(std::vector<float>(src, src + TT), std::move(blocked), T, T,
                      max_cells > 0 ? max_cells : ForwardJob{}.display_cells);
  }
  return d;
}

HeatmapData ExploreState::headMap(int layer, int head, int max_cells, bool with_layer) const {
  HeatmapData d = headData(layer, head, max_cells);
  d.row_labels = row_labels_;
  d.col_labels = col_labels_;
  d.title = headTitle(layer, head, with_layer);
  d.hatched = isAblated(layer, head);
  return d;
}

QString ExploreState::badge(int layer, int head) const {
  const auto& patterns = outcome_.patterns;
  if (static_cast<size_t>(layer) >= patterns.size() ||
      static_cast<size_t>(head) >= patterns[static_cast<size_t>(layer)].size())
    return {};
  const HeadPattern& pat = patterns[static_cast<size_t>(layer)][static_cast<size_t>(head)];
  QString badge = QString::fromStdString(pat.label);
  if (pat.label == "sep") badge = "[SEP]";
  if (pat.label == "token") {
    const QString token = col_labels_.value(pat.focus, QString::number(pat.focus));
    badge = QString::fromUtf8("\u2192 ") + token;
    if (col_labels_.count(token) > 1) badge += QString(" (%1)").arg(pat.focus);  // which "the": its position
  }
  if (pat.label == "first" && !row_labels_.isEmpty() && row_labels_[0].startsWith('['))
    badge = row_labels_[0];  // [CLS]
  return badge;
}

QString ExploreState::headTitle(int layer, int head, bool with_layer) const {
  QString t = with_layer ? QString("layer %1, head %2").arg(layer).arg(head) : QString("head %1").arg(head);
  // the pattern badge (Clark et al. 2019): what the head mostly attends to, when one thing dominates
  // (badges describe the raw attention: none over value-weighted maps)
  if (!value_weighted_)
    if (const QString b = badge(layer, head); !b.isEmpty()) t += QString::fromUtf8(" \u00b7 ") + b;
  if (value_weighted_ && with_layer) t += ", value-weighted";  // the enlarged head: its scale is not probabilities
  if (isAblated(layer, head)) t += " (ablated)";
  return t;
}

float ExploreState::colourTop(int layer) const {
  if (scale_ == Scale::Unit && !value_weighted_) return 1.0f;  // norms have no 1: per layer instead
  if (scale_ == Scale::PerHead || !result()) return 0.0f;
  float top = 0;
  for (int h = 0; h < heads(); ++h) top = std::max(top, headData(layer, h, 0).vmax);
  return top > 0 ? top : 1.0f;
}

}  // namespace attnlab
