// HeadsPage (see heads_page.h).
#include "ui/explore/heads_page.h"

#include <QHash>

#include <QAction>
#include <QPainter>
#include <QTimer>
#include <algorithm>
#include <cmath>

#include <qcustomplot.h>

#include "ui/colormaps.h"
#include "ui/heatmap_view.h"

namespace attnlab {

constexpr int kBarPad = 8;  // px the colour bar's widget reaches beyond the maps (see the constructor)

// An axis title drawn once for the whole grid, along its side (the queries' reads upwards).
class AxisTitle : public QWidget {
 public:
  AxisTitle(bool vertical, QWidget* parent) : QWidget(parent), vertical_(vertical) {}
  void setText(const QString& t) {
    if (t == text_) return;
    text_ = t;
    update();
  }
  const QString& text() const { return text_; }

 protected:
  void paintEvent(QPaintEvent*) override {
    QPainter p(this);
    p.setPen(palette().color(QPalette::WindowText));
    const QFontMetrics fm(font());
    if (vertical_) {
      p.translate(0, height());
      p.rotate(-90);
      p.drawText(QRect(0, 0, height(), width()), Qt::AlignCenter, fm.elidedText(text_, Qt::ElideRight, height()));
    } else {
      p.drawText(rect(), Qt::AlignCenter, fm.elidedText(text_, Qt::ElideRight, width()));
    }
  }

 private:
  bool vertical_;
  QString text_;
};

HeadGridPlan plan_head_grid(int n, int T, int S, QSize room, int title, int gap) {
  HeadGridPlan best;
  if (n <= 0 || T <= 0 || S <= 0) return best;
  // the map's height over its width: the matrix's, within 1:4 either way (a 2,048 x 4 cross map
  // with square cells would be a line)
  const double aspect = std::clamp(static_cast<double>(T) / S, 0.25, 4.0);
  struct Option {
    HeadGridPlan plan;
    double area;
  };
  std::vector<Option> options;
  for (int c = 1; c <= n; ++c) {
    const int rows = (n + c - 1) / c;
    const double w = (room.width() - (c - 1) * gap) / static_cast<double>(c);
    const double h = (room.height() - rows * title - (rows - 1) * gap) / static_cast<double>(rows);
    const double map_w = std::min(w, h / aspect);
    if (map_w < 1) continue;
    HeadGridPlan p;
    p.cols = c, p.rows = rows;
    p.map_w = static_cast<int>(std::floor(map_w));
    p.map_h = static_cast<int>(std::floor(map_w * aspect));
    options.push_back({p, static_cast<double>(p.map_w) * p.map_h});
  }
  if (options.empty()) return HeadGridPlan{std::max(1, std::min(n, 4)), (n + 3) / 4, 1, 1};
  double top = 0;
  for (const Option& o : options) top = std::max(top, o.area);
  // Full rows first (3 + 1 and 5 + 5 + 2 read badly) while they keep 60% of the largest maps'
  // area; among those within 70% of the best of them, the most balanced (rows and columns
  // nearest: 4 maps 2 x 2 rather than a strip), then the largest.
  std::vector<const Option*> full;
  for (const Option& o : options)
    if (n % o.plan.cols == 0 && o.area >= 0.6 * top) full.push_back(&o);
  if (full.empty())
    for (const Option& o : options) full.push_back(&o);
  double best_full = 0;
  for (const Option* o : full) best_full = std::max(best_full, o->area);
  auto key = [](const Option* o) { return std::make_pair(std::abs(o->plan.cols - o->plan.rows), -o->area); };
  const Option* pick = nullptr;
  for (const Option* o : full)
    if (o->area >= 0.7 * best_full && (!pick || key(o) < key(pick))) pick = o;
  return pick->plan;
}

HeadsPage::HeadsPage(ExploreState* state, QWidget* parent)
    : ExplorePage(state, OnResult | OnLayer | OnDisplay | OnAblation, /*eager=*/true, parent) {
  setMinimumSize(200, 150);
  row_title_ = new AxisTitle(true, this);
  col_title_ = new AxisTitle(false, this);
  bar_ = new QCustomPlot(this);
  bar_->plotLayout()->clear();
  bar_scale_ = new QCPColorScale(bar_);
  bar_->plotLayout()->addElement(0, 0, bar_scale_);
  bar_scale_->setType(QCPAxis::atRight);
  bar_scale_->setBarWidth(12);
  // The bar spans the maps exactly; the widget reaches kBarPad beyond both ends, since
  // QCustomPlot drops a tick label that would cross the widget's edge ("0" and "max" sit at the
  // bar's ends, and were never drawn). No automatic top and bottom margins: they moved the bar
  // 6 px in from the maps' ends.
  bar_scale_->setAutoMargins(QCP::msNone);
  bar_scale_->setMargins(QMargins(0, kBarPad, 0, kBarPad));
  bar_scale_->axis()->axisRect()->setAutoMargins(QCP::msLeft | QCP::msRight);
  bar_scale_->axis()->axisRect()->setMargins(QMargins());
  bar_->setVisible(false);
  setToolTip(
      "Every head of the layer. A badge after a head's name says what it mostly attends to (Clark et al. 2019), when "
      "one thing takes more than half its attention on average: prev / next (the neighbouring token), self, first "
      "(or [CLS]), [SEP], punct, → a particular token; broad: spread almost evenly. Double-click a head to enlarge it; "
      "right-click to ablate it.");
}

void HeadsPage::modelChanged() {
  for (HeatmapView* h : heads_) h->deleteLater();
  heads_.clear();
  ablate_actions_.clear();
  for (int h = 0; h < state_->heads(); ++h) {
    auto* v = new HeatmapView(this);
    v->setMaxCells(256);  // the worker pools to 256 already
    v->setToolTip("Double-click to enlarge");
    // no zoom in a cell: its labels are the grid's (the enlarged head zooms)
    v->plot()->setInteractions(QCP::Interactions());
    connect(v, &HeatmapView::clicked, this, [this, h] { state_->openHead(h); });
    auto* act = new QAction("Ablate this head (its probabilities times 0 before they weight the values)", v);
    act->setCheckable(true);
    act->setEnabled(!state_->model()->is_seq2seq());  // (an encoder-decoder's heads: not yet)
    v->setContextMenuPolicy(Qt::ActionsContextMenu);
    v->addAction(act);
    connect(act, &QAction::triggered, this, [this, h](bool on) { state_->setAblated(state_->layer(), h, on); });
    ablate_actions_.push_back(act);
    heads_.push_back(v);
    v->show();
  }
  layoutGrid();
}

void HeadsPage::applyDisplay() {
  const float top = state_->colourTop(state_->layer());
  for (HeatmapView* h : heads_) {
    h->setGradient(state_->colormap());
    h->setAnnotate(state_->annotate());
    h->setColourTop(top);
  }
  // the one colour bar: the layer's (or 0-1) scale, or each head's own top
  bar_scale_->setGradient(make_gradient(state_->colormap()));
  const bool vw = state_->valueWeighted();
  if (top > 0) {
    bar_scale_->axis()->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    bar_scale_->axis()->ticker()->setTickCount(4);
    bar_scale_->setDataRange(QCPRange(0, top));
    bar_scale_->setLabel(vw ? QString::fromUtf8("value-weighted \u2016\u03b1 v\u2016") : QString("attention"));
  } else {
    QSharedPointer<QCPAxisTickerText> t(new QCPAxisTickerText);
    t->addTick(0, "0");
    t->addTick(1, "max");
    bar_scale_->axis()->setTicker(t);
    bar_scale_->setDataRange(QCPRange(0, 1));
    bar_scale_->setLabel(vw ? QString("value-weighted, per head") : QString("0 to each head's max"));
  }
  bar_->replot(QCustomPlot::rpQueuedReplot);
}

void HeadsPage::refresh() {
  const int layer = state_->layer();
  for (size_t h = 0; h < heads_.size(); ++h) {
    const int head = static_cast<int>(h);
    heads_[h]->setData(state_->result() ? state_->headMap(layer, head, 0, false) : HeatmapData{});
    if (h < ablate_actions_.size()) ablate_actions_[h]->setChecked(state_->isAblated(layer, head));
  }
  applyDisplay();
  layoutGrid();
}

QString HeadsPage::rowTitle() const {
  return row_title_->text();
}
QString HeadsPage::colTitle() const {
  return col_title_->text();
}

namespace {

// The drawn cells of an axis once a view pools n producer cells of `factor` tokens into a map of
// `px` pixels (HeatmapView's rule: an integer factor, at most max_cells and one cell a pixel).
std::pair<int, int> drawn_axis(int n, int factor, int px, int max_cells) {
  const int m = std::max(1, std::min(max_cells, px));
  const int f = n > m ? (n + m - 1) / m : 1;
  return {(n + f - 1) / f, factor * f};
}

// The width of a band that holds the labels of every step-th drawn cell (tick, padding and text).
// Widths are remembered per font and text: the grid tries up to nine fonts and label sides for
// each result, and typing changes few of a long text's labels (measuring ~27,000 labels took
// most of a 20 ms refresh at 1,000 tokens).
int label_band(const QStringList& labels, int drawn, int step, int factor, const QFont& font) {
  static QHash<QString, QHash<QString, int>> widths;  // GUI thread only
  if (widths.size() > 64) widths.clear();
  QHash<QString, int>& known = widths[font.key()];
  if (known.size() > 100000) known.clear();
  const QFontMetrics fm(font);
  int w = 0;
  for (int k = 0; k < drawn; k += step) {
    const QString text = HeatmapView::tickLabel(labels, k, step, factor, 12);
    auto it = known.find(text);
    if (it == known.end()) it = known.insert(text, fm.horizontalAdvance(text));
    w = std::max(w, *it);
  }
  return w + 14;
}

}  // namespace

// The grid: the label steps, the label font, the bands and the maps' size decided together, so
// that every label fits its band, no two labels overlap, and the maps are as large as the page
// allows; then every view, the axis titles and the colour bar are placed.
void HeadsPage::layoutGrid() {
  const int n = static_cast<int>(heads_.size());
  if (n == 0) return;
  const HeatmapData& d = heads_[0]->data();
  const int W = width(), H = height();
  // The heads' titles: one style for the whole grid (never "h2 · prev" beside "head 3"): the
  // full names while every one fits its map, else "h2" for all, then a smaller font; decided
  // for the maps' width below, and the grid laid out again when the font changes.
  double title_pt = 10;
  bool title_short = false;
  auto title_font = [&](double pt) { return QFont(font().family(), static_cast<int>(pt), QFont::Bold); };
  int title = HeatmapView::titleHeight(title_font(title_pt));
  const int axis_title = QFontMetrics(font()).height() + 4;
  const int bar_w = 78;
  if (d.empty()) {  // no input: the heads' placeholders in an even grid, no axes
    row_title_->hide(), col_title_->hide(), bar_->hide();
    const int c = std::max(1, static_cast<int>(std::ceil(std::sqrt(static_cast<double>(n)))));
    const int r = (n + c - 1) / c;
    for (int h = 0; h < n; ++h) {
      SharedAxes axes;
      axes.on = true;
      heads_[static_cast<size_t>(h)]->setSharedAxes(axes);
      heads_[static_cast<size_t>(h)]->setGeometry((h % c) * W / c, (h / c) * H / r, W / c - 6, H / r - 6);
    }
    return;
  }
  struct Fit {
    QFont font;
    int sides = 1;
    HeadGridPlan plan;
    QSize steps{1, 1};  // keys (width), queries (height)
    int left = 0, bottom = 0, right = 0, top = 0;
    QSize factors{1, 1};  // tokens per drawn cell (keys, queries)
    int gap = 6;          // between maps: a line, so the labels at a map's edges overhang into it
  };
  // The labels' steps, bands and maps for a font and one or two label sides, found together:
  // bands from the labels the steps give, maps from the room the bands leave, steps from the
  // pitch the maps give, until nothing changes.
  auto fit = [&](const QFont& f, int sides) {
    Fit out;
    out.font = f, out.sides = sides;
    const double line = QFontMetrics(f).height() + 1;
    const int gap = out.gap = std::max(6, static_cast<int>(line) + 1);
    for (int pass = 0; pass < 6; ++pass) {
      const auto [dr0, fr0] = drawn_axis(d.drawn_rows, d.row_factor, out.plan.map_h > 0 ? out.plan.map_h : 256, 256);
      const auto [dc0, fc0] = drawn_axis(d.drawn_cols, d.col_factor, out.plan.map_w > 0 ? out.plan.map_w : 256, 256);
      out.left = label_band(d.row_labels, dr0, out.steps.height(), fr0, f);
      out.bottom = label_band(d.col_labels, dc0, out.steps.width(), fc0, f);
      out.right = sides == 2 ? out.left : 0;
      out.top = sides == 2 ? out.bottom : 0;
      const QSize room(W - axis_title - out.left - out.right - bar_w - 2, H - axis_title - out.bottom - out.top - 2);
      out.plan = plan_head_grid(n, d.rows, d.cols, room, title, gap);
      const auto [dr, fr] = drawn_axis(d.drawn_rows, d.row_factor, out.plan.map_h, 256);
      const auto [dc, fc] = drawn_axis(d.drawn_cols, d.col_factor, out.plan.map_w, 256);
      // labels on one side are sides x step cells apart
      auto need = [&](int px, int drawn) {
        const double pitch = sides * px / static_cast<double>(drawn);
        return std::max(1, static_cast<int>(std::ceil(line / std::max(1e-9, pitch))));
      };
      const QSize next = out.steps.expandedTo(QSize(need(out.plan.map_w, dc), need(out.plan.map_h, dr)));
      out.factors = QSize(fc, fr);
      if (next == out.steps && dr == dr0 && dc == dc0 && fr == fr0 && fc == fc0) break;
      out.steps = next;
    }
    return out;
  };
  auto sized = [&](double pt) {
    QFont f = font();
    f.setPointSizeF(std::min(pt, font().pointSizeF()));
    return f;
  };
  // The first that names every token: one side in the page's font, 8 or 7 pt; two sides in those;
  // one side, then two, in 6.5 pt; else one side in 7 pt, every k-th token.
  auto choose = [&] {
    for (const auto& [pt, sides] :
         std::vector<std::pair<double, int>>{{99, 1}, {8, 1}, {7, 1}, {99, 2}, {8, 2}, {7, 2}, {6.5, 1}, {6.5, 2}}) {
      Fit f = fit(sized(pt), sides);
      if (f.steps == QSize(1, 1)) return f;
    }
    return fit(sized(7), 1);  // thinned anyway: one side leaves the maps more room
  };
  Fit chosen = choose();
  auto widest_title = [&](double pt, bool shorten) {
    const QFontMetrics fm(title_font(pt));
    int w = 0;
    for (HeatmapView* v : heads_) {
      QString t = v->data().title;
      if (shorten) t.replace(QStringLiteral("head "), QStringLiteral("h"));
      w = std::max(w, fm.horizontalAdvance(t));
    }
    return w;
  };
  const int room = chosen.plan.map_w - 6;
  if (widest_title(10, false) > room) {
    title_short = true;
    if (widest_title(10, true) > room) {  // still too wide: 8 pt, the grid laid out for its row
      title_pt = 8;
      title = HeatmapView::titleHeight(title_font(title_pt));
      chosen = choose();
    }
  }
  plan_ = chosen.plan;
  sides_ = chosen.sides;
  const int gap = chosen.gap, slack = gap / 2;
  const HeadGridPlan& p = plan_;
  const int grid_w = chosen.left + p.cols * p.map_w + (p.cols - 1) * gap + chosen.right;
  const int grid_h = chosen.top + p.rows * (title + p.map_h) + (p.rows - 1) * gap + chosen.bottom;
  const int ox = axis_title + std::max(0, (W - axis_title - bar_w - grid_w) / 2);
  const int oy = std::max(0, (H - axis_title - grid_h) / 2);
  for (int h = 0; h < n; ++h) {
    const int r = h / p.cols, c = h % p.cols;
    SharedAxes axes;
    axes.on = true;
    axes.row_labels = c == 0;
    axes.col_labels = h + p.cols >= n;  // the lowest map of its column
    axes.left = chosen.left, axes.bottom = chosen.bottom, axes.font = chosen.font;
    axes.sides = chosen.sides;
    axes.right_labels = c == p.cols - 1 || h == n - 1;  // the last map of its row
    axes.top_labels = r == 0;
    axes.right = chosen.right, axes.top = chosen.top;
    axes.slack = slack;
    const bool two = chosen.sides == 2;
    const int top_band = two && axes.top_labels ? chosen.top : 0;
    HeatmapView* v = heads_[static_cast<size_t>(h)];
    v->setTitleStyle(title_short, title_pt);
    v->setLabelSteps(chosen.steps);
    v->setSharedAxes(axes);
    const int map_x = ox + chosen.left + c * (p.map_w + gap);
    const int map_y = oy + chosen.top + r * (title + p.map_h + gap) + title;
    const int x = axes.row_labels ? map_x - chosen.left : map_x - slack;
    const int w = (axes.row_labels ? chosen.left : slack) + p.map_w + (two && axes.right_labels ? chosen.right : slack);
    const int y = map_y - title - top_band;
    const int ht = title + top_band + p.map_h + (axes.col_labels ? chosen.bottom : slack);
    v->setGeometry(x, y, w, ht);
  }
  const int tokens_r = chosen.steps.height(), tokens_c = chosen.steps.width();
  const QSize factors = chosen.factors;
  row_title_->setText(HeatmapView::axisTitle(d.row_axis, tokens_r, factors.height()));
  col_title_->setText(HeatmapView::axisTitle(d.col_axis, tokens_c, factors.width()));
  row_title_->setGeometry(ox - axis_title, oy + chosen.top + title, axis_title,
                          p.rows * (title + p.map_h) + (p.rows - 1) * gap - title);
  col_title_->setGeometry(ox + chosen.left, oy + grid_h, p.cols * p.map_w + (p.cols - 1) * gap, axis_title);
  const int maps_h = p.rows * (title + p.map_h) + (p.rows - 1) * gap - title;  // first map's top to last's bottom
  bar_->setGeometry(ox + grid_w + 6, oy + chosen.top + title - kBarPad, bar_w - 6, maps_h + 2 * kBarPad);
  row_title_->show(), col_title_->show(), bar_->show();
  bar_->raise();  // over the last column's margins: its frame ran under them but for the row gaps
  row_title_->update(), col_title_->update();
}

void HeadsPage::resizeEvent(QResizeEvent* e) {
  ExplorePage::resizeEvent(e);
  layoutGrid();
}

}  // namespace attnlab
