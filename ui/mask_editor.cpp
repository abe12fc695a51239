// MaskEditor: grid painting, presets and undo.
#include "ui/mask_editor.h"

#include "ui/colormaps.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QScrollArea>
#include <QScrollBar>
#include <QMouseEvent>
#include <QPainter>
#include <QPushButton>
#include <QSpinBox>
#include <QToolButton>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <set>

#include "ui/colormaps.h"

namespace attnlab {

namespace {
// cells blocked by the masks outside the editor (causal, padding, window, the model's own): the
// editor shows them so that "combined" can be seen, but they are not the painted mask's
const QColor kOthersColor(0x9e, 0x9e, 0xb8);
}  // namespace

// One undoable change: the planes before and after (masks are small: T, S <= max_len).
class MaskEdit : public QUndoCommand {
 public:
  MaskEdit(MaskEditor* e, MaskEditor::Planes before, MaskEditor::Planes after, const QString& text)
      : QUndoCommand(text), e_(e), before_(std::move(before)), after_(std::move(after)) {}
  void undo() override { e_->setPlanes(before_); }
  void redo() override { e_->setPlanes(after_); }

 private:
  MaskEditor* e_;
  MaskEditor::Planes before_, after_;
};

// The grid: one cell per (query, key), drawn from a cached image of the mask (one pixel per cell,
// scaled without smoothing), so 2,048 x 2,048 masks paint quickly. It sits in a scroll area:
// zoom 1 fits the whole mask into the view; Ctrl+wheel or the zoom buttons enlarge it (labels
// appear once a cell is 12 px), and the scroll bars (or the wheel) move around.
class MaskGrid : public QWidget {
 public:
  MaskGrid(MaskEditor* e, QScrollArea* scroll) : QWidget(nullptr), e_(e), scroll_(scroll) { setMouseTracking(true); }
  QPoint center(int i, int j) const {
    const QRectF a = area();
    const double c = cellSize();
    return QPointF(a.left() + (j + 0.5) * c, a.top() + (i + 0.5) * c).toPoint();
  }
  double zoom() const { return zoom_; }
  // Zooms about a point of the view (viewport coordinates); the cell under it stays there.
  void setZoom(double z, QPoint anchor = QPoint(-1, -1)) {
    z = std::clamp(z, 1.0, maxZoom());
    if (anchor.x() < 0) anchor = QPoint(scroll_->viewport()->width() / 2, scroll_->viewport()->height() / 2);
    const QPointF at(scroll_->horizontalScrollBar()->value() + anchor.x(),
                     scroll_->verticalScrollBar()->value() + anchor.y());
    const QRectF a = area();
    const double c = cellSize();
    const double cj = c > 0 ? (at.x() - a.left()) / c : 0, ci = c > 0 ? (at.y() - a.top()) / c : 0;
    zoom_ = z;
    relayout();
    const QRectF b = area();
    scroll_->horizontalScrollBar()->setValue(static_cast<int>(b.left() + cj * cellSize() - anchor.x()));
    scroll_->verticalScrollBar()->setValue(static_cast<int>(b.top() + ci * cellSize() - anchor.y()));
  }
  // The size for the current zoom: the view's size at zoom 1.
  void relayout() {
    const QSize view = scroll_->viewport()->size();
    if (zoom_ <= 1.0) {
      resize(view);
    } else {
      const double c = cellSize();
      resize(std::max(view.width(), static_cast<int>(margin() + c * e_->S_ + 4)),
             std::max(view.height(), static_cast<int>(margin() + c * e_->T_ + 4)));
    }
    update();
  }
  void invalidate() {
    image_ = QImage();
    update();
  }

 protected:
  double fitCell() const {
    if (e_->T_ == 0 || e_->S_ == 0) return 0;
    const QSize view = scroll_->viewport()->size();
    const double lm = 48.0;  // room for labels, were the cells big enough for them
    return std::max(0.05, std::min((view.width() - lm - 4) / e_->S_, (view.height() - lm - 4) / e_->T_));
  }
  double maxZoom() const { return std::max(1.0, 40.0 / std::max(0.05, fitCell())); }  // up to 40 px cells
  double cellSize() const { return fitCell() * zoom_; }
  double margin() const { return cellSize() >= 2 ? 48.0 : 4.0; }
  QRectF area() const {
    const double cell = cellSize();
    return QRectF(margin(), margin(), cell * e_->S_, cell * e_->T_);
  }
  bool cellAt(QPointF p, int& i, int& j) const {
    const QRectF a = area();
    if (!a.contains(p)) return false;
    const double c = cellSize();
    j = std::min(e_->S_ - 1, static_cast<int>((p.x() - a.left()) / c));
    i = std::min(e_->T_ - 1, static_cast<int>((p.y() - a.top()) / c));
    return true;
  }
  const QImage& image() {
    const int head = e_->target_ < 0 ? 0 : e_->target_;
    if (image_.isNull() || image_.width() != e_->S_ || image_.height() != e_->T_) {
      image_ = QImage(e_->S_, e_->T_, QImage::Format_RGB32);
      const QRgb blocked = blocked_color("viridis").rgb(), visible = QColor(0x21, 0x91, 0x8c).rgb(),
                 others = kOthersColor.rgb();
      const std::vector<uint8_t>& o = e_->others_;
      const bool with_others = o.size() == static_cast<size_t>(e_->T_) * e_->S_;
      for (int i = 0; i < e_->T_; ++i) {
        auto* line = reinterpret_cast<QRgb*>(image_.scanLine(i));
        for (int j = 0; j < e_->S_; ++j)
          line[j] = e_->blocked(head, i, j)                                 ? blocked
                    : with_others && o[static_cast<size_t>(i) * e_->S_ + j] ? others
                                                                            : visible;
      }
    }
    return image_;
  }
  void paintEvent(QPaintEvent* ev) override {
    QPainter p(this);
    p.fillRect(rect(), palette().base());
    if (e_->T_ == 0) {
      p.drawText(rect(), Qt::AlignCenter, "Type some text first");
      return;
    }
    const double c = cellSize();
    const QRectF a = area();
    p.drawImage(a, image());  // nearest-neighbour scaling: one flat colour per cell
    // the stroke being painted, on top
    const QColor blocked = blocked_color("viridis"), visible(0x21, 0x91, 0x8c);
    for (const auto& [i, j] : stroke_)
      p.fillRect(QRectF(a.left() + j * c, a.top() + i * c, std::max(c, 1.0), std::max(c, 1.0)),
                 paint_value_ ? blocked : visible);
    // only what is in view: rows and columns the exposed rectangle meets
    const QRectF ex = ev->rect();
    const int i0 = std::max(0, static_cast<int>((ex.top() - a.top()) / c) - 1);
    const int i1 = std::min(e_->T_ - 1, static_cast<int>((ex.bottom() - a.top()) / c) + 1);
    const int j0 = std::max(0, static_cast<int>((ex.left() - a.left()) / c) - 1);
    const int j1 = std::min(e_->S_ - 1, static_cast<int>((ex.right() - a.left()) / c) + 1);
    if (c >= 6) {
      p.setPen(QPen(palette().base().color(), 1));
      for (int i = i0; i <= i1 + 1; ++i)
        p.drawLine(QPointF(a.left() + j0 * c, a.top() + i * c), QPointF(a.left() + (j1 + 1) * c, a.top() + i * c));
      for (int j = j0; j <= j1 + 1; ++j)
        p.drawLine(QPointF(a.left() + j * c, a.top() + i0 * c), QPointF(a.left() + j * c, a.top() + (i1 + 1) * c));
    }
    if (c >= 2) {  // labels on every row and column while cells are a line tall, else on every k-th
      p.setPen(palette().text().color());
      QFont f = font();
      f.setPointSize(7);
      p.setFont(f);
      const QFontMetrics fm(f);
      const int step = c >= 12 ? 1 : static_cast<int>(std::ceil((fm.height() + 1) / c));
      auto label = [&](const QStringList& labels, int k) {
        const QString t = k < labels.size() ? labels[k] : QString();
        return fm.elidedText(QString("%1 %2").arg(k).arg(t), Qt::ElideRight, 44);
      };
      for (int i = i0; i <= i1; ++i) {
        if (i % step != 0) continue;
        p.drawText(QRectF(0, a.top() + i * c + c / 2 - fm.height(), a.left() - 2, 2 * fm.height()),
                   Qt::AlignRight | Qt::AlignVCenter, label(e_->row_labels_, i));
        if (step > 1)
          p.drawLine(QPointF(a.left() - 2, a.top() + i * c + c / 2), QPointF(a.left(), a.top() + i * c + c / 2));
      }
      for (int j = j0; j <= j1; ++j) {
        if (j % step != 0) continue;
        p.save();
        p.translate(a.left() + j * c + c / 2, a.top() - 2);
        p.rotate(-60);
        p.drawText(QPointF(0, 0), label(e_->col_labels_, j));
        p.restore();
      }
    }
  }
  void mousePressEvent(QMouseEvent* ev) override {
    int i, j;
    if (ev->button() != Qt::LeftButton || !cellAt(ev->position(), i, j)) return;
    const int head = e_->target_ < 0 ? 0 : e_->target_;
    paint_value_ = !e_->blocked(head, i, j);  // a drag paints what the first click made
    stroke_ = {{i, j}};
    update();
  }
  void mouseMoveEvent(QMouseEvent* ev) override {
    int i, j;
    if (!cellAt(ev->position(), i, j)) return;
    if (!(ev->buttons() & Qt::LeftButton)) {  // hover: which cell, and what it is
      const int head = e_->target_ < 0 ? 0 : e_->target_;
      auto name = [](const QStringList& l, int k) { return k < l.size() ? l[k] : QString(); };
      setToolTip(QString("query %1 \"%2\" -> key %3 \"%4\": %5")
                     .arg(i)
                     .arg(name(e_->row_labels_, i))
                     .arg(j)
                     .arg(name(e_->col_labels_, j))
                     .arg(e_->blocked(head, i, j) ? "blocked" : "visible"));
      return;
    }
    if (stroke_.empty()) return;
    if (stroke_.insert({i, j}).second) update();
  }
  void mouseReleaseEvent(QMouseEvent*) override {
    if (stroke_.empty()) return;
    std::vector<std::pair<int, int>> cells(stroke_.begin(), stroke_.end());
    stroke_.clear();
    e_->setCells(cells, paint_value_);
  }
  void wheelEvent(QWheelEvent* ev) override {
    if (!(ev->modifiers() & Qt::ControlModifier)) return QWidget::wheelEvent(ev);  // the scroll area scrolls
    const double steps = ev->angleDelta().y() / 120.0;
    setZoom(zoom_ * std::pow(1.25, steps), scroll_->viewport()->mapFromGlobal(ev->globalPosition().toPoint()));
    ev->accept();
  }

 private:
  MaskEditor* e_;
  QScrollArea* scroll_;
  std::set<std::pair<int, int>> stroke_;
  bool paint_value_ = true;
  double zoom_ = 1.0;
  QImage image_;  // one pixel per cell of the target head's plane
};

// Keeps the grid fitted to its view when the view changes size.
class GridFitter : public QObject {
 public:
  explicit GridFitter(MaskGrid* g) : QObject(g), g_(g) {}
  bool eventFilter(QObject* o, QEvent* e) override {
    if (e->type() == QEvent::Resize) g_->relayout();
    return QObject::eventFilter(o, e);
  }

 private:
  MaskGrid* g_;
};

MaskEditor::MaskEditor(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  auto* head = new QComboBox(this);
  head->setObjectName("maskHead");
  head->addItem("all heads", -1);
  auto* preset = new QComboBox(this);
  preset->addItems({"band", "block-diagonal", "dilated"});
  auto* param = new QSpinBox(this);
  param->setRange(1, 4096);
  param->setValue(2);
  param->setToolTip("band: half-width; block-diagonal: block size; dilated: step");
  auto* apply = new QPushButton("Apply preset", this);
  auto* invert = new QPushButton("Invert", this);
  auto* clear = new QPushButton("Clear", this);
  head->setToolTip("Paint the mask shared by every head, or one head's own");
  preset->setToolTip("A pattern to start from: band, block-diagonal, dilated, ...");
  apply->setToolTip("Replace the painted mask with the preset");
  invert->setToolTip("Blocked cells become visible and visible cells blocked");
  clear->setToolTip("Unblock every cell");
  auto* zoom_in = new QToolButton(this);
  zoom_in->setText("+");
  zoom_in->setToolTip("Zoom in (Ctrl+wheel); labels appear on cells of 12 px and more");
  auto* zoom_out = new QToolButton(this);
  zoom_out->setText("-");
  zoom_out->setToolTip("Zoom out (Ctrl+wheel)");
  auto* fit = new QToolButton(this);
  fit->setText("Fit");
  fit->setToolTip("The whole mask in view");
  auto* undo = new QToolButton(this);
  undo->setDefaultAction(undo_.createUndoAction(this, "Undo"));
  auto* redo = new QToolButton(this);
  redo->setDefaultAction(undo_.createRedoAction(this, "Redo"));
  for (QWidget* w : std::initializer_list<QWidget*>{head, preset, param, apply, invert, clear}) bar->addWidget(w);
  bar->addStretch();
  // second row: undo, redo and zoom, then the legend (two rows keep the page narrow enough for
  // 1280x720 with the tour's panel beside it): the heatmaps' colours for visible and blocked, and
  // the other masks' cells
  auto* legend = new QHBoxLayout;
  for (QWidget* w : std::initializer_list<QWidget*>{undo, redo, zoom_out, zoom_in, fit}) legend->addWidget(w);
  legend->addSpacing(12);
  for (const auto& [colour, text] : {std::pair<QColor, QString>{QColor(0x21, 0x91, 0x8c), "visible"},
                                     std::pair<QColor, QString>{blocked_color("viridis"), "blocked"},
                                     std::pair<QColor, QString>{kOthersColor, "blocked by the other masks"}}) {
    auto* swatch = new QLabel(this);
    swatch->setFixedSize(14, 14);
    swatch->setStyleSheet(QString("background: %1; border: 1px solid #777;").arg(colour.name()));
    legend->addWidget(swatch);
    legend->addWidget(new QLabel(text, this));
  }
  legend->addStretch();
  layout->addLayout(bar);
  layout->addLayout(legend);
  auto* scroll = new QScrollArea(this);
  scroll->setObjectName("maskScroll");
  scroll->setFrameShape(QFrame::NoFrame);
  grid_ = new MaskGrid(this, scroll);
  // A click gives the grid keyboard focus, so Ctrl+Z after painting undoes the painting (the
  // Mask menu's action), not the last edit of the text box that had focus before.
  grid_->setFocusPolicy(Qt::ClickFocus);
  scroll->setWidget(grid_);
  scroll->viewport()->installEventFilter(new GridFitter(grid_));
  layout->addWidget(scroll, 1);
  connect(zoom_in, &QToolButton::clicked, this, [this] { grid_->setZoom(grid_->zoom() * 2); });
  connect(zoom_out, &QToolButton::clicked, this, [this] { grid_->setZoom(grid_->zoom() / 2); });
  connect(fit, &QToolButton::clicked, this, [this] { grid_->setZoom(1.0); });
  connect(head, &QComboBox::currentIndexChanged, this,
          [this, head](int) { setTargetHead(head->currentData().toInt()); });
  connect(apply, &QPushButton::clicked, this, [this, preset, param] {
    const Preset p[] = {Preset::Band, Preset::BlockDiagonal, Preset::Dilated};
    applyPreset(p[preset->currentIndex()], param->value());
  });
  connect(invert, &QPushButton::clicked, this, [this] { applyPreset(Preset::Invert, 0); });
  connect(clear, &QPushButton::clicked, this, [this] { applyPreset(Preset::Clear, 0); });
  head_box_ = head;
  preset_box_ = preset;
  param_box_ = param;
}

void MaskEditor::setShape(int T, int S, int heads, const QStringList& row_labels, const QStringList& col_labels) {
  row_labels_ = row_labels;
  col_labels_ = col_labels;
  if (T == T_ && S == S_ && heads == H_) {
    grid_->update();  // new labels
    return;
  }
  // the painted cells that still exist keep their place (the shape changes at every typed token:
  // a 1,000-token text's 12 planes are 12 MB, copied a row at a time, or not at all when unpainted)
  Planes p(static_cast<size_t>(heads), std::vector<uint8_t>(static_cast<size_t>(T) * S, 0));
  if (painted_)
    for (int h = 0; h < std::min(heads, H_); ++h)
      for (int i = 0; i < std::min(T, T_); ++i)
        std::copy_n(planes_[static_cast<size_t>(h)].begin() + static_cast<std::ptrdiff_t>(i) * S_, std::min(S, S_),
                    p[static_cast<size_t>(h)].begin() + static_cast<std::ptrdiff_t>(i) * S);
  if (heads != H_) {
    head_box_->blockSignals(true);
    while (head_box_->count() > 1) head_box_->removeItem(1);
    for (int h = 0; h < heads; ++h) head_box_->addItem(QString("head %1").arg(h), h);
    head_box_->blockSignals(false);
    if (target_ >= heads) target_ = -1;
  }
  T_ = T, S_ = S, H_ = heads;
  planes_ = std::move(p);
  undo_.clear();  // old edits refer to another shape
  grid_->invalidate();
  grid_->relayout();
}

void MaskEditor::setOthers(std::vector<uint8_t> blocked) {
  if (blocked == others_) return;
  others_ = std::move(blocked);
  grid_->invalidate();
  grid_->update();
}

void MaskEditor::setTargetHead(int head) {
  target_ = head;
  const int idx = head_box_->findData(head);
  if (idx >= 0 && idx != head_box_->currentIndex()) head_box_->setCurrentIndex(idx);
  grid_->invalidate();
}

bool MaskEditor::isEmpty() const {
  return !painted_;
}

void MaskEditor::setPlanes(const Planes& p) {
  planes_ = p;
  painted_ = std::any_of(planes_.begin(), planes_.end(), [](const std::vector<uint8_t>& plane) {
    return std::any_of(plane.begin(), plane.end(), [](uint8_t v) { return v != 0; });
  });
  grid_->invalidate();
  emit maskChanged();
}

void MaskEditor::replace(const Planes& after, const QString& what) {
  if (after == planes_) return;
  undo_.push(new MaskEdit(this, planes_, after, what));  // push() runs redo(): applies `after`
}

void MaskEditor::setCells(const std::vector<std::pair<int, int>>& cells, bool value) {
  Planes p = planes_;
  for (int h = 0; h < H_; ++h) {
    if (target_ >= 0 && h != target_) continue;
    for (const auto& [i, j] : cells)
      if (i >= 0 && j >= 0 && i < T_ && j < S_) p[static_cast<size_t>(h)][static_cast<size_t>(i) * S_ + j] = value;
  }
  replace(p, value ? "block cells" : "unblock cells");
}

void MaskEditor::applyPreset(Preset preset, int param) {
  Planes p = planes_;
  param = std::max(1, param);
  if (preset_box_ && (preset == Preset::Band || preset == Preset::BlockDiagonal || preset == Preset::Dilated)) {
    preset_box_->setCurrentIndex(preset == Preset::Band ? 0 : preset == Preset::BlockDiagonal ? 1 : 2);
    param_box_->setValue(param);
  }
  for (int h = 0; h < H_; ++h) {
    if (target_ >= 0 && h != target_) continue;
    auto& plane = p[static_cast<size_t>(h)];
    for (int i = 0; i < T_; ++i)
      for (int j = 0; j < S_; ++j) {
        uint8_t& v = plane[static_cast<size_t>(i) * S_ + j];
        switch (preset) {
          case Preset::Band:
            v = std::abs(i - j) > param;
            break;
          case Preset::BlockDiagonal:
            v = i / param != j / param;
            break;
          case Preset::Dilated:
            v = std::abs(i - j) % param != 0;
            break;
          case Preset::Invert:
            v = !v;
            break;
          case Preset::Clear:
            v = 0;
            break;
        }
      }
  }
  const char* names[] = {"band", "block-diagonal", "dilated", "invert", "clear"};
  replace(p, names[static_cast<int>(preset)]);
}

NpyArray MaskEditor::toNpy() const {
  NpyArray a;
  a.kind = NpyKind::Bool;
  bool same = true;
  for (int h = 1; h < H_; ++h) same &= planes_[static_cast<size_t>(h)] == planes_[0];
  if (same) {
    a.tensor = Tensor({T_, S_});
    for (size_t k = 0; k < planes_[0].size(); ++k) a.tensor.data[k] = planes_[0][k];
  } else {
    a.tensor = Tensor({H_, T_, S_});
    for (int h = 0; h < H_; ++h)
      for (size_t k = 0; k < planes_[0].size(); ++k)
        a.tensor.data[static_cast<size_t>(h) * planes_[0].size() + k] = planes_[static_cast<size_t>(h)][k];
  }
  return a;
}

void MaskEditor::loadNpy(const NpyArray& a) {
  const auto& s = a.tensor.shape;
  const bool shared = s.size() == 2 && s[0] == T_ && s[1] == S_;
  const bool per_head = s.size() == 3 && s[0] == H_ && s[1] == T_ && s[2] == S_;
  if (!shared && !per_head)
    throw Error("the mask has shape " + shape_str(s) + "; the current text needs [" + std::to_string(T_) + ", " +
                std::to_string(S_) + "] or [" + std::to_string(H_) + ", " + std::to_string(T_) + ", " +
                std::to_string(S_) + "]");
  if (a.kind == NpyKind::Float)
    throw Error("the editor edits blocked/visible masks; this file holds float (additive) values");
  Planes p(static_cast<size_t>(H_), std::vector<uint8_t>(static_cast<size_t>(T_) * S_));
  const size_t n = static_cast<size_t>(T_) * S_;
  for (int h = 0; h < H_; ++h)
    for (size_t k = 0; k < n; ++k)
      p[static_cast<size_t>(h)][k] = a.tensor.data[(per_head ? static_cast<size_t>(h) * n : 0) + k] != 0.0f;
  replace(p, "load mask");
}

void MaskEditor::save(const QString& path) const {
  const NpyArray a = toNpy();
  std::vector<uint8_t> v(a.tensor.data.size());
  for (size_t k = 0; k < v.size(); ++k) v[k] = a.tensor.data[k] != 0.0f;
  save_npy_bool(path.toStdString(), a.tensor.shape, v);
}

void MaskEditor::load(const QString& path) {
  loadNpy(load_npy(path.toStdString()));
}

QWidget* MaskEditor::gridWidget() const {
  return grid_;
}
QPoint MaskEditor::cellCenter(int i, int j) const {
  return grid_->center(i, j);
}
void MaskEditor::setZoom(double zoom) {
  grid_->setZoom(zoom);
}
double MaskEditor::zoom() const {
  return grid_->zoom();
}

}  // namespace attnlab
