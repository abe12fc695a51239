// ExploreView: the Explore tab's widgets. Text (and optional cross text) in; all heads of the
// chosen layer out, live. Owns the mask panel, mask editor, layer controls, the all-layers
// overview, the enlarged head and the prediction. Engine calls live in its ExploreController;
// this widget sends it the input and draws each outcome it announces.
#pragma once

#include <QElapsedTimer>
#include <QWidget>
#include <atomic>
#include <memory>
#include <set>
#include <thread>

#include "engine/forward.h"
#include "ui/background_job.h"
#include "ui/explore_controller.h"
#include "ui/heatmap_data.h"

class QCheckBox;
class QProgressBar;
class QPushButton;
class QComboBox;
class QLabel;
class QLineEdit;
class QListView;
class QSlider;
class QSpinBox;
class QTableWidget;
class QAction;
class QTabWidget;
class QTimer;
class QGridLayout;
class QFile;

namespace attnlab {

class HeatmapView;
class LineView;
class MaskEditor;
class MethodsView;
class TokenListModel;
struct LogitLens;

class ExploreView : public QWidget {
  Q_OBJECT
 public:
  explicit ExploreView(QWidget* parent = nullptr);
  ~ExploreView() override;

  void setModel(std::shared_ptr<const Model> model);
  const Model* model() const { return model_.get(); }
  void setText(const QString& text);
  QString text() const;
  void setCrossText(const QString& text);  // empty: self-attention
  void setPairText(const QString& text);   // sentence B (models with a pair template)
  void setTokenView(bool hide_special, bool merge_pieces);
  void setBackend(const QString& name);
  QString backend() const { return controller_->backend(); }
  void setLayer(int layer);
  int layer() const { return layer_; }
  int enlargedHead() const { return big_head_; }  // the head the Head tab shows
  // Applies --mask style arguments ("causal", "window:8", ...). Error on a bad one.
  void setMaskArgs(const QStringList& args);
  void setPadTo(int length);  // [PAD] tokens appended up to this length (0: none)
  QStringList maskArgs() const;
  void setColormap(const QString& name);
  void setPerfLog(const QString& path);

  // Runs any pending recomputation now and waits for it (tests, screenshots, export).
  void flush();
  const ForwardResult* result() const { return controller_->result().get(); }
  ExploreController* controller() const { return controller_; }
  HeatmapView* headView(int head) const;
  int headCount() const { return static_cast<int>(heads_.size()); }
  MaskEditor* maskEditor() const { return editor_; }
  TokenListModel* tokenModel() const { return token_model_; }
  QTabWidget* tabs() const { return tabs_; }
  // The pages by name (never by index): "heads", "lines", "layers", "head", "mask", "lens"
  // (language models), "importance", "methods". False for another name.
  bool showPage(const QString& name);
  // Language models: the position whose next tokens the prediction panel lists (-1: the last).
  void setNextTokenPosition(int position);
  QString predictionText() const;
  // The logit lens table (layers x positions), filled in the background when its tab is shown;
  // waitForLens() blocks until the pending computation has been shown (tests, screenshots).
  QTableWidget* lensTable() const { return lens_table_; }
  void waitForLens();
  // Head ablation (Michel et al.'s head mask): the head's probabilities times 0 before they
  // weight the values, in every pass until restored. Shown in the head's title and the status bar.
  void setAblated(int layer, int head, bool ablated);
  bool isAblated(int layer, int head) const { return ablated_.count({layer, head}) > 0; }
  // The Importance tab: p(prediction) minus p(prediction) with each head ablated, computed in the
  // background; waitForImportance() blocks until it has been shown (tests, screenshots).
  void computeImportance();
  void waitForImportance();
  QTableWidget* importanceTable() const { return imp_table_; }
  bool importanceRunning() const;  // a computation in flight (its progress bar shown)
  // The "Beyond attention" page: rollout, relevance, value-weighted, averaged attention.
  MethodsView* methodsView() const { return methods_; }
  // Heads and Head tabs: "attention" (default) or "value-weighted" (Kobayashi et al. 2020).
  void setHeadWeighting(const QString& name);
  void waitForValueNorm();  // blocks until the value-weighted maps of the shown input are drawn
  // Selects token positions in the token strip (as clicking them would); Error for one past the end.
  void selectTokens(const std::vector<int>& positions);

 protected:
  bool eventFilter(QObject* obj, QEvent* ev) override;
  void resizeEvent(QResizeEvent* e) override;

 public:
  int exportDpi() const { return export_dpi_; }
  void setExportDpi(int dpi) { export_dpi_ = dpi; }
  // Writes the current head / layer / every layer to FILE (.png .svg .pdf .csv .npy).
  void exportTo(const QString& path, int layer, int head);
  // Writes the Importance ("importance": [layers, heads]) or Logit lens ("lens") table to FILE
  // (.csv or .npy). Error when it has not been computed.
  void exportTable(const QString& which, const QString& path);
  // Writes the line view as shown to FILE (.png .svg).
  void exportLines(const QString& path);
  LineView* lineView() const { return lines_; }

 signals:
  void status(const QString& message);
  void warnings(const QStringList& warnings);
  void layerChanged(int layer);

 private:
  void schedule();  // sends the current input to the controller
  void onInputPrepared(const QStringList& notices);
  void onResult(const ForwardOutcome& out);
  void render();
  void renderOverview();
  void rebuildHeadGrid(int heads);
  void layoutHeadGrid();
  void fitTokenStrip();
  void updateTokenLegend();
  void updateLayerLabel();
  void syncLabelSteps();
  float colourTop() const;
  void applyColourScale();
  void openHead(int layer, int head);
  MaskSpec currentMask() const;
  void renderPrediction();
  void startLens();
  void applyAblation();
  QString headTitle(int layer, int head, bool with_layer) const;
  ForwardRequest analysisRequest() const;
  void showOtherMasks();  // the input as the analysis methods read it
  bool valueWeighted() const;
  void startValueNorm();
  HeatmapData headData(int layer, int head, int max_cells) const;  // max_cells 0: the worker's grid  // "head 3 · prev", "(ablated)"

  std::shared_ptr<const Model> model_;
  ExploreController* controller_;
  // What is drawn: the controller's last outcome (grids [layer * heads + head] built by the
  // worker) and the labels of that same result.
  std::shared_ptr<const ForwardResult> result_;
  std::vector<HeatmapData> grids_;
  std::vector<std::vector<HeadPattern>> patterns_;  // [layer][head] of the result drawn
  HeatmapData mask_grid_;
  QStringList row_labels_, col_labels_;
  int layer_ = 0, big_layer_ = 0, big_head_ = 0;
  QString colormap_ = "viridis";
  QElapsedTimer clock_;
  int export_dpi_ = 150;
  std::unique_ptr<QFile> perf_log_;

  QLineEdit* text_;
  QLineEdit* cross_text_;
  QCheckBox* cross_on_;
  QLabel* pair_label_;
  QLineEdit* pair_text_;
  QCheckBox *hide_special_, *merge_pieces_;
  QListView* token_view_;
  TokenListModel* token_model_;
  QLabel* notice_;
  QLabel* token_legend_;
  QLabel *visible_swatch_, *blocked_swatch_;  // the mask preview's legend
  QLabel* prediction_;
  QCheckBox *padding_, *causal_, *window_on_, *strided_on_, *custom_on_, *annotate_;
  QComboBox* scale_mode_;
  QSpinBox *pad_to_, *window_, *stride_;
  HeatmapView* mask_view_;
  QTabWidget* tabs_;
  QWidget* heads_page_;
  QGridLayout* heads_grid_;
  std::vector<HeatmapView*> heads_;
  int grid_cols_ = 0;
  QWidget* overview_page_;
  QWidget* overview_tab_;  // the scroll area holding overview_page_
  QGridLayout* overview_grid_;
  std::vector<HeatmapView*> thumbs_;
  bool overview_dirty_ = true;
  HeatmapView* big_;
  MaskEditor* editor_;
  QWidget* lines_page_;
  QWidget* head_page_;
  QComboBox* head_box_;
  QComboBox* line_head_;
  LineView* lines_;
  QSlider* layer_slider_;
  QLabel* layer_label_;
  // Language models: next tokens at a position, and the logit lens page.
  QSpinBox* next_pos_;
  QWidget* lens_page_;
  QTableWidget* lens_table_;
  QLabel* lens_status_;
  bool lens_dirty_ = true;
  BackgroundJob lens_job_{this};
  std::shared_ptr<const LogitLens> lens_;  // the table shown, for export
  QStringList lens_labels_;
  // Head ablation and the Importance tab
  std::set<std::pair<int, int>> ablated_;
  std::vector<QAction*> ablate_actions_;  // one per head view of the grid
  QWidget* imp_page_;
  QTableWidget* imp_table_;
  QLabel* imp_status_;
  QProgressBar* imp_progress_;
  QPushButton* imp_stop_;
  BackgroundJob imp_job_{this};
  std::shared_ptr<const Tensor> imp_values_;  // [layers, heads] shown, for export
  MethodsView* methods_;
  // "heads show: value-weighted": norm-based attention of the shown input, computed in the background
  QComboBox* weighting_;
  std::shared_ptr<const Tensor> vn_;
  BackgroundJob vn_job_{this};
};

}  // namespace attnlab
