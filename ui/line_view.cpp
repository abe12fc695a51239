// LineView implementation: layout of the two token columns, the lines, hover, export.
#include "ui/line_view.h"

#include <QFileInfo>
#include <QMouseEvent>
#include <QPainter>
#include <QSaveFile>
#include <QSvgGenerator>
#include <algorithm>
#include <cmath>

namespace attnlab {

namespace {

constexpr float kMinP = 0.01f;      // lines fainter than 1% are not drawn (they would be invisible)
constexpr size_t kMaxLines = 2500;  // at most this many lines, the strongest (see paint)

// Matplotlib's tab10 and two more: distinct hues for up to 12 heads, then hues around the wheel.
const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                          "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"};

QString token_text(const std::string& t) {
  return t == " " ? QStringLiteral("\u2423") : QString::fromStdString(t).left(16);
}

}  // namespace

LineView::LineView(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setMinimumSize(200, 200);
  setToolTip("Hover a token to see only its lines");
}

void LineView::setResult(std::shared_ptr<const ForwardResult> result, int layer) {
  result_ = std::move(result);
  layer_ = layer;
  hover_side_ = hover_index_ = -1;
  updateNotice();
  update();
}

void LineView::setTitles(const QString& title, const QString& left, const QString& right) {
  title_ = title, left_title_ = left, right_title_ = right;
  update();
}

void LineView::setHead(int head) {
  head_ = head;
  update();
}

void LineView::setFirst(int first) {
  first_ = std::max(0, first);
  hover_side_ = hover_index_ = -1;
  updateNotice();
  update();
}

void LineView::updateNotice() {
  notice_.clear();
  if (!result_ || tokenCount() <= kMaxTokens) return;
  // Which tokens each side shows, and that lines to tokens outside them are left out.
  auto range = [&](int side, int n) { return QString("%1-%2 of %3").arg(first(side)).arg(first(side) + n - 1); };
  const int T = static_cast<int>(result_->ids.size()), S = static_cast<int>(keyTokens().size());
  if (!result_->is_cross())
    notice_ = QString("line view: tokens %1, lines within them").arg(range(0, rows()).arg(T));
  else
    notice_ = QString("line view: queries %1, keys %2, lines within them")
                  .arg(range(0, rows()).arg(T), range(1, cols()).arg(S));
}

const std::vector<std::string>& LineView::keyTokens() const {
  return result_->is_cross() ? result_->cross_tokens : result_->tokens;
}

int LineView::tokenCount() const {
  return result_ ? static_cast<int>(std::max(result_->ids.size(), keyTokens().size())) : 0;
}

int LineView::first(int side) const {
  if (!result_) return 0;
  const int n = static_cast<int>(side == 0 ? result_->ids.size() : keyTokens().size());
  return std::clamp(first_, 0, std::max(0, n - kMaxTokens));
}

int LineView::rows() const {
  return result_ ? std::min<int>(static_cast<int>(result_->ids.size()) - first(0), kMaxTokens) : 0;
}
int LineView::cols() const {
  return result_ ? std::min<int>(static_cast<int>(keyTokens().size()) - first(1), kMaxTokens) : 0;
}

QColor LineView::headColor(int head) const {
  constexpr int n = static_cast<int>(sizeof kPalette / sizeof kPalette[0]);
  if (head < n) return QColor(kPalette[head]);
  return QColor::fromHsv((head * 47) % 360, 200, 200);
}

std::vector<LineView::Line> LineView::lines() const {
  std::vector<Line> out;
  if (!result_ || layer_ < 0 || !result_->has_probs(layer_)) return out;
  const std::shared_ptr<const Tensor> probs = result_->layer_probs(layer_);  // kept, or recomputed (on demand)
  const Tensor& P = *probs;
  const int H = static_cast<int>(P.dim(0)), T = static_cast<int>(P.dim(1)), S = static_cast<int>(P.dim(2));
  for (int h = 0; h < H; ++h) {
    if (head_ >= 0 && h != head_) continue;
    for (int i = first(0); i < first(0) + rows(); ++i) {
      if (hover_side_ == 0 && hover_index_ != i) continue;
      for (int j = first(1); j < first(1) + cols(); ++j) {
        if (hover_side_ == 1 && hover_index_ != j) continue;
        const float p = P.data[(static_cast<size_t>(h) * T + i) * S + j];
        if (p > kMinP) out.push_back({h, i, j, p});
      }
    }
  }
  return out;
}

void LineView::setHover(int side, int index) {
  if (side == hover_side_ && index == hover_index_) return;
  hover_side_ = index < 0 ? -1 : side;
  hover_index_ = index;
  update();
}

// Columns: queries' labels right-aligned against the left line ends, keys' left-aligned after
// the right ends; each side spreads its tokens over the full height, below the title and the
// "strongest n lines" subtitle (lines ran over it) and above the heads' legend.
QRectF LineView::anchorArea() const {
  return QRectF(rect()).adjusted(0, 36, 0, -22 - 16 * (legend_rows_ - 1));
}

QPointF LineView::tokenAnchor(int side, int index) const {
  const QRectF a = anchorArea();
  const double label_w = std::min(140.0, a.width() * 0.3);
  const int n = side == 0 ? rows() : cols();
  const double pitch = a.height() / std::max(1, n);
  const double x = side == 0 ? a.left() + label_w : a.right() - label_w;
  return {x, a.top() + (index - first(side) + 0.5) * pitch};
}

void LineView::paint(QPainter& p, const QRect& area) const {
  p.fillRect(area, Qt::white);
  p.setRenderHint(QPainter::Antialiasing);
  if (!result_ || rows() == 0) {
    p.setPen(Qt::darkGray);
    p.drawText(area, Qt::AlignCenter, "Type some text first");
    return;
  }
  const QString title =
      (title_.isEmpty()
           ? QString("layer %1, %2").arg(layer_).arg(head_ < 0 ? QString("all heads") : QString("head %1").arg(head_))
           : title_) +
      (notice_.isEmpty() ? QString() : " (" + notice_ + ")");
  QFont tf = font();
  tf.setBold(true);
  p.setFont(tf);
  p.setPen(Qt::black);
  {  // between the side titles, cut short where the view is narrow
    QFont sf = font();
    sf.setItalic(true);
    const QFontMetrics side(sf);
    const int sides = 2 * (std::max(side.horizontalAdvance(left_title_), side.horizontalAdvance(right_title_)) + 12);
    const int room = std::max(40, static_cast<int>(area.width()) - sides);
    p.drawText(QRectF(area.left(), area.top() + 4, area.width(), 20), Qt::AlignHCenter,
               QFontMetrics(tf).elidedText(title, Qt::ElideRight, room));
  }
  legend_rows_ = 1;
  if (head_ < 0) {  // which colour is which head: a legend along the bottom edge
    const int H = result_->has_probs(layer_) ? static_cast<int>(result_->layer_probs(layer_)->dim(0)) : 0;
    QFont lf = font();
    lf.setPointSize(8);
    p.setFont(lf);
    // every cell as wide as the longest label ("h31") and its swatch; rows of them from the bottom
    const double need = 13 + QFontMetrics(lf).horizontalAdvance(QString("h%1").arg(std::max(0, H - 1))) + 6;
    const int per_row = std::max(1, std::min(H, static_cast<int>(area.width() / need) - 1));
    legend_rows_ = std::max(1, (H + per_row - 1) / per_row);
    const double cell = std::max(need, std::min(60.0, area.width() / std::max(1.0, per_row + 1.0)));
    for (int h = 0; h < H; ++h) {
      const int row = h / per_row, col = h % per_row, in_row = std::min(per_row, H - row * per_row);
      const double x = area.left() + (area.width() - cell * in_row) / 2 + col * cell;
      const double y = area.bottom() - 15 - 16.0 * (legend_rows_ - 1 - row);
      p.fillRect(QRectF(x, y + 3, 10, 10), headColor(h));
      p.setPen(Qt::black);
      p.drawText(QRectF(x + 13, y, cell - 13, 14), Qt::AlignLeft | Qt::AlignVCenter, QString("h%1").arg(h));
    }
  }
  // which side is which
  QFont hf = font();
  hf.setItalic(true);
  p.setFont(hf);
  p.setPen(Qt::darkGray);
  p.drawText(QRectF(area.left() + 4, area.top() + 4, 120, 20), Qt::AlignLeft, left_title_);
  p.drawText(QRectF(area.right() - 124, area.top() + 4, 120, 20), Qt::AlignRight, right_title_);
  // Lines, faintest first so strong ones stay on top. A long input has hundreds of thousands:
  // only the strongest kMaxLines are drawn (the rest would only fill the view with colour).
  std::vector<Line> ls = lines();
  const size_t total = ls.size();
  if (ls.size() > kMaxLines) {
    std::nth_element(ls.begin(), ls.begin() + static_cast<std::ptrdiff_t>(kMaxLines), ls.end(),
                     [](const Line& a, const Line& b) { return a.p > b.p; });
    ls.resize(kMaxLines);
  }
  std::sort(ls.begin(), ls.end(), [](const Line& a, const Line& b) { return a.p < b.p; });
  if (ls.size() < total) {
    QFont nf = font();
    nf.setPointSize(8);
    p.setFont(nf);
    p.drawText(QRectF(area.left(), area.top() + 18, area.width(), 14), Qt::AlignHCenter,
               QString("the strongest %1 of %2 lines (probability >= %3)")
                   .arg(ls.size())
                   .arg(total)
                   .arg(ls.empty() ? 0.0 : ls.front().p, 0, 'g', 2));
  }
  for (const Line& l : ls) {
    QColor c = headColor(l.head);
    c.setAlphaF(std::min(1.0f, l.p));
    p.setPen(QPen(c, ls.size() > 1000 ? 1.0 : 1.5));
    p.drawLine(tokenAnchor(0, l.query), tokenAnchor(1, l.key));
  }
  // Token labels, as many as fit at a readable size (every k-th otherwise).
  auto labels = [&](int side, int n, const std::vector<std::string>& tokens) {
    const double pitch = anchorArea().height() / std::max(1, n);
    QFont f = font();
    f.setPointSizeF(std::clamp(pitch * 0.55, 6.0, 10.0));
    p.setFont(f);
    const int line = QFontMetrics(f).height();
    const int step = std::max(1, static_cast<int>(std::ceil(line / std::max(1e-9, pitch))));
    const double label_w = std::min(140.0, area.width() * 0.3);
    const int from = first(side);
    for (int k = from; k < from + n; k += step) {
      const QPointF a = tokenAnchor(side, k);
      const bool hot = hover_side_ == side && hover_index_ == k;
      QString text = k < static_cast<int>(tokens.size()) ? token_text(tokens[static_cast<size_t>(k)]) : QString();
      if (step > 1 || !notice_.isEmpty()) text = QString("%1 %2").arg(k).arg(text);  // positions when not all are named
      p.setPen(hot ? QColor("#d62728") : Qt::black);
      QFont hf = f;
      hf.setBold(hot);
      p.setFont(hf);
      const QRectF box = side == 0 ? QRectF(a.x() - label_w, a.y() - line / 2.0, label_w - 6, line)
                                   : QRectF(a.x() + 6, a.y() - line / 2.0, label_w - 6, line);
      p.drawText(box, (side == 0 ? Qt::AlignRight : Qt::AlignLeft) | Qt::AlignVCenter, text);
    }
  };
  labels(0, rows(), result_->tokens);
  labels(1, cols(), keyTokens());
}

void LineView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  paint(p, rect());
}

void LineView::mouseMoveEvent(QMouseEvent* e) {
  if (!result_) return;
  const int side = e->position().x() < width() / 2.0 ? 0 : 1;
  const int n = side == 0 ? rows() : cols();
  const QRectF a = anchorArea();  // the inverse of tokenAnchor
  const int k = static_cast<int>(std::floor((e->position().y() - a.top()) / (a.height() / std::max(1, n))));
  setHover(side, k >= 0 && k < n ? first(side) + k : -1);
}

void LineView::leaveEvent(QEvent*) {
  setHover(-1, -1);
}

void LineView::exportTo(const QString& path) {
  const QString ext = QFileInfo(path).suffix().toLower();
  if (ext == "png") {
    QImage img(size() * 2, QImage::Format_ARGB32);
    img.setDevicePixelRatio(2);
    QPainter p(&img);
    paint(p, rect());
    p.end();
    QSaveFile f(path);
    if (!f.open(QIODevice::WriteOnly) || !img.save(&f, "PNG") || !f.commit())
      throw Error(path.toStdString() + ": cannot write");
    return;
  }
  if (ext == "svg") {
    QSaveFile f(path);
    if (!f.open(QIODevice::WriteOnly)) throw Error(path.toStdString() + ": cannot write");
    QSvgGenerator gen;
    gen.setOutputDevice(&f);
    gen.setSize(size());
    gen.setViewBox(rect());
    gen.setTitle("attnlab line view");
    QPainter p(&gen);
    paint(p, rect());
    p.end();
    if (!f.commit()) throw Error(path.toStdString() + ": cannot write");
    return;
  }
  throw Error("unknown line-view export format \"." + ext.toStdString() + "\" (expected .png or .svg)");
}

}  // namespace attnlab
