// CurveView: the one line-chart widget (QCustomPlot): named series on a left or right axis,
// points appended live, hover shows the nearest point, export as PNG / SVG / CSV.
#pragma once

#include <QWidget>
#include <vector>

class QCustomPlot;
class QCPGraph;
class QCPItemText;

namespace attnlab {

class CurveView : public QWidget {
  Q_OBJECT
 public:
  explicit CurveView(const QString& x_label, QWidget* parent = nullptr);
  // Adds a series; returns its index. right: plot against the right-hand axis.
  int addSeries(const QString& name, const QColor& color, bool right = false, bool dots = false);
  void setAxisLabels(const QString& left, const QString& right = {});
  // A fixed left-axis range (shown with a small margin so end markers are not clipped).
  void setYRange(double lo, double hi);
  // Integer x ticks starting at `first` (epochs).
  void setIntegerX(int first);
  void setLegendColumns(int columns);  // the legend wraps after this many entries (a narrow chart)
  // A logarithmic x axis (steps over decades: grokking's gap between memorising and generalising);
  // points at x <= 0 are not drawn.
  void setLogX(bool on);
  void append(int series, double x, double y);
  void clear();         // the points and markers; the series stay
  void removeSeries();  // every series (a chart whose series depend on the run)
  int seriesCount() const { return static_cast<int>(graphs_.size()); }
  // A vertical dashed line at x with a label at its top (an event: "phase change").
  void addMarker(double x, const QString& label);
  int markerCount() const { return markers_; }
  int pointCount(int series) const;
  // .png, .svg or .csv by extension; Error otherwise.
  void exportTo(const QString& path) const;
  QCustomPlot* plot() const { return plot_; }

 protected:
  bool eventFilter(QObject* obj, QEvent* ev) override;

 private:
  void showLegend(bool on);
  QCustomPlot* plot_;
  std::vector<QCPGraph*> graphs_;
  std::vector<bool> dots_;  // drawn with a circle at each point (while there are at most 60)
  void rescale();

  int markers_ = 0;
  // markers' labels and their x: each is right of its line, or left of it past 60% of the axis,
  // decided again whenever the axis changes (a label placed early ran off the left edge later)
  struct MarkerLabel {
    QCPItemText* text;
    double x;
    QString label;
  };
  std::vector<MarkerLabel> marker_labels_;
  void placeMarkerLabels();
  QString x_label_;
  bool fixed_y_ = false;
  double y_lo_ = 0, y_hi_ = 1;
  int x_first_ = -1;  // >= 0: integer x axis from this value
  bool log_x_ = false;
};

}  // namespace attnlab
