// Figure export through an off-screen QCustomPlot: a grid of colour maps sharing one scale.
#include "ui/figure_export.h"

#include "engine/formats/attention_file.h"

#include "ui/heatmap_data.h"

#include "ui/heatmap_view.h"

#include <QFile>
#include <QFileInfo>
#include <QFileDialog>
#include <QSaveFile>
#include <QSvgGenerator>
#include <QTextStream>
#include <charconv>
#include <cmath>
#include <limits>
#include <qcustomplot.h>

#include "engine/core/io_util.h"
#include "engine/formats/npy.h"
#include "ui/colormaps.h"

namespace attnlab {

// Cells per axis an exported panel draws at most; longer inputs are max-pooled to this.
constexpr int kExportCells = 256;

namespace {

struct Panel {
  int layer, head;
};

QString csv_field(const std::string& s) {
  QString q = QString::fromStdString(s);
  if (q.contains(',') || q.contains('"') || q.contains('\n')) q = '"' + q.replace("\"", "\"\"") + '"';
  return q;
}

// The shortest decimal that reads back as the same float32 (std::to_chars): a CSV read back gives
// the numbers written, bit for bit ("0.25", not "0.25000000"; 9 digits only where needed).
QString shortest(float v) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return QString::fromLatin1(buf, ec == std::errc() ? static_cast<int>(end - buf) : 0);
}

void write_csv(const ForwardResult& r, const std::vector<Panel>& panels, const std::vector<std::string>& qt,
               const std::vector<std::string>& kt, const QString& path) {
  QString out = "layer,head,query_index,query_token,key_index,key_token,probability,blocked\n";
  for (const Panel& p : panels) {
    const std::shared_ptr<const Tensor> tp = r.layer_probs(p.layer);  // kept, or recomputed (on demand)
    const Tensor& t = *tp;
    const int T = static_cast<int>(t.dim(1)), S = static_cast<int>(t.dim(2));
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < S; ++j)
        out += QString("%1,%2,%3,%4,%5,%6,%7,%8\n")
                   .arg(p.layer)
                   .arg(p.head)
                   .arg(i)
                   .arg(csv_field(qt[static_cast<size_t>(i)]))
                   .arg(j)
                   .arg(csv_field(kt[static_cast<size_t>(j)]))
                   .arg(shortest(t.data[(static_cast<size_t>(p.head) * T + i) * S + j]))
                   .arg(r.mask_of(p.layer).is_blocked(p.head, i, j) ? 1 : 0);
  }
  write_file_atomic(path.toStdString(), out.toStdString());
}

}  // namespace

QString token_view_note(bool hide_special, bool merge_pieces) {
  QStringList parts;
  if (merge_pieces) parts << "word pieces merged: keys summed, queries averaged";
  if (hide_special) parts << "special tokens hidden: rows sum to < 1";
  return parts.join("; ");
}

void export_attention(const ForwardResult& r, const ExportSpec& spec, const QString& path) {
  const std::vector<std::string>& qt = r.tokens;
  const std::vector<std::string>& kt = r.is_cross() ? r.cross_tokens : r.tokens;
  const int L = static_cast<int>(r.is_cross() ? r.cross_attention.size() : r.attention.size());
  if (L == 0) throw Error("nothing to export: no attention was computed");
  const int H = static_cast<int>(r.layer_probs(0)->dim(0));
  if (spec.layer >= L || spec.layer < -1)
    throw Error("layer " + std::to_string(spec.layer) + " does not exist (the model has " + std::to_string(L) + ")");
  if (spec.head >= H || spec.head < -1)
    throw Error("head " + std::to_string(spec.head) + " does not exist (the model has " + std::to_string(H) + ")");
  std::vector<Panel> panels;
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h)
      if ((spec.layer < 0 || spec.layer == l) && (spec.head < 0 || spec.head == h)) panels.push_back({l, h});
  for (const Panel& p : panels)
    if (!r.has_probs(p.layer)) throw Error("layer " + std::to_string(p.layer) + "'s attention was not kept");

  const QString ext = QFileInfo(path).suffix().toLower();
  if (ext == "csv") return write_csv(r, panels, qt, kt, path);
  if (ext == "npz") {  // an attention file: what --attention, the app and attnlab.load_attention open
    if (spec.head >= 0) throw Error("an attention file (.npz) keeps every head of its layers: export all heads");
    return save_attention_file(path.toStdString(), r, spec.layer);
  }
  if (ext == "npy") {
    const std::shared_ptr<const Tensor> first = r.layer_probs(panels[0].layer);
    const int64_t T = first->dim(1), S = first->dim(2);
    Tensor out({static_cast<int64_t>(panels.size()), T, S});
    for (size_t k = 0; k < panels.size(); ++k) {
      const std::shared_ptr<const Tensor> tp = r.layer_probs(panels[k].layer);
      const Tensor& t = *tp;
      std::copy_n(t.data.begin() + static_cast<std::ptrdiff_t>(panels[k].head * T * S), T * S,
                  out.data.begin() + static_cast<std::ptrdiff_t>(k * T * S));
    }
    if (spec.layer >= 0 && spec.head >= 0)
      out.shape = {T, S};
    else if (spec.layer >= 0)
      out.shape = {H, T, S};
    else if (spec.head < 0)
      out.shape = {L, H, T, S};
    save_npy(path.toStdString(), out);
    return;
  }
  if (ext != "png" && ext != "svg" && ext != "pdf")
    throw Error("unknown export format \"." + ext.toStdString() + "\" (expected .png, .svg, .pdf, .csv, .npy or .npz)");

  const int rows_of_panels = spec.layer < 0 ? L : 1;
  const int cols_of_panels = spec.layer < 0 ? (spec.head < 0 ? H : 1) : static_cast<int>(panels.size());
  // Long head rows wrap into a grid of at most 4 columns.
  const int grid_cols = spec.layer < 0 ? cols_of_panels : std::min(4, cols_of_panels);
  const int grid_rows = spec.layer < 0 ? rows_of_panels : (cols_of_panels + grid_cols - 1) / grid_cols;
  const std::shared_ptr<const Tensor> first = r.layer_probs(panels[0].layer);
  const int T = static_cast<int>(first->dim(1)), S = static_cast<int>(first->dim(2));
  const bool row_labels = T <= 64, col_labels = S <= 64;  // each axis labels its tokens while they fit
  const int panel_px = row_labels && col_labels ? std::max(260, 18 * std::max(T, S) + 90) : 320;
  const int width = spec.width > 0 ? spec.width : grid_cols * panel_px + 110;
  const int height = spec.height > 0 ? spec.height : grid_rows * panel_px + 60;

  QCustomPlot plot;
  plot.plotLayout()->clear();
  QString title = spec.title;
  if (title.isEmpty())
    title = spec.layer < 0   ? "Attention, all layers"
            : spec.head >= 0 ? QString("Layer %1, head %2").arg(spec.layer).arg(spec.head)
                             : QString("Layer %1, all heads").arg(spec.layer);
  if (!spec.note.isEmpty()) title += " (" + spec.note + ")";
  plot.plotLayout()->addElement(0, 0, new QCPTextElement(&plot, title, QFont("DejaVu Sans", 12, QFont::Bold)));
  auto* grid = new QCPLayoutGrid;
  plot.plotLayout()->addElement(1, 0, grid);
  auto* scale = new QCPColorScale(&plot);
  scale->setType(QCPAxis::atRight);
  scale->axis()->setLabel(spec.value_label);
  plot.plotLayout()->addElement(1, 1, scale);
  auto* margins = new QCPMarginGroup(&plot);
  scale->setMarginGroup(QCP::msBottom | QCP::msTop, margins);

  // head_heatmap takes a shared result; this one outlives every use here (no copy of it is made)
  const std::shared_ptr<const ForwardResult> alias(&r, [](const ForwardResult*) {});
  // the colour scale's top: the views' (HeatmapData::vmax: a query that sees one key left out), or
  // for signed maps the largest magnitude
  float vmax = 0;
  for (const Panel& p : panels) {
    if (!spec.diverging) {
      vmax = std::max(vmax, head_heatmap(alias, p.layer, p.head, kExportCells).vmax);
      continue;
    }
    const std::shared_ptr<const Tensor> tp = r.layer_probs(p.layer);
    const Tensor& t = *tp;
    for (int64_t k = 0; k < static_cast<int64_t>(T) * S; ++k)
      vmax = std::max(vmax, std::fabs(t.data[static_cast<size_t>(p.head * T * S + k)]));
  }
  const QCPColorGradient gradient = spec.diverging ? diverging_gradient() : make_gradient(spec.colormap);
  auto ticker = [](const std::vector<std::string>& tokens, bool on) {
    QSharedPointer<QCPAxisTickerText> t(new QCPAxisTickerText);
    const int n = static_cast<int>(tokens.size());
    const int step = on ? 1 : std::max(1, n / 8);
    for (int k = 0; k < n; k += step)
      t->addTick(k, on ? QString::fromStdString(tokens[static_cast<size_t>(k)]).left(14) : QString::number(k));
    return t;
  };
  auto pooled_ticker = [](const std::vector<std::string>& tokens, int drawn, int factor) {
    QSharedPointer<QCPAxisTickerText> t(new QCPAxisTickerText);
    const int step = std::max(1, drawn / 8);
    for (int k = 0; k < drawn; k += step) {
      const size_t src = static_cast<size_t>(k) * static_cast<size_t>(factor);  // the block's first token
      t->addTick(k, QString("%1 %2").arg(src).arg(src < tokens.size() ? QString::fromStdString(tokens[src]).left(10)
                                                                      : QString()));
    }
    return t;
  };
  for (size_t k = 0; k < panels.size(); ++k) {
    const Panel& p = panels[k];
    const int gr = spec.layer < 0 ? p.layer : static_cast<int>(k) / grid_cols;
    const int gc = spec.layer < 0 ? (spec.head < 0 ? p.head : 0) : static_cast<int>(k) % grid_cols;
    auto* rect = new QCPAxisRect(&plot);
    grid->addElement(gr, gc, rect);
    rect->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    rect->axis(QCPAxis::atTop)->setVisible(true);
    rect->axis(QCPAxis::atTop)->setTicks(false);
    rect->axis(QCPAxis::atTop)->setTickLabels(false);
    // one panel: the figure's title names it (and analysis maps have no layer or head of their own)
    if (panels.size() > 1) rect->axis(QCPAxis::atTop)->setLabel(QString("layer %1, head %2").arg(p.layer).arg(p.head));
    QCPAxis* x = rect->axis(QCPAxis::atBottom);
    QCPAxis* y = rect->axis(QCPAxis::atLeft);
    y->setRangeReversed(true);
    x->setTicker(ticker(kt, col_labels));
    y->setTicker(ticker(qt, row_labels));
    x->setTickLabelRotation(60);
    x->setTickLabelFont(QFont("DejaVu Sans", 7));
    y->setTickLabelFont(QFont("DejaVu Sans", 7));
    x->setLabel(spec.col_axis);
    y->setLabel(spec.row_axis);
    auto* map = new QCPColorMap(x, y);
    map->setInterpolate(false);
    map->setTightBoundary(false);
    const Tensor& t = r.probs(p.layer);
    // Long inputs are max-pooled per axis as on screen (a 2,000-token map drawn cell by cell
    // would be averaged into darkness by the image's own downsampling): kExportCells per axis.
    const HeatmapData pooled = head_heatmap(alias, p.layer, p.head, kExportCells);
    fill_color_map(map, pooled);  // the same cells as the views draw
    const int dr = pooled.drawn_rows, dc = pooled.drawn_cols;
    if (pooled.row_factor > 1 || pooled.col_factor > 1) {
      x->setTicker(pooled_ticker(kt, dc, pooled.col_factor));
      y->setTicker(pooled_ticker(qt, dr, pooled.row_factor));
      if (pooled.col_factor > 1)
        x->setLabel(QString("%1 (max of %2 per cell)").arg(spec.col_axis).arg(pooled.col_factor));
      if (pooled.row_factor > 1)
        y->setLabel(QString("%1 (max of %2 per cell)").arg(spec.row_axis).arg(pooled.row_factor));
    }
    x->setRange(-0.5, dc - 0.5);
    y->setRange(-0.5, dr - 0.5);
    map->setColorScale(scale);  // the map takes the scale's gradient: set it there
    scale->setGradient(gradient);
    if (spec.diverging)
      map->setDataRange(QCPRange(vmax > 0 ? -vmax : -1, vmax > 0 ? vmax : 1));
    else
      map->setDataRange(QCPRange(0, spec.unit_range || vmax <= 0 ? 1 : vmax));
    if (spec.annotate && T <= 16 && S <= 16)
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < S; ++j) {
          if (r.mask_of(p.layer).is_blocked(p.head, i, j)) continue;
          auto* txt = new QCPItemText(&plot);
          txt->setClipAxisRect(rect);
          txt->position->setAxes(x, y);
          txt->position->setCoords(j, i);
          const float v = t.data[(static_cast<size_t>(p.head) * T + i) * S + j];
          txt->setText(QString::number(v, 'f', 2));
          txt->setFont(QFont("DejaVu Sans", 6));
          txt->setColor(v > 0.6f * (spec.unit_range || vmax <= 0 ? 1.0f : vmax) ? Qt::black : Qt::white);
        }
  }
  plot.resize(width, height);
  plot.replot();

  // Write to a temporary name and rename, so a failed export never leaves half a file.
  const QString tmp = path + ".tmp." + ext;
  bool ok = false;
  if (ext == "png") {
    ok = plot.savePng(tmp, width, height, spec.dpi / 96.0, -1, spec.dpi);
  } else if (ext == "pdf") {
    ok = plot.savePdf(tmp, width, height);
  } else {
    QSvgGenerator gen;
    gen.setFileName(tmp);
    gen.setSize(QSize(width, height));
    gen.setViewBox(QRect(0, 0, width, height));
    gen.setTitle(title);
    QCPPainter painter;
    ok = painter.begin(&gen);
    if (ok) {
      plot.toPainter(&painter, width, height);
      painter.end();
    }
  }
  if (!ok) {
    QFile::remove(tmp);
    throw Error("could not write " + path.toStdString());
  }
  QFile::remove(path);
  if (!QFile::rename(tmp, path)) {
    QFile::remove(tmp);
    throw Error("could not move the export into place at " + path.toStdString());
  }
}

QString pick_export_file(QWidget* parent, const QString& suggested) {
  return QFileDialog::getSaveFileName(parent, "Export", suggested,
                                      "PNG image (*.png);;SVG (*.svg);;PDF (*.pdf);;CSV (*.csv);;NumPy array (*.npy)");
}

void export_matrix(const std::vector<float>& values, const QStringList& rows, const QStringList& cols,
                   const ExportSpec& spec, const QString& path) {
  const int R = static_cast<int>(rows.size()), C = static_cast<int>(cols.size());
  if (R == 0 || C == 0 || values.size() != static_cast<size_t>(R) * C)
    throw Error("nothing to export: the map has not been computed");
  // one panel of a cross result: the rows as queries, the columns as keys
  ForwardResult r;
  Tensor one({1, R, C});
  std::copy(values.begin(), values.end(), one.data.begin());
  r.cross_attention.push_back(std::move(one));
  for (const QString& l : rows) r.tokens.push_back(l.toStdString());
  for (const QString& l : cols) r.cross_tokens.push_back(l.toStdString());
  r.ids.assign(static_cast<size_t>(R), 0);
  r.cross_ids.assign(static_cast<size_t>(C), 0);
  ExportSpec s = spec;
  s.layer = 0, s.head = 0;
  export_attention(r, s, path);
}

}  // namespace attnlab
