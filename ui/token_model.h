// TokenListModel: the token strip's item model (one row per token: text, id, [UNK] and global
// flags). Checking a token makes it a global token of the sparse mask.
#pragma once

#include <QAbstractListModel>
#include <QColor>
#include <set>

#include "engine/text/tokenizer.h"

namespace attnlab {

// The colour of generated tokens' text in the strip (and its legend).
inline const QColor kGeneratedColor(170, 60, 150);

class TokenListModel : public QAbstractListModel {
  Q_OBJECT
 public:
  enum Roles { IdRole = Qt::UserRole + 1, UnknownRole };
  using QAbstractListModel::QAbstractListModel;

  void setTokens(const std::vector<std::string>& tokens, const std::vector<int>& ids, const std::vector<bool>& unknown);
  // Tokens from this position on were generated (the Generate tab), drawn in their own colour; -1: none.
  void setGeneratedFrom(int position);
  int generatedFrom() const { return generated_from_; }
  bool anyGenerated() const { return generated_from_ >= 0 && generated_from_ < static_cast<int>(tokens_.size()); }
  std::vector<int> globalPositions() const { return {global_.begin(), global_.end()}; }
  void setGlobalPositions(const std::vector<int>& positions);
  // Labels only: an attention file's tokens have no vocabulary ids and take no global-token ticks.
  void setPlain(bool on);
  // Ids shown but no global-token ticks (an encoder-decoder's source: the masks it takes are the decoder's).
  void setTickable(bool on);

  int rowCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  bool setData(const QModelIndex& index, const QVariant& value, int role) override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;

 signals:
  void globalsChanged();

 private:
  std::vector<std::string> tokens_;
  std::vector<int> ids_;
  std::vector<bool> unknown_;
  int generated_from_ = -1;
  bool plain_ = false, tickable_ = true;
  bool generated(int row) const { return generated_from_ >= 0 && row >= generated_from_; }
  std::set<int> global_;
};

}  // namespace attnlab
