// ExploreView: the Explore tab, a composer of page widgets. The input bar and the left column
// (prediction, masks, display) sit around the layer bar and the pages of ui/explore/page_table.h;
// every page reads the shared ExploreState and redraws on its signals. Engine calls live in the
// ExploreController; this widget sends it the input and reports what each outcome was.
// The accessors below are for the main window, the command line and the tests.
#pragma once

#include <QElapsedTimer>
#include <QWidget>
#include <map>
#include <memory>

#include "engine/compute/forward.h"
#include "ui/explore/explore_state.h"
#include "ui/explore_controller.h"

class QComboBox;
class QFile;
class QLabel;
class QSlider;
class QTabWidget;
class QTableWidget;

namespace attnlab {

class HeadsPage;
class HeatmapView;
class ImportancePage;
class InputBar;
class LensPage;
class LineView;
class LinesPage;
class MaskEditor;
class MaskPanel;
class MethodsView;
class PredictionPanel;
class TokenListModel;

class ExploreView : public QWidget {
  Q_OBJECT
 public:
  explicit ExploreView(QWidget* parent = nullptr);
  ~ExploreView() override;

  void setModel(std::shared_ptr<const Model> model);
  // An attention file (engine/formats/attention_file.h) in place of a model: `model` holds its
  // shape only (probabilities_only); the pages that read probabilities show `result`, the others
  // are disabled and say why; typing, masks and the Train tab wait for a model.
  void setAttention(std::shared_ptr<const Model> model, std::shared_ptr<const ForwardResult> result);
  bool showsFile() const { return controller_->showsFile(); }
  const Model* model() const { return state_->model().get(); }
  ExploreState* state() const { return state_; }
  ExploreController* controller() const { return controller_; }
  InputBar* inputBar() const { return input_; }

  void setText(const QString& text);
  QString text() const;
  void setCrossText(const QString& text);  // empty: self-attention
  void setPairText(const QString& text);   // sentence B (models with a pair template)
  // An encoder-decoder's target (the text is its source) and the attention the views draw.
  void setTargetText(const QString& text);
  void setPart(Seq2SeqPart part);
  void setTokenView(bool hide_special, bool merge_pieces);
  void setBackend(const QString& name);
  QString backend() const { return controller_->backend(); }
  void setLayer(int layer) { state_->setLayer(layer); }
  int layer() const { return state_->layer(); }
  int enlargedHead() const { return state_->openedHead(); }  // the head the Head tab shows
  // Applies --mask style arguments ("causal", "window:8", ...). Error on a bad one.
  void setMaskArgs(const QStringList& args);
  void setPadTo(int length);    // [PAD] tokens appended up to this length (0: none)
  void setCustomMask(bool on);  // the Mask editor's painted mask applies
  bool customMask() const;
  QStringList maskArgs() const;
  void setColormap(const QString& name) { state_->setColormap(name); }
  void setPerfLog(const QString& path);

  // Runs any pending recomputation now and waits for it (tests, screenshots, export).
  void flush();
  const ForwardResult* result() const { return state_->result().get(); }
  HeatmapView* headView(int head) const;
  int headCount() const;
  HeadsPage* headsPage() const;  // the Heads grid (its layout, for tests)
  MaskEditor* maskEditor() const { return editor_; }
  TokenListModel* tokenModel() const;
  QTabWidget* tabs() const { return tabs_; }
  // A page by its name or alias in page_table.h; false for another name or a page this model
  // does not have (the lens: language models only) or cannot show (an attention file's model-only pages).
  bool showPage(const QString& name);
  QWidget* page(const QString& name) const;
  // Language models: the position whose next tokens the prediction panel lists (-1: the last).
  void setNextTokenPosition(int position);
  QString predictionText() const;
  // The logit lens table (layers x positions), filled in the background when its tab is shown;
  // waitForLens() blocks until the pending computation has been shown (tests, screenshots).
  QTableWidget* lensTable() const;
  void waitForLens();
  // Head ablation (Michel et al.'s head mask): the head's probabilities times 0 before they
  // weight the values, in every pass until restored. Shown in the head's title and the status bar.
  void setAblated(int layer, int head, bool ablated) { state_->setAblated(layer, head, ablated); }
  bool isAblated(int layer, int head) const { return state_->isAblated(layer, head); }
  // The Importance tab: p(prediction) minus p(prediction) with each head ablated, computed in the
  // background; waitForImportance() blocks until it has been shown (tests, screenshots).
  void computeImportance();
  void waitForImportance();
  QTableWidget* importanceTable() const;
  bool importanceRunning() const;  // a computation in flight (its progress bar shown)
  // The "Beyond attention" page: rollout, relevance, value-weighted, averaged attention.
  MethodsView* methodsView() const;
  // Heads and Head tabs: "attention" (default) or "value-weighted" (Kobayashi et al. 2020).
  void setHeadWeighting(const QString& name);
  void waitForValueNorm() { state_->waitForValueNorm(); }
  // Selects token positions in the token strip (as clicking them would); Error for one past the end.
  void selectTokens(const std::vector<int>& positions);

  int exportDpi() const { return export_dpi_; }
  void setExportDpi(int dpi) { export_dpi_ = dpi; }
  // Writes the current head / layer / every layer to FILE (.png .svg .pdf .csv .npy).
  void exportTo(const QString& path, int layer, int head);
  // Writes the Importance ("importance": [layers, heads]) or Logit lens ("lens") table to FILE
  // (.csv or .npy). Error when it has not been computed.
  void exportTable(const QString& which, const QString& path);
  // Writes the line view as shown to FILE (.png .svg).
  void exportLines(const QString& path);
  LineView* lineView() const;
  static QString memoryText(const PassMemory& m);  // the status bar's memory part

 signals:
  void status(const QString& message);
  void warnings(const QStringList& warnings);
  void layerChanged(int layer);

 private:
  void schedule();                          // sends the current input to the controller
  void showModelShape(const Model& model);  // the tabs, the layer range and the pages' shape
  void onInputPrepared(const QStringList& notices);
  void onResult(const ForwardOutcome& out);
  void onLayer(int layer);
  template <class P>
  P* pageAs(const char* name) const;

  ExploreController* controller_;
  ExploreState* state_;
  InputBar* input_;
  MaskEditor* editor_;
  MaskPanel* masks_;
  PredictionPanel* prediction_;
  QSlider* layer_slider_;
  QLabel* layer_label_;
  QComboBox* weighting_;
  QTabWidget* tabs_;
  std::map<QString, QWidget*> pages_;  // by page_table.h's name
  int export_dpi_ = 150;
  QElapsedTimer clock_;
  std::unique_ptr<QFile> perf_log_;
};

}  // namespace attnlab
