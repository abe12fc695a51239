// MainWindow: model summary, text input and token strip.
#include "ui/main_window.h"

#include <QMessageBox>
#include <QStatusBar>
#include <QVBoxLayout>

#include "engine/tokenizer.h"

namespace attnlab {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("attnlab");
  auto* central = new QWidget(this);
  auto* layout = new QVBoxLayout(central);
  summary_ = new QLabel("No model loaded", central);
  input_ = new QLineEdit(central);
  input_->setPlaceholderText("Type text to see its attention");
  tokens_ = new QLabel(central);
  tokens_->setWordWrap(true);
  layout->addWidget(summary_);
  layout->addWidget(input_);
  layout->addWidget(tokens_, 1);
  setCentralWidget(central);
  connect(input_, &QLineEdit::textChanged, this, &MainWindow::updateTokens);
  resize(900, 600);
}

bool MainWindow::openModel(const QString& dir) {
  try {
    model_ = load_model(dir.toStdString());
    hasModel_ = true;
  } catch (const Error& e) {
    QMessageBox::warning(this, "attnlab", QString::fromStdString(e.what()));
    statusBar()->showMessage(QString::fromStdString(e.what()));
    return false;
  }
  const ModelConfig& c = model_.config;
  summary_->setText(QString("%1: %2 layers, %3 heads, d=%4, ff=%5, %6 parameters")
                        .arg(dir)
                        .arg(c.num_layers)
                        .arg(c.num_heads)
                        .arg(c.embed_size)
                        .arg(c.ff_dim)
                        .arg(c.parameter_count()));
  updateTokens();
  return true;
}

void MainWindow::setText(const QString& text) { input_->setText(text); }

void MainWindow::updateTokens() {
  if (!hasModel_) return;
  try {
    const Tokenized t = tokenize(input_->text().toStdString(), model_.config, model_.vocab);
    QStringList parts;
    for (size_t i = 0; i < t.tokens.size(); ++i)
      parts << QString("%1 [%2]").arg(QString::fromStdString(t.tokens[i])).arg(t.ids[i]);
    tokens_->setText(parts.join("  "));
  } catch (const Error& e) {
    tokens_->setText(QString::fromStdString(e.what()));
  }
}

}  // namespace attnlab
