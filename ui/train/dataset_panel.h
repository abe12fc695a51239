// DatasetPanel: the Train tab's data: a shipped dataset (engine/train/tasks.h's table) or a TSV / CSV
// file, its preview and label counts, the text and label columns, parse problems row by row, and
// the validation split. It reads files; the Train tab decides when a new one may be loaded.
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
  bool ready() const { return !path_.isEmpty() && dataset_.issues.empty() && !dataset_.rows.empty(); }
  double validationSplit() const;
  QString choiceText() const;

 signals:
  void loadRequested(const QString& path);        // the user chose a file or a shipped dataset
  void shippedChosen(const ShippedDataset& row);  // before its loadRequested

 private:
  void showChoice();

  Dataset dataset_;
  QString path_, data_dir_;
  QComboBox *choice_, *text_col_, *label_col_;
  QTableView* preview_;
  DatasetTableModel* preview_model_;
  QLabel* summary_;
  QListWidget* issues_;
  QDoubleSpinBox* val_split_;
};

}  // namespace attnlab
