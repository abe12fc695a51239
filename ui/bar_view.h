// BarView: the one bar-chart widget (QCustomPlot): labelled categories with two series side by
// side (a distribution before and after something changes it), one category marked. The
// Generate page draws the next-token distribution before and after the sampling warpers with it,
// and a click on a category picks that token.
#pragma once

#include <QStringList>
#include <QWidget>
#include <vector>

class QCustomPlot;
class QCPBars;

namespace attnlab {

class BarView : public QWidget {
  Q_OBJECT
 public:
  BarView(const QString& first, const QString& second, QWidget* parent = nullptr);
  // labels[k] with values first[k] and second[k] (same lengths); `marked` (-1: none) gets the
  // marked colour in the second series and its label a leading arrow.
  void setData(const QStringList& labels, const std::vector<double>& first, const std::vector<double>& second,
               int marked);
  void clear();
  int count() const { return count_; }
  QStringList labels() const { return labels_; }  // as the axis shows them (the marked one with its arrow)
  QCustomPlot* plot() const { return plot_; }

 signals:
  void categoryClicked(int k);  // a click on category k's bars (or its label)

 private:
  QCustomPlot* plot_;
  QCPBars *first_, *second_, *mark_;
  QStringList labels_;
  int count_ = 0;
};

}  // namespace attnlab
