// Attention made elsewhere, opened in the app without a model (File > Open attention file...,
// attnlab --attention): the views that read probabilities draw the file exactly as they draw a
// pass, the others are disabled, a bad file keeps what was shown, and a model opened after it
// computes the typed text again.
#include <QApplication>
#include <QFile>
#include <QStatusBar>
#include <QTabWidget>
#include <QTemporaryDir>
#include <catch2/catch.hpp>
#include <cmath>

#include "engine/analysis/method_table.h"
#include "engine/formats/npy.h"
#include "ui/explore/page_table.h"
#include "ui/methods_view.h"
#include "ui_test_util.h"

using namespace attnlab;

namespace {

void write_file(const QString& path, const std::string& bytes) {
  QFile f(path);
  REQUIRE(f.open(QIODevice::WriteOnly));
  REQUIRE(f.write(bytes.data(), static_cast<qint64>(bytes.size())) == static_cast<qint64>(bytes.size()));
}

std::vector<float> drawn_of(const ExploreView& e) {
  std::vector<float> all;
  for (const HeatmapData& d : *e.state()->outcome().heads) all.insert(all.end(), d.drawn.begin(), d.drawn.end());
  return all;
}

// NaN (a cell every row of a block leaves blocked) equals NaN: the grids must match cell for cell.
bool same_grid(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (!(a[k] == b[k] || (std::isnan(a[k]) && std::isnan(b[k])))) return false;
  return true;
}

}  // namespace

TEST_CASE("an attention file opens in Explore without a model and draws as the pass it came from",
          "[ui][attention-file]") {
  QTemporaryDir dir;
  REQUIRE(dir.isValid());
  attnlab::test::OpenWindow win("abcabca");  // no mask: a file without one draws no blocked cells
  ExploreView* e = win.e;
  const std::shared_ptr<const ForwardResult> pass = e->state()->result();
  REQUIRE(pass);
  const int L = win.w.explore()->model()->config.num_layers, H = e->headCount();
  const std::vector<float> pass_grids = drawn_of(*e);
  REQUIRE(e->showPage("methods"));
  e->methodsView()->setMethod(MethodsView::Rollout);
  e->methodsView()->wait();
  QApplication::processEvents();
  e->methodsView()->wait();
  const QString pass_rollout = dir.filePath("pass_rollout.npy");
  e->methodsView()->exportTo(pass_rollout, 96);

  // the pass's probabilities as transformers' outputs.attentions stacked, with no tokens
  const QString npz = dir.filePath("att.npz");
  write_file(npz, serialize_npz({{"attentions", pass->stacked_probs()}}));
  REQUIRE(win.w.openAttention(npz, -1, true));
  e->flush();
  REQUIRE(e->showsFile());
  REQUIRE(e->model()->probabilities_only);
  CHECK(win.w.attentionFile() == QFileInfo(npz).absoluteFilePath());
  const ForwardResult& r = *e->result();
  REQUIRE(r.attention.size() == static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) CHECK(r.attention[l].data == pass->attention[l].data);
  CHECK(e->headCount() == H);
  // every head's drawn grid, cell for cell, as the pass drew it
  CHECK(same_grid(drawn_of(*e), pass_grids));
  // the file has no tokens: positions label it, and the window says so in its warnings
  CHECK(r.tokens.front() == "0");
  CHECK(e->state()->outcome().result->warnings.size() == 1);

  // the pages that read probabilities are enabled, the others disabled and say why
  QTabWidget* tabs = e->tabs();
  for (const ExplorePageRow& row : explore_pages()) {
    const int i = tabs->indexOf(e->page(row.name));
    INFO(row.name);
    if (!tabs->isTabVisible(i)) continue;
    CHECK(tabs->isTabEnabled(i) == row.from_probabilities);
    CHECK(e->showPage(row.name) == row.from_probabilities);
    if (!row.from_probabilities) CHECK(tabs->tabToolTip(i).contains("Needs a model's weights"));
  }
  for (const char* name : {"heads", "lines", "layers", "head", "patterns"}) {  // each drawn without a crash
    REQUIRE(e->showPage(name));
    QApplication::processEvents();
  }

  // Beyond attention: rollout of the file, byte for byte the pass's; value-weighted needs weights
  REQUIRE(e->showPage("methods"));
  e->methodsView()->setMethod(MethodsView::Rollout);
  e->methodsView()->wait();
  QApplication::processEvents();
  e->methodsView()->wait();
  const QString file_rollout = dir.filePath("file_rollout.npy");
  e->methodsView()->exportTo(file_rollout, 96);
  CHECK(attnlab::test::head_bytes(file_rollout, 1 << 20) == attnlab::test::head_bytes(pass_rollout, 1 << 20));
  CHECK(e->methodsView()->method() == MethodsView::Rollout);
  e->methodsView()->setMethod(MethodsView::ValueNorm);  // disabled in the box; asked for anyway
  e->methodsView()->wait();
  QApplication::processEvents();
  CHECK(e->methodsView()->statusText().contains("needs a model"));

  // exports of the file: the layer's heads as CSV hold its numbers
  const QString csv = dir.filePath("layer.csv");
  e->exportTo(csv, 0, -1);
  CHECK(QFileInfo(csv).size() > 0);

  // a damaged file: an error, and the file shown stays
  const QString bad = dir.filePath("bad.npz");
  write_file(bad, "PK\x03\x04 not an archive");
  CHECK_FALSE(win.w.openAttention(bad, -1, true));
  CHECK(e->showsFile());
  CHECK(e->result() == &r);

  // a model opened after the file computes the text typed before it
  win.w.useModel(attnlab::test::test_model(), "test");
  e->flush();
  CHECK_FALSE(e->showsFile());
  CHECK_FALSE(e->model()->probabilities_only);
  REQUIRE(e->result());
  CHECK(e->result()->ids.size() == 7);
  for (const ExplorePageRow& row : explore_pages()) {
    const int i = tabs->indexOf(e->page(row.name));
    if (tabs->isTabVisible(i)) CHECK(tabs->isTabEnabled(i));
  }
}

TEST_CASE("cross attention from a file: queries and keys of two sequences", "[ui][attention-file]") {
  QTemporaryDir dir;
  REQUIRE(dir.isValid());
  MainWindow w;
  w.show();
  // 2 layers, 3 heads, 4 queries over 6 keys: rows of 1/6
  Tensor t({2, 3, 4, 6});
  for (float& v : t.data) v = 1.0f / 6.0f;
  const QString npz = dir.filePath("cross.npz");
  Tensor a = t;
  // tokens_b would make it cross attention; a file with S != T and no tokens_b is refused
  write_file(npz, serialize_npz({{"attentions", a}}));
  CHECK_FALSE(w.openAttention(npz, -1, true));
  CHECK(w.statusBar()->currentMessage().contains("tokens_b"));
}
