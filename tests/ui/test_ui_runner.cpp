// UI tests of the forward runner (offscreen Qt): newest pass wins, cancelled passes never deliver,
// prefix reuse while typing into a causal model, attention on demand, stale results dropped.

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

TEST_CASE("the forward runner: typing into a causal model recomputes only after the edit, same result",
          "[ui][runner]") {
  const std::string dir = test::scratch_dir("ui", "prefix");
  const auto m = std::make_shared<const Model>(test::tiny_decoder(dir));
  // maps of one cell a token, and of three tokens a cell: the rows drawn again then start at the
  // drawn row that holds the patterns' checkpoint (row 16: 15)
  const auto [cells, drawn_from] = GENERATE(std::pair{256, 16}, std::pair{10, 15});
  CAPTURE(cells);
  ForwardRunner runner;
  std::vector<ForwardOutcome> got;
  QObject::connect(&runner, &ForwardRunner::finished, [&](const ForwardOutcome& o) { got.push_back(o); });
  const std::vector<int> ids = test::random_ids(30, m->config.vocab_size, 8);
  auto job = [&](std::vector<int> seq, quint64 id) {
    ForwardJob j;
    j.model = m;
    j.id = id;
    j.request.ids = std::move(seq);
    j.request.token_types.assign(j.request.ids.size(), 0);  // what the controller passes for one text
    j.display_cells = cells;
    return j;
  };
  runner.submit(job(std::vector<int>(ids.begin(), ids.end() - 1), 1));
  runner.waitForIdle();
  runner.submit(job(ids, 2));  // one token typed at the end
  runner.waitForIdle();
  std::vector<int> edited = ids;
  edited[20] = (edited[20] + 1) % m->config.vocab_size;
  runner.submit(job(edited, 3));  // an edit in the middle
  runner.waitForIdle();
  REQUIRE(got.size() == 3);
  CHECK(got[0].reused == 0);
  CHECK(got[1].reused == 29);
  CHECK(got[2].reused == 20);
  auto cpu = make_backend("cpu");
  for (size_t k = 1; k < 3; ++k) {
    ForwardRequest full;
    full.ids = k == 1 ? ids : edited;
    const ForwardResult want = run_forward(*m, *cpu, full);
    const ForwardResult& have = *got[k].result;
    const test::PassBound tol = test::pass_bound(*m, full, want);
    REQUIRE(have.hidden.shape == want.hidden.shape);
    CHECK(test::max_abs_diff(have.hidden, want.hidden) <= tol.hidden);
    for (int l = 0; l < m->config.num_layers; ++l) {
      REQUIRE(have.attention[l].shape == want.attention[l].shape);
      CHECK(test::max_abs_diff(have.attention[l], want.attention[l]) <= tol.probs[static_cast<size_t>(l)]);
    }
    // what the views draw comes from the merged result: every head's map, every row; the rows
    // before the last pass's checkpoint (16: 29 rows, then 30, rounded down to 16) taken from its
    // maps and pattern sums, the same cells and patterns as drawing and scanning the result whole
    REQUIRE(got[k].heads->size() == static_cast<size_t>(m->config.num_layers * m->config.num_heads));
    CHECK(got[k].drawn_from == drawn_from);
    for (int l = 0; l < m->config.num_layers; ++l)
      for (int h = 0; h < m->config.num_heads; ++h) {
        const HeatmapData& d = (*got[k].heads)[static_cast<size_t>(l * m->config.num_heads + h)];
        const HeatmapData whole = head_heatmap(got[k].result, l, h, cells);
        CHECK(d.rows == 30);
        REQUIRE(d.drawn.size() == whole.drawn.size());
        for (size_t c = 0; c < d.drawn.size(); ++c)
          CHECK((std::isnan(d.drawn[c]) ? std::isnan(whole.drawn[c]) : d.drawn[c] == whole.drawn[c]));
        CHECK(d.vmax == whole.vmax);
      }
    const auto patterns = head_patterns(*got[k].result);
    REQUIRE(got[k].patterns.size() == patterns.size());
    for (size_t l = 0; l < patterns.size(); ++l)
      for (size_t h = 0; h < patterns[l].size(); ++h) {
        CHECK(got[k].patterns[l][h].entropy == patterns[l][h].entropy);
        CHECK(got[k].patterns[l][h].focus_share == patterns[l][h].focus_share);
        CHECK(got[k].patterns[l][h].prev == patterns[l][h].prev);
        CHECK(got[k].patterns[l][h].label == patterns[l][h].label);
      }
  }
  CHECK(got[0].drawn_from == 0);
  // an encoder is never reused
  const auto bert = std::make_shared<const Model>(test::tiny_bert(dir + "/bert"));
  ForwardJob e;
  e.model = bert;
  e.id = 4;
  e.request.ids = {2, 5, 6, 3};
  runner.submit(e);
  runner.waitForIdle();
  e.id = 5;
  runner.submit(e);
  runner.waitForIdle();
  REQUIRE(got.size() == 5);
  CHECK(got[4].reused == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("the forward runner: attention on demand above its budget, the same maps and probabilities",
          "[ui][runner][on-demand]") {
  const std::string dir = test::scratch_dir("ui", "on-demand");
  const auto m = std::make_shared<const Model>(test::tiny_decoder(dir));
  const int L = m->config.num_layers, H = m->config.num_heads;
  ForwardRunner runner;
  runner.on_demand_bytes = 0;  // every pass keeps queries and keys
  std::vector<ForwardOutcome> got;
  QObject::connect(&runner, &ForwardRunner::finished, [&](const ForwardOutcome& o) { got.push_back(o); });
  const std::vector<int> ids = test::random_ids(30, m->config.vocab_size, 8);
  auto job = [&](std::vector<int> seq, quint64 id) {
    ForwardJob j;
    j.model = m;
    j.id = id;
    j.request.ids = std::move(seq);
    j.request.token_types.assign(j.request.ids.size(), 0);
    return j;
  };
  runner.submit(job(std::vector<int>(ids.begin(), ids.end() - 1), 1));
  runner.waitForIdle();
  runner.submit(job(ids, 2));  // one token typed: the cached pass's queries merged with the new row's
  runner.waitForIdle();
  REQUIRE(got.size() == 2);
  CHECK(got[1].reused == 29);
  auto cpu = make_backend("cpu");
  ForwardRequest full;
  full.ids = ids;
  const auto want = std::make_shared<const ForwardResult>(run_forward(*m, *cpu, full));
  const test::PassBound tol = test::pass_bound(*m, full, *want);
  const ForwardOutcome& o = got[1];
  REQUIRE(o.result->on_demand);
  CHECK(o.drawn_from == 16);  // rows 0..15 drawn and scanned by the first pass, 16.. recomputed here
  CHECK(o.memory.attention == o.result->on_demand->bytes());  // the status bar's figure is what is held
  for (int l = 0; l < L; ++l) {
    CHECK(o.result->attention[static_cast<size_t>(l)].empty());
    CHECK(test::max_abs_diff(*o.result->layer_probs(l), want->attention[static_cast<size_t>(l)]) <=
          tol.probs[static_cast<size_t>(l)]);
    for (int h = 0; h < H; ++h) {  // the overview keeps its drawn grid only, the same cells as a kept pass's
      const HeatmapData& d = (*o.heads)[static_cast<size_t>(l * H + h)];
      const HeatmapData k = head_heatmap(want, l, h, 256);
      CHECK(d.values == nullptr);
      REQUIRE(d.drawn.size() == k.drawn.size());
      double diff = 0;
      for (size_t c = 0; c < d.drawn.size(); ++c)
        if (!std::isnan(k.drawn[c])) diff = std::max(diff, static_cast<double>(std::fabs(d.drawn[c] - k.drawn[c])));
      CHECK(diff <= tol.probs[static_cast<size_t>(l)]);
      CHECK(d.value(29, 3) == d.drawn[29 * 30 + 3]);
      const HeatmapData big = head_heatmap(o.result, l, h, 1024);  // a head shown large: recomputed, full values
      REQUIRE(big.values != nullptr);
      CHECK(std::fabs(big.value(29, 3) - k.value(29, 3)) <= tol.probs[static_cast<size_t>(l)]);
    }
  }
  REQUIRE(o.patterns.size() == static_cast<size_t>(L));  // the badges read the recomputed layers too
  CHECK(o.patterns[0].size() == static_cast<size_t>(H));
  std::filesystem::remove_all(dir);
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
    CHECK(o.heads->at(0).rows == static_cast<int>(tokens.size()));
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
