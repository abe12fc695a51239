// ExploreState: what the Explore tab's pages share and how they hear of changes. The controller
// announces a result; the state keeps the outcome being drawn (its grids, badges and labels), the
// layer, the display choices, the ablated heads and the value-weighted maps, and signals each
// change. Every page (explore_page.h) reads the state and redraws on the signals it depends on,
// so a page never feeds another by hand.
#pragma once

#include <QObject>
#include <QStringList>
#include <functional>
#include <memory>
#include <set>

#include "engine/compute/forward.h"
#include "ui/background_job.h"
#include "ui/explore_controller.h"
#include "ui/heatmap_data.h"

namespace attnlab {

class ExploreState : public QObject {
  Q_OBJECT
 public:
  enum class Scale { PerHead, PerLayer, Unit };  // where the heads' colour bar ends

  ExploreState(ExploreController* controller, QObject* parent);
  ~ExploreState() override;

  ExploreController* controller() const { return controller_; }
  const std::shared_ptr<const Model>& model() const { return model_; }
  void setModel(std::shared_ptr<const Model> model);  // clears the result, the ablation and the layer
  int heads() const { return model_ ? model_->config.num_heads : 0; }

  // The outcome drawn: the controller's last result (grids [layer * heads + head] built by the
  // worker) and the labels of that same result.
  const std::shared_ptr<const ForwardResult>& result() const { return outcome_.result; }
  const ForwardOutcome& outcome() const { return outcome_; }
  void setOutcome(const ForwardOutcome& outcome);
  void clearOutcome();
  const QStringList& rowLabels() const { return row_labels_; }
  const QStringList& colLabels() const { return col_labels_; }

  int layer() const { return layer_; }
  void setLayer(int layer);  // clamped to the model's layers
  // The head the Head tab shows (of the current layer); openHead also asks for that tab.
  int openedHead() const { return opened_head_; }
  void openHead(int head);

  QString colormap() const { return colormap_; }
  void setColormap(const QString& name);
  bool annotate() const { return annotate_; }
  void setAnnotate(bool on);
  Scale scale() const { return scale_; }
  void setScale(Scale s);
  // Heads and Head tabs: attention weights, or value-weighted (Kobayashi et al. 2020), computed
  // in the background for each new result while chosen.
  bool valueWeighted() const { return value_weighted_; }
  void setValueWeighted(bool on);
  void waitForValueNorm();

  // Michel et al.'s head mask: ablated in every pass until restored.
  bool isAblated(int layer, int head) const { return ablated_.count({layer, head}) > 0; }
  const std::set<std::pair<int, int>>& ablated() const { return ablated_; }
  void setAblated(int layer, int head, bool ablated);

  // The masks of the next pass (the mask panel's), and the request the analysis methods repeat.
  void setMaskProvider(std::function<MaskSpec()> provider);
  MaskSpec mask() const { return mask_provider_ ? mask_provider_() : MaskSpec{}; }
  ForwardRequest analysisRequest() const;

  // Head `head` of `layer` as the Heads and Head tabs draw it (labels, title and hatching set):
  // the worker's grid (max_cells 0) or a grid of max_cells per axis, value-weighted when chosen.
  HeatmapData headMap(int layer, int head, int max_cells, bool with_layer) const;
  QString headTitle(int layer, int head, bool with_layer) const;  // "head 3 · prev", "(ablated)"
  // What the head mostly attends to in the result drawn ("prev", "[SEP]", "→ film"), "" for nothing.
  QString badge(int layer, int head) const;
  // The colour bar's top for the layer's heads: 0 (each its own), the layer's maximum, or 1.
  float colourTop(int layer) const;

 signals:
  void modelChanged();
  void resultChanged();
  void layerChanged(int layer);
  void displayChanged();  // colour map, scale, annotation, weighting, value-weighted maps arriving
  void ablationChanged();
  void headOpened(int head);
  void pageRequested(const QString& name);  // a page asks for another to be shown
  void pageShown(const QString& name);      // the composer shows a page (its name in page_table.h)
  void status(const QString& message);

 private:
  HeatmapData headData(int layer, int head, int max_cells) const;
  void startValueNorm();

  ExploreController* controller_;
  std::shared_ptr<const Model> model_;
  ForwardOutcome outcome_;
  QStringList row_labels_, col_labels_;
  int layer_ = 0, opened_head_ = 0;
  QString colormap_ = "viridis";
  bool annotate_ = false, value_weighted_ = false;
  Scale scale_ = Scale::PerHead;
  std::set<std::pair<int, int>> ablated_;
  std::function<MaskSpec()> mask_provider_;
  std::shared_ptr<const Tensor> vn_;  // value-weighted maps of the shown result
  BackgroundJob vn_job_{this};
};

// Axis labels: a space made visible, long tokens (<|begin_of_text|>) cut to 8 characters so one
// label does not take a small heatmap's width (hover and exports keep the whole token).
QStringList to_labels(const std::vector<std::string>& tokens);

}  // namespace attnlab
