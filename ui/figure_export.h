// Publication figures and data exports of attention: one head, one layer's heads, or every
// layer x head, as PNG / SVG / PDF (titles, token labels, a shared colour bar, chosen size and
// DPI), or the probabilities as CSV / .npy. Used by the app's Export menu and attnlab-cli export.
#pragma once

#include <QString>
#include <QStringList>

class QWidget;
#include <string>
#include <vector>

#include "engine/compute/forward.h"

namespace attnlab {

struct ExportSpec {
  int layer = 0;              // -1: every layer
  int head = -1;              // -1: every head
  int width = 0, height = 0;  // pixels at 96 DPI; 0 = chosen from the grid size
  int dpi = 150;
  QString colormap = "viridis";
  QString title;  // empty: "Layer L, head H" / "Layer L" / "All layers"
  bool annotate = false;
  bool unit_range = false;  // colour bar 0-1; else 0 to the largest value of the exported panels
  QString note;             // appended to the title in parentheses (what the figure's tokens are)
  bool diverging = false;
  QString row_axis = "query", col_axis = "key";  // axis titles (analysis maps: "head", ...)
  QString value_label = "probability";  // the colour bar's title   // signed values (a difference): blue-white-red
                                        // centred on 0, -max|v| to +max|v|
};

// The note for a token view: "word pieces merged; [CLS] / [SEP] hidden, rows sum to < 1".
QString token_view_note(bool hide_special, bool merge_pieces);

// Writes FILE by its extension: .png .svg .pdf .csv .npy. Error naming the problem otherwise.
// Axis labels are the result's own tokens.
void export_attention(const ForwardResult& result, const ExportSpec& spec, const QString& path);

// The file dialog every map's Export button opens (PNG, SVG, PDF, CSV, .npy); "" when cancelled.
QString pick_export_file(QWidget* parent, const QString& suggested);

// A map of analysis values (rows x cols, row-major) with its own row and column labels, written
// as export_attention writes one panel (the Circuits, Steering and Features pages' maps).
void export_matrix(const std::vector<float>& values, const QStringList& rows, const QStringList& cols,
                   const ExportSpec& spec, const QString& path);

}  // namespace attnlab
