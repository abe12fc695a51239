// RunPanel (see run_panel.h).
#include "ui/train/run_panel.h"

#include <algorithm>

#include <QComboBox>
#include <QDateTime>
#include <QFileDialog>
#include <QFileInfo>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSlider>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>
#include <cmath>

#include "ui/curve_view.h"
#include "ui/heatmap_data.h"
#include "ui/heatmap_view.h"

namespace attnlab {

namespace {

QColor series_colour(int k) {
  static const QColor palette[] = {{31, 119, 180}, {214, 39, 40}, {44, 160, 44},   {148, 103, 189},
                                   {255, 127, 14}, {140, 86, 75}, {227, 119, 194}, {23, 190, 207}};
  return palette[static_cast<size_t>(k % 8)];
}

}  // namespace

RunPanel::RunPanel(QWidget* parent) : QWidget(parent) {
  auto* rv = new QVBoxLayout(this);
  auto* buttons = new QHBoxLayout;
  train_ = new QPushButton("Train", this);
  pause_ = new QPushButton("Pause", this);
  pause_->setCheckable(true);
  stop_ = new QPushButton("Stop", this);
  save_ = new QPushButton("Save model...", this);
  explore_ = new QPushButton("Open in Explore", this);
  train_->setToolTip("Start training with the settings on the left (Ctrl+Return)");
  pause_->setToolTip("Pause or resume after the current step");
  stop_->setToolTip("Stop after the current step; the model trained so far is kept");
  save_->setToolTip("Save the trained model as a folder Explore and attnlab-cli open");
  explore_->setToolTip("Open the trained model in the Explore tab");
  for (QPushButton* b : {train_, pause_, stop_, save_, explore_}) buttons->addWidget(b);
  buttons->addStretch();
  rv->addLayout(buttons);
  progress_ = new QProgressBar(this);
  progress_label_ = new QLabel(this);
  message_ = new QLabel(this);
  message_->setWordWrap(true);
  message_->setStyleSheet("color: #a00;");
  rv->addWidget(progress_);
  rv->addWidget(progress_label_);
  rv->addWidget(message_);
  auto* curves = new QHBoxLayout;
  loss_ = new CurveView("step", this);
  // short names (the axis says loss), in one row: "train loss (smoothed)" and the rest took two
  // rows, ~40% of the chart's height at 1280x720
  loss_->addSeries("train", QColor(160, 190, 230));
  loss_->addSeries("train (smoothed)", QColor(31, 119, 180));
  loss_->addSeries("validation", QColor(214, 39, 40), false, true);
  loss_->setAxisLabels("loss");
  loss_->setLegendColumns(3);
  acc_ = new CurveView("epoch", this);
  acc_->addSeries("validation accuracy", QColor(44, 160, 44), false, true);
  acc_->setAxisLabels("accuracy");
  acc_->setYRange(0.0, 1.0);  // accuracy is a fraction: a fixed axis, never -2..4 or a zoomed 0.806..0.864
  acc_->setIntegerX(1);       // epochs, from 1
  scores_ = new CurveView("step", this);
  scores_->setObjectName("headScores");
  scores_->setAxisLabels("head score");
  scores_->setYRange(0.0, 1.0);
  scores_->setToolTip(
      "Each head's (LlHh: layer l, head h) induction score (ind: attention from a token to the one after its "
      "earlier occurrence) and previous-token score (prev), or duplicate-token score (dup: attention to its own "
      "earlier occurrence), on a random sequence repeated twice, at every snapshot; with many heads, each "
      "layer's best");
  scores_->hide();
  scores_->setLegendColumns(2);
  grok_ = new CurveView("step (log scale)", this);
  grok_->setObjectName("grokCurve");
  grok_->addSeries("training pairs", QColor(31, 119, 180));
  grok_->addSeries("held-out pairs", QColor(214, 39, 40));
  grok_->setAxisLabels("accuracy");
  grok_->setYRange(0.0, 1.0);
  grok_->setLogX(true);
  grok_->setToolTip(
      "Accuracy on the pairs trained on and on the held-out pairs, after every step: the model fits the "
      "training pairs long before it gets the held-out ones right (grokking, Power et al. 2022)");
  grok_->hide();
  norms_ = new CurveView("step", this);
  norms_->setObjectName("weightNorms");
  norms_->setAxisLabels("weight norm");
  norms_->setToolTip(
      "The L2 norm of each layer's parameters together (Ll: layer l), and of the rest (embeddings, final norm, "
      "head) at every snapshot: "
      "what weight decay shrinks (a model that groks loses weight norm as it generalises, Nanda et al. 2023)");
  norms_->setLegendColumns(2);
  norms_->hide();
  curves->addWidget(loss_, 3);
  curves->addWidget(acc_, 2);
  curves->addWidget(scores_, 3);
  curves->addWidget(grok_, 3);
  curves->addWidget(norms_, 2);
  rv->addLayout(curves, 2);
  auto* cexp = new QHBoxLayout;
  auto* export_curves = new QPushButton("Export curves...", this);
  export_curves->setToolTip("Save the loss and accuracy curves as PNG, SVG, PDF or CSV");
  cexp->addWidget(export_curves);
  score_kind_label_ = new QLabel("head scores", this);
  score_kind_ = new QComboBox(this);
  score_kind_->setObjectName("scoreKind");
  score_kind_->addItems({"induction & previous-token", "duplicate-token"});
  score_kind_->setToolTip(
      "Which detector scores the head-score chart draws (engine/analysis/detectors.h): a token's attention "
      "to the one after its earlier occurrence (induction) and to the token before it (previous-token), or "
      "to its own earlier occurrence (duplicate-token)");
  score_kind_label_->hide();
  score_kind_->hide();
  cexp->addSpacing(12);
  cexp->addWidget(score_kind_label_);
  cexp->addWidget(score_kind_);
  cexp->addStretch();
  rv->addLayout(cexp);

  auto* heads_box = new QGroupBox("Live heads", this);
  auto* hv = new QVBoxLayout(heads_box);
  auto* hbar = new QHBoxLayout;
  probe_ = new QLineEdit(heads_box);
  probe_layer_ = new QSpinBox(heads_box);
  probe_layer_->setRange(0, 0);
  timeline_ = new QSlider(Qt::Horizontal, heads_box);
  timeline_->setRange(0, 0);
  timeline_label_ = new QLabel("no snapshots yet", heads_box);
  probe_->setToolTip(
      "A sentence whose attention is drawn as the model trains (article 000: watch \"not\" find \"good\")");
  probe_layer_->setToolTip("The layer whose heads the live view shows");
  timeline_->setToolTip("Step back through the snapshots taken during training");
  hbar->addWidget(new QLabel("probe", heads_box));
  hbar->addWidget(probe_, 2);
  hbar->addWidget(new QLabel("layer", heads_box));
  hbar->addWidget(probe_layer_);
  hbar->addWidget(new QLabel("timeline", heads_box));
  hbar->addWidget(timeline_, 2);
  hbar->addWidget(timeline_label_);
  hv->addLayout(hbar);
  heads_grid_ = new QGridLayout;
  hv->addLayout(heads_grid_, 1);
  rv->addWidget(heads_box, 3);

  confusion_ = new QTableWidget(this);
  confusion_->setMaximumHeight(100);
  confusion_->setToolTip("Confusion matrix on the validation rows: true label (rows) x predicted (columns)");
  rv->addWidget(confusion_);

  connect(train_, &QPushButton::clicked, this, &RunPanel::trainClicked);
  connect(pause_, &QPushButton::toggled, this, &RunPanel::pauseToggled);
  connect(stop_, &QPushButton::clicked, this, &RunPanel::stopClicked);
  connect(save_, &QPushButton::clicked, this, &RunPanel::saveClicked);
  connect(explore_, &QPushButton::clicked, this, &RunPanel::exploreClicked);
  connect(probe_, &QLineEdit::textChanged, this, &RunPanel::probeChanged);
  connect(score_kind_, &QComboBox::currentIndexChanged, this, [this] { drawScores(); });
  connect(export_curves, &QPushButton::clicked, this, [this] {
    const QString f =
        QFileDialog::getSaveFileName(this, "Export curves", "loss.png", "PNG (*.png);;SVG (*.svg);;CSV (*.csv)");
    if (f.isEmpty()) return;
    try {
      loss_->exportTo(f);
      const QFileInfo fi(f);
      acc_->exportTo(fi.dir().filePath(fi.completeBaseName() + "-accuracy." + fi.suffix()));
    } catch (const Error& e) {
      fail(QString::fromStdString(e.what()));
    }
  });
  connect(timeline_, &QSlider::valueChanged, this, &RunPanel::showSnapshot);
  connect(probe_layer_, &QSpinBox::valueChanged, this, [this] { showSnapshot(timeline_->value()); });
  setRunning(false);
  save_->setEnabled(false);
  explore_->setEnabled(false);
}

void RunPanel::reset() {
  loss_->clear();
  acc_->clear();
  scores_->clear();
  grok_->clear();
  norms_->clear();
  phase_step_ = -1;
  memorised_step_ = generalised_step_ = -1;
  smoothed_ = -1;
  snapshots_.clear();
  timeline_->setRange(0, 0);
  timeline_label_->setText("no snapshots yet");
  confusion_->clear();
  confusion_->setRowCount(0);
  confusion_->setColumnCount(0);
  message_->clear();
  progress_->setValue(0);
  progress_label_->clear();
  for (HeatmapView* h : head_views_) h->deleteLater();
  head_views_.clear();
  save_->setEnabled(false);
  explore_->setEnabled(false);
}

void RunPanel::showCharts(Charts charts) {
  charts_ = charts;
  lm_ = charts != Charts::Classifier;
  scores_->setVisible(charts == Charts::Induction);
  score_kind_->setVisible(charts == Charts::Induction);
  score_kind_label_->setVisible(charts == Charts::Induction);
  norms_->setVisible(lm_);
  grok_->setVisible(charts == Charts::Grokking);
  // a language model's accuracy: by epoch for a task, by step on grokking's chart, in the message
  // for induction (its head scores say more)
  acc_->setVisible(!lm_ || charts == Charts::Task);
  confusion_->setVisible(!lm_);
  probe_->setReadOnly(lm_);
  probe_->setToolTip(
      charts == Charts::Induction
          ? "A language model's probe: random tokens repeated twice, as the head detectors read "
            "(the scores on the right are its heads' on it)"
      : charts == Charts::Grokking ? "A held-out sum, \"a b =\": its heads as the model goes from memorising to adding"
      : charts == Charts::Task ? "A held-out sequence: a task's without its last token (so the next token is its last "
                                 "answer), or a text's opening: its heads as the model learns"
                               : "A sentence whose attention is drawn as the model trains (article 000: watch \"not\" "
                                 "find \"good\")");
}

void RunPanel::begin(const ModelConfig& model, int total_steps, Charts charts) {
  reset();
  showCharts(charts);
  layers_ = model.num_layers, heads_ = model.num_heads;
  // A moving average over ~2% of the run (1 to 50 steps): a fixed 0.95 lagged a 220-step run by
  // 20 steps and ended above the raw and the held-out loss.
  smoothing_ = 1.0 - 1.0 / std::clamp(total_steps / 50.0, 1.0, 50.0);
  drawScores();
  norms_->removeSeries();
  if (lm_) {
    for (int l = 0; l < layers_; ++l) norms_->addSeries(QString("L%1").arg(l), series_colour(l));
    norms_->addSeries("rest", QColor(120, 120, 120));    // embeddings, final norm, head
    norms_->setLegendColumns(std::min(layers_ + 1, 4));  // L0 L1 rest in one row, as high as the other charts
  }
  probe_layer_->setRange(0, model.num_layers - 1);
  if (charts == Charts::Induction) probe_layer_->setValue(model.num_layers - 1);  // where an induction head forms
  for (int h = 0; h < model.num_heads; ++h) {
    auto* v = new HeatmapView(this);
    v->setMaxCells(64);
    v->setMinimumSize(110, 110);  // four across fit the column beside the tour's panel at 1280x720
    heads_grid_->addWidget(v, h / 4, h % 4);
    head_views_.push_back(v);
  }
  progress_->setRange(0, total_steps);
  setRunning(true);
  start_ms_ = QDateTime::currentMSecsSinceEpoch();
}

void RunPanel::setRunning(bool running) {
  train_->setEnabled(!running);
  pause_->setEnabled(running);
  stop_->setEnabled(running);
  if (!running) {
    QSignalBlocker block(pause_);
    pause_->setChecked(false);
    pause_->setText("Pause");
  }
}

void RunPanel::setPaused(bool paused) {
  pause_->setText(paused ? "Resume" : "Pause");
}

void RunPanel::fail(const QString& message) {
  message_->setStyleSheet("color: #a00;");  // errors in red, whatever the last message was
  message_->setText(message);
}

void RunPanel::clearMessage() {
  message_->clear();
}
void RunPanel::setProbe(const QString& text) {
  probe_->setText(text);
  probe_->setCursorPosition(0);  // its opening shown, not its tail cut mid-word
}
QString RunPanel::probe() const {
  return probe_->text();
}
QString RunPanel::message() const {
  return message_->text();
}
QString RunPanel::progressText() const {
  return progress_label_->text();
}

void RunPanel::onStep(const TrainProgress& p) {
  loss_->append(0, p.step, p.loss);
  smoothed_ = smoothed_ < 0 ? p.loss : smoothing_ * smoothed_ + (1 - smoothing_) * p.loss;
  loss_->append(1, p.step, smoothed_);
  progress_->setValue(p.step);
  const double elapsed = (QDateTime::currentMSecsSinceEpoch() - start_ms_) / 1000.0;
  const double left = p.step > 0 ? elapsed / p.step * (p.total_steps - p.step) : 0;
  progress_label_->setText(QString("epoch %1/%2, step %3/%4, %5 samples/s, about %6 s left")
                               .arg(p.epoch)
                               .arg(p.epochs)
                               .arg(p.step)
                               .arg(p.total_steps)
                               .arg(p.samples_per_s, 0, 'f', 0)
                               .arg(left, 0, 'f', 0));
}

void RunPanel::onEpoch(const EpochReport& r) {
  const int step = progress_->value();
  const bool evaluated = !std::isnan(r.val_loss);  // TrainConfig::eval_every: NaN between evaluations
  if (evaluated) loss_->append(2, static_cast<double>(step), r.val_loss);
  if (charts_ != Charts::Grokking) {
    if (evaluated) acc_->append(0, r.epoch, r.val_acc);
    return;
  }
  grok_->append(0, step, r.train_acc);
  if (evaluated) grok_->append(1, step, r.val_acc);
  if (memorised_step_ < 0 && r.train_acc >= 0.99) {
    memorised_step_ = step;
    grok_->addMarker(step, "fits the training pairs");
    message_->setStyleSheet("color: #060;");
    message_->setText(QString("Step %1: the training pairs are learnt (accuracy %2); the held-out pairs are at %3.")
                          .arg(step)
                          .arg(r.train_acc, 0, 'f', 2)
                          .arg(r.val_acc, 0, 'f', 2));
  }
  if (generalised_step_ < 0 && r.val_acc >= 0.95) {
    generalised_step_ = step;
    grok_->addMarker(step, "generalises");
    loss_->addMarker(step, "generalises");
    message_->setStyleSheet("color: #060;");
    message_->setText(
        QString(
            "Grokked at step %1: the held-out pairs reached %2 accuracy, %3 steps after the training pairs (step %4).")
            .arg(step)
            .arg(r.val_acc, 0, 'f', 2)
            .arg(memorised_step_ >= 0 ? step - memorised_step_ : step)
            .arg(memorised_step_));
  }
}

void RunPanel::onSnapshot(const Snapshot& s) {
  if (lm_ && !s.weight_norms.empty() && static_cast<int>(s.weight_norms.size()) == norms_->seriesCount())
    for (size_t k = 0; k < s.weight_norms.size(); ++k) norms_->append(static_cast<int>(k), s.step, s.weight_norms[k]);
  if (lm_ && s.induction.numel() > 0) {
    appendScores(s);
    // The phase change: the first snapshot where a head's induction score reaches 0.5.
    int bl = 0, bh = 0;
    for (int l = 0; l < s.induction.dim(0); ++l)
      for (int h = 0; h < s.induction.dim(1); ++h)
        if (s.induction.at(l, h) > s.induction.at(bl, bh)) bl = l, bh = h;
    if (phase_step_ < 0 && s.induction.at(bl, bh) >= 0.5f) {
      phase_step_ = s.step;
      loss_->addMarker(s.step, "induction head");
      scores_->addMarker(s.step, QString("step %1").arg(s.step));
      message_->setStyleSheet("color: #060;");
      message_->setText(QString("Phase change at step %1: layer %2 head %3's induction score reached %4 (>= 0.5).")
                            .arg(s.step)
                            .arg(bl)
                            .arg(bh)
                            .arg(s.induction.at(bl, bh), 0, 'f', 2));
    }
  }
  snapshots_.push_back(s);
  const bool at_end = timeline_->value() == timeline_->maximum();
  timeline_->setRange(0, static_cast<int>(snapshots_.size()) - 1);
  if (at_end) timeline_->setValue(timeline_->maximum());
  if (at_end || snapshots_.size() == 1) showSnapshot(timeline_->value());
}

void RunPanel::drawScores() {
  scores_->removeSeries();  // its markers too
  score_series_.clear();
  if (charts_ != Charts::Induction) return;
  const bool each = layers_ * heads_ <= 4;  // every head when they are few, else each layer's best head
  const std::vector<HeadDetector> kinds =
      score_kind_->currentIndex() == 1
          ? std::vector<HeadDetector>{HeadDetector::DuplicateToken}
          : std::vector<HeadDetector>{HeadDetector::Induction, HeadDetector::PreviousToken};
  for (const HeadDetector kind : kinds)
    for (int l = 0; l < layers_; ++l)
      for (int h = 0; h < (each ? heads_ : 1); ++h) {
        const QString who = each ? QString("L%1H%2").arg(l).arg(h) : QString("L%1 best").arg(l);
        const bool prev = kind == HeadDetector::PreviousToken;  // lighter and dotted beside the induction line
        QColor c = series_colour(each ? l * heads_ + h : l);
        if (prev) c = c.lighter(150);
        // short names: three charts share the row beside the form (the tooltip spells them out)
        const char* what = kind == HeadDetector::Induction ? " ind" : prev ? " prev" : " dup";
        scores_->addSeries(who + what, c, false, prev);
        score_series_.push_back({kind, l, each ? h : -1});
      }
  for (const Snapshot& s : snapshots_) appendScores(s);
  if (phase_step_ >= 0) scores_->addMarker(phase_step_, QString("step %1").arg(phase_step_));
}

void RunPanel::appendScores(const Snapshot& s) {
  for (size_t k = 0; k < score_series_.size(); ++k) {
    const ScoreSeries& q = score_series_[k];
    const Tensor& t = q.kind == HeadDetector::Induction       ? s.induction
                      : q.kind == HeadDetector::PreviousToken ? s.previous_token
                                                              : s.duplicate_token;
    if (t.numel() == 0 || q.layer >= t.dim(0)) continue;
    float v = 0;
    for (int h = 0; h < t.dim(1); ++h)
      if (q.head < 0 || q.head == h) v = std::max(v, t.at(q.layer, h));
    scores_->append(static_cast<int>(k), s.step, v);
  }
}

void RunPanel::finish(const TrainOutcome& outcome) {
  const TrainResult& r = outcome.result;
  const EvalResult& ev = outcome.eval;
  setRunning(false);
  // No time left to estimate any more: say where the run ended instead.
  progress_label_->setText(QString("%1 after %2 of %3 steps")
                               .arg(r.cancelled  ? "stopped"
                                    : r.diverged ? "diverged"
                                                 : "finished")
                               .arg(progress_->value())
                               .arg(progress_->maximum()));
  save_->setEnabled(outcome.model != nullptr);
  explore_->setEnabled(outcome.model != nullptr);
  if (!r.message.empty()) {
    fail(QString::fromStdString(r.message));
  } else if (charts_ == Charts::Grokking) {
    message_->setStyleSheet("color: #060;");
    message_->setText(QString("Done: accuracy %1 on the held-out pairs (the weights of step %2, the best). %3")
                          .arg(ev.accuracy, 0, 'f', 4)
                          .arg(r.best_epoch)
                          .arg(generalised_step_ >= 0
                                   ? QString("The training pairs were learnt at step %1, the held-out ones at step %2.")
                                         .arg(memorised_step_)
                                         .arg(generalised_step_)
                               : memorised_step_ >= 0
                                   ? QString("The training pairs were learnt at step %1; the held-out ones "
                                             "have not reached 0.95 yet: train longer.")
                                         .arg(memorised_step_)
                                   : QString("The training pairs have not been learnt yet: train longer.")));
  } else if (lm_) {
    message_->setStyleSheet("color: #060;");
    message_->setText(QString("Done: next-token accuracy %1 on the validation sequences' scored positions. %2")
                          .arg(ev.accuracy, 0, 'f', 4)
                          .arg(charts_ != Charts::Induction ? QString()
                               : phase_step_ >= 0 ? QString("The phase change came at step %1.").arg(phase_step_)
                                                  : QString("No head's induction score reached 0.5.")));
  } else {
    message_->setStyleSheet("color: #060;");
    message_->setText(
        QString("Done: validation accuracy %1 (weights of epoch %2).").arg(ev.accuracy, 0, 'f', 4).arg(r.best_epoch));
  }
  if (r.diverged) message_->setStyleSheet("color: #a00;");
  if (!outcome.model || lm_) return;
  const int C = static_cast<int>(ev.confusion.size());
  confusion_->setRowCount(C);
  confusion_->setColumnCount(C + 1);
  QStringList actual, predicted;
  for (int k = 0; k < C; ++k) {
    actual << "actual " + QString::fromStdString(outcome.model->label(k));
    predicted << "predicted " + QString::fromStdString(outcome.model->label(k));
  }
  confusion_->setVerticalHeaderLabels(actual);
  confusion_->setHorizontalHeaderLabels(predicted << "class accuracy");
  for (int a = 0; a < C; ++a) {
    for (int b = 0; b < C; ++b)
      confusion_->setItem(
          a, b, new QTableWidgetItem(QString::number(ev.confusion[static_cast<size_t>(a)][static_cast<size_t>(b)])));
    const double acc = ev.class_accuracy[static_cast<size_t>(a)];
    confusion_->setItem(a, C, new QTableWidgetItem(std::isnan(acc) ? "-" : QString::number(acc, 'f', 4)));
  }
  confusion_->resizeColumnsToContents();  // headers such as "predicted negative" in full
}

void RunPanel::showSnapshot(int index) {
  if (index < 0 || index >= static_cast<int>(snapshots_.size())) return;
  const Snapshot& s = snapshots_[static_cast<size_t>(index)];
  timeline_label_->setText(QString("step %1 (%2 of %3)").arg(s.step).arg(index + 1).arg(snapshots_.size()));
  const int layer = std::min(probe_layer_->value(), static_cast<int>(s.result->attention.size()) - 1);
  QStringList labels;
  for (const auto& t : s.result->tokens) labels << QString::fromStdString(t);
  for (int h = 0; h < static_cast<int>(head_views_.size()); ++h) {
    HeatmapData d = head_heatmap(s.result, layer, h, 64);
    d.row_labels = labels;
    d.col_labels = labels;
    d.title = QString("head %1").arg(h);
    head_views_[static_cast<size_t>(h)]->setData(std::move(d));
  }
}

}  // namespace attnlab
