// CurveView implementation.
#include "ui/curve_view.h"

#include <QFontMetrics>
#include <QMouseEvent>
#include <QSvgGenerator>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <qcustomplot.h>

#include "engine/core/io_util.h"
#include "engine/core/tensor.h"

namespace attnlab {

CurveView::CurveView(const QString& x_label, QWidget* parent) : QWidget(parent), x_label_(x_label) {
  auto* l = new QVBoxLayout(this);
  l->setContentsMargins(0, 0, 0, 0);
  plot_ = new QCustomPlot(this);
  l->addWidget(plot_);
  plot_->xAxis->setLabel(x_label);
  plot_->legend->setFont(QFont(font().family(), 8));
  plot_->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
  plot_->legend->setBorderPen(Qt::NoPen);
  plot_->axisRect()->insetLayout()->take(plot_->legend);  // placed with the first series (showLegend)
  plot_->legend->setVisible(false);
  plot_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  plot_->setMouseTracking(true);
  plot_->installEventFilter(this);
  // marker labels measured against the axis rect as this replot lays it out, not the last one's
  connect(plot_, &QCustomPlot::afterLayout, this, [this] { placeMarkerLabels(); });
  setMinimumHeight(180);
}

int CurveView::addSeries(const QString& name, const QColor& color, bool right, bool dots) {
  QCPGraph* g = plot_->addGraph(plot_->xAxis, right ? plot_->yAxis2 : plot_->yAxis);
  g->setName(name);
  g->setPen(QPen(color, dots ? 1.5 : 1.2));
  if (dots) g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 5));
  dots_.push_back(dots);
  if (right) plot_->yAxis2->setVisible(true);
  graphs_.push_back(g);
  showLegend(true);
  return static_cast<int>(graphs_.size()) - 1;
}

// The legend sits above the axis rect, in its own row: it never covers the data. A chart without
// series has none: an empty legend's largest size is its margins, and a layout column is as narrow
// as the narrowest largest size in it, so the axis rect under it shrank to its 50 px minimum.
void CurveView::showLegend(bool on) {
  QCPLayoutGrid* layout = plot_->plotLayout();
  const bool placed = layout->rowCount() > 1 && layout->element(0, 0) == plot_->legend;
  if (on && !placed) {
    layout->insertRow(0);
    layout->addElement(0, 0, plot_->legend);
    layout->setRowStretchFactor(0, 0.001);
  } else if (!on && placed) {
    layout->take(plot_->legend);
    layout->simplify();
  }
  plot_->legend->setVisible(on);
}

void CurveView::setAxisLabels(const QString& left, const QString& right) {
  plot_->yAxis->setLabel(left);
  plot_->yAxis2->setLabel(right);
}

void CurveView::append(int series, double x, double y) {
  if (!std::isfinite(y)) return;  // a diverged step is reported in words, not plotted
  QCPGraph* g = graphs_.at(static_cast<size_t>(series));
  g->addData(x, y);
  // A point's circle shows a held-out evaluation among the training steps; past 60 of them the
  // circles merge into a thick band (grokking evaluates every step), so the line goes on alone.
  if (dots_.at(static_cast<size_t>(series)) && g->dataCount() == 61) g->setScatterStyle(QCPScatterStyle::ssNone);
  rescale();
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

void CurveView::setYRange(double lo, double hi) {
  fixed_y_ = true;
  y_lo_ = lo, y_hi_ = hi;
  rescale();
}

void CurveView::setLegendColumns(int columns) {
  plot_->legend->setWrap(columns);
  // the names already there wrap too (QCustomPlot re-lays them out only when asked)
  plot_->legend->setFillOrder(plot_->legend->fillOrder(), true);
  plot_->xAxis->ticker()->setTickCount(4);  // a narrow chart: fewer step labels, none overlapping
}

void CurveView::setIntegerX(int first) {
  x_first_ = first;
  QSharedPointer<QCPAxisTickerFixed> t(new QCPAxisTickerFixed);
  t->setTickStep(1.0);
  t->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
  plot_->xAxis->setTicker(t);
  rescale();
}

// Data ranges with a margin (markers at the ends stay whole); fixed axes stay fixed.
void CurveView::setLogX(bool on) {
  log_x_ = on;
  plot_->xAxis->setScaleType(on ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
  if (on)
    plot_->xAxis->setTicker(QSharedPointer<QCPAxisTickerLog>::create());
  else
    plot_->xAxis->setTicker(QSharedPointer<QCPAxisTicker>::create());
  rescale();
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

void CurveView::rescale() {
  plot_->rescaleAxes();
  const double pad_y = fixed_y_ ? 0.04 * (y_hi_ - y_lo_) : 0.06 * std::max(1e-9, plot_->yAxis->range().size());
  if (fixed_y_)
    plot_->yAxis->setRange(y_lo_ - pad_y, y_hi_ + pad_y);
  else
    plot_->yAxis->setRange(plot_->yAxis->range().lower - pad_y, plot_->yAxis->range().upper + pad_y);
  QCPRange x = plot_->xAxis->range();
  bool any = false;
  for (const QCPGraph* g : graphs_) any = any || g->dataCount() > 0;
  if (!any) {  // before training: the same empty 0-5 axes on every chart (1-1,000 on a log axis)
    if (log_x_)
      plot_->xAxis->setRange(1, 1000);
    else
      plot_->xAxis->setRange(std::max(0, x_first_), std::max(0, x_first_) + 5);
    placeMarkerLabels();
    return;
  }
  if (log_x_) {  // a tenth of a decade either side, and at least 1 to 10
    plot_->xAxis->setRange(std::min(1.0, x.lower / 1.26), std::max(10.0, x.upper * 1.26));
  } else if (x_first_ >= 0) {
    x.lower = std::min(x.lower, static_cast<double>(x_first_));
    x.upper = std::max(x.upper, static_cast<double>(x_first_));
    plot_->xAxis->setRange(x.lower - 0.3, x.upper + 0.3);
  } else {
    const double pad_x = 0.02 * std::max(1.0, x.size());
    plot_->xAxis->setRange(x.lower - pad_x, x.upper + pad_x);
  }
  // about one step label per 70 px: a narrow chart's 0 100 200 300 400 ran together
  if (plot_->axisRect()->width() > 0)
    plot_->xAxis->ticker()->setTickCount(std::max(2, plot_->axisRect()->width() / 70));
  placeMarkerLabels();
}

void CurveView::removeSeries() {
  plot_->clearGraphs();
  graphs_.clear();
  dots_.clear();
  showLegend(false);
  clear();
}

void CurveView::addMarker(double x, const QString& label) {
  auto* line = new QCPItemStraightLine(plot_);
  line->setPen(QPen(QColor(90, 90, 90), 1.0, Qt::DashLine));
  line->point1->setCoords(x, 0);
  line->point2->setCoords(x, 1);
  auto* text = new QCPItemText(plot_);
  text->position->setTypeX(QCPItemPosition::ptPlotCoords);
  text->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
  text->position->setCoords(x, 0.02 + 0.15 * (markers_ % 3));  // a second marker's label below the first's
  text->setFont(QFont(font().family(), 8));
  text->setColor(QColor(60, 60, 60));
  marker_labels_.push_back({text, x, label});
  placeMarkerLabels();
  ++markers_;
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

// Each label right of its line, or left of it past 60% of the axis; on the other side when only
// that side holds it, and cut short with an ellipsis on the roomier side when neither does: a
// label never runs past the axis rect.
void CurveView::placeMarkerLabels() {
  const QRect area = plot_->axisRect()->rect();
  for (const MarkerLabel& m : marker_labels_) {
    const double px = plot_->xAxis->coordToPixel(m.x);
    const QFontMetrics fm(m.text->font());
    const int need = fm.horizontalAdvance(" " + m.label) + 2;
    const int room_left = static_cast<int>(px) - area.left(), room_right = area.right() - static_cast<int>(px);
    bool left = area.width() > 0 && px > area.left() + 0.6 * area.width();
    if (left && room_left < need && room_right >= need) left = false;
    if (!left && room_right < need && room_left >= need) left = true;
    const int room = std::max(0, (left ? room_left : room_right) - fm.horizontalAdvance(" ") - 2);
    const QString shown = area.width() > 0 && room < need ? fm.elidedText(m.label, Qt::ElideRight, room) : m.label;
    m.text->setPositionAlignment((left ? Qt::AlignRight : Qt::AlignLeft) | Qt::AlignTop);
    m.text->setText(left ? shown + " " : " " + shown);
  }
}

void CurveView::clear() {
  plot_->clearItems();
  marker_labels_.clear();
  markers_ = 0;
  for (size_t k = 0; k < graphs_.size(); ++k) {
    graphs_[k]->data()->clear();
    if (dots_[k]) graphs_[k]->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 5));
  }
  rescale();
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

int CurveView::pointCount(int series) const {
  return graphs_.at(static_cast<size_t>(series))->dataCount();
}

void CurveView::exportTo(const QString& path) const {
  const QString ext = QFileInfo(path).suffix().toLower();
  const QString tmp = path + ".tmp." + ext;  // written whole, then renamed into place
  bool ok = true;
  if (ext == "png") {
    ok = plot_->savePng(tmp, 900, 500, 2.0);
  } else if (ext == "svg") {
    QSvgGenerator gen;
    gen.setFileName(tmp);
    gen.setSize(QSize(900, 500));
    gen.setViewBox(QRect(0, 0, 900, 500));
    QCPPainter p;
    ok = p.begin(&gen);
    if (ok) {
      plot_->toPainter(&p, 900, 500);
      p.end();
    }
  } else if (ext == "csv") {
    std::string out = "series," + x_label_.toStdString() + ",value\n";
    for (QCPGraph* g : graphs_)
      for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it)
        out += g->name().toStdString() + "," + std::to_string(it->key) + "," + std::to_string(it->value) + "\n";
    write_file_atomic(path.toStdString(), out);
    return;
  } else {
    throw Error("unknown curve export format \"." + ext.toStdString() + "\" (expected .png, .svg or .csv)");
  }
  if (ok) {
    QFile::remove(path);
    ok = QFile::rename(tmp, path);
  }
  if (!ok) {
    QFile::remove(tmp);
    throw Error("could not write " + path.toStdString());
  }
}

bool CurveView::eventFilter(QObject* obj, QEvent* ev) {
  if (obj == plot_ && ev->type() == QEvent::MouseMove) {
    auto* me = static_cast<QMouseEvent*>(ev);
    QString best;
    double best_d = 12.0;  // pixels
    for (QCPGraph* g : graphs_) {
      if (!g->visible()) continue;
      for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it) {
        const double px = g->keyAxis()->coordToPixel(it->key), py = g->valueAxis()->coordToPixel(it->value);
        const double d = std::hypot(px - me->position().x(), py - me->position().y());
        if (d < best_d) {
          best_d = d;
          best = QString("%1: %2 %3, %4").arg(g->name(), x_label_).arg(it->key).arg(it->value, 0, 'f', 4);
        }
      }
    }
    if (best.isEmpty())
      QToolTip::hideText();
    else
      QToolTip::showText(me->globalPosition().toPoint(), best, plot_);
  }
  return QWidget::eventFilter(obj, ev);
}

}  // namespace attnlab
