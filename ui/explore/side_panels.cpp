// PredictionPanel, MaskPanel and DisplayPanel (see side_panels.h).
#include "ui/explore/side_panels.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QVBoxLayout>
#include <cmath>

#include <qcustomplot.h>

#include "engine/compute/lm.h"
#include "ui/colormaps.h"
#include "ui/heatmap_view.h"
#include "ui/mask_editor.h"
#include "ui/token_model.h"

namespace attnlab {

// --- Prediction

PredictionPanel::PredictionPanel(ExploreState* state, QWidget* parent)
    : ExplorePage(state, OnResult, /*eager=*/true, parent) {
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(0, 0, 0, 0);
  prediction_ = new QLabel(this);
  prediction_->setObjectName("prediction");
  prediction_->setWordWrap(true);
  prediction_->setTextFormat(Qt::RichText);
  v->addWidget(prediction_);
  next_pos_ = new QSpinBox(this);
  next_pos_->setObjectName("nextTokenPosition");
  next_pos_->setRange(-1, 0);
  next_pos_->setSpecialValueText("after the last token");
  next_pos_->setValue(-1);
  next_pos_->setPrefix("after position ");
  next_pos_->setToolTip("Language models: the position whose likeliest next tokens are listed above");
  next_pos_->setVisible(false);
  v->addWidget(next_pos_);
  connect(next_pos_, &QSpinBox::valueChanged, this, [this] { refresh(); });
}

QString PredictionPanel::text() const {
  return prediction_->text();
}

void PredictionPanel::setNextTokenPosition(int position) {
  next_pos_->setValue(position);
  refresh();
}

void PredictionPanel::refresh() {
  const std::shared_ptr<const Model>& model = state_->model();
  const std::shared_ptr<const ForwardResult>& result = state_->result();
  next_pos_->setVisible(result && model && model->config.lm_head);
  if (!result || !model) return prediction_->clear();
  const ForwardResult& r = *result;
  if (r.predicted >= 0) {
    QString html =
        QString("<b>Prediction: %1</b><br>").arg(QString::fromStdString(model->label(r.predicted)).toHtmlEscaped());
    for (size_t k = 0; k < r.class_probs.size(); ++k)
      html += QString("%1: %2<br>")
                  .arg(QString::fromStdString(model->label(static_cast<int>(k))).toHtmlEscaped())
                  .arg(r.class_probs[k], 0, 'f', 3);
    return prediction_->setText(html);
  }
  if (!model->config.lm_head) return prediction_->setText("Encoder-only model: no prediction.");
  // Next tokens after a position of the input (the hidden rows are the input's, whatever the
  // token view shows).
  const int T = static_cast<int>(r.hidden.dim(0));
  {
    QSignalBlocker block(next_pos_);
    next_pos_->setRange(-1, T - 1);
  }
  const int pos = next_pos_->value() < 0 ? T - 1 : next_pos_->value();
  const auto& prepared = state_->controller()->prepared();
  QString after = pos < static_cast<int>(prepared.tokens.size())
                      ? QString::fromStdString(prepared.tokens[static_cast<size_t>(pos)])
                      : "";
  if (r.is_seq2seq()) {  // the decoder predicts: its input at pos is the start token, then the target's
    const auto& target = r.target_tokens;  // the labels of the pass shown
    after = pos == 0 ? QString::fromStdString(model->readable_token(model->config.decoder_start_id))
            : pos - 1 < static_cast<int>(target.size()) ? QString::fromStdString(target[static_cast<size_t>(pos - 1)])
                                                        : "";
  }
  const auto top = pos == T - 1 && !r.next_tokens.empty() ? r.next_tokens : top_next_tokens(*model, r.hidden, pos, 10);
  QString html = QString("<b>Next token after \"%1\"</b> (position %2)<br><table cellspacing='0' cellpadding='1'>")
                     .arg(after.toHtmlEscaped())
                     .arg(pos);
  // one format for the list: three decimals ("<0.001" below), or, when even the likeliest is
  // below 0.001 (a random or untrained model), every probability in scientific notation
  const bool scientific = !top.empty() && top.front().second < 0.001f;
  for (const auto& [id, p] : top) {
    const int bar = static_cast<int>(std::lround(p * 80));
    html += QString(
                "<tr><td>%1</td><td align='right'>&nbsp;%2</td><td>&nbsp;<span "
                "style='background:#4c78a8'>%3</span></td></tr>")
                .arg(QString::fromStdString(model->readable_token(id)).toHtmlEscaped())
                .arg(scientific    ? QString::number(p, 'e', 1)
                     : p >= 0.001f ? QString::number(p, 'f', 3)
                                   : "&lt;0.001")
                .arg(QString("&nbsp;").repeated(std::max(1, bar / 4)));
  }
  prediction_->setText(html + "</table>");
}

// --- Masks

MaskPanel::MaskPanel(ExploreState* state, TokenListModel* tokens, MaskEditor* editor, QWidget* parent)
    : ExplorePage(state, OnResult | OnDisplay, /*eager=*/true, parent), tokens_(tokens), editor_(editor) {
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);
  auto* masks = new QGroupBox("Masks", this);
  outer->addWidget(masks);
  auto* mf = new QFormLayout(masks);
  // Two separate things, as in article 003 section 2.1: appending [PAD] tokens (to see what
  // attends to them) and the padding mask (which blocks them as keys).
  pad_to_ = new QSpinBox(masks);
  pad_to_->setRange(0, 4096);
  pad_to_->setSpecialValueText("none");
  pad_to_->setToolTip("Append [PAD] tokens up to this length (article 003, section 2.1)");
  mf->addRow("pad to length", pad_to_);
  padding_ = new QCheckBox("padding mask ([PAD] keys blocked)", masks);
  padding_->setToolTip("key_padding_mask: attention to [PAD] tokens is blocked");
  mf->addRow(padding_);
  causal_ = new QCheckBox("causal", masks);
  causal_->setToolTip("Each query sees only itself and earlier keys (article 003, section 2.2)");
  mf->addRow(causal_);
  window_on_ = new QCheckBox("sliding window", masks);
  window_ = new QSpinBox(masks);
  window_->setRange(1, 4096);
  window_->setValue(4);
  window_on_->setToolTip("Sparse attention: each query sees keys at most this many positions away (article 000, 7.2)");
  window_->setToolTip("The window's half-width in tokens");
  mf->addRow(window_on_, window_);
  strided_on_ = new QCheckBox("strided", masks);
  stride_ = new QSpinBox(masks);
  stride_->setRange(1, 4096);
  stride_->setValue(3);
  strided_on_->setToolTip("Sparse attention: a local window plus every k-th key (Child et al. 2019)");
  stride_->setToolTip("The stride k");
  mf->addRow(strided_on_, stride_);
  mf->addRow(new QLabel("global tokens: tick them in the token strip", masks));
  custom_on_ = new QCheckBox("custom (mask editor)", masks);
  custom_on_->setToolTip("Also apply the mask painted in the Mask editor tab (article 003, sections 2.3-2.4)");
  mf->addRow(custom_on_);
  preview_ = new HeatmapView(masks);
  preview_->setCompact(true);
  preview_->setColourTop(1.0f);
  preview_->setMinimumSize(150, 150);
  preview_->setToolTip("The effective mask: blocked cells in the blocked colour, visible ones in the map's middle");
  mf->addRow(preview_);
  auto* legend = new QWidget(masks);
  legend->setObjectName("maskLegend");
  auto* ll = new QHBoxLayout(legend);
  ll->setContentsMargins(0, 0, 0, 0);
  for (QLabel** sw : {&visible_swatch_, &blocked_swatch_}) {
    *sw = new QLabel(legend);
    (*sw)->setFixedSize(14, 14);
    ll->addWidget(*sw);
    ll->addWidget(new QLabel(sw == &visible_swatch_ ? "visible" : "blocked", legend));
  }
  ll->addStretch();
  mf->addRow(legend);

  for (QCheckBox* c : {padding_, causal_, window_on_, strided_on_, custom_on_})
    connect(c, &QCheckBox::toggled, this, &MaskPanel::changed);
  for (QSpinBox* s : {pad_to_, window_, stride_}) connect(s, &QSpinBox::valueChanged, this, &MaskPanel::changed);
  connect(tokens_, &TokenListModel::globalsChanged, this, &MaskPanel::changed);
  connect(editor_, &MaskEditor::maskChanged, this, [this] {
    if (!custom_on_->isChecked() && !editor_->isEmpty()) custom_on_->setChecked(true);  // an edit means "use it"
    emit changed();
  });
}

void MaskPanel::modelChanged() {
  if (!state_->model()) return;
  const ModelConfig& c = state_->model()->config;
  const bool lm = c.causal;
  // A decoder's causal mask is part of the model: shown ticked, not a choice.
  {
    QSignalBlocker block(causal_);
    causal_->setChecked(lm || causal_->isChecked());
  }
  causal_->setEnabled(!lm);
  causal_->setToolTip(lm ? QString("Part of this model: a causal language model only attends to earlier tokens%1")
                               .arg(c.sliding_window
                                        ? QString(", at most %1 back (its sliding window)").arg(c.sliding_window)
                                        : QString())
                         : QString("Each query sees only itself and earlier keys (article 003, section 2.2)"));
}

void MaskPanel::refresh() {
  // The preview's legend in this map's colours (visible cells are drawn at its middle).
  const QString name = state_->colormap();
  const QColor visible = make_gradient(name).color(0.5, QCPRange(0, 1)), blocked = blocked_color(name);
  visible_swatch_->setStyleSheet(QString("background: %1; border: 1px solid #777;").arg(visible.name()));
  blocked_swatch_->setStyleSheet(QString("background: %1; border: 1px solid #777;").arg(blocked.name()));
  preview_->setGradient(name);
  preview_->setData(state_->result() ? state_->outcome().mask : HeatmapData{});
}

MaskSpec MaskPanel::mask() const {
  MaskSpec s;
  s.padding = padding_->isChecked();
  s.causal = causal_->isChecked();
  s.window = window_on_->isChecked() ? window_->value() : 0;
  s.stride = strided_on_->isChecked() ? stride_->value() : 0;
  s.global = tokens_->globalPositions();
  if (custom_on_->isChecked() && !editor_->isEmpty()) {
    s.custom = editor_->toNpy();
    s.custom_source = "mask editor";
  }
  return s;
}

bool MaskPanel::experimental() const {
  const std::shared_ptr<const Model>& m = state_->model();
  const bool own_causal = m && m->config.causal;  // a decoder's causal mask is its own
  return m && m->is_hf() &&
         ((causal_->isChecked() && !own_causal) || window_on_->isChecked() || strided_on_->isChecked() ||
          custom_on_->isChecked() || !tokens_->globalPositions().empty());
}

void MaskPanel::setMaskArgs(const QStringList& args) {
  MaskSpec spec;
  for (const QString& a : args) add_mask_arg(spec, a.toStdString());  // Error on a bad one
  padding_->setChecked(spec.padding);
  causal_->setChecked(spec.causal);
  window_on_->setChecked(spec.window > 0);
  if (spec.window > 0) window_->setValue(spec.window);
  strided_on_->setChecked(spec.stride > 0);
  if (spec.stride > 0) stride_->setValue(spec.stride);
  tokens_->setGlobalPositions(spec.global);
  emit changed();
}

QStringList MaskPanel::maskArgs() const {
  QStringList a;
  if (padding_->isChecked()) a << "padding";
  if (causal_->isChecked()) a << "causal";
  if (window_on_->isChecked()) a << QString("window:%1").arg(window_->value());
  if (strided_on_->isChecked()) a << QString("strided:%1").arg(stride_->value());
  const auto g = tokens_->globalPositions();
  if (!g.empty()) {
    QStringList p;
    for (int v : g) p << QString::number(v);
    a << "global:" + p.join(',');
  }
  return a;
}

void MaskPanel::setCustomOn(bool on) {
  custom_on_->setChecked(on);
}
bool MaskPanel::customOn() const {
  return custom_on_->isChecked();
}

void MaskPanel::setPadTo(int length) {
  pad_to_->setValue(length);
}
int MaskPanel::padTo() const {
  return pad_to_->value();
}

// --- Display

DisplayPanel::DisplayPanel(ExploreState* state, QWidget* parent) : QWidget(parent) {
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);
  auto* opts = new QGroupBox("Display", this);
  outer->addWidget(opts);
  auto* of = new QFormLayout(opts);
  auto* cmap = new QComboBox(opts);
  cmap->setObjectName("colourMap");
  cmap->addItems(colormap_names());
  cmap->setCurrentText(state->colormap());
  cmap->setToolTip("Colour map of every heatmap (perceptually uniform; blocked cells get their own colour)");
  of->addRow("colour map", cmap);
  auto* scale = new QComboBox(opts);
  scale->setObjectName("colourScale");
  scale->addItems({"per head", "per layer", "shared 0-1"});  // in ExploreState::Scale's order
  scale->setToolTip(
      "Where the colour bar ends: each head's own maximum, the layer's maximum (heads comparable), "
      "or 1 (comparable across layers and inputs). Exports use the same setting.");
  of->addRow("colour scale", scale);
  auto* annotate = new QCheckBox("values in cells (short inputs)", opts);
  annotate->setObjectName("annotate");
  annotate->setToolTip("Print each probability in its cell when the cells are large enough");
  of->addRow(annotate);
  connect(cmap, &QComboBox::currentTextChanged, state, &ExploreState::setColormap);
  connect(scale, &QComboBox::currentIndexChanged, state,
          [state](int i) { state->setScale(static_cast<ExploreState::Scale>(i)); });
  connect(annotate, &QCheckBox::toggled, state, &ExploreState::setAnnotate);
  connect(state, &ExploreState::displayChanged, this, [cmap, state] {
    QSignalBlocker block(cmap);
    cmap->setCurrentText(state->colormap());  // setColormap from the command line
  });
}

}  // namespace attnlab
