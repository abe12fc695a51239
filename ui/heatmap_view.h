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
// Fills a colour map with a heatmap's drawn grid (cell (i, j) centred on (j, i); NaN = all
// blocked, drawn in the map's blocked colour): the one place both the views and the exports
// turn data into cells.
void fill_color_map(QCPColorMap* map, const HeatmapData& d);

// How a cell of a grid that shares its token axes (the Heads page, matplotlib's sharex /
// sharey) draws its axes: no colour bar and no axis titles (the grid draws them once), query
// labels only in the grid's first column and key labels only under the bottom map of a column,
// in bands of the widths the grid chose, so every map of the grid has the same size.
// With two sides, the labels alternate: queries 0, 2, 4... on the left and 1, 3, 5... on the
// right of the grid, keys 0, 2, 4... below and 1, 3, 5... above (each side has twice the room, so
// a short sentence keeps every token named where one side would name every 2nd).
struct SharedAxes {
  bool on = false;
  bool row_labels = false, col_labels = false;  // this cell draws the (first side's) query / key labels
  int left = 0, bottom = 0;                     // the label bands, in pixels (1 without labels)
  QFont font;                                   // the labels' font
  int sides = 1;                                // 2: alternate labels on the other sides too
  bool right_labels = false, top_labels = false;
  int right = 0, top = 0;
  int slack = 1;  // the margin of a side without labels: room for the neighbours' edge labels to overhang
};

class HeatmapView : public QWidget {
  Q_OBJECT
 public:
  // The text of the tick at drawn cell k of an axis labelled every `step` drawn cells of
  // `factor` tokens each, cut to `chars` characters: the token, or its position and the token
  // when not every token is labelled (one function for the views and the grid's band widths).
  static QString tickLabel(const QStringList& labels, int k, int step, int factor, int chars);
  // An axis title with what the labels skip: "queries (max of 2 per cell, every 4th)".
  static QString axisTitle(const QString& what, int step, int factor);
  // The height of a map's title row in this font (the grid places its cells with it).
  static int titleHeight(const QFont& font);

  explicit HeatmapView(QWidget* parent = nullptr);

  void setData(HeatmapData data);
  const HeatmapData& data() const { return data_; }
  void setGradient(const QString& name);
  // Thumbnails: no axis labels, no colour bar, no interaction.
  void setCompact(bool compact);
  void setAnnotate(bool annotate);             // print values in cells (for short inputs)
  void setPlaceholder(const QString& text);    // said in the middle while there is no data
  void setMaxCells(int n) { max_cells_ = n; }  // per axis: data drawn finer is pooled further
  // Colour range 0..top: top > 0 is given (1 for a shared 0-1 scale, a layer's maximum for a
  // per-layer scale), 0 = this view's own maximum (per head). Diverging maps: -top..top.
  void setColourTop(float top);
  // Square cells (the enlarged head): the axes keep a 1:1 scale instead of filling the widget.
  void setSquareCells(bool square) { square_ = square; }
  void setSharedAxes(const SharedAxes& axes);
  // The title's style, the same for every map of a grid: "h3" for "head 3" (short), its size (0: the default).
  void setTitleStyle(bool short_names, double point_size) {
    if (short_names == title_short_ && point_size == title_pt_) return;
    title_short_ = short_names, title_pt_ = point_size;
    rebuild();
  }
  // Where the map is drawn, in the view's coordinates (after the last layout).
  QRect mapRect() const;
  float colourTop() const;  // the top in use
  // Number of cells per axis actually drawn (after downsampling).
  QSize drawnSize() const;
  QSize poolFactors() const { return {col_factor_, row_factor_}; }  // tokens per drawn cell (keys, queries)
  // Token labels: every k-th drawn cell of an axis gets one. A view of several heads sets the
  // steps for all of them (the densest any needs), so they show the same labels; a view never
  // goes below what its own size needs, so labels never overlap.
  void setLabelSteps(QSize steps);  // width = keys (x), height = queries (y); 0 = own choice
  QSize labelSteps() const { return used_steps_; }
  // Small-cell layout (no axis titles; they move to the tooltip): -1 = by this view's own size,
  // 0 / 1 = off / on (a grid sets one value for all its heads, so every head looks the same).
  void setSmallMode(int mode) {
    if (mode == small_mode_) return;
    small_mode_ = mode;
    steps_rows_ = -1;  // the axis titles come or go: the label steps are measured again
    rebuild();
  }

 public:
  QCustomPlot* plot() const { return plot_; }

 signals:
  void clicked();
  // A click (press and release without a drag) on cell (row, col) of the full-resolution data.
  void cellClicked(int row, int col);

 protected:
  bool eventFilter(QObject* obj, QEvent* ev) override;

 private:
  void fitTitle();
  QString placeholder_;
  void rebuild();

  QCustomPlot* plot_;
  QCPColorMap* map_;
  QCPColorScale* scale_;
  HeatmapData data_;
  QString gradient_ = "viridis";
  bool compact_ = false, annotate_ = false;
  float colour_top_ = 0;
  bool square_ = false;
  int small_mode_ = -1;
  int max_cells_ = 512;
  SharedAxes shared_;
  bool title_short_ = false;
  double title_pt_ = 0;
  // The drawn grid is pooled to at most the map's size in pixels (a cell is never narrower than a
  // pixel, so no row or column is dropped when the image is drawn): found at the last layout.
  QSize pixel_cap_{0, 0};
  bool rebuilding_ = false;
  // The part of the map the user zoomed to, in tokens (keys x, queries y; edges of cells), or
  // empty for the whole map: the drawn grid is pooled for what is visible, so zooming in shows
  // finer cells (down to the producer's grid) and more labels, and the window survives re-pooling.
  QRectF zoom_;
  bool ranging_ = false;        // the view itself is setting its ranges
  bool range_pending_ = false;  // a zoom or drag is waiting to be drawn
  void onRangeChanged();
  int row_factor_ = 1, col_factor_ = 1;  // full-resolution cells per drawn cell, per axis
  QPointF press_;                        // where the mouse went down (a click, or a drag that pans)
  QSize label_steps_{0, 0}, used_steps_{1, 1}, own_steps_{1, 1};
  // What own_steps_ was found for (plot size, drawn grid, labels, pooling factor).
  QSize steps_plot_size_;
  QSize square_fit_;  // the axis rect's size for square cells, found for the steps_* state
  int steps_rows_ = -1, steps_cols_ = -1, steps_row_factor_ = 0, steps_col_factor_ = 0;
  QStringList steps_row_labels_, steps_col_labels_;
};

}  // namespace attnlab
