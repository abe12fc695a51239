// PatternsPage (see patterns_page.h).
#include "ui/explore/patterns_page.h"

#include <QHeaderView>
#include <QLabel>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include <qcustomplot.h>

#include "engine/analysis/methods.h"
#include "ui/colormaps.h"

namespace attnlab {

namespace {

// The share behind a head's label: the mean attention that goes where the label says; for "broad",
// how even its rows are (mean entropy over the most a row of T keys can have, ln T).
double label_share(const HeadPattern& p, int T) {
  if (p.label == "broad") return T > 1 ? p.entropy / std::log(static_cast<double>(T)) : 1.0;
  if (p.label == "prev") return p.prev;
  if (p.label == "next") return p.next;
  if (p.label == "self") return p.self;
  if (p.label == "first") return p.first;
  if (p.label == "sep") return p.sep;
  if (p.label == "punct") return p.punct;
  if (p.label == "token") return p.focus_share;
  if (p.label == "induction") return p.induction;
  return std::max({p.prev, p.next, p.self, p.first, p.sep, p.punct, p.focus_share});  // none dominates
}

}  // namespace

PatternsPage::PatternsPage(ExploreState* state, QWidget* parent)
    : ExplorePage(state, OnResult | OnDisplay, /*eager=*/false, parent) {
  auto* v = new QVBoxLayout(this);
  status_ = new QLabel(this);
  status_->setWordWrap(true);
  v->addWidget(status_);
  table_ = new QTableWidget(this);
  table_->setObjectName("patternsTable");
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->horizontalHeader()->setDefaultSectionSize(96);
  v->addWidget(table_, 1);
  connect(table_, &QTableWidget::cellClicked, this, [this](int row, int col) {
    state_->setLayer(row);  // layer 0 first, as in All layers and the CLI
    state_->openHead(col);
  });
}

void PatternsPage::refresh() {
  const std::shared_ptr<const ForwardResult>& r = state_->result();
  const auto& patterns = state_->outcome().patterns;
  table_->clear();
  if (!r || r->is_cross() || patterns.empty()) {
    table_->setRowCount(0);
    table_->setColumnCount(0);
    status_->setText(r && r->is_cross() ? "Head patterns read self-attention; cross mode has none."
                                        : "Type some text: each head's pattern appears here.");
    return;
  }
  const int L = static_cast<int>(patterns.size()), H = state_->heads();
  table_->setRowCount(L);
  table_->setColumnCount(H);
  QStringList rows, cols;
  for (int l = 0; l < L; ++l) rows << QString("layer %1").arg(l);
  for (int h = 0; h < H; ++h) cols << QString("head %1").arg(h);
  table_->setVerticalHeaderLabels(rows);
  table_->setHorizontalHeaderLabels(cols);
  QCPColorGradient cm = make_gradient(state_->colormap());  // color() is not const
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H && h < static_cast<int>(patterns[static_cast<size_t>(l)].size()); ++h) {
      const HeadPattern& p = patterns[static_cast<size_t>(l)][static_cast<size_t>(h)];
      const QString badge = state_->badge(l, h);  // as the heads' titles carry it
      const double share = label_share(p, static_cast<int>(r->ids.size()));
      auto* item =
          new QTableWidgetItem(QString("%1 %2").arg(badge.isEmpty() ? QString("mixed") : badge).arg(share, 0, 'f', 2));
      const QColor bg = QColor::fromRgb(cm.color(share, QCPRange(0, 1)));
      item->setBackground(bg);
      // black on light cells, white on dark ones, by relative luminance (ITU-R BT.709), not HSL lightness:
      // yellow and light green are light
      const double lum = 0.2126 * bg.redF() + 0.7152 * bg.greenF() + 0.0722 * bg.blueF();
      item->setForeground(lum > 0.45 ? Qt::black : Qt::white);
      item->setToolTip(QString("layer %1, head %2: mean attention to the previous token %3, next %4, itself %5, the "
                               "first token %6, separators %7, punctuation %8; its most attended key (%9) %10; "
                               "entropy %11 nats; induction (the token after an earlier occurrence) %12. Click to "
                               "open the head.")
                           .arg(l)
                           .arg(h)
                           .arg(p.prev, 0, 'f', 2)
                           .arg(p.next, 0, 'f', 2)
                           .arg(p.self, 0, 'f', 2)
                           .arg(p.first, 0, 'f', 2)
                           .arg(p.sep, 0, 'f', 2)
                           .arg(p.punct, 0, 'f', 2)
                           .arg(state_->colLabels().value(p.focus))
                           .arg(p.focus_share, 0, 'f', 2)
                           .arg(p.entropy, 0, 'f', 2)
                           .arg(p.induction, 0, 'f', 2));
      table_->setItem(l, h, item);
    }
  status_->setText(QString("What each head mostly attends to (Clark et al. 2019), and that share of its attention "
                           "(colour, 0 to 1, %1); broad: how evenly it spreads (1: uniform); induction: the token "
                           "after an earlier occurrence of the query's (Olsson et al. 2022; where a quarter of the "
                           "tokens repeat); mixed: no one thing takes more than half. Click a cell to open the "
                           "head.")
                       .arg(state_->colormap()));
}

}  // namespace attnlab
