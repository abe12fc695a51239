// ExploreView's analysis side (see explore_view.h): the logit lens, head ablation and the
// Importance tab, value-weighted heads, token selection, the mask editor's view of the other
// masks, and the tables' exports. The widgets are built in explore_view.cpp.
#include <QCoreApplication>
#include <QHeaderView>
#include <QFile>
#include <QFileInfo>
#include <QItemSelectionModel>
#include <QLabel>
#include <QListView>
#include <QProgressBar>
#include <QPushButton>
#include <QComboBox>
#include <QTabWidget>
#include <QTableWidget>
#include <QTextStream>
#include <algorithm>
#include <cmath>

#include <qcustomplot.h>

#include "engine/analysis/methods.h"
#include "engine/lm.h"
#include "engine/npy.h"
#include "ui/colormaps.h"
#include "ui/explore_view.h"
#include "ui/heatmap_data.h"
#include "ui/heatmap_view.h"
#include "ui/mask_editor.h"
#include "ui/token_model.h"

namespace attnlab {

void ExploreView::startLens() {
  lens_dirty_ = false;
  lens_job_.stop();
  if (!model_ || !model_->config.lm_head || !result_) {
    lens_table_->setRowCount(0);
    lens_table_->setColumnCount(0);
    return;
  }
  const std::vector<int> ids = controller_->prepared().ids;
  if (ids.empty()) return;
  lens_status_->setText(QString("Reading %1 layers x %2 positions through the LM head...")
                            .arg(model_->config.num_layers)
                            .arg(ids.size()));
  std::shared_ptr<const Model> model = model_;
  QStringList labels;
  for (const auto& t : controller_->prepared().tokens) labels << QString::fromStdString(t);
  lens_job_.start<LogitLens>(
      [model, ids](const std::atomic<bool>* cancel, const BackgroundJob::Post&) {
        auto backend = make_backend("cpu");
        return logit_lens(*model, *backend, ids, cancel);
      },
      [this, model, labels](std::shared_ptr<const LogitLens> lens, const QString& error) {
        if (model_ != model) return;
        QTableWidget* t = lens_table_;
        lens_ = lens;
        lens_labels_ = labels;
        if (!lens) {
          lens_status_->setText("Logit lens: " + error);
          return;
        }
        t->setUpdatesEnabled(false);
        t->clear();
        t->setRowCount(lens->layers);
        t->setColumnCount(lens->T);
        QStringList heads;  // position and token, long tokens cut (the tooltip has them whole)
        for (int p = 0; p < labels.size(); ++p) {
          QString s = labels[p];
          if (s.size() > 10) s = s.left(9) + QStringLiteral("\u2026");
          heads << QString("%1 %2").arg(p).arg(s);
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
        QCPColorGradient cm = make_gradient(colormap_);
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
                                 .arg(labels.value(p))
                                 .arg(p)
                                 .arg(QString::fromStdString(model->readable_token(lens->top_id[k])))
                                 .arg(prob, 0, 'f', 3));
            t->setItem(lens->layers - 1 - l, p, item);
          }
        t->setUpdatesEnabled(true);
        lens_status_->setText(
            QString("Logit lens: the likeliest next token after each layer, read through the final norm and the LM "
                    "head (nostalgebraist 2020); colour = its probability (0 to 1, %1). The top row is the model's "
                    "own prediction. Every token of the input is a column (hide / merge apply to the heatmaps).")
                .arg(colormap_));
      });
}

void ExploreView::applyAblation() {
  controller_->setAblated({ablated_.begin(), ablated_.end()});
}

void ExploreView::setAblated(int layer, int head, bool ablated) {
  if (!model_ || layer < 0 || layer >= model_->config.num_layers || head < 0 || head >= model_->config.num_heads) return;
  if (ablated)
    ablated_.insert({layer, head});
  else
    ablated_.erase({layer, head});
  applyAblation();
  // the importance table marks ablated heads with a frame of text
  const int row = layer;
  if (QTableWidgetItem* it = imp_table_->item(row, head)) {
    QFont f = it->font();
    f.setStrikeOut(ablated);
    it->setFont(f);
  }
  schedule();
}

void ExploreView::computeImportance() {
  imp_job_.stop();
  flush();
  if (!model_ || !result_) return;
  const ModelConfig& c = model_->config;
  if (c.num_classes == 0 && !c.lm_head) return;
  ForwardRequest req;
  req.ids = controller_->prepared().ids;
  req.token_types = controller_->prepared().token_types;
  req.mask = currentMask();
  req.ablate = {};  // importance of each head alone, from the full model
  if (req.ids.empty()) return;
  std::shared_ptr<const Model> model = model_;
  const std::string backend_name = controller_->backend().toStdString();
  imp_status_->setText(QString("Ablating %1 heads one at a time...").arg(c.num_layers * c.num_heads));
  imp_progress_->setRange(0, c.num_layers * c.num_heads);
  imp_progress_->setValue(0);
  imp_progress_->setVisible(true);
  imp_stop_->setVisible(true);
  imp_job_.start<Tensor>(
      [model, req, backend_name, this](const std::atomic<bool>* cancel, const BackgroundJob::Post& post) {
        auto backend = make_backend(backend_name == "reference" ? "reference" : "cpu");
        return head_importance(*model, *backend, req, -1, [&](int done, int total) {
          post([this, done, total] {
            imp_status_->setText(QString("Ablating heads: %1 of %2...").arg(done).arg(total));
            imp_progress_->setValue(done);
          });
        }, cancel);
      },
      [this, model](std::shared_ptr<const Tensor> imp, const QString& error) {
        if (model_ != model) return;
        imp_progress_->setVisible(false);
        imp_stop_->setVisible(false);
        if (!imp) {
          imp_status_->setText("Head importance: " + error);
          return;
        }
        QTableWidget* t = imp_table_;
        imp_values_ = imp;
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
        for (int l = 0; l < L; ++l)
          for (int h = 0; h < H; ++h) {
            const float v = imp->at(l, h);
            auto* item = new QTableWidgetItem(QString::number(v, 'e', 2));  // confident models: tiny drops, one format
            // diverging colours centred on 0: red where ablating the head lowers the prediction
            const float a = std::min(1.0f, std::fabs(v) / top);
            const QColor bg = v >= 0 ? QColor::fromRgbF(1.0f, 1.0f - 0.75f * a, 1.0f - 0.75f * a)
                                     : QColor::fromRgbF(1.0f - 0.75f * a, 1.0f - 0.75f * a, 1.0f);
            item->setBackground(bg);
            item->setForeground(Qt::black);
            QFont f = item->font();
            f.setStrikeOut(isAblated(l, h));
            item->setFont(f);
            item->setToolTip(QString("layer %1, head %2: the prediction's probability drops by %3 without it. "
                                     "Click to ablate or restore the head.")
                                 .arg(l)
                                 .arg(h)
                                 .arg(v, 0, 'f', 4));
            t->setItem(l, h, item);
          }
        QString status =
            QString("p(prediction) minus p(prediction) with the head ablated (Michel et al. 2019): red, the head "
                    "helps the prediction; blue, it works against it (full colour: a change of %1). Click a cell to "
                    "ablate or restore that head in every view.")
                .arg(top, 0, 'g', 3);
        // a saturated prediction hardly moves when one head goes: say so rather than show only zeros
        const ForwardResult* r = result_.get();
        const double p = !r ? 0.0
                         : r->predicted >= 0 ? r->class_probs[static_cast<size_t>(r->predicted)]
                         : !r->next_tokens.empty() ? r->next_tokens[0].second
                                                   : 0.0;
        if (p > 0.999)
          status += QString(" The model is nearly certain here (p = %1), so removing one head barely changes it; an "
                            "input it is less sure about shows more.")
                        .arg(p, 0, 'f', 4);
        imp_status_->setText(status);
      });
}

bool ExploreView::importanceRunning() const { return imp_progress_->isVisible(); }

void ExploreView::setHeadWeighting(const QString& name) {
  const int i = weighting_->findText(name);
  if (i < 0) throw Error("heads: no choice \"" + name.toStdString() + "\" (attention or value-weighted)");
  weighting_->setCurrentIndex(i);
}

void ExploreView::waitForValueNorm() {
  flush();
  vn_job_.wait();
}

void ExploreView::waitForImportance() { imp_job_.wait(); }

void ExploreView::waitForLens() {
  flush();
  if (lens_dirty_ && tabs_->currentWidget() == lens_page_) startLens();
  lens_job_.wait();
}

void ExploreView::selectTokens(const std::vector<int>& positions) {
  flush();
  QItemSelection sel;
  for (int t : positions) {
    if (t < 0 || t >= token_model_->rowCount())
      throw Error("--select: no token " + std::to_string(t) + " (the input has " + std::to_string(token_model_->rowCount()) +
                  ")");
    sel.select(token_model_->index(t), token_model_->index(t));
  }
  token_view_->selectionModel()->select(sel, QItemSelectionModel::ClearAndSelect);
}

ForwardRequest ExploreView::analysisRequest() const {
  ForwardRequest req;
  req.ids = controller_->prepared().ids;
  req.token_types = controller_->prepared().token_types;
  req.mask = currentMask();
  req.ablate = {ablated_.begin(), ablated_.end()};
  if (result_ && result_->is_cross()) req.cross_ids = controller_->preparedCross().ids;
  return req;
}

// The mask editor shows what the other masks (and the model's own) block, so that painting is seen
// combined with them (article 003, 2.3-2.4).
void ExploreView::showOtherMasks() {
  if (!model_ || !result_ || result_->is_cross() || controller_->prepared().ids.empty()) return editor_->setOthers({});
  ForwardRequest req = analysisRequest();
  req.mask.custom.reset();
  const AttnMask m = self_attention_mask(*model_, req);
  if (m.T != editor_->rows() || m.S != editor_->cols()) return editor_->setOthers({});
  std::vector<uint8_t> blocked(static_cast<size_t>(m.T) * m.S, 0);
  const int head = std::max(0, editor_->targetHead());
  for (int i = 0; i < m.T; ++i)
    for (int j = 0; j < m.S; ++j) blocked[static_cast<size_t>(i) * m.S + j] = m.is_blocked(head, i, j);
  editor_->setOthers(std::move(blocked));
}

bool ExploreView::valueWeighted() const { return weighting_->currentIndex() == 1; }

// Norm-based attention for the Heads and Head tabs, in the background (a forward's worth of work).
void ExploreView::startValueNorm() {
  vn_job_.stop();
  if (!model_ || !result_) return;
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
        render();
      });
}

// Head h of the current layer as the Heads and Head tabs draw it: the attention grid the worker
// built, or its value-weighted counterpart when that is chosen and computed for this input.
HeatmapData ExploreView::headData(int layer, int head, int max_cells) const {
  const int H = static_cast<int>(heads_.size());
  HeatmapData d = max_cells > 0 ? head_heatmap(result_, layer, head, max_cells) : grids_[static_cast<size_t>(layer * H + head)];
  const int T = static_cast<int>(result_->ids.size());
  if (valueWeighted() && vn_ && !result_->is_cross() && vn_->dim(2) == T && vn_->dim(0) > layer && vn_->dim(1) > head) {
    const size_t TT = static_cast<size_t>(T) * T;
    const float* src = vn_->ptr() + (static_cast<size_t>(layer) * vn_->dim(1) + head) * TT;
    std::vector<uint8_t> blocked(TT, 0);
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < T; ++j) blocked[static_cast<size_t>(i) * T + j] = result_->mask.is_blocked(head, i, j);
    d = owned_heatmap(std::vector<float>(src, src + TT), std::move(blocked), T, T, max_cells > 0 ? max_cells : ForwardJob{}.display_cells);
  }
  return d;
}

void ExploreView::exportTable(const QString& which, const QString& path) {
  const QString ext = QFileInfo(path).suffix().toLower();
  if (ext != "csv" && ext != "npy")
    throw Error("unknown export format \"." + ext.toStdString() + "\" (expected .csv or .npy)");
  QFile f(path);
  if (which == "importance") {
    if (!imp_values_) throw Error("nothing to export: compute head importance first (Importance tab)");
    const Tensor& v = *imp_values_;
    if (ext == "npy") return save_npy(path.toStdString(), v);  // [layers, heads]
    if (!f.open(QIODevice::WriteOnly | QIODevice::Text)) throw Error("cannot write " + path.toStdString());
    QTextStream out(&f);
    out << "layer,head,importance\n";
    for (int64_t l = 0; l < v.dim(0); ++l)
      for (int64_t h = 0; h < v.dim(1); ++h) out << l << "," << h << "," << QString::number(v.at(l, h), 'g', 9) << "\n";
    return;
  }
  if (which == "lens") {
    if (!lens_ || !model_) throw Error("nothing to export: open the Logit lens tab first (language models)");
    const LogitLens& lens = *lens_;
    if (ext == "npy") {  // [2, layers, T]: top-1 ids, then their probabilities (as attnlab-cli analyze)
      Tensor out({2, lens.layers, lens.T});
      for (int k = 0; k < lens.layers * lens.T; ++k) {
        out.data[static_cast<size_t>(k)] = static_cast<float>(lens.top_id[static_cast<size_t>(k)]);
        out.data[static_cast<size_t>(lens.layers * lens.T + k)] = lens.top_prob[static_cast<size_t>(k)];
      }
      return save_npy(path.toStdString(), out);
    }
    if (!f.open(QIODevice::WriteOnly | QIODevice::Text)) throw Error("cannot write " + path.toStdString());
    QTextStream out(&f);
    auto quoted = [](QString s) { return "\"" + s.replace("\"", "\"\"") + "\""; };
    out << "layer,position,after_token,top_id,top_token,probability\n";
    for (int l = 0; l < lens.layers; ++l)
      for (int t = 0; t < lens.T; ++t) {
        const size_t k = static_cast<size_t>(l * lens.T + t);
        out << l << "," << t << "," << quoted(t < lens_labels_.size() ? lens_labels_[t] : QString()) << ","
            << lens.top_id[k] << "," << quoted(QString::fromStdString(model_->readable_token(lens.top_id[k]))) << ","
            << QString::number(lens.top_prob[k], 'g', 9) << "\n";
      }
    return;
  }
  throw Error("internal: no table " + which.toStdString());
}

}  // namespace attnlab
