// TokenListModel implementation.
#include "ui/token_model.h"

#include <QBrush>
#include <QColor>

namespace attnlab {

void TokenListModel::setTokens(const std::vector<std::string>& tokens, const std::vector<int>& ids,
                               const std::vector<bool>& unknown) {
  beginResetModel();
  tokens_ = tokens;
  ids_ = ids;
  unknown_ = unknown;
  unknown_.resize(tokens_.size(), false);
  for (auto it = global_.begin(); it != global_.end();)
    it = *it >= static_cast<int>(tokens_.size()) ? global_.erase(it) : std::next(it);
  endResetModel();
}

void TokenListModel::setGeneratedFrom(int position) {
  generated_from_ = position;
  if (!tokens_.empty())
    emit dataChanged(index(0), index(static_cast<int>(tokens_.size()) - 1), {Qt::ForegroundRole, Qt::ToolTipRole});
}

void TokenListModel::setGlobalPositions(const std::vector<int>& positions) {
  global_ = {positions.begin(), positions.end()};
  if (!tokens_.empty()) emit dataChanged(index(0), index(static_cast<int>(tokens_.size()) - 1), {Qt::CheckStateRole});
}

void TokenListModel::setPlain(bool on) {
  beginResetModel();
  plain_ = on;
  if (on) global_.clear();
  endResetModel();
}

void TokenListModel::setTickable(bool on) {
  beginResetModel();
  tickable_ = on;
  if (!on) global_.clear();
  endResetModel();
}

int TokenListModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(tokens_.size());
}

QVariant TokenListModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() < 0 || index.row() >= rowCount()) return {};
  const size_t r = static_cast<size_t>(index.row());
  switch (role) {
    case Qt::DisplayRole: {
      QString t = QString::fromStdString(tokens_[r]);
      if (t == " ") t = QStringLiteral("\u2423");  // visible space
      return plain_ ? t : QString("%1\n%2").arg(t).arg(ids_[r]);
    }
    case Qt::ToolTipRole:
      if (plain_) return QString("position %1").arg(index.row());
      return QString("position %1, id %2%3%4%5")
          .arg(index.row())
          .arg(ids_[r])
          .arg(unknown_[r] ? ", not in the vocabulary ([UNK])" : "")
          .arg(global_.count(index.row()) ? ", global token" : "")
          .arg(generated(index.row()) ? ", generated (the Generate tab)" : "");
    case Qt::ForegroundRole:
      if (generated(index.row())) return QBrush(kGeneratedColor);
      return {};
    case Qt::BackgroundRole:
      if (unknown_[r]) return QBrush(QColor(255, 214, 153));
      if (global_.count(index.row())) return QBrush(QColor(190, 220, 255));
      return {};
    case Qt::CheckStateRole:
      if (plain_ || !tickable_) return {};
      return global_.count(index.row()) ? Qt::Checked : Qt::Unchecked;
    case IdRole:
      return ids_[r];
    case UnknownRole:
      return static_cast<bool>(unknown_[r]);
    default:
      return {};
  }
}

bool TokenListModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (!index.isValid() || role != Qt::CheckStateRole) return false;
  if (value.toInt() == Qt::Checked)
    global_.insert(index.row());
  else
    global_.erase(index.row());
  emit dataChanged(index, index, {Qt::CheckStateRole, Qt::BackgroundRole, Qt::ToolTipRole});
  emit globalsChanged();
  return true;
}

Qt::ItemFlags TokenListModel::flags(const QModelIndex& index) const {
  if (!index.isValid()) return Qt::NoItemFlags;
  return plain_ || !tickable_ ? Qt::ItemIsEnabled | Qt::ItemIsSelectable
                              : Qt::ItemIsEnabled | Qt::ItemIsSelectable | Qt::ItemIsUserCheckable;
}

}  // namespace attnlab
