// DatasetTableModel implementation.
#include "ui/dataset_model.h"

namespace attnlab {

void DatasetTableModel::setRows(std::vector<Example> rows) {
  beginResetModel();
  rows_ = std::move(rows);
  endResetModel();
}

int DatasetTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}
int DatasetTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : 3;
}

QVariant DatasetTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= 3) return {};
  if (role != Qt::DisplayRole && role != Qt::ToolTipRole) return {};
  const Example& e = rows_[static_cast<size_t>(index.row())];
  switch (index.column()) {
    case 0:
      return e.line;
    case 1:
      return QString::fromStdString(e.text);
    default:
      return QString::fromStdString(e.label);
  }
}

QVariant DatasetTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (role != Qt::DisplayRole) return {};
  if (orientation == Qt::Vertical) return section + 1;
  switch (section) {
    case 0:
      return "line";
    case 1:
      return "text";
    case 2:
      return "label";
    default:
      return {};
  }
}

}  // namespace attnlab
