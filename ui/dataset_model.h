// DatasetTableModel: the training tab's preview of a dataset (line, text, label), tested with
// QAbstractItemModelTester.
#pragma once

#include <QAbstractTableModel>

#include "engine/train/dataset.h"

namespace attnlab {

class DatasetTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  using QAbstractTableModel::QAbstractTableModel;
  void setRows(std::vector<Example> rows);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  std::vector<Example> rows_;
};

}  // namespace attnlab
