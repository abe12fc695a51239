// Perceptual colour maps for heatmaps (QCustomPlot has no viridis): defined by colour stops
// sampled from matplotlib's maps, plus grey. Blocked cells use kBlockedColor, which none of the
// maps contain, so a blocked cell never looks like a small probability.
#pragma once

#include <QColor>
#include <QStringList>

class QCPColorGradient;

namespace attnlab {

QStringList colormap_names();                         // "viridis" first (the default, as in article 003)
QCPColorGradient make_gradient(const QString& name);  // unknown names fall back to viridis
inline const QColor kBlockedColor(235, 235, 235);     // light grey, drawn with a hatch where space allows

}  // namespace attnlab
