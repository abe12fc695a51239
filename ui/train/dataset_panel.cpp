// DatasetPanel (see dataset_panel.h).
#include "ui/train/dataset_panel.h"

#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QListWidget>
#include <QSignalBlocker>
#include <QTableView>
#include <QVBoxLayout>
#include <algorithm>
#include <map>

#include "engine/core/io_util.h"
#include "engine/core/memory.h"
#include "engine/train/tasks.h"
#include "ui/dataset_model.h"

namespace attnlab {

DatasetPanel::DatasetPanel(QWidget* parent) : QGroupBox("Data", parent) {
  auto* dv = new QVBoxLayout(this);
  choice_ = new QComboBox(this);
  for (const ShippedDataset& s : shipped_datasets()) choice_->addItem(s.label, s.file);
  for (const LmPreset& p : lm_presets()) {
    choice_->addItem(p.label, QString("lm:") + p.name);
    choice_->setItemData(choice_->count() - 1, p.what, Qt::ToolTipRole);
  }
  for (size_t k = 0; k < shipped_texts().size(); ++k) {
    choice_->addItem(shipped_texts()[k].label, QString("shipped-text:%1").arg(k));
    choice_->setItemData(choice_->count() - 1, shipped_texts()[k].what, Qt::ToolTipRole);
  }
  choice_->addItem("Train a language model on a text file...", QString("text:"));
  choice_->setItemData(choice_->count() - 1,
                       "A new decoder learns to continue a text of your own (a .txt file, UTF-8): its characters or "
                       "words become the vocabulary",
                       Qt::ToolTipRole);
  choice_->addItem("Open a TSV / CSV file...", QString());
  choice_->setObjectName("dataChoice");
  choice_->setToolTip(
      "A dataset shipped with attnlab, a language-model preset, a text file to train a language model on, or your "
      "own TSV / CSV file (text and label columns)");
  dv->addWidget(choice_);
  columns_ = new QWidget(this);
  auto* cols = new QHBoxLayout(columns_);
  cols->setContentsMargins(0, 0, 0, 0);
  text_col_ = new QComboBox(this);
  label_col_ = new QComboBox(this);
  text_col_->setToolTip("The column that holds the text");
  label_col_->setToolTip("The column that holds the label");
  cols->addWidget(new QLabel("text column", this));
  cols->addWidget(text_col_, 1);
  cols->addWidget(new QLabel("label column", this));
  cols->addWidget(label_col_, 1);
  dv->addWidget(columns_);
  summary_ = new QLabel(this);
  summary_->setObjectName("dataSummary");
  summary_->setWordWrap(true);
  dv->addWidget(summary_);
  preview_model_ = new DatasetTableModel(this);
  preview_ = new QTableView(this);
  preview_->setModel(preview_model_);
  preview_->horizontalHeader()->setStretchLastSection(false);
  preview_->horizontalHeader()->setSectionResizeMode(1, QHeaderView::Stretch);
  preview_->verticalHeader()->setVisible(false);
  preview_->setMinimumHeight(130);
  dv->addWidget(preview_);
  issues_ = new QListWidget(this);
  issues_->setMaximumHeight(80);
  issues_->setStyleSheet("color: #a00;");
  issues_->hide();
  dv->addWidget(issues_);
  split_row_ = new QWidget(this);
  auto* vs = new QHBoxLayout(split_row_);
  vs->setContentsMargins(0, 0, 0, 0);
  val_split_ = new QDoubleSpinBox(this);
  val_split_->setDecimals(2);
  val_split_->setRange(0.05, 0.5);
  val_split_->setSingleStep(0.05);
  val_split_->setValue(0.1);
  val_split_->setToolTip("Share of the rows held out for validation when the data has no separate validation file");
  vs->addWidget(new QLabel("validation split", this));
  vs->addWidget(val_split_);
  vs->addStretch();
  dv->addWidget(split_row_);

  // activated, not currentIndexChanged: choosing "Open a TSV / CSV file..." again opens the
  // dialog again.
  connect(choice_, &QComboBox::activated, this, [this](int i) {
    const QString file = choice_->itemData(i).toString();
    if (file.isEmpty()) {  // "Open a TSV / CSV file..."
      const QString f =
          QFileDialog::getOpenFileName(this, "Open dataset", {}, "Datasets (*.tsv *.csv *.txt);;All files (*)");
      if (!f.isEmpty())
        emit loadRequested(f);
      else
        showChoice();  // cancelled: back to what is loaded
      return;
    }
    if (file == "text:") {  // "Train a language model on a text file..."
      const QString f = QFileDialog::getOpenFileName(this, "Open a text to train a language model on", {},
                                                     "Text (*.txt);;All files (*)");
      if (!f.isEmpty())
        emit textChosen(f);
      else
        showChoice();
      return;
    }
    if (file.startsWith("text:")) return emit textChosen(file.mid(5));  // a text opened earlier
    if (file.startsWith("shipped-text:")) {
      const ShippedText& row = shipped_texts().at(file.mid(13).toUInt());
      return emit shippedTextChosen(row, QDir(data_dir_).filePath(row.file));
    }
    if (file.startsWith("lm:")) return emit lmPresetChosen(lm_preset(file.mid(3).toStdString()));
    const auto& shipped = shipped_datasets();
    if (i >= static_cast<int>(shipped.size())) return emit loadRequested(file);  // a file opened earlier
    emit shippedChosen(shipped[static_cast<size_t>(i)]);
    emit loadRequested(shippedPath(i));
  });
  auto reload = [this] {
    if (!path_.isEmpty()) emit loadRequested(path_);
  };
  connect(text_col_, &QComboBox::activated, this, reload);
  connect(label_col_, &QComboBox::activated, this, reload);
}

void DatasetPanel::setDataDir(const QString& dir) {
  data_dir_ = dir;
}

QString DatasetPanel::shippedPath(int index) const {
  return QDir(data_dir_).filePath(shipped_datasets().at(static_cast<size_t>(index)).file);
}

double DatasetPanel::validationSplit() const {
  return val_split_->value();
}
QString DatasetPanel::choiceText() const {
  return choice_->currentText();
}

void DatasetPanel::showFileParts(bool on) {
  for (QWidget* w : {columns_, static_cast<QWidget*>(preview_), split_row_}) w->setVisible(on);
}

void DatasetPanel::clearFile() {
  lm_ = nullptr;
  text_.clear(), text_path_.clear();
  dataset_ = {};
  path_.clear();
  preview_model_->setRows({});
  issues_->clear();
  issues_->hide();
  showFileParts(false);
}

void DatasetPanel::useLmPreset(const LmPreset& p) {
  clearFile();
  lm_ = &p;
  summary_->setTextFormat(Qt::RichText);
  const LmData data = make_lm_data(p.task, p.sequences, p.seed);  // the split the run makes (a few ms)
  const QString sizes =
      lm_task_kind(p.task.name).fixed_set
          ? QString("Every sum once: %1 to train on (one batch: a step an epoch), %2 held out.")
                .arg(data.train.size())
                .arg(data.val.size())
          : QString("Generated with the seed: %1 sequences of %2%3 tokens (an epoch), and %4 more for validation.")
                .arg(data.train.size())
                .arg(std::all_of(data.train.seqs.begin(), data.train.seqs.end(),
                                 [&](const auto& s) { return s.size() == data.train.seqs[0].size(); })
                         ? ""
                         : "up to ")
                .arg(lm_task_length(p.task))
                .arg(data.val.size());
  summary_->setText(
      QString("<b>%1</b><br>%2<br>%3").arg(QString(p.label).toHtmlEscaped(), QString(p.what).toHtmlEscaped(), sizes));
  QSignalBlocker block(choice_);
  choice_->setCurrentIndex(choice_->findData(QString("lm:") + p.name));
}

QString DatasetPanel::useText(const QString& path, const char* opening) {
  std::string bytes;
  try {  // a text too large to train on in this memory is refused before it is read
    check_text_fits(static_cast<double>(QFileInfo(path).size()), available_bytes(),
                    QFileInfo(path).fileName().toStdString());
  } catch (const Error& e) {
    return QString::fromStdString(e.what());
  }
  try {
    bytes = read_file_bytes(path.toStdString());
  } catch (const Error& e) {
    return "The text could not be read: " + QString::fromStdString(e.what());
  }
  if (bytes.find_first_not_of(" \t\r\n") == std::string::npos)
    return QFileInfo(path).fileName() + " has no text to train on";
  clearFile();
  text_ = std::move(bytes);
  text_path_ = path;
  // Characters and lines counted in the bytes, and only the preview's bytes decoded: a text of
  // tens of MB is not copied into a QString to show 300 characters.
  const auto lead = [](char b) { return (static_cast<unsigned char>(b) & 0xC0) != 0x80; };
  const qsizetype chars = std::count_if(text_.begin(), text_.end(), lead);
  const qsizetype lines = std::count(text_.begin(), text_.end(), '\n') + (text_.back() == '\n' ? 0 : 1);
  size_t from = opening ? text_.find(opening) : std::string::npos;
  if (from == std::string::npos) from = 0;
  size_t to = std::min(text_.size(), from + 1200);     // 300 characters are at most 1,200 bytes
  while (to < text_.size() && !lead(text_[to])) --to;  // not inside a character
  const QString head = QString::fromUtf8(text_.data() + from, static_cast<qsizetype>(to - from));
  QString shown = (from > 0 ? "... " : "") + head.left(300).simplified();
  if (from + static_cast<size_t>(head.left(300).toUtf8().size()) < text_.size()) shown += " ...";
  summary_->setTextFormat(Qt::RichText);
  summary_->setText(QString("<b>%1</b>: %2 characters, %3 lines. A new language model learns to continue it: the "
                            "text is cut into sequences of the form's \"max length\" tokens, the last tenth held "
                            "out; the Explore tab opens the trained model on a held-out piece.<br><i>%4</i>")
                        .arg(QFileInfo(path).fileName().toHtmlEscaped())
                        .arg(chars)
                        .arg(lines)
                        .arg(shown.toHtmlEscaped()));
  showChoice();
  return {};
}

QString DatasetPanel::load(const QString& path) {
  lm_ = nullptr;
  text_.clear(), text_path_.clear();
  showFileParts(true);
  summary_->setTextFormat(Qt::PlainText);
  DatasetOptions opt;
  opt.strict = false;
  if (path == path_) {
    opt.text_column = text_col_->currentIndex() >= 0 ? std::to_string(text_col_->currentIndex() + 1) : "";
    opt.label_column = label_col_->currentIndex() >= 0 ? std::to_string(label_col_->currentIndex() + 1) : "";
  }
  issues_->clear();
  try {
    dataset_ = load_dataset(path.toStdString(), opt);
  } catch (const Error& e) {
    dataset_ = {};
    path_.clear();
    preview_model_->setRows({});
    summary_->setText("");
    issues_->addItem(QString::fromStdString(e.what()));
    issues_->show();
    return "The dataset could not be read: " + QString::fromStdString(e.what());
  }
  path_ = path;
  showChoice();
  for (QComboBox* c : {text_col_, label_col_}) {
    QSignalBlocker block(c);
    c->clear();
    for (const auto& name : dataset_.columns) c->addItem(QString::fromStdString(name));
  }
  text_col_->setCurrentIndex(dataset_.text_column);
  label_col_->setCurrentIndex(dataset_.label_column);
  preview_model_->setRows(
      std::vector<Example>(dataset_.rows.begin(), dataset_.rows.begin() + std::min<size_t>(dataset_.rows.size(), 500)));
  std::map<std::string, int> counts;
  for (const auto& r : dataset_.rows) ++counts[r.label];
  QStringList parts;
  for (const auto& [label, n] : counts) parts << QString("%1: %2").arg(QString::fromStdString(label)).arg(n);
  summary_->setText(QString("%1: %2 rows%3. Labels: %4")
                        .arg(QFileInfo(path).fileName())
                        .arg(dataset_.rows.size())
                        .arg(dataset_.has_header ? " (header row found)" : "")
                        .arg(parts.join(", ")));
  for (const auto& issue : dataset_.issues)
    issues_->addItem(QString("line %1: %2").arg(issue.line).arg(QString::fromStdString(issue.message)));
  issues_->setVisible(!dataset_.issues.empty());
  if (!dataset_.issues.empty())
    return QString("%1 row(s) have problems (listed under the preview); fix the file before training.")
        .arg(dataset_.issues.size());
  return {};
}

// The dropdown names the dataset that is loaded: a shipped one, or the file opened (listed by
// its name, before the "Open..." entry, so it can be chosen again).
void DatasetPanel::showChoice() {
  QSignalBlocker block(choice_);
  const int shipped = static_cast<int>(shipped_datasets().size());
  for (int i = 0; i < shipped; ++i)
    if (!path_.isEmpty() && QFileInfo(shippedPath(i)) == QFileInfo(path_)) {
      choice_->setCurrentIndex(i);
      return;
    }
  for (size_t k = 0; k < shipped_texts().size(); ++k)
    if (hasText() && QFileInfo(QDir(data_dir_).filePath(shipped_texts()[k].file)) == QFileInfo(text_path_)) {
      choice_->setCurrentIndex(choice_->findData(QString("shipped-text:%1").arg(k)));
      return;
    }
  const QString file = hasText() ? text_path_ : path_;
  if (file.isEmpty()) return;
  const QString data = hasText() ? "text:" + text_path_ : path_;
  // the user's file: after the presets and the shipped texts
  const int user = shipped + static_cast<int>(lm_presets().size() + shipped_texts().size());
  if (choice_->itemData(user).toString() == "text:")  // no user file listed yet
    choice_->insertItem(user, QFileInfo(file).fileName(), data);
  else
    choice_->setItemText(user, QFileInfo(file).fileName()), choice_->setItemData(user, data);
  choice_->setItemData(user, file, Qt::ToolTipRole);
  choice_->setCurrentIndex(user);
}

}  // namespace attnlab
