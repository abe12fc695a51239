// Colour stops (9 per map) sampled from matplotlib's perceptually uniform maps.
#include "ui/colormaps.h"

#include <qcustomplot.h>

namespace attnlab {

namespace {
struct Map {
  const char* name;
  const char* stops[9];
};
const Map kMaps[] = {
    {"viridis", {"#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962", "#addc30", "#fde725"}},
    {"magma", {"#000004", "#1c1044", "#4f127b", "#812581", "#b5367a", "#e55064", "#fb8761", "#fec287", "#fcfdbf"}},
    {"inferno", {"#000004", "#1f0c48", "#550f6d", "#88226a", "#ba3655", "#e35933", "#f98e09", "#f8c932", "#fcffa4"}},
    {"plasma", {"#0d0887", "#4c02a1", "#7e03a8", "#a92395", "#cc4778", "#e56b5d", "#f89540", "#fdc527", "#f0f921"}},
    {"cividis", {"#00224e", "#123570", "#3b496c", "#575d6d", "#707173", "#8a8779", "#a69d75", "#c4b56c", "#fee838"}},
    {"greys", {"#ffffff", "#f0f0f0", "#d9d9d9", "#bdbdbd", "#969696", "#737373", "#525252", "#252525", "#000000"}},
};
}  // namespace

QStringList colormap_names() {
  QStringList names;
  for (const Map& m : kMaps) names << m.name;
  return names;
}

QColor blocked_color(const QString& name) {
  return name == "greys" ? QColor(166, 206, 255) : QColor(235, 235, 235);
}

QCPColorGradient diverging_gradient() {
  // matplotlib's RdBu reversed: blue below 0, white at 0, red above
  static const char* stops[9] = {"#053061", "#2166ac", "#4393c3", "#92c5de", "#f7f7f7",
                                 "#f4a582", "#d6604d", "#b2182b", "#67001f"};
  QCPColorGradient g;
  g.clearColorStops();
  for (int k = 0; k < 9; ++k) g.setColorStopAt(k / 8.0, QColor(stops[k]));
  g.setColorInterpolation(QCPColorGradient::ciRGB);
  g.setNanHandling(QCPColorGradient::nhNanColor);
  g.setNanColor(QColor(235, 235, 235));
  return g;
}

QCPColorGradient make_gradient(const QString& name) {
  const Map* chosen = &kMaps[0];
  for (const Map& m : kMaps)
    if (name == m.name) chosen = &m;
  QCPColorGradient g;
  g.clearColorStops();
  for (int k = 0; k < 9; ++k) g.setColorStopAt(k / 8.0, QColor(chosen->stops[k]));
  g.setColorInterpolation(QCPColorGradient::ciRGB);
  g.setNanHandling(QCPColorGradient::nhNanColor);
  g.setNanColor(blocked_color(chosen->name));
  g.setLevelCount(256);
  return g;
}

}  // namespace attnlab
