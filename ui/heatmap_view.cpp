// HeatmapView implementation (the only place QCustomPlot's colour map is configured).
#include "ui/heatmap_view.h"

#include <QResizeEvent>

#include <QMouseEvent>
#include <QTimer>
#include <QToolTip>
#include <QVBoxLayout>
#include <cmath>
#include <qcustomplot.h>

#include "ui/colormaps.h"

namespace attnlab {

// QCustomPlot that lays itself out on request (margins from the current tick labels), so label
// steps can be checked against the axis rect they really get.
class LayoutPlot : public QCustomPlot {
 public:
  using QCustomPlot::QCustomPlot;
  void layoutNow() { updateLayout(); }
};

// The data range of a colour-map axis of n cells, so that cell k is centred on k: QCustomPlot
// takes the range as the first and last cell centres and draws half a cell past them; one cell
// has no distance between centres, so it gets a range of width 1 around 0 instead (a range of
// (0, 0) draws nothing: one-token inputs were blank).
QCPRange cell_centres(int n) {
  return n == 1 ? QCPRange(-0.5, 0.5) : QCPRange(0, n - 1);
}

QString HeatmapView::tickLabel(const QStringList& labels, int k, int step, int factor, int chars) {
  const int src = k * factor;
  QString label = src < labels.size() ? labels[src] : QString();
  if (label.size() > chars) label = label.left(chars - 1) + QChar(0x2026);
  if (step > 1 || factor > 1 || label.isEmpty()) label = QString("%1 %2").arg(src).arg(label).trimmed();
  return label;
}

QString HeatmapView::axisTitle(const QString& what, int step, int factor) {
  QStringList notes;
  if (factor > 1) notes << QString("max of %1 per cell").arg(factor);
  const int every = step * factor;
  if (every > 1) {
    const int mod100 = every % 100, mod10 = every % 10;
    const char* suffix = (mod100 >= 11 && mod100 <= 13) ? "th"
                         : mod10 == 1                   ? "st"
                         : mod10 == 2                   ? "nd"
                         : mod10 == 3                   ? "rd"
                                                        : "th";
    notes << QString("every %1%2").arg(every).arg(suffix);
  }
  return notes.isEmpty() ? what : QString("%1 (%2)").arg(what, notes.join(", "));
}

int HeatmapView::titleHeight(const QFont& font) {
  // QCPTextElement: the text's height and its 2-pixel margins above and below
  return QFontMetrics(font).height() + 4;
}

void fill_color_map(QCPColorMap* map, const HeatmapData& d) {
  const int r = d.drawn_rows, c = d.drawn_cols;
  map->data()->setSize(c, r);
  map->data()->setRange(cell_centres(c), cell_centres(r));
  for (int bi = 0; bi < r; ++bi)
    for (int bj = 0; bj < c; ++bj) {
      // NaN is only the colour map's marker for "all blocked" (drawn in blocked_color()); values
      // shown to the user come from the full-resolution data, never from here.
      map->data()->setCell(bj, bi, d.drawn[static_cast<size_t>(bi) * c + bj]);
    }
}

HeatmapView::HeatmapView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  plot_ = new LayoutPlot(this);
  // Not QCustomPlot's size hint (every label at full size): a grid of many heads must still fit
  // a 1280x720 window; the labels thin out instead (see rebuild).
  plot_->setMinimumSize(60, 60);
  layout->addWidget(plot_);
  plot_->setMouseTracking(true);
  plot_->installEventFilter(this);
  map_ = new QCPColorMap(plot_->xAxis, plot_->yAxis);
  map_->setInterpolate(false);    // one flat colour per cell
  map_->setTightBoundary(false);  // cells extend half a cell past the first and last centres
  scale_ = new QCPColorScale(plot_);
  plot_->plotLayout()->addElement(0, 1, scale_);
  scale_->setType(QCPAxis::atRight);
  map_->setColorScale(scale_);
  auto* group = new QCPMarginGroup(plot_);
  plot_->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, group);
  scale_->setMarginGroup(QCP::msBottom | QCP::msTop, group);
  plot_->yAxis->setRangeReversed(true);     // query 0 at the top
  plot_->xAxis->grid()->setVisible(false);  // no grid lines: they would run over the cells' borders
  plot_->yAxis->grid()->setVisible(false);
  plot_->xAxis->setTickLabelRotation(90);  // vertical: each key label is one line of text wide
  // Ticks outward and the axis lines a pixel off the map: inward ticks and a line on the map's
  // edge covered the edge cells (at 1.5 px a cell, the first key's column vanished under the line)
  for (QCPAxis* ax : {plot_->xAxis, plot_->yAxis, plot_->xAxis2, plot_->yAxis2}) {
    ax->setTickLength(0, 4);
    ax->setSubTickLength(0, 0);
    ax->setOffset(1);
  }
  plot_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  for (QCPAxis* ax : {plot_->xAxis, plot_->yAxis})
    connect(ax, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this] {
      // the user's zoom or drag, not the view's own setRange; once both axes have moved (one
      // wheel event moves both), after QCustomPlot's own handling of the event
      if (ranging_ || rebuilding_ || range_pending_) return;
      range_pending_ = true;
      QTimer::singleShot(0, this, [this] {
        range_pending_ = false;
        onRangeChanged();
      });
    });
  scale_->setGradient(make_gradient(gradient_));
  map_->setGradient(make_gradient(gradient_));
  rebuild();  // no data yet: no axes, no colour bar (QCustomPlot's default 0-5 axes looked like a map)
}

void HeatmapView::setGradient(const QString& name) {
  if (name == gradient_) return;
  gradient_ = name;
  scale_->setGradient(make_gradient(name));  // the map follows its colour scale
  map_->setGradient(make_gradient(name));
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

void HeatmapView::setCompact(bool compact) {
  compact_ = compact;
  scale_->setVisible(!compact);
  if (compact) {
    plot_->plotLayout()->take(scale_);
    plot_->plotLayout()->simplify();
  }
  for (QCPAxis* ax : {plot_->xAxis, plot_->yAxis}) {
    ax->setTicks(!compact);
    ax->setTickLabels(!compact);
    ax->setVisible(!compact);
  }
  plot_->axisRect()->setAutoMargins(compact ? QCP::msNone : QCP::msAll);
  if (compact) plot_->axisRect()->setMargins(QMargins(1, 1, 1, 1));
  plot_->setInteractions(compact ? QCP::Interactions() : QCP::Interactions(QCP::iRangeDrag | QCP::iRangeZoom));
  rebuild();
}

void HeatmapView::setAnnotate(bool annotate) {
  if (annotate == annotate_) return;
  annotate_ = annotate;
  rebuild();
}

void HeatmapView::setPlaceholder(const QString& text) {
  placeholder_ = text;
  if (data_.empty()) rebuild();
}

void HeatmapView::setData(HeatmapData data) {
  data_ = std::move(data);
  zoom_ = QRectF();  // a new map starts whole
  rebuild();
}

// The user zoomed or panned: remember the window in tokens and pool again for it when the
// visible part needs finer (or allows coarser) cells than those drawn.
void HeatmapView::onRangeChanged() {
  if (ranging_ || rebuilding_ || compact_ || shared_.on || data_.empty()) return;
  const QCPRange xr = plot_->xAxis->range(), yr = plot_->yAxis->range();
  QRectF window(QPointF((xr.lower + 0.5) * col_factor_, (yr.lower + 0.5) * row_factor_),
                QPointF((xr.upper + 0.5) * col_factor_, (yr.upper + 0.5) * row_factor_));
  const QRectF whole(0, 0, data_.cols, data_.rows);
  zoom_ = window.contains(whole) ? QRectF() : window;
  rebuild();  // pooled and labelled for what is now visible
}

void HeatmapView::setColourTop(float top) {
  if (top == colour_top_) return;
  colour_top_ = top;
  rebuild();
}

float HeatmapView::colourTop() const {
  if (colour_top_ > 0) return colour_top_;
  return data_.vmax > 0 ? data_.vmax : 1.0f;
}

void HeatmapView::setLabelSteps(QSize steps) {
  if (steps == label_steps_) return;
  label_steps_ = steps;
  rebuild();
}

void HeatmapView::setSharedAxes(const SharedAxes& axes) {
  if (axes.on == shared_.on && axes.row_labels == shared_.row_labels && axes.col_labels == shared_.col_labels &&
      axes.left == shared_.left && axes.bottom == shared_.bottom && axes.font == shared_.font &&
      axes.sides == shared_.sides && axes.right_labels == shared_.right_labels &&
      axes.top_labels == shared_.top_labels && axes.right == shared_.right && axes.top == shared_.top &&
      axes.slack == shared_.slack)
    return;
  const bool was = shared_.on;
  shared_ = axes;
  if (shared_.on && !was) {  // the grid draws the one colour bar
    plot_->plotLayout()->take(scale_);
    plot_->plotLayout()->simplify();
    plot_->plotLayout()->setRowSpacing(0);
  }
  rebuild();
}

QRect HeatmapView::mapRect() const {
  return plot_->axisRect()->rect().translated(plot_->pos());
}

QSize HeatmapView::drawnSize() const {
  return {map_->data()->keySize(), map_->data()->valueSize()};
}

void HeatmapView::rebuild() {
  plot_->clearItems();
  // No input: no axes, no colour bar (empty 0-5 axes would look like data).
  plot_->xAxis->setVisible(!data_.empty());
  plot_->yAxis->setVisible(!data_.empty());
  // a grid cell's colour bar is the grid's: taken out of the layout, it must not draw either
  // (it drew a small "0 1" bar over the map's corner)
  scale_->setVisible(!compact_ && !shared_.on && !data_.empty());
  if (data_.empty()) {
    map_->data()->clear();
    // nothing to draw has no title either (a map that failed kept the last one's over nothing)
    if (plot_->plotLayout()->rowCount() > 1)
      if (auto* t = qobject_cast<QCPTextElement*>(plot_->plotLayout()->element(0, 0))) t->setText(QString());
    if (!placeholder_.isEmpty()) {
      auto* t = new QCPItemText(plot_);
      t->position->setType(QCPItemPosition::ptViewportRatio);
      t->position->setCoords(0.5, 0.45);
      t->setText(placeholder_);
      t->setColor(palette().color(QPalette::PlaceholderText));
    }
    plot_->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  // The producer pooled the data for its own view size; thumbnails pool it further.
  HeatmapData pooled;
  const HeatmapData* d = &data_;
  const int cap_rows = pixel_cap_.height() > 0 ? std::min(max_cells_, pixel_cap_.height()) : max_cells_;
  const int cap_cols = pixel_cap_.width() > 0 ? std::min(max_cells_, pixel_cap_.width()) : max_cells_;
  if (data_.drawn_rows > cap_rows || data_.drawn_cols > cap_cols) {
    pooled = data_;
    pool_drawn(pooled, cap_rows, cap_cols);
    d = &pooled;
  }
  row_factor_ = d->row_factor, col_factor_ = d->col_factor;
  const int r = d->drawn_rows, c = d->drawn_cols;
  fill_color_map(map_, *d);
  if (d->diverging) {
    float top = 0;
    for (float v : d->drawn)
      if (std::isfinite(v)) top = std::max(top, std::fabs(v));
    if (top <= 0) top = 1;
    if (colour_top_ > 0) top = colour_top_;  // shared with another map (side by side)
    map_->setGradient(diverging_gradient());
    scale_->setGradient(diverging_gradient());
    map_->setDataRange(QCPRange(-top, top));
  } else {
    map_->setGradient(make_gradient(gradient_));
    scale_->setGradient(make_gradient(gradient_));
    map_->setDataRange(QCPRange(0, colourTop()));
  }
  // Square cells (the enlarged head) while the map is not far from square; a 162 x 6 cross map
  // with square cells would be a sliver, so it fills the view instead.
  const bool square = square_ && std::max(r, c) <= 4 * std::min(r, c);
  // The same size, grid and labels as last time (a new input of the same length, a layer switch,
  // a new colour map): the same label steps and the same square fit, without laying out again.
  const bool same = !compact_ && plot_->size() == steps_plot_size_ && r == steps_rows_ && c == steps_cols_ &&
                    data_.row_labels == steps_row_labels_ && data_.col_labels == steps_col_labels_ &&
                    row_factor_ == steps_row_factor_ && col_factor_ == steps_col_factor_ && zoom_.isNull();
  // The title's row first: the axis rect measured below is what it leaves.
  if (!data_.title.isEmpty() &&
      (plot_->plotLayout()->rowCount() == 1 || !qobject_cast<QCPTextElement*>(plot_->plotLayout()->element(0, 0)))) {
    plot_->plotLayout()->insertRow(0);
    plot_->plotLayout()->addElement(
        0, 0, new QCPTextElement(plot_, data_.title, QFont(font().family(), compact_ ? 7 : 10, QFont::Bold)));
  }
  // Square cells: the axis rect itself shrinks to the map (the layout leaves the room to spare
  // right of the colour bar and below), so the axes, their titles and the bar hug the map
  // instead of running on under empty space. It needs the rect the labels leave: one layout
  // without the limit, measured; the limit then applies at the next layout (the replot). Returns
  // the cell's size in pixels (0 when there is no room).
  QCPAxisRect* rect = plot_->axisRect();
  const QSize unlimited(QWIDGETSIZE_MAX, QWIDGETSIZE_MAX);
  auto fit_square = [&]() -> double {
    if (same && square_fit_.isValid()) {
      rect->setMaximumSize(square_fit_);
      return static_cast<double>(square_fit_.width()) / c;
    }
    rect->setMaximumSize(unlimited);
    static_cast<LayoutPlot*>(plot_)->layoutNow();
    const QRect ar = rect->rect();
    square_fit_ = QSize();
    if (ar.width() <= 10 || ar.height() <= 10) return 0;
    const double cell = std::min(ar.width() / static_cast<double>(c), ar.height() / static_cast<double>(r));
    square_fit_ = QSize(static_cast<int>(std::ceil(cell * c)), static_cast<int>(std::ceil(cell * r)));
    rect->setMaximumSize(square_fit_);
    return cell;
  };
  {  // the whole map, or the window the user zoomed to (in this grid's cells)
    const bool was = ranging_;
    ranging_ = true;
    if (zoom_.isNull() || compact_ || shared_.on) {
      plot_->xAxis->setRange(-0.5, c - 0.5);
      plot_->yAxis->setRange(-0.5, r - 0.5);
    } else {
      plot_->xAxis->setRange(zoom_.left() / col_factor_ - 0.5, zoom_.right() / col_factor_ - 0.5);
      plot_->yAxis->setRange(zoom_.top() / row_factor_ - 0.5, zoom_.bottom() / row_factor_ - 0.5);
    }
    ranging_ = was;
  }
  if (!square) {
    if (rect->maximumSize() != unlimited) rect->setMaximumSize(unlimited);
  } else if (compact_ || same) {
    fit_square();  // otherwise the label steps below fit it against their own labels
  }

  if (shared_.on && !compact_) {
    // A cell of a grid with shared axes: bands of the grid's widths, labels on the grid's outer
    // sides only, every k-th as the grid says (the same k for all its maps).
    rect->setMaximumSize(unlimited);
    rect->setAutoMargins(QCP::msNone);
    const bool two = shared_.sides == 2;
    const bool right = two && shared_.right_labels, top = two && shared_.top_labels;
    const int slack = shared_.slack;
    rect->setMargins(QMargins(shared_.row_labels ? shared_.left : slack, top ? shared_.top : 0,
                              right ? shared_.right : slack, shared_.col_labels ? shared_.bottom : slack));
    const QSize steps = label_steps_.expandedTo(QSize(1, 1));
    used_steps_ = own_steps_ = steps;
    const int chars = 12;
    // side 0: cells 0, s, 2s... (one side) or 0, 2s, 4s... (two sides); side 1: s, 3s, 5s...
    auto ticker = [&](const QStringList& labels, int n, int step, int factor, int side) {
      QSharedPointer<QCPAxisTickerText> t(new QCPAxisTickerText);
      const int stride = two ? 2 * step : step;
      for (int k = side * step; k < n; k += stride) t->addTick(k, tickLabel(labels, k, step, factor, chars));
      return t;
    };
    plot_->xAxis->setTicker(ticker(data_.col_labels, c, steps.width(), col_factor_, 0));
    plot_->yAxis->setTicker(ticker(data_.row_labels, r, steps.height(), row_factor_, 0));
    for (QCPAxis* ax : {plot_->xAxis, plot_->yAxis, plot_->xAxis2, plot_->yAxis2}) {
      ax->setTickLabelFont(shared_.font);
      ax->setLabel(QString());
    }
    plot_->xAxis->setTickLabels(shared_.col_labels);
    plot_->yAxis->setTickLabels(shared_.row_labels);
    plot_->xAxis->setTicks(shared_.col_labels);
    plot_->yAxis->setTicks(shared_.row_labels);
    plot_->xAxis2->setVisible(top);
    plot_->yAxis2->setVisible(right);
    plot_->xAxis2->grid()->setVisible(false);
    plot_->yAxis2->grid()->setVisible(false);
    if (top) {
      plot_->xAxis2->setTicker(ticker(data_.col_labels, c, steps.width(), col_factor_, 1));
      plot_->xAxis2->setRange(plot_->xAxis->range());
      plot_->xAxis2->setTickLabelRotation(90);
      plot_->xAxis2->setTickLabels(true);
      plot_->xAxis2->setTicks(true);
    }
    if (right) {
      plot_->yAxis2->setTicker(ticker(data_.row_labels, r, steps.height(), row_factor_, 1));
      plot_->yAxis2->setRangeReversed(true);
      plot_->yAxis2->setRange(plot_->yAxis->range());
      plot_->yAxis2->setTickLabels(true);
      plot_->yAxis2->setTicks(true);
    }
    setToolTip(QString());
  } else if (!compact_) {
    // Token labels on every k-th drawn cell of each axis: all of them while they are at least a
    // line of text apart, else every k-th (then with the position, and the axis title says so).
    // Never two labels on top of each other.
    auto label_ticker = [&](const QStringList& labels, int n, int step, int factor) {
      QSharedPointer<QCPAxisTickerText> t(new QCPAxisTickerText);
      // a small cell keeps labels short: a long rotated key label would take the heatmap's height
      const int chars = plot_->height() < 200 ? 7 : 12;
      for (int k = 0; k < n; k += step) t->addTick(k, tickLabel(labels, k, step, factor, chars));
      return t;
    };
    auto set_tickers = [&](QSize steps) {
      plot_->xAxis->setTicker(label_ticker(data_.col_labels, c, steps.width(), col_factor_));
      plot_->yAxis->setTicker(label_ticker(data_.row_labels, r, steps.height(), row_factor_));
    };
    // A small cell (12 heads on a laptop screen) spends no lines on axis titles: the heatmap
    // gets the room, and the tooltip keeps what the titles would say. Decided before the label
    // steps are measured, as is the colour bar's tick count (fewer ticks on a short bar), so the
    // axis rect measured is the one drawn.
    const bool small = small_mode_ > 0 || (small_mode_ < 0 && (plot_->height() < 200 || plot_->width() < 220));
    // A tiny cell (many heads, long pairs) has no room for vertical key labels: the heatmap gets
    // the height; hover and the enlarged view name the keys.
    const bool tiny = plot_->height() < 170;
    plot_->xAxis->setTickLabels(!tiny);
    plot_->xAxis->setLabel(small ? QString() : data_.col_axis);
    plot_->yAxis->setLabel(small ? QString() : data_.row_axis);
    const int bar = plot_->height() - (tiny ? 40 : 90);
    scale_->axis()->ticker()->setTickCount(bar < 90 ? 2 : bar < 160 ? 3 : 5);
    scale_->axis()->setTickLabels(bar >= 36);  // a bar too short for two labels a line apart: none
    // The steps this size needs, found against the axis rect the labels really leave: lay out
    // with a guess, measure the pitch, thin further while labels would be closer than a line.
    // Grid cells (a few hundred pixels) label in a smaller font before thinning: every one of a
    // short sentence's tokens stays named in the heads grid at 1280x720.
    QFont tick_font = font();
    if (plot_->height() < 300 || plot_->width() < 300) tick_font.setPointSizeF(std::min(tick_font.pointSizeF(), 7.5));
    plot_->xAxis->setTickLabelFont(tick_font);
    plot_->yAxis->setTickLabelFont(tick_font);
    const double line = QFontMetrics(tick_font).height() + 1;
    QSize own = same ? own_steps_ : QSize(1, 1);
    for (int pass = 0; pass < 5 && !same; ++pass) {
      set_tickers(own);
      // pixels between neighbouring cells: square cells' size (the axis rect the labels leave
      // sets it), else from the axes' scale
      const double cell = square ? fit_square() : 0.0;
      if (!square) static_cast<LayoutPlot*>(plot_)->layoutNow();
      auto pitch = [&](QCPAxis* ax) {
        return square ? cell : std::fabs(ax->coordToPixel(1.0) - ax->coordToPixel(0.0));
      };
      auto need = [&](double px, int now) {
        return std::max(now, static_cast<int>(std::ceil(line / std::max(1e-9, px))));
      };
      const QSize next(need(pitch(plot_->xAxis), own.width()), need(pitch(plot_->yAxis), own.height()));
      if (next == own) break;
      own = next;
    }
    own_steps_ = own;
    steps_plot_size_ = plot_->size(), steps_rows_ = zoom_.isNull() ? r : -1, steps_cols_ = c;  // zoomed: measured anew
    steps_row_factor_ = row_factor_, steps_col_factor_ = col_factor_;
    steps_row_labels_ = data_.row_labels, steps_col_labels_ = data_.col_labels;
    used_steps_ = own.expandedTo(label_steps_);
    if (same || used_steps_ != own) set_tickers(used_steps_);
    auto title = [](const QString& what, int step, int factor) { return axisTitle(what, step, factor); };
    const QString keys = title(data_.col_axis, used_steps_.width(), col_factor_);
    const QString queries = title(data_.row_axis, used_steps_.height(), row_factor_);
    // A title longer than its axis (a short map, "queries (max of 3 per cell, every 63rd)") drops
    // the pooling, then the step, rather than running past the map; the tooltip says it whole.
    auto fit = [&](QCPAxis* ax, const QString& what, int step, int factor, int length) {
      const QFontMetrics fm(ax->labelFont());
      for (const QString& t : {axisTitle(what, step, factor), axisTitle(what, step * factor, 1), what})
        if (fm.horizontalAdvance(t) <= length) return t;
      return fm.elidedText(what, Qt::ElideRight, std::max(10, length));
    };
    const QRect ar = rect->rect();
    const QString keys_shown = fit(plot_->xAxis, data_.col_axis, used_steps_.width(), col_factor_, ar.width());
    const QString queries_shown = fit(plot_->yAxis, data_.row_axis, used_steps_.height(), row_factor_, ar.height());
    plot_->xAxis->setLabel(small ? QString() : keys_shown);
    plot_->yAxis->setLabel(small ? QString() : queries_shown);
    const bool cut = keys_shown != keys || queries_shown != queries;
    setToolTip(small || cut ? QString("%1 down, %2 across").arg(queries, keys) : QString());
  }
  if (!data_.title.isEmpty()) fitTitle();
  if (annotate_ && row_factor_ == 1 && col_factor_ == 1 && data_.rows <= 16 && data_.cols <= 16) {
    for (int i = 0; i < data_.rows; ++i)
      for (int j = 0; j < data_.cols; ++j) {
        if (data_.is_blocked(i, j)) continue;
        auto* t = new QCPItemText(plot_);
        t->position->setCoords(j, i);
        t->setText(QString::number(data_.value(i, j), 'f', 2));
        t->setFont(QFont(font().family(), 7));
        t->setColor(data_.value(i, j) > 0.6f * colourTop() ? Qt::black : Qt::white);
        t->setClipToAxisRect(true);
      }
  }
  if (data_.hatched) {  // an ablated head: its map hatched over, still readable beneath
    auto* hatch = new QCPItemRect(plot_);
    hatch->topLeft->setType(QCPItemPosition::ptAxisRectRatio);
    hatch->bottomRight->setType(QCPItemPosition::ptAxisRectRatio);
    hatch->topLeft->setCoords(0, 0);
    hatch->bottomRight->setCoords(1, 1);
    hatch->setPen(QPen(QColor(200, 30, 30), 2));
    hatch->setBrush(QBrush(QColor(255, 255, 255, 170), Qt::BDiagPattern));
    hatch->setClipToAxisRect(true);
  }
  // A drawn grid finer than the map's pixels would lose whole rows and columns when the image is
  // shrunk to the map (a one-token diagonal drawn dotted): pool it to the map's size instead, with
  // the max, and lay out again once (the axis titles name the new factor).
  if (!rebuilding_) {
    static_cast<LayoutPlot*>(plot_)->layoutNow();
    const QRect ar = rect->rect();
    // zoomed in: the visible part at a cell per pixel, so the whole grid at that many times more
    const double zx = zoom_.isNull() ? 1.0 : data_.cols / std::max(1.0, zoom_.width());
    const double zy = zoom_.isNull() ? 1.0 : data_.rows / std::max(1.0, zoom_.height());
    const QSize want(static_cast<int>(std::ceil(ar.width() * zx)), static_cast<int>(std::ceil(ar.height() * zy)));
    // the drawn size a cap gives: the producer's grid pooled by an integer factor per axis
    auto drawn_for = [&](int n, int cap) {
      const int m = std::min(max_cells_, cap);
      const int f = n > m ? (n + m - 1) / m : 1;
      return (n + f - 1) / f;
    };
    if (ar.width() > 4 && ar.height() > 4 &&
        (drawn_for(data_.drawn_rows, want.height()) != r || drawn_for(data_.drawn_cols, want.width()) != c)) {
      pixel_cap_ = want;
      rebuilding_ = true;
      rebuild();
      rebuilding_ = false;
      return;
    }
  }
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

// The title, elided at its end to the plot's width: centred and wider than a grid cell, it lost
// both ends ("ead 1 · → not (ablate"); the tooltip and the enlarged view keep it whole.
void HeatmapView::fitTitle() {
  if (data_.title.isEmpty() || plot_->plotLayout()->rowCount() < 2) return;
  auto* t = qobject_cast<QCPTextElement*>(plot_->plotLayout()->element(0, 0));
  if (!t) return;
  // the title sits over the map's column: the colour bar's column is not its room
  const int bar = scale_->visible() ? std::max(40, scale_->outerRect().width()) : 0;
  // a cell of a shared-axes grid: the title is centred over its map, right of the query labels
  const int band = shared_.on && shared_.row_labels ? shared_.left : 0;
  t->setMargins(QMargins(2 + band, 2, 2, 2));
  if (title_pt_ > 0) t->setFont(QFont(font().family(), static_cast<int>(title_pt_), QFont::Bold));
  const int room = std::max(20, plot_->width() - bar - band - 6);
  const QFontMetrics fm(t->font());
  QString shown = data_.title;
  if (title_short_) shown.replace(QStringLiteral("head "), QStringLiteral("h"));
  if (fm.horizontalAdvance(shown) > room) {  // "head 5 · [CLS]" -> "h5 · [CLS]", then cut at the end
    shown.replace(QStringLiteral("head "), QStringLiteral("h"));
    shown = fm.elidedText(shown, Qt::ElideRight, room);
  }
  t->setText(shown);
  if (compact_) plot_->setToolTip(shown == data_.title ? QString() : data_.title);
}

bool HeatmapView::eventFilter(QObject* obj, QEvent* ev) {
  if (obj == plot_ && ev->type() == QEvent::Resize && compact_ && !data_.empty()) fitTitle();
  if (obj == plot_ && ev->type() == QEvent::Resize && !compact_ && !data_.empty()) {  // label density
    // The filter runs before QCustomPlot's own resizeEvent: give it the new viewport first, or the
    // labels are measured against the old size (and then kept as if measured for the new one).
    plot_->setViewport(QRect(QPoint(0, 0), static_cast<QResizeEvent*>(ev)->size()));
    rebuild();
  }
  if (obj == plot_ && ev->type() == QEvent::MouseButtonDblClick) {
    emit clicked();
    return true;
  }
  if (obj == plot_ && ev->type() == QEvent::MouseButtonRelease && compact_) {
    emit clicked();
    return true;
  }
  if (obj == plot_ && ev->type() == QEvent::MouseButtonPress) press_ = static_cast<QMouseEvent*>(ev)->position();
  if (obj == plot_ && ev->type() == QEvent::MouseButtonRelease && !compact_ && data_.rows > 0) {
    auto* me = static_cast<QMouseEvent*>(ev);
    if ((me->position() - press_).manhattanLength() < 4) {  // not a pan
      const int bj = static_cast<int>(std::lround(plot_->xAxis->pixelToCoord(me->position().x())));
      const int bi = static_cast<int>(std::lround(plot_->yAxis->pixelToCoord(me->position().y())));
      const int i = bi * row_factor_, j = bj * col_factor_;
      if (i >= 0 && j >= 0 && i < data_.rows && j < data_.cols) emit cellClicked(i, j);
    }
  }
  if (obj == plot_ && ev->type() == QEvent::MouseMove && !compact_ && data_.rows > 0) {
    auto* me = static_cast<QMouseEvent*>(ev);
    const double x = plot_->xAxis->pixelToCoord(me->position().x());
    const double y = plot_->yAxis->pixelToCoord(me->position().y());
    const int bj = static_cast<int>(std::lround(x)), bi = static_cast<int>(std::lround(y));
    const int i = bi * row_factor_, j = bj * col_factor_;
    if (i >= 0 && j >= 0 && i < data_.rows && j < data_.cols) {
      const bool blocked = data_.is_blocked(i, j);
      const QString q = i < data_.row_labels.size() ? data_.row_labels[i] : QString::number(i);
      const QString kk = j < data_.col_labels.size() ? data_.col_labels[j] : QString::number(j);
      const bool attention = data_.row_axis == "queries";  // else an analysis map's own axes
      QString text = attention
                         ? QString("query %1 \"%2\" -> key %3 \"%4\": %5")
                               .arg(i)
                               .arg(q, QString::number(j), kk,
                                    blocked ? QString("blocked") : QString::number(data_.value(i, j), 'g', 4))
                         : QString("%1 %2, %3 %4: %5")
                               .arg(data_.row_axis, q, data_.col_axis, kk, QString::number(data_.value(i, j), 'g', 4));
      if (row_factor_ > 1 || col_factor_ > 1)
        text += QString("\n(block of %1 x %2 cells, the largest shown; zoom the enlarged view for single cells)")
                    .arg(row_factor_)
                    .arg(col_factor_);
      QToolTip::showText(me->globalPosition().toPoint(), text, plot_);
    } else {
      QToolTip::hideText();
    }
  }
  return QWidget::eventFilter(obj, ev);
}

}  // namespace attnlab
