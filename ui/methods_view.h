// MethodsView: the Explore tab's "Beyond attention" page. One large map of an analysis method
// (engine/analysis/methods.h) for the current input: attention rollout, gradient-weighted
// relevance, norm-based (value-weighted) attention per head or averaged, and plain attention
// averaged over heads or over every layer. Computed in the background when the page is shown
// and the input, mask or ablated heads change; the same labels, hover values, colour bar and
// exports as the heatmaps.
#pragma once

#include <QWidget>
#include <atomic>
#include <memory>
#include <optional>
#include <thread>

#include "engine/analysis/method_table.h"
#include "engine/compute/forward.h"
#include "engine/text/token_view.h"
#include "ui/background_job.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;

namespace attnlab {

class HeatmapView;

// The method table's row shown at this index of the Beyond attention page.
MethodId page_method_id(int page_index);

class MethodsView : public QWidget {
  Q_OBJECT
 public:
  // The page's methods, in the order of their page_index in the method table
  // (engine/analysis/method_table.h; a UI test holds the two together).
  enum Method { Rollout = 0, Relevance, ValueNorm, MeanHeads, MeanLayers, SelectedQueries, SelectedKeys, Compare };

  explicit MethodsView(QWidget* parent = nullptr);
  ~MethodsView() override;

  void setModel(std::shared_ptr<const Model> model);
  // The input the maps are computed for (prepared ids, mask, ablated heads) and its labels.
  // Marks the page out of date; it computes when shown.
  void setInput(const ForwardRequest& request, const QStringList& labels, const QString& text = QString());
  // What the other views show of the tokens (hide [CLS]/[SEP], merge pieces): the T x T maps are
  // drawn through the same groups (keys summed, queries averaged); nullopt = every token.
  void setTokenGroups(std::optional<TokenGroups> groups);
  // Compare (A - B): B is this text on the same model when text is not empty, else the same
  // text on `model` (another folder, e.g. a checkpoint). Needs the same token count.
  void setCompare(const QString& text, std::shared_ptr<const Model> model, const QString& model_name = QString());
  QString compareName() const { return compare_model_ ? compare_model_name_ : QString(); }  // B's model, if any
  void setLayer(int layer);  // the layer of the per-layer maps (value-weighted, mean over heads)
  // The shown result (its attention, as drawn) and the token positions selected in the token
  // strip: the selection maps (heads x tokens) read them directly, no pass needed.
  void setResult(std::shared_ptr<const ForwardResult> result);
  void setSelection(std::vector<int> tokens);
  const std::vector<int>& selection() const { return selection_; }
  void setAverage(bool mean);  // selection maps: mean over the selected tokens instead of the sum
  void setMethod(Method m);
  Method method() const;
  void setGradient(const QString& name);

  // Blocks until the pending computation has been shown (tests, screenshots).
  void wait();
  HeatmapView* view() const { return view_; }
  QString statusText() const;
  // The shown map as .png .svg .pdf .csv .npy (Error when there is none yet).
  void exportTo(const QString& path, int dpi);

 protected:
  void showEvent(QShowEvent* e) override;

 private:
  void start();  // computes the current method's maps in the background
  bool selectionMethod() const { return method() == SelectedQueries || method() == SelectedKeys; }
  void showSelection();  // the selection maps, from the shown result
  void show();           // draws the slice of the cached maps for the layer and head chosen
  QString title() const;
  QString readoutSummary() const;  // relevance: the tokens the prediction rests on

  std::shared_ptr<const Model> model_;
  ForwardRequest request_;
  QStringList labels_;
  std::optional<TokenGroups> groups_;
  int layer_ = 0;
  bool dirty_ = true;
  // The computed maps of one method: [T, T] (rollout, relevance, mean over layers), [L, T, T]
  // (mean over heads) or [L, H, T, T] (value-weighted), with what was explained.
  std::shared_ptr<const Tensor> maps_;
  std::shared_ptr<const std::vector<uint8_t>> blocked_;  // [T * T]: blocked for every head by the mask
  int maps_method_ = -1;
  QString maps_note_;
  QString colormap_ = "viridis";
  QString export_title_;
  std::shared_ptr<const ForwardResult> shown_;  // the shown map as a one-head result, for export
  QComboBox* method_box_;
  QComboBox* head_box_;
  QComboBox* agg_box_;  // sum / mean over the selected tokens
  QLineEdit* compare_text_;
  QPushButton* compare_model_button_;
  QString text_;  // A's text
  std::shared_ptr<const Model> compare_model_;
  QString compare_model_name_;
  std::shared_ptr<const ForwardResult> result_;
  std::vector<int> selection_;
  QLabel* status_;
  HeatmapView* view_;
  BackgroundJob job_{this};
};

}  // namespace attnlab
