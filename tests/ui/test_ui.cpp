// UI tests (offscreen Qt, QTest input): typing, masks, the mask editor, layers, cross mode,
// long inputs, export files, a broken model folder, and the token model's contract (the forward
// runner's tests are in test_ui_runner.cpp).
#include <QAbstractItemModelTester>
#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QImage>
#include <QLabel>
#include <QMenuBar>
#include <QLineEdit>
#include <QListView>
#include <QListWidget>
#include <QTabWidget>
#include <QStatusBar>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QSignalSpy>
#include <QDockWidget>
#include <QSplitter>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>
#include <qcustomplot.h>
#include <QThread>
#include <QTimer>
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>
#include <thread>

#include "engine/analysis/methods.h"
#include "engine/compute/forward.h"
#include "engine/formats/attention_file.h"
#include "engine/compute/lm.h"
#include "engine/core/memory.h"
#include "engine/formats/npy.h"
#include "engine/compute/ops.h"
#include "engine/train/trainer.h"
#include "ui/colormaps.h"
#include "ui/explore_view.h"
#include "ui/explore/heads_page.h"
#include "ui/heatmap_view.h"
#include "ui/tour.h"
#include "ui/train_view.h"
#include "ui/forward_runner.h"
#include "ui/heatmap_view.h"
#include "ui/line_view.h"
#include "ui/main_window.h"
#include "ui/mask_editor.h"
#include "ui/token_model.h"
#include "tests/engine/hf_test_model.h"
#include "tests/engine/pass_bound.h"
#include "tests/ui/ui_test_util.h"

using namespace attnlab;
using namespace attnlab::test;

TEST_CASE("typing updates the tokens and every head's heatmap", "[ui]") {
  MainWindow w;
  w.useModel(test_model(), "test");
  ExploreView* e = w.explore();
  auto* edit = e->findChild<QLineEdit*>("text");
  REQUIRE(edit);
  QTest::keyClicks(edit, "abc");
  e->flush();
  CHECK(e->tokenModel()->rowCount() == 3);
  for (int h = 0; h < e->headCount(); ++h) {
    CHECK(e->headView(h)->data().rows == 3);
    CHECK(e->headView(h)->data().cols == 3);
  }
  const float before = e->headView(0)->data().value(0, 0);
  QTest::keyClicks(edit, "de");
  e->flush();
  CHECK(e->tokenModel()->rowCount() == 5);
  for (int h = 0; h < e->headCount(); ++h) CHECK(e->headView(h)->data().rows == 5);
  CHECK(e->headView(0)->data().value(0, 0) != before);  // five keys now share query 0's attention
}

TEST_CASE("toggling causal zeros the upper triangle of the displayed data", "[ui][masks]") {
  MainWindow w;
  w.useModel(test_model(), "test");
  ExploreView* e = w.explore();
  e->setText("hello");
  e->flush();
  const HeatmapData& d0 = e->headView(1)->data();
  CHECK(d0.value(0, 1) > 0.0f);  // query 0 sees key 1 without a mask
  QTest::mouseClick(checkbox(e, "causal"), Qt::LeftButton);
  e->flush();
  for (int h = 0; h < e->headCount(); ++h) {
    const HeatmapData& d = e->headView(h)->data();
    for (int i = 0; i < d.rows; ++i)
      for (int j = i + 1; j < d.cols; ++j) {
        CHECK(d.value(i, j) == 0.0f);
        CHECK(d.is_blocked(i, j));
      }
  }
  CHECK(e->maskArgs().contains("causal"));
}

TEST_CASE("a click in the mask editor blocks that cell and the heads change", "[ui][masks]") {
  MainWindow w;
  w.resize(1200, 900);
  w.useModel(test_model(), "test");
  w.show();
  ExploreView* e = w.explore();
  e->setText("abcd");
  e->flush();
  REQUIRE(e->showPage("mask"));
  CHECK(e->tabs()->currentWidget() == e->maskEditor());
  CHECK_FALSE(e->showPage("no such page"));
  QApplication::processEvents();
  MaskEditor* m = e->maskEditor();
  REQUIRE(m->rows() == 4);
  const float before = e->headView(0)->data().value(2, 0);
  QTest::mouseClick(m->gridWidget(), Qt::LeftButton, {}, m->cellCenter(2, 1));
  e->flush();
  CHECK(m->blocked(0, 2, 1));
  CHECK(checkbox(e, "custom (mask editor)")->isChecked());
  for (int h = 0; h < e->headCount(); ++h) {
    CHECK(e->headView(h)->data().value(2, 1) == 0.0f);
    CHECK(e->result()->mask.is_blocked(h, 2, 1));
  }
  CHECK(e->headView(0)->data().value(2, 0) != before);  // renormalised without key 1
  m->undoStack()->undo();                               // undo unblocks it again
  e->flush();
  CHECK_FALSE(m->blocked(0, 2, 1));
  CHECK(e->headView(0)->data().value(2, 1) > 0.0f);
  // one head only
  m->setTargetHead(3);
  m->applyPreset(MaskEditor::Preset::Band, 1);
  e->flush();
  CHECK(e->result()->mask.is_blocked(3, 0, 3));
  CHECK_FALSE(e->result()->mask.is_blocked(0, 0, 3));
}

TEST_CASE("layers, cross-attention and long inputs", "[ui]") {
  MainWindow w;
  w.useModel(test_model(2048), "test");
  ExploreView* e = w.explore();
  e->setText("abcdef");
  e->flush();
  const float layer0 = e->headView(0)->data().value(1, 1);
  e->setLayer(1);
  CHECK(e->layer() == 1);
  CHECK(e->headView(0)->data().value(1, 1) != layer0);
  e->setLayer(7);  // clamped
  CHECK(e->layer() == 1);

  e->setCrossText("xyz");
  e->flush();
  CHECK(e->headView(0)->data().rows == 6);
  CHECK(e->headView(0)->data().cols == 3);
  e->setCrossText("");
  e->flush();

  std::string text;
  for (int k = 0; k < 2048; ++k) text += static_cast<char>('a' + k % 26);
  e->setText(QString::fromStdString(text));
  e->flush();
  REQUIRE(e->result());
  CHECK(e->result()->ids.size() == 2048);
  CHECK(e->headView(0)->data().rows == 2048);
  CHECK(e->headView(0)->drawnSize().width() <= 256);  // downsampled for display
  text += "zz";                                       // past max_len: cut, with a notice
  e->setText(QString::fromStdString(text));
  e->flush();
  CHECK(e->result()->ids.size() == 2048);
}

TEST_CASE("export writes valid PNG, SVG, PDF, CSV and .npy files", "[ui][export]") {
  MainWindow w;
  w.useModel(test_model(), "test");
  ExploreView* e = w.explore();
  e->setText("the cat");
  e->flush();
  QTemporaryDir dir;
  const QString png = dir.filePath("head.png"), svg = dir.filePath("layer.svg"), pdf = dir.filePath("all.pdf");
  e->exportTo(png, 0, 1);
  e->exportTo(svg, 1, -1);
  e->exportTo(pdf, -1, -1);
  CHECK(head_bytes(png, 8) == QByteArray("\x89PNG\r\n\x1a\n", 8));
  QImage img(png);
  CHECK(img.width() > 200);
  CHECK(head_bytes(pdf, 5) == "%PDF-");
  QFile s(svg);
  REQUIRE(s.open(QIODevice::ReadOnly));
  CHECK(s.readAll().contains("<svg"));
  const QString csv = dir.filePath("p.csv"), npy = dir.filePath("p.npy");
  e->exportTo(csv, 0, -1);
  QFile c(csv);
  REQUIRE(c.open(QIODevice::ReadOnly));
  const QList<QByteArray> lines = c.readAll().split('\n');
  CHECK(lines[0] == "layer,head,query_index,query_token,key_index,key_token,probability,blocked");
  CHECK(lines.size() == 1 + 4 * 7 * 7 + 1);
  e->exportTo(npy, -1, -1);
  const NpyArray a = load_npy(npy.toStdString());
  CHECK(a.tensor.shape == std::vector<int64_t>{2, 4, 7, 7});
  const QString npz = dir.filePath("p.npz");  // an attention file: reopened, the same probabilities
  e->exportTo(npz, -1, -1);
  const AttentionFile f = load_attention_file(npz.toStdString());
  REQUIRE(f.num_layers() == 2);
  CHECK(f.tokens.size() == 7);
  for (size_t l = 0; l < 2; ++l)  // the .npy export's layer l, value for value
    CHECK(std::equal(f.layers[l].data.begin(), f.layers[l].data.end(), a.tensor.data.begin() + l * 4 * 7 * 7));
  CHECK_THROWS_WITH(e->exportTo(npz, 0, 1), Catch::Contains("every head"));
  CHECK_THROWS_WITH(e->exportTo(dir.filePath("x.bmp"), 0, 0), Catch::Contains("unknown export format"));
  CHECK_THROWS_WITH(e->exportTo(png, 5, 0), Catch::Contains("layer 5 does not exist"));
  CHECK_FALSE(QFile::exists(dir.filePath("x.bmp")));
}

TEST_CASE("a long input's export is max-pooled per axis as on screen, and says so", "[ui][export][pooling]") {
  MainWindow w;
  w.useModel(test_model(2048), "test");
  ExploreView* e = w.explore();
  std::string text;
  for (int k = 0; k < 600; ++k) text += static_cast<char>('a' + k % 26);
  e->setText(QString::fromStdString(text));
  e->setCrossText("wxyz");  // 600 queries x 4 keys: only the queries are pooled
  e->flush();
  QTemporaryDir dir;
  const QString png = dir.filePath("long.png");
  e->exportTo(png, 0, 0);
  // the panel is drawn from 256 x 4 pooled cells: its brightest pixels are as bright as the
  // pooled maximum's colour (a cell-by-cell drawing would be averaged down by the image)
  QImage img(png);
  REQUIRE(!img.isNull());
  const QString svg = dir.filePath("long.svg");
  e->exportTo(svg, 0, 0);
  QFile s(svg);
  REQUIRE(s.open(QIODevice::ReadOnly));
  const QByteArray doc = s.readAll();
  CHECK(doc.contains("max of 3 per cell"));  // 600 queries -> ceil(600 / 256) = 3
  CHECK_FALSE(doc.contains("key (max of"));  // 4 keys: not pooled
}

TEST_CASE("a broken model folder shows a message and keeps the current model", "[ui][errors]") {
  MainWindow w;
  w.useModel(test_model(), "test");
  const Model* before = w.explore()->model();
  QTemporaryDir dir;
  QFile f(dir.filePath("config.json"));
  REQUIRE(f.open(QIODevice::WriteOnly));
  f.write("{ not json");
  f.close();
  CHECK_FALSE(w.openModel(dir.path()));
  CHECK(w.explore()->model() == before);
  CHECK(w.statusBar()->currentMessage().contains("not valid JSON"));
}

TEST_CASE("the token model passes QAbstractItemModelTester and drives global tokens", "[ui][models]") {
  TokenListModel m;
  QAbstractItemModelTester tester(&m, QAbstractItemModelTester::FailureReportingMode::Fatal);
  m.setTokens({"a", "b", "[UNK]"}, {3, 4, 1}, {false, false, true});
  CHECK(m.rowCount() == 3);
  CHECK(m.data(m.index(2), TokenListModel::UnknownRole).toBool());
  CHECK(m.setData(m.index(1), Qt::Checked, Qt::CheckStateRole));
  CHECK(m.globalPositions() == std::vector<int>{1});
  m.setTokens({"a"}, {3}, {false});  // position 1 no longer exists
  CHECK(m.globalPositions().empty());
}

TEST_CASE("closing the window during a long forward pass is clean", "[ui][errors]") {
  auto* w = new MainWindow;
  w->useModel(test_model(2048), "test");
  std::string text;
  for (int k = 0; k < 2048; ++k) text += static_cast<char>('a' + k % 26);
  w->explore()->setText(QString::fromStdString(text));  // starts a pass on the worker thread
  QElapsedTimer timer;
  timer.start();
  w->close();
  delete w;  // waits for the worker, drops its result; nothing touches the deleted widgets
  CHECK(timer.elapsed() < 10000);
}

TEST_CASE("settings keep the text, masks, layer and backend between runs", "[ui][settings]") {
  {
    MainWindow w;
    w.useModel(test_model(), "test");
    w.explore()->setText("kept text");
    w.explore()->setMaskArgs({"causal", "window:5"});
    w.explore()->flush();
    w.explore()->setLayer(1);
    w.setBackend("reference");
    w.tabs()->setCurrentWidget(w.train());
    w.saveSettings();
  }
  MainWindow w2;
  w2.useModel(test_model(), "test");
  w2.restoreSettings();
  CHECK(w2.explore()->text() == "kept text");
  CHECK(w2.explore()->maskArgs() == QStringList{"causal", "window:5"});
  CHECK(w2.explore()->layer() == 1);
  CHECK(w2.explore()->backend() == "reference");
  CHECK(w2.tabs()->currentWidget() == w2.train());  // the tab by name, not by index
  QSettings().clear();
}

TEST_CASE("heatmap pooling: max of each block, all-blocked blocks, the colour-scale maximum", "[ui][heatmap]") {
  // 5 x 7 values v(i, j) = (i * 7 + j) / 100, pooled to at most 3 cells per axis, each axis by
  // its own factor: rows in blocks of 2 ({0,1}, {2,3}, {4}), columns in blocks of 3 ({0-2},
  // {3-5}, {6}); each drawn cell the largest visible value of its block.
  std::vector<float> v(35);
  for (int k = 0; k < 35; ++k) v[static_cast<size_t>(k)] = static_cast<float>(k) / 100.0f;
  std::vector<uint8_t> blocked(35, 0);
  for (int i = 0; i < 3; ++i)
    for (int j = 3; j < 6; ++j) blocked[static_cast<size_t>(i * 7 + j)] = 1;  // rows 0-2, cols 3-5
  blocked[34] = 1;                                                            // the largest value, blocked
  const HeatmapData d = owned_heatmap(v, blocked, 5, 7, 3);
  REQUIRE(d.row_factor == 2);
  REQUIRE(d.col_factor == 3);
  REQUIRE(d.drawn_rows == 3);
  REQUIRE(d.drawn_cols == 3);
  auto drawn = [&](int r, int c) { return d.drawn[static_cast<size_t>(r * 3 + c)]; };
  // A drawn cell is one of the floats k / 100.0f (a maximum picks one, unchanged), the same float
  // as the literal: exact; Approx's default (100 float epsilons relative) is only a formality.
  CHECK(drawn(0, 0) == Approx(0.09f));  // rows 0-1, cols 0-2: v(1, 2)
  CHECK(std::isnan(drawn(0, 1)));       // every cell blocked: NaN, drawn as blocked, never as 0
  CHECK(drawn(0, 2) == Approx(0.13f));  // rows 0-1, col 6
  CHECK(drawn(1, 1) == Approx(0.26f));  // rows 2-3, cols 3-5: row 2 blocked, v(3, 5)
  CHECK(drawn(2, 1) == Approx(0.33f));  // row 4, cols 3-5
  CHECK(std::isnan(drawn(2, 2)));       // row 4, col 6: its one cell (the largest value) blocked
  CHECK(d.vmax == Approx(0.33f));       // the colour scale's top: the largest *visible* value
  // Pooling the drawn grid again keeps the same rules (NaN only where everything is blocked).
  HeatmapData e = d;
  pool_drawn(e, 1);
  REQUIRE(e.drawn.size() == 1u);
  CHECK(e.drawn[0] == Approx(0.33f));
  // a long-and-narrow cross map pools only its long axis: 40 queries x 4 keys to 8 cells -> 8 x 4
  const HeatmapData narrow = owned_heatmap(std::vector<float>(160, 0.25f), {}, 40, 4, 8);
  CHECK(narrow.row_factor == 5);
  CHECK(narrow.col_factor == 1);
  CHECK(narrow.drawn_rows == 8);
  CHECK(narrow.drawn_cols == 4);
  HeatmapData all = owned_heatmap(std::vector<float>(4, 0.5f), std::vector<uint8_t>(4, 1), 2, 2, 1);
  CHECK(std::isnan(all.drawn[0]));
  CHECK(all.vmax == 0.0f);
  // A causal map's first query sees one key and gives it 1: the colour scale's top is the largest
  // value of the queries that see more (else every causal map is dark but for one cell), one a
  // cell and two rows a cell alike; a map whose every query sees one key keeps its largest value.
  std::vector<float> causal(16, 0.0f);
  std::vector<uint8_t> upper(16, 0);
  const float rows[4][4] = {{1, 0, 0, 0}, {0.3f, 0.7f, 0, 0}, {0.2f, 0.3f, 0.5f, 0}, {0.1f, 0.2f, 0.3f, 0.4f}};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      causal[static_cast<size_t>(i * 4 + j)] = rows[i][j];
      upper[static_cast<size_t>(i * 4 + j)] = j > i;
    }
  for (const int cells : {4, 2}) {
    CAPTURE(cells);
    const HeatmapData c = owned_heatmap(causal, upper, 4, 4, cells);
    CHECK(c.vmax == 0.7f);
    CHECK(c.drawn[0] == 1.0f);  // the cell itself is drawn as it is (at the top colour)
    HeatmapData further = c;
    pool_drawn(further, 1);
    CHECK(further.row_top == std::vector<float>{0.7f});
  }
  CHECK(owned_heatmap({0.2f, 1.0f, 0.5f}, {}, 3, 1, 3).vmax == 1.0f);  // one key each: the largest
}

namespace {

// The colour drawn at (i + di, j + dj) in cell units of a heatmap view (cell (i, j) spans
// i +- 0.5, j +- 0.5 when the cells line up with their labels).
QColor cell_pixel(HeatmapView* v, int i, int j, double di = 0, double dj = 0) {
  const QImage img = v->plot()->toPixmap().toImage();
  const double x = v->plot()->xAxis->coordToPixel(j + dj), y = v->plot()->yAxis->coordToPixel(i + di);
  return img.pixelColor(static_cast<int>(std::lround(x)), static_cast<int>(std::lround(y)));
}

int color_distance(const QColor& a, const QColor& b) {
  return std::abs(a.red() - b.red()) + std::abs(a.green() - b.green()) + std::abs(a.blue() - b.blue());
}

}  // namespace

TEST_CASE("heatmap pixels: 1 x 1 and 1 x 7 grids are drawn in their values' colours; blocked is no map colour",
          "[ui][heatmap][render]") {
  for (const QString& name : colormap_names()) {
    CAPTURE(name.toStdString());
    QCPColorGradient g = make_gradient(name);
    HeatmapView v;
    v.resize(400, 300);
    v.setGradient(name);
    v.show();
    // One token: a single cell, the top of the scale (its value is the maximum).
    v.setData(owned_heatmap({1.0f}, {}, 1, 1, 256));
    QApplication::processEvents();
    v.plot()->replot();
    for (const double d : {-0.4, 0.0, 0.4})
      CHECK(color_distance(cell_pixel(&v, 0, 0, d, d), QColor(g.color(1.0, QCPRange(0, 1)))) <= 12);
    // One query, seven keys, key 3 blocked: each cell its own colour on the 0..max scale.
    std::vector<float> vals = {0.05f, 0.1f, 0.2f, 0.0f, 0.15f, 0.3f, 0.2f};
    std::vector<uint8_t> blocked = {0, 0, 0, 1, 0, 0, 0};
    v.setData(owned_heatmap(vals, blocked, 1, 7, 256));
    QApplication::processEvents();
    v.plot()->replot();
    for (int j = 0; j < 7; ++j)
      for (const double dj : {-0.38, 0.0, 0.38})  // the whole cell, centred on its label: no shift
        for (const double di : {-0.38, 0.38}) {
          CAPTURE(j, dj, di);
          const QColor want = blocked[j] ? blocked_color(name) : QColor(g.color(vals[j], QCPRange(0, 0.3)));
          CHECK(color_distance(cell_pixel(&v, 0, j, di, dj), want) <= 12);  // the gradient draws 256 levels
        }
    // The blocked colour is far from every colour the map can draw (256 levels).
    int nearest = 1000;
    for (int k = 0; k <= 255; ++k)
      nearest = std::min(nearest, color_distance(QColor(g.color(k / 255.0, QCPRange(0, 1))), blocked_color(name)));
    CHECK(nearest >= 40);
  }
}

TEST_CASE("shortcuts act where the user works: Ctrl+Z after painting undoes the mask, Ctrl+E exports from the text box",
          "[ui][keys]") {
  MainWindow w;
  w.resize(1280, 720);
  w.useModel(test_model(), "test");
  w.show();
  QApplication::setActiveWindow(&w);
  ExploreView* e = w.explore();
  auto* edit = e->findChild<QLineEdit*>("text");
  edit->setFocus();
  QTest::keyClicks(edit, "abcd");
  e->flush();
  REQUIRE(e->showPage("mask"));
  QApplication::processEvents();
  MaskEditor* m = e->maskEditor();
  edit->setFocus();  // the user typed, then paints without touching the keyboard
  QTest::mouseClick(m->gridWidget(), Qt::LeftButton, {}, m->cellCenter(2, 1));
  e->flush();
  REQUIRE(m->blocked(0, 2, 1));
  QWidget* focus = QApplication::focusWidget();
  REQUIRE(focus);
  QTest::keyClick(focus, Qt::Key_Z, Qt::ControlModifier);
  e->flush();
  CHECK(edit->text() == "abcd");  // the text is untouched
  REQUIRE(m->rows() == 4);
  CHECK_FALSE(m->blocked(0, 2, 1));  // and the mask edit is undone
  // Ctrl+E with the cursor in the text box reaches the window's export action (a dialog opens).
  edit->setFocus();
  bool dialog_seen = false;
  QTimer::singleShot(300, [&] {
    if (QWidget* modal = QApplication::activeModalWidget()) {
      dialog_seen = true;
      modal->close();
    }
  });
  QTest::keyClick(edit, Qt::Key_E, Qt::ControlModifier);
  QTest::qWait(400);
  CHECK(dialog_seen);
  CHECK(edit->text() == "abcd");
}

TEST_CASE("clearing the text clears the views, labels and token count", "[ui][stale]") {
  MainWindow w;
  w.useModel(test_model(), "test");
  ExploreView* e = w.explore();
  QString last_status;
  QObject::connect(e, &ExploreView::status, [&](const QString& s) { last_status = s; });
  e->setText("abcd");
  e->flush();
  REQUIRE(e->headView(0)->data().rows == 4);
  CHECK(last_status.contains("4 tokens"));
  // the pass's memory as estimated before it ran (engine/compute/forward.h)
  CHECK(
      last_status.contains("memory: weights " + QString::fromStdString(memory_text(weight_bytes(e->model()->config)))));
  CHECK(last_status.contains(", this pass "));
  e->setText("a");
  e->flush();
  CHECK(last_status.contains("| 1 token |"));
  e->setCrossText("xyz");
  e->flush();
  CHECK(last_status.contains("| 1 token attending to 3 |"));
  e->setCrossText("");
  e->flush();
  e->setText("");
  e->flush();
  CHECK(e->result() == nullptr);
  CHECK(e->tokenModel()->rowCount() == 0);
  for (int h = 0; h < e->headCount(); ++h) {
    CHECK(e->headView(h)->data().rows == 0);
    CHECK(e->headView(h)->data().row_labels.isEmpty());
  }
  CHECK_FALSE(last_status.contains("tokens"));
}

TEST_CASE("the window fits a 1280x720 screen on every tab", "[ui][layout]") {
  MainWindow w;
  w.useModel(test_model(), "test");
  w.explore()->setText("the film was not very good");
  w.explore()->flush();
  for (QWidget* tab : {static_cast<QWidget*>(w.explore()), static_cast<QWidget*>(w.train())}) {
    w.tabs()->setCurrentWidget(tab);
    w.resize(1280, 720);
    w.show();
    QApplication::processEvents();
    CAPTURE(tab->metaObject()->className(), w.minimumSizeHint().width(), w.minimumSizeHint().height());
    CHECK(w.minimumSizeHint().width() <= 1280);
    CHECK(w.minimumSizeHint().height() <= 720);
    CHECK(w.height() <= 720);
    CHECK(w.width() <= 1280);
  }
}

TEST_CASE("the Train tab fits beside the tour's panel at 1280x720: neither column scrolls sideways", "[ui][layout]") {
  MainWindow w;
  w.useModel(test_model(), "test");
  w.resize(1280, 720);
  w.show();
  REQUIRE(QTest::qWaitForWindowExposed(&w));
  w.showTour();  // opens on the Explore tab; its last step moves to the Train tab, beside the panel
  w.tabs()->setCurrentWidget(w.train());
  QTest::qWait(50);  // laid out in the room the panel leaves
  REQUIRE(w.findChild<QDockWidget*>("tourDock"));
  // the window's minimum is its widest page's (every tab's, Explore's Generate page among them) plus
  // the panel's: 1,294 px once pushed the window past the screen
  CAPTURE(w.minimumSizeHint().width(), w.train()->minimumSizeHint().width(), w.explore()->minimumSizeHint().width());
  CHECK(w.minimumSizeHint().width() <= 1280);
  CHECK(w.width() <= 1280);
  auto* split = w.train()->findChild<QSplitter*>("trainSplitter");
  REQUIRE(split);
  for (int i = 0; i < split->count(); ++i) {
    auto* area = qobject_cast<QScrollArea*>(split->widget(i));
    REQUIRE(area);
    CAPTURE(i, area->viewport()->width(), area->widget()->minimumSizeHint().width(), split->sizes());
    CHECK_FALSE(area->horizontalScrollBar()->isVisible());
    CHECK(area->widget()->width() <= area->viewport()->width());
  }
}

TEST_CASE("colour scale: per head, per layer, shared 0-1, on screen and in exports", "[ui][heatmap][scale]") {
  MainWindow w;
  w.useModel(test_model(), "test");
  ExploreView* e = w.explore();
  e->setText("abcdefgh");
  e->flush();
  auto* mode = e->findChild<QComboBox*>("colourScale");
  REQUIRE(mode);
  float layer_max = 0;
  for (int h = 0; h < e->headCount(); ++h) layer_max = std::max(layer_max, e->headView(h)->data().vmax);
  mode->setCurrentText("per head");
  bool some_differ = false;
  for (int h = 0; h < e->headCount(); ++h) {
    CHECK(e->headView(h)->colourTop() == e->headView(h)->data().vmax);
    some_differ |= e->headView(h)->colourTop() != layer_max;
  }
  CHECK(some_differ);  // otherwise this input would not tell the modes apart
  mode->setCurrentText("per layer");
  for (int h = 0; h < e->headCount(); ++h) CHECK(e->headView(h)->colourTop() == layer_max);
  mode->setCurrentText("shared 0-1");
  for (int h = 0; h < e->headCount(); ++h) CHECK(e->headView(h)->colourTop() == 1.0f);
}

TEST_CASE("line view: lines are the probabilities, hover keeps a token's lines, heads in colours, export",
          "[ui][lines]") {
  QTemporaryDir dir;
  MainWindow w;
  w.resize(1280, 720);
  w.useModel(test_model(), "test");
  w.show();
  ExploreView* e = w.explore();
  e->setText("abcdef");
  e->setMaskArgs({"causal"});
  e->flush();
  REQUIRE(e->showPage("lines"));
  QApplication::processEvents();
  LineView* v = e->lineView();
  const ForwardResult& r = *e->result();
  const Tensor& P = r.probs(e->layer());
  const int H = static_cast<int>(P.dim(0)), T = static_cast<int>(P.dim(1));
  // all heads: one line per (head, query, key) above 1%, with that probability; none to a
  // future key under the causal mask; every head has lines
  std::vector<int> per_head(static_cast<size_t>(H), 0);
  int expected = 0;
  for (float p : P.data) expected += p > 0.01f;
  const auto all = v->lines();
  CHECK(static_cast<int>(all.size()) == expected);
  for (const auto& l : all) {
    CHECK(l.key <= l.query);
    CHECK(l.p == P.data[(static_cast<size_t>(l.head) * T + l.query) * T + l.key]);
    ++per_head[static_cast<size_t>(l.head)];
  }
  for (int n : per_head) CHECK(n > 0);
  // one head
  auto* head_box = e->findChild<QComboBox*>("lineHead");
  REQUIRE(head_box);
  head_box->setCurrentIndex(3);  // "head 2"
  for (const auto& l : v->lines()) CHECK(l.head == 2);
  // hovering query 4 (left column) keeps only its row; the mouse does the same
  v->setHover(0, 4);
  for (const auto& l : v->lines()) CHECK(l.query == 4);
  QTest::mouseMove(v, v->tokenAnchor(1, 1).toPoint() + QPoint(20, 0));  // over key 1's label
  QApplication::processEvents();
  REQUIRE_FALSE(v->lines().empty());
  for (const auto& l : v->lines()) CHECK(l.key == 1);
  // the pixels: the colour of head 2 near the middle of a strong line
  v->setHover(-1, -1);
  CHECK(v->headColor(2) != v->headColor(3));
  // export
  e->exportLines(dir.filePath("lines.png"));
  e->exportLines(dir.filePath("lines.svg"));
  CHECK(head_bytes(dir.filePath("lines.png"), 8) == QByteArray("\x89PNG\r\n\x1a\n", 8));
  CHECK(head_bytes(dir.filePath("lines.svg"), 200).contains("<svg"));
  CHECK_THROWS_WITH(e->exportLines(dir.filePath("lines.bmp")), Catch::Contains("expected .png or .svg"));
}

TEST_CASE("the Head tab: a head selector and square cells", "[ui][head]") {
  MainWindow w;
  w.resize(1280, 720);
  w.useModel(test_model(), "test");
  w.show();
  ExploreView* e = w.explore();
  e->setText("abcdefghij");
  e->flush();
  REQUIRE(e->showPage("head"));
  QApplication::processEvents();
  auto* box = e->findChild<QComboBox*>("headBox");
  REQUIRE(box);
  REQUIRE(box->count() == e->headCount());
  box->setCurrentIndex(3);
  QApplication::processEvents();
  CHECK(e->enlargedHead() == 3);
  HeatmapView* big = nullptr;
  for (HeatmapView* v : e->findChildren<HeatmapView*>())
    if (v->data().title.startsWith("layer 0, head 3")) big = v;
  REQUIRE(big);
  big->plot()->replot();
  QCustomPlot* p = big->plot();
  const double cw = std::fabs(p->xAxis->coordToPixel(1) - p->xAxis->coordToPixel(0));
  const double ch = std::fabs(p->yAxis->coordToPixel(1) - p->yAxis->coordToPixel(0));
  // not stretched: the square fit sizes the axis rect to whole pixels (ceil of cell x count) where
  // the room allows, so a cell's width and height differ by less than one pixel
  CHECK(cw == Approx(ch).epsilon(0).margin(1.0));
}

TEST_CASE("mask editor at 2,048 tokens: the whole mask in view, zoom for single cells", "[ui][mask][zoom]") {
  MainWindow w;
  w.useModel(test_model(2048), "test");
  w.resize(1280, 720);
  w.show();
  ExploreView* e = w.explore();
  std::string text;
  for (int k = 0; k < 2048; ++k) text += static_cast<char>('a' + k % 26);
  e->setText(QString::fromStdString(text));
  e->flush();
  e->showPage("mask");
  QApplication::processEvents();
  MaskEditor* m = e->maskEditor();
  REQUIRE(m->rows() == 2048);
  auto* scroll = m->findChild<QScrollArea*>("maskScroll");
  REQUIRE(scroll);
  // zoom 1: the last cell is inside the view, no scrolling needed
  const QPoint last = m->gridWidget()->mapTo(scroll->viewport(), m->cellCenter(2047, 2047));
  CHECK(scroll->viewport()->rect().contains(last));
  // zoomed in: cells of at least 12 px, the view scrolls, and a click toggles exactly the cell under it
  m->setZoom(1e6);  // clamped to the largest zoom
  QApplication::processEvents();
  const QPoint a = m->cellCenter(0, 1), b = m->cellCenter(0, 2);
  CHECK(b.x() - a.x() >= 12);
  CHECK(m->gridWidget()->width() > scroll->viewport()->width());
  QTest::mouseClick(m->gridWidget(), Qt::LeftButton, {}, m->cellCenter(3, 5));
  CHECK(m->blocked(0, 3, 5));
  CHECK_FALSE(m->blocked(0, 3, 4));
  CHECK_FALSE(m->blocked(0, 2, 5));
  m->setZoom(1.0);
  QApplication::processEvents();
  CHECK(m->gridWidget()->width() <= scroll->viewport()->width());
}

TEST_CASE("screen and export draw the same cells in the same colours", "[ui][export][render]") {
  MainWindow w;
  w.useModel(test_model(), "test");
  w.resize(1400, 900);
  w.show();
  ExploreView* e = w.explore();
  e->setText("abcdefg");
  e->setMaskArgs({"causal"});  // blocked cells too
  e->flush();
  QTest::qWait(50);
  HeatmapView* v = e->headView(1);
  v->plot()->replot();
  const int n = 7;
  // the export of the same head, drawn by the same fill_color_map
  QTemporaryDir dir;
  const QString png = dir.filePath("head.png");
  e->exportTo(png, 0, 1);
  const QImage img = QImage(png).convertToFormat(QImage::Format_RGB32);
  REQUIRE(!img.isNull());
  std::set<QRgb> screen;  // the visible cells' colours (causal: the diagonal spans the whole map)
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= i; ++j) screen.insert(cell_pixel(v, i, j).rgb());
  // the exported map: the bounding box of those colours left of the colour bar
  QRect box;
  for (int y = 0; y < img.height(); ++y)
    for (int x = 0; x < img.width() * 3 / 4; ++x)
      if (screen.count(img.pixel(x, y))) box = box.united(QRect(x, y, 1, 1));
  REQUIRE(box.width() > 7 * 4);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      CAPTURE(i, j);
      const int x = box.left() + static_cast<int>((j + 0.5) * box.width() / n);
      const int y = box.top() + static_cast<int>((i + 0.5) * box.height() / n);
      CHECK(QColor(img.pixel(x, y)).name().toStdString() == cell_pixel(v, i, j).name().toStdString());
    }
}

TEST_CASE("typing at the end of a long text, the token strip shows the last tokens", "[ui][input]") {
  MainWindow w;
  w.useModel(test_model(512), "test");
  w.resize(1280, 720);
  w.show();
  ExploreView* e = w.explore();
  QString text;
  for (int k = 0; k < 60; ++k) text += "the film was not good ";
  e->setText(text.trimmed());
  e->flush();
  auto* edit = e->findChild<QLineEdit*>("text");
  auto* strip = e->findChild<QListView*>("tokenStrip");
  REQUIRE(edit);
  REQUIRE(strip);
  QTest::qWait(100);                                   // the strip lays its items out on a timer
  REQUIRE(strip->verticalScrollBar()->maximum() > 0);  // more rows of tokens than the strip shows
  strip->verticalScrollBar()->setValue(0);
  edit->setFocus();
  edit->end(false);
  QTest::keyClicks(edit, " x");
  e->flush();
  QTest::qWait(100);
  CHECK(strip->verticalScrollBar()->value() == strip->verticalScrollBar()->maximum());
}
