// CircuitsPage (see circuits_page.h).
#include "ui/explore/circuits_page.h"

#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "engine/analysis/attribution.h"
#include "engine/analysis/patching.h"
#include "engine/text/input.h"
#include "ui/figure_export.h"
#include "ui/heatmap_data.h"
#include "ui/heatmap_view.h"

namespace attnlab {

struct CircuitsPage::Inputs {
  std::shared_ptr<const Model> model;
  ForwardRequest clean, corrupted;
  PreparedInput a, b;
  int answer = 0, wrong = 0;
};

namespace {

// What one patching job gives: the exact sweep, the estimate, or both.
struct Patched {
  std::shared_ptr<const PatchResult> exact, estimate;
};

}  // namespace

CircuitsPage::CircuitsPage(ExploreState* state, QWidget* parent) : ExplorePage(state, 0, /*eager=*/false, parent) {
  auto* v = new QVBoxLayout(this);
  auto* form = new QFormLayout;
  clean_ = new QLineEdit(this);
  clean_->setObjectName("circuitsClean");
  clean_->setToolTip("The prompt whose answer the patches restore");
  corrupted_ = new QLineEdit(this);
  corrupted_->setObjectName("circuitsCorrupted");
  corrupted_->setToolTip(
      "The same prompt with a word changed (as many tokens): its run receives the clean activations");
  answer_ = new QLineEdit(this);
  answer_->setObjectName("circuitsAnswer");
  wrong_ = new QLineEdit(this);
  wrong_->setObjectName("circuitsWrong");
  for (QLineEdit* e : {answer_, wrong_})
    e->setToolTip("A class name (classifiers) or one token (language models; a leading space matters to GPT-2's)");
  what_ = new QComboBox(this);
  what_->setObjectName("circuitsWhat");
  what_->addItems({"resid_pre", "attn_out", "mlp_out", "z", "pattern"});
  what_->setToolTip(
      "What is patched: a layer's input, its attention output or MLP output at one position, or one "
      "head's output (z) or attention pattern at every position");
  how_ = new QComboBox(this);
  how_->setObjectName("circuitsHow");
  how_->addItem("exact", "exact");
  how_->addItem("attribution (first-order estimate)", "attribution");
  how_->addItem("both, side by side", "both");
  how_->setToolTip(
      "Exact: one run of the corrupted prompt per cell with the clean activation put in. Attribution "
      "patching (Nanda 2023): (a_clean - a_corrupted) . d m / d a from one backward pass, a linear "
      "estimate that misses where the model saturates");
  form->addRow("clean", clean_);
  form->addRow("corrupted", corrupted_);
  auto* answers = new QHBoxLayout;
  answers->addWidget(answer_);
  answers->addWidget(new QLabel("against", this));
  answers->addWidget(wrong_);
  form->addRow("answer", answers);
  auto* patch = new QHBoxLayout;
  patch->addWidget(what_);
  patch->addWidget(new QLabel("by", this));
  patch->addWidget(how_, 1);
  form->addRow("patch", patch);
  v->addLayout(form);
  auto* bar = new QHBoxLayout;
  run_ = new QPushButton("Patch", this);
  run_->setObjectName("circuitsRun");
  run_->setToolTip(
      "One run of the corrupted prompt per layer and position (or head) with the clean activation "
      "put in; each resumes at its layer");
  dla_ = new QPushButton("Logit attribution", this);
  dla_->setObjectName("circuitsDla");
  dla_->setToolTip(
      "Direct logit attribution of the clean run (Elhage et al. 2021): each head's and each MLP's "
      "direct push towards the answer over the other, read through the final norm");
  export_ = new QPushButton("Export...", this);
  export_->setToolTip("The map shown as PNG, SVG, PDF, CSV or .npy (File > Export for the attention)");
  progress_ = new QProgressBar(this);
  progress_->setVisible(false);
  stop_ = new QPushButton("Cancel", this);
  stop_->setToolTip("Stop the sweep (at the next patched run)");
  stop_->setVisible(false);
  status_ = new QLabel(this);
  status_->setObjectName("circuitsStatus");
  status_->setWordWrap(true);
  bar->addWidget(run_);
  bar->addWidget(dla_);
  bar->addWidget(export_);
  bar->addWidget(progress_);
  bar->addWidget(stop_);
  bar->addWidget(status_, 1);
  v->addLayout(bar);
  auto* maps = new QHBoxLayout;
  map_ = new HeatmapView(this);
  map_->setPlaceholder("Give a clean and a corrupted prompt and the two answers, then Patch");
  map_->setMaxCells(512);
  map2_ = new HeatmapView(this);
  map2_->setMaxCells(512);
  map2_->setVisible(false);
  maps->addWidget(map_, 1);
  maps->addWidget(map2_, 1);
  v->addLayout(maps, 1);
  connect(run_, &QPushButton::clicked, this, &CircuitsPage::compute);
  connect(dla_, &QPushButton::clicked, this, &CircuitsPage::computeLogitAttribution);
  connect(export_, &QPushButton::clicked, this, [this] {
    const QString f = pick_export_file(this, "circuits.png");
    if (f.isEmpty()) return;
    try {
      exportTo(f, 150);
      status_->setStyleSheet("");
      status_->setText("Exported " + f);
    } catch (const Error& e) {
      fail(QString::fromStdString(e.what()));
    }
  });
  connect(stop_, &QPushButton::clicked, this, [this] {
    job_.cancel();
    progress_->setVisible(false);
    stop_->setVisible(false);
    status_->setText("Patching cancelled.");
  });
  for (HeatmapView* m : {map_, map2_})
    connect(m, &HeatmapView::cellClicked, this, [this](int row, int col) {
      if (heads_shown_ && state_->model() && col < state_->model()->config.num_heads)
        emit headRequested(shown_text_, row, col);
    });
}

void CircuitsPage::modelChanged() {
  job_.cancel();
  result_.reset();
  map_->setData({});
  map2_->setData({});
  map2_->setVisible(false);
  heads_shown_ = false;
  progress_->setVisible(false);
  stop_->setVisible(false);
  const std::shared_ptr<const Model>& m = state_->model();
  const bool can = m && (m->config.num_classes > 0 || m->config.lm_head);
  setEnabled(can);
  status_->setStyleSheet("");
  status_->setText(can ? QString("Activation patching (Meng et al. 2022): how much of the clean answer each activation "
                                 "of the clean run restores when it is put into the corrupted run.%1")
                             .arg(m->config.lm_head ? "" : " (Logit attribution needs a language model's LM head.)")
                       : "Activation patching reads a prediction (a classifier or a language model); this model has "
                         "none.");
  dla_->setEnabled(m && m->config.lm_head);  // the residual stream read through the LM head
  if (m && !m->config.lm_head)
    dla_->setToolTip("Direct logit attribution reads a language model's LM head; this model has none");
  if (m && m->config.num_classes >= 2) {  // a classifier's answers are its classes
    answer_->setText(QString::fromStdString(m->label(0)));
    wrong_->setText(QString::fromStdString(m->label(1)));
  }
}

void CircuitsPage::setPrompts(const QString& clean, const QString& corrupted) {
  clean_->setText(clean);
  corrupted_->setText(corrupted);
}

QString CircuitsPage::cleanText() const {
  return clean_->text();
}

void CircuitsPage::setAnswers(const QString& answer, const QString& wrong) {
  answer_->setText(answer);
  wrong_->setText(wrong);
}

void CircuitsPage::setTarget(const QString& what) {
  what_->setCurrentText(what);
}

void CircuitsPage::setMethod(const QString& how) {
  const int i = how_->findData(how);
  if (i >= 0) how_->setCurrentIndex(i);
}

bool CircuitsPage::running() const {
  return progress_->isVisible();
}
QString CircuitsPage::status() const {
  return status_->text();
}

void CircuitsPage::fail(const QString& message) {
  status_->setStyleSheet("color: #a00;");
  status_->setText(message);
}

bool CircuitsPage::readInputs(Inputs& in) {
  in.model = state_->model();
  if (!in.model) return false;
  // the prompts read as the Explore tab reads text; mistakes are said here, not thrown
  try {
    InputOptions o;
    o.what = "clean";
    in.a = prepare_text(*in.model, clean_->text().toStdString(), o);
    o.what = "corrupted";
    in.b = prepare_text(*in.model, corrupted_->text().toStdString(), o);
    if (in.a.ids.empty() || in.b.ids.empty()) throw Error("type a clean and a corrupted prompt");
    in.answer = resolve_answer(*in.model, answer_->text().toStdString(), "answer");
    in.wrong = resolve_answer(*in.model, wrong_->text().toStdString(), "against");
  } catch (const Error& e) {
    fail(QString::fromStdString(e.what()));
    return false;
  }
  status_->setStyleSheet("");
  in.clean.ids = in.a.ids, in.clean.token_types = in.a.token_types, in.clean.tokens = in.a.tokens;
  in.corrupted.ids = in.b.ids, in.corrupted.token_types = in.b.token_types, in.corrupted.tokens = in.b.tokens;
  return true;
}

void CircuitsPage::showMap(HeatmapView* view, const Tensor& values, const QStringList& cols, const QString& title,
                           const QString& col_axis) {
  const int L = static_cast<int>(values.dim(0)), C = static_cast<int>(values.dim(1));
  HeatmapData d = owned_heatmap(std::vector<float>(values.data.begin(), values.data.end()), {}, L, C, 512);
  d.diverging = true;  // a patch (or a part) can push either way
  for (int l = 0; l < L; ++l) d.row_labels << QString::number(l);
  d.col_labels = cols;
  d.row_axis = "layer";
  d.col_axis = col_axis;
  d.title = title;
  view->setGradient(state_->colormap());
  view->setData(std::move(d));
}

void CircuitsPage::compute() {
  job_.cancel();
  Inputs in;
  if (!readInputs(in)) return;
  const std::shared_ptr<const Model> model = in.model;
  const PatchTarget what = parse_patch_target(what_->currentText().toStdString());
  const QString how = how_->currentData().toString();
  const bool heads = what == PatchTarget::Z || what == PatchTarget::Pattern, exact = how != "attribution",
             estimate = how != "exact";
  const int H = model->config.num_heads, T = static_cast<int>(in.a.ids.size());
  const int total = exact ? model->config.num_layers * (heads ? H : T) : 1;
  progress_->setRange(0, total);
  progress_->setValue(0);
  progress_->setVisible(true);
  stop_->setVisible(exact);
  status_->setText(exact ? QString("Patching: %1 runs...").arg(total) : QString("Estimating: one backward pass..."));
  QStringList cols;  // positions: the clean token, and "clean→corrupted" where the two differ
  for (int j = 0; j < (heads ? H : T); ++j) {
    if (heads) {
      cols << QString("head %1").arg(j);
      continue;
    }
    const size_t k = static_cast<size_t>(j);
    QString label = QString::fromStdString(in.a.tokens[k]);
    if (k < in.b.tokens.size() && in.a.ids[k] != in.b.ids[k])
      label += QString::fromUtf8("\u2192") + QString::fromStdString(in.b.tokens[k]);
    cols << label;
  }
  const QString clean_text = clean_->text();
  job_.start<Patched>(
      [model, in, what, exact, estimate, this](const std::atomic<bool>* cancel, const BackgroundJob::Post& post) {
        auto backend = make_backend("cpu");
        Patched p;
        if (estimate)
          p.estimate = std::make_shared<const PatchResult>(
              attribution_patching(*model, *backend, in.clean, in.corrupted, in.answer, in.wrong, what));
        if (exact)
          p.exact = std::make_shared<const PatchResult>(activation_patching(
              *model, *backend, in.clean, in.corrupted, in.answer, in.wrong, what,
              [&](int done, int n) { post([this, done, n] { progress_->setValue(done), progress_->setMaximum(n); }); },
              cancel));
        return p;
      },
      [this, model, cols, heads, clean_text](std::shared_ptr<const Patched> p, const QString& error) {
        progress_->setVisible(false);
        stop_->setVisible(false);
        if (state_->model() != model) return;
        if (!p) return fail(error);
        const QString what = what_->currentText(), axis = heads ? "head (" + what + " at every position)" : "position";
        result_ = p->exact ? p->exact : p->estimate;
        showMap(map_, result_->values, cols,
                QString(p->exact ? "share restored (%1)" : "attribution estimate of the share restored (%1)").arg(what),
                axis);
        map2_->setVisible(p->exact && p->estimate);
        // side by side, one colour scale: an estimate that falls short looks it
        float top = 0;
        if (p->exact && p->estimate)
          for (const auto* r : {p->exact.get(), p->estimate.get()})
            for (float x : r->values.data) top = std::max(top, std::fabs(x));
        map_->setColourTop(top);
        map2_->setColourTop(top);
        if (p->exact && p->estimate)
          showMap(map2_, p->estimate->values, cols, QString("attribution estimate (%1)").arg(what), axis);
        heads_shown_ = heads;
        shown_text_ = clean_text;
        status_->setText(QString("Logit difference (answer minus against): clean %1, corrupted %2. 1 = the patch "
                                 "restores the clean answer, 0 = nothing; below 0, it pushes further away.%3")
                             .arg(result_->clean, 0, 'f', 3)
                             .arg(result_->corrupted, 0, 'f', 3)
                             .arg(heads ? " Click a head to open its pattern." : ""));
        if (result_->clean <= 0 || std::fabs(result_->clean - result_->corrupted) < 1.0) {
          status_->setStyleSheet("color: #a00;");  // a span this small divides rounding and noise up
          status_->setText(status_->text() + QString(" Note: %1; the shares are fractions of a span of %2 and "
                                                     "mean little.")
                                                 .arg(result_->clean <= 0 ? "the clean run does not prefer the answer"
                                                                          : "the two runs barely differ")
                                                 .arg(result_->clean - result_->corrupted, 0, 'f', 3));
        }
        if (!p->exact)
          status_->setText(status_->text() +
                           " The estimate is linear in each activation: where the answer "
                           "saturates it falls short; choose both to compare with exact patching.");
        if (p->exact && p->estimate) {  // how far the linear estimate got, in one line
          float ex = 0, es = 0;
          for (float x : p->exact->values.data) ex = std::max(ex, std::fabs(x));
          for (float x : p->estimate->values.data) es = std::max(es, std::fabs(x));
          status_->setText(status_->text() +
                           QString(" Largest share: exact %1, estimate %2 (one colour scale). The estimate is linear "
                                   "in each activation: where the answer saturates it falls short.")
                               .arg(ex, 0, 'f', 3)
                               .arg(es, 0, 'f', 3));
        }
      });
}

void CircuitsPage::computeLogitAttribution() {
  job_.cancel();
  Inputs in;
  if (!readInputs(in)) return;
  const std::shared_ptr<const Model> model = in.model;
  const int H = model->config.num_heads;
  QStringList cols;
  for (int h = 0; h < H; ++h) cols << QString("head %1").arg(h);
  cols << "MLP";
  const QString clean_text = clean_->text();
  progress_->setRange(0, 0);  // busy
  progress_->setVisible(true);
  job_.start<LogitAttribution>(
      [model, in](const std::atomic<bool>*, const BackgroundJob::Post&) {
        auto backend = make_backend("cpu");
        return direct_logit_attribution(*model, *backend, in.clean, in.answer, in.wrong);
      },
      [this, model, cols, clean_text](std::shared_ptr<const LogitAttribution> d, const QString& error) {
        progress_->setVisible(false);
        if (state_->model() != model) return;
        if (!d) return fail(error);
        result_.reset();
        map_->setColourTop(0);
        showMap(map_, d->parts, cols, "direct logit attribution of the clean run (answer minus against)",
                "head, then the MLP");
        map2_->setVisible(false);
        heads_shown_ = true;
        shown_text_ = clean_text;
        status_->setText(QString("Each head's and MLP's direct contribution to the logit difference %1 (the "
                                 "embedding adds %2, the biases %3; they sum to it). Click a head to open its "
                                 "pattern.")
                             .arg(d->logit_diff, 0, 'f', 3)
                             .arg(d->embedding, 0, 'f', 3)
                             .arg(d->biases, 0, 'f', 3));
      });
}

void CircuitsPage::exportTo(const QString& path, int dpi) {
  const HeatmapData& d = map_->data();
  if (d.rows == 0) throw Error("nothing to export: patch or compute the logit attribution first");
  std::vector<float> values(static_cast<size_t>(d.rows) * d.cols);
  for (int i = 0; i < d.rows; ++i)
    for (int j = 0; j < d.cols; ++j) values[static_cast<size_t>(i) * d.cols + j] = d.value(i, j);
  QStringList rows;
  for (int l = 0; l < d.rows; ++l) rows << QString("layer %1").arg(l);
  ExportSpec spec;
  spec.dpi = dpi;
  spec.colormap = state_->colormap();
  spec.title = d.title;
  spec.diverging = true;
  spec.row_axis = "layer";
  spec.col_axis = d.col_axis;
  spec.value_label = "share restored";
  if (d.title.startsWith("direct")) spec.value_label = "logit difference";
  export_matrix(values, rows, d.col_labels, spec, path);
}

}  // namespace attnlab
