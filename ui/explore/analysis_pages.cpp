// LensPage and ImportancePage (see analysis_pages.h).
#include "ui/explore/analysis_pages.h"

#include <QFile>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QTableWidget>
#include <QTextStream>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include <qcustomplot.h>

#include "engine/analysis/methods.h"
#include "engine/compute/lm.h"
#include "engine/formats/npy.h"
#include "ui/colormaps.h"

namespace attnlab {

// --- The logit lens (language models): each layer's output read through the final norm and the
// LM head; the likeliest next token per layer and position, coloured by its probability.

LensPage::LensPage(ExploreState* state, QWidget* parent) : ExplorePage(state, OnResult, /*eager=*/false, parent) {
  auto* v = new QVBoxLayout(this);
  status_ = new QLabel(this);
  status_->setWordWrap(true);
  v->addWidget(status_);
  auto* bar = new QHBoxLayout;
  window_label_ = new QLabel(QString("positions from (%1 at a time):").arg(window_), this);
  bar->addWidget(window_label_);
  from_ = new QSpinBox(this);
  from_->setObjectName("lensFrom");
  from_->setToolTip(
      "The first position the lens reads; it reads a window from there (the LM head runs for the positions shown "
      "only)");
  from_->setKeyboardTracking(false);  // one computation when typing stops, not one per digit
  bar->addWidget(from_);
  bar->addStretch(1);
  v->addLayout(bar);
  connect(from_, &QSpinBox::valueChanged, this, [this] { refresh(); });
  table_ = new QTableWidget(this);
  table_->setObjectName("lensTable");
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->horizontalHeader()->setDefaultSectionSize(64);
  table_->verticalHeader()->setDefaultSectionSize(22);
  v->addWidget(table_, 1);
  setEnabled(false);
}

void LensPage::modelChanged() {
  job_.cancel();
  lens_.reset();
  table_->clear();
  table_->setRowCount(0);
  table_->setColumnCount(0);
  const bool lm = state_->model() && state_->model()->config.lm_head;
  setEnabled(lm);
  status_->setText(lm ? ""
                      : "The logit lens reads a language model's layers through its LM head; this model has none.");
}

void LensPage::refresh() {
  job_.cancel();
  const std::shared_ptr<const Model> model = state_->model();
  const std::vector<int> ids = state_->controller()->prepared().ids;
  if (!model || !model->config.lm_head || !state_->result() || ids.empty()) {
    table_->setRowCount(0);
    table_->setColumnCount(0);
    return;
  }
  const int T = static_cast<int>(ids.size());
  {  // a new length puts the window at the end (where the prediction is); a move of it stays
    const QSignalBlocker quiet(from_);
    from_->setRange(0, std::max(0, T - 1));
    if (T != shown_length_) from_->setValue(std::max(0, T - window_));
    shown_length_ = T;
  }
  const int first = from_->value(), count = std::min(window_, T - first);
  from_->setEnabled(T > window_);
  status_->setText(
      QString("Reading %1 layers x %2 positions through the LM head...").arg(model->config.num_layers).arg(count));
  QStringList labels;
  for (const auto& t : state_->controller()->prepared().tokens) labels << QString::fromStdString(t);
  job_.start<LogitLens>(
      [model, ids, first, count](const std::atomic<bool>* cancel, const BackgroundJob::Post&) {
        auto backend = make_backend("cpu");
        return logit_lens(*model, *backend, ids, cancel, first, count);
      },
      [this, model, labels](std::shared_ptr<const LogitLens> lens, const QString& error) {
        if (state_->model() != model) return;
        lens_ = lens;
        labels_ = labels;
        if (!lens) {
          status_->setText("Logit lens: " + error);
          return;
        }
        QTableWidget* t = table_;
        t->setUpdatesEnabled(false);
        t->clear();
        t->setRowCount(lens->layers);
        t->setColumnCount(lens->T);
        QStringList heads;  // position and token, long tokens cut (the tooltip has them whole)
        for (int c = 0; c < lens->T; ++c) {
          QString s = labels.value(lens->first + c);
          if (s.size() > 10) s = s.left(9) + QStringLiteral("\u2026");
          heads << QString("%1 %2").arg(lens->first + c).arg(s);
        }
        t->setHorizontalHeaderLabels(heads);
        // each column as wide as its header (64-120 px): a centred header wider than its column
        // lost both ends ("<|begin_o")
        const QFontMetrics hfm = t->horizontalHeader()->fontMetrics();
        for (int p = 0; p < heads.size(); ++p)
          t->setColumnWidth(p, std::clamp(hfm.horizontalAdvance(heads[p]) + 14, 64, 120));
        QStringList rows;
        for (int l = lens->layers - 1; l >= 0; --l) rows << QString("layer %1").arg(l);
        t->setVerticalHeaderLabels(rows);  // the last layer on top, as the stack is drawn
        const QString cmap = state_->colormap();
        QCPColorGradient cm = make_gradient(cmap);
        for (int l = 0; l < lens->layers; ++l)
          for (int p = 0; p < lens->T; ++p) {
            const size_t k = static_cast<size_t>(l) * lens->T + p;
            const float prob = lens->top_prob[k];
            auto* item = new QTableWidgetItem(QString::fromStdString(model->readable_token(lens->top_id[k])));
            const QColor bg = QColor::fromRgb(cm.color(prob, QCPRange(0, 1)));
            item->setBackground(bg);
            item->setForeground(bg.lightnessF() > 0.55 ? Qt::black : Qt::white);
            item->setToolTip(QString("layer %1, after \"%2\" (position %3): %4 with p = %5")
                                 .arg(l)
                                 .arg(labels.value(lens->first + p))
                                 .arg(lens->first + p)
                                 .arg(QString::fromStdString(model->readable_token(lens->top_id[k])))
                                 .arg(prob, 0, 'f', 3));
            t->setItem(lens->layers - 1 - l, p, item);
          }
        t->setUpdatesEnabled(true);
        status_->setText(
            QString("Logit lens: the likeliest next token after each layer, read through the final norm and the LM "
                    "head (nostalgebraist 2020); colour = its probability (0 to 1, %1). The top row is the model's "
                    "own prediction. %2 (hide / merge apply to the heatmaps).")
                .arg(cmap)
                .arg(lens->T == labels.size() ? QString("Every token of the input is a column")
                                              : QString("Positions %1-%2 of %3 (%4 at a time: move the window above)")
                                                    .arg(lens->first)
                                                    .arg(lens->first + lens->T - 1)
                                                    .arg(labels.size())
                                                    .arg(window_)));
      });
}

void LensPage::setWindow(int positions) {
  window_ = std::max(1, positions);
  window_label_->setText(QString("positions from (%1 at a time):").arg(window_));
  shown_length_ = -1;
}

void LensPage::wait() {
  state_->controller()->flush();
  job_.wait();
}

void LensPage::exportTo(const QString& path, const QString& ext) const {
  if (!lens_ || !state_->model()) throw Error("nothing to export: open the Logit lens tab first (language models)");
  const LogitLens& lens = *lens_;
  if (ext == "npy") {  // [2, layers, T]: top-1 ids, then their probabilities (as attnlab-cli analyze)
    Tensor out({2, lens.layers, lens.T});
    for (int k = 0; k < lens.layers * lens.T; ++k) {
      out.data[static_cast<size_t>(k)] = static_cast<float>(lens.top_id[static_cast<size_t>(k)]);
      out.data[static_cast<size_t>(lens.layers * lens.T + k)] = lens.top_prob[static_cast<size_t>(k)];
    }
    return save_npy(path.toStdString(), out);
  }
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Text)) throw Error("cannot write " + path.toStdString());
  QTextStream out(&f);
  auto quoted = [](QString s) { return "\"" + s.replace("\"", "\"\"") + "\""; };
  out << "layer,position,after_token,top_id,top_token,probability\n";
  for (int l = 0; l < lens.layers; ++l)
    for (int t = 0; t < lens.T; ++t) {
      const size_t k = static_cast<size_t>(l * lens.T + t);
      const int p = lens.first + t;  // the input position of column t
      out << l << "," << p << "," << quoted(p < labels_.size() ? labels_[p] : QString()) << "," << lens.top_id[k] << ","
          << quoted(QString::fromStdString(state_->model()->readable_token(lens.top_id[k]))) << ","
          << QString::number(lens.top_prob[k], 'g', 9) << "\n";
    }
}

// --- Head importance (Michel et al. 2019): p(prediction) minus p(prediction) with one head
// ablated, for every head; click a cell to ablate or restore that head in every view.

ImportancePage::ImportancePage(ExploreState* state, QWidget* parent) : ExplorePage(state, 0, /*eager=*/false, parent) {
  auto* v = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  auto* run = new QPushButton("Compute head importance", this);
  run->setObjectName("importanceRun");
  run->setToolTip("One pass per head with that head ablated: how much the prediction's probability drops");
  status_ = new QLabel(this);
  status_->setWordWrap(true);
  progress_ = new QProgressBar(this);
  progress_->setObjectName("importanceProgress");
  progress_->setToolTip("Heads ablated so far");
  progress_->setVisible(false);
  stop_ = new QPushButton("Cancel", this);
  stop_->setObjectName("importanceCancel");
  stop_->setToolTip("Stop computing head importance");
  stop_->setVisible(false);
  bar->addWidget(run);
  bar->addWidget(progress_);
  bar->addWidget(stop_);
  bar->addWidget(status_, 1);
  v->addLayout(bar);
  table_ = new QTableWidget(this);
  table_->setObjectName("importanceTable");
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->horizontalHeader()->setDefaultSectionSize(76);  // "-1.96e-05" fits
  v->addWidget(table_, 1);
  connect(run, &QPushButton::clicked, this, &ImportancePage::compute);
  connect(stop_, &QPushButton::clicked, this, [this] {
    job_.cancel();  // whatever the thread still sends is dropped
    progress_->setVisible(false);
    stop_->setVisible(false);
    status_->setText("Head importance cancelled.");
  });
  connect(table_, &QTableWidget::cellClicked, this, [this](int row, int col) {
    state_->setAblated(row, col, !state_->isAblated(row, col));  // layer 0 first, as in All layers and the CLI
  });
  connect(state, &ExploreState::ablationChanged, this, &ImportancePage::markAblated);
}

void ImportancePage::modelChanged() {
  job_.cancel();
  progress_->setVisible(false);
  stop_->setVisible(false);
  values_.reset();
  table_->clear();
  table_->setRowCount(0);
  table_->setColumnCount(0);
  const bool can = state_->model() && (state_->model()->config.num_classes > 0 || state_->model()->config.lm_head);
  status_->setText(can ? "How much each head matters to the prediction: click Compute (one pass per head)."
                       : "Head importance needs a prediction (a classifier or a language model); this model has none.");
  setEnabled(can);
}

// Ablated heads are struck out in the table.
void ImportancePage::markAblated() {
  for (int l = 0; l < table_->rowCount(); ++l)
    for (int h = 0; h < table_->columnCount(); ++h)
      if (QTableWidgetItem* it = table_->item(l, h)) {
        QFont f = it->font();
        f.setStrikeOut(state_->isAblated(l, h));
        it->setFont(f);
      }
}

bool ImportancePage::running() const {
  return progress_->isVisible();
}

void ImportancePage::compute() {
  job_.cancel();
  state_->controller()->flush();
  const std::shared_ptr<const Model> model = state_->model();
  if (!model || !state_->result()) return;
  const ModelConfig& c = model->config;
  if (c.num_classes == 0 && !c.lm_head) return;
  ForwardRequest req;
  req.ids = state_->controller()->prepared().ids;
  req.token_types = state_->controller()->prepared().token_types;
  req.mask = state_->mask();
  req.ablate = {};  // importance of each head alone, from the full model
  if (req.ids.empty()) return;
  const std::string backend_name = state_->controller()->backend().toStdString();
  status_->setText(QString("Ablating %1 heads one at a time...").arg(c.num_layers * c.num_heads));
  progress_->setRange(0, c.num_layers * c.num_heads);
  progress_->setValue(0);
  progress_->setVisible(true);
  stop_->setVisible(true);
  job_.start<Tensor>(
      [model, req, backend_name, this](const std::atomic<bool>* cancel, const BackgroundJob::Post& post) {
        auto backend = make_backend(backend_name == "reference" ? "reference" : "cpu");
        return head_importance(
            *model, *backend, req, -1,
            [&](int done, int total) {
              post([this, done, total] {
                status_->setText(QString("Ablating heads: %1 of %2...").arg(done).arg(total));
                progress_->setValue(done);
              });
            },
            cancel);
      },
      [this, model](std::shared_ptr<const Tensor> imp, const QString& error) {
        if (state_->model() != model) return;
        progress_->setVisible(false);
        stop_->setVisible(false);
        if (!imp) {
          status_->setText("Head importance: " + error);
          return;
        }
        values_ = imp;
        QTableWidget* t = table_;
        const int L = static_cast<int>(imp->dim(0)), H = static_cast<int>(imp->dim(1));
        float top = 1e-6f;
        for (float v : imp->data) top = std::max(top, std::fabs(v));
        t->clear();
        t->setRowCount(L);
        t->setColumnCount(H);
        QStringList rows, cols;
        for (int l = 0; l < L; ++l) rows << QString("layer %1").arg(l);
        for (int h = 0; h < H; ++h) cols << QString("head %1").arg(h);
        t->setVerticalHeaderLabels(rows);
        t->setHorizontalHeaderLabels(cols);
        // One fixed-point format for the table: confident models drop by 1e-4 or less when a head
        // goes, so the values are shown in a unit of the largest one's power of ten (said below)
        const int exp10 = top < 0.01f ? static_cast<int>(std::floor(std::log10(static_cast<double>(top)))) : 0;
        const double unit = std::pow(10.0, exp10);
        for (int l = 0; l < L; ++l)
          for (int h = 0; h < H; ++h) {
            const float v = imp->at(l, h);
            auto* item = new QTableWidgetItem(QString::number(v / unit, 'f', exp10 ? 2 : 4));
            // diverging colours centred on 0: red where ablating the head lowers the prediction
            const float a = std::min(1.0f, std::fabs(v) / top);
            const QColor bg = v >= 0 ? QColor::fromRgbF(1.0f, 1.0f - 0.75f * a, 1.0f - 0.75f * a)
                                     : QColor::fromRgbF(1.0f - 0.75f * a, 1.0f - 0.75f * a, 1.0f);
            item->setBackground(bg);
            item->setForeground(Qt::black);
            item->setToolTip(QString("layer %1, head %2: the prediction's probability drops by %3 without it. "
                                     "Click to ablate or restore the head.")
                                 .arg(l)
                                 .arg(h)
                                 .arg(v, 0, 'f', 4));
            t->setItem(l, h, item);
          }
        markAblated();
        QString status =
            QString(
                "p(prediction) minus p(prediction) with the head ablated (Michel et al. 2019): red, the head "
                "helps the prediction; blue, it works against it (full colour: a change of %1). Click a cell to "
                "ablate or restore that head in every view.")
                .arg(top, 0, 'g', 3);
        if (exp10) status += QString(" Values in units of 1e%1.").arg(exp10);
        // a saturated prediction hardly moves when one head goes: say so rather than show only zeros
        const ForwardResult* r = state_->result().get();
        const double p = !r                        ? 0.0
                         : r->predicted >= 0       ? r->class_probs[static_cast<size_t>(r->predicted)]
                         : !r->next_tokens.empty() ? r->next_tokens[0].second
                                                   : 0.0;
        if (p > 0.999)
          status += QString(
                        " The model is nearly certain here (p = %1), so removing one head barely changes it; an "
                        "input it is less sure about shows more.")
                        .arg(p, 0, 'f', 4);
        status_->setText(status);
      });
}

void ImportancePage::exportTo(const QString& path, const QString& ext) const {
  if (!values_) throw Error("nothing to export: compute head importance first (Importance tab)");
  const Tensor& v = *values_;
  if (ext == "npy") return save_npy(path.toStdString(), v);  // [layers, heads]
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Text)) throw Error("cannot write " + path.toStdString());
  QTextStream out(&f);
  out << "layer,head,importance\n";
  for (int64_t l = 0; l < v.dim(0); ++l)
    for (int64_t h = 0; h < v.dim(1); ++h) out << l << "," << h << "," << QString::number(v.at(l, h), 'g', 9) << "\n";
}

}  // namespace attnlab
