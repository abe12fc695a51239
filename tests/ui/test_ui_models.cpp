// Explore on other model families and the ways in: a Hugging Face BERT folder, a causal language
// model (locked causal mask, next tokens, the logit lens), the mask editor beside the other
// masks, the tour, and Help.
#include <QAbstractItemModelTester>
#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QImage>
#include <QDialog>
#include <QDockWidget>
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
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTest>
#include <qcustomplot.h>
#include <QThread>
#include <QTimer>
#include <catch2/catch.hpp>
#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "engine/analysis/alignment.h"
#include "engine/analysis/attribution.h"
#include "engine/analysis/methods.h"
#include "engine/analysis/patching.h"
#include "engine/compute/forward.h"
#include "engine/compute/generate.h"
#include "engine/text/input.h"
#include "engine/compute/lm.h"
#include "engine/formats/npy.h"
#include "engine/compute/ops.h"
#include "engine/train/trainer.h"
#include "ui/bar_view.h"
#include "ui/explore/alignment_page.h"
#include "ui/colormaps.h"
#include "ui/curve_view.h"
#include "ui/explore/generate_page.h"
#include "ui/explore/input_bar.h"
#include "ui/explore/page_table.h"
#include "ui/explore_view.h"
#include "ui/tour.h"
#include "ui/train_view.h"
#include "ui/forward_runner.h"
#include "ui/explore/analysis_pages.h"
#include "ui/explore/circuits_page.h"
#include "ui/heatmap_view.h"
#include "ui/methods_view.h"
#include "ui/line_view.h"
#include "ui/main_window.h"
#include "ui/mask_editor.h"
#include "ui/token_model.h"
#include "tests/engine/hf_test_model.h"
#include "tests/engine/tolerance.h"
#include "tests/ui/ui_test_util.h"

using namespace attnlab;
using namespace attnlab::test;

TEST_CASE("a Hugging Face BERT folder: sentence B box, token types, hide [CLS]/[SEP], merged pieces, summary",
          "[ui][hf]") {
  QTemporaryDir tmp;
  const std::string dir = (tmp.path() + "/tiny-bert").toStdString();
  save_model(test::tiny_bert((tmp.path() + "/src").toStdString()), dir);  // in Hugging Face names
  MainWindow w;
  REQUIRE(w.openModel(QString::fromStdString(dir)));
  w.show();
  ExploreView* e = w.explore();
  auto* pair = e->findChild<QLineEdit*>("pairText");
  REQUIRE(pair);
  CHECK(pair->isVisible());
  std::vector<int> types;
  e->controller()->setRequestHook([&](ForwardRequest& r) { types = r.token_types; });
  e->setText("the movie");
  e->setPairText("was good");
  e->flush();
  CHECK(types == std::vector<int>{0, 0, 0, 0, 1, 1, 1});
  REQUIRE(e->result());
  CHECK(e->result()->tokens.size() == 7);
  CHECK(e->headView(0)->data().cols == 7);
  // past max_len (32): cut as transformers' longest_first, sentence B and both [SEP] kept, said
  auto words = [](int n, const char* w) {
    QStringList l;
    for (int i = 0; i < n; ++i) l << w;
    return l.join(' ');
  };
  auto label_with = [&](const QString& text) {
    for (QLabel* l : e->findChildren<QLabel*>())
      if (l->text().contains(text)) return true;
    return false;
  };
  e->setText(words(40, "movie"));
  e->flush();
  REQUIRE(e->result());
  CHECK(e->result()->tokens.size() == 32);
  CHECK(types.back() == 1);
  CHECK(e->result()->tokens.back() == "[SEP]");
  CHECK(label_with("sentence A lost its last 13 tokens, sentence B is whole"));
  CHECK_FALSE(label_with("Sentence B (cut"));
  e->setText("the movie");
  e->setPairText(words(40, "good"));
  e->flush();
  CHECK(label_with("Sentence B (cut by 13)"));
  e->setPairText("was good");
  e->flush();
  CHECK(label_with("Sentence B:"));
  // hide the special tokens: 4 rows and columns, labelled with the words; merge pieces
  e->setPairText("");
  e->setText("unbelievably playing movie");
  e->setTokenView(true, true);
  e->flush();
  REQUIRE(e->result());
  CHECK(e->result()->tokens == std::vector<std::string>{"unbelievably", "playing", "movie"});
  CHECK(e->headView(0)->data().rows == 3);
  bool said = false;  // the view says what it did
  for (QLabel* l : e->findChildren<QLabel*>())
    said = said || (l->text().contains("Word pieces merged") && l->text().contains("rows sum to less than 1"));
  CHECK(said);
  e->setTokenView(false, false);
  e->flush();
  CHECK(e->result()->tokens.size() == 8);  // [CLS] un ##believ ##ably play ##ing movie [SEP]
  // an attnlab model: no sentence B box
  w.useModel(test_model(), "test");
  CHECK_FALSE(pair->isVisible());
}

TEST_CASE("Beyond attention draws its maps through the hide [CLS]/[SEP] and merge-pieces view", "[ui][hf][analysis]") {
  QTemporaryDir tmp;
  const std::string dir = (tmp.path() + "/tiny-bert").toStdString();
  save_model(test::tiny_bert((tmp.path() + "/src").toStdString()), dir);
  MainWindow w;
  REQUIRE(w.openModel(QString::fromStdString(dir)));
  w.show();
  ExploreView* e = w.explore();
  e->setText("unbelievably playing movie");  // [CLS] un ##believ ##ably play ##ing movie [SEP]
  e->flush();
  REQUIRE(e->showPage("methods"));
  MethodsView* m = e->methodsView();
  m->setMethod(MethodsView::Rollout);
  m->wait();
  QApplication::processEvents();
  REQUIRE(m->view()->data().rows == 8);
  std::vector<float> full(64);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) full[static_cast<size_t>(i * 8 + j)] = m->view()->data().value(i, j);
  e->setTokenView(true, true);
  e->flush();
  m->wait();
  QApplication::processEvents();
  const HeatmapData& d = m->view()->data();
  REQUIRE(d.rows == 3);
  REQUIRE(d.cols == 3);
  CHECK(d.row_labels == QStringList{"unbelievably", "playing", "movie"});
  // keys summed over a word's pieces, queries averaged, [CLS] and [SEP] left out. The view regroups
  // the rollout in double and rounds the mean once (u of want, exact here); the rollout itself is
  // the same function on the same inputs, but for its L = 2 T-term products (T = 8, entries <= 1)
  // if they sum in another order: sum_bound(8, 1) each, for each of the b's pieces summed.
  const std::vector<std::vector<int>> words = {{1, 2, 3}, {4, 5}, {6}};
  const double reorder = 2 * sum_bound(8, 1.0);
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      double want = 0;
      for (int i : words[static_cast<size_t>(a)])
        for (int j : words[static_cast<size_t>(b)]) want += full[static_cast<size_t>(i * 8 + j)];
      want /= static_cast<double>(words[static_cast<size_t>(a)].size());
      const double tol = 2 * kU32 * want + static_cast<double>(words[static_cast<size_t>(b)].size()) * reorder;
      CHECK(std::fabs(d.value(a, b) - want) <= tol);
    }
  CHECK(m->statusText().contains("3 of 8 positions"));
  CHECK(m->statusText().contains("pieces merged"));
  // a selected piece (##believ) selects its word's row of the shown (merged) attention
  m->setSelection({2});
  m->setMethod(MethodsView::SelectedQueries);
  const Tensor& P = e->result()->attention[0];  // [H, 3, 3] as shown
  const HeatmapData& sd = m->view()->data();
  REQUIRE(sd.rows == static_cast<int>(P.dim(0)));
  REQUIRE(sd.cols == 3);
  // a copy of the shown row (a sum of one row): exact; 2 ulps allowed
  for (int h = 0; h < sd.rows; ++h)
    for (int j = 0; j < 3; ++j)
      CHECK(sd.value(h, j) == Approx(P.data[(static_cast<size_t>(h) * 3 + 0) * 3 + j]).epsilon(2 * kU32));
  m->setSelection({0});  // [CLS] alone: hidden
  CHECK(m->view()->data().rows == 0);
  CHECK(m->statusText().contains("hidden"));
  m->setMethod(MethodsView::Rollout);
  e->setTokenView(false, false);
  e->flush();
  m->wait();
  QApplication::processEvents();
  CHECK(m->view()->data().rows == 8);
}

TEST_CASE("a causal language model: its causal mask locked on, no cross mode, next tokens, the logit lens",
          "[ui][decoders]") {
  QTemporaryDir tmp;
  const std::string dir = (tmp.path() + "/tiny-llama").toStdString();
  const Model lm = test::tiny_decoder(dir);
  MainWindow w;
  REQUIRE(w.openModel(QString::fromStdString(dir)));
  w.show();
  ExploreView* e = w.explore();
  QCheckBox* causal = nullptr;
  QCheckBox* cross = nullptr;
  for (QCheckBox* c : e->findChildren<QCheckBox*>()) {
    if (c->text() == "causal") causal = c;
    if (c->text().startsWith("Cross-attention")) cross = c;
  }
  REQUIRE(causal);
  REQUIRE(cross);
  CHECK(causal->isChecked());
  CHECK_FALSE(causal->isEnabled());
  CHECK_FALSE(cross->isEnabled());
  CHECK_FALSE(e->findChild<QLineEdit*>("pairText")->isVisible());
  e->setText("the the w");
  e->flush();
  REQUIRE(e->result());
  const int T = static_cast<int>(e->result()->ids.size());  // <|endoftext|> t he Ġthe Ġw
  CHECK(T == 5);
  CHECK(e->result()->mask.is_blocked(0, 0, 1));
  CHECK(e->predictionText().contains("Next token after"));
  // the listed tokens are the model's top 10 at the last position, best first
  const auto top = top_next_tokens(lm, e->result()->hidden, T - 1, 10);
  CHECK(
      e->predictionText().contains(QString::fromStdString(lm.tokenizer->readable_token(top[0].first)).toHtmlEscaped()));
  e->setNextTokenPosition(1);
  CHECK(e->predictionText().contains("(position 1)"));
  bool masks_note = false;  // its own causal mask is no experiment
  for (QLabel* l : e->findChildren<QLabel*>()) masks_note = masks_note || l->text().contains("are experiments");
  CHECK_FALSE(masks_note);
  REQUIRE(e->showPage("lens"));
  e->waitForLens();
  QTableWidget* lens = e->lensTable();
  REQUIRE(lens->rowCount() == 2);
  REQUIRE(lens->columnCount() == T);
  const LogitLens want = logit_lens(lm, *make_backend("cpu"), e->result()->ids);
  for (int p = 0; p < T; ++p)  // the top row is the last layer
    CHECK(lens->item(0, p)->text() ==
          QString::fromStdString(lm.tokenizer->readable_token(want.top_id[static_cast<size_t>(T + p)])));
  {  // a window of positions: the last ones first, then moved; the columns are those of the whole lens
    LensPage* page = e->findChild<LensPage*>();
    QSpinBox* from = e->findChild<QSpinBox*>("lensFrom");
    REQUIRE(page);
    REQUIRE(from);
    page->setWindow(3);
    e->setText(e->text() + " ");  // another length: the window is placed at the end
    e->waitForLens();
    const int n = static_cast<int>(e->result()->ids.size());
    const LogitLens whole = logit_lens(lm, *make_backend("cpu"), e->result()->ids);
    auto check_window = [&](int first) {
      REQUIRE(lens->columnCount() == 3);
      CHECK(lens->horizontalHeaderItem(0)->text().startsWith(QString::number(first) + " "));
      for (int c = 0; c < 3; ++c)
        CHECK(lens->item(0, c)->text() ==
              QString::fromStdString(lm.tokenizer->readable_token(whole.top_id[static_cast<size_t>(n + first + c)])));
    };
    check_window(n - 3);
    from->setValue(1);
    e->waitForLens();
    check_window(1);
    page->setWindow(256);
    e->setText(e->text().chopped(1));
    e->waitForLens();
    REQUIRE(lens->columnCount() == T);
  }
  {  // the lens exports as the CLI writes it: [2, layers, T], ids then probabilities; or a CSV
    QTemporaryDir dir;
    e->exportTable("lens", dir.filePath("lens.npy"));
    const Tensor saved = load_npy(dir.filePath("lens.npy").toStdString()).tensor;
    REQUIRE(saved.shape == std::vector<int64_t>{2, 2, T});
    for (int k = 0; k < 2 * T; ++k) {
      CHECK(saved.data[static_cast<size_t>(k)] == static_cast<float>(want.top_id[static_cast<size_t>(k)]));
      CHECK(saved.data[static_cast<size_t>(2 * T + k)] == want.top_prob[static_cast<size_t>(k)]);
    }
    e->exportTable("lens", dir.filePath("lens.csv"));
    QFile csv(dir.filePath("lens.csv"));
    REQUIRE(csv.open(QIODevice::ReadOnly));
    CHECK(csv.readAll().count('\n') == 1 + 2 * T);
    CHECK_THROWS_WITH(e->exportTable("lens", dir.filePath("lens.png")), Catch::Contains("expected .csv or .npy"));
  }
  // an encoder again: causal is a choice, cross mode back, no lens
  w.useModel(test_model(), "test");
  CHECK(causal->isEnabled());
  CHECK(cross->isEnabled());
  CHECK_FALSE(e->lensTable()->parentWidget()->isEnabled());
}

TEST_CASE("the mask editor shows what the other masks block, beside the painted cells", "[ui][masks]") {
  OpenWindow o("abcde", QStringList{"causal"});
  ExploreView* e = o.e;
  REQUIRE(e->showPage("mask"));
  const auto& others = e->maskEditor()->others();
  REQUIRE(others.size() == 25u);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) CHECK(others[static_cast<size_t>(i * 5 + j)] == (j > i ? 1 : 0));
  CHECK(e->maskEditor()->isEmpty());  // shown, not painted: the custom mask stays empty
  e->setMaskArgs({});
  e->flush();
  for (uint8_t v : e->maskEditor()->others()) CHECK(v == 0);
}

TEST_CASE("the tour: every step opens its state, and Help > Tour walks through them", "[ui][tour]") {
  MainWindow w;
  w.useModel(test_model(), "test");
  w.show();
  ExploreView* e = w.explore();
  const auto& steps = tour_steps();
  REQUIRE(steps.size() >= 9);
  for (size_t i = 0; i < steps.size(); ++i) {
    INFO("step " << i + 1 << ": " << steps[i].title.toStdString());
    REQUIRE(show_tour_step(w, static_cast<int>(i), ATTNLAB_RESOURCE_DIR "/models"));
    // the relative-positions step opens the shipped relative model; the next one the default again
    CHECK((w.modelDir().endsWith("/relative") == (steps[i].model == "relative")));
    if (!steps[i].model.isEmpty()) CHECK(e->model()->config.positional == Positional::Relative);
    e->flush();
    const TourStep& s = steps[i];
    if (s.page == "train") {
      CHECK(w.tabs()->currentWidget() == w.train());
      continue;
    }
    CHECK(w.tabs()->currentWidget() == e);
    CHECK(e->text() == s.input);
    CHECK(e->maskArgs() == s.masks);
    CHECK(e->layer() == s.layer);
    REQUIRE(e->result());
    CHECK(static_cast<int>(e->result()->ids.size()) >= s.pad_to);
    CHECK(e->result()->is_cross() == !s.cross.isEmpty());
    QTabWidget* pages = e->tabs();
    const QString shown = pages->tabText(pages->currentIndex()).toLower();
    REQUIRE(find_explore_page(s.page));
    CHECK(shown == QString(find_explore_page(s.page)->title).toLower());
    if (!s.compare_model.isEmpty()) {  // beside the shipped model: A - B, B that model on the same text
      MethodsView* m = e->methodsView();
      CHECK(m->method() == MethodsView::Compare);
      CHECK(m->compareName() == s.compare_model);
    }
    // article 003's own mask: painted in the editor on this input's shape and on; off after it
    MaskEditor* editor = e->maskEditor();
    CHECK(e->customMask() == (s.custom_band >= 0));
    if (s.custom_band < 0) CHECK(editor->isEmpty());
    if (s.custom_band >= 0) {
      const int T = static_cast<int>(e->result()->ids.size());
      REQUIRE(editor->rows() == T);
      for (int q = 0; q < T; ++q)
        for (int k = 0; k < T; ++k) CHECK(editor->blocked(0, q, k) == (std::abs(q - k) > s.custom_band));
      // with padding and causal: each word sees itself and the one before, never a [PAD]
      const Tensor& P = e->result()->probs(0);
      const int pads = static_cast<int>(std::count(e->result()->tokens.begin(), e->result()->tokens.end(), "[PAD]"));
      for (int64_t h = 0; h < P.dim(0); ++h)
        for (int q = 0; q < T; ++q)
          for (int k = 0; k < T; ++k) {
            const bool seen = k <= q && q - k <= s.custom_band && k < T - pads;
            if (!seen) CHECK(P.data[(static_cast<size_t>(h) * T + q) * T + k] == 0.0f);
          }
    }
    if (s.page == "circuits") {  // patched on the default model: one row per layer, one column per head
      auto* c = static_cast<CircuitsPage*>(e->page("circuits"));
      c->wait();
      REQUIRE(c->result());
      CHECK(c->map()->data().rows == e->model()->config.num_layers);
      CHECK(c->map()->data().cols == e->model()->config.num_heads);
    }
  }
  CHECK_FALSE(show_tour_step(w, static_cast<int>(steps.size())));
  {  // the tour is written for the shipped default model: it knows every word of every step
    const Model def = load_model(ATTNLAB_RESOURCE_DIR "/models/default");
    for (const TourStep& s : steps)
      for (const QString& text : {s.input, s.cross}) {
        INFO(text.toStdString());
        const PreparedInput in = prepare_text(def, text.toStdString());
        CHECK(std::count(in.unknown.begin(), in.unknown.end(), 1) == 0);
      }
  }
  // Help > Tour: a list of the steps; choosing one opens it
  w.showTour();
  auto* list = w.findChild<QListWidget*>("tourSteps");
  REQUIRE(list);
  CHECK(list->count() == static_cast<int>(steps.size()));
  list->setCurrentRow(3);  // the causal mask
  e->flush();
  CHECK(e->maskArgs() == QStringList{"causal"});
  // the step's text says which article is which, by title
  bool named = false;
  REQUIRE(w.findChild<QDockWidget*>("tourDock"));
  CHECK(w.findChild<QDockWidget*>("tourDock")->isVisible());  // a panel beside the views, not a window over them
  for (QLabel* l : w.findChild<QDockWidget*>("tourDock")->findChildren<QLabel*>())
    named = named || (l->text().contains("The causal mask") && l->text().contains("Article 000") &&
                      l->text().contains(QString::fromUtf8("\u63a9\u7801")));  // 掩码, "mask", in 003's title
  CHECK(named);
}

TEST_CASE("the tour's article 003 mask: as printed it blocks nothing, from ones it is the band", "[ui][tour]") {
  for (int n : {1, 2, 5, 8}) {
    const std::vector<uint8_t> printed = article_custom_mask(n, false), fixed = article_custom_mask(n, true);
    REQUIRE(printed.size() == static_cast<size_t>(n * n));
    CHECK(std::count(printed.begin(), printed.end(), 1) == 0);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) CHECK(fixed[static_cast<size_t>(i * n + j)] == (std::abs(i - j) > 1));
  }
  const QString tables = article_custom_mask_tables(8);
  CHECK(tables.contains("0 blocked"));
  CHECK(tables.contains(QString("%1 blocked").arg(64 - (3 * 8 - 2))));
  CHECK(tables.count("<td bgcolor") == 2 * 64);
}

TEST_CASE("Help: About names the version, Qt, Eigen, the backends and the model; shortcuts are listed", "[ui][help]") {
  MainWindow w;
  w.useModel(test_model(), "test");
  const QString about = w.aboutText();
  CHECK(about.contains(ATTNLAB_VERSION));
  CHECK(about.contains(qVersion()));
  CHECK(about.contains(QString::fromStdString("Eigen " + eigen_version())));
  CHECK(about.contains("cpu:"));
  CHECK(about.contains("4 heads"));  // the open model's summary
  CHECK(w.shortcutsText().contains("Ctrl+E"));
  bool help = false;
  for (QAction* a : w.menuBar()->actions()) help = help || a->text() == "&Help";
  CHECK(help);
}

TEST_CASE(
    "the Generate page: steps append the likeliest token, the chart marks it, undo takes it back, a seed "
    "repeats a sampled text",
    "[ui][decoders][generate]") {
  QTemporaryDir tmp;
  const std::string dir = (tmp.path() + "/tiny-llama").toStdString();
  const Model lm = test::tiny_decoder(dir);
  MainWindow w;
  REQUIRE(w.openModel(QString::fromStdString(dir)));
  w.show();
  ExploreView* e = w.explore();
  e->setText("the the w");
  e->flush();
  REQUIRE(e->showPage("generate"));
  auto* g = e->findChild<GeneratePage*>();
  REQUIRE(g);
  CHECK(g->isEnabled());
  const std::vector<int> prompt = e->result()->ids;
  g->step();
  g->wait();
  REQUIRE(g->steps() == 1);
  const GeneratePage::Step& s = g->history()[0];
  // greedy: the likeliest next token of a full pass over the prompt
  const auto top = top_next_tokens(lm, e->result()->hidden, static_cast<int>(prompt.size()) - 1, 2);
  if (top[0].second - top[1].second > 1e-4) CHECK(s.id == top[0].first);
  CHECK(std::abs(s.prob - top[0].second) < 1e-4);
  CHECK(s.raw_prob == s.prob);  // greedy draws from the raw distribution
  // the token is appended to the text, and the views follow it
  CHECK(e->text() == "the the w" + QString::fromStdString(continuation_text(lm, prompt, [&] {
                       auto ids = prompt;
                       ids.push_back(s.id);
                       return ids;
                     }())));
  e->flush();
  CHECK(e->result()->ids.size() > prompt.size());
  // the chart: both distributions, the chosen token marked, at most 12 tokens
  BarView* chart = g->chart();
  REQUIRE(chart->count() >= 1);
  CHECK(chart->count() <= 13);
  int marked = 0;
  for (const QString& l : chart->labels())
    marked += l == QString::fromUtf8("\u25B6 ") + QString::fromStdString(lm.readable_token(s.id));
  CHECK(marked == 1);
  CHECK(g->table()->rowCount() == 1);
  CHECK(g->summary().contains("Step 1 of 1"));
  // the generated token, selected in the strip, is its step; its attention row is the row of the
  // position that chose it, every head of the layer, read from the explored result
  const int n = static_cast<int>(prompt.size());
  CHECK(g->stepAt(n) == 0);
  CHECK(g->stepAt(n - 1) == -1);  // a prompt token
  e->inputBar()->selectTokens({n});
  CHECK(g->table()->currentRow() == 0);
  {
    const HeatmapData& row = g->rowView()->data();
    const Tensor& a = e->result()->attention[static_cast<size_t>(e->state()->layer())];
    const int T = static_cast<int>(a.dim(1));
    REQUIRE(row.rows == lm.config.num_heads);
    REQUIRE(row.cols == n);
    for (int h = 0; h < row.rows; ++h)
      for (int j = 0; j < n; ++j) CHECK(row.value(h, j) == a.data[(static_cast<size_t>(h) * T + (n - 1)) * T + j]);
  }
  // why this token and not another: a click on another token's bars attributes their logit
  // difference at that step, per head and MLP
  int other_bar = -1;
  for (size_t c = 0; c < s.chart_ids.size() && other_bar < 0; ++c)
    if (s.chart_ids[c] != s.id) other_bar = static_cast<int>(c);
  REQUIRE(other_bar >= 0);
  const int other = s.chart_ids[static_cast<size_t>(other_bar)];
  QCustomPlot* bars = chart->plot();
  const QPoint at(static_cast<int>(bars->xAxis->coordToPixel(other_bar)),
                  static_cast<int>(bars->yAxis->coordToPixel(0)) - 2);
  QTest::mouseClick(bars, Qt::LeftButton, {}, at);
  g->wait();
  REQUIRE(g->contrast());
  const LogitAttribution& why = *g->contrast();
  {
    ForwardRequest r;
    r.ids = s.ids;
    auto cpu = make_backend("cpu");
    const double full = logit_difference(lm, run_forward(lm, *cpu, r), s.id, other);
    double magnitude = std::fabs(why.embedding) + std::fabs(why.biases);
    for (float v : why.parts.data) magnitude += std::fabs(v);
    // the same float32 pass over the same ids: the logit difference agrees with a pass of its own
    // to rounding of the LM head's sum of E terms (and its sum of parts to twice that: norm, head)
    CHECK(std::fabs(why.logit_diff - full) <= sum_bound(lm.config.embed_size, magnitude) + 1e-6 * magnitude);
    CHECK(std::fabs(why.total - why.logit_diff) <= 2 * sum_bound(lm.config.embed_size, magnitude) + 1e-6 * magnitude);
    if (s.greedy) CHECK(full >= 0);  // greedy chose the likeliest: nothing in the chart beats it
  }
  const HeatmapData& parts = g->contrastView()->data();
  REQUIRE(parts.rows == lm.config.num_layers);
  REQUIRE(parts.cols == lm.config.num_heads + 1);
  CHECK(parts.col_labels.back() == "MLP");
  for (int l = 0; l < parts.rows; ++l)
    for (int c = 0; c < parts.cols; ++c)
      CHECK(parts.value(l, c) == why.parts.data[static_cast<size_t>(l) * parts.cols + c]);
  CHECK(g->contrastText().contains(QString::fromStdString(lm.readable_token(other))));
  // a head of the map opens its pattern
  emit g->contrastView()->cellClicked(lm.config.num_layers - 1, 0);
  CHECK(e->state()->layer() == lm.config.num_layers - 1);
  // the strip colours the generated tokens, and says so
  const TokenListModel* strip = e->inputBar()->tokenModel();
  CHECK(strip->generatedFrom() == static_cast<int>(prompt.size()));
  CHECK(strip->data(strip->index(static_cast<int>(prompt.size())), Qt::ForegroundRole).isValid());
  CHECK_FALSE(strip->data(strip->index(0), Qt::ForegroundRole).isValid());
  CHECK(e->findChild<QLabel*>("tokenLegend")->text().contains("generated"));
  // more steps, then undo: the text and the table go back one step
  g->generate(3);
  g->wait();
  CHECK(g->steps() == 4);
  const QString after4 = e->text();
  g->undo();
  CHECK(g->steps() == 3);
  CHECK(g->table()->rowCount() == 3);
  CHECK(g->curve()->pointCount(0) == 3);  // p and entropy per step
  CHECK(g->curve()->pointCount(1) == 3);
  CHECK(e->text() != after4);
  CHECK(after4.startsWith(e->text()));
  // sampling: top-k 3 keeps at most 3 tokens (more only on ties); one seed, one text
  auto sampled_text = [&] {
    while (g->steps() > 0) g->undo();
    SamplingOptions o;
    o.greedy = false;
    o.temperature = 1.5f;
    o.top_k = 3;
    o.seed = 11;
    g->setSampling(o);
    g->generate(5);
    g->wait();
    for (const auto& st : g->history()) CHECK(st.kept <= 3);
    return e->text();
  };
  const QString first = sampled_text();
  CHECK(first.startsWith("the the w"));
  CHECK(sampled_text() == first);
  // hot sampling over a byte-level vocabulary draws bytes of characters not yet whole: they wait
  // for the rest, and the run goes on (the history keeps every step)
  while (g->steps() > 0) g->undo();
  SamplingOptions hot;
  hot.greedy = false;
  hot.temperature = 5.0f;
  hot.seed = 2;
  g->setSampling(hot);
  g->generate(10);
  g->wait();
  CHECK(g->steps() == 10);
  int waiting = 0;
  for (const auto& st : g->history()) waiting += st.pending;
  CHECK(waiting > 0);  // the case this checks did happen
  // Stop ends a run after the step in flight: Generate 40, Stop at once, and no step follows
  while (g->steps() > 0) g->undo();
  SamplingOptions greedy;
  greedy.greedy = true;
  g->setSampling(greedy);
  g->generate(40);
  g->stop();
  g->wait();
  QTest::qWait(100);  // a next step would start from the event loop
  g->wait();
  CHECK(g->steps() == 1);
  g->generate(2);  // and a new run goes on from there
  g->wait();
  QTest::qWait(100);
  g->wait();
  CHECK(g->steps() == 3);
  // an encoder has no Generate page
  w.useModel(test_model(), "test");
  CHECK_FALSE(e->showPage("generate"));
}

TEST_CASE("--backend opencl selects the preferred OpenCL device in the toolbar", "[ui][backend]") {
  // the toolbar lists devices as opencl:N; the plain name used to leave it showing cpu while
  // the passes ran on OpenCL (the status bar and the toolbar disagreed)
  MainWindow w;
  w.useModel(test_model(), "test");
  auto* box = w.findChild<QComboBox*>("backendBox");
  REQUIRE(box);
  CHECK(box->currentText() == "cpu");
  w.setBackend("opencl");
  CHECK(box->currentText().startsWith("opencl:"));  // CI installs PoCL: a device is there
  w.setBackend("reference");
  CHECK(box->currentText() == "reference");
}

namespace {

// An encoder-decoder of test_model()'s size (characters as tokens): the decoder's layers attend
// to the encoder's output; the encoder is 3 layers to the decoder's 2 unless `same`.
std::shared_ptr<const Model> seq2seq_test_model(bool same) {
  ModelConfig d;
  d.vocab_size = 100, d.embed_size = 32, d.num_heads = 4, d.num_layers = 2, d.ff_dim = 32, d.max_len = 64;
  d.tokenizer = TokenizerKind::Char, d.positional = Positional::Learned;
  d.causal = d.cross_attention = d.lm_head = d.tied_lm_head = true;
  d.decoder_start_id = 1;
  auto m = std::make_shared<Model>();
  m->config = d;
  m->weights = random_weights(d, 1);
  m->vocab = default_vocab(d);
  ModelConfig c = d;
  c.causal = c.cross_attention = c.lm_head = c.tied_lm_head = false;
  c.num_layers = same ? 2 : 3;
  auto enc = std::make_shared<Model>();
  enc->config = c;
  enc->weights = random_weights(c, 2);
  enc->vocab = m->vocab;
  m->encoder = enc;
  return m;
}

}  // namespace

TEST_CASE("an encoder-decoder: a source and a target, its cross, decoder and encoder maps; one-sequence pages hidden",
          "[ui][seq2seq]") {
  const std::shared_ptr<const Model> model = seq2seq_test_model(true);
  MainWindow w;
  w.useModel(model, "test");
  w.show();
  ExploreView* e = w.explore();
  QLineEdit* target = e->findChild<QLineEdit*>("targetText");
  QComboBox* part = e->findChild<QComboBox*>("seq2seqPart");
  REQUIRE(target);
  REQUIRE(part);
  CHECK(target->isVisible());
  CHECK(part->isVisible());
  CHECK_FALSE(checkbox(e, "Cross-attention with:")->isVisible());
  CHECK_FALSE(e->findChild<QLineEdit*>("pairText")->isVisible());
  // pages that run one sequence's passes are hidden; the maps' pages stay
  for (const char* page : {"lens", "generate", "circuits", "steer", "features", "methods", "importance", "mask"})
    CHECK_FALSE(e->showPage(page));
  for (const char* page : {"lines", "layers", "head", "patterns", "heads"}) CHECK(e->showPage(page));

  e->setText("a cat sat");
  e->flush();
  CHECK_FALSE(e->result());  // no target yet: nothing computed, and the notice says what to type
  bool asks = false;
  for (QLabel* l : e->findChildren<QLabel*>()) asks = asks || l->text().contains("Type a target");
  CHECK(asks);

  QSignalSpy status(e, &ExploreView::status);
  e->setTargetText("le chat");
  e->flush();
  REQUIRE(e->result());
  const PreparedInput& source = e->controller()->prepared();
  const PreparedInput& labels = e->controller()->preparedCross();
  const std::vector<int> decoder = decoder_input_ids(*model, labels.ids);
  const int S = static_cast<int>(source.size()), T = static_cast<int>(decoder.size());
  {  // cross-attention first: target rows (the decoder's input), source columns
    const ForwardResult& r = *e->result();
    REQUIRE(r.is_cross());
    CHECK(r.ids == decoder);
    CHECK(r.cross_ids == source.ids);
    const HeatmapData& map = e->state()->outcome().heads->at(0);
    CHECK(map.rows == T);
    CHECK(map.cols == S);
    CHECK(e->state()->colLabels().size() == S);
    // the engine's own pass gives the same maps
    ForwardRequest req;
    req.source_ids = source.ids;
    req.ids = decoder;
    const ForwardResult want = run_forward(*model, *make_backend("cpu"), req);
    for (int l = 0; l < 2; ++l) CHECK(r.probs(l).data == want.decoder_cross_attention[static_cast<size_t>(l)].data);
    REQUIRE(!status.isEmpty());
    CHECK(status.last().at(0).toString().contains(
        QString("source %1, target %2 tokens | cross-attention").arg(S).arg(labels.size())));
    CHECK(e->predictionText().contains("Next token after"));
  }
  e->setPart(Seq2SeqPart::Decoder);
  e->flush();
  {
    const ForwardResult& r = *e->result();
    CHECK_FALSE(r.is_cross());
    CHECK(r.ids == decoder);
    CHECK(e->state()->outcome().heads->at(0).cols == T);
    CHECK(r.mask.is_blocked(0, 0, 1));  // causal
  }
  e->setPart(Seq2SeqPart::Encoder);
  e->flush();
  {
    const ForwardResult& r = *e->result();
    CHECK_FALSE(r.is_cross());
    CHECK(r.ids == source.ids);
    CHECK(e->state()->outcome().heads->at(0).rows == S);
    CHECK_FALSE(r.mask.is_blocked(0, 0, S - 1));  // every source token sees every other
    CHECK(status.last().at(0).toString().contains("encoder self-attention"));
  }
  {  // the alignment: the mean cross-attention of the ticked layers and heads, rows the labels predicted
    REQUIRE(e->showPage("alignment"));
    auto* page = e->findChild<AlignmentPage*>();
    REQUIRE(page);
    REQUIRE(page->alignment().T == T);
    REQUIRE(page->alignment().S == S);
    ForwardRequest req;
    req.source_ids = source.ids;
    req.ids = decoder;
    const ForwardResult want = run_forward(*model, *make_backend("cpu"), req);
    CHECK(page->alignment().map == cross_alignment(want, {}, {}).map);
    CHECK(page->map()->data().row_labels == to_labels(labels.tokens));
    CHECK(page->map()->data().col_labels == to_labels(source.tokens));
    page->choose({1}, {2});
    CHECK(page->chosenLayers() == std::vector<int>{1});
    CHECK(page->alignment().map == cross_alignment(want, {1}, {2}).map);
    CHECK(page->map()->data().title.contains("1 layer x 1 head"));
    CHECK_FALSE(page->lines()->lines().empty());
    CHECK(page->status().contains("Strongest:"));
    QTemporaryDir dir;
    page->exportTo(dir.filePath("a.npy"), 100);
    const Tensor saved = load_npy(dir.filePath("a.npy").toStdString()).tensor;
    CHECK(saved.shape == std::vector<int64_t>{T, S});
    CHECK(std::vector<float>(saved.data.begin(), saved.data.end()) == page->alignment().map);
    page->exportTo(dir.filePath("a.png"), 100);
    CHECK(head_bytes(dir.filePath("a.png"), 4) == QByteArray("\x89PNG", 4));
    CHECK_THROWS_WITH(page->choose({2}, {}), Catch::Contains("no layer 2 (the decoder has 2)"));
    page->choose({}, {});
    for (QCheckBox* b : page->findChildren<QCheckBox*>()) b->setChecked(false);
    CHECK(page->status().contains("Tick at least one layer"));
    page->choose({}, {});
  }
  // an encoder of another shape than the decoder: its maps are not offered in the views
  w.useModel(seq2seq_test_model(false), "test");
  e->flush();
  CHECK(part->currentIndex() == 0);
  REQUIRE(e->result());
  CHECK(e->result()->is_cross());
  CHECK_THROWS_WITH(e->setPart(Seq2SeqPart::Encoder), Catch::Contains("The encoder has 3 layers x 4 heads"));
  CHECK(part->currentIndex() == 0);
  // a classifier again: the cross box back, the target gone, every page back
  w.useModel(test_model(), "test");
  e->flush();
  CHECK(checkbox(e, "Cross-attention with:")->isVisible());
  CHECK_FALSE(target->isVisible());
  CHECK(e->showPage("mask"));
  CHECK_FALSE(e->showPage("alignment"));
  REQUIRE(e->result());
  CHECK_FALSE(e->result()->is_seq2seq());
}
