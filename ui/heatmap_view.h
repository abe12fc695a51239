// HeatmapView: the one heatmap widget (article 003's orientation: queries down the vertical
// axis, keys along the horizontal). Wraps QCustomPlot's colour map with no interpolation, token
// labels, a colour bar, optional value annotations, hover tooltips, mouse zoom/pan, blocked
// cells in their own colour, and max-pooling downsampling for long inputs.
#pragma once

#include <QStringList>
#include <QWidget>
#include <vector>

#include "ui/heatmap_data.h"

class QCustomPlot;
class QCPColorMap;
class QCPColorScale;
class QCPRange;

namespace attnlab {

// The data range of a colour-map axis of n cells such that cell k is centred on k (any n >= 1).
QCPRange cell_centres(int n);

class HeatmapView : public QWidget {
  Q_OBJECT
 public:
  explicit HeatmapView(QWidget* parent = nullptr);

  void setData(HeatmapData data);
  const HeatmapData& data() const { return data_; }
  void setGradient(const QString& name);
  // Thumbnails: no axis labels, no colour bar, no interaction.
  void setCompact(bool compact);
  void setAnnotate(bool annotate);             // print values in cells (for short inputs)
  void setMaxCells(int n) { max_cells_ = n; }  // per axis: data drawn finer is pooled further
  // Colour range: 0..max of the data (default), or fixed 0..1.
  void setFixedRange(bool fixed) { fixed_range_ = fixed; }
  // Number of cells per axis actually drawn (after downsampling).
  QSize drawnSize() const;
  // Token labels: every k-th drawn cell gets one (0: chosen from this view's own size). A view
  // of several heads sets one k for all of them, so they show the same labels.
  void setLabelStep(int k);
  // The k this view would choose for its size: labels at least a line of text apart.
  int autoLabelStep() const;
  // The step in use (after rebuild).
  int labelStep() const { return used_step_; }
  QCustomPlot* plot() const { return plot_; }

 signals:
  void clicked();

 protected:
  bool eventFilter(QObject* obj, QEvent* ev) override;

 private:
  void rebuild();

  QCustomPlot* plot_;
  QCPColorMap* map_;
  QCPColorScale* scale_;
  HeatmapData data_;
  QString gradient_ = "viridis";
  bool compact_ = false, annotate_ = false, fixed_range_ = false;
  int max_cells_ = 512;
  int factor_ = 1;  // full-resolution cells per drawn cell (per axis)
  int label_step_ = 0, used_step_ = 1;
};

}  // namespace attnlab
