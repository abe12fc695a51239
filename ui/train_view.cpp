// TrainView implementation.
#include "ui/train_view.h"

#include "engine/ops.h"

#include <QCheckBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QDoubleSpinBox>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMimeData>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSignalBlocker>
#include <QSlider>
#include <QSpinBox>
#include <QSplitter>
#include <QTableView>
#include <QTableWidget>
#include <QThread>
#include <QVBoxLayout>
#include <cmath>
#include <map>

#include "engine/input.h"
#include "engine/train_model.h"
#include "ui/curve_view.h"
#include "ui/dataset_model.h"
#include "ui/heatmap_data.h"
#include "ui/heatmap_view.h"

namespace attnlab {

namespace {

QSpinBox* spin(int lo, int hi, int value, QWidget* parent) {
  auto* s = new QSpinBox(parent);
  s->setRange(lo, hi);
  s->setValue(value);
  return s;
}

QDoubleSpinBox* dspin(double lo, double hi, double value, int decimals, double step, QWidget* parent) {
  auto* s = new QDoubleSpinBox(parent);
  s->setDecimals(decimals);
  s->setRange(lo, hi);
  s->setSingleStep(step);
  s->setValue(value);
  return s;
}

QComboBox* combo(const QStringList& items, const QString& value, QWidget* parent) {
  auto* c = new QComboBox(parent);
  c->addItems(items);
  c->setCurrentText(value);
  return c;
}

// Shipped datasets: file name, label, tokenizer, max_len, probe sentence.
struct Shipped {
  const char* file;
  const char* label;
  const char* tokenizer;
  int max_len;
  const char* probe;
};
const Shipped kShipped[] = {
    {"negation.tsv", "negation sentiment (word level)", "word", 32, "the film was not very good"},
    {"first-names.tsv", "first names: female / male (character level)", "char", 16, "christina"},
    {"first-last.tsv", "first letter = last letter? (character level)", "char", 16, "abcdefa"},
};

}  // namespace

TrainView::TrainView(QWidget* parent) : QWidget(parent), controller_(new TrainController(this)) {
  setAcceptDrops(true);
  auto* root = new QHBoxLayout(this);
  auto* split = new QSplitter(Qt::Horizontal, this);
  split->setObjectName("trainSplitter");
  root->addWidget(split);

  // ---------- left column: data and settings
  auto* left_scroll = new QScrollArea(split);
  left_scroll->setWidgetResizable(true);
  auto* left = new QWidget;
  left_scroll->setWidget(left);
  auto* lv = new QVBoxLayout(left);

  auto* data_box = new QGroupBox("Data", left);
  auto* dv = new QVBoxLayout(data_box);
  data_choice_ = new QComboBox(data_box);
  for (const Shipped& s : kShipped) data_choice_->addItem(s.label, s.file);
  data_choice_->addItem("Open a TSV / CSV file...", QString());
  dv->addWidget(data_choice_);
  auto* cols = new QHBoxLayout;
  text_col_ = new QComboBox(data_box);
  label_col_ = new QComboBox(data_box);
  cols->addWidget(new QLabel("text column", data_box));
  cols->addWidget(text_col_, 1);
  cols->addWidget(new QLabel("label column", data_box));
  cols->addWidget(label_col_, 1);
  dv->addLayout(cols);
  data_summary_ = new QLabel(data_box);
  data_summary_->setWordWrap(true);
  dv->addWidget(data_summary_);
  preview_model_ = new DatasetTableModel(this);
  preview_ = new QTableView(data_box);
  preview_->setModel(preview_model_);
  preview_->horizontalHeader()->setStretchLastSection(false);
  preview_->horizontalHeader()->setSectionResizeMode(1, QHeaderView::Stretch);
  preview_->verticalHeader()->setVisible(false);
  preview_->setMinimumHeight(130);
  dv->addWidget(preview_);
  issues_ = new QListWidget(data_box);
  issues_->setMaximumHeight(80);
  issues_->setStyleSheet("color: #a00;");
  issues_->hide();
  dv->addWidget(issues_);
  auto* vs = new QHBoxLayout;
  val_split_ = dspin(0.05, 0.5, 0.1, 2, 0.05, data_box);
  vs->addWidget(new QLabel("validation split", data_box));
  vs->addWidget(val_split_);
  vs->addStretch();
  dv->addLayout(vs);
  lv->addWidget(data_box);

  auto* model_box = new QGroupBox("Model and optimiser", left);
  auto* mf = new QFormLayout(model_box);
  start_from_ = new QComboBox(model_box);
  start_from_->setObjectName("startFrom");
  start_from_->addItem("a new model (the form below)");
  start_from_->setToolTip(
      "Train a new model from the form, or fine-tune the model open in Explore: its encoder "
      "and tokenizer, a new classifier on the pooled output");
  mf->addRow("start from", start_from_);
  freeze_ = new QCheckBox("freeze the encoder (train the classifier only)", model_box);
  freeze_->setObjectName("freezeEncoder");
  freeze_->setEnabled(false);
  freeze_->setToolTip("Fine-tuning: keep the pretrained encoder's weights and train only the pooler and classifier");
  mf->addRow(freeze_);
  preset_ = combo({"default", "tiny (fast)", "article model (d=128, 8 heads)"}, "default", model_box);
  mf->addRow("preset", preset_);
  layers_ = spin(1, 12, 2, model_box);
  heads_ = spin(1, 16, 8, model_box);
  dim_ = spin(8, 512, 64, model_box);
  dim_->setSingleStep(8);
  ff_ = spin(0, 2048, 128, model_box);
  max_len_ = spin(4, 2048, 32, model_box);
  positional_ = combo({"none", "sinusoidal", "learned", "relative"}, "learned", model_box);
  norm_ = combo({"post", "pre"}, "post", model_box);
  activation_ = combo({"relu", "gelu"}, "relu", model_box);
  tokenizer_ = combo({"word", "char"}, "word", model_box);
  pooling_ = combo({"masked_mean", "mean", "cls"}, "masked_mean", model_box);
  dropout_ = dspin(0, 0.9, 0.1, 2, 0.05, model_box);
  lr_ = dspin(1e-5, 1, 1e-3, 5, 1e-4, model_box);
  batch_ = spin(1, 1024, 32, model_box);
  epochs_ = spin(1, 1000, 8, model_box);
  weight_decay_ = dspin(0, 1, 0, 4, 0.01, model_box);
  clip_ = dspin(0, 100, 1, 2, 0.5, model_box);
  seed_ = spin(0, 1 << 30, 1, model_box);
  precision_ = combo({"fp32", "bf16"}, "fp32", model_box);
  precision_->setObjectName("trainPrecision");
  // What each setting means, where a student looks for it (article 000's TextClassifier).
  const std::pair<QWidget*, const char*> tips[] = {
      {val_split_, "Share of the rows held out for validation when the data has no separate validation file"},
      {preset_, "Fill the form: the default model, a tiny fast one, or the article's (d=128, 8 heads)"},
      {layers_, "Transformer layers (encoder blocks)"},
      {heads_, "Attention heads per layer; the dimension must be divisible by it"},
      {dim_, "Model dimension d (embedding and hidden size)"},
      {ff_, "Feed-forward hidden size (0: attention only)"},
      {max_len_, "Longest input in tokens; longer rows are truncated"},
      {positional_,
       "Position information: none, sinusoidal (Vaswani et al.), learned table, or relative (Shaw et al.)"},
      {norm_, "LayerNorm after each residual (post, the articles') or before each sub-layer (pre)"},
      {activation_, "Feed-forward activation"},
      {tokenizer_, "Split text into words or characters (a new vocabulary is built from the data)"},
      {pooling_,
       "How token states become one vector for the classifier: mean over real tokens, mean over all, or [CLS]"},
      {dropout_, "Dropout on attention probabilities and residual branches while training"},
      {lr_, "AdamW learning rate"},
      {batch_, "Rows per optimisation step"},
      {epochs_, "Passes over the training rows"},
      {weight_decay_, "AdamW weight decay (decoupled)"},
      {clip_, "Gradient-norm clipping (0: off)"},
      {seed_, "Random seed: the same seed, data and thread count give the same run"},
      {precision_,
       "Matrix products in fp32, or in bf16 with fp32 accumulation and fp32 master weights (mixed "
       "precision on the CPU; needs oneDNN, fast with AVX512-BF16 or AMX)"},
      {data_choice_, "A dataset shipped with attnlab, or your own TSV / CSV file (text and label columns)"},
      {text_col_, "The column that holds the text"},
      {label_col_, "The column that holds the label"}};
  for (const auto& [w, tip] : tips) w->setToolTip(tip);
  mf->addRow("layers", layers_);
  mf->addRow("heads", heads_);
  mf->addRow("embedding size", dim_);
  mf->addRow("feed-forward size (0: none)", ff_);
  mf->addRow("max length", max_len_);
  mf->addRow("positions", positional_);
  mf->addRow("norm", norm_);
  mf->addRow("activation", activation_);
  mf->addRow("tokenizer", tokenizer_);
  mf->addRow("pooling", pooling_);
  mf->addRow("dropout", dropout_);
  mf->addRow("learning rate", lr_);
  mf->addRow("batch size", batch_);
  mf->addRow("epochs", epochs_);
  mf->addRow("weight decay (AdamW)", weight_decay_);
  mf->addRow("gradient clipping (0: off)", clip_);
  mf->addRow("seed", seed_);
  mf->addRow("precision", precision_);
  if (!bf16_available()) {
    precision_->setEnabled(false);
    precision_->setToolTip(QString::fromStdString(bf16_notice()));
  } else if (const std::string slow = bf16_notice(); !slow.empty()) {
    // bf16 is there but this CPU measured it slower than fp32 (or emulates it): said on the choice
    precision_->setItemData(1, QString::fromStdString(slow), Qt::ToolTipRole);
    precision_->setItemText(1, "bf16 (slower here)");
  }
  lv->addWidget(model_box);
  lv->addStretch();

  // ---------- right column: run, curves, heads, results
  // The right column scrolls too, so the window fits a 1280x720 screen.
  auto* right_scroll = new QScrollArea(split);
  right_scroll->setWidgetResizable(true);
  right_scroll->setFrameShape(QFrame::NoFrame);
  auto* right = new QWidget;
  right_scroll->setWidget(right);
  auto* rv = new QVBoxLayout(right);
  auto* buttons = new QHBoxLayout;
  train_ = new QPushButton("Train", right);
  pause_ = new QPushButton("Pause", right);
  pause_->setCheckable(true);
  stop_ = new QPushButton("Stop", right);
  save_ = new QPushButton("Save model...", right);
  explore_ = new QPushButton("Open in Explore", right);
  train_->setToolTip("Start training with the settings on the left (Ctrl+Return)");
  pause_->setToolTip("Pause or resume after the current step");
  stop_->setToolTip("Stop after the current step; the model trained so far is kept");
  save_->setToolTip("Save the trained model as a folder Explore and attnlab-cli open");
  explore_->setToolTip("Open the trained model in the Explore tab");
  for (QPushButton* b : {train_, pause_, stop_, save_, explore_}) buttons->addWidget(b);
  buttons->addStretch();
  rv->addLayout(buttons);
  progress_ = new QProgressBar(right);
  progress_label_ = new QLabel(right);
  message_ = new QLabel(right);
  message_->setWordWrap(true);
  message_->setStyleSheet("color: #a00;");
  rv->addWidget(progress_);
  rv->addWidget(progress_label_);
  rv->addWidget(message_);
  auto* curves = new QHBoxLayout;
  loss_ = new CurveView("step", right);
  loss_->addSeries("train loss", QColor(160, 190, 230));
  loss_->addSeries("train loss (smoothed)", QColor(31, 119, 180));
  loss_->addSeries("validation loss", QColor(214, 39, 40), false, true);
  loss_->setAxisLabels("loss");
  acc_ = new CurveView("epoch", right);
  acc_->addSeries("validation accuracy", QColor(44, 160, 44), false, true);
  acc_->setAxisLabels("accuracy");
  acc_->setYRange(0.0, 1.0);  // accuracy is a fraction: a fixed axis, never -2..4 or a zoomed 0.806..0.864
  acc_->setIntegerX(1);       // epochs, from 1
  curves->addWidget(loss_, 3);
  curves->addWidget(acc_, 2);
  rv->addLayout(curves, 2);
  auto* cexp = new QHBoxLayout;
  auto* export_curves = new QPushButton("Export curves...", right);
  export_curves->setToolTip("Save the loss and accuracy curves as PNG, SVG, PDF or CSV");
  cexp->addWidget(export_curves);
  cexp->addStretch();
  rv->addLayout(cexp);

  auto* heads_box = new QGroupBox("Live heads", right);
  auto* hv = new QVBoxLayout(heads_box);
  auto* hbar = new QHBoxLayout;
  probe_ = new QLineEdit(kShipped[0].probe, heads_box);
  probe_layer_ = spin(0, 0, 0, heads_box);
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

  confusion_ = new QTableWidget(right);
  confusion_->setMaximumHeight(100);
  confusion_->setToolTip("Confusion matrix on the validation rows: true label (rows) x predicted (columns)");
  rv->addWidget(confusion_);
  split->addWidget(left_scroll);
  split->addWidget(right_scroll);
  split->setStretchFactor(1, 1);

  // activated, not currentIndexChanged: choosing "Open a TSV / CSV file..." again opens the
  // dialog again.
  connect(data_choice_, &QComboBox::activated, this, [this](int i) {
    const QString file = data_choice_->itemData(i).toString();
    if (file.isEmpty()) {  // "Open a TSV / CSV file..."
      const QString f =
          QFileDialog::getOpenFileName(this, "Open dataset", {}, "Datasets (*.tsv *.csv *.txt);;All files (*)");
      if (!f.isEmpty())
        loadDataset(f);
      else
        showDatasetChoice();  // cancelled: back to what is loaded
      return;
    }
    if (i >= static_cast<int>(std::size(kShipped))) {  // a file opened earlier
      loadDataset(file);
      return;
    }
    const Shipped& s = kShipped[i];
    tokenizer_->setCurrentText(s.tokenizer);
    max_len_->setValue(s.max_len);
    probe_->setText(s.probe);
    loadDataset(QDir(data_dir_).filePath(file));
  });
  auto reload = [this] {
    if (!dataset_path_.isEmpty()) loadDataset(dataset_path_);
  };
  connect(text_col_, &QComboBox::activated, this, reload);
  connect(label_col_, &QComboBox::activated, this, reload);
  connect(preset_, &QComboBox::currentTextChanged, this, &TrainView::applyPreset);
  connect(start_from_, &QComboBox::currentIndexChanged, this, [this] { updateStartFrom(); });
  connect(freeze_, &QCheckBox::toggled, this, [this](bool on) {
    if (start_from_->currentIndex() == 1) lr_->setValue(on ? 1e-3 : 5e-5);
  });
  connect(train_, &QPushButton::clicked, this, &TrainView::startTraining);
  connect(pause_, &QPushButton::toggled, this, &TrainView::setPaused);
  connect(stop_, &QPushButton::clicked, this, &TrainView::stopTraining);
  connect(save_, &QPushButton::clicked, this, [this] {
    // A save dialog, so the folder can be a new name (a model is a folder: save_model creates it,
    // or replaces an existing one whole after the dialog's confirmation).
    const QString dir = QFileDialog::getSaveFileName(this, "Save the model as a folder", "model");
    if (!dir.isEmpty()) saveModel(dir);
  });
  connect(explore_, &QPushButton::clicked, this, [this] {
    if (trained_) emit openInExplore(trained_, "trained on " + QFileInfo(dataset_path_).fileName());
  });
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
  connect(probe_, &QLineEdit::textChanged, this,
          [this](const QString& t) { controller_->setProbeText(t.toStdString()); });
  controller_->setProbeText(probe_->text().toStdString());
  connect(controller_, &TrainController::stepped, this, &TrainView::onStep);
  connect(controller_, &TrainController::epochDone, this, &TrainView::onEpoch);
  connect(controller_, &TrainController::snapshotTaken, this, &TrainView::onSnapshot);
  connect(controller_, &TrainController::finished, this, &TrainView::onFinished);
  connect(timeline_, &QSlider::valueChanged, this, &TrainView::showSnapshot);
  connect(probe_layer_, &QSpinBox::valueChanged, this, [this] { showSnapshot(timeline_->value()); });
  setRunning(false);
  save_->setEnabled(false);
  explore_->setEnabled(false);
  // The settings column is as wide as its widest row (no horizontal scroll bar); it scrolls
  // vertically on a short screen.
  left_scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  left_scroll->setMinimumWidth(left->minimumSizeHint().width() + left_scroll->verticalScrollBar()->sizeHint().width() +
                               4);
}

// Closing while training stops it cleanly: the controller stops the run and waits for it.
TrainView::~TrainView() = default;

void TrainView::setDataDir(const QString& dir) {
  data_dir_ = dir;
  loadDataset(QDir(dir).filePath(kShipped[0].file));
}

void TrainView::fail(const QString& message) {
  message_->setStyleSheet("color: #a00;");  // errors in red, whatever the last message was
  message_->setText(message);
  emit status(message);
}

// Everything a run shows (curves, live heads, timeline, confusion matrix, progress, message):
// cleared when a run starts and when another dataset is chosen, so nothing of an earlier run or
// dataset stays on screen.
void TrainView::resetRunViews() {
  loss_->clear();
  acc_->clear();
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
  trained_.reset();
  save_->setEnabled(false);
  explore_->setEnabled(false);
}

QString TrainView::datasetChoiceText() const {
  return data_choice_->currentText();
}

QString TrainView::progressText() const {
  return progress_label_->text();
}

QString TrainView::message() const {
  return message_->text();
}

bool TrainView::loadDataset(const QString& path) {
  if (isTraining()) {
    fail("Stop the training run before choosing another dataset.");
    return false;
  }
  if (path != dataset_path_) resetRunViews();
  DatasetOptions opt;
  opt.strict = false;
  if (path == dataset_path_) {
    opt.text_column = text_col_->currentIndex() >= 0 ? std::to_string(text_col_->currentIndex() + 1) : "";
    opt.label_column = label_col_->currentIndex() >= 0 ? std::to_string(label_col_->currentIndex() + 1) : "";
  }
  issues_->clear();
  try {
    dataset_ = load_dataset(path.toStdString(), opt);
  } catch (const Error& e) {
    dataset_ = {};
    dataset_path_.clear();
    preview_model_->setRows({});
    data_summary_->setText("");
    issues_->addItem(QString::fromStdString(e.what()));
    issues_->show();
    fail("The dataset could not be read: " + QString::fromStdString(e.what()));
    return false;
  }
  dataset_path_ = path;
  showDatasetChoice();
  for (QComboBox* c : {text_col_, label_col_}) {
    c->blockSignals(true);
    c->clear();
    for (const auto& name : dataset_.columns) c->addItem(QString::fromStdString(name));
    c->blockSignals(false);
  }
  text_col_->setCurrentIndex(dataset_.text_column);
  label_col_->setCurrentIndex(dataset_.label_column);
  preview_model_->setRows(
      std::vector<Example>(dataset_.rows.begin(), dataset_.rows.begin() + std::min<size_t>(dataset_.rows.size(), 500)));
  std::map<std::string, int> counts;
  for (const auto& r : dataset_.rows) ++counts[r.label];
  QStringList parts;
  for (const auto& [label, n] : counts) parts << QString("%1: %2").arg(QString::fromStdString(label)).arg(n);
  data_summary_->setText(QString("%1: %2 rows%3. Labels: %4")
                             .arg(QFileInfo(path).fileName())
                             .arg(dataset_.rows.size())
                             .arg(dataset_.has_header ? " (header row found)" : "")
                             .arg(parts.join(", ")));
  for (const auto& issue : dataset_.issues)
    issues_->addItem(QString("line %1: %2").arg(issue.line).arg(QString::fromStdString(issue.message)));
  issues_->setVisible(!dataset_.issues.empty());
  if (!dataset_.issues.empty()) {
    fail(QString("%1 row(s) have problems (listed under the preview); fix the file before training.")
             .arg(dataset_.issues.size()));
    return false;
  }
  message_->clear();
  return true;
}

// The dropdown names the dataset that is loaded: a shipped one, or the file opened (listed by
// its name, before the "Open..." entry, so it can be chosen again).
void TrainView::showDatasetChoice() {
  QSignalBlocker block(data_choice_);
  const int shipped = static_cast<int>(std::size(kShipped));
  for (int i = 0; i < shipped; ++i)
    if (QFileInfo(QDir(data_dir_).filePath(kShipped[i].file)) == QFileInfo(dataset_path_)) {
      data_choice_->setCurrentIndex(i);
      return;
    }
  if (dataset_path_.isEmpty()) return;
  const int open_item = data_choice_->count() - 1;
  if (open_item == shipped)  // no user file listed yet
    data_choice_->insertItem(shipped, QFileInfo(dataset_path_).fileName(), dataset_path_);
  else
    data_choice_->setItemText(shipped, QFileInfo(dataset_path_).fileName()),
        data_choice_->setItemData(shipped, dataset_path_);
  data_choice_->setItemData(shipped, dataset_path_, Qt::ToolTipRole);
  data_choice_->setCurrentIndex(shipped);
}

void TrainView::applyPreset(const QString& name) {
  if (name.startsWith("tiny")) {
    layers_->setValue(1), heads_->setValue(4), dim_->setValue(32), ff_->setValue(64), epochs_->setValue(5);
    lr_->setValue(3e-3), batch_->setValue(32), dropout_->setValue(0.0);
  } else if (name.startsWith("article")) {
    // Article 000's TextClassifier scale: d=128, 8 heads; two post-LN layers with a 512 FFN.
    layers_->setValue(2), heads_->setValue(8), dim_->setValue(128), ff_->setValue(512), epochs_->setValue(6);
    lr_->setValue(1e-3), batch_->setValue(32), dropout_->setValue(0.1);
  } else {
    layers_->setValue(2), heads_->setValue(8), dim_->setValue(64), ff_->setValue(128), epochs_->setValue(8);
    lr_->setValue(1e-3), batch_->setValue(32), dropout_->setValue(0.1);
  }
}

void TrainView::setBaseModel(std::shared_ptr<const Model> model, const QString& name) {
  base_ = std::move(model);
  base_name_ = name;
  const bool was = start_from_->currentIndex() == 1;
  QSignalBlocker block(start_from_);
  while (start_from_->count() > 1) start_from_->removeItem(1);
  if (base_) start_from_->addItem("fine-tune " + name + " (open in Explore)");
  start_from_->setCurrentIndex(was && base_ ? 1 : 0);
  updateStartFrom();
}

void TrainView::setFineTune(bool on, bool freeze) {
  start_from_->setCurrentIndex(on && start_from_->count() > 1 ? 1 : 0);
  freeze_->setChecked(freeze);
  updateStartFrom();
}

// Fine-tuning takes the architecture from the base model: its fields are not used and say so;
// the learning rate becomes a fine-tuning one (BERT's paper: 2e-5..5e-5; a head alone: 1e-3).
void TrainView::updateStartFrom() {
  const bool tune = start_from_->currentIndex() == 1;
  freeze_->setEnabled(tune);
  for (QWidget* w : std::initializer_list<QWidget*>{preset_, layers_, heads_, dim_, ff_, max_len_, positional_, norm_,
                                                    activation_, tokenizer_, pooling_})
    w->setEnabled(!tune);
  if (tune) {
    lr_->setValue(freeze_->isChecked() ? 1e-3 : 5e-5);
    epochs_->setValue(2);
  }
}

void TrainView::setEpochs(int epochs) {
  epochs_->setValue(epochs);
}

ModelConfig TrainView::configFromForm() const {
  ModelConfig c;
  c.num_layers = layers_->value();
  c.num_heads = heads_->value();
  c.embed_size = dim_->value();
  c.ff_dim = ff_->value();
  c.max_len = max_len_->value();
  c.positional = parse_positional(positional_->currentText().toStdString());
  c.norm = parse_norm(norm_->currentText().toStdString());
  c.activation = parse_activation(activation_->currentText().toStdString());
  c.tokenizer = parse_tokenizer(tokenizer_->currentText().toStdString());
  c.pooling = parse_pooling(pooling_->currentText().toStdString());
  c.add_cls = c.pooling == Pooling::Cls;  // a new model that pools on [CLS] gets a tokenizer that adds it
  return c;
}

void TrainView::setRunning(bool running) {
  train_->setEnabled(!running);
  pause_->setEnabled(running);
  stop_->setEnabled(running);
  if (!running) {
    pause_->blockSignals(true);
    pause_->setChecked(false);
    pause_->blockSignals(false);
  }
}

bool TrainView::startTraining() {
  if (isTraining()) return false;
  if (dataset_path_.isEmpty() || !dataset_.issues.empty() || dataset_.rows.empty()) {
    fail("Load a dataset without problems first (the list under the preview says what is wrong).");
    return false;
  }
  TrainJob job;
  try {
    std::vector<Example> tr, va;
    split_dataset(dataset_.rows, val_split_->value(), static_cast<uint64_t>(seed_->value()), tr, va);
    const bool tune = start_from_->currentIndex() == 1 && base_;
    TrainingSetup setup = tune ? fine_tune_setup(*base_, tr, va, static_cast<uint64_t>(seed_->value()))
                               : new_classifier(tr, va, configFromForm(), static_cast<uint64_t>(seed_->value()));
    if (!tune) setup.model.source = "trained in attnlab";
    job.model = std::make_shared<Model>(std::move(setup.model));
    job.train = std::move(setup.train);
    job.val = std::move(setup.val);
    TrainConfig& tc = job.config;
    tc.epochs = epochs_->value();
    tc.batch = batch_->value();
    tc.optimizer.lr = static_cast<float>(lr_->value());
    tc.optimizer.weight_decay = static_cast<float>(weight_decay_->value());
    tc.optimizer.clip_norm = static_cast<float>(clip_->value());
    tc.dropout = static_cast<float>(dropout_->value());
    tc.seed = static_cast<uint64_t>(seed_->value());
    tc.backend = precision_->currentIndex() == 1 ? "cpu-bf16" : "cpu";
    tc.freeze_encoder = tune && freeze_->isChecked();
  } catch (const Error& e) {
    fail(QString::fromStdString(e.what()));
    return false;
  }
  const Model& model = *job.model;
  resetRunViews();
  probe_layer_->setRange(0, model.config.num_layers - 1);
  for (int h = 0; h < model.config.num_heads; ++h) {
    auto* v = new HeatmapView(this);
    v->setMaxCells(64);
    v->setMinimumSize(120, 120);
    heads_grid_->addWidget(v, h / 4, h % 4);
    head_views_.push_back(v);
  }
  const int batch = job.config.batch;
  progress_->setRange(0, job.config.epochs * static_cast<int>((job.train.size() + batch - 1) / batch));
  setRunning(true);  // resetRunViews() cleared the progress, the trained model and its buttons
  start_ms_ = QDateTime::currentMSecsSinceEpoch();
  emit status("training started");
  controller_->start(std::move(job));
  return true;
}

void TrainView::onSnapshot(const Snapshot& s) {
  snapshots_.push_back(s);
  const bool at_end = timeline_->value() == timeline_->maximum();
  timeline_->setRange(0, static_cast<int>(snapshots_.size()) - 1);
  if (at_end) timeline_->setValue(timeline_->maximum());
  if (at_end || snapshots_.size() == 1) showSnapshot(timeline_->value());
}

void TrainView::setPaused(bool paused) {
  controller_->setPaused(paused);
  pause_->setText(paused ? "Resume" : "Pause");
  emit status(paused ? "training paused" : "training resumed");
}

void TrainView::stopTraining() {
  controller_->stop();
  emit status("stopping training...");
}

void TrainView::waitForFinish() {
  controller_->waitForFinish();
}

void TrainView::onStep(const TrainProgress& p) {
  loss_->append(0, p.step, p.loss);
  smoothed_ = smoothed_ < 0 ? p.loss : 0.95 * smoothed_ + 0.05 * p.loss;
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

void TrainView::onEpoch(const EpochReport& r) {
  const double step = static_cast<double>(progress_->value());
  loss_->append(2, step, r.val_loss);
  acc_->append(0, r.epoch, r.val_acc);
  emit status(QString("epoch %1: train loss %2, validation loss %3, validation accuracy %4")
                  .arg(r.epoch)
                  .arg(r.train_loss, 0, 'f', 4)
                  .arg(r.val_loss, 0, 'f', 4)
                  .arg(r.val_acc, 0, 'f', 4));
}

void TrainView::onFinished(const TrainOutcome& outcome) {
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
  trained_ = outcome.model;
  save_->setEnabled(true);
  explore_->setEnabled(true);
  if (!r.message.empty()) {
    fail(QString::fromStdString(r.message));
  } else {
    message_->setStyleSheet("color: #060;");
    message_->setText(
        QString("Done: validation accuracy %1 (weights of epoch %2).").arg(ev.accuracy, 0, 'f', 4).arg(r.best_epoch));
  }
  if (r.diverged) message_->setStyleSheet("color: #a00;");
  const int C = static_cast<int>(ev.confusion.size());
  confusion_->setRowCount(C);
  confusion_->setColumnCount(C + 1);
  QStringList actual, predicted;
  for (int k = 0; k < C; ++k) {
    actual << "actual " + QString::fromStdString(trained_->label(k));
    predicted << "predicted " + QString::fromStdString(trained_->label(k));
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
  emit status(r.cancelled ? "training stopped" : r.diverged ? "training diverged" : "training finished");
}

void TrainView::showSnapshot(int index) {
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

bool TrainView::saveModel(const QString& dir) {
  if (!trained_) return false;
  try {
    save_model(*trained_, dir.toStdString());
  } catch (const Error& e) {
    fail(QString::fromStdString(e.what()));
    return false;
  }
  emit status("saved the model to " + dir);
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
