// LineView: BertViz's line view of one layer. Query tokens in a column on the left, key tokens
// on the right; a line from query i to key j for every head shown, its opacity the probability,
// each head in its own colour (one head, or all heads overlaid). Hovering a token keeps only its
// lines (a query's row, or a key's column). Drawn from a ForwardResult value; exports as PNG/SVG.
#pragma once

#include <QWidget>
#include <memory>
#include <vector>

#include "engine/compute/forward.h"

namespace attnlab {

class LineView : public QWidget {
  Q_OBJECT
 public:
  explicit LineView(QWidget* parent = nullptr);

  void setResult(std::shared_ptr<const ForwardResult> result, int layer);
  void setHead(int head);  // -1: every head
  // The titles drawn: over the lines ("": "layer L, head H") and over each side ("queries", "keys").
  void setTitles(const QString& title, const QString& left, const QString& right);
  int head() const { return head_; }
  // The most tokens per side drawn (lines grow as T x S); a longer input shows a window of them,
  // from token `first` on each side (clamped so the window is full), and the lines within it.
  static constexpr int kMaxTokens = 200;
  void setFirst(int first);
  int first(int side) const;  // the window's first position: side 0 = queries, 1 = keys
  int tokenCount() const;     // tokens of the longer side (0 without a result)

  struct Line {
    int head, query, key;
    float p;  // probability = opacity
  };
  // What is drawn now (probabilities above 1%, the hover filter applied).
  std::vector<Line> lines() const;
  // Hover as the mouse would: side 0 = queries (left), 1 = keys (right); index = the token's
  // position (in the window), -1 = none.
  void setHover(int side, int index);
  QColor headColor(int head) const;
  QPointF tokenAnchor(int side, int index) const;  // where token `index`'s lines meet its label
  // .png or .svg by extension; Error otherwise.
  void exportTo(const QString& path);
  QString notice() const { return notice_; }

 protected:
  void paintEvent(QPaintEvent*) override;
  void mouseMoveEvent(QMouseEvent* e) override;
  void leaveEvent(QEvent*) override;
  QSize sizeHint() const override { return {520, 600}; }

 private:
  void paint(QPainter& p, const QRect& area) const;
  void updateNotice();
  QRectF anchorArea() const;  // the band the token anchors spread over (below the titles)
  int rows() const;           // tokens drawn on each side
  int cols() const;
  const std::vector<std::string>& keyTokens() const;

  QString title_, left_title_ = "queries", right_title_ = "keys";
  std::shared_ptr<const ForwardResult> result_;
  int layer_ = 0, head_ = -1, first_ = 0;
  int hover_side_ = -1, hover_index_ = -1;
  QString notice_;
  // Rows the heads' legend took at the last paint (many heads wrap: 32 labels do not fit one
  // row at 1280 px); the token anchors leave room for them.
  mutable int legend_rows_ = 1;
};

}  // namespace attnlab
