// AlignmentPage (see alignment_page.h).
#include "ui/explore/alignment_page.h"

#include <QCheckBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QSplitter>
#include <QSignalBlocker>
#include <QVBoxLayout>
#include <algorithm>

#include "ui/figure_export.h"
#include "ui/heatmap_view.h"
#include "ui/line_view.h"

namespace attnlab {

AlignmentPage::AlignmentPage(ExploreState* state, QWidget* parent)
    : ExplorePage(state, OnResult | OnDisplay, /*eager=*/false, parent) {
  auto* v = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel("layers:", this));
  layer_row_ = new QHBoxLayout;
  bar->addLayout(layer_row_);
  bar->addSpacing(16);
  bar->addWidget(new QLabel("heads:", this));
  head_row_ = new QHBoxLayout;
  bar->addLayout(head_row_);
  bar->addStretch();
  auto* exp = new QPushButton("Export...", this);
  exp->setObjectName("alignmentExport");
  exp->setToolTip("The alignment matrix as PNG, SVG or PDF, or its values as CSV or .npy");
  bar->addWidget(exp);
  v->addLayout(bar);
  status_ = new QLabel(this);
  status_->setObjectName("alignmentStatus");
  status_->setWordWrap(true);
  status_->setTextFormat(Qt::PlainText);  // tokens such as <s> are text, not markup
  v->addWidget(status_);
  auto* split = new QSplitter(Qt::Horizontal, this);
  map_ = new HeatmapView(split);
  map_->setMaxCells(512);
  map_->setSquareCells(true);
  map_->setPlaceholder("Type a source and a target");
  lines_ = new LineView(split);
  lines_->setToolTip("Target tokens on the left, source tokens on the right: hover a token for its lines");
  split->addWidget(map_);
  split->addWidget(lines_);
  split->setSizes({3000, 2000});  // the matrix the wider part
  v->addWidget(split, 1);
  connect(exp, &QPushButton::clicked, this, [this] {
    const QString f = pick_export_file(this, "alignment.png");
    if (f.isEmpty()) return;
    try {
      exportTo(f, 150);
      status_->setText("Exported " + f);
    } catch (const Error& e) {
      status_->setText(QString::fromStdString(e.what()));
    }
  });
}

// One box per decoder layer and per head, every one ticked: the mean over all of them first.
void AlignmentPage::modelChanged() {
  for (QCheckBox* b : layer_boxes_) b->deleteLater();
  for (QCheckBox* b : head_boxes_) b->deleteLater();
  layer_boxes_.clear();
  head_boxes_.clear();
  const Model* m = state_->model().get();
  if (!m || !m->config.cross_attention) return;
  auto add = [this](QHBoxLayout* row, std::vector<QCheckBox*>& boxes, int n, const char* what) {
    for (int k = 0; k < n; ++k) {
      auto* b = new QCheckBox(QString::number(k), this);
      b->setObjectName(QString("align%1%2").arg(what).arg(k));
      b->setChecked(true);
      b->setToolTip(QString("Average %1 %2 in (untick to leave it out)").arg(what).arg(k));
      connect(b, &QCheckBox::toggled, this, &AlignmentPage::invalidate);
      row->addWidget(b);
      boxes.push_back(b);
    }
  };
  add(layer_row_, layer_boxes_, m->config.num_layers, "layer");
  add(head_row_, head_boxes_, m->config.num_heads, "head");
}

void AlignmentPage::choose(const std::vector<int>& layers, const std::vector<int>& heads) {
  auto set = [](std::vector<QCheckBox*>& boxes, const std::vector<int>& on, const char* what) {
    for (int k : on)
      if (k < 0 || k >= static_cast<int>(boxes.size()))
        throw Error(std::string("alignment: no ") + what + " " + std::to_string(k) + " (the decoder has " +
                    std::to_string(boxes.size()) + ")");
    for (size_t k = 0; k < boxes.size(); ++k) {
      QSignalBlocker block(boxes[k]);
      boxes[k]->setChecked(on.empty() || std::find(on.begin(), on.end(), static_cast<int>(k)) != on.end());
    }
  };
  set(layer_boxes_, layers, "layer");
  set(head_boxes_, heads, "head");
  invalidate();
}

namespace {
std::vector<int> ticked(const std::vector<QCheckBox*>& boxes) {
  std::vector<int> on;
  for (size_t k = 0; k < boxes.size(); ++k)
    if (boxes[k]->isChecked()) on.push_back(static_cast<int>(k));
  return on;
}
}  // namespace

std::vector<int> AlignmentPage::chosenLayers() const {
  return ticked(layer_boxes_);
}
std::vector<int> AlignmentPage::chosenHeads() const {
  return ticked(head_boxes_);
}

QString AlignmentPage::status() const {
  return status_->text();
}

void AlignmentPage::refresh() {
  map_->setGradient(state_->colormap());
  map_->setAnnotate(state_->annotate());
  alignment_ = {};
  const std::shared_ptr<const ForwardResult>& r = state_->result();
  const std::vector<int> layers = chosenLayers(), heads = chosenHeads();
  if (!r || !r->is_seq2seq()) {
    map_->setData({});
    lines_->setResult(nullptr, 0);
    status_->setText("");
    return;
  }
  if (layers.empty() || heads.empty()) {
    map_->setData({});
    lines_->setResult(nullptr, 0);
    status_->setText("Tick at least one layer and one head: the alignment is their mean cross-attention.");
    return;
  }
  try {
    alignment_ = cross_alignment(*r, layers, heads);
  } catch (const Error& e) {  // (a result of another shape than the boxes: the next one redraws)
    alignment_ = {};
    map_->setData({});
    lines_->setResult(nullptr, 0);
    status_->setText(QString::fromStdString(e.what()));
    return;
  }
  const int T = alignment_.T, S = alignment_.S;
  // rows: the target token each decoder position predicts (the labels the pass was given); else
  // the decoder's inputs where the result shows them, else positions
  const bool labels = r->target_tokens.size() == static_cast<size_t>(T);
  std::vector<std::string> row_tokens;
  if (labels) {
    row_tokens = r->target_tokens;
  } else if (r->ids.size() == static_cast<size_t>(T) && r->ids != r->source_ids) {
    row_tokens = r->tokens;
  } else {
    for (int i = 0; i < T; ++i) row_tokens.push_back(std::to_string(i));
  }
  rows_ = to_labels(row_tokens);
  cols_ = to_labels(r->source_tokens);
  HeatmapData d = owned_heatmap(alignment_.map, {}, T, S, 512);
  d.row_labels = rows_;
  d.col_labels = cols_;
  d.row_axis = labels ? "target (the token predicted)" : "target (the decoder's input)";
  d.col_axis = "source";
  d.title = QString("mean of %1 layer%2 x %3 head%4")
                .arg(layers.size())
                .arg(layers.size() == 1 ? "" : "s")
                .arg(heads.size())
                .arg(heads.size() == 1 ? "" : "s");
  map_->setColourTop(0);
  map_->setData(std::move(d));
  // the lines: the same mean as one head of a cross-mode result, target on the left
  auto one = std::make_shared<ForwardResult>();
  one->ids = labels ? r->target_ids : std::vector<int>(static_cast<size_t>(T), 0);
  one->tokens = row_tokens;
  one->cross_ids = r->source_ids;
  one->cross_tokens = r->source_tokens;
  Tensor x({1, T, S});
  std::copy(alignment_.map.begin(), alignment_.map.end(), x.data.begin());
  one->cross_attention.push_back(std::move(x));
  lines_->setResult(one, 0);
  lines_->setHead(0);
  lines_->setTitles(map_->data().title, "target", "source");
  QStringList best;  // the strongest source token of each target token, as fairseq prints alignments
  for (int i = 0; i < T && i < 12; ++i)
    best << QString("%1→%2").arg(rows_.value(i), cols_.value(alignment_.best[static_cast<size_t>(i)]));
  status_->setText(
      QString("Each row: the decoder at one target position (it has read the target's tokens before it) and the "
              "source tokens its cross-attention reads, averaged over the ticked layers and heads. Strongest: %1%2")
          .arg(best.join("  "))
          .arg(T > 12 ? "  …" : ""));
}

void AlignmentPage::exportTo(const QString& path, int dpi) {
  if (alignment_.T == 0) throw Error("nothing to export: type a source and a target first");
  ExportSpec spec;
  spec.dpi = dpi;
  spec.colormap = state_->colormap();
  spec.title = map_->data().title;
  spec.annotate = state_->annotate();
  spec.row_axis = "target";
  spec.col_axis = "source";
  spec.value_label = "mean cross-attention";
  export_matrix(alignment_.map, rows_, cols_, spec, path);
}

}  // namespace attnlab
