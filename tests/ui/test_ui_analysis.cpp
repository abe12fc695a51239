// The Explore tab's analysis pages: head importance (click to ablate) and "Beyond attention"
// (rollout, relevance, value-weighted, averages), each held to the engine's methods.
#include <QAbstractButton>
#include <QAbstractItemView>
#include <QAbstractSlider>
#include <QAbstractSpinBox>
#include <QApplication>
#include <QComboBox>
#include <QFile>
#include <QLabel>
#include <QPushButton>
#include <qcustomplot.h>
#include <QLineEdit>
#include <QListView>
#include <QScrollBar>
#include <QTabBar>
#include <QImage>
#include <QTableWidget>
#include <QTemporaryDir>
#include <catch2/catch.hpp>
#include <cmath>

#include "engine/analysis/methods.h"
#include "engine/compute/forward.h"
#include "engine/text/input.h"
#include "engine/formats/npy.h"
#include "ui/explore_view.h"
#include "ui/explore/heads_page.h"
#include "ui/heatmap_view.h"
#include "ui/main_window.h"
#include "ui/methods_view.h"
#include "ui/token_model.h"
#include "tests/engine/test_util.h"
#include "tests/engine/tolerance.h"
#include "tests/ui/ui_test_util.h"

using namespace attnlab;
using namespace attnlab::test;

TEST_CASE("Beyond attention's methods are the method table's page rows, in order", "[ui][analysis][tables]") {
  // MethodsView::Method indexes the page; the table says which method stands at each index
  const std::vector<std::pair<MethodsView::Method, MethodId>> page = {
      {MethodsView::Rollout, MethodId::Rollout},           {MethodsView::Relevance, MethodId::GradAttention},
      {MethodsView::ValueNorm, MethodId::ValueNorm},       {MethodsView::MeanHeads, MethodId::MeanHeads},
      {MethodsView::MeanLayers, MethodId::MeanLayers},     {MethodsView::SelectedQueries, MethodId::SelectedQueries},
      {MethodsView::SelectedKeys, MethodId::SelectedKeys}, {MethodsView::Compare, MethodId::Compare}};
  int on_page = 0;
  for (const MethodRow& r : method_table()) on_page += r.page_index >= 0;
  CHECK(on_page == static_cast<int>(page.size()));
  MethodsView v;
  auto* box = v.findChild<QComboBox*>("methodBox");
  REQUIRE(box);
  CHECK(box->count() == on_page);  // one entry per row, none missing
  for (const auto& [m, id] : page) {
    CHECK(page_method_id(m) == id);
    CHECK(method_row(id).page_index == static_cast<int>(m));
  }
}

TEST_CASE("head importance: the grid matches the engine; clicking a cell ablates that head and the prediction changes",
          "[ui][analysis]") {
  MainWindow w;
  w.useModel(test_model(), "test");
  w.show();
  ExploreView* e = w.explore();
  QString last_status;
  QObject::connect(e, &ExploreView::status, [&](const QString& s) { last_status = s; });
  e->setText("the film was not very good");
  e->flush();
  REQUIRE(e->result());
  const std::vector<float> before = e->result()->class_probs;
  const size_t pred = static_cast<size_t>(e->result()->predicted);
  REQUIRE(e->showPage("importance"));
  e->computeImportance();
  CHECK(e->importanceRunning());  // a progress bar and Cancel while it runs
  e->waitForImportance();
  CHECK_FALSE(e->importanceRunning());
  QTableWidget* t = e->importanceTable();
  const int L = e->model()->config.num_layers, H = e->model()->config.num_heads;
  REQUIRE(t->rowCount() == L);
  REQUIRE(t->columnCount() == H);
  ForwardRequest req;
  req.ids = e->result()->ids;
  const Tensor want = head_importance(*e->model(), *make_backend("cpu"), req, -1);
  int best_l = 0, best_h = 0;
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) {
      // fixed point, in one unit for the table (1 or a power of ten below 0.01, said in the status)
      const QString shown = t->item(l, h)->text();
      CHECK_FALSE(shown.contains('e'));
      double top = 1e-6;
      for (float v : want.data) top = std::max(top, static_cast<double>(std::fabs(v)));
      const int exp10 = top < 0.01 ? static_cast<int>(std::floor(std::log10(top))) : 0;
      const double unit = std::pow(10.0, exp10), half_digit = exp10 ? 0.005 : 0.00005;
      CHECK(std::fabs(shown.toDouble() - want.at(l, h) / unit) <= half_digit * 1.0001);
      if (std::fabs(want.at(l, h)) > std::fabs(want.at(best_l, best_h))) best_l = l, best_h = h;
    }
  // the table exports as it is shown
  QTemporaryDir dir;
  e->exportTable("importance", dir.filePath("imp.npy"));
  const Tensor saved = load_npy(dir.filePath("imp.npy").toStdString()).tensor;
  REQUIRE(saved.shape == std::vector<int64_t>{L, H});
  // The table holds head_importance's own floats (the same function on the same inputs; these small
  // passes run on one thread, so deterministically), written as float32: a copy; 4 ulps of the
  // largest value allow a last rounding.
  CHECK(max_abs_diff(saved, want) <= 4 * kU32 * max_abs(want));
  e->exportTable("importance", dir.filePath("imp.csv"));
  QFile csv(dir.filePath("imp.csv"));
  REQUIRE(csv.open(QIODevice::ReadOnly));
  CHECK(csv.readAll().count('\n') == 1 + L * H);
  CHECK_THROWS_WITH(e->exportTable("lens", dir.filePath("l.csv")), Catch::Contains("Logit lens"));
  // click the most important head's cell: ablated in every pass, said in the status bar and the title
  emit t->cellClicked(best_l, best_h);
  e->flush();
  CHECK(e->isAblated(best_l, best_h));
  CHECK(last_status.contains(QString("ablated %1:%2").arg(best_l).arg(best_h)));
  const std::vector<float> after = e->result()->class_probs;
  CHECK(after[pred] != before[pred]);  // the prediction panel's numbers change
  // by the head's importance: the same two probabilities (the same passes head_importance runs),
  // subtracted here in float and there in double then rounded: within u of them, 2 u allowed
  CHECK(std::fabs((before[pred] - after[pred]) - want.at(best_l, best_h)) <= 2 * kU32 * before[pred]);
  e->setLayer(best_l);
  CHECK(e->headView(best_h)->data().title.contains("ablated"));
  CHECK(e->headView(best_h)->data().hatched);
  CHECK_FALSE(e->headView((best_h + 1) % H)->data().hatched);
  emit t->cellClicked(best_l, best_h);  // restore
  e->flush();
  CHECK_FALSE(e->isAblated(best_l, best_h));
  CHECK(e->result()->class_probs == before);
  // Cancel stops a computation in flight and says so
  e->showPage("importance");
  e->computeImportance();
  auto* cancel = w.findChild<QPushButton*>("importanceCancel");
  REQUIRE(cancel);
  cancel->click();
  CHECK_FALSE(e->importanceRunning());
  e->waitForImportance();
  QApplication::processEvents();
  CHECK(w.findChildren<QLabel*>().size() > 0);
  bool said = false;
  for (QLabel* l : w.findChildren<QLabel*>()) said = said || l->text() == "Head importance cancelled.";
  CHECK(said);
}

TEST_CASE("beyond attention: each map is the engine's, follows the layer and ablation, and exports", "[ui][analysis]") {
  OpenWindow o("the film was not very good");
  ExploreView* e = o.e;
  REQUIRE(e->showPage("methods"));
  MethodsView* m = e->methodsView();
  ForwardRequest req;
  req.ids = e->result()->ids;
  const int T = static_cast<int>(req.ids.size());
  auto backend = make_backend("cpu");
  auto shown = [&](int i, int j) { return m->view()->data().value(i, j); };
  auto same = [&](const Tensor& want, size_t offset) {
    double worst = 0;
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < T; ++j)
        worst = std::max(
            worst, static_cast<double>(std::fabs(shown(i, j) - want.data[offset + static_cast<size_t>(i * T + j)])));
    return worst;
  };
  // Each map is the engine's function run again on the same inputs: the same floats (small passes
  // run on one thread), except that a map's own matrix products (the rollout's and relevance's
  // T x T products, one per layer; value-norm's D-term ones) may sum in another order if split
  // across threads otherwise: sum_bound of their length and the map's largest value, per product.
  const int L = e->model()->config.num_layers, D = e->model()->config.head_dim();
  auto chained = [&](const Tensor& want) { return L * sum_bound(T, max_abs(want)); };
  m->setMethod(MethodsView::Rollout);
  m->wait();
  REQUIRE(m->view()->data().rows == T);
  const Tensor roll = attention_rollout(*e->model(), *backend, req);
  CHECK(same(roll, 0) <= chained(roll));
  m->setMethod(MethodsView::Relevance);
  m->wait();
  Tensor R = grad_attention(*e->model(), req, -1);
  const double relevance_tol = chained(R);         // R with its identity: the products' terms
  for (int i = 0; i < T; ++i) R.at(i, i) -= 1.0f;  // shown without the identity
  CHECK(same(R, 0) <= relevance_tol);
  CHECK(m->statusText().contains("Chefer"));
  m->setMethod(MethodsView::ValueNorm);
  m->wait();
  const Tensor vn = value_norm_attention(*e->model(), *backend, req);  // [L, H, T, T]
  const int H = e->model()->config.num_heads;
  e->setLayer(1);
  m->findChild<QComboBox*>("methodHead")->setCurrentIndex(1 + 2);  // head 2
  CHECK(same(vn, (static_cast<size_t>(1) * H + 2) * T * T) <= sum_bound(D, max_abs(vn)));
  CHECK(m->view()->data().title == "Layer 1, head 2, value-weighted");
  // ablating a head changes the maps computed for the same input
  m->setMethod(MethodsView::Rollout);
  m->wait();
  const float before = shown(T - 1, 0);
  e->setAblated(0, 0, true);
  e->setAblated(0, 1, true);
  e->flush();
  m->wait();
  req.ablate = {{0, 0}, {0, 1}};
  const Tensor ablated = attention_rollout(*e->model(), *backend, req);
  CHECK(same(ablated, 0) <= chained(ablated));
  CHECK(shown(T - 1, 0) != before);
  // exports like the heatmaps
  QTemporaryDir dir;
  const QString npy = dir.filePath("rollout.npy");
  m->exportTo(npy, 96);
  const Tensor saved = load_npy(npy.toStdString()).tensor;
  REQUIRE(saved.shape == std::vector<int64_t>{T, T});
  CHECK(same(saved, 0) == 0.0);
  m->exportTo(dir.filePath("rollout.png"), 96);
  CHECK(QImage(dir.filePath("rollout.png")).width() > 100);
  CHECK_THROWS_WITH(m->exportTo(dir.filePath("r.bmp"), 96), Catch::Contains("unknown export format"));
}

TEST_CASE("every control says what it does in a tooltip", "[ui][desktop]") {
  MainWindow w;
  w.useModel(test_model(), "test");
  w.show();
  QStringList missing;
  for (QWidget* wd : w.findChildren<QWidget*>()) {
    const bool control = qobject_cast<QAbstractButton*>(wd) || qobject_cast<QComboBox*>(wd) ||
                         qobject_cast<QAbstractSpinBox*>(wd) || qobject_cast<QLineEdit*>(wd) ||
                         qobject_cast<QAbstractSlider*>(wd);
    if (!control || qobject_cast<QScrollBar*>(wd)) continue;
    // parts of other widgets (a spin box's line edit, a tab bar's scroll buttons, a table's corner)
    QWidget* parent = wd->parentWidget();
    if (qobject_cast<QAbstractSpinBox*>(parent) || qobject_cast<QComboBox*>(parent) || qobject_cast<QTabBar*>(parent) ||
        qobject_cast<QAbstractItemView*>(parent) || wd->objectName().startsWith("qt_"))
      continue;
    if (wd->toolTip().isEmpty()) {
      QString what = wd->metaObject()->className();
      if (auto* b = qobject_cast<QAbstractButton*>(wd)) what += " \"" + b->text() + "\"";
      if (!wd->objectName().isEmpty()) what += " #" + wd->objectName();
      missing << what;
    }
  }
  INFO("controls without a tooltip: " << missing.join(", ").toStdString());
  CHECK(missing.isEmpty());
}

TEST_CASE("pattern badges: a head whose pattern dominates is labelled in the grid and the Head tab", "[ui][analysis]") {
  MainWindow w;
  w.useModel(test_model(), "test");
  w.show();
  ExploreView* e = w.explore();
  // causal with a window of 1: each query sees itself and the one before, so self + prev = 1 on
  // average and one of them takes more than half in every head
  e->setMaskArgs({"causal", "window:1"});
  e->setText("abcdefgh");
  e->flush();
  const auto pats = head_patterns(*e->result());
  int labelled = 0;
  for (int h = 0; h < e->headCount(); ++h) {
    const std::string& label = pats[0][static_cast<size_t>(h)].label;
    const QString title = e->headView(h)->data().title;
    if (label.empty()) {
      CHECK(title == QString("head %1").arg(h));
    } else {
      ++labelled;
      CHECK(title == QString("head %1 \u00b7 %2").arg(h).arg(QString::fromStdString(label)));
    }
  }
  CHECK(labelled == e->headCount());
  e->setLayer(1);
  e->showPage("head");
  const QString want = QString("layer 1, head 0 \u00b7 %1").arg(QString::fromStdString(pats[1][0].label));
  bool found = false;
  for (HeatmapView* v : w.findChildren<HeatmapView*>()) found = found || v->data().title == want;
  CHECK(found);
}

TEST_CASE("token selection: the selected tokens' rows (or columns) summed or averaged for every head",
          "[ui][analysis]") {
  OpenWindow o("abcdefg");
  ExploreView* e = o.e;
  auto* strip = e->findChild<QListView*>();
  REQUIRE(strip);
  // select tokens 1 and 4 as a user would (Ctrl-click): the page opens on "as queries"
  strip->selectionModel()->select(e->tokenModel()->index(1), QItemSelectionModel::Select);
  strip->selectionModel()->select(e->tokenModel()->index(4), QItemSelectionModel::Select);
  MethodsView* m = e->methodsView();
  CHECK(e->tabs()->currentWidget() == m);
  CHECK(m->method() == MethodsView::SelectedQueries);
  CHECK(m->selection() == std::vector<int>{1, 4});
  QApplication::processEvents();
  // set while the page was hidden, labelled for the size it is shown at: every token, every head
  CHECK(m->view()->plot()->xAxis->label() == "keys");
  CHECK(m->view()->plot()->yAxis->label() == "heads");
  e->setLayer(1);
  const Tensor& P = e->result()->attention[1];
  const int H = static_cast<int>(P.dim(0)), T = static_cast<int>(P.dim(1));
  const HeatmapData& d = m->view()->data();
  REQUIRE(d.rows == H);
  REQUIRE(d.cols == T);
  auto at = [&](int h, int i, int j) { return P.data[(static_cast<size_t>(h) * T + i) * T + j]; };
  // sums (and the mean, / 2 exact) of two floats: one rounding here, at most one there: 2 u
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < T; ++j) CHECK(d.value(h, j) == Approx(at(h, 1, j) + at(h, 4, j)).epsilon(2 * kU32));
  m->setAverage(true);
  for (int h = 0; h < H; ++h)
    CHECK(m->view()->data().value(h, 2) == Approx((at(h, 1, 2) + at(h, 4, 2)) / 2).epsilon(2 * kU32));
  m->setMethod(MethodsView::SelectedKeys);  // who attends to tokens 1 and 4
  m->setAverage(false);
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < T; ++i)
      CHECK(m->view()->data().value(h, i) == Approx(at(h, i, 1) + at(h, i, 4)).epsilon(2 * kU32));
  CHECK(m->view()->data().row_labels.front() == "head 0");
  QTemporaryDir dir;
  m->exportTo(dir.filePath("sel.npy"), 96);
  CHECK(load_npy(dir.filePath("sel.npy").toStdString()).tensor.shape == std::vector<int64_t>{H, T});
}

TEST_CASE("token selection survives a map job that finishes after the switch", "[ui][analysis]") {
  // Found by looking: --tab methods --method selected-queries drew a blank map now and then,
  // when the rollout started on opening the page finished after the switch and cleared the view.
  OpenWindow o("abcdefg");
  ExploreView* e = o.e;
  REQUIRE(e->showPage("methods"));
  MethodsView* m = e->methodsView();
  m->setMethod(MethodsView::Rollout);  // a background job
  m->setSelection({1, 4});
  m->setMethod(MethodsView::SelectedQueries);  // drawn at once from the shown result
  REQUIRE(m->view()->data().rows > 0);
  m->wait();  // the rollout job delivers
  QApplication::processEvents();
  CHECK(m->view()->data().rows == e->result()->attention[0].dim(0));
  CHECK(m->view()->data().title.contains("attention from"));
  m->setMethod(MethodsView::Rollout);  // and back: the finished rollout, not the selection
  m->wait();
  CHECK(m->view()->data().rows == static_cast<int>(e->result()->ids.size()));
}

TEST_CASE("compare: A - B for another text or another model, diverging around 0, same token count", "[ui][analysis]") {
  MainWindow w;
  auto a = test_model();
  w.useModel(a, "test");
  w.show();
  ExploreView* e = w.explore();
  e->setText("abcdef");
  e->flush();
  REQUIRE(e->showPage("methods"));
  MethodsView* m = e->methodsView();
  m->setMethod(MethodsView::Compare);
  m->wait();
  CHECK(m->statusText().contains("choose B"));  // nothing to compare with yet
  auto backend = make_backend("cpu");
  ForwardRequest ra, rb;
  ra.ids = e->result()->ids;
  const int T = static_cast<int>(ra.ids.size()), H = a->config.num_heads;
  // another text of the same length on the same model
  m->setCompare("fedcba", nullptr);
  m->wait();
  rb.ids = prepare_text(*a, "fedcba").ids;
  const Tensor A = run_forward(*a, *backend, ra).stacked_probs(), B = run_forward(*a, *backend, rb).stacked_probs();
  const HeatmapData& d = m->view()->data();
  REQUIRE(d.rows == T);
  CHECK(d.diverging);
  // The view holds the same A and B (the same function on the same inputs), subtracts them in
  // float (u |A - B|) and averages the H heads in float (gamma_{H-1} of the terms, and u for each
  // division by H): within gamma_{H+1} of the mean of |A - B|; here the difference and the
  // division are in float too (2 u), the sum in double: gamma_{H+4} in all.
  double worst = 0, largest = 0, tol = 0;
  for (int i = 0; i < T; ++i)
    for (int j = 0; j < T; ++j) {
      double mean = 0, abs_mean = 0;
      for (int h = 0; h < H; ++h) {
        const size_t k = ((static_cast<size_t>(0) * H + h) * T + i) * T + j;
        mean += (A.data[k] - B.data[k]) / H;
        abs_mean += std::fabs(A.data[k] - B.data[k]) / H;
      }
      worst = std::max(worst, std::fabs(mean - d.value(i, j)));
      largest = std::max(largest, std::fabs(mean));
      tol = std::max(tol, gamma32(H + 4) * abs_mean);
    }
  CHECK(worst <= tol);
  CHECK(largest > tol);  // the texts differ, so the maps do, by more than the roundings
  CHECK_FALSE(m->statusText().contains("give the same attention"));
  // B the same text: an all-zero map, and the status says why it is blank
  m->setCompare("abcdef", nullptr);
  m->wait();
  CHECK(m->statusText().contains("A and B give the same attention"));
  m->setCompare("fedcba", nullptr);
  m->wait();
  // another model on the same text: a model with other weights
  auto other = std::make_shared<Model>(*a);
  other->weights = random_weights(other->config, 7);
  m->setCompare({}, other, "other");
  m->wait();
  const Tensor B2 = run_forward(*other, *backend, ra).stacked_probs();
  double mean12 = 0, abs12 = 0;  // the same bound as above, at this cell
  for (int h = 0; h < H; ++h) {
    const size_t k = (static_cast<size_t>(h) * T + 1) * T + 2;
    mean12 += (A.data[k] - B2.data[k]) / H;
    abs12 += std::fabs(A.data[k] - B2.data[k]) / H;
  }
  CHECK(std::fabs(m->view()->data().value(1, 2) - mean12) <= gamma32(H + 4) * abs12);
  QTemporaryDir dir;
  m->exportTo(dir.filePath("diff.png"), 96);
  CHECK(QImage(dir.filePath("diff.png")).width() > 100);
  // a text of another length is refused with the counts
  m->setCompare("abc", nullptr);
  m->wait();
  CHECK(m->statusText().contains("B has 3 tokens and A 6"));
  CHECK(m->view()->data().empty());
}

TEST_CASE("heads show value-weighted attention: every head's map is the engine's norm-based attention",
          "[ui][analysis]") {
  OpenWindow o("abcdefg", QStringList{"causal"});
  ExploreView* e = o.e;
  e->setHeadWeighting("value-weighted");
  e->waitForValueNorm();
  ForwardRequest req;
  req.ids = e->result()->ids;
  req.mask.causal = true;
  const Tensor vn = value_norm_attention(*e->model(), *make_backend("cpu"), req);
  const int T = static_cast<int>(req.ids.size()), H = e->headCount();
  // the engine's own map again (the same function on the same inputs), but for the D-term products
  // of its values' norms if they sum in another order
  const double tol = sum_bound(e->model()->config.head_dim(), max_abs(vn));
  e->setLayer(1);
  for (int h = 0; h < H; ++h) {
    const HeatmapData& d = e->headView(h)->data();
    REQUIRE(d.rows == T);
    double worst = 0;
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < T; ++j)
        worst = std::max(worst, static_cast<double>(std::fabs(
                                    d.value(i, j) - vn.data[((static_cast<size_t>(1) * H + h) * T + i) * T + j])));
    CHECK(worst <= tol);
    CHECK(d.is_blocked(0, 1));  // the causal mask still shows as blocked
  }
  // the grid's one colour bar says what the maps are; All layers stays raw attention and says so,
  // keeping the attention's badges on its thumbnails
  CHECK(e->headsPage()->colourBar()->label().contains("value-weighted"));
  REQUIRE(e->showPage("layers"));
  QApplication::processEvents();
  bool noted = false;
  for (QLabel* l : e->page("layers")->findChildren<QLabel*>())
    noted |= l->isVisible() && l->text().contains("value-weighted");
  CHECK(noted);
  for (HeatmapView* v : e->page("layers")->findChildren<HeatmapView*>()) {
    CHECK_FALSE(v->data().title.contains("value-weighted"));
    // square thumbnails (they were stretched tall): T = S, so the map is square within 10%
    const QRect m = v->mapRect();
    CHECK(m.width() == Approx(m.height()).epsilon(0.1));
  }
  CHECK_THROWS_WITH(e->setHeadWeighting("nope"), Catch::Contains("attention or value-weighted"));
  e->setHeadWeighting("attention");
  CHECK_FALSE(e->headsPage()->colourBar()->label().contains("value-weighted"));
  CHECK(e->headView(0)->data().value(1, 0) == e->result()->attention[1].data[static_cast<size_t>(1 * T + 0)]);
}
