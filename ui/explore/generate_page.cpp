// GeneratePage (see generate_page.h).
#include "ui/explore/generate_page.h"

#include <QCheckBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QDoubleSpinBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "engine/analysis/attribution.h"
#include "engine/analysis/patching.h"
#include "engine/compute/forward.h"
#include "engine/compute/kv_cache.h"
#include "engine/compute/lm.h"
#include "ui/bar_view.h"
#include "ui/curve_view.h"
#include "ui/heatmap_data.h"
#include "ui/heatmap_view.h"

#include <qcustomplot.h>
#include "ui/explore_controller.h"

namespace attnlab {

namespace {

constexpr int kChartTokens = 12;  // the chart's categories: the likeliest before and after the warpers

// What one step's job gives back.
struct StepOutcome {
  GeneratePage::Step step;
  QString added;  // the text the token adds
};

// 0.976, or 5.2e-04 below a thousandth (never a misleading 0.000)
QString probability(double p) {
  return p >= 1e-3 || p == 0 ? QString::number(p, 'f', 3) : QString::number(p, 'e', 1);
}

QString shown(const Model& m, int id) {
  return QString::fromStdString(m.readable_token(id));
}

}  // namespace

GeneratePage::GeneratePage(ExploreState* state, QWidget* parent)
    : ExplorePage(state, OnResult | OnLayer | OnDisplay, /*eager=*/false, parent) {
  auto* v = new QVBoxLayout(this);
  auto* grid = new QGridLayout;
  greedy_ = new QCheckBox("greedy", this);
  greedy_->setObjectName("genGreedy");
  greedy_->setToolTip("The likeliest token every step (transformers' do_sample=False); off: sample with the warpers");
  temperature_ = new QDoubleSpinBox(this);
  temperature_->setObjectName("genTemperature");
  temperature_->setRange(0.05, 5.0);
  temperature_->setSingleStep(0.05);
  temperature_->setValue(1.0);
  temperature_->setToolTip("Scores divided by the temperature (first): below 1 sharper, above 1 flatter");
  top_k_ = new QSpinBox(this);
  top_k_->setObjectName("genTopK");
  top_k_->setRange(0, 1000000);
  top_k_->setSpecialValueText("off");
  top_k_->setToolTip("Keep the k likeliest tokens (second; ties with the k-th kept); off: all");
  top_p_ = new QDoubleSpinBox(this);
  top_p_->setObjectName("genTopP");
  top_p_->setRange(0.01, 1.0);
  top_p_->setSingleStep(0.05);
  top_p_->setValue(1.0);
  top_p_->setToolTip("Keep the fewest likeliest tokens whose probability adds up past top-p (third); 1: all");
  min_p_ = new QDoubleSpinBox(this);
  min_p_->setObjectName("genMinP");
  min_p_->setRange(0.0, 1.0);
  min_p_->setSingleStep(0.01);
  min_p_->setDecimals(3);
  min_p_->setToolTip("Drop tokens less likely than min-p times the likeliest (fourth); 0: off");
  seed_ = new QSpinBox(this);
  seed_->setObjectName("genSeed");
  seed_->setRange(0, 1 << 30);
  seed_->setToolTip("The sampler's seed: one seed, one text");
  int col = 0;
  grid->addWidget(greedy_, 0, col++);
  for (auto [name, w] : std::initializer_list<std::pair<const char*, QWidget*>>{
           {"temperature", temperature_}, {"top-k", top_k_}, {"top-p", top_p_}, {"min-p", min_p_}, {"seed", seed_}}) {
    grid->addWidget(new QLabel(name, this), 0, col++, Qt::AlignRight);
    grid->addWidget(w, 0, col++);
  }
  grid->setColumnStretch(col, 1);
  v->addLayout(grid);
  auto* buttons = new QHBoxLayout;
  step_ = new QPushButton("Step", this);
  step_->setObjectName("genStep");
  step_->setToolTip("Append one token");
  run_ = new QPushButton("Generate", this);
  run_->setObjectName("genRun");
  run_->setToolTip("Append this many tokens, one step after another (the model's end-of-text token ends it)");
  count_ = new QSpinBox(this);
  count_->setObjectName("genCount");
  count_->setRange(1, 500);
  count_->setValue(20);
  count_->setSuffix(" tokens");
  count_->setToolTip("How many tokens Generate appends");
  stop_ = new QPushButton("Stop", this);
  stop_->setObjectName("genStop");
  stop_->setToolTip("End a Generate run after the step in flight");
  undo_ = new QPushButton("Undo", this);
  undo_->setObjectName("genUndo");
  undo_->setToolTip("Take the last token back");
  for (QWidget* w : {static_cast<QWidget*>(step_), static_cast<QWidget*>(run_), static_cast<QWidget*>(count_),
                     static_cast<QWidget*>(stop_), static_cast<QWidget*>(undo_)})
    buttons->addWidget(w);
  buttons->addStretch(1);
  v->addLayout(buttons);
  summary_ = new QLabel(this);
  summary_->setObjectName("genSummary");
  summary_->setWordWrap(true);
  v->addWidget(summary_);
  // the shown step, as tabs (its distribution, what it attended to, why it and not another) | the
  // steps over the curve
  auto* split = new QHBoxLayout;
  detail_ = new QTabWidget(this);
  QTabWidget* detail = detail_;
  detail->setObjectName("genDetail");
  chart_ = new BarView("before the warpers", "after (sampled from)", detail);
  chart_->setObjectName("genChart");
  chart_->setToolTip("Click a token's bars: why the model chose its token and not that one");
  detail->addTab(chart_, "Distribution");
  auto* row_page = new QWidget(detail);
  auto* rl = new QVBoxLayout(row_page);
  rl->setContentsMargins(2, 2, 2, 2);
  row_text_ = new QLabel(row_page);
  row_text_->setWordWrap(true);
  rl->addWidget(row_text_);
  row_ = new HeatmapView(row_page);
  row_->setObjectName("genRow");
  row_->setPlaceholder("Choose a step: what the position that chose its token attended to");
  rl->addWidget(row_, 1);
  detail->addTab(row_page, "Its attention");
  auto* why_page = new QWidget(detail);
  auto* wl = new QVBoxLayout(why_page);
  wl->setContentsMargins(2, 2, 2, 2);
  auto* pick = new QHBoxLayout;
  pick->addWidget(new QLabel("and not", why_page));
  against_ = new QComboBox(why_page);
  against_->setObjectName("genAgainst");
  against_->setEditable(true);  // one of the chart's tokens, or any text that is one token
  against_->setInsertPolicy(QComboBox::NoInsert);
  against_->setToolTip("The other token: one of the chart's (or click its bars), or type any text that is one token");
  pick->addWidget(against_, 1);
  why_ = new QPushButton("Why?", why_page);
  why_->setObjectName("genWhy");
  why_->setToolTip(
      "Each head's and MLP's direct share of the logit difference at this step (direct logit attribution)");
  pick->addWidget(why_);
  wl->addLayout(pick);
  contrast_text_ = new QLabel(why_page);
  contrast_text_->setObjectName("genContrastText");
  contrast_text_->setWordWrap(true);
  wl->addWidget(contrast_text_);
  contrast_ = new HeatmapView(why_page);
  contrast_->setObjectName("genContrast");
  contrast_->setPlaceholder("Pick another token and press Why?");
  wl->addWidget(contrast_, 1);
  detail->addTab(why_page, "Why this, not that");
  split->addWidget(detail, 3);
  table_ = new QTableWidget(this);
  table_->setObjectName("genTable");
  table_->setColumnCount(5);
  table_->setHorizontalHeaderLabels({"token", "p", "p before", "entropy", "kept"});
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);  // the token
  table_->verticalHeader()->setDefaultSectionSize(20);
  auto* right = new QVBoxLayout;
  right->addWidget(table_, 1);
  // each step's probability and entropy, as a small curve under the steps
  curve_ = new CurveView("step", this);
  curve_->setObjectName("genCurve");
  curve_->addSeries("p of the chosen token", QColor(230, 120, 20), false, true);
  curve_->addSeries("entropy (nats)", QColor(50, 110, 190), true, true);
  curve_->setAxisLabels("p", "entropy");
  curve_->setYRange(0, 1);
  curve_->setIntegerX(1);
  // half the column: at 1280x720 a fifth left its axes ~60 px tall, their ticks crowded
  curve_->setMinimumHeight(190);
  // and no wider than the column needs: its legend's width (~300 px) made this page, and with it
  // the Explore view, too wide for a 1280 px window beside the tour's panel
  curve_->setMinimumWidth(220);
  right->addWidget(curve_, 1);
  split->addLayout(right, 2);
  v->addLayout(split, 1);
  connect(chart_, &BarView::categoryClicked, this, [this](int c) {
    if (shown_ < 0) return;
    const Step& s = steps_[static_cast<size_t>(shown_)];
    if (c < 0 || c >= static_cast<int>(s.chart_ids.size()) || s.chart_ids[static_cast<size_t>(c)] == s.id) return;
    explain(shown_, s.chart_ids[static_cast<size_t>(c)]);
  });
  connect(why_, &QPushButton::clicked, this, [this] { explainTyped(); });
  connect(against_->lineEdit(), &QLineEdit::returnPressed, this, [this] { explainTyped(); });
  connect(contrast_, &HeatmapView::cellClicked, this, [this](int row, int col) {
    const std::shared_ptr<const Model>& m = state_->model();
    if (!m || !contrast_result_ || col >= m->config.num_heads) return;  // the MLP column has no pattern
    state_->setLayer(row);
    state_->openHead(col);
  });
  auto sampled = [this] {
    for (QWidget* w : {static_cast<QWidget*>(temperature_), static_cast<QWidget*>(top_k_),
                       static_cast<QWidget*>(top_p_), static_cast<QWidget*>(min_p_), static_cast<QWidget*>(seed_)})
      w->setEnabled(!greedy_->isChecked());
  };
  connect(greedy_, &QCheckBox::toggled, this, sampled);
  greedy_->setChecked(true);
  sampled();
  connect(step_, &QPushButton::clicked, this, &GeneratePage::step);
  connect(run_, &QPushButton::clicked, this, [this] { generate(count_->value()); });
  connect(stop_, &QPushButton::clicked, this, &GeneratePage::stop);
  connect(undo_, &QPushButton::clicked, this, &GeneratePage::undo);
  connect(table_, &QTableWidget::currentCellChanged, this, [this](int row, int, int, int) {
    if (row >= 0) showStep(row);
  });
  setBusy(false);
}

SamplingOptions GeneratePage::sampling() const {
  SamplingOptions o;
  o.greedy = greedy_->isChecked();
  o.temperature = static_cast<float>(temperature_->value());
  o.top_k = top_k_->value();
  o.top_p = static_cast<float>(top_p_->value());
  o.min_p = static_cast<float>(min_p_->value());
  o.seed = static_cast<uint64_t>(seed_->value());
  return o;
}

void GeneratePage::setSampling(const SamplingOptions& o) {
  greedy_->setChecked(o.greedy);
  temperature_->setValue(o.temperature);
  top_k_->setValue(o.top_k);
  top_p_->setValue(o.top_p);
  min_p_->setValue(o.min_p);
  seed_->setValue(static_cast<int>(o.seed));
}

void GeneratePage::modelChanged() {
  job_.cancel();
  cache_ = std::make_shared<KvCache>();  // a step in flight keeps its own
  steps_.clear();
  pending_.clear();
  table_->setRowCount(0);
  chart_->clear();
  curve_->clear();
  contrast_job_.cancel();
  contrast_result_.reset();
  contrast_->setData(HeatmapData());
  contrast_text_->clear();
  row_->setData(HeatmapData());
  row_text_->clear();
  against_->clear();
  shown_ = -1;
  remaining_ = 0;
  const std::shared_ptr<const Model>& m = state_->model();
  const bool lm = m && m->config.lm_head && m->config.causal;
  stops_ = lm ? end_of_text_ids(*m) : std::vector<int>();
  setEnabled(lm);
  summary_->setText(lm ? "Step appends the next token; the chart shows the distribution it was drawn from."
                       : "Generation needs a causal language model (one with an LM head); this model is not one.");
  setBusy(false);
}

void GeneratePage::setBusy(bool busy) {
  busy_ = busy;
  step_->setEnabled(!busy);
  run_->setEnabled(!busy);
  stop_->setEnabled(busy || remaining_ > 0);
  undo_->setEnabled(!busy && !steps_.empty());
}

namespace {

// The chart's categories for one step: the likeliest before the warpers and after them, the
// chosen token always among them, in the order of their raw probability.
void chart_of(const Model& m, const NextTokenDistribution& d, GeneratePage::Step& s) {
  std::vector<int> ids;
  auto add = [&ids](int id) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  std::vector<int> order(d.raw.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  const size_t top = std::min<size_t>(kChartTokens / 2, order.size());
  auto raw = [&d](int id) { return d.raw[static_cast<size_t>(id)]; };
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top), order.end(),
                    [&](int a, int b) { return raw(a) > raw(b); });
  for (size_t i = 0; i < top; ++i) add(order[i]);
  for (size_t i = 0; i < d.kept.size() && static_cast<int>(ids.size()) < kChartTokens; ++i) add(d.kept[i].first);
  add(s.id);
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return raw(a) > raw(b); });
  for (int id : ids) {
    s.chart_labels << shown(m, id);
    s.chart_ids.push_back(id);
    s.before.push_back(raw(id));
    double p = 0;
    for (const auto& [kid, kp] : d.kept)
      if (kid == id) p = kp;
    s.after.push_back(p);
    if (id == s.id) s.marked = static_cast<int>(s.chart_labels.size()) - 1;
  }
}

}  // namespace

void GeneratePage::step() {
  const std::shared_ptr<const Model> model = state_->model();
  if (busy_ || !model || !model->config.lm_head || !model->config.causal) return;
  const QString before = text_ ? text_() : QString();
  if (steps_.empty()) last_text_ = before;        // a history starts from the text as it is
  if (!steps_.empty() && before != last_text_) {  // the user edited the text: the history is of another text
    steps_.clear();
    pending_.clear();
    table_->setRowCount(0);
    curve_->clear();
    emit generatedFrom(-1);
  }
  // the pass the Explore view runs (its mask), on the text's ids plus any tokens of a split character
  ForwardRequest req = state_->analysisRequest();
  req.cross_ids.clear();
  if (req.ids.empty()) {
    summary_->setText("Type a prompt first: generation continues the explored text.");
    remaining_ = 0;
    return;
  }
  const std::vector<int> base = req.ids;
  if (steps_.empty()) prompt_tokens_ = static_cast<int>(base.size());
  req.ids.insert(req.ids.end(), pending_.begin(), pending_.end());
  if (static_cast<int>(req.ids.size()) >= model->config.max_len) {
    summary_->setText(
        QString("The text fills the model's %1 positions; nothing more fits.").arg(model->config.max_len));
    remaining_ = 0;
    setBusy(false);
    return;
  }
  if (std::all_of(req.token_types.begin(), req.token_types.end(), [](int t) { return t == 0; }))
    req.token_types.clear();
  else
    req.token_types.resize(req.ids.size(), req.token_types.back());
  const SamplingOptions o = sampling();
  if (o.seed != rng_seed_ || steps_.empty()) {  // a new seed (or a fresh start) starts the sampler over
    rng_ = SampleRng(o.seed);
    rng_seed_ = o.seed;
  }
  const SampleRng rng = rng_;
  const std::string backend = state_->controller()->backend().toStdString();
  std::shared_ptr<KvCache> cache = cache_;
  const std::vector<int> pending = pending_;
  setBusy(true);
  job_.start<StepOutcome>(
      [model, req, base, o, rng, cache, backend, before, pending](const std::atomic<bool>* cancel,
                                                                  const BackgroundJob::Post&) {
        ForwardRequest r = req;
        // the KV cache serves plain passes (no ablation); the cpu backends run it
        if (r.ablate.empty() && r.token_types.empty() && backend_runs_kv_cache(backend)) r.kv = cache.get();
        r.cancel = cancel;
        r.keep_attention.assign(static_cast<size_t>(model->config.num_layers), false);  // the views have theirs
        auto b = make_backend(backend);
        const ForwardResult result = run_forward(*model, *b, r);
        const NextTokenDistribution d = warp_logits(result.next_logits, o);
        StepOutcome out;
        Step& s = out.step;
        SampleRng draw = rng;
        s.id = choose_token(d, o, draw);
        for (const auto& [id, p] : d.kept)
          if (id == s.id) s.prob = p;
        s.raw_prob = d.raw[static_cast<size_t>(s.id)];
        s.entropy = d.entropy;
        s.kept = d.kept_total;
        s.label = shown(*model, s.id);
        s.greedy = o.greedy;
        chart_of(*model, d, s);
        s.rng_before = draw;  // the sampler after this draw (swapped on the GUI thread)
        s.text_before = before;
        s.pending_before = pending;
        s.ids = r.ids;
        std::vector<int> after = r.ids;
        after.push_back(s.id);
        out.added = QString::fromStdString(continuation_text(*model, base, after));
        return out;
      },
      [this, rng, before](std::shared_ptr<const StepOutcome> out, const QString& error) {
        if (!out) {
          remaining_ = 0;
          setBusy(false);
          summary_->setText("Generation failed: " + error);
          return;
        }
        if ((text_ ? text_() : QString()) != before) {  // typed over while the step ran: its token is of another text
          remaining_ = 0;
          setBusy(false);
          summary_->setText("The text changed while the step ran; Step continues the new text.");
          return;
        }
        Step s = out->step;
        if (out->added.isEmpty()) {  // the text is the truth: a token without text cannot join it
          remaining_ = 0;
          setBusy(false);
          summary_->setText(QString("The model chose %1 (id %2), which has no text in the tokenizer: the model's "
                                    "embedding has rows past its tokenizer's vocabulary, and the text cannot hold "
                                    "such a token. Sample (untick greedy) to draw another, or open a folder whose "
                                    "tokenizer covers the embedding.")
                                .arg(s.label)
                                .arg(s.id));
          return;
        }
        rng_ = s.rng_before;  // the sampler moves on
        s.rng_before = rng;   // and the step remembers it as it was, for undo
        // a character's first bytes wait for the rest (at most 4 bytes of UTF-8)
        s.pending = ends_mid_character(out->added.toStdString()) && pending_.size() < 3;
        finishStep(s, out->added);
      });
}

void GeneratePage::finishStep(const Step& s, const QString& added) {
  steps_.push_back(s);
  const int row = table_->rowCount();
  table_->insertRow(row);
  const QString values[] = {s.label, probability(s.prob), probability(s.raw_prob), QString::number(s.entropy, 'f', 2),
                            QString::number(s.kept)};
  for (int c = 0; c < 5; ++c) table_->setItem(row, c, new QTableWidgetItem(values[c]));
  table_->item(row, 0)->setToolTip(QString("step %1: id %2%3")
                                       .arg(row + 1)
                                       .arg(s.id)
                                       .arg(s.pending ? " (part of a character: it joins the text "
                                                        "with the rest of it)"
                                                      : ""));
  {
    const QSignalBlocker block(table_);
    table_->setCurrentCell(row, 0);
  }
  showStep(row);
  redrawCurve();
  if (s.pending) {
    pending_.push_back(s.id);
  } else {
    pending_.clear();
    last_text_ = s.text_before + added;
    emit textRequested(last_text_);
    emit generatedFrom(prompt_tokens_);
  }
  remaining_ = std::max(0, remaining_ - 1);
  if (std::find(stops_.begin(), stops_.end(), s.id) != stops_.end()) remaining_ = 0;  // the model ended its text
  setBusy(false);
  if (remaining_ > 0) step();
}

void GeneratePage::generate(int n) {
  remaining_ = std::max(1, n);
  count_->setValue(remaining_);
  step();
}

void GeneratePage::stop() {
  remaining_ = 0;
  setBusy(busy_);
}

void GeneratePage::undo() {
  if (busy_ || steps_.empty()) return;
  const Step last = steps_.back();
  steps_.pop_back();
  rng_ = last.rng_before;
  pending_ = last.pending_before;
  table_->removeRow(table_->rowCount() - 1);
  if (steps_.empty()) {
    chart_->clear(), summary_->setText("");
    shown_ = -1;
    against_->clear();
    row_->setData(HeatmapData());
    row_text_->clear();
  } else
    showStep(static_cast<int>(steps_.size()) - 1);
  redrawCurve();
  if (!last.pending) {
    last_text_ = last.text_before;
    emit textRequested(last_text_);
  }
  emit generatedFrom(steps_.empty() ? -1 : prompt_tokens_);
  setBusy(false);
}

void GeneratePage::wait() {
  while (busy_ || remaining_ > 0 || contrast_job_.running()) {
    job_.wait();
    contrast_job_.wait();
    QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
  }
}

void GeneratePage::redrawCurve() {
  curve_->clear();
  double top = 1.0;
  for (size_t k = 0; k < steps_.size(); ++k) {
    curve_->append(0, static_cast<double>(k + 1), steps_[k].prob);
    curve_->append(1, static_cast<double>(k + 1), steps_[k].entropy);
    top = std::max(top, steps_[k].entropy);
  }
  // steps 1..n, and the entropy from 0 (nats: ln of the tokens it is spread over), padded
  curve_->plot()->xAxis->setRange(0.5, std::max<double>(1, static_cast<double>(steps_.size())) + 0.5);
  curve_->plot()->yAxis2->setRange(0, top * 1.1);
  curve_->plot()->replot(QCustomPlot::rpQueuedReplot);
}

void GeneratePage::showStep(int k) {
  if (k < 0 || k >= steps()) return;
  const Step& s = steps_[static_cast<size_t>(k)];
  chart_->setData(s.chart_labels, s.before, s.after, s.marked);
  if (k != shown_) {  // another step: its own contrast
    contrast_job_.cancel();
    contrast_result_.reset();
    contrast_->setData(HeatmapData());
    contrast_text_->setText(
        QString("Why \"%1\" and not another token? Pick one, or click its bars in the chart.").arg(s.label));
  }
  shown_ = k;
  fillAgainst(k);
  drawRow();
  const int vocab = state_->model() ? state_->model()->config.vocab_size : 0;
  const QString part = s.pending ? " Part of a character: it joins the text with the rest of it." : "";
  if (s.greedy)
    summary_->setText(QString("Step %1 of %2: \"%3\", the likeliest token (greedy), p %4; entropy %5 nats.%6")
                          .arg(k + 1)
                          .arg(steps())
                          .arg(s.label)
                          .arg(probability(s.prob))
                          .arg(s.entropy, 0, 'f', 2)
                          .arg(part));
  else
    summary_->setText(QString("Step %1 of %2: \"%3\", p %4 in the distribution it was drawn from (%5 before the "
                              "warpers); %6 of %7 tokens kept, entropy %8 nats.%9")
                          .arg(k + 1)
                          .arg(steps())
                          .arg(s.label)
                          .arg(probability(s.prob))
                          .arg(probability(s.raw_prob))
                          .arg(s.kept)
                          .arg(vocab)
                          .arg(s.entropy, 0, 'f', 2)
                          .arg(part));
}

QString GeneratePage::summary() const {
  return summary_->text();
}

QString GeneratePage::contrastText() const {
  return contrast_text_->text();
}

void GeneratePage::fillAgainst(int k) {
  const Step& s = steps_[static_cast<size_t>(k)];
  const QSignalBlocker block(against_);
  const int keep = against_->currentData().isValid() ? against_->currentData().toInt() : -1;
  against_->clear();
  for (size_t c = 0; c < s.chart_ids.size(); ++c)
    if (s.chart_ids[c] != s.id)
      against_->addItem(QString("%1 (p %2)").arg(s.chart_labels[static_cast<int>(c)], probability(s.before[c])),
                        s.chart_ids[c]);
  const int again = against_->findData(keep);
  against_->setCurrentIndex(again >= 0 ? again : 0);  // the likeliest other token first
  why_->setEnabled(against_->count() > 0);
}

int GeneratePage::stepAt(int position) const {
  const std::shared_ptr<const ForwardResult> r = state_->result();
  if (!r || position <= 0 || position >= static_cast<int>(r->ids.size())) return -1;
  for (size_t k = 0; k < steps_.size(); ++k) {
    const Step& s = steps_[k];
    if (static_cast<int>(s.ids.size()) == position && r->ids[static_cast<size_t>(position)] == s.id &&
        std::equal(s.ids.begin(), s.ids.end(), r->ids.begin()))
      return static_cast<int>(k);
  }
  return -1;
}

bool GeneratePage::selectPosition(int position) {
  const int k = stepAt(position);
  if (k < 0) return false;
  table_->setCurrentCell(k, 0);  // shows it
  return true;
}

void GeneratePage::refresh() {
  drawRow();
}

// What the position that chose the shown step's token attended to, every head of the layer. A
// causal model's rows before the last do not change as the text grows, so the explored result
// (the text with every step appended) holds the row the step's own pass computed.
void GeneratePage::drawRow() {
  const std::shared_ptr<const ForwardResult> r = state_->result();
  const std::shared_ptr<const Model>& m = state_->model();
  if (shown_ < 0 || !r || !m) return row_->setData(HeatmapData());
  const Step& s = steps_[static_cast<size_t>(shown_)];
  const int n = static_cast<int>(s.ids.size()), layer = state_->layer();
  const bool same = static_cast<int>(r->ids.size()) >= n && std::equal(s.ids.begin(), s.ids.end(), r->ids.begin());
  if (!same || r->is_cross() || layer < 0 || !r->has_probs(layer)) {
    row_->setData(HeatmapData());
    row_text_->setText(same ? "This layer's attention is not kept; choose a kept layer."
                            : "The explored text no longer starts with this step's text (it was edited, or "
                              "tokenizes differently now); undo or generate again to see its attention.");
    return;
  }
  const std::shared_ptr<const Tensor> probs = r->layer_probs(layer);  // kept, or recomputed (on demand)
  const Tensor& a = *probs;                                           // [heads, T, T]
  const int H = static_cast<int>(a.dim(0)), T = static_cast<int>(a.dim(1));
  std::vector<float> values(static_cast<size_t>(H) * n);
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < n; ++j)
      values[static_cast<size_t>(h) * n + j] = a.data[(static_cast<size_t>(h) * T + (n - 1)) * T + j];
  HeatmapData d = owned_heatmap(std::move(values), {}, H, n, 512);
  for (int h = 0; h < H; ++h) d.row_labels << QString::number(h);
  for (int j = 0; j < n && j < static_cast<int>(r->tokens.size()); ++j)
    d.col_labels << QString::fromStdString(r->tokens[static_cast<size_t>(j)]);
  d.row_axis = "head";
  d.col_axis = "keys";
  d.title = QString("Layer %1: what \"%2\" attended to when it chose \"%3\"")
                .arg(layer)
                .arg(n - 1 < static_cast<int>(r->tokens.size()) ? QString::fromStdString(r->tokens[n - 1]) : "")
                .arg(s.label);
  row_->setGradient(state_->colormap());
  row_->setData(std::move(d));
  row_text_->setText(QString("Step %1: position %2's attention over the %3 tokens before the new one, every head of "
                             "layer %4 (the layer slider picks another).")
                         .arg(shown_ + 1)
                         .arg(n - 1)
                         .arg(n)
                         .arg(layer));
}

bool GeneratePage::explainTyped(const QString& typed) {
  const std::shared_ptr<const Model>& m = state_->model();
  if (shown_ < 0 || !m) return false;
  const QString text = typed.isNull() ? against_->currentText() : typed;
  if (!typed.isNull()) against_->setEditText(typed);
  const int item = against_->findText(text);
  int id = -1;
  if (item >= 0) {
    id = against_->itemData(item).toInt();
  } else {
    try {  // "(p 0.012)" left out, any text that is exactly one token
      id = resolve_answer(*m, text.toStdString(), "the other token");
    } catch (const std::exception& ex) {
      contrast_->setData(HeatmapData());
      contrast_result_.reset();
      contrast_text_->setText(QString::fromUtf8(ex.what()));
      return false;
    }
  }
  if (id == steps_[static_cast<size_t>(shown_)].id) {
    contrast_text_->setText("That is the token the model chose: pick another one.");
    return false;
  }
  explain(shown_, id);
  return true;
}

void GeneratePage::explain(int k, int other) {
  const std::shared_ptr<const Model> model = state_->model();
  if (!model || k < 0 || k >= steps()) return;
  if (k != shown_) table_->setCurrentCell(k, 0);
  const Step s = steps_[static_cast<size_t>(k)];
  if (other == s.id || other < 0 || other >= model->config.vocab_size) return;
  const int at = against_->findData(other);
  if (at >= 0) {
    const QSignalBlocker block(against_);
    against_->setCurrentIndex(at);
  }
  ForwardRequest req = state_->analysisRequest();  // the Explore view's mask, on the step's own input
  req.cross_ids.clear();
  req.token_types.clear();
  req.ablate.clear();
  req.ids = s.ids;
  const QString a = s.label, b = shown(*model, other);
  detail_->setCurrentIndex(2);  // why this, not that
  contrast_result_.reset();
  contrast_text_->setText(QString("Attributing logit(\"%1\") - logit(\"%2\")...").arg(a, b));
  contrast_job_.start<LogitAttribution>(
      [model, req, s, other](const std::atomic<bool>*, const BackgroundJob::Post&) {
        auto backend = make_backend("cpu");
        return direct_logit_attribution(*model, *backend, req, s.id, other);
      },
      [this, model, k, a, b](std::shared_ptr<const LogitAttribution> d, const QString& error) {
        if (state_->model() != model || k != shown_) return;
        if (!d) {
          contrast_->setData(HeatmapData());
          contrast_text_->setText("No attribution: " + error);
          return;
        }
        contrast_result_ = d;
        const int L = static_cast<int>(d->parts.dim(0)), C = static_cast<int>(d->parts.dim(1));
        HeatmapData map = owned_heatmap(std::vector<float>(d->parts.data.begin(), d->parts.data.end()), {}, L, C, 512);
        map.diverging = true;  // a part can push either way
        for (int l = 0; l < L; ++l) map.row_labels << QString::number(l);
        for (int h = 0; h + 1 < C; ++h) map.col_labels << QString::number(h);
        map.col_labels << "MLP";
        map.row_axis = "layer";
        map.col_axis = "head, then the MLP";
        map.title = QString("logit(\"%1\") - logit(\"%2\"), each part's direct share").arg(a, b);
        contrast_->setGradient(state_->colormap());
        contrast_->setColourTop(0);
        contrast_->setData(std::move(map));
        // the parts that pushed most each way
        int top_for = -1, top_against = -1;
        for (int i = 0; i < L * C; ++i) {
          const float x = d->parts.data[static_cast<size_t>(i)];
          if (x > 0 && (top_for < 0 || x > d->parts.data[static_cast<size_t>(top_for)])) top_for = i;
          if (x < 0 && (top_against < 0 || x < d->parts.data[static_cast<size_t>(top_against)])) top_against = i;
        }
        auto part = [&](int i) {
          const int l = i / C, c = i % C;
          return (c + 1 == C ? QString("MLP %1").arg(l) : QString("L%1 H%2").arg(l).arg(c)) +
                 QString(" (%1%2)")
                     .arg(d->parts.data[static_cast<size_t>(i)] > 0 ? "+" : "")
                     .arg(d->parts.data[static_cast<size_t>(i)], 0, 'f', 2);
        };
        QString most;
        if (top_for >= 0) most += QString(" Most for \"%1\": %2.").arg(a, part(top_for));
        if (top_against >= 0) most += QString(" Most for \"%1\": %2.").arg(b, part(top_against));
        contrast_text_->setText(QString("logit(\"%1\") - logit(\"%2\") = %3: the embedding adds %4, the biases and the "
                                        "final norm's shift %5, each head and MLP what the map shows.%6 Click a head "
                                        "to open its pattern.")
                                    .arg(a, b)
                                    .arg(d->logit_diff, 0, 'f', 3)
                                    .arg(d->embedding, 0, 'f', 3)
                                    .arg(d->biases, 0, 'f', 3)
                                    .arg(most));
      });
}

}  // namespace attnlab
