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

#include "engine/analysis/patching.h"
#include "engine/text/input.h"
#include "ui/heatmap_data.h"
#include "ui/heatmap_view.h"

namespace attnlab {

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
  what_->addItems({"resid_pre", "attn_out", "mlp_out", "z"});
  what_->setToolTip(
      "What is patched: a layer's input, its attention output or MLP output at one position, or one "
      "head's output (z) at every position");
  form->addRow("clean", clean_);
  form->addRow("corrupted", corrupted_);
  auto* answers = new QHBoxLayout;
  answers->addWidget(answer_);
  answers->addWidget(new QLabel("against", this));
  answers->addWidget(wrong_);
  form->addRow("answer", answers);
  form->addRow("patch", what_);
  v->addLayout(form);
  auto* bar = new QHBoxLayout;
  run_ = new QPushButton("Patch", this);
  run_->setObjectName("circuitsRun");
  run_->setToolTip(
      "One run of the corrupted prompt per layer and position (or head) with the clean activation "
      "put in; each resumes at its layer");
  progress_ = new QProgressBar(this);
  progress_->setVisible(false);
  stop_ = new QPushButton("Cancel", this);
  stop_->setToolTip("Stop the sweep (at the next patched run)");
  stop_->setVisible(false);
  status_ = new QLabel(this);
  status_->setObjectName("circuitsStatus");
  status_->setWordWrap(true);
  bar->addWidget(run_);
  bar->addWidget(progress_);
  bar->addWidget(stop_);
  bar->addWidget(status_, 1);
  v->addLayout(bar);
  map_ = new HeatmapView(this);
  map_->setPlaceholder("Give a clean and a corrupted prompt and the two answers, then Patch");
  map_->setMaxCells(512);
  v->addWidget(map_, 1);
  connect(run_, &QPushButton::clicked, this, &CircuitsPage::compute);
  connect(stop_, &QPushButton::clicked, this, [this] {
    job_.cancel();
    progress_->setVisible(false);
    stop_->setVisible(false);
    status_->setText("Patching cancelled.");
  });
}

void CircuitsPage::modelChanged() {
  job_.cancel();
  result_.reset();
  map_->setData({});
  progress_->setVisible(false);
  stop_->setVisible(false);
  const std::shared_ptr<const Model>& m = state_->model();
  const bool can = m && (m->config.num_classes > 0 || m->config.lm_head);
  setEnabled(can);
  status_->setText(can ? "Activation patching (Meng et al. 2022): how much of the clean answer each activation of "
                         "the clean run restores when it is put into the corrupted run."
                       : "Activation patching reads a prediction (a classifier or a language model); this model has "
                         "none.");
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
bool CircuitsPage::running() const {
  return progress_->isVisible();
}
QString CircuitsPage::status() const {
  return status_->text();
}

void CircuitsPage::compute() {
  job_.cancel();
  const std::shared_ptr<const Model> model = state_->model();
  if (!model) return;
  // the prompts read as the Explore tab reads text; mistakes are said here, not thrown
  ForwardRequest clean, corrupted;
  int answer = 0, wrong = 0;
  PreparedInput a, b;
  try {
    InputOptions o;
    o.what = "clean";
    a = prepare_text(*model, clean_->text().toStdString(), o);
    o.what = "corrupted";
    b = prepare_text(*model, corrupted_->text().toStdString(), o);
    if (a.ids.empty() || b.ids.empty()) throw Error("type a clean and a corrupted prompt");
    answer = resolve_answer(*model, answer_->text().toStdString(), "answer");
    wrong = resolve_answer(*model, wrong_->text().toStdString(), "against");
  } catch (const Error& e) {
    status_->setStyleSheet("color: #a00;");
    status_->setText(QString::fromStdString(e.what()));
    return;
  }
  status_->setStyleSheet("");
  clean.ids = a.ids, clean.token_types = a.token_types, clean.tokens = a.tokens;
  corrupted.ids = b.ids, corrupted.token_types = b.token_types, corrupted.tokens = b.tokens;
  const PatchTarget what = parse_patch_target(what_->currentText().toStdString());
  const bool heads = what == PatchTarget::Z;
  const int total = model->config.num_layers * (heads ? model->config.num_heads : static_cast<int>(a.ids.size()));
  progress_->setRange(0, total);
  progress_->setValue(0);
  progress_->setVisible(true);
  stop_->setVisible(true);
  status_->setText(QString("Patching: %1 runs...").arg(total));
  QStringList cols;  // positions: the clean token, and "clean→corrupted" where the two differ
  for (int j = 0; j < (heads ? model->config.num_heads : static_cast<int>(a.tokens.size())); ++j) {
    if (heads) {
      cols << QString("head %1").arg(j);
      continue;
    }
    const size_t k = static_cast<size_t>(j);
    QString label = QString::fromStdString(a.tokens[k]);
    if (k < b.tokens.size() && a.ids[k] != b.ids[k])
      label += QString::fromUtf8("\u2192") + QString::fromStdString(b.tokens[k]);
    cols << label;
  }
  job_.start<PatchResult>(
      [model, clean, corrupted, answer, wrong, what, this](const std::atomic<bool>* cancel,
                                                           const BackgroundJob::Post& post) {
        auto backend = make_backend("cpu");
        return activation_patching(
            *model, *backend, clean, corrupted, answer, wrong, what,
            [&](int done, int n) { post([this, done, n] { progress_->setValue(done), progress_->setMaximum(n); }); },
            cancel);
      },
      [this, model, cols, heads](std::shared_ptr<const PatchResult> r, const QString& error) {
        progress_->setVisible(false);
        stop_->setVisible(false);
        if (state_->model() != model) return;
        if (!r) {
          status_->setStyleSheet("color: #a00;");
          status_->setText(error);
          return;
        }
        result_ = r;
        const int L = static_cast<int>(r->values.dim(0)), C = static_cast<int>(r->values.dim(1));
        HeatmapData d = owned_heatmap(std::vector<float>(r->values.data.begin(), r->values.data.end()), {}, L, C, 512);
        d.diverging = true;  // a patch can also push away from the answer
        for (int l = 0; l < L; ++l) d.row_labels << QString::number(l);
        d.col_labels = cols;
        d.row_axis = "layer";
        d.col_axis = heads ? "head (z at every position)" : "position";
        d.title = QString("share of the clean logit difference restored (%1)").arg(what_->currentText());
        map_->setGradient(state_->colormap());
        map_->setData(std::move(d));
        status_->setText(QString("Logit difference (answer minus against): clean %1, corrupted %2. 1 = the patch "
                                 "restores the clean answer, 0 = nothing; below 0, it pushes further away.")
                             .arg(r->clean, 0, 'f', 3)
                             .arg(r->corrupted, 0, 'f', 3));
      });
}

}  // namespace attnlab
