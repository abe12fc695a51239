// MainWindow: menus, the backend selector, the status bar, settings, drag and drop of model
// folders, and the tabs (Explore; Train). Loads models; never computes.
#pragma once

#include <QMainWindow>
#include <memory>

#include "engine/model/model.h"

class QComboBox;
class QLabel;
class QMenu;
class QTabWidget;

namespace attnlab {

class ExploreView;
class TrainView;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;
  // Loads a model folder; on failure shows the message and keeps the current model.
  bool openModel(const QString& dir, bool quiet = false);
  void useModel(std::shared_ptr<const Model> model, const QString& source);
  // Opens attention made elsewhere (.npz or .safetensors: engine/formats/attention_file.h) in
  // Explore without a model; batch picks a sequence of a batched file (-1: the first, warned).
  // On failure shows the message and keeps what was shown.
  bool openAttention(const QString& path, int batch = -1, bool quiet = false);
  QString attentionFile() const { return attention_file_; }  // the file shown; empty: a model
  ExploreView* explore() const { return explore_; }
  // Help > Tour: the articles' steps in a small window beside this one; each opens its state.
  // Help > Tour: the tour's panel, docked at the right; step >= 0 opens that step (0-based).
  void showTour(int step = -1);
  TrainView* train() const { return train_; }
  QTabWidget* tabs() const { return tabs_; }
  QString modelDir() const { return model_dir_; }
  // The folder of the shipped models ("default", "relative"): the tour opens them from here.
  void setShippedModels(const QString& dir) { shipped_models_ = dir; }
  QString shippedModels() const { return shipped_models_; }
  void setBackend(const QString& name);  // selects it in the toolbar too
  void restoreSettings();
  void saveSettings() const;
  void showError(const QString& message);  // a dialog unless headless, and the status bar
  void openFailed(const QString& message, const QString& kept, bool quiet);

 protected:
  void dragEnterEvent(class QDragEnterEvent* e) override;
  void dropEvent(class QDropEvent* e) override;
  void closeEvent(class QCloseEvent* e) override;

 private:
  void showSummary();
  void exportDialog(int scope);  // 0 head, 1 layer, 2 all layers, 3 data
  void rememberRecent(const QString& dir);

 public:
  QString aboutText() const;      // Help > About: version, Qt, Eigen, backends, model
  QString shortcutsText() const;  // Help > Keyboard shortcuts

 private:
  void fillRecent();

  ExploreView* explore_;
  TrainView* train_;
  QTabWidget* tabs_;
  QComboBox* backend_;
  QString summary_text_;  // "default - TextClassifier: ..." (showSummary says whose on the Train tab)
  QLabel* summary_;
  QLabel* warn_;
  QString model_dir_;
  QString attention_file_;
  QString shipped_models_;
  QMenu* recent_ = nullptr;
  bool remember_recent_ = false;

 public:
  // File > Recent models reads and writes the settings only when this is on (not in tests,
  // screenshots or --no-settings runs).
  void setRememberRecent(bool on) {
    remember_recent_ = on;
    fillRecent();
  }
};

}  // namespace attnlab
