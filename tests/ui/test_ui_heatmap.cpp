// UI tests of the heatmaps (offscreen Qt): the heads grid's shared token axes and layout, pooling
// to the map's pixels without aliasing, zoom, axis titles that fit.
#include <QApplication>
#include <QComboBox>
#include <QImage>
#include <catch2/catch.hpp>
#include <cmath>
#include <qcustomplot.h>
#include <set>
#include <tuple>

#include "tests/ui/ui_test_util.h"
#include "ui/explore/heads_page.h"
#include "ui/heatmap_data.h"
#include "ui/heatmap_view.h"

using namespace attnlab;
using namespace attnlab::test;

namespace {

struct DrawnLabel {
  QString text;
  double at;  // the tick's pixel along its axis, in the page's coordinates
};

// The labels an axis of a grid cell draws, read from the plot after a replot; checks that each
// lies inside its view (QCustomPlot leaves out a label that would leave the viewport) and that
// neighbours are at least a line of text apart.
std::vector<DrawnLabel> drawn_labels(HeatmapView* v, QCPAxis* ax) {
  std::vector<DrawnLabel> out;
  if (!ax->visible() || !ax->tickLabels()) return out;
  const QVector<double> ticks = ax->tickVector();
  const QVector<QString> texts = ax->tickVectorLabels();
  const int line = QFontMetrics(ax->tickLabelFont()).height();
  const bool x = ax->orientation() == Qt::Horizontal;
  const int extent = x ? v->plot()->width() : v->plot()->height();
  for (int k = 0; k < ticks.size(); ++k) {
    const double px = ax->coordToPixel(ticks[k]);
    CHECK(px - line / 2.0 >= -1);  // the label's text fits inside the view
    CHECK(px + line / 2.0 <= extent + 1);
    if (k > 0) CHECK(std::fabs(px - ax->coordToPixel(ticks[k - 1])) >= line);
    const QPoint origin = v->mapTo(v->parentWidget(), v->plot()->pos());
    out.push_back({texts[k], px + (x ? origin.x() : origin.y())});
  }
  return out;
}

}  // namespace

TEST_CASE("the heads grid shares its token axes: every token named once per grid row and column, none overlap",
          "[ui][heatmap][labels]") {
  struct Case {
    int heads, tokens;
    QSize size;
  };
  // the sizes: 12 heads (MiniLM's) with a 16-token pair at 1280x720 and 24 tokens at
  // 1600x1000, 8 heads (the default model's) with 11, 4 heads (a GPT-2-like) with 20
  for (const Case& k : {Case{12, 16, {1280, 720}}, Case{12, 24, {1600, 1000}}, Case{8, 11, {1280, 720}},
                        Case{4, 20, {1280, 720}}, Case{8, 11, {1600, 1000}}}) {
    CAPTURE(k.heads, k.tokens, k.size.width());
    MainWindow w;
    w.useModel(test_model(64, k.heads), "test");
    w.resize(k.size);
    w.show();
    ExploreView* e = w.explore();
    std::string text;
    for (int t = 0; t < k.tokens; ++t) text += static_cast<char>('a' + t % 26);
    e->setText(QString::fromStdString(text));
    e->flush();
    QApplication::processEvents();
    HeadsPage* page = e->headsPage();
    const HeadGridPlan plan = page->plan();
    REQUIRE(e->headCount() == k.heads);
    REQUIRE(plan.cols * plan.rows >= k.heads);
    const QStringList want = e->headView(0)->data().row_labels;
    REQUIRE(want.size() == k.tokens);
    // every grid row names every query (left side, and the right side when labels alternate);
    // every grid column names every key (below, and above when they alternate)
    for (int r = 0; r < plan.rows; ++r) {
      QStringList named;
      for (int h = r * plan.cols; h < std::min(k.heads, (r + 1) * plan.cols); ++h) {
        HeatmapView* v = e->headView(h);
        v->plot()->replot();
        for (QCPAxis* ax : {v->plot()->yAxis, v->plot()->yAxis2})
          for (const DrawnLabel& l : drawn_labels(v, ax)) named << l.text;
        // no key labels inside the grid: only under a column's lowest map (and above the first row)
        if (h + plan.cols < k.heads) CHECK(drawn_labels(v, v->plot()->xAxis).empty());
        if (h % plan.cols != 0) CHECK(drawn_labels(v, v->plot()->yAxis).empty());
      }
      std::sort(named.begin(), named.end());
      QStringList sorted = want;
      std::sort(sorted.begin(), sorted.end());
      CHECK(named == sorted);
    }
    for (int c = 0; c < plan.cols; ++c) {
      QStringList named;
      for (int h = c; h < k.heads; h += plan.cols)
        for (QCPAxis* ax : {e->headView(h)->plot()->xAxis, e->headView(h)->plot()->xAxis2})
          for (const DrawnLabel& l : drawn_labels(e->headView(h), ax)) named << l.text;
      std::sort(named.begin(), named.end());
      QStringList sorted = e->headView(0)->data().col_labels;
      std::sort(sorted.begin(), sorted.end());
      CHECK(named == sorted);
    }
    // one title style for the grid ("h2 · prev" never beside "head 3"), and no cell draws a colour
    // bar of its own (the grid has one)
    std::set<bool> short_titles;
    for (int h = 0; h < k.heads; ++h) {
      QCustomPlot* p = e->headView(h)->plot();
      for (int r = 0; r < p->plotLayout()->rowCount(); ++r)
        if (auto* t = qobject_cast<QCPTextElement*>(p->plotLayout()->element(r, 0)))
          short_titles.insert(!t->text().startsWith("head "));
      for (QCPColorScale* s : p->findChildren<QCPColorScale*>()) CHECK_FALSE(s->visible());
    }
    CHECK(short_titles.size() == 1);
    // the maps: all one size, square cells, side by side without overlapping
    for (int h = 0; h < k.heads; ++h) {
      const QRect m = e->headView(h)->mapRect();
      CHECK(std::abs(m.width() - plan.map_w) <= 2);
      CHECK(std::abs(m.height() - plan.map_h) <= 2);
      CHECK(m.width() == Approx(m.height()).epsilon(0.1));
    }
    CHECK(page->rowTitle() == "queries");  // nothing skipped, so nothing said
  }
}

TEST_CASE("the heads grid keeps each map's shape and balances its rows; long inputs say what they skip",
          "[ui][heatmap][layout]") {
  for (const QSize size : {QSize(1280, 720), QSize(1600, 1000)})
    for (const int n : {1, 7, 60, 577}) {
      CAPTURE(size.width(), n);
      MainWindow w;
      w.useModel(test_model(1024, 4), "test");
      w.resize(size);
      w.show();
      ExploreView* e = w.explore();
      std::string text;
      for (int t = 0; t < n; ++t) text += static_cast<char>('a' + t % 26);
      e->setText(QString::fromStdString(text));
      e->flush();
      QApplication::processEvents();
      const HeadGridPlan plan = e->headsPage()->plan();
      // 4 heads: full rows, never 3 + 1; 2 x 2 where that costs less than 30% of the maps' area
      // (1600x1000); at 1280x720 2 x 2 maps would be a fifth smaller a side than 4 in a row
      CHECK(plan.cols * plan.rows == 4);
      if (size.width() == 1600) CHECK(plan.cols == 2);
      for (int h = 0; h < e->headCount(); ++h) {
        const QRect m = e->headView(h)->mapRect();
        CHECK(m.width() == Approx(m.height()).epsilon(0.1));  // T = S: square within 10%
        CHECK(m.width() >= 100);                              // the maps take the page
      }
      if (n == 577) {
        CHECK(e->headsPage()->rowTitle().contains("every"));  // 577 names cannot all fit
        CHECK(e->headsPage()->colTitle().contains("max of"));
      }
    }
  // a rectangular map (cross attention, 6 queries x 3 keys) keeps its 2:1 shape
  MainWindow w;
  w.useModel(test_model(64, 4), "test");
  w.resize(1280, 720);
  w.show();
  w.explore()->setText("abcdef");
  w.explore()->setCrossText("xyz");
  w.explore()->flush();
  QApplication::processEvents();
  const QRect m = w.explore()->headView(0)->mapRect();
  CHECK(m.height() == Approx(2.0 * m.width()).epsilon(0.1));
  // the layout alone: 12 maps 4 x 3 or 6 x 2, 8 maps 4 x 2, 4 maps 2 x 2, 1 map 1 x 1
  for (const QSize room : {QSize(900, 420), QSize(1200, 700), QSize(700, 700)}) {
    CAPTURE(room.width(), room.height());
    const HeadGridPlan p12 = plan_head_grid(12, 16, 16, room, 18, 8);
    CHECK(p12.cols * p12.rows == 12);
    CHECK(std::abs(p12.cols - p12.rows) <= 4);
    const HeadGridPlan p4 = plan_head_grid(4, 100, 100, room, 18, 8);
    CHECK((p4.cols == 2 && p4.rows == 2));
    const HeadGridPlan p8 = plan_head_grid(8, 10, 10, room, 18, 8);
    CHECK(p8.cols * p8.rows == 8);
    CHECK(plan_head_grid(1, 5, 5, room, 18, 8).cols == 1);
  }
}

TEST_CASE("a one-token-wide diagonal stays one unbroken line at every size (pooled by max, never dropped)",
          "[ui][heatmap][pooling]") {
  for (const int T : {512, 2048})
    for (const bool shared : {false, true})
      for (const QSize size : {QSize(90, 90), QSize(160, 140), QSize(300, 260), QSize(430, 400), QSize(700, 640)}) {
        if (!shared && size.width() < 120) continue;  // a view with its own labels and colour bar needs more
        CAPTURE(T, shared, size.width());
        // a previous-token head: query i attends to key i - 1 (query 0 to itself)
        std::vector<float> v(static_cast<size_t>(T) * T, 0.0f);
        for (int i = 0; i < T; ++i) v[static_cast<size_t>(i) * T + std::max(0, i - 1)] = 1.0f;
        HeatmapView view;
        view.setMaxCells(256);
        if (shared) {
          SharedAxes axes;
          axes.on = true;
          view.setSharedAxes(axes);
        }
        view.setData(owned_heatmap(std::move(v), {}, T, T, 256));  // the worker's 256-cell grid
        view.resize(size);
        view.show();
        QApplication::processEvents();
        const QRect m = view.mapRect();
        REQUIRE(m.width() > 10);
        // the drawn grid is no finer than the map's pixels, so no row or column is dropped
        CHECK(view.drawnSize().width() <= m.width());
        CHECK(view.drawnSize().height() <= m.height());
        const QImage img = view.plot()->toPixmap(view.plot()->width(), view.plot()->height()).toImage();
        const QRect in = m.translated(-view.plot()->pos()).adjusted(1, 1, -1, -1);
        const double cell = in.width() / static_cast<double>(view.drawnSize().width());
        // the measure: no run of empty pixel rows longer than one pooled cell, no sideways
        // jump longer than one cell between neighbouring rows
        int last = -1, run = 0, longest_gap = 0, jumps = 0;
        for (int y = in.top(); y <= in.bottom(); ++y) {
          int lo = -1;
          for (int x = in.left(); x <= in.right(); ++x)
            if (qGray(img.pixel(x, y)) > 150) {  // viridis' top is light yellow, its bottom dark purple
              lo = x;
              break;
            }
          if (lo < 0) {
            longest_gap = std::max(longest_gap, ++run);
            continue;
          }
          run = 0;
          if (last >= 0 && std::abs(lo - last) > cell + 2) ++jumps;
          last = lo;
        }
        CHECK(longest_gap <= std::max(1.0, cell));
        // the corner cell (query 0 on key 0) is not under an axis line or tick: its first pixels show it
        const QRect corner = m.translated(-view.plot()->pos());
        bool lit = false;
        for (int dy = 0; dy < 2; ++dy)
          for (int dx = 0; dx < 2; ++dx) lit |= qGray(img.pixel(corner.left() + dx, corner.top() + dy)) > 150;
        CHECK(lit);
        CHECK(jumps == 0);
        const int gaps = longest_gap > std::max(1.0, cell);
        if (gaps || jumps) img.save(QString("/tmp/diag_%1_%2_%3.png").arg(T).arg(shared).arg(size.width()));
      }
}

TEST_CASE("zooming a long map shows finer cells and more labels; zooming out pools it again", "[ui][heatmap][zoom]") {
  const int T = 512;
  std::vector<float> v(static_cast<size_t>(T) * T, 0.0f);
  for (int i = 0; i < T; ++i) v[static_cast<size_t>(i) * T + std::max(0, i - 1)] = 1.0f;
  QStringList labels;
  for (int i = 0; i < T; ++i) labels << QString("t%1").arg(i);
  HeatmapData d = owned_heatmap(std::move(v), {}, T, T, 1024);  // full resolution, as the Head tab asks
  d.row_labels = d.col_labels = labels;
  HeatmapView view;
  view.setMaxCells(1024);
  view.setData(d);
  view.resize(420, 380);
  view.show();
  QApplication::processEvents();
  const QSize whole = view.poolFactors();
  CHECK(whole.width() > 1);  // 512 tokens in a map of ~300 px: pooled to its pixels
  auto visible_ticks = [&](QCPAxis* ax) {
    int n = 0;
    for (double t : ax->tickVector()) n += ax->range().contains(t);
    return n;
  };
  const int ticks_whole = visible_ticks(view.plot()->xAxis);
  // the user zooms to the first 40 tokens of both axes (what the wheel does to the ranges)
  view.plot()->xAxis->setRange(-0.5, 40.0 / whole.width() - 0.5);
  view.plot()->yAxis->setRange(-0.5, 40.0 / whole.height() - 0.5);
  QApplication::processEvents();
  QApplication::processEvents();
  CHECK(view.poolFactors() == QSize(1, 1));  // every token its own cell again
  const QCPRange xr = view.plot()->xAxis->range();
  CHECK(xr.lower == Approx(-0.5).margin(0.01));  // the same window, in the new grid's cells
  CHECK(xr.upper == Approx(39.5).margin(0.01));
  CHECK(visible_ticks(view.plot()->xAxis) > ticks_whole / 2);  // labels appear as they fit
  QStringList shown;
  for (const QString& l : view.plot()->xAxis->tickVectorLabels()) shown << l;
  CHECK(shown.join(" ").contains("t3"));
  // zoomed out past the whole map: pooled to the pixels again
  view.plot()->xAxis->setRange(-10, 1000);
  view.plot()->yAxis->setRange(-10, 1000);
  QApplication::processEvents();
  QApplication::processEvents();
  CHECK(view.poolFactors() == whole);
}

TEST_CASE("axis titles fit their axis (the tooltip says them whole); an emptied map drops its title", "[ui][heatmap]") {
  const int T = 2048;
  std::vector<float> v(static_cast<size_t>(T) * 3, 0.5f);
  HeatmapData d = owned_heatmap(std::move(v), {}, T, 3, 256);  // 2,048 queries pooled, 3 keys
  for (int i = 0; i < T; ++i) d.row_labels << QString("q%1").arg(i);
  d.col_labels = QStringList{"a", "b", "c"};
  d.title = "layer 0: attention from the (sum)";
  HeatmapView view;
  view.setMaxCells(256);
  view.setData(d);
  for (const QSize size : {QSize(260, 240), QSize(300, 700), QSize(900, 330)}) {
    CAPTURE(size.width(), size.height());
    view.resize(size);
    view.show();
    QApplication::processEvents();
    QCustomPlot* p = view.plot();
    p->replot();
    const QRect ar = p->axisRect()->rect();
    const QFontMetrics fm(p->yAxis->labelFont());
    if (!p->yAxis->label().isEmpty()) CHECK(fm.horizontalAdvance(p->yAxis->label()) <= ar.height());
    if (!p->xAxis->label().isEmpty()) CHECK(fm.horizontalAdvance(p->xAxis->label()) <= ar.width());
    CHECK(
        (p->yAxis->label() + view.toolTip()).contains("max of"));  // the pooling is said, on the axis or in the tooltip
  }
  view.setData({});
  QApplication::processEvents();
  bool stale = false;
  for (int r = 0; r < view.plot()->plotLayout()->rowCount(); ++r)
    if (auto* t = qobject_cast<QCPTextElement*>(view.plot()->plotLayout()->element(r, 0)))
      stale |= !t->text().isEmpty();
  CHECK_FALSE(stale);
}

namespace {

// A causal "result" of T tokens whose head h's row i depends on (h, i, j) only, not on T: the
// rows a longer text shares with a shorter one are equal, as a causal model's are.
std::shared_ptr<const ForwardResult> causal_result(int T, int H) {
  auto r = std::make_shared<ForwardResult>();
  r->ids.assign(static_cast<size_t>(T), 3);
  r->tokens.assign(static_cast<size_t>(T), "t");
  Tensor p({H, T, T});
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < T; ++i) {
      float* row = p.ptr() + (static_cast<int64_t>(h) * T + i) * T;
      double sum = 0;
      for (int j = 0; j <= i; ++j) sum += row[j] = static_cast<float>(1 + (h * 7 + i * 13 + j * 29) % 31);
      for (int j = 0; j <= i; ++j) row[j] = static_cast<float>(row[j] / sum);
    }
  r->attention.push_back(std::move(p));
  r->mask.T = r->mask.S = T;
  r->mask.blocked.assign(static_cast<size_t>(T) * T, 0);
  for (int i = 0; i < T; ++i)
    for (int j = i + 1; j < T; ++j) r->mask.blocked[static_cast<size_t>(i) * T + j] = 1;
  return r;
}

}  // namespace

TEST_CASE("a map extended from the last pass's drawn rows equals one drawn whole", "[ui][heatmap]") {
  const int H = 3, cells = 256;
  // (earlier text, text, first row read): one cell a token, two tokens a cell (300 > 256), the
  // columns growing by a drawn cell, and first at the start of a pooled row
  for (const auto& [before, after, first] : {std::tuple{30, 33, 16}, {300, 305, 288}, {301, 306, 288}, {90, 90, 64}}) {
    CAPTURE(before, after, first);
    const auto last = causal_result(before, H), now = causal_result(after, H);
    const auto rows = now->layer_rows(0, first);
    for (int h = 0; h < H; ++h) {
      const HeatmapData old = head_heatmap(last, 0, h, cells);
      REQUIRE(extends(old, after, after, cells, first));
      const HeatmapData grown = head_heatmap_rows(now, 0, h, cells, rows, first, &old);
      const HeatmapData whole = head_heatmap(now, 0, h, cells);
      REQUIRE(grown.drawn_rows == whole.drawn_rows);
      REQUIRE(grown.drawn_cols == whole.drawn_cols);
      CHECK(grown.row_factor == whole.row_factor);
      CHECK(grown.vmax == whole.vmax);
      for (size_t k = 0; k < whole.drawn.size(); ++k) {
        CAPTURE(k);
        if (std::isnan(whole.drawn[k]))
          CHECK(std::isnan(grown.drawn[k]));
        else
          CHECK(grown.drawn[k] == whole.drawn[k]);
      }
      CHECK(grown.values == whole.values);  // kept: the result's own values
    }
  }
  // another pooling (255 tokens one a cell, 260 two), or first inside a pooled row: not extended
  CHECK_FALSE(extends(head_heatmap(causal_result(255, 1), 0, 0, cells), 260, 260, cells, 240));
  CHECK_FALSE(extends(head_heatmap(causal_result(300, 1), 0, 0, cells), 305, 305, cells, 287));
  CHECK_FALSE(extends(head_heatmap(causal_result(40, 1), 0, 0, cells), 60, 60, cells, 48));  // past its rows
  const auto now = causal_result(40, 1);
  CHECK_THROWS_WITH(head_heatmap_rows(now, 0, 0, cells, now->layer_rows(0, 16), 16, nullptr),
                    Catch::Contains("needs the map above them"));
}

TEST_CASE("the heads grid's colour bar spans the maps and draws every tick label, in each scale mode",
          "[ui][heatmap][scale]") {
  for (const QSize size : {QSize(1280, 720), QSize(1600, 1000)}) {
    MainWindow w;
    w.resize(size);
    w.useModel(test_model(64, 8), "test");
    w.show();
    ExploreView* e = w.explore();
    e->setText("the film was not");
    e->flush();
    REQUIRE(e->showPage("heads"));
    auto* mode = e->findChild<QComboBox*>("colourScale");
    REQUIRE(mode);
    HeadsPage* page = e->headsPage();
    for (const QString m : {"per head", "per layer", "shared 0-1"}) {
      INFO(m.toStdString() << " at " << size.width());
      mode->setCurrentText(m);
      QApplication::processEvents();
      QCPColorScale* bar = page->colourBar();
      QCustomPlot* plot = bar->parentPlot();
      plot->replot();
      QCPAxis* ax = bar->axis();
      // the bar from the first row's map top to the last row's map bottom (it stopped 6 px short)
      const QRect r = ax->axisRect()->rect().translated(plot->mapTo(page, QPoint(0, 0)));
      int top = 1 << 30, bottom = -1;
      for (int h = 0; h < e->headCount(); ++h) {
        const QRect mr = e->headView(h)->mapRect().translated(e->headView(h)->mapTo(page, QPoint(0, 0)));
        top = std::min(top, mr.top()), bottom = std::max(bottom, mr.bottom());
      }
      CHECK(std::abs(r.top() - top) <= 1);
      CHECK(std::abs(r.bottom() - bottom) <= 1);
      // every tick label inside the bar's widget: QCustomPlot leaves out one that crosses its edge
      // (per head's "0" and "max", at the bar's ends, were never drawn)
      const QVector<double> ticks = ax->tickVector();
      REQUIRE(ticks.size() >= 2);
      const int line = QFontMetrics(ax->tickLabelFont()).height();
      for (double t : ticks) {
        const double px = ax->coordToPixel(t);
        CHECK(px - line / 2.0 >= 0);
        CHECK(px + line / 2.0 <= plot->height());
      }
      if (m == "per head") CHECK(ax->tickVectorLabels() == QVector<QString>{"0", "max"});
      // over the maps' widgets (their margins hid its frame but at the row gaps)
      const QWidgetList kids = [&] {
        QWidgetList l;
        for (QObject* o : page->children())
          if (auto* wd = qobject_cast<QWidget*>(o)) l.push_back(wd);
        return l;
      }();
      CHECK(kids.indexOf(plot) > kids.indexOf(e->headView(e->headCount() - 1)));
    }
  }
}
