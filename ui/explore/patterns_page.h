// PatternsPage: every head of every layer in one table, by what it mostly attends to (Clark et al.
// 2019's head patterns: previous / next token, itself, the first token, separators, punctuation,
// one particular token, or spread evenly), each cell coloured by that share; click a cell to open
// the head. The same figures as `attnlab-cli analyze --method head-patterns --json`.
#pragma once

#include "ui/explore/explore_page.h"

class QLabel;
class QTableWidget;

namespace attnlab {

class PatternsPage : public ExplorePage {
  Q_OBJECT
 public:
  explicit PatternsPage(ExploreState* state, QWidget* parent = nullptr);
  QTableWidget* table() const { return table_; }

 protected:
  void refresh() override;

 private:
  QLabel* status_;
  QTableWidget* table_;
};

}  // namespace attnlab
