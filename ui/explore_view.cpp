// ExploreView: the composer (see explore_view.h).
#include "ui/explore_view.h"

#include <QComboBox>
#include <QFile>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QShortcut>
#include <QSignalBlocker>
#include <QSlider>
#include <QSplitter>
#include <QTabWidget>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>

#include "ui/explore/analysis_pages.h"
#include "ui/explore/heads_page.h"
#include "ui/explore/input_bar.h"
#include "ui/explore/page_table.h"
#include "ui/explore/side_panels.h"
#include "ui/explore/view_pages.h"
#include "ui/figure_export.h"
#include "ui/heatmap_view.h"
#include "ui/line_view.h"
#include "ui/mask_editor.h"
#include "ui/methods_view.h"
#include "ui/token_model.h"

namespace attnlab {

ExploreView::ExploreView(QWidget* parent)
    : QWidget(parent), controller_(new ExploreController(this)), state_(new ExploreState(controller_, this)) {
  clock_.start();
  auto* root = new QVBoxLayout(this);
  input_ = new InputBar(this);
  root->addWidget(input_);
  editor_ = new MaskEditor;  // a page; the mask panel reads its painted mask

  auto* split = new QSplitter(Qt::Horizontal, this);
  split->setObjectName("exploreSplitter");
  root->addWidget(split, 1);

  // --- left: prediction, masks, display options; scrolls rather than setting the window's
  // minimum height (the window fits a 1280x720 screen)
  auto* left_scroll = new QScrollArea(split);
  left_scroll->setWidgetResizable(true);
  left_scroll->setFrameShape(QFrame::NoFrame);
  left_scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  auto* left = new QWidget;
  left_scroll->setWidget(left);
  auto* lv = new QVBoxLayout(left);
  prediction_ = new PredictionPanel(state_, left);
  masks_ = new MaskPanel(state_, input_->tokenModel(), editor_, left);
  lv->addWidget(prediction_);
  lv->addWidget(masks_);
  lv->addWidget(new DisplayPanel(state_, left));
  lv->addStretch();
  // as wide as its widest control plus the vertical scroll bar (which would otherwise cover the
  // controls' right edge: "after the last token"'s arrows), at most 320
  left_scroll->setMinimumWidth(
      std::min(320, left->minimumSizeHint().width() + left_scroll->verticalScrollBar()->sizeHint().width()));
  left_scroll->setMaximumWidth(320);

  // --- right: the layer bar and the pages
  auto* right = new QWidget(split);
  auto* rv = new QVBoxLayout(right);
  auto* lbar = new QHBoxLayout;
  auto* prev = new QPushButton("< Layer", right);
  auto* next = new QPushButton("Layer >", right);
  layer_slider_ = new QSlider(Qt::Horizontal, right);
  layer_slider_->setObjectName("layerSlider");
  layer_slider_->setToolTip("The layer every view shows (Ctrl+PageUp / Ctrl+PageDown)");
  prev->setToolTip("Previous layer (Ctrl+PageUp)");
  next->setToolTip("Next layer (Ctrl+PageDown)");
  layer_label_ = new QLabel("layer 0", right);
  lbar->addWidget(prev);
  lbar->addWidget(layer_slider_, 1);
  lbar->addWidget(next);
  lbar->addWidget(layer_label_);
  weighting_ = new QComboBox(right);
  weighting_->setObjectName("headWeighting");
  weighting_->addItems({"attention", "value-weighted"});
  weighting_->setToolTip(
      "What the Heads and Head tabs draw: the attention weights, or each weight times the size of "
      "what its key sends through the head's value and output projections (Kobayashi et al. 2020)");
  lbar->addWidget(new QLabel("heads show:", right));
  lbar->addWidget(weighting_);
  rv->addLayout(lbar);
  tabs_ = new QTabWidget(right);
  for (const ExplorePageRow& row : explore_pages()) {
    QWidget* w = row.make(*this);
    pages_[row.name] = w;
    const int i = tabs_->addTab(w, row.title);
    if (*row.tooltip) tabs_->setTabToolTip(i, row.tooltip);
  }
  rv->addWidget(tabs_, 1);
  split->addWidget(left_scroll);
  split->addWidget(right);
  split->setStretchFactor(1, 1);

  connect(input_, &InputBar::changed, this, &ExploreView::schedule);
  connect(masks_, &MaskPanel::changed, this, &ExploreView::schedule);
  connect(layer_slider_, &QSlider::valueChanged, state_, &ExploreState::setLayer);
  connect(prev, &QPushButton::clicked, this, [this] { state_->setLayer(state_->layer() - 1); });
  connect(next, &QPushButton::clicked, this, [this] { state_->setLayer(state_->layer() + 1); });
  new QShortcut(QKeySequence(Qt::CTRL | Qt::Key_PageUp), this, [this] { state_->setLayer(state_->layer() - 1); });
  new QShortcut(QKeySequence(Qt::CTRL | Qt::Key_PageDown), this, [this] { state_->setLayer(state_->layer() + 1); });
  connect(weighting_, &QComboBox::currentIndexChanged, state_, [this](int i) { state_->setValueWeighted(i == 1); });
  connect(state_, &ExploreState::layerChanged, this, &ExploreView::onLayer);
  connect(state_, &ExploreState::status, this, &ExploreView::status);
  connect(state_, &ExploreState::pageRequested, this, [this](const QString& name) { showPage(name); });
  connect(tabs_, &QTabWidget::currentChanged, this, [this] {
    for (const auto& [name, w] : pages_) {
      const bool current = w == tabs_->currentWidget();
      if (auto* p = qobject_cast<ExplorePage*>(w)) p->setCurrent(current);
      if (current) emit state_->pageShown(name);
    }
  });
  state_->setMaskProvider([this] { return masks_->mask(); });
  connect(controller_, &ExploreController::inputPrepared, this, &ExploreView::onInputPrepared);
  connect(controller_, &ExploreController::resultChanged, this, &ExploreView::onResult);
  connect(controller_, &ExploreController::resultCleared, this, [this] {
    state_->clearOutcome();
    emit warnings({});
    emit status("no input: type some text");
  });
  connect(controller_, &ExploreController::failed, this, [this](const QString& error) {
    input_->setNotice(error);
    emit status("error: " + error);
  });
  emit tabs_->currentChanged(tabs_->currentIndex());  // the first page is the current one
}

// The controller stops its runner first, so no result reaches the half-destroyed window.
ExploreView::~ExploreView() {
  controller_->shutdown();
}

void ExploreView::showModelShape(const Model& model) {
  input_->setModel(model);
  const ModelConfig& c = model.config;
  // A page is shown for the models it applies to (the lens: language models only); for an
  // attention file, the pages that need weights stay in place, disabled, and say so.
  for (const ExplorePageRow& row : explore_pages()) {
    const int i = tabs_->indexOf(pages_.at(row.name));
    tabs_->setTabVisible(i, !row.available || row.available(c));
    const bool usable = !model.probabilities_only || row.from_probabilities;
    tabs_->setTabEnabled(i, usable);
    tabs_->setTabToolTip(i, usable ? QString(row.tooltip)
                                   : QString("%1. Needs a model's weights: an attention file holds probabilities only "
                                             "(File > Open model folder...)")
                                         .arg(row.tooltip));
  }
  if (!tabs_->isTabEnabled(tabs_->currentIndex()) || !tabs_->isTabVisible(tabs_->currentIndex()))
    tabs_->setCurrentWidget(pages_.at("heads"));
  // what needs a pass: value-weighted maps, masks and the prediction
  // (value-weighted maps re-run one sequence's pass: not an encoder-decoder's yet)
  const bool weighted = !model.probabilities_only && !model.is_seq2seq();
  if (!weighted) weighting_->setCurrentIndex(0);
  weighting_->setEnabled(weighted);
  masks_->setVisible(!model.probabilities_only);
  prediction_->setVisible(!model.probabilities_only);
  {
    QSignalBlocker block(layer_slider_);
    layer_slider_->setRange(0, c.num_layers - 1);
  }
}

void ExploreView::setModel(std::shared_ptr<const Model> model) {
  showModelShape(*model);
  state_->setModel(model);  // every page rebuilds for the model's shape
  onLayer(state_->layer());
  controller_->setModel(std::move(model));  // computes the typed text (kept while a file was shown)
}

void ExploreView::setAttention(std::shared_ptr<const Model> model, std::shared_ptr<const ForwardResult> result) {
  showModelShape(*model);
  state_->setModel(model);
  onLayer(state_->layer());
  controller_->setAttention(std::move(model), std::move(result));
}

void ExploreView::onLayer(int layer) {
  {
    QSignalBlocker block(layer_slider_);
    layer_slider_->setValue(layer);
  }
  // Layers are numbered from 0 everywhere (titles, exports, --layer); the label gives the range.
  if (model()) layer_label_->setText(QString("layer %1 (0-%2)").arg(layer).arg(model()->config.num_layers - 1));
  emit layerChanged(layer);
  if (perf_log_) {
    const qint64 start = clock_.nsecsElapsed();
    const int n = result() ? static_cast<int>(result()->ids.size()) : 0;
    QTimer::singleShot(0, this, [this, start, n] {  // once the queued replots have run
      perf_log_->write(
          QString("layer\t%1\t\t%2\n").arg(n).arg((clock_.nsecsElapsed() - start) / 1e6, 0, 'f', 2).toUtf8());
      perf_log_->flush();
    });
  }
}

void ExploreView::setText(const QString& text) {
  input_->setText(text);
}
QString ExploreView::text() const {
  return input_->text();
}
void ExploreView::setCrossText(const QString& text) {
  input_->setCrossText(text);
}
void ExploreView::setTargetText(const QString& text) {
  input_->setTargetText(text);
}
void ExploreView::setPart(Seq2SeqPart part) {
  input_->setPart(part);
}
void ExploreView::setPairText(const QString& text) {
  input_->setPairText(text);
}
void ExploreView::setTokenView(bool hide_special, bool merge_pieces) {
  input_->setTokenView(hide_special, merge_pieces);
}
void ExploreView::setBackend(const QString& name) {
  controller_->setBackend(name);
}
void ExploreView::setMaskArgs(const QStringList& args) {
  masks_->setMaskArgs(args);
}
void ExploreView::setPadTo(int length) {
  masks_->setPadTo(length);
}
void ExploreView::setCustomMask(bool on) {
  masks_->setCustomOn(on);
}
bool ExploreView::customMask() const {
  return masks_->customOn();
}
QStringList ExploreView::maskArgs() const {
  return masks_->maskArgs();
}
TokenListModel* ExploreView::tokenModel() const {
  return input_->tokenModel();
}
void ExploreView::setNextTokenPosition(int position) {
  prediction_->setNextTokenPosition(position);
}
QString ExploreView::predictionText() const {
  return prediction_->text();
}

void ExploreView::setPerfLog(const QString& path) {
  perf_log_ = std::make_unique<QFile>(path);
  if (!perf_log_->open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) {
    emit status("cannot write the performance log " + path);
    perf_log_.reset();
    return;
  }
  perf_log_->write("event\ttokens\tforward_ms\tlatency_ms\n");
}

void ExploreView::schedule() {
  ExploreInput in = input_->input();
  in.pad_to = masks_->padTo();
  controller_->setInput(std::move(in));
}

// The new input as the model reads it: the token strip and the mask editor take its shape at
// once (the editor's mask for the next pass is read right after this).
void ExploreView::onInputPrepared(const QStringList& notices) {
  const PreparedInput& a = controller_->prepared();
  const PreparedInput& b = controller_->preparedCross();
  input_->showPrepared(a);
  const bool cross = input_->crossOn();
  const int T = static_cast<int>(a.size()), S = cross ? static_cast<int>(b.size()) : T;
  if (model() && !model()->probabilities_only)
    editor_->setShape(T, S, model()->config.num_heads, to_labels(a.tokens), to_labels(cross ? b.tokens : a.tokens));
  QStringList all = notices;
  // A pretrained model never saw these masks in training: what they show is an experiment.
  if (masks_->experimental()) all << "Masks on a pretrained model are experiments: it was not trained with them.";
  input_->setNotice(all.join(" "));
}

// "memory: weights 0.5 GB, this pass 12 MB, 18.2 GB free": the estimate the pass was checked
// against (engine/compute/forward.h), with a note when the pass takes over half of what is free.
QString ExploreView::memoryText(const PassMemory& m) {
  auto gb = [](double b) { return QString::fromStdString(memory_text(b)); };
  QString text = QString("memory: weights %1, this pass %2").arg(gb(m.weights), gb(m.pass()));
  // a long input's pass keeps queries and keys; each layer's attention is computed when shown
  if (m.on_demand) text += " (attention on demand)";
  if (m.available > 0) {
    text += QString(", %1 free").arg(gb(m.available));
    if (m.pass() > 0.5 * m.available)
      text += " (over half of it: a longer text may not fit; keep fewer layers or shorten it)";
  }
  return text;
}

void ExploreView::onResult(const ForwardOutcome& out) {
  QElapsedTimer t;
  t.start();
  state_->setOutcome(out);  // every page redraws (the hidden ones when shown)
  const ForwardResult& r = *out.result;
  if (perf_log_) {
    perf_log_->write(QString("render\t%1\t\t%2\n").arg(r.ids.size()).arg(t.nsecsElapsed() / 1e6, 0, 'f', 2).toUtf8());
    perf_log_->flush();
  }
  QStringList warn;
  for (const auto& w : r.warnings) warn << QString::fromStdString(w);
  emit warnings(warn);
  if (controller_->showsFile()) {  // no pass: what the file holds
    const ModelConfig& c = model()->config;
    QString count = QString("%1 tokens").arg(r.ids.size());
    if (r.is_cross()) count += QString(" attending to %1").arg(r.cross_ids.size());
    emit status(QString("attention file | %1 | %2 layers x %3 heads | probabilities %4 | drawn in %5 ms%6")
                    .arg(count)
                    .arg(c.num_layers)
                    .arg(c.num_heads)
                    .arg(QString::fromStdString(memory_text(out.memory.attention)))
                    .arg((controller_->nowNs() - out.submitted_ns) / 1e6, 0, 'f', 1)
                    .arg(warn.isEmpty() ? "" : " | " + warn.join("; ")));
    return;
  }
  // Counts of the input; with hidden or merged tokens, also how many rows the views show.
  const size_t n = controller_->prepared().size(), shown = r.ids.size();
  QString count = n == 1 ? QString("1 token") : QString("%1 tokens").arg(n);
  if (r.is_seq2seq() && out.seq2seq_part) {  // an encoder-decoder: both sequences, and which attention is drawn
    static const char* const drawn[] = {"cross-attention", "decoder self-attention", "encoder self-attention"};
    count = QString("source %1, target %2 tokens | %3")
                .arg(r.source_ids.size())
                .arg(r.target_ids.size())
                .arg(drawn[static_cast<int>(*out.seq2seq_part)]);
  } else {
    if (r.is_cross()) count += QString(" attending to %1").arg(controller_->preparedCross().size());
    if (shown != n) count += QString(" (%1 shown)").arg(shown);
  }
  QString ablated;
  for (const auto& [l, h] : state_->ablated())
    ablated += (ablated.isEmpty() ? " | ablated " : ", ") + QString("%1:%2").arg(l).arg(h);
  // a pass that started from the last one's KV cache says how much it did not compute again
  const QString reused = out.reused > 0 ? QString(" (%1 cached)").arg(out.reused) : QString();
  emit status(QString("backend %1 (%2) | %3 | forward %4%5 | %6%7")
                  .arg(out.backend, out.device)
                  .arg(count)
                  .arg(QString::number(r.millis, 'f', 1) + " ms" + reused)
                  .arg(ablated)
                  .arg(memoryText(out.memory))
                  .arg(warn.isEmpty() ? "" : " | " + warn.join("; ")));
  if (perf_log_) {
    const qint64 submitted = out.submitted_ns;
    const double fwd = r.millis;
    const int tokens = static_cast<int>(r.ids.size());
    // Measured once the queued replots have run: the next turn of the event loop.
    QTimer::singleShot(0, this, [this, submitted, fwd, tokens] {
      const double latency = (controller_->nowNs() - submitted) / 1e6;
      perf_log_->write(
          QString("forward\t%1\t%2\t%3\n").arg(tokens).arg(fwd, 0, 'f', 2).arg(latency, 0, 'f', 2).toUtf8());
      perf_log_->flush();
    });
  }
}

bool ExploreView::showPage(const QString& name) {
  const ExplorePageRow* row = find_explore_page(name);
  if (!row) return false;
  QWidget* w = pages_.at(row->name);
  const int i = tabs_->indexOf(w);
  if (!tabs_->isTabVisible(i) || !tabs_->isTabEnabled(i)) return false;  // the lens: LMs only; weights: not a file
  tabs_->setCurrentWidget(w);
  return true;
}

QWidget* ExploreView::page(const QString& name) const {
  const ExplorePageRow* row = find_explore_page(name);
  return row ? pages_.at(row->name) : nullptr;
}

template <class P>
P* ExploreView::pageAs(const char* name) const {
  return static_cast<P*>(pages_.at(name));
}

HeatmapView* ExploreView::headView(int head) const {
  return pageAs<HeadsPage>("heads")->view(head);
}
int ExploreView::headCount() const {
  return pageAs<HeadsPage>("heads")->count();
}

HeadsPage* ExploreView::headsPage() const {
  return pageAs<HeadsPage>("heads");
}
LineView* ExploreView::lineView() const {
  return pageAs<LinesPage>("lines")->lineView();
}
QTableWidget* ExploreView::lensTable() const {
  return pageAs<LensPage>("lens")->table();
}
QTableWidget* ExploreView::importanceTable() const {
  return pageAs<ImportancePage>("importance")->table();
}
MethodsView* ExploreView::methodsView() const {
  return pageAs<MethodsView>("methods");
}
void ExploreView::computeImportance() {
  pageAs<ImportancePage>("importance")->compute();
}
void ExploreView::waitForImportance() {
  pageAs<ImportancePage>("importance")->wait();
}
bool ExploreView::importanceRunning() const {
  return pageAs<ImportancePage>("importance")->running();
}
void ExploreView::waitForLens() {
  pageAs<LensPage>("lens")->wait();
}

void ExploreView::setHeadWeighting(const QString& name) {
  const int i = weighting_->findText(name);
  if (i < 0) throw Error("heads: no choice \"" + name.toStdString() + "\" (attention or value-weighted)");
  weighting_->setCurrentIndex(i);
}

void ExploreView::selectTokens(const std::vector<int>& positions) {
  flush();
  input_->selectTokens(positions);
}

void ExploreView::flush() {
  controller_->flush();
}

void ExploreView::exportLines(const QString& path) {
  flush();
  if (!result()) throw Error("nothing to export: type some text first");
  lineView()->exportTo(path);
}

void ExploreView::exportTo(const QString& path, int layer, int head) {
  flush();
  if (!result()) throw Error("nothing to export: type some text first");
  ExportSpec spec;
  spec.layer = layer;
  spec.head = head;
  spec.colormap = state_->colormap();
  spec.annotate = state_->annotate();
  spec.dpi = export_dpi_;
  spec.note = input_->tokenViewNote();
  // One colour bar for the figure: 0-1 when the screen uses 0-1, else the exported panels'
  // maximum (the layer's, for a layer's heads, as "per layer" shows them).
  spec.unit_range = state_->scale() == ExploreState::Scale::Unit;
  export_attention(*state_->result(), spec, path);
}

void ExploreView::exportTable(const QString& which, const QString& path) {
  const QString ext = QFileInfo(path).suffix().toLower();
  if (ext != "csv" && ext != "npy")
    throw Error("unknown export format \"." + ext.toStdString() + "\" (expected .csv or .npy)");
  if (which == "importance") return pageAs<ImportancePage>("importance")->exportTo(path, ext);
  if (which == "lens") return pageAs<LensPage>("lens")->exportTo(path, ext);
  throw Error("internal: no table " + which.toStdString());
}

}  // namespace attnlab
