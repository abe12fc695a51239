// TrainView: the composer (see train_view.h).
#include "ui/train_view.h"

#include <algorithm>
#include <optional>

#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QMimeData>
#include <QScrollArea>
#include <QScrollBar>
#include <QSplitter>
#include <QVBoxLayout>

#include "engine/compute/generate.h"
#include "engine/model/model_folder.h"
#include "engine/model/hf_model.h"
#include "engine/text/input.h"
#include "engine/train/tasks.h"
#include "engine/train/train_model.h"
#include "ui/train/dataset_panel.h"
#include "ui/train/model_form.h"
#include "ui/train/run_panel.h"

namespace attnlab {

TrainView::TrainView(QWidget* parent) : QWidget(parent), controller_(new TrainController(this)) {
  setAcceptDrops(true);
  auto* root = new QHBoxLayout(this);
  auto* split = new QSplitter(Qt::Horizontal, this);
  split->setObjectName("trainSplitter");
  root->addWidget(split);

  // left column: data and settings
  auto* left_scroll = new QScrollArea(split);
  left_scroll->setWidgetResizable(true);
  auto* left = new QWidget;
  left_scroll->setWidget(left);
  auto* lv = new QVBoxLayout(left);
  data_ = new DatasetPanel(left);
  form_ = new ModelForm(left);
  lv->addWidget(data_);
  lv->addWidget(form_);
  lv->addStretch();

  // right column: the run; it scrolls too, so the window fits a 1280x720 screen
  auto* right_scroll = new QScrollArea(split);
  right_scroll->setWidgetResizable(true);
  right_scroll->setFrameShape(QFrame::NoFrame);
  run_ = new RunPanel;
  right_scroll->setWidget(run_);
  split->addWidget(left_scroll);
  split->addWidget(right_scroll);
  split->setStretchFactor(1, 1);
  run_->setProbe(shipped_datasets().front().probe);

  connect(data_, &DatasetPanel::shippedChosen, this, [this](const ShippedDataset& s) {
    form_->useShipped(s.tokenizer, s.max_len);
    run_->setProbe(s.probe);
  });
  connect(data_, &DatasetPanel::loadRequested, this, &TrainView::loadDataset);
  connect(data_, &DatasetPanel::lmPresetChosen, this, [this](const LmPreset& p) { chooseLmPreset(p.name); });
  connect(data_, &DatasetPanel::textChosen, this, [this](const QString& path) { loadLmText(path); });
  connect(form_, &ModelForm::textOptionsChanged, this, [this] { estimateTextEpochs(); });
  connect(data_, &DatasetPanel::shippedTextChosen, this,
          [this](const ShippedText& row, const QString& path) { loadLmText(path, &row); });
  connect(run_, &RunPanel::trainClicked, this, &TrainView::startTraining);
  connect(run_, &RunPanel::pauseToggled, this, &TrainView::setPaused);
  connect(run_, &RunPanel::stopClicked, this, &TrainView::stopTraining);
  connect(run_, &RunPanel::saveClicked, this, [this] {
    // A save dialog, so the folder can be a new name (a model is a folder: save_model creates it,
    // or replaces an existing one whole after the dialog's confirmation).
    const QString dir = QFileDialog::getSaveFileName(this, "Save the model as a folder", "model");
    if (!dir.isEmpty()) saveModel(dir);
  });
  connect(run_, &RunPanel::exploreClicked, this, [this] {
    // what it was trained on: the preset or the file still chosen (choosing other data drops trained_)
    const LmPreset* p = data_->lmPreset();
    const bool text = data_->hasText();
    if (trained_)
      emit openInExplore(trained_,
                         "trained on " + (p      ? QString("the %1 task").arg(p->task.name.c_str())
                                          : text ? QFileInfo(data_->textPath()).fileName()
                                                 : QFileInfo(data_->path()).fileName()),
                         p || text ? lm_probe_shown_ : QString());
  });
  connect(run_, &RunPanel::probeChanged, this,
          [this](const QString& t) { controller_->setProbeText(t.toStdString()); });
  controller_->setProbeText(run_->probe().toStdString());
  connect(controller_, &TrainController::stepped, run_, &RunPanel::onStep);
  connect(controller_, &TrainController::snapshotTaken, run_, &RunPanel::onSnapshot);
  connect(controller_, &TrainController::epochDone, this, [this](const EpochReport& r) {
    run_->onEpoch(r);
    emit status(QString("epoch %1: train loss %2, validation loss %3, validation accuracy %4")
                    .arg(r.epoch)
                    .arg(r.train_loss, 0, 'f', 4)
                    .arg(r.val_loss, 0, 'f', 4)
                    .arg(r.val_acc, 0, 'f', 4));
  });
  connect(controller_, &TrainController::finished, this, &TrainView::onFinished);
  // The settings column is as wide as its widest row (no horizontal scroll bar); it scrolls
  // vertically on a short screen.
  left_scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  left_scroll->setMinimumWidth(left->minimumSizeHint().width() + left_scroll->verticalScrollBar()->sizeHint().width() +
                               4);
}

// Closing while training stops it cleanly: the controller stops the run and waits for it.
TrainView::~TrainView() = default;

void TrainView::setDataDir(const QString& dir) {
  data_->setDataDir(dir);
  loadDataset(data_->shippedPath(0));
}

void TrainView::fail(const QString& message) {
  run_->fail(message);
  emit status(message);
}

namespace {

// The probe as the text Explore is given (the word tokenizer reads it back as the same ids): the
// names a new model for the task gives its ids (w0, w1, ...; modadd's numbers and "=").
QString probe_words(const LmTask& task, const std::vector<int>& ids) {
  const Vocab names = lm_task_vocabulary(task);
  QStringList words;
  for (int id : ids) words << QString::fromStdString(names.token(id));
  return words.join(' ');
}

RunPanel::Charts charts_for(const LmTask& task) {
  const LmTaskKind& kind = lm_task_kind(task.name);
  return kind.accuracy_curves ? RunPanel::Charts::Grokking
         : kind.probe_repeats ? RunPanel::Charts::Induction
                              : RunPanel::Charts::Task;
}

}  // namespace

bool TrainView::loadDataset(const QString& path) {
  if (isTraining()) {
    fail("Stop the training run before choosing another dataset.");
    return false;
  }
  if (path != data_->path()) {  // nothing of an earlier dataset's run stays on screen
    run_->reset();
    trained_.reset();
  }
  form_->useClassifier();
  controller_->setProbeIds({}, 0);
  // back from a preset: the sentence again, unless the shipped dataset chosen gave its own
  if ((data_->lmPreset() || data_->hasText()) && run_->probe() == lm_probe_shown_) run_->setProbe(sentence_probe_);
  run_->showCharts(RunPanel::Charts::Classifier);
  const QString problem = data_->load(path);
  if (!problem.isEmpty()) {
    fail(problem);
    return false;
  }
  run_->clearMessage();
  return true;
}

bool TrainView::chooseLmPreset(const QString& name) {
  if (isTraining()) {
    fail("Stop the training run before choosing another dataset.");
    return false;
  }
  const LmPreset* p = nullptr;
  try {
    p = &lm_preset(name.toStdString());
  } catch (const Error& e) {
    fail(QString::fromStdString(e.what()));
    return false;
  }
  const bool was_preset = data_->lmPreset() != nullptr || data_->hasText();
  run_->reset();
  trained_.reset();
  data_->useLmPreset(*p);
  form_->useLmPreset(*p);
  run_->clearMessage();
  run_->showCharts(charts_for(p->task));
  if (!was_preset) sentence_probe_ = run_->probe();  // given back when a dataset is chosen again
  lm_probe_shown_ = probe_words(p->task, lm_task_probe(p->task, form_->seed()));
  run_->setProbe(lm_probe_shown_);
  return true;
}

bool TrainView::loadLmText(const QString& path, const ShippedText* row) {
  if (isTraining()) {
    fail("Stop the training run before choosing another dataset.");
    return false;
  }
  const bool was_lm = data_->lmPreset() != nullptr || data_->hasText();
  const QString problem = data_->useText(path, row ? row->opening : nullptr);
  if (!problem.isEmpty()) {
    fail(problem);
    return false;
  }
  run_->reset();
  trained_.reset();
  form_->useTextLm(row);
  run_->clearMessage();
  run_->showCharts(RunPanel::Charts::Task);
  if (!was_lm) sentence_probe_ = run_->probe();
  lm_probe_shown_.clear();  // a held-out piece, once the run has cut the text
  run_->setProbe(lm_probe_shown_);
  text_row_ = row;
  estimateTextEpochs();
  return true;
}

bool TrainView::setTextTokenizer(const QString& name) {
  return data_->hasText() && form_->setTextTokenizer(name);
}

// Epochs for ~600 steps at the form's settings (a short text's epoch is a few steps; a model of
// characters needs hundreds to spell), at most 200; a shipped text's are its row's. The form
// keeps them editable, and a change of tokenizer or length estimates them again.
void TrainView::estimateTextEpochs() {
  if (!data_->hasText() || isTraining()) return;
  const QString name = QFileInfo(data_->textPath()).fileName();
  try {
    const TextLmOptions o = form_->textOptions();
    const TextLm made = new_text_language_model(data_->text(), o, form_->lmShape(), form_->seed());
    const int batch = form_->trainConfig().batch;
    const int per_epoch = static_cast<int>((made.data.train.size() + static_cast<size_t>(batch) - 1) / batch);
    const int epochs = text_row_ && o.tokenizer == text_row_->text.tokenizer && o.seq == text_row_->text.seq
                           ? text_row_->epochs
                           : std::clamp((600 + per_epoch - 1) / per_epoch, 1, 200);
    form_->setEpochs(epochs);
    run_->clearMessage();
    emit status(QString("%1: %2 training and %3 held-out sequences of %4 tokens (%5 tokenizer, %6 in its "
                        "vocabulary); %7 epochs make %8 steps")
                    .arg(name)
                    .arg(made.data.train.size())
                    .arg(made.data.val.size())
                    .arg(o.seq)
                    .arg(to_string(o.tokenizer))
                    .arg(made.model.config.vocab_size)
                    .arg(epochs)
                    .arg(epochs * per_epoch));
  } catch (const Error& e) {  // too short for the length: said now, and again at Train
    fail(name + ": " + QString::fromStdString(e.what()));
  }
}

CurveView* TrainView::scoresCurve() const {
  return run_->scoresCurve();
}
int TrainView::phaseChangeStep() const {
  return run_->phaseChangeStep();
}
QString TrainView::probeText() const {
  return run_->probe();
}
int TrainView::memorisedStep() const {
  return run_->memorisedStep();
}
int TrainView::generalisedStep() const {
  return run_->generalisedStep();
}

void TrainView::applyPreset(const QString& name) {
  form_->applyPreset(name);
}
void TrainView::setBaseModel(std::shared_ptr<const Model> model, const QString& name) {
  form_->setBaseModel(std::move(model), name);
}
void TrainView::setFineTune(bool on, bool freeze) {
  form_->setFineTune(on, freeze);
}
void TrainView::setEpochs(int epochs) {
  form_->setEpochs(epochs);
}
QString TrainView::datasetChoiceText() const {
  return data_->choiceText();
}
QString TrainView::progressText() const {
  return run_->progressText();
}
QString TrainView::message() const {
  return run_->message();
}
CurveView* TrainView::lossCurve() const {
  return run_->lossCurve();
}
CurveView* TrainView::accuracyCurve() const {
  return run_->accuracyCurve();
}
int TrainView::snapshotCount() const {
  return run_->snapshotCount();
}
QPushButton* TrainView::trainButton() const {
  return run_->trainButton();
}
QTableWidget* TrainView::confusionTable() const {
  return run_->confusionTable();
}
QLabel* TrainView::messageLabel() const {
  return run_->messageLabel();
}

bool TrainView::startTraining() {
  if (isTraining()) return false;
  if (!data_->ready()) {
    fail("Load a dataset without problems first (the list under the preview says what is wrong).");
    return false;
  }
  TrainJob job;
  if (const LmPreset* p = data_->lmPreset()) {
    try {
      job.model = std::make_shared<Model>(new_language_model(form_->lmShape(), form_->seed()));
      job.model->source = "trained in attnlab";
      job.model->vocab = lm_task_vocabulary(p->task);
      LmData data = make_lm_data(p->task, p->sequences, form_->seed());  // as attnlab-cli train --preset
      job.train = std::move(data.train);
      job.val = std::move(data.val);
      job.config = form_->trainConfig();
    } catch (const Error& e) {
      fail(QString::fromStdString(e.what()));
      return false;
    }
    const std::vector<int> probe = lm_task_probe(p->task, form_->seed());
    lm_probe_shown_ = probe_words(p->task, probe);  // the seed may have changed since the preset was chosen
    run_->setProbe(lm_probe_shown_);
    controller_->setProbeIds(probe,
                             lm_task_kind(p->task.name).probe_repeats ? p->task.seq : 0);  // 0: no detector scores
  } else if (data_->hasText()) {
    try {
      TextLm made = new_text_language_model(data_->text(), form_->textOptions(), form_->lmShape(), form_->seed());
      job.model = std::make_shared<Model>(std::move(made.model));
      job.model->source = "trained in attnlab";
      job.train = std::move(made.data.train);
      job.val = std::move(made.data.val);
      job.config = form_->trainConfig();
    } catch (const Error& e) {
      fail(QFileInfo(data_->textPath()).fileName() + ": " + QString::fromStdString(e.what()));
      return false;
    }
    // The probe: the first held-out sequence's opening (at most 48 tokens, the live heads' size),
    // without white space at its ends, so Explore reads its text back as the same tokens.
    // A learned BPE reads " mind" and "mind" as different tokens, so the trimmed text is read again:
    // the probe is what Explore's tokenizer makes of the text shown.
    std::vector<int> probe = job.val.seqs.front();
    probe.resize(std::min<size_t>(probe.size(), 48));
    lm_probe_shown_ = QString::fromStdString(continuation_text(*job.model, {}, probe)).trimmed();
    try {
      InputOptions keep;
      keep.overflow = Overflow::Keep;
      std::vector<int> read = prepare_text(*job.model, lm_probe_shown_.toStdString(), keep).ids;
      if (read.size() >= 2 && read.size() <= 48) probe = std::move(read);
    } catch (const Error&) {  // the piece as cut: its ids stand
    }
    run_->setProbe(lm_probe_shown_);
    controller_->setProbeIds(probe, 0);
  } else {
    controller_->setProbeIds({}, 0);
  }
  if (!job.model) try {
      std::vector<Example> tr, va;
      split_dataset(data_->dataset().rows, data_->validationSplit(), form_->seed(), tr, va);
      const bool tune = form_->fineTune();
      TrainingSetup setup = tune ? fine_tune_setup(*form_->baseModel(), tr, va, form_->seed())
                                 : new_classifier(tr, va, form_->modelConfig(), form_->seed());
      if (!tune) setup.model.source = "trained in attnlab";
      job.model = std::make_shared<Model>(std::move(setup.model));
      job.train = std::move(setup.train);
      job.val = std::move(setup.val);
      job.config = form_->trainConfig();
    } catch (const Error& e) {
      fail(QString::fromStdString(e.what()));
      return false;
    }
  trained_.reset();
  const int batch = job.config.batch;
  const LmPreset* preset = data_->lmPreset();
  run_->begin(job.model->config, job.config.epochs * static_cast<int>((job.train.size() + batch - 1) / batch),
              preset             ? charts_for(preset->task)
              : data_->hasText() ? RunPanel::Charts::Task
                                 : RunPanel::Charts::Classifier);
  emit status("training started");
  controller_->start(std::move(job));
  return true;
}

void TrainView::setPaused(bool paused) {
  controller_->setPaused(paused);
  run_->setPaused(paused);
  emit status(paused ? "training paused" : "training resumed");
}

void TrainView::stopTraining() {
  controller_->stop();
  emit status("stopping training...");
}

void TrainView::waitForFinish() {
  controller_->waitForFinish();
}

void TrainView::onFinished(const TrainOutcome& outcome) {
  trained_ = outcome.model;
  run_->finish(outcome);
  if (!outcome.result.message.empty()) emit status(QString::fromStdString(outcome.result.message));
  const TrainResult& r = outcome.result;
  emit status(r.cancelled ? "training stopped" : r.diverged ? "training diverged" : "training finished");
}

bool TrainView::saveModel(const QString& dir) {
  if (!trained_) return false;
  QString kind;
  try {
    // A language model made here is saved as transformers saves its class where it has one (every
    // preset's does), so transformers and TransformerLens open it as well; else attnlab's own folder.
    std::optional<Model> hf;
    if (trained_->config.lm_head && !trained_->is_hf()) try {
        hf = as_hf_language_model(*trained_);
        kind = QString(" as a Hugging Face %1 folder (transformers opens it)").arg(hf->hf.architecture.c_str());
      } catch (const Error& e) {
        kind = QString(" as an attnlab folder (%1)").arg(QString::fromStdString(e.what()));
      }
    save_model(hf ? *hf : *trained_, dir.toStdString());
  } catch (const Error& e) {
    fail(QString::fromStdString(e.what()));
    return false;
  }
  emit status("saved the model to " + dir + kind);
  return true;
}

void TrainView::dragEnterEvent(QDragEnterEvent* e) {
  if (e->mimeData()->hasUrls()) e->acceptProposedAction();
}

void TrainView::dropEvent(QDropEvent* e) {
  const auto urls = e->mimeData()->urls();
  if (!urls.isEmpty()) loadDataset(urls.first().toLocalFile());
}

}  // namespace attnlab
