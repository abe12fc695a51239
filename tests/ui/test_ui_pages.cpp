// The Explore tab as a composer of pages (ui/explore/): the page table, pages that redraw from the
// shared state, hidden pages that wait until shown, and the one background-job mechanism.
#include <QApplication>
#include <QTabWidget>
#include <QTableWidget>
#include "engine/analysis/patching.h"
#include <QThread>
#include <atomic>
#include <catch2/catch.hpp>

#include "tests/ui/ui_test_util.h"
#include "ui/background_job.h"
#include "ui/explore/circuits_page.h"
#include "ui/explore/features_page.h"
#include "ui/explore/steering_page.h"
#include "engine/formats/safetensors.h"
#include <QFileInfo>
#include <QGridLayout>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSpinBox>
#include <QTest>
#include <QTemporaryDir>
#include <random>
#include "ui/explore/page_table.h"
#include "ui/explore/patterns_page.h"
#include "ui/heatmap_view.h"
#include "ui/line_view.h"
#include "ui/mask_editor.h"

using namespace attnlab;
using attnlab::test::head_bytes;
using attnlab::test::OpenWindow;

TEST_CASE("Explore's tabs are the page table's rows, found by name and alias", "[ui][pages]") {
  OpenWindow o("abcd");
  ExploreView* e = o.e;
  QTabWidget* tabs = e->tabs();
  const auto& rows = explore_pages();
  REQUIRE(tabs->count() == static_cast<int>(rows.size()));
  for (size_t i = 0; i < rows.size(); ++i) {
    const ExplorePageRow& row = rows[i];
    INFO(row.name);
    CHECK(tabs->tabText(static_cast<int>(i)) == row.title);
    CHECK(e->page(row.name) == tabs->widget(static_cast<int>(i)));
    const bool has = !row.available || row.available(e->model()->config);
    CHECK(tabs->isTabVisible(static_cast<int>(i)) == has);
    CHECK(e->showPage(row.name) == has);
    if (has) CHECK(tabs->currentWidget() == e->page(row.name));
    for (const QString& alias : QString(row.aliases).split(',', Qt::SkipEmptyParts)) {
      CHECK(find_explore_page(alias) == &row);
      CHECK(e->showPage(alias) == has);
    }
  }
  CHECK(find_explore_page("logit-lens") == find_explore_page("lens"));
  CHECK(find_explore_page("beyond") == find_explore_page("methods"));
  CHECK(find_explore_page("no such page") == nullptr);
  CHECK_FALSE(e->showPage("no such page"));
  CHECK_FALSE(e->showPage("lens"));  // the test model is a classifier: no LM head
  CHECK(static_cast<QWidget*>(e->maskEditor()) == e->page("mask"));
  CHECK(e->page("beyond") == e->page("methods"));
}

TEST_CASE("A hidden page waits until it is shown; the shown pages follow every result", "[ui][pages]") {
  OpenWindow o("abcd");
  ExploreView* e = o.e;
  REQUIRE(e->showPage("heads"));
  e->setText("abcdefg");
  e->flush();
  // the Heads grid (eager) has the new input; All layers (hidden) was not drawn
  CHECK(e->headView(0)->data().rows == 7);
  const auto thumbs = e->page("layers")->findChildren<HeatmapView*>();
  REQUIRE(thumbs.size() == static_cast<qsizetype>(e->model()->config.num_layers * e->model()->config.num_heads));
  for (HeatmapView* t : thumbs) CHECK(t->data().empty());
  REQUIRE(e->showPage("layers"));
  for (HeatmapView* t : thumbs) CHECK(t->data().rows == 7);
  // the Head page opens on the head asked for, of the current layer, and follows the layer
  e->setLayer(1);
  e->state()->openHead(2);
  CHECK(e->tabs()->currentWidget() == e->page("head"));
  HeatmapView* big = e->page("head")->findChild<HeatmapView*>();
  REQUIRE(big);
  CHECK(big->data().title.startsWith("layer 1, head 2"));
  e->setLayer(0);
  CHECK(big->data().title.startsWith("layer 0, head 2"));
  // ablation reaches every page through the state: the grid's title and the enlarged head's
  e->setAblated(0, 2, true);
  e->flush();
  CHECK(big->data().title.endsWith("(ablated)"));
  CHECK(e->headView(2)->data().title.endsWith("(ablated)"));
}

TEST_CASE("BackgroundJob: a new start supersedes without waiting, and only the newest result arrives",
          "[ui][pages][jobs]") {
  QObject owner;
  std::atomic<bool> first_started{false}, release{false}, first_done{false}, first_saw_cancel{false};
  std::vector<int> delivered;
  {
    BackgroundJob job(&owner);
    job.start<int>(
        [&](const std::atomic<bool>* cancel, const BackgroundJob::Post&) {
          first_started = true;
          for (int i = 0; i < 1000 && !release; ++i) QThread::msleep(5);  // at most 5 s
          first_saw_cancel = cancel->load();
          first_done = true;
          return 1;
        },
        [&](std::shared_ptr<const int> r, const QString&) { delivered.push_back(*r); });
    while (!first_started) QThread::msleep(1);
    job.start<int>([](const std::atomic<bool>*, const BackgroundJob::Post&) { return 2; },
                   [&](std::shared_ptr<const int> r, const QString&) { delivered.push_back(*r); });
    // start() returned while the first job still ran: the GUI thread did not wait for it
    CHECK_FALSE(first_done);
    job.wait();  // the newest
    CHECK(delivered == std::vector<int>{2});
    release = true;
    job.shutdown();  // waits for the superseded one too
    QCoreApplication::processEvents();
    CHECK(first_done);
    CHECK(first_saw_cancel);                  // the engine would have stopped at its next check
    CHECK(delivered == std::vector<int>{2});  // the superseded result was dropped
    // an error is a message, not a crash
    QString error;
    job.start<int>([](const std::atomic<bool>*, const BackgroundJob::Post&) -> int { throw Error("bad input"); },
                   [&](std::shared_ptr<const int> r, const QString& e) {
                     CHECK_FALSE(r);
                     error = e;
                   });
    job.wait();
    CHECK(error == "bad input");
  }
}

TEST_CASE("Patterns page: every head's pattern and share, a click opens the head", "[ui][pages]") {
  OpenWindow o("ab, ab. cd");
  ExploreView* e = o.e;
  const ModelConfig& c = e->model()->config;
  auto* page = static_cast<PatternsPage*>(e->page("head-patterns"));
  QTableWidget* t = page->table();
  CHECK(t->rowCount() == 0);  // hidden: not drawn yet
  REQUIRE(e->showPage("patterns"));
  REQUIRE(t->rowCount() == c.num_layers);
  REQUIRE(t->columnCount() == c.num_heads);
  const auto& patterns = e->state()->outcome().patterns;
  for (int l = 0; l < c.num_layers; ++l)
    for (int h = 0; h < c.num_heads; ++h) {
      const HeadPattern& p = patterns[static_cast<size_t>(l)][static_cast<size_t>(h)];
      const QString badge = e->state()->badge(l, h);
      CHECK(badge.isEmpty() == p.label.empty());
      const QString text = t->item(l, h)->text();
      CHECK(text.startsWith(badge.isEmpty() ? QString("mixed") : badge));
      // the share printed is the one the label names (here: the previous token's, itself's, ...)
      if (p.label == "prev") CHECK(text.endsWith(QString::number(p.prev, 'f', 2)));
      if (p.label == "self") CHECK(text.endsWith(QString::number(p.self, 'f', 2)));
      if (p.label == "first") CHECK(text.endsWith(QString::number(p.first, 'f', 2)));
    }
  emit t->cellClicked(c.num_layers - 1, c.num_heads - 1);
  CHECK(e->layer() == c.num_layers - 1);
  CHECK(e->enlargedHead() == c.num_heads - 1);
  CHECK(e->tabs()->currentWidget() == e->page("head"));
  // a new input redraws it when shown again
  e->setText("abcdefgh");
  e->flush();
  REQUIRE(e->showPage("patterns"));
  CHECK(t->rowCount() == c.num_layers);
  CHECK(t->item(0, 0)->toolTip().contains("layer 0, head 0"));
}

TEST_CASE("Circuits page: patching in the background, the changed token restores 1, mistakes said on the page",
          "[ui][pages][patching]") {
  OpenWindow o("abcd");
  ExploreView* e = o.e;
  auto* page = static_cast<CircuitsPage*>(e->page("circuits"));
  REQUIRE(e->showPage("patching"));
  CHECK(page->cleanText() == "abcd");  // the explored text, to edit
  CHECK(page->isEnabled());            // the test model is a classifier
  page->setPrompts("abcd", "abxd");
  page->setAnswers("yes", "no");
  page->setTarget("resid_pre");
  page->compute();
  CHECK(page->running());
  page->wait();
  REQUIRE(page->result());
  const HeatmapData& d = page->map()->data();
  REQUIRE(d.rows == e->model()->config.num_layers);
  REQUIRE(d.cols == 4);
  CHECK(d.value(0, 2) == 1.0f);  // the changed character at layer 0: the corrupted input becomes the clean one
  CHECK(d.col_labels.size() == 4);
  CHECK(d.diverging);
  CHECK(page->status().contains("clean"));
  page->setTarget("z");
  page->compute();
  page->wait();
  CHECK(page->map()->data().cols == e->model()->config.num_heads);
  // mistakes: said on the page, nothing computed
  page->setPrompts("abcd", "abc");
  page->compute();
  page->wait();
  CHECK(page->status().contains("same number of tokens"));
  page->setPrompts("abcd", "abxd");
  page->setAnswers("maybe", "no");
  page->compute();
  CHECK(page->status().contains("no class \"maybe\""));
}

TEST_CASE(
    "Circuits page: the estimate beside the exact map, logit attribution refused with the reason, a head opens, "
    "the map exports",
    "[ui][pages][patching]") {
  OpenWindow o("abcd");
  ExploreView* e = o.e;
  auto* page = static_cast<CircuitsPage*>(e->page("circuits"));
  REQUIRE(e->showPage("circuits"));
  page->setPrompts("abcd", "abxd");
  page->setAnswers("yes", "no");
  page->setTarget("z");
  page->setMethod("both");
  page->compute();
  page->wait();
  REQUIRE(page->result());
  CHECK(page->estimateMap()->isVisible());
  const HeatmapData &exact = page->map()->data(), &estimate = page->estimateMap()->data();
  REQUIRE(estimate.rows == exact.rows);
  REQUIRE(estimate.cols == exact.cols);
  CHECK(estimate.title.contains("attribution"));
  bool differs = false;  // a first-order estimate of a nonlinear model is not the exact map
  for (int i = 0; i < exact.rows; ++i)
    for (int j = 0; j < exact.cols; ++j) differs = differs || estimate.value(i, j) != exact.value(i, j);
  CHECK(differs);
  // a head's cell: its pattern on the clean prompt, in the Head tab
  emit page->map()->cellClicked(1, 2);
  CHECK(e->tabs()->currentWidget() == e->page("head"));
  CHECK(e->layer() == 1);
  CHECK(e->state()->openedHead() == 2);
  // export: the map as an image and as numbers
  QTemporaryDir dir;
  page->exportTo(dir.filePath("c.png"), 96);
  CHECK(head_bytes(dir.filePath("c.png"), 4) == QByteArray("\x89PNG", 4));
  page->exportTo(dir.filePath("c.csv"), 96);
  CHECK(QFileInfo(dir.filePath("c.csv")).size() > 0);
  // estimate alone: no second map
  page->setMethod("attribution");
  page->compute();
  page->wait();
  CHECK_FALSE(page->estimateMap()->isVisible());
  CHECK(page->map()->data().title.contains("estimate"));
  // logit attribution reads an LM head: the test model is a classifier
  REQUIRE(e->showPage("circuits"));
  CHECK_FALSE(page->findChild<QPushButton*>("circuitsDla")->isEnabled());
  page->computeLogitAttribution();
  page->wait();
  CHECK(page->status().contains("LM head"));
}

TEST_CASE("Steering page: strength 0 changes nothing, a strength moves the prediction, mistakes said",
          "[ui][pages][hooks]") {
  OpenWindow o("abcd");
  ExploreView* e = o.e;
  auto* page = static_cast<SteeringPage*>(e->page("steer"));
  REQUIRE(e->showPage("steering"));
  page->setPrompts("yyyy", "nnnn");
  page->setLayer(1);
  page->setStrength(0);
  page->compute();
  page->wait();
  REQUIRE(page->outcome());
  REQUIRE(page->outcome()->labels.size() == 2);  // the classes
  CHECK(page->outcome()->before == page->outcome()->after);
  CHECK(page->outcome()->vector_norm > 0);
  page->setStrength(8);
  page->compute();
  page->wait();
  CHECK(page->outcome()->before != page->outcome()->after);
  CHECK(page->table()->rowCount() == 2);
  CHECK(page->status().contains("||v||"));
  page->setPrompts("\u00e9t\u00e9", "nnnn");  // characters the model's vocabulary lacks: said
  page->compute();
  page->wait();
  CHECK(page->status().contains("[UNK]"));
  page->setPrompts("", "");
  page->compute();
  CHECK(page->status().contains("Type a prompt"));
}

TEST_CASE(
    "Features page: an SAE's features per token, a clamp to a feature's own value changes nothing, bad "
    "folders said",
    "[ui][pages][sae]") {
  OpenWindow o("abcd");
  ExploreView* e = o.e;
  auto* page = static_cast<FeaturesPage*>(e->page("features"));
  REQUIRE(e->showPage("sae"));
  QTemporaryDir dir;
  const int E = e->model()->config.embed_size, S = 24;
  TensorMap w;
  std::mt19937 g(3);
  std::normal_distribution<float> n(0.0f, 0.3f);
  for (const auto& [name, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"W_enc", {E, S}}, {"b_enc", {S}}, {"W_dec", {S, E}}, {"b_dec", {E}}}) {
    Tensor t(shape);
    for (float& v : t.data) v = n(g);
    w[name] = t;
  }
  save_safetensors(dir.filePath("sae_weights.safetensors").toStdString(), w);
  {
    QFile f(dir.filePath("cfg.json"));
    REQUIRE(f.open(QIODevice::WriteOnly));
    f.write(QString("{\"architecture\": \"standard\", \"d_in\": %1, \"d_sae\": %2, \"metadata\": {\"hook_name\": "
                    "\"blocks.1.hook_resid_pre\"}}")
                .arg(E)
                .arg(S)
                .toUtf8());
  }
  // the clamp's controls wait for an autoencoder (a click did nothing before one was open)
  auto* clamp = page->findChild<QPushButton*>("featuresClamp");
  REQUIRE(clamp);
  CHECK_FALSE(clamp->isEnabled());
  CHECK(clamp->toolTip().contains("Open a sparse autoencoder folder first"));
  CHECK_FALSE(page->openSae(dir.filePath("missing")));
  CHECK(page->status().contains("not a folder"));
  CHECK_FALSE(clamp->isEnabled());
  REQUIRE(page->openSae(dir.path()));
  CHECK(clamp->isEnabled());
  CHECK_FALSE(clamp->toolTip().contains("Open a sparse autoencoder"));
  page->wait();
  REQUIRE(page->outcome());
  CHECK(page->table()->rowCount() == 4);
  CHECK(page->outcome()->after.empty());
  // the strongest feature at the last token, clamped to its own value there: the same prediction
  REQUIRE_FALSE(page->outcome()->strongest.back().empty());
  const auto [feature, own] = page->outcome()->strongest.back()[0];  // a copy: the outcome is replaced
  page->setClamp(feature, own, 3);
  page->wait();
  REQUIRE(page->outcome()->after.size() == page->outcome()->before.size());
  CHECK(page->outcome()->after == page->outcome()->before);
  CHECK(page->predictionText().contains("with the clamp"));
  page->setClamp(feature, 50.0, -1);  // far from its value, everywhere: the prediction moves
  page->wait();
  CHECK(page->outcome()->after != page->outcome()->before);
  // a feature or a position that does not exist is said, not clamped to the nearest
  CHECK_FALSE(page->setClamp(S, 1.0, -1));
  CHECK(page->status().contains("No feature 24"));
  CHECK_FALSE(page->setClamp(0, 1.0, 4));
  CHECK(page->status().contains("No position 4"));
  CHECK(page->table()->verticalHeaderItem(0)->text() == "0");  // rows count from 0, as positions do
}

TEST_CASE("line view: a long text draws a window of tokens the user moves, lines within it, below the titles",
          "[ui][lines]") {
  MainWindow w;
  w.resize(1280, 720);
  w.useModel(attnlab::test::test_model(/*max_len=*/400), "test");
  w.show();
  ExploreView* e = w.explore();
  e->setMaskArgs({"causal", "window:4"});  // each query sees <= 4 keys: lines above 1% in every window
  std::string text;
  for (int i = 0; i < 300; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  e->setText(QString::fromStdString(text));
  e->flush();
  REQUIRE(e->showPage("lines"));
  QApplication::processEvents();
  LineView* v = e->lineView();
  auto* first = e->findChild<QSpinBox*>("lineFirst");
  REQUIRE(first);
  const ForwardResult& r = *e->result();
  const int T = static_cast<int>(r.ids.size());
  REQUIRE(T > LineView::kMaxTokens);
  CHECK(first->isVisible());
  CHECK(first->maximum() == T - LineView::kMaxTokens);
  CHECK(v->tokenCount() == T);
  // The last window: every line between its queries and keys, none outside, with the probability.
  first->setValue(first->maximum());
  QApplication::processEvents();
  const int lo = T - LineView::kMaxTokens;
  CHECK(v->first(0) == lo);
  CHECK(v->first(1) == lo);
  CHECK(v->notice().contains(QString("tokens %1-%2 of %3").arg(lo).arg(T - 1).arg(T)));
  const Tensor& P = r.probs(e->layer());
  int expected = 0;
  for (size_t h = 0; h < static_cast<size_t>(P.dim(0)); ++h)
    for (int i = lo; i < T; ++i)
      for (int j = lo; j < T; ++j) expected += P.data[(h * T + i) * T + j] > 0.01f;
  const auto ls = v->lines();
  REQUIRE(expected > 0);
  CHECK(static_cast<int>(ls.size()) == expected);
  for (const auto& l : ls) {
    CHECK(l.query >= lo);
    CHECK(l.key >= lo);
    CHECK(l.p == P.data[(static_cast<size_t>(l.head) * T + l.query) * T + l.key]);
  }
  // The mouse over the window's last key hovers that position (the inverse of the anchors).
  QTest::mouseMove(v, v->tokenAnchor(1, T - 1).toPoint() + QPoint(20, 0));
  QApplication::processEvents();
  REQUIRE_FALSE(v->lines().empty());
  for (const auto& l : v->lines()) CHECK(l.key == T - 1);
  // The anchors start below the title and the "strongest n lines" subtitle (lines ran over it).
  CHECK(v->tokenAnchor(0, lo).y() > 32);
  CHECK(v->tokenAnchor(1, T - 1).y() < v->height());
  // A shorter text hides the control and draws every token.
  e->setText("abcdef");
  e->flush();
  QApplication::processEvents();
  CHECK_FALSE(first->isVisible());
  CHECK(v->first(0) == 0);
  CHECK(v->notice().isEmpty());
}

TEST_CASE("All layers draws the thumbnails in view and the others when they are scrolled to", "[ui][pages][layers]") {
  const auto m = attnlab::test::test_model(64, 4, 12);
  const ModelConfig& c = m->config;
  MainWindow w;
  w.resize(1280, 720);
  w.useModel(m, "twelve layers");
  w.show();
  ExploreView* e = w.explore();
  e->setText("abcdefg");
  e->flush();
  REQUIRE(e->showPage("layers"));
  QApplication::processEvents();
  auto* scroll = e->page("layers")->findChild<QScrollArea*>();
  REQUIRE(scroll);
  std::vector<HeatmapView*> thumbs;  // in layer-major order, as the grid holds them
  for (int l = 0; l < c.num_layers; ++l)
    for (int h = 0; h < c.num_heads; ++h) {
      auto* g = qobject_cast<QGridLayout*>(scroll->widget()->layout());
      REQUIRE(g);
      thumbs.push_back(qobject_cast<HeatmapView*>(g->itemAtPosition(l, h + 1)->widget()));
      REQUIRE(thumbs.back());
    }
  auto in_view = [&](HeatmapView* t) {
    return scroll->viewport()->rect().intersects(QRect(t->mapTo(scroll->viewport(), QPoint(0, 0)), t->size()));
  };
  REQUIRE(in_view(thumbs.front()));
  REQUIRE_FALSE(in_view(thumbs.back()));  // 12 layers do not fit 720 px
  auto check_drawn = [&](int rows) {
    int drawn = 0;
    for (size_t k = 0; k < thumbs.size(); ++k) {
      if (!in_view(thumbs[k])) continue;
      ++drawn;
      CHECK(thumbs[k]->data().rows == rows);
      CHECK(thumbs[k]->data().title.startsWith(QString("head %1").arg(k % 4)));
      CHECK(thumbs[k]->data().drawn == (*e->state()->outcome().heads)[k].drawn);
    }
    CHECK(drawn > 0);
  };
  check_drawn(7);
  CHECK(thumbs.back()->data().empty());  // far out of view: not drawn yet
  // scrolled to the end, the last layers are drawn; a new input redraws them at once, and the
  // first layers (now out of view) when they are scrolled back to
  scroll->verticalScrollBar()->setValue(scroll->verticalScrollBar()->maximum());
  QApplication::processEvents();
  REQUIRE(in_view(thumbs.back()));
  check_drawn(7);
  e->setText("abcdefghij");
  e->flush();
  QApplication::processEvents();
  check_drawn(10);
  CHECK(thumbs.front()->data().rows == 7);  // out of view, the older map waits
  scroll->verticalScrollBar()->setValue(0);
  QApplication::processEvents();
  check_drawn(10);
  CHECK(thumbs.front()->data().rows == 10);
}
