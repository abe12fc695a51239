// LinesPage, LayersPage and HeadPage (see view_pages.h).
#include "ui/explore/view_pages.h"

#include <QComboBox>
#include <algorithm>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QScrollArea>
#include <QScrollBar>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QStyle>
#include <QVBoxLayout>

#include "ui/heatmap_view.h"
#include "ui/line_view.h"

namespace attnlab {

// --- Lines: the current layer, one head or all; hover a token for its lines.

LinesPage::LinesPage(ExploreState* state, QWidget* parent)
    : ExplorePage(state, OnResult | OnLayer, /*eager=*/true, parent) {
  auto* v = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  head_ = new QComboBox(this);
  head_->setObjectName("lineHead");
  head_->setToolTip("Lines of one head, or of every head in its own colour");
  bar->addWidget(new QLabel("heads:", this));
  bar->addWidget(head_);
  // A long text draws a window of tokens (lines grow as T x S): which one is the user's choice.
  first_label_ = new QLabel("from token:", this);
  first_ = new QSpinBox(this);
  first_->setObjectName("lineFirst");
  first_->setSingleStep(50);
  first_->setToolTip(QString("The line view draws %1 tokens a side; this is the first one").arg(LineView::kMaxTokens));
  bar->addSpacing(12);
  bar->addWidget(first_label_);
  bar->addWidget(first_);
  first_label_->setVisible(false);
  first_->setVisible(false);
  bar->addStretch();
  v->addLayout(bar);
  lines_ = new LineView(this);
  v->addWidget(lines_, 1);
  connect(head_, &QComboBox::currentIndexChanged, this, [this](int i) { lines_->setHead(i - 1); });
  connect(first_, &QSpinBox::valueChanged, lines_, &LineView::setFirst);
}

void LinesPage::modelChanged() {
  QSignalBlocker block(head_);
  head_->clear();
  head_->addItem("all heads");
  for (int h = 0; h < state_->heads(); ++h) head_->addItem(QString("head %1").arg(h));
  lines_->setHead(-1);
}

void LinesPage::refresh() {
  lines_->setResult(state_->result(), state_->layer());
  const int over = lines_->tokenCount() - LineView::kMaxTokens;
  first_label_->setVisible(over > 0);
  first_->setVisible(over > 0);
  first_->setMaximum(std::max(0, over));  // clamps the value; valueChanged moves the window
  first_->setSuffix(QString(" (of %1)").arg(lines_->tokenCount()));
}

// --- All layers: thumbnails, layers x heads; click one to open its layer on the Heads tab.

LayersPage::LayersPage(ExploreState* state, QWidget* parent)
    : ExplorePage(state, OnResult | OnDisplay | OnAblation, /*eager=*/false, parent) {
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(0, 0, 0, 0);
  note_ = new QLabel(
      "These thumbnails are the attention probabilities; the Heads and Head tabs show value-weighted maps.", this);
  note_->setVisible(false);
  v->addWidget(note_);
  auto* scroll = scroll_ = new QScrollArea(this);
  inner_ = new QWidget;
  grid_ = new QGridLayout(inner_);
  grid_->setSpacing(2);
  scroll->setWidget(inner_);
  scroll->setWidgetResizable(true);
  v->addWidget(scroll);
  connect(scroll->verticalScrollBar(), &QScrollBar::valueChanged, this, &LayersPage::drawVisible);
  connect(scroll->horizontalScrollBar(), &QScrollBar::valueChanged, this, &LayersPage::drawVisible);
}

void LayersPage::modelChanged() {
  for (QWidget* w : cells_) w->deleteLater();
  cells_.clear();
  thumbs_.clear();
  waiting_.clear();
  grids_.reset();
  if (!state_->model()) return;
  const ModelConfig& c = state_->model()->config;
  for (int l = 0; l < c.num_layers; ++l) {
    auto* label = new QLabel(QString("layer %1").arg(l), inner_);
    grid_->addWidget(label, l, 0);
    cells_.push_back(label);
    for (int h = 0; h < c.num_heads; ++h) {
      auto* t = new HeatmapView(inner_);
      t->setCompact(true);
      t->setMaxCells(128);
      t->setMinimumSize(c.num_heads > 8 ? 60 : 90, c.num_heads > 8 ? 60 : 90);  // 12 heads fit 1280 px
      t->setToolTip(QString("layer %1, head %2: click to open this layer").arg(l).arg(h));
      connect(t, &HeatmapView::clicked, this, [this, l] {
        state_->setLayer(l);
        emit state_->pageRequested("heads");
      });
      grid_->addWidget(t, l, h + 1);
      cells_.push_back(t);
      thumbs_.push_back(t);
    }
  }
  sizeThumbs();
}

void LayersPage::resizeEvent(QResizeEvent* e) {
  ExplorePage::resizeEvent(e);
  sizeThumbs();
  drawVisible();
}

bool LayersPage::inView(const QWidget* thumb) const {
  const QWidget* port = scroll_->viewport();
  return port->rect().intersects(QRect(thumb->mapTo(port, QPoint(0, 0)), thumb->size()));
}

void LayersPage::drawVisible() {
  for (size_t k = 0; k < thumbs_.size() && k < waiting_.size(); ++k) {
    if (!waiting_[k] || !inView(thumbs_[k])) continue;
    if (!grids_ || k >= grids_->size()) {
      thumbs_[k]->setData({});
    } else {
      HeatmapData d = (*grids_)[k];
      d.title = std::move(waiting_[k]->title);
      d.hatched = waiting_[k]->hatched;
      thumbs_[k]->setData(std::move(d));
    }
    waiting_[k].reset();
  }
}

void LayersPage::sizeThumbs() {
  if (thumbs_.empty() || !state_->model()) return;
  const int H = state_->model()->config.num_heads;
  // the widest layer label ("layer 11" is wider than "layer 0": measuring the first one left a
  // horizontal scroll bar and the last head cut at 12 layers) and the grid's own margins
  int label = 0;
  for (QWidget* w : cells_)
    if (qobject_cast<QLabel*>(w)) label = std::max(label, w->sizeHint().width());
  const QMargins mg = grid_->contentsMargins();
  // the vertical scroll bar's width too while it is hidden: thumbnails sized without it brought it
  // on, and a horizontal one with it (1600x1000)
  const int bar = scroll_->verticalScrollBar()->isVisible() ? 0 : style()->pixelMetric(QStyle::PM_ScrollBarExtent);
  const int room = scroll_->viewport()->width() - bar - label - grid_->spacing() * H - mg.left() - mg.right() - 4;
  const int side = std::clamp(room / std::max(1, H), 48, 220);
  // the map square under its one-line title (the compact title's row: 7 pt and its margins)
  const int title = QFontMetrics(QFont(font().family(), 7, QFont::Bold)).height() + 4;
  for (HeatmapView* t : thumbs_) {
    t->setMinimumSize(side, side + title);
    t->setMaximumSize(side, side + title);
  }
  grid_->setAlignment(Qt::AlignLeft | Qt::AlignTop);
}

void LayersPage::refresh() {
  sizeThumbs();  // the viewport has its size once the page is shown
  const size_t H = static_cast<size_t>(state_->heads());
  grids_ = state_->result() ? state_->outcome().heads : nullptr;
  const size_t n = grids_ ? grids_->size() : 0;
  note_->setVisible(state_->valueWeighted() && state_->result());
  waiting_.assign(thumbs_.size(), Waiting{});
  inner_->layout()->activate();  // the thumbnails' places, for inView, before the first paint
  for (size_t k = 0; k < thumbs_.size(); ++k) {
    thumbs_[k]->setGradient(state_->colormap());
    if (k >= n) continue;  // drawn empty
    const int l = static_cast<int>(k / H), h = static_cast<int>(k % H);
    thumbs_[k]->setToolTip(QString("layer %1, head %2: %3; click to open this layer")
                               .arg(l)
                               .arg(h)
                               .arg(state_->valueWeighted() ? "attention probabilities (the Heads tab shows "
                                                              "value-weighted maps; these thumbnails do not)"
                                                            : "attention probabilities"));
    // the row's label says the layer; the thumbnails are the raw attention even while the Heads
    // tab shows value-weighted maps, so they keep the attention's badges and say what they are
    Waiting& w = *waiting_[k];
    w.title = QString("head %1").arg(h);
    if (const QString b = state_->badge(l, h); !b.isEmpty()) w.title += QString::fromUtf8(" \u00b7 ") + b;
    if (state_->isAblated(l, h)) w.title += " (ablated)";
    w.hatched = state_->isAblated(l, h);
  }
  drawVisible();  // the others when they are scrolled to
}

// --- Head: one head of the current layer, large.

HeadPage::HeadPage(ExploreState* state, QWidget* parent)
    : ExplorePage(state, OnResult | OnLayer | OnDisplay | OnAblation, /*eager=*/false, parent) {
  auto* v = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  box_ = new QComboBox(this);
  box_->setObjectName("headBox");
  box_->setToolTip("The head shown large (double-click a head in the Heads tab)");
  bar->addWidget(new QLabel("head:", this));
  bar->addWidget(box_);
  bar->addStretch();
  v->addLayout(bar);
  big_ = new HeatmapView(this);
  big_->setPlaceholder("Type some text first");
  big_->setMaxCells(1024);
  big_->setSquareCells(true);
  v->addWidget(big_, 1);
  connect(box_, &QComboBox::currentIndexChanged, this, [this](int h) {
    if (h >= 0 && h != state_->openedHead()) state_->openHead(h);
  });
  connect(state, &ExploreState::headOpened, this, &HeadPage::invalidate);
}

void HeadPage::modelChanged() {
  QSignalBlocker block(box_);
  box_->clear();
  for (int h = 0; h < state_->heads(); ++h) box_->addItem(QString("head %1").arg(h));
}

void HeadPage::refresh() {
  const int layer = state_->layer(), head = state_->openedHead();
  {
    QSignalBlocker block(box_);
    box_->setCurrentIndex(head);
  }
  big_->setGradient(state_->colormap());
  big_->setAnnotate(state_->annotate());
  if (!state_->result()) return big_->setData({});
  big_->setColourTop(state_->colourTop(layer));
  // Full resolution up to 1024 cells per axis; built here, on demand, for the one head shown.
  big_->setData(state_->headMap(layer, head, 1024, true));
}

}  // namespace attnlab
