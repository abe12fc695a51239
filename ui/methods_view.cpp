// The "Beyond attention" page (see methods_view.h).
#include "ui/methods_view.h"

#include <algorithm>

#include <QApplication>
#include <QComboBox>
#include <QHBoxLayout>
#include <QPushButton>
#include <QLineEdit>
#include <QFileInfo>
#include <QFileDialog>
#include <QLabel>
#include <QStandardItemModel>
#include <QVBoxLayout>

#include "engine/analysis/methods.h"
#include "engine/text/input.h"
#include "ui/figure_export.h"
#include "ui/heatmap_data.h"
#include "ui/heatmap_view.h"

namespace attnlab {

namespace {

const char* kCaveat =
    "<br><i>Attention is not explanation (Jain &amp; Wallace 2019; Wiegreffe &amp; Pinter 2019): read these maps as "
    "hypotheses to test, e.g. by ablating heads.</i>";

QString describe(int method, const QString& note) {
  switch (method) {
    case MethodsView::Rollout:
      return "<b>Attention rollout</b> (Abnar &amp; Zuidema 2020): each layer's attention averaged over heads, mixed "
             "half and half with the residual connection, multiplied through the layers. Row i: how much token i's "
             "final representation draws on each input token; rows sum to 1.";
    case MethodsView::Relevance:
      return "<b>Gradient-weighted relevance</b> (Chefer et al. 2021) for " + note.toHtmlEscaped() +
             ": each layer's attention times its gradient, negatives clipped, averaged over heads and accumulated "
             "from the first layer to the last. The map starts as the identity (each token is its own source); "
             "that identity is subtracted, so what is shown is what attention adds.";
    case MethodsView::ValueNorm:
      return "<b>Value-weighted attention</b> (Kobayashi et al. 2020): a<sub>ij</sub> &middot; ||f(x<sub>j</sub>)||, "
             "the attention weight times the size of what key j sends through the head's value and output "
             "projections. Large weights on small vectors (often special tokens and punctuation) shrink; the scale is "
             "a length in the model's hidden space, so rows do not sum to 1.";
    case MethodsView::MeanHeads:
      return "<b>Attention averaged over the heads</b> of this layer.";
    case MethodsView::Compare:
      return "<b>Compare, A - B</b>: this input's attention minus " + note.toHtmlEscaped() +
             " (red: A attends more, blue: B attends more).";
    case MethodsView::SelectedQueries:
      return "<b>Selected tokens as queries</b>: for every head of this layer, the rows of the tokens selected in "
             "the token strip (click, Ctrl-click or Shift-click) added up: where they look together.";
    case MethodsView::SelectedKeys:
      return "<b>Selected tokens as keys</b>: for every head of this layer, the columns of the tokens selected in "
             "the token strip added up: who attends to them.";
    default:
      return "<b>Attention averaged over every head of every layer.</b>";
  }
}

}  // namespace

MethodsView::MethodsView(QWidget* parent) : QWidget(parent) {
  auto* v = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  method_box_ = new QComboBox(this);
  method_box_->setObjectName("methodBox");
  method_box_->addItems({"Rollout (all layers)", "Relevance for the prediction (gradients)",
                         "Value-weighted (this layer)", "Mean over heads (this layer)",
                         "Mean over all layers and heads", "Selected tokens as queries (every head)",
                         "Selected tokens as keys (every head)", "Compare: A minus B (another text or model)"});
  method_box_->setToolTip("What to show instead of one head's raw attention");
  head_box_ = new QComboBox(this);
  head_box_->setObjectName("methodHead");
  head_box_->setToolTip("Value-weighted attention of one head, or the mean over the layer's heads");
  agg_box_ = new QComboBox(this);
  agg_box_->setObjectName("methodAggregate");
  agg_box_->addItems({"sum", "mean"});
  agg_box_->setToolTip("Add up the selected tokens' rows (columns), or average them");
  agg_box_->setVisible(false);
  compare_text_ = new QLineEdit(this);
  compare_text_->setObjectName("compareText");
  compare_text_->setPlaceholderText("B: another text with the same number of tokens");
  compare_text_->setToolTip("Compare this input (A) with another text (B) on the same model: A - B, per head");
  compare_model_button_ = new QPushButton("B: another model...", this);
  compare_model_button_->setToolTip(
      "Compare with the same text on another model folder (a checkpoint, a fine-tuned "
      "copy) with as many layers and heads");
  compare_text_->setVisible(false);
  compare_model_button_->setVisible(false);
  bar->addWidget(new QLabel("show:", this));
  bar->addWidget(method_box_);
  bar->addWidget(head_box_);
  bar->addWidget(agg_box_);
  bar->addWidget(compare_text_, 1);
  bar->addWidget(compare_model_button_);
  bar->addStretch();
  v->addLayout(bar);
  status_ = new QLabel(this);
  status_->setWordWrap(true);
  status_->setTextFormat(Qt::RichText);
  v->addWidget(status_);
  view_ = new HeatmapView(this);
  view_->setObjectName("methodView");
  view_->setMaxCells(1024);
  // the map fills the page: one map, so the room goes to it (cells need not be square)
  v->addWidget(view_, 1);
  head_box_->setVisible(false);
  connect(method_box_, &QComboBox::currentIndexChanged, this, [this] {
    head_box_->setVisible(method() == ValueNorm || method() == Compare);
    agg_box_->setVisible(selectionMethod());
    compare_text_->setVisible(method() == Compare);
    compare_model_button_->setVisible(method() == Compare);
    if (selectionMethod()) return showSelection();
    if (maps_method_ != method()) dirty_ = true;
    if (isVisible()) start();
  });
  connect(agg_box_, &QComboBox::currentIndexChanged, this, [this] { showSelection(); });
  connect(compare_text_, &QLineEdit::editingFinished, this,
          [this] { setCompare(compare_text_->text(), compare_model_, compare_model_name_); });
  connect(compare_model_button_, &QPushButton::clicked, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, "Model folder to compare with (B)");
    if (dir.isEmpty()) return;
    try {
      auto m = std::make_shared<const Model>(load_model(dir.toStdString()));
      compare_text_->clear();
      setCompare(QString(), std::move(m), QFileInfo(dir).fileName());
    } catch (const std::exception& e) {
      status_->setText("<b>Cannot open " + dir.toHtmlEscaped() + ":</b> " +
                       QString::fromUtf8(e.what()).toHtmlEscaped());
    }
  });
  connect(head_box_, &QComboBox::currentIndexChanged, this, [this] { show(); });
}

MethodsView::~MethodsView() = default;

void MethodsView::setModel(std::shared_ptr<const Model> model) {
  model_ = std::move(model);
  job_.cancel();
  maps_.reset();
  maps_method_ = -1;
  shown_.reset();
  view_->setData({});
  QSignalBlocker block(head_box_);
  head_box_->clear();
  head_box_->addItem("mean of heads");
  for (int h = 0; h < model_->config.num_heads; ++h) head_box_->addItem(QString("head %1").arg(h));
  const bool predicts = model_->config.num_classes > 0 || model_->config.lm_head;
  auto* items = qobject_cast<QStandardItemModel*>(method_box_->model());
  // an attention file has probabilities only: rollout, the means and the selections read them;
  // relevance, value-weighted and compare need a model's weights
  const bool file = model_->probabilities_only;
  if (items) {
    items->item(Relevance)->setEnabled(predicts);
    items->item(ValueNorm)->setEnabled(!file);
    items->item(Compare)->setEnabled(!file);
  }
  if ((!predicts && method() == Relevance) || (file && (method() == ValueNorm || method() == Compare)))
    method_box_->setCurrentIndex(Rollout);
  dirty_ = true;
}

void MethodsView::setCompare(const QString& text, std::shared_ptr<const Model> model, const QString& model_name) {
  if (compare_text_->text() != text) compare_text_->setText(text);
  compare_model_ = text.isEmpty() ? std::move(model) : nullptr;
  compare_model_name_ = model_name;
  compare_model_button_->setText(compare_model_ ? "B: " + model_name : QString("B: another model..."));
  if (maps_method_ == Compare) maps_method_ = -1;
  dirty_ = true;
  if (isVisible() && method() == Compare) start();
}

void MethodsView::setInput(const ForwardRequest& request, const QStringList& labels, const QString& text) {
  request_ = request;
  labels_ = labels;
  text_ = text;
  dirty_ = true;
  if (isVisible() && !selectionMethod()) start();
}

void MethodsView::setTokenGroups(std::optional<TokenGroups> groups) {
  groups_ = std::move(groups);
  if (!selectionMethod()) show();
}

void MethodsView::setLayer(int layer) {
  if (layer == layer_) return;
  layer_ = layer;
  if (selectionMethod()) return showSelection();
  show();
}

void MethodsView::setResult(std::shared_ptr<const ForwardResult> result) {
  result_ = std::move(result);
  if (selectionMethod()) showSelection();
}

void MethodsView::setSelection(std::vector<int> tokens) {
  selection_ = std::move(tokens);
  if (selectionMethod()) showSelection();
}

void MethodsView::setAverage(bool mean) {
  agg_box_->setCurrentIndex(mean ? 1 : 0);
}

void MethodsView::showSelection() {
  shown_.reset();
  const bool queries = method() == SelectedQueries;
  if (!result_ || result_->is_cross() || result_->attention.empty()) {
    view_->setData({});
    status_->setText(describe(method(), {}) +
                     "<br>Self-attention only: type some text (cross mode has no token strip "
                     "selection).");
    return;
  }
  const int layer = std::clamp(layer_, 0, static_cast<int>(result_->attention.size()) - 1);
  if (!result_->has_probs(layer)) {
    view_->setData({});
    status_->setText(describe(method(), {}) + "<br>This layer's attention is not kept; choose a kept layer.");
    return;
  }
  const std::shared_ptr<const Tensor> probs = result_->layer_probs(layer);  // kept, or recomputed (on demand)
  const Tensor& P = *probs;                                                 // [H, T, T], as drawn
  const int H = static_cast<int>(P.dim(0)), T = static_cast<int>(P.dim(1));
  // The strip lists every token; with hidden special tokens or merged pieces the shown result
  // has the groups' positions: a selected token selects the word it is part of.
  std::vector<int> sel;
  bool hidden_only = false;
  if (T == labels_.size()) {
    for (int t : selection_)
      if (t >= 0 && t < T) sel.push_back(t);
  } else if (groups_ && static_cast<int>(groups_->members.size()) == T) {
    for (int g = 0; g < T; ++g)
      for (int t : groups_->members[static_cast<size_t>(g)])
        if (std::find(selection_.begin(), selection_.end(), t) != selection_.end()) {
          sel.push_back(g);
          break;
        }
    hidden_only = sel.empty() && !selection_.empty();
  } else {
    view_->setData({});
    status_->setText(describe(method(), {}) + "<br>The shown tokens do not match the token strip yet.");
    return;
  }
  if (sel.empty()) {
    view_->setData({});
    status_->setText(describe(method(), {}) +
                     (hidden_only ? QString("<br>The selected tokens are hidden (hide [CLS]/[SEP]): select others, "
                                            "or untick that option.")
                                  : QString("<br><b>Select tokens in the token strip</b> above (click, Ctrl-click or "
                                            "Shift-click) to see them here.")));
    return;
  }
  const bool mean = agg_box_->currentIndex() == 1;
  std::vector<float> values(static_cast<size_t>(H) * T, 0.0f);
  for (int h = 0; h < H; ++h)
    for (int t : sel)
      for (int k = 0; k < T; ++k) {
        // queries: row t of head h; keys: column t
        const float p = queries ? P.data[(static_cast<size_t>(h) * T + t) * T + k]
                                : P.data[(static_cast<size_t>(h) * T + k) * T + t];
        values[static_cast<size_t>(h) * T + k] += mean ? p / static_cast<float>(sel.size()) : p;
      }
  QStringList heads, tokens, chosen;
  for (int h = 0; h < H; ++h) heads << QString("head %1").arg(h);
  for (const auto& t : result_->tokens) tokens << QString::fromStdString(t);
  for (int t : sel) chosen << (t < tokens.size() ? tokens[t] : QString::number(t));
  const QString title = QString("Layer %1: attention %2 %3 (%4)")
                            .arg(layer)
                            .arg(queries ? "from" : "to")
                            .arg(chosen.join(", "))
                            .arg(mean ? "mean" : "sum");
  // for export: a one-panel cross result, heads as queries and the tokens as keys
  auto result = std::make_shared<ForwardResult>();
  Tensor one({1, H, T});
  std::copy(values.begin(), values.end(), one.data.begin());
  result->cross_attention.push_back(std::move(one));
  for (const QString& h : heads) result->tokens.push_back(h.toStdString());
  result->cross_tokens = result_->tokens;
  result->ids.assign(static_cast<size_t>(H), 0);
  result->cross_ids = result_->ids;
  shown_ = result;
  export_title_ = title;
  HeatmapData d = owned_heatmap(std::move(values), {}, H, T, 1024);
  d.row_labels = heads;
  d.col_labels = tokens;
  d.row_axis = "heads";
  d.col_axis = queries ? "keys" : "queries";
  d.title = title;
  view_->setData(std::move(d));
  status_->setText(
      describe(method(), {}) +
      QString(" Rows: heads; columns: %1.").arg(queries ? "the keys they look at" : "the queries that look") + kCaveat);
}

MethodId page_method_id(int page_index) {
  for (const MethodRow& r : method_table())
    if (r.page_index == page_index) return r.id;
  throw Error("internal: no analysis method at page index " + std::to_string(page_index));
}

void MethodsView::setMethod(Method m) {
  method_box_->setCurrentIndex(m);
}

MethodsView::Method MethodsView::method() const {
  return static_cast<Method>(method_box_->currentIndex());
}

void MethodsView::setGradient(const QString& name) {
  colormap_ = name;
  view_->setGradient(name);
}

QString MethodsView::statusText() const {
  return status_->text();
}

void MethodsView::showEvent(QShowEvent* e) {
  QWidget::showEvent(e);
  if (selectionMethod()) return showSelection();
  if (dirty_) start();
}

void MethodsView::start() {
  if (selectionMethod()) return showSelection();  // no pass: read from the shown result
  dirty_ = false;
  job_.cancel();  // superseded: its result is dropped, nothing waits for it
  if (!model_ || request_.ids.empty()) {
    maps_.reset();
    show();
    return;
  }
  const int m = method();
  const QString pending = m == Compare ? QString("B") : QString("the prediction");
  status_->setText(describe(m, pending) + "<br>Computing...");
  const ForwardRequest request = request_;
  std::shared_ptr<const Model> model = model_;
  const std::shared_ptr<const Model> other = compare_model_;
  const std::string other_text = compare_text_->text().toStdString(), text = text_.toStdString();
  const QString other_name = compare_model_name_;
  const std::shared_ptr<const ForwardResult> shown = result_;  // an attention file's maps are read from it
  struct Computed {
    Tensor maps;
    std::vector<uint8_t> blocked;  // [T * T]: blocked for every head by the mask
    QString note;                  // what was explained or compared with
  };
  job_.start<Computed>(
      [=](const std::atomic<bool>* cancel, const BackgroundJob::Post&) {
        ForwardRequest req = request;
        req.cancel = cancel;
        Computed out;
        if (model->probabilities_only) {  // no pass: the file's probabilities, its mask's blocked keys
          if (!shown) throw Error("the attention file is still being read");
          out.maps = probability_map(page_method_id(m), *shown);  // Error for a method that needs weights
          const AttnMask& mask = shown->mask;
          const int T = static_cast<int>(shown->ids.size());
          out.blocked.assign(static_cast<size_t>(T) * T, 0);
          if (mask.T == T && mask.S == T)
            for (int i = 0; i < T; ++i)
              for (int j = 0; j < T; ++j) out.blocked[static_cast<size_t>(i) * T + j] = mask.is_blocked(0, i, j);
          return out;
        }
        auto backend = make_backend("cpu");
        if (m == Relevance) {
          int target = -1;
          Tensor R = compute_method_map(MethodId::GradAttention, *model, *backend, req, -1, &target);
          for (int64_t i = 0; i < R.dim(0); ++i) R.at(i, i) -= 1.0f;  // the identity says nothing
          out.maps = std::move(R);
          out.note = model->config.num_classes > 0
                         ? QString("the logit of \"%1\"").arg(QString::fromStdString(model->label(target)))
                         : QString("the next token \"%1\"").arg(QString::fromStdString(model->readable_token(target)));
        } else if (m == Compare) {
          ForwardRequest a = req;
          a.keep_attention.clear();
          ForwardRequest b = a;
          const Model& mb = other ? *other : *model;
          PreparedInput pb;
          if (!other_text.empty()) {
            pb = prepare_text(*model, other_text);
            out.note = QString("B, \"%1\" on the same model").arg(QString::fromStdString(other_text));
          } else if (other) {
            pb = prepare_text(mb, text);
            b.ablate.clear();  // the heads ablated in A are A's model's
            out.note = QString("B, the same text on the model %1").arg(other_name);
            if (mb.config.num_layers != model->config.num_layers || mb.config.num_heads != model->config.num_heads)
              throw Error("B's model has " + std::to_string(mb.config.num_layers) + " layers x " +
                          std::to_string(mb.config.num_heads) + " heads, A's " +
                          std::to_string(model->config.num_layers) + " x " + std::to_string(model->config.num_heads) +
                          ": a difference map needs the same shape");
          } else {
            throw Error("choose B above: another text with the same number of tokens, or another model folder");
          }
          b.ids = pb.ids, b.token_types = pb.token_types, b.tokens = pb.tokens;
          if (b.ids.size() != a.ids.size())
            throw Error("B has " + std::to_string(b.ids.size()) + " tokens and A " + std::to_string(a.ids.size()) +
                        ": a difference map needs the same number (pad the shorter with \"pad to length\")");
          Tensor d = run_forward(*model, *backend, a).stacked_probs();
          const Tensor db = run_forward(mb, *backend, b).stacked_probs();
          for (size_t k = 0; k < d.data.size(); ++k) d.data[k] -= db.data[k];
          out.maps = std::move(d);
        } else {  // rollout, value-weighted, the means: as the CLI computes them
          out.maps = compute_method_map(page_method_id(m), *model, *backend, req);
        }
        // cells the mask blocks for every head: drawn as blocked where the map is 0 there
        const AttnMask mask = self_attention_mask(*model, req);
        const int T = mask.T;
        out.blocked.assign(static_cast<size_t>(T) * T, 1);
        for (int p = 0; p < mask.planes; ++p)
          for (int i = 0; i < T; ++i)
            for (int j = 0; j < T; ++j)
              if (!mask.is_blocked(p, i, j)) out.blocked[static_cast<size_t>(i) * T + j] = 0;
        return out;
      },
      [this, model, m, pending](std::shared_ptr<const Computed> c, const QString& error) {
        if (model_ != model) return;
        maps_method_ = m;
        if (!c) {
          maps_.reset();
          if (method() != m) return;  // the user has moved on (token selection draws without a job)
          view_->setData({});
          shown_.reset();
          status_->setText(describe(m, pending) + "<br><b>Not available:</b> " + error.toHtmlEscaped());
          return;
        }
        maps_ = std::shared_ptr<const Tensor>(c, &c->maps);
        blocked_ = std::shared_ptr<const std::vector<uint8_t>>(c, &c->blocked);
        maps_note_ = c->note;
        show();
      });
}

QString MethodsView::title() const {
  const int head = head_box_->currentIndex() - 1;
  switch (maps_method_) {
    case Rollout:
      return "Attention rollout (all layers)";
    case Relevance:
      return "Relevance for " + maps_note_;
    case ValueNorm:
      return head < 0 ? QString("Layer %1, value-weighted, mean of heads").arg(layer_)
                      : QString("Layer %1, head %2, value-weighted").arg(layer_).arg(head);
    case Compare:
      return head < 0 ? QString("Layer %1, mean of heads: A - B").arg(layer_)
                      : QString("Layer %1, head %2: A - B").arg(layer_).arg(head);
    case MeanHeads:
      return QString("Layer %1, mean of heads").arg(layer_);
    default:
      return "Mean of every layer and head";
  }
}

// Relevance: the tokens the prediction rests on, from the rows the model reads out.
QString MethodsView::readoutSummary() const {
  if (!maps_ || maps_method_ != Relevance || !model_ || maps_->dim(0) != static_cast<int64_t>(request_.ids.size()))
    return {};
  Tensor R = *maps_;
  for (int64_t i = 0; i < R.dim(0); ++i) R.at(i, i) += 1.0f;  // readout_relevance takes R with its identity
  std::vector<float> rel = readout_relevance(*model_, request_.ids, R);
  QStringList labels = labels_;
  if (groups_) {  // as the map is drawn: words, without hidden tokens
    std::vector<float> grouped;
    labels.clear();
    for (size_t g = 0; g < groups_->members.size(); ++g) {
      float sum = 0;
      for (int t : groups_->members[g])
        if (t >= 0 && static_cast<size_t>(t) < rel.size()) sum += rel[static_cast<size_t>(t)];
      grouped.push_back(sum);
      labels << QString::fromStdString(groups_->labels[g]);
    }
    rel = std::move(grouped);
  }
  std::vector<int> order(rel.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int>(k);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return rel[static_cast<size_t>(a)] > rel[static_cast<size_t>(b)]; });
  QStringList top;
  for (size_t k = 0; k < order.size() && k < 5; ++k) {
    const int j = order[k];
    const QString label = j < labels.size() ? labels[j] : QString::number(j);
    top << QString("%1 %2").arg(label.toHtmlEscaped()).arg(rel[static_cast<size_t>(j)], 0, 'g', 2);
  }
  return "<br><b>The prediction rests most on:</b> " + top.join(", ") + " (" +
         (model_->config.num_classes > 0 ? QString("the pooled rows") : QString("the last position's row")) + ")";
}

void MethodsView::show() {
  // A job for another method finishing after a switch to token selection must not clear it.
  if (selectionMethod()) return showSelection();
  if (!maps_ || maps_method_ != method()) {
    view_->setData({});
    shown_.reset();
    if (!model_ || request_.ids.empty()) status_->setText("Type some text first");
    return;
  }
  const Tensor& m = *maps_;
  const int T = static_cast<int>(m.dim(m.rank() - 1));
  const size_t TT = static_cast<size_t>(T) * T;
  std::vector<float> values(TT, 0.0f);
  const int layer = std::min(layer_, m.rank() >= 3 ? static_cast<int>(m.dim(0)) - 1 : 0);
  if (m.rank() == 2) {
    values.assign(m.data.begin(), m.data.end());
  } else if (m.rank() == 3) {  // [L, T, T]
    std::copy_n(m.data.begin() + static_cast<std::ptrdiff_t>(layer * TT), TT, values.begin());
  } else {  // [L, H, T, T]: one head, or the mean of the layer's heads
    const int H = static_cast<int>(m.dim(1)), head = head_box_->currentIndex() - 1;
    for (int h = 0; h < H; ++h) {
      if (head >= 0 && h != head) continue;
      const float* src = m.ptr() + (static_cast<size_t>(layer) * H + h) * TT;
      for (size_t k = 0; k < TT; ++k) values[k] += head >= 0 ? src[k] : src[k] / static_cast<float>(H);
    }
  }
  std::vector<uint8_t> blocked(TT, 0);
  bool any_blocked = false;
  if (blocked_ && blocked_->size() == TT)
    for (size_t k = 0; k < TT; ++k) any_blocked |= (blocked[k] = (*blocked_)[k] && values[k] == 0.0f) != 0;
  auto result = std::make_shared<ForwardResult>();
  Tensor one({1, T, T});
  std::copy(values.begin(), values.end(), one.data.begin());
  result->attention.push_back(std::move(one));
  for (const QString& l : labels_) result->tokens.push_back(l.toStdString());
  result->ids = request_.ids;
  result->mask.T = result->mask.S = T;
  if (any_blocked) result->mask.blocked = blocked;
  // The other views' token view (hidden special tokens, merged pieces), the same transform.
  // (the groups were made from the same prepared tokens as labels_)
  const bool regrouped = groups_ && labels_.size() == T;
  if (regrouped) apply_token_view(*result, *groups_, *groups_);
  shown_ = result;
  const Tensor& drawn = result->attention.front();
  const int R = static_cast<int>(drawn.dim(1));
  std::vector<uint8_t> drawn_blocked = result->mask.blocked.empty() ? std::vector<uint8_t>() : result->mask.blocked;
  HeatmapData d =
      owned_heatmap(std::vector<float>(drawn.data.begin(), drawn.data.end()), std::move(drawn_blocked), R, R, 1024);
  QStringList labels;
  for (const auto& t : result->tokens) labels << QString::fromStdString(t);
  d.row_labels = labels;
  d.col_labels = labels;
  d.title = title();
  d.diverging = maps_method_ == Compare;
  view_->setData(std::move(d));
  QString view_note;
  if (regrouped) {
    size_t members = 0;
    bool merged = false;
    for (const auto& g : groups_->members) members += g.size(), merged = merged || g.size() > 1;
    view_note = QString("<br>Drawn as the other views show the tokens (%1 of %2 positions: %3).")
                    .arg(R)
                    .arg(T)
                    .arg(token_view_note(members < static_cast<size_t>(T), merged));
  }
  // A and B the same (identically tokenised texts): an all-zero map would look blank; say why
  if (maps_method_ == Compare && std::all_of(values.begin(), values.end(), [](float v) { return v == 0.0f; }))
    view_note +=
        "<br><b>A and B give the same attention here</b>: every difference is 0 (the two texts make "
        "the same tokens, or the two models the same weights), so the map is all white.";
  status_->setText(describe(maps_method_, maps_note_) + readoutSummary() + view_note + kCaveat);
}

void MethodsView::wait() {
  if (dirty_ && isVisible() && !selectionMethod()) start();
  job_.wait();
}

void MethodsView::exportTo(const QString& path, int dpi) {
  wait();
  if (!shown_) throw Error("nothing to export: the map has not been computed (show the page first)");
  ExportSpec spec;
  spec.layer = 0;
  spec.head = 0;
  spec.dpi = dpi;
  spec.colormap = colormap_;
  spec.title = selectionMethod() ? export_title_ : title();
  spec.diverging = !selectionMethod() && maps_method_ == Compare;
  spec.value_label = selectionMethod() ? (agg_box_->currentIndex() == 1 ? "mean probability" : "summed probability")
                                       : method_row(page_method_id(maps_method_)).value;
  if (selectionMethod()) {
    spec.row_axis = "head";
    spec.col_axis = method() == SelectedQueries ? "key" : "query";
  }
  export_attention(*shown_, spec, path);
}

}  // namespace attnlab
