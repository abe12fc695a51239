// DatasetPanel: the Train tab's data: a shipped dataset (engine/train/tasks.h's table), a
// language-model preset's generated task (the same file's lm_presets table: what to watch for, in
// place of the preview), a text file for a new language model (its size and opening lines) or a
// TSV / CSV file, its preview and label counts, the text and label
// columns, parse problems row by row, and the validation split. It reads files; the Train tab
// decides when a new one may be loaded.
#pragma once

#include <QGroupBox>

#include "engine/train/dataset.h"

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QListWidget;
class QTableView;

namespace attnlab {

class DatasetTableModel;
struct ShippedDataset;
struct LmPreset;
struct ShippedText;

class DatasetPanel : public QGroupBox {
  Q_OBJECT
 public:
  explicit DatasetPanel(QWidget* parent = nullptr);
  void setDataDir(const QString& dir);  // where the shipped datasets are
  QString shippedPath(int index) const;
  // Reads path (with the chosen columns when it is the file already loaded). Problems are listed
  // under the preview; the error or problem count is returned ("" when the data is ready).
  QString load(const QString& path);
  const Dataset& dataset() const { return dataset_; }
  QString path() const { return path_; }
  bool ready() const {
    return lm_ || hasText() || (!path_.isEmpty() && dataset_.issues.empty() && !dataset_.rows.empty());
  }
  // A text file for a new language model in place of a dataset: read whole (an error message,
  // "" when it is ready); a preset or a dataset chosen leaves it.
  QString useText(const QString& path, const char* opening = nullptr);
  bool hasText() const { return !text_path_.isEmpty(); }
  const std::string& text() const { return text_; }
  QString textPath() const { return text_path_; }
  // A language-model preset in place of a file (nothing to read: its task is generated); null
  // when a dataset is loaded.
  void useLmPreset(const LmPreset& preset);
  const LmPreset* lmPreset() const { return lm_; }
  double validationSplit() const;
  QString choiceText() const;

 signals:
  void loadRequested(const QString& path);        // the user chose a file or a shipped dataset
  void shippedChosen(const ShippedDataset& row);  // before its loadRequested
  void lmPresetChosen(const LmPreset& row);
  void textChosen(const QString& path);                                 // a text file for a new language model
  void shippedTextChosen(const ShippedText& row, const QString& path);  // a text shipped with attnlab

 private:
  void showChoice();
  void showFileParts(bool on);
  void clearFile();  // no dataset, preset or text: what a preset or a text starts from  // the columns, preview and
                     // split (a file), or not (a generated task)

  Dataset dataset_;
  QString path_, data_dir_;
  QComboBox *choice_, *text_col_, *label_col_;
  QTableView* preview_;
  DatasetTableModel* preview_model_;
  QLabel* summary_;
  QListWidget* issues_;
  QDoubleSpinBox* val_split_;
  QWidget *columns_, *split_row_;
  const LmPreset* lm_ = nullptr;
  std::string text_;
  QString text_path_;
};

}  // namespace attnlab
