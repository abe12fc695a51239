// UI tests (offscreen Qt, QTest input): typing, masks, the mask editor, layers, cross mode,
// long inputs, export files, a broken model folder, and the token model's contract.
#include <QAbstractItemModelTester>
#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QImage>
#include <QLabel>
#include <QMenuBar>
#include <QLineEdit>
#include <QListWidget>
#include <QTabWidget>
#include <QStatusBar>
#include <QScrollArea>
#include <QSettings>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>
#include <qcustomplot.h>
#include <QThread>
#include <QTimer>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "engine/analysis/methods.h"
#include "engine/compute/forward.h"
#include "engine/compute/lm.h"
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

namespace {

// Holds a pass at the start of a layer until released (the worker thread waits; the GUI thread
// goes on), so tests can submit while a pass is in flight without depending on timing.
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  void wait() {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [this] { return open; });
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(m);
      open = true;
    }
    cv.notify_all();
  }
};

ForwardJob gated_job(const std::shared_ptr<const Model>& m, quint64 id, const std::shared_ptr<Gate>& gate) {
  ForwardJob job;
  job.model = m;
  job.id = id;
  job.request.ids = {5, 6, 7, 8};
  if (gate)
    job.request.on_layer = [gate](int layer) {
      if (layer == 0) gate->wait();
    };
  return job;
}

}  // namespace

TEST_CASE("the forward runner: newest wins, a cancelled pass never delivers, shutdown in flight", "[ui][runner]") {
  const auto m = test_model();
  SECTION("a pass in flight is restarted by newer input; only the newest delivers") {
    ForwardRunner runner;
    std::vector<quint64> delivered;
    QObject::connect(&runner, &ForwardRunner::finished, [&](const ForwardOutcome& o) { delivered.push_back(o.id); });
    auto gate = std::make_shared<Gate>();
    runner.submit(gated_job(m, 1, gate));  // held at layer 0
    runner.submit(gated_job(m, 2, nullptr));
    runner.submit(gated_job(m, 3, nullptr));  // replaces 2 while it waits
    gate->release();
    runner.waitForIdle();
    CHECK(delivered == std::vector<quint64>{3});
    CHECK(runner.cancelledCount() == 1);
  }
  SECTION("with no result for a while, the pass in flight finishes, so typing shows intermediate results") {
    ForwardRunner runner;
    std::vector<quint64> delivered;
    QObject::connect(&runner, &ForwardRunner::finished, [&](const ForwardOutcome& o) { delivered.push_back(o.id); });
    auto gate = std::make_shared<Gate>();
    runner.submit(gated_job(m, 1, gate));
    QThread::msleep(ForwardRunner::max_result_gap_ms + 50);
    runner.submit(gated_job(m, 2, nullptr));
    gate->release();
    runner.waitForIdle();
    CHECK(delivered == std::vector<quint64>{1, 2});
    CHECK(runner.cancelledCount() == 0);
  }
  SECTION("shutdown with a pass in flight delivers nothing and returns") {
    int delivered = 0;
    auto gate = std::make_shared<Gate>();
    {
      ForwardRunner runner;
      QObject::connect(&runner, &ForwardRunner::finished, [&](const ForwardOutcome&) { ++delivered; });
      runner.submit(gated_job(m, 1, gate));
      std::thread release([gate] {
        QThread::msleep(50);
        gate->release();
      });
      runner.shutdown();  // cancels, waits for the worker, emits nothing
      release.join();
    }
    QApplication::processEvents();
    CHECK(delivered == 0);
  }
}

TEST_CASE("Explore: every delivered grid is labelled with its own tokens; stale results are dropped", "[ui][runner]") {
  MainWindow w;
  w.useModel(test_model(), "test");
  ExploreView* e = w.explore();
  ExploreController* c = e->controller();
  int checked = 0;
  QObject::connect(c, &ExploreController::resultChanged, [&](const ForwardOutcome& o) {
    // the views have drawn this outcome when its receivers after us run; check the outcome and,
    // on the next turn of the event loop, the head views
    const std::vector<std::string> tokens = o.result->tokens;
    REQUIRE(tokens.size() == o.result->ids.size());
    CHECK(o.heads.at(0).rows == static_cast<int>(tokens.size()));
    QTimer::singleShot(0, e, [e, tokens, &checked] {
      if (!e->result() || e->result()->tokens != tokens) return;  // a newer one arrived meanwhile
      QStringList want;
      for (const auto& t : tokens) want << (t == " " ? QStringLiteral("\u2423") : QString::fromStdString(t));
      for (int h = 0; h < e->headCount(); ++h) CHECK(e->headView(h)->data().row_labels == want);
      ++checked;
    });
  });
  // Typing at 30 ms a key, each key a different text length: results arrive while typing (not
  // only after it stops), and whatever is delivered matches its own input.
  auto* edit = e->findChild<QLineEdit*>("text");
  for (const char ch : std::string("the quick brown fox jumps")) {
    QTest::keyClick(edit, ch);
    QTest::qWait(30);
  }
  const int while_typing = checked;
  e->flush();
  QApplication::processEvents();
  CHECK(while_typing >= 3);  // 25 keys at 30 ms: results keep coming while typing
  CHECK(e->result()->tokens.size() == std::string("the quick brown fox jumps").size());
  // A pass for "abc" held in flight while "abcd" is typed (after a quiet spell, so it is not
  // restarted): its result arrives when the token strip already shows four tokens, and is still
  // drawn with its own three labels.
  {
    auto hold = std::make_shared<Gate>();
    c->setRequestHook([hold](ForwardRequest& r) {
      r.on_layer = [hold](int layer) {
        if (layer == 0) hold->wait();
      };
    });
    e->setText("abc");
    c->setRequestHook(nullptr);
    QThread::msleep(ForwardRunner::max_result_gap_ms + 50);
    e->setText("abcd");
    CHECK(e->tokenModel()->rowCount() == 4);
    // What the heads show when each result arrives (the view, connected first, has drawn it).
    std::vector<QStringList> drawn_labels;
    std::vector<int> drawn_rows;
    auto probe = QObject::connect(c, &ExploreController::resultChanged, [&](const ForwardOutcome&) {
      drawn_labels.push_back(e->headView(0)->data().row_labels);
      drawn_rows.push_back(e->headView(0)->data().rows);
    });
    hold->release();
    e->flush();
    QObject::disconnect(probe);
    REQUIRE(drawn_labels.size() >= 1);
    CHECK(drawn_labels[0] == QStringList({"a", "b", "c"}));  // the held pass, with its own labels
    CHECK(drawn_rows[0] == 3);
    CHECK(e->headView(0)->data().row_labels == QStringList({"a", "b", "c", "d"}));
  }
  // Clearing the text while a pass is held in flight: that pass's result is stale and dropped.
  auto gate = std::make_shared<Gate>();
  c->setRequestHook([gate](ForwardRequest& r) {
    r.on_layer = [gate](int layer) {
      if (layer == 0) gate->wait();
    };
  });
  e->setText("abc");  // held at layer 0
  QApplication::processEvents();
  c->setRequestHook(nullptr);
  e->setText("");
  gate->release();
  e->flush();
  CHECK(e->result() == nullptr);
  CHECK(e->headView(0)->data().rows == 0);
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

namespace {

// The article classifier with `heads` heads (the grid tests need 4, 8 and 12).
std::shared_ptr<const Model> heads_model(int heads, int max_len) {
  ModelConfig c;
  c.vocab_size = 100, c.embed_size = 4 * heads, c.num_heads = heads, c.num_layers = 1, c.ff_dim = 16;
  c.max_len = max_len;
  c.tokenizer = TokenizerKind::Char, c.positional = Positional::Sinusoidal, c.num_classes = 2, c.labels = {"no", "yes"};
  auto m = std::make_shared<Model>();
  m->config = c;
  m->weights = random_weights(c, 3);
  m->vocab = default_vocab(c);
  return m;
}

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
    w.useModel(heads_model(k.heads, 64), "test");
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
      w.useModel(heads_model(4, 1024), "test");
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
  w.useModel(heads_model(4, 64), "test");
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
