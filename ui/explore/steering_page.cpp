// SteeringPage (see steering_page.h).
#include "ui/explore/steering_page.h"

#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QSlider>
#include <QSpinBox>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/compute/hooks.h"
#include "engine/compute/lm.h"
#include "engine/text/input.h"
#include "ui/explore_controller.h"

namespace attnlab {

namespace {

constexpr double kStep = 0.25;  // the strength slider's step

// The probabilities the prediction reads: the classes', or the next token's after the last position.
std::vector<double> prediction(const Model& m, const ForwardResult& r) {
  std::vector<float> logits = r.logits;
  if (logits.empty()) logits = next_token_logits(m, r.hidden, static_cast<int>(r.hidden.dim(0)) - 1);
  const float top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t k = 0; k < p.size(); ++k) sum += p[k] = std::exp(static_cast<double>(logits[k]) - top);
  for (double& v : p) v /= sum;
  return p;
}

// mean over positions of a [T, E] activation
std::vector<double> row_mean(const Tensor& x) {
  const int64_t T = x.dim(0), E = x.dim(1);
  std::vector<double> m(static_cast<size_t>(E), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < E; ++e) m[static_cast<size_t>(e)] += x.at(t, e) / static_cast<double>(T);
  return m;
}

}  // namespace

SteeringPage::SteeringPage(ExploreState* state, QWidget* parent)
    : ExplorePage(state, OnResult, /*eager=*/false, parent) {
  auto* v = new QVBoxLayout(this);
  auto* form = new QFormLayout;
  toward_ = new QLineEdit(this);
  toward_->setObjectName("steerToward");
  toward_->setToolTip("The prompt whose residual stream the vector points towards (e.g. \"the film was good\")");
  away_ = new QLineEdit(this);
  away_->setObjectName("steerAway");
  away_->setToolTip(
      "The prompt it points away from (e.g. \"the film was not good\"); empty: only the first prompt's mean");
  layer_ = new QSpinBox(this);
  layer_->setObjectName("steerLayer");
  layer_->setToolTip("The layer whose input (blocks.{l}.hook_resid_pre) is read and added to");
  strength_ = new QSlider(Qt::Horizontal, this);
  strength_->setObjectName("steerStrength");
  strength_->setRange(-80, 80);  // x kStep: -20 to 20
  strength_->setToolTip("How many times the vector is added (0: the pass unchanged)");
  strength_label_ = new QLabel(this);
  strength_label_->setMinimumWidth(48);
  where_ = new QComboBox(this);
  where_->addItems({"every position", "the last position"});
  where_->setToolTip("Where the vector is added: every position of the explored text, or its last one");
  form->addRow("toward", toward_);
  form->addRow("away from", away_);
  auto* at = new QHBoxLayout;
  at->addWidget(layer_);
  at->addWidget(new QLabel("at", this));
  at->addWidget(where_, 1);
  form->addRow("layer", at);
  auto* s = new QHBoxLayout;
  s->addWidget(strength_, 1);
  s->addWidget(strength_label_);
  form->addRow("strength", s);
  v->addLayout(form);
  status_ = new QLabel(this);
  status_->setObjectName("steerStatus");
  status_->setWordWrap(true);
  v->addWidget(status_);
  table_ = new QTableWidget(this);
  table_->setObjectName("steerTable");
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setColumnCount(4);
  table_->setHorizontalHeaderLabels({"prediction", "before", "steered", "change"});
  table_->horizontalHeader()->setStretchLastSection(true);
  v->addWidget(table_, 1);
  pause_ = new QTimer(this);
  pause_->setSingleShot(true);
  pause_->setInterval(120);  // a slider drag computes once it rests
  connect(pause_, &QTimer::timeout, this, &SteeringPage::compute);
  auto later = [this] { pause_->start(); };
  connect(toward_, &QLineEdit::textChanged, this, later);
  connect(away_, &QLineEdit::textChanged, this, later);
  connect(layer_, &QSpinBox::valueChanged, this, later);
  connect(where_, &QComboBox::currentIndexChanged, this, later);
  connect(strength_, &QSlider::valueChanged, this, [this, later](int v) {
    strength_label_->setText(QString::number(v * kStep, 'f', 2));
    later();
  });
  strength_->setValue(16);  // 4
}

void SteeringPage::modelChanged() {
  job_.cancel();
  outcome_.reset();
  table_->setRowCount(0);
  const std::shared_ptr<const Model>& m = state_->model();
  const bool can = m && (m->config.num_classes > 0 || m->config.lm_head);
  setEnabled(can);
  if (m) {
    layer_->setRange(0, m->config.num_layers - 1);
    layer_->setValue(m->config.num_layers / 2);  // a middle layer: the usual place to steer
  }
  status_->setStyleSheet("");
  status_->setText(can ? "Steering adds the difference of two prompts' residual streams to the explored text's pass."
                       : "Steering shows how a prediction moves; this model has neither a classifier nor an LM head.");
}

void SteeringPage::setPrompts(const QString& toward, const QString& away) {
  toward_->setText(toward);
  away_->setText(away);
}
void SteeringPage::setLayer(int layer) {
  layer_->setValue(layer);
}
void SteeringPage::setStrength(double alpha) {
  strength_->setValue(static_cast<int>(std::lround(alpha / kStep)));
}
double SteeringPage::strength() const {
  return strength_->value() * kStep;
}
QString SteeringPage::status() const {
  return status_->text();
}

void SteeringPage::fail(const QString& message) {
  status_->setStyleSheet("color: #a00;");
  status_->setText(message);
}

void SteeringPage::compute() {
  pause_->stop();
  const std::shared_ptr<const Model> model = state_->model();
  if (!model || !isEnabled()) return;
  if (toward_->text().trimmed().isEmpty()) {
    job_.cancel();
    status_->setStyleSheet("");
    status_->setText(
        "Type a prompt to steer towards and one to steer away from, in words the model knows (for the "
        "shipped classifier: \"the film was good\" and \"the film was not good\").");
    return;
  }
  ForwardRequest text = state_->analysisRequest();
  if (text.ids.empty()) return;
  std::vector<int> a, b;
  QStringList unknown;  // words the model does not know: they all read as [UNK], so v says little
  try {
    InputOptions o;
    o.what = "toward";
    const PreparedInput pa = prepare_text(*model, toward_->text().toStdString(), o);
    a = pa.ids;
    PreparedInput pb;
    o.what = "away from";
    if (!away_->text().trimmed().isEmpty()) pb = prepare_text(*model, away_->text().toStdString(), o), b = pb.ids;
    for (const PreparedInput* in : std::initializer_list<const PreparedInput*>{&pa, &pb})
      for (size_t t = 0; t < in->unknown.size(); ++t)
        if (in->unknown[t]) unknown << QString::fromStdString(in->tokens[t]);
  } catch (const Error& e) {
    return fail(QString::fromStdString(e.what()));
  }
  if (a.empty()) return fail("The prompt to steer towards has no tokens.");
  const int layer = layer_->value(), T = static_cast<int>(text.ids.size());
  const float alpha = static_cast<float>(strength());
  const bool last = where_->currentIndex() == 1;
  job_.start<SteeringOutcome>(
      [model, text, a, b, layer, alpha, last, T](const std::atomic<bool>*, const BackgroundJob::Post&) {
        auto backend = make_backend("cpu");
        const std::string name = "blocks." + std::to_string(layer) + ".hook_resid_pre";
        HookSpec keep;
        keep.cache = {name};
        auto resid = [&](const std::vector<int>& ids) {
          ForwardRequest r;
          r.ids = ids;
          r.hooks = &keep;
          return run_forward(*model, *backend, r).cache.at(name);
        };
        std::vector<double> v = row_mean(resid(a));
        if (!b.empty()) {
          const std::vector<double> mb = row_mean(resid(b));
          for (size_t e = 0; e < v.size(); ++e) v[e] -= mb[e];
        }
        ForwardRequest base = text;
        base.hooks = &keep;
        const ForwardResult before = run_forward(*model, *backend, base);
        HookSpec steer;
        HookEdit add;
        add.kind = HookEdit::Kind::Add;
        add.name = name;
        add.alpha = alpha;
        add.value = Tensor({1, static_cast<int64_t>(v.size())});
        for (size_t e = 0; e < v.size(); ++e) add.value.data[e] = static_cast<float>(v[e]);
        if (last) add.positions = {T - 1};
        steer.edits.push_back(std::move(add));
        ForwardRequest steered = text;
        steered.hooks = &steer;
        const ForwardResult after = run_forward(*model, *backend, steered);
        SteeringOutcome out;
        const std::vector<double> p0 = prediction(*model, before), p1 = prediction(*model, after);
        for (const double x : v) out.vector_norm += x * x;
        out.vector_norm = std::sqrt(out.vector_norm);
        const Tensor& x = before.cache.at(name);
        for (int64_t t = 0; t < x.dim(0); ++t) {
          double n = 0;
          for (int64_t e = 0; e < x.dim(1); ++e) n += static_cast<double>(x.at(t, e)) * x.at(t, e);
          out.residual_norm += std::sqrt(n) / static_cast<double>(x.dim(0));
        }
        // classes: all of them; tokens: the 12 most likely after steering and the 4 most likely before
        std::vector<int> order(p1.size());
        std::iota(order.begin(), order.end(), 0);
        std::vector<int> shown;
        if (model->config.num_classes > 0) {
          shown = order;
        } else {
          auto top = [&](const std::vector<double>& p, int k) {
            std::vector<int> o = order;
            std::partial_sort(o.begin(), o.begin() + std::min<size_t>(k, o.size()), o.end(),
                              [&](int i, int j) { return p[i] > p[j]; });
            for (int i = 0; i < k && i < static_cast<int>(o.size()); ++i)
              if (std::find(shown.begin(), shown.end(), o[i]) == shown.end()) shown.push_back(o[i]);
          };
          top(p1, 12);
          top(p0, 4);
          std::sort(shown.begin(), shown.end(), [&](int i, int j) { return p1[i] > p1[j]; });
        }
        for (int k : shown) {
          out.labels.push_back(model->config.num_classes > 0 ? model->label(k) : model->readable_token(k));
          out.before.push_back(p0[static_cast<size_t>(k)]);
          out.after.push_back(p1[static_cast<size_t>(k)]);
        }
        return out;
      },
      [this, model, alpha, layer, unknown, where = where_->currentText()](std::shared_ptr<const SteeringOutcome> o,
                                                                          const QString& error) {
        if (state_->model() != model) return;
        if (!o) return fail(error);
        outcome_ = o;
        table_->setRowCount(static_cast<int>(o->labels.size()));
        for (int r = 0; r < static_cast<int>(o->labels.size()); ++r) {
          double d = o->after[r] - o->before[r];
          if (std::fabs(d) < 5e-5) d = 0;  // no "-0.0000"
          const QString cells[] = {QString::fromStdString(o->labels[r]), QString::number(o->before[r], 'f', 4),
                                   QString::number(o->after[r], 'f', 4),
                                   QString("%1%2").arg(d >= 0 ? "+" : "").arg(d, 0, 'f', 4)};
          for (int c = 0; c < 4; ++c) {
            auto* it = new QTableWidgetItem(cells[c]);
            if (c == 3 && std::fabs(d) > 1e-4) it->setForeground(d > 0 ? QColor("#1a7f37") : QColor("#b42318"));
            table_->setItem(r, c, it);
          }
        }
        status_->setStyleSheet(unknown.isEmpty() ? "" : "color: #a00;");
        status_->setText((unknown.isEmpty()
                              ? QString()
                              : QString("Not in the model's vocabulary, read as [UNK]: %1. ").arg(unknown.join(", "))) +
                         QString("Added %1 x v at layer %2 (%3): ||v|| = %4, the explored text's residual stream "
                                 "averages %5 per position there.")
                             .arg(alpha, 0, 'f', 2)
                             .arg(layer)
                             .arg(where)
                             .arg(o->vector_norm, 0, 'g', 3)
                             .arg(o->residual_norm, 0, 'g', 3));
      });
}

}  // namespace attnlab
