// Perceptual colour maps for heatmaps (QCustomPlot has no viridis): defined by colour stops
// sampled from matplotlib's maps, plus grey. Blocked cells have a colour of their own per map,
// far from every colour of that map, so a blocked cell never looks like a small probability;
// the mask editor uses the same one.
#pragma once

#include <QColor>
#include <QStringList>

class QCPColorGradient;

namespace attnlab {

QStringList colormap_names();                         // "viridis" first (the default, as in article 003)
QCPColorGradient make_gradient(const QString& name);  // unknown names fall back to viridis
QCPColorGradient diverging_gradient();  // differences: blue < 0, white at 0, red > 0
// Light grey for the coloured maps (none passes near a neutral light grey); light blue for
// "greys", which contains every grey.
QColor blocked_color(const QString& name);

}  // namespace attnlab
