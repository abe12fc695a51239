// MainWindow: the desktop app's top-level window. For now it loads a model and shows its summary
// and the tokens of the typed text; the heatmap views arrive with the gui-explore work.
#pragma once

#include <QLabel>
#include <QLineEdit>
#include <QMainWindow>

#include "engine/model.h"

namespace attnlab {

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  // Loads a model folder; on failure shows the message and keeps the current model.
  bool openModel(const QString& dir);
  void setText(const QString& text);

 private:
  void updateTokens();

  Model model_;
  bool hasModel_ = false;
  QLineEdit* input_;
  QLabel* summary_;
  QLabel* tokens_;
};

}  // namespace attnlab
