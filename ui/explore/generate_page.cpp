// GeneratePage (see generate_page.h).
#include "ui/explore/generate_page.h"

#include <QCheckBox>
#include <QCoreApplication>
#include <QDoubleSpinBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>

#include "engine/compute/forward.h"
#include "engine/compute/kv_cache.h"
#include "engine/compute/lm.h"
#include "ui/bar_view.h"
#include "ui/curve_view.h"

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

GeneratePage::GeneratePage(ExploreState* state, QWidget* parent) : ExplorePage(state, 0, /*eager=*/false, parent) {
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
  auto* split = new QHBoxLayout;
  chart_ = new BarView("before the warpers", "after (sampled from)", this);
  chart_->setObjectName("genChart");
  split->addWidget(chart_, 3);
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
  right->addWidget(table_, 3);
  // each step's probability and entropy, as a small curve under the steps
  curve_ = new CurveView("step", this);
  curve_->setObjectName("genCurve");
  curve_->addSeries("p of the chosen token", QColor(230, 120, 20), false, true);
  curve_->addSeries("entropy (nats)", QColor(50, 110, 190), true, true);
  curve_->setAxisLabels("p", "entropy");
  curve_->setYRange(0, 1);
  curve_->setIntegerX(1);
  curve_->setMinimumHeight(150);
  right->addWidget(curve_, 2);
  split->addLayout(right, 2);
  v->addLayout(split, 1);
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
  if (steps_.empty())
    chart_->clear(), summary_->setText("");
  else
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
  while (busy_ || remaining_ > 0) {
    job_.wait();
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

}  // namespace attnlab
