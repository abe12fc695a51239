// BarView implementation.
#include "ui/bar_view.h"

#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <qcustomplot.h>

namespace attnlab {

BarView::BarView(const QString& first, const QString& second, QWidget* parent) : QWidget(parent) {
  auto* l = new QVBoxLayout(this);
  l->setContentsMargins(0, 0, 0, 0);
  plot_ = new QCustomPlot(this);
  l->addWidget(plot_);
  first_ = new QCPBars(plot_->xAxis, plot_->yAxis);
  second_ = new QCPBars(plot_->xAxis, plot_->yAxis);
  mark_ = new QCPBars(plot_->xAxis, plot_->yAxis);
  for (QCPBars* b : {first_, second_, mark_}) b->setWidth(0.38);  // side by side: at key - 0.2 and key + 0.2
  first_->setName(first);
  second_->setName(second);
  mark_->setName("chosen");
  first_->setBrush(QColor(170, 170, 170));
  first_->setPen(Qt::NoPen);
  second_->setBrush(QColor(50, 110, 190));
  second_->setPen(Qt::NoPen);
  mark_->setBrush(QColor(230, 120, 20));
  mark_->setPen(Qt::NoPen);
  plot_->yAxis->setLabel("probability");
  plot_->yAxis->setRange(0, 1);
  plot_->xAxis->setTickLabelRotation(50);
  plot_->xAxis->setSubTicks(false);
  plot_->xAxis->setTickLength(0, 3);
  plot_->legend->setVisible(true);
  plot_->legend->setFont(QFont(font().family(), 8));
  plot_->legend->setBorderPen(Qt::NoPen);
  // The legend in its own row above the axis rect, in one line (as CurveView's): inside the
  // plot's top right it covered the right-hand bars.
  plot_->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
  plot_->plotLayout()->insertRow(0);
  plot_->plotLayout()->addElement(0, 0, plot_->legend);
  plot_->plotLayout()->setRowStretchFactor(0, 0.001);
  setMinimumHeight(160);
  connect(plot_, &QCustomPlot::mousePress, this, [this](QMouseEvent* e) {
    const int k = static_cast<int>(std::lround(plot_->xAxis->pixelToCoord(e->pos().x())));
    if (k >= 0 && k < count_) emit categoryClicked(k);
  });
}

void BarView::setData(const QStringList& labels, const std::vector<double>& first, const std::vector<double>& second,
                      int marked) {
  const int n = static_cast<int>(labels.size());
  count_ = n;
  QVector<double> keys(n), left(n), right(n), a(n), b(n);
  QVector<QString> ticks(n);
  double top = 0;
  for (int k = 0; k < n; ++k) {
    keys[k] = k, left[k] = k - 0.2, right[k] = k + 0.2;
    a[k] = first.at(static_cast<size_t>(k));
    b[k] = second.at(static_cast<size_t>(k));
    top = std::max({top, a[k], b[k]});
    ticks[k] = (k == marked ? QString::fromUtf8("\u25B6 ") : QString()) + labels[k];
  }
  labels_ = QStringList(ticks.begin(), ticks.end());
  first_->setData(left, a);
  second_->setData(right, b);
  if (marked >= 0 && marked < n)  // drawn over the second series' bar, in the marked colour
    mark_->setData(QVector<double>{right[marked]}, QVector<double>{b[marked]});
  else
    mark_->data()->clear();
  QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
  ticker->setTicks(keys, ticks);
  plot_->xAxis->setTicker(ticker);
  plot_->xAxis->setRange(-0.6, std::max(0, n - 1) + 0.6);
  plot_->yAxis->setRange(0, top > 0 ? std::min(1.0, top * 1.1) : 1.0);
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

void BarView::clear() {
  setData({}, {}, {}, -1);
}

}  // namespace attnlab
