// FeaturesPage (see features_page.h).
#include "ui/explore/features_page.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/analysis/sae.h"
#include "engine/compute/lm.h"
#include "ui/explore_controller.h"

namespace attnlab {

namespace {

std::vector<double> probabilities(const Model& m, const ForwardResult& r) {
  std::vector<float> logits = r.logits;
  if (logits.empty()) logits = next_token_logits(m, r.hidden, static_cast<int>(r.hidden.dim(0)) - 1);
  const float top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t k = 0; k < p.size(); ++k) sum += p[k] = std::exp(static_cast<double>(logits[k]) - top);
  for (double& v : p) v /= sum;
  return p;
}

}  // namespace

FeaturesPage::FeaturesPage(ExploreState* state, QWidget* parent)
    : ExplorePage(state, OnResult, /*eager=*/false, parent) {
  auto* v = new QVBoxLayout(this);
  auto* top = new QHBoxLayout;
  open_ = new QPushButton("Open SAE folder...", this);
  open_->setToolTip("A sparse autoencoder saved by SAELens (cfg.json, sae_weights.safetensors) for this model");
  info_ = new QLabel("No sparse autoencoder open.", this);
  info_->setObjectName("featuresInfo");
  info_->setWordWrap(true);
  top->addWidget(open_);
  top->addWidget(info_, 1);
  v->addLayout(top);
  table_ = new QTableWidget(this);
  table_->setObjectName("featuresTable");
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setColumnCount(4);
  table_->setHorizontalHeaderLabels({"token", "active", "error", "strongest features (index: activation)"});
  table_->horizontalHeader()->setStretchLastSection(true);
  v->addWidget(table_, 1);
  auto* clamp = new QHBoxLayout;
  feature_ = new QSpinBox(this);
  feature_->setObjectName("featuresFeature");
  feature_->setPrefix("feature ");
  feature_->setToolTip("The feature to clamp (its index in the autoencoder)");
  value_ = new QDoubleSpinBox(this);
  value_->setRange(-1e4, 1e4);
  value_->setDecimals(3);
  value_->setPrefix("= ");
  value_->setToolTip("The activation the feature is set to (0 switches it off)");
  at_ = new QComboBox(this);
  at_->setToolTip("Where: every position, or one token (clicking a token's row picks it)");
  clamp_ = new QPushButton("Clamp", this);
  clamp_->setObjectName("featuresClamp");
  clamp_->setToolTip(
      "Run the pass again with the feature set to this value and the reconstruction error added back "
      "(SAELens's use_error_term): everything else the autoencoder misses is kept");
  unclamp_ = new QPushButton("Clear", this);
  unclamp_->setToolTip("Back to the pass without a clamp");
  clamp->addWidget(feature_);
  clamp->addWidget(value_);
  clamp->addWidget(new QLabel("at", this));
  clamp->addWidget(at_, 1);
  clamp->addWidget(clamp_);
  clamp->addWidget(unclamp_);
  v->addLayout(clamp);
  prediction_ = new QLabel(this);
  prediction_->setObjectName("featuresPrediction");
  prediction_->setWordWrap(true);
  v->addWidget(prediction_);
  status_ = new QLabel(this);
  status_->setWordWrap(true);
  v->addWidget(status_);
  connect(open_, &QPushButton::clicked, this, [this] {
    const QString d = QFileDialog::getExistingDirectory(this, "Sparse autoencoder folder (SAELens format)");
    if (!d.isEmpty()) openSae(d);
  });
  connect(clamp_, &QPushButton::clicked, this, [this] {
    clamped_ = true;
    compute();
  });
  connect(unclamp_, &QPushButton::clicked, this, &FeaturesPage::clearClamp);
  connect(value_, &QDoubleSpinBox::valueChanged, this, [this](double v) { clamp_value_ = v; });
  connect(table_, &QTableWidget::cellClicked, this, [this](int row, int) {  // a token: clamp there
    at_->setCurrentIndex(row + 1);
  });
  enableClamp(false);
}

void FeaturesPage::enableClamp(bool on) {
  for (QWidget* w : std::initializer_list<QWidget*>{feature_, value_, at_, clamp_, unclamp_}) {
    w->setEnabled(on);
    if (!on)
      w->setToolTip(w->toolTip().section("\n\n", 0, 0) + "\n\nOpen a sparse autoencoder folder first.");
    else
      w->setToolTip(w->toolTip().section("\n\n", 0, 0));
  }
}

void FeaturesPage::modelChanged() {
  job_.cancel();
  outcome_.reset();
  table_->setRowCount(0);
  prediction_->clear();
  if (sae_) status_->setText("The model changed: check that the sparse autoencoder was trained on it.");
}

bool FeaturesPage::openSae(const QString& folder) {
  try {
    sae_ = std::make_shared<const Sae>(load_sae(folder.toStdString()));
  } catch (const Error& e) {
    sae_.reset();
    info_->setText("No sparse autoencoder open.");
    enableClamp(false);
    fail(QString::fromStdString(e.what()));
    return false;
  }
  enableClamp(true);
  feature_->setRange(0, sae_->d_sae - 1);
  clamped_ = false;
  info_->setText(QString("%1: %2, %3 features of %4 (d_in %5)")
                     .arg(folder, QString::fromStdString(sae_->architecture))
                     .arg(sae_->d_sae)
                     .arg(QString::fromStdString(sae_->hook_name))
                     .arg(sae_->d_in));
  compute();
  return true;
}

bool FeaturesPage::setClamp(int feature, double value, int position) {
  if (!sae_) return fail("Open a sparse autoencoder first."), false;
  if (feature < 0 || feature >= sae_->d_sae)
    return fail(QString("No feature %1 (the sparse autoencoder has %2).").arg(feature).arg(sae_->d_sae)), false;
  const int T = static_cast<int>(state_->controller()->prepared().ids.size());
  if (position < -1 || position >= T)
    return fail(QString("No position %1 (the input has %2 tokens, 0-%3).").arg(position).arg(T).arg(T - 1)), false;
  feature_->setValue(feature);
  value_->setValue(value);
  clamp_value_ = value;
  at_->setCurrentIndex(position + 1);
  clamped_ = true;
  compute();
  return true;
}

void FeaturesPage::clearClamp() {
  clamped_ = false;
  compute();
}

QString FeaturesPage::status() const {
  return status_->text();
}
QString FeaturesPage::predictionText() const {
  return prediction_->text();
}

void FeaturesPage::fail(const QString& message) {
  status_->setStyleSheet("color: #a00;");
  status_->setText(message);
}

void FeaturesPage::compute() {
  const std::shared_ptr<const Model> model = state_->model();
  if (!model || !sae_) return;
  ForwardRequest req = state_->analysisRequest();
  if (req.ids.empty()) return;
  const int T = static_cast<int>(req.ids.size());
  // the positions a clamp can take: every one, or one token (kept when the text keeps its length)
  QStringList items{"every position"};
  const std::vector<std::string>& tokens = state_->controller()->prepared().tokens;
  for (int t = 0; t < T; ++t)
    items << QString("%1 %2").arg(t).arg(
        t < static_cast<int>(tokens.size()) ? QString::fromStdString(tokens[static_cast<size_t>(t)]) : QString());
  QStringList now;
  for (int i = 0; i < at_->count(); ++i) now << at_->itemText(i);
  if (now != items) {
    const int keep = at_->currentIndex();
    at_->clear();
    at_->addItems(items);
    at_->setCurrentIndex(keep >= 0 && keep <= T ? keep : 0);
  }
  std::vector<FeatureClamp> clamps;
  if (clamped_) {
    FeatureClamp c;
    c.feature = feature_->value();
    c.value = static_cast<float>(clamp_value_);
    if (at_->currentIndex() > 0) c.positions = {at_->currentIndex() - 1};
    clamps.push_back(c);
  }
  const std::shared_ptr<const Sae> sae = sae_;
  job_.start<FeaturesOutcome>(
      [model, sae, req, clamps](const std::atomic<bool>*, const BackgroundJob::Post&) {
        auto backend = make_backend("cpu");
        HookSpec keep;
        keep.cache = {sae->hook_name};
        ForwardRequest r = req;
        r.hooks = &keep;
        const ForwardResult base = run_forward(*model, *backend, r);
        const auto found = base.cache.find(sae->hook_name);
        if (found == base.cache.end())
          throw Error("the sparse autoencoder reads " + sae->hook_name +
                      ", which this model's pass does not have (attnlab-cli forward --list-hooks names them)");
        const Tensor& x = found->second;
        const SaeOutput s = sae_forward(*sae, x);
        FeaturesOutcome out;
        out.tokens = base.tokens;
        const int T = static_cast<int>(s.features.dim(0)), S = sae->d_sae, E = sae->d_in;
        std::vector<int> order(static_cast<size_t>(S));
        for (int t = 0; t < T; ++t) {
          const float* f = s.features.ptr() + static_cast<int64_t>(t) * S;
          std::iota(order.begin(), order.end(), 0);
          const int k = std::min(6, S);
          std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int i, int j) { return f[i] > f[j]; });
          std::vector<std::pair<int, float>> top;
          for (int i = 0; i < k && f[order[static_cast<size_t>(i)]] > 0; ++i)
            top.push_back({order[static_cast<size_t>(i)], f[order[static_cast<size_t>(i)]]});
          out.strongest.push_back(std::move(top));
          out.active.push_back(static_cast<int>(std::count_if(f, f + S, [](float v) { return v > 0; })));
          double num = 0, den = 0;
          for (int e = 0; e < E; ++e) {
            const double xv = x.data[static_cast<size_t>(t) * E + e], d = xv - s.reconstruction.at(t, e);
            num += d * d, den += xv * xv;
          }
          out.error.push_back(den > 0 ? std::sqrt(num / den) : 0.0);
        }
        const std::vector<double> p0 = probabilities(*model, base);
        std::vector<double> p1;
        if (!clamps.empty()) {
          HookSpec edit;
          edit.edits.push_back(sae_clamp_edit(*sae, clamps));
          ForwardRequest rc = req;
          rc.hooks = &edit;
          p1 = probabilities(*model, run_forward(*model, *backend, rc));
        }
        std::vector<int> idx(p0.size());
        std::iota(idx.begin(), idx.end(), 0);
        const std::vector<double>& rank = p1.empty() ? p0 : p1;
        const size_t shown = model->config.num_classes > 0 ? idx.size() : std::min<size_t>(5, idx.size());
        std::partial_sort(idx.begin(), idx.begin() + shown, idx.end(), [&](int i, int j) { return rank[i] > rank[j]; });
        for (size_t i = 0; i < shown; ++i) {
          const int k = idx[i];
          out.labels.push_back(model->config.num_classes > 0 ? model->label(k) : model->readable_token(k));
          out.before.push_back(p0[static_cast<size_t>(k)]);
          if (!p1.empty()) out.after.push_back(p1[static_cast<size_t>(k)]);
        }
        return out;
      },
      [this, model](std::shared_ptr<const FeaturesOutcome> o, const QString& error) {
        if (state_->model() != model) return;
        if (!o) return fail(error);
        outcome_ = o;
        const int T = static_cast<int>(o->tokens.size());
        table_->setRowCount(T);
        QStringList rows;  // positions from 0, as the clamp's box and --clamp count them
        for (int t = 0; t < T; ++t) rows << QString::number(t);
        table_->setVerticalHeaderLabels(rows);
        for (int t = 0; t < T; ++t) {
          QStringList feats;
          for (const auto& [i, a] : o->strongest[static_cast<size_t>(t)])
            feats << QString("%1: %2").arg(i).arg(a, 0, 'g', 3);
          const QString cells[] = {QString::fromStdString(o->tokens[static_cast<size_t>(t)]),
                                   QString::number(o->active[static_cast<size_t>(t)]),
                                   QString::number(o->error[static_cast<size_t>(t)], 'f', 3),
                                   feats.isEmpty() ? QString("(none active)") : feats.join("   ")};
          for (int c = 0; c < 4; ++c) table_->setItem(t, c, new QTableWidgetItem(cells[c]));
        }
        QStringList pred;
        for (size_t k = 0; k < o->labels.size(); ++k)
          pred << (o->after.empty()
                       ? QString("%1 %2").arg(QString::fromStdString(o->labels[k])).arg(o->before[k], 0, 'f', 4)
                       : QString("%1 %2 \u2192 %3")
                             .arg(QString::fromStdString(o->labels[k]))
                             .arg(o->before[k], 0, 'f', 4)
                             .arg(o->after[k], 0, 'f', 4));
        prediction_->setText((o->after.empty() ? "Prediction: " : "Prediction, before \u2192 with the clamp: ") +
                             pred.join(",  "));
        const bool poor = std::any_of(o->error.begin(), o->error.end(), [](double e) { return e >= 1.0; });
        status_->setStyleSheet(poor ? "color: #a00;" : "");
        status_->setText(QString("active: features above 0; error: ||x - reconstruction|| / ||x|| at the hook. Click a "
                                 "token to clamp a feature there.%1")
                             .arg(poor ? " An error of 1 or more reconstructs worse than zero would: was this "
                                         "autoencoder trained on this model and hook?"
                                       : ""));
      });
}

}  // namespace attnlab
