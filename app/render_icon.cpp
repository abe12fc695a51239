// Build-time tool: renders attnlab's SVG icon to the PNG sizes the hicolor theme wants.
// usage: render_icon ICON.svg OUT_DIR 16 32 48 ...   (writes OUT_DIR/NxN/apps/attnlab.png)
#include <QDir>
#include <QGuiApplication>
#include <QImage>
#include <QPainter>
#include <QSvgRenderer>
#include <cstdio>

int main(int argc, char** argv) {
  QGuiApplication app(argc, argv);
  if (argc < 4) {
    std::fprintf(stderr, "usage: render_icon ICON.svg OUT_DIR SIZE...\n");
    return 2;
  }
  QSvgRenderer svg(QString::fromLocal8Bit(argv[1]));
  if (!svg.isValid()) {
    std::fprintf(stderr, "render_icon: %s is not a valid SVG\n", argv[1]);
    return 2;
  }
  for (int k = 3; k < argc; ++k) {
    const int n = QString(argv[k]).toInt();
    QImage img(n, n, QImage::Format_ARGB32_Premultiplied);
    img.fill(Qt::transparent);
    QPainter p(&img);
    p.setRenderHint(QPainter::Antialiasing);
    svg.render(&p);
    p.end();
    const QString dir = QString("%1/%2x%2/apps").arg(QString::fromLocal8Bit(argv[2])).arg(n);
    QDir().mkpath(dir);
    if (!img.save(dir + "/attnlab.png")) {
      std::fprintf(stderr, "render_icon: cannot write %s/attnlab.png\n", qPrintable(dir));
      return 1;
    }
  }
  return 0;
}
