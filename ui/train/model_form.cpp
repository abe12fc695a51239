// ModelForm (see model_form.h).
#include "ui/train/model_form.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLabel>
#include <QSignalBlocker>
#include <QSpinBox>

#include "engine/compute/ops.h"

namespace attnlab {

namespace {

QSpinBox* spin(int lo, int hi, int value, QWidget* parent) {
  auto* s = new QSpinBox(parent);
  s->setRange(lo, hi);
  s->setValue(value);
  return s;
}

QDoubleSpinBox* dspin(double lo, double hi, double value, int decimals, double step, QWidget* parent) {
  auto* s = new QDoubleSpinBox(parent);
  s->setDecimals(decimals);
  s->setRange(lo, hi);
  s->setSingleStep(step);
  s->setValue(value);
  return s;
}

QComboBox* combo(const QStringList& items, const QString& value, QWidget* parent) {
  auto* c = new QComboBox(parent);
  c->addItems(items);
  c->setCurrentText(value);
  return c;
}

}  // namespace

ModelForm::ModelForm(QWidget* parent) : QGroupBox("Model and optimiser", parent) {
  auto* mf = layout_ = new QFormLayout(this);
  start_from_ = new QComboBox(this);
  start_from_->setObjectName("startFrom");
  start_from_->addItem("a new model (the form below)");
  start_from_->setToolTip(
      "Train a new model from the form, or fine-tune the model open in Explore: its encoder "
      "and tokenizer, a new classifier on the pooled output");
  mf->addRow("start from", start_from_);
  freeze_ = new QCheckBox("freeze the encoder (train the classifier only)", this);
  freeze_->setObjectName("freezeEncoder");
  freeze_->setEnabled(false);
  freeze_->setToolTip("Fine-tuning: keep the pretrained encoder's weights and train only the pooler and classifier");
  mf->addRow(freeze_);
  preset_ = combo({"default", "tiny (fast)", "article model (d=128, 8 heads)"}, "default", this);
  mf->addRow("preset", preset_);
  layers_ = spin(1, 12, 2, this);
  heads_ = spin(1, 16, 8, this);
  dim_ = spin(8, 512, 64, this);
  dim_->setSingleStep(8);
  ff_ = spin(0, 2048, 128, this);
  max_len_ = spin(4, 2048, 32, this);
  positional_ = combo({"none", "sinusoidal", "learned", "relative"}, "learned", this);
  norm_ = combo({"post", "pre"}, "post", this);
  activation_ = combo({"relu", "gelu"}, "relu", this);
  tokenizer_ = combo({"word", "char"}, "word", this);
  tokenizer_->setObjectName("trainTokenizer");
  // a text's model: what the text is cut into changes with them (the epochs are re-estimated)
  connect(tokenizer_, &QComboBox::currentTextChanged, this, [this] {
    if (text_) emit textOptionsChanged();
  });
  connect(max_len_, qOverload<int>(&QSpinBox::valueChanged), this, [this] {
    if (text_) emit textOptionsChanged();
  });
  pooling_ = combo({"masked_mean", "mean", "cls"}, "masked_mean", this);
  dropout_ = dspin(0, 0.9, 0.1, 2, 0.05, this);
  lr_ = dspin(1e-5, 1, 1e-3, 5, 1e-4, this);
  batch_ = spin(1, 8192, 32, this);    // grokking's full batch: 1,044 pairs
  epochs_ = spin(1, 100000, 8, this);  // grokking's epochs are single steps
  weight_decay_ = dspin(0, 1, 0, 4, 0.01, this);
  weight_decay_->setObjectName("weightDecay");
  clip_ = dspin(0, 100, 1, 2, 0.5, this);
  seed_ = spin(0, 1 << 30, 1, this);
  precision_ = combo({"fp32", "bf16"}, "fp32", this);
  precision_->setObjectName("trainPrecision");
  // Each row: its label, its widget and what it means, where a student looks for it (article
  // 000's TextClassifier).
  const struct {
    const char* label;
    QWidget* widget;
    const char* tip;
  } rows[] = {
      {"layers", layers_, "Transformer layers (encoder blocks)"},
      {"heads", heads_, "Attention heads per layer; the dimension must be divisible by it"},
      {"embedding size", dim_, "Model dimension d (embedding and hidden size)"},
      {"feed-forward size (0: none)", ff_, "Feed-forward hidden size (0: attention only)"},
      {"max length", max_len_, "Longest input in tokens; longer rows are truncated"},
      {"positions", positional_,
       "Position information: none, sinusoidal (Vaswani et al.), learned table, or relative (Shaw et al.)"},
      {"norm", norm_, "LayerNorm after each residual (post, the articles') or before each sub-layer (pre)"},
      {"activation", activation_, "Feed-forward activation"},
      {"tokenizer", tokenizer_,
       "Split text into words or characters (a new vocabulary is built from the data); a text's language model can "
       "also learn a byte-level BPE from it (bpe: 1,024 pieces as Hugging Face's tokenizers learns GPT-2's)"},
      {"pooling", pooling_,
       "How token states become one vector for the classifier: mean over real tokens, mean over all, or [CLS]"},
      {"dropout", dropout_, "Dropout on attention probabilities and residual branches while training"},
      {"learning rate", lr_, "AdamW learning rate"},
      {"batch size", batch_, "Rows per optimisation step"},
      {"epochs", epochs_, "Passes over the training rows"},
      {"weight decay (AdamW)", weight_decay_, "AdamW weight decay (decoupled)"},
      {"gradient clipping (0: off)", clip_, "Gradient-norm clipping (0: off)"},
      {"seed", seed_, "Random seed: the same seed, data and thread count give the same run"},
      {"precision", precision_,
       "Matrix products in fp32, or in bf16 with fp32 accumulation and fp32 master weights (mixed "
       "precision on the CPU; needs oneDNN, fast with AVX512-BF16 or AMX)"},
  };
  preset_->setToolTip("Fill the form: the default model, a tiny fast one, or the article's (d=128, 8 heads)");
  for (const auto& r : rows) {
    r.widget->setToolTip(r.tip);
    mf->addRow(r.label, r.widget);
  }
  arch_ = new QLabel(this);
  arch_->setWordWrap(true);
  arch_->setObjectName("lmArchitecture");
  mf->insertRow(mf->indexOf(layers_) >= 0 ? 2 : 0, "architecture", arch_);
  mf->setRowVisible(arch_, false);
  if (!bf16_available()) {
    precision_->setEnabled(false);
    precision_->setToolTip(QString::fromStdString(bf16_notice()));
  } else if (const std::string slow = bf16_notice(); !slow.empty()) {
    // bf16 is there but this CPU measured it slower than fp32 (or emulates it): said on the choice
    precision_->setItemData(1, QString::fromStdString(slow), Qt::ToolTipRole);
    precision_->setItemText(1, "bf16 (slower here)");
  }
  connect(preset_, &QComboBox::currentTextChanged, this, &ModelForm::applyPreset);
  connect(start_from_, &QComboBox::currentIndexChanged, this, [this] { updateStartFrom(); });
  connect(freeze_, &QCheckBox::toggled, this, [this](bool on) {
    if (start_from_->currentIndex() == 1) lr_->setValue(on ? 1e-3 : 5e-5);
  });
}

void ModelForm::applyPreset(const QString& name) {
  if (name.startsWith("tiny")) {
    layers_->setValue(1), heads_->setValue(4), dim_->setValue(32), ff_->setValue(64), epochs_->setValue(5);
    lr_->setValue(3e-3), batch_->setValue(32), dropout_->setValue(0.0);
  } else if (name.startsWith("article")) {
    // Article 000's TextClassifier scale: d=128, 8 heads; two post-LN layers with a 512 FFN.
    layers_->setValue(2), heads_->setValue(8), dim_->setValue(128), ff_->setValue(512), epochs_->setValue(6);
    lr_->setValue(1e-3), batch_->setValue(32), dropout_->setValue(0.1);
  } else {
    layers_->setValue(2), heads_->setValue(8), dim_->setValue(64), ff_->setValue(128), epochs_->setValue(8);
    lr_->setValue(1e-3), batch_->setValue(32), dropout_->setValue(0.1);
  }
}

void ModelForm::setBaseModel(std::shared_ptr<const Model> model, const QString& name) {
  base_ = std::move(model);
  const bool was = start_from_->currentIndex() == 1;
  QSignalBlocker block(start_from_);
  while (start_from_->count() > 1) start_from_->removeItem(1);
  if (base_) start_from_->addItem("fine-tune " + name + " (open in Explore)");
  start_from_->setCurrentIndex(was && base_ ? 1 : 0);
  updateStartFrom();
}

void ModelForm::setFineTune(bool on, bool freeze) {
  start_from_->setCurrentIndex(on && start_from_->count() > 1 ? 1 : 0);
  freeze_->setChecked(freeze);
  updateStartFrom();
}

bool ModelForm::fineTune() const {
  return start_from_->currentIndex() == 1 && base_ && !lm();
}

// Fine-tuning takes the architecture from the base model: its fields are not used and say so;
// the learning rate becomes a fine-tuning one (BERT's paper: 2e-5..5e-5; a head alone: 1e-3).
void ModelForm::updateStartFrom() {
  const bool tune = start_from_->currentIndex() == 1 && !lm();
  freeze_->setEnabled(tune);
  start_from_->setEnabled(!lm());
  for (QWidget* w : std::initializer_list<QWidget*>{layers_, heads_, dim_, ff_}) w->setEnabled(!tune);
  for (QWidget* w : std::initializer_list<QWidget*>{preset_, positional_, norm_, activation_, pooling_})
    w->setEnabled(!tune && !lm());
  for (QWidget* w : std::initializer_list<QWidget*>{max_len_, tokenizer_})  // a text model's too
    w->setEnabled(!tune && !lm_);
  if (tune) {
    lr_->setValue(freeze_->isChecked() ? 1e-3 : 5e-5);
    epochs_->setValue(2);
  }
}

// The rows a language-model preset fixes are hidden (its architecture is said in their place);
// the sizes and the optimiser stay, and a text's model keeps its tokenizer and length.
void ModelForm::showLmRows(bool lm) {
  for (QWidget* w : std::initializer_list<QWidget*>{start_from_, freeze_, preset_, max_len_, positional_, norm_,
                                                    activation_, tokenizer_, pooling_})
    layout_->setRowVisible(w, !lm);
  for (QWidget* w : std::initializer_list<QWidget*>{max_len_, tokenizer_}) layout_->setRowVisible(w, !lm || text_);
  layout_->setRowVisible(arch_, lm);
}

namespace {

QString decoder_description(const std::string& arch) {
  const bool llama = arch == "llama";
  return QString("%1-style decoder: %2")
      .arg(llama ? "Llama" : "GPT-2")
      .arg(llama ? "rotary positions, pre-RMSNorm, SwiGLU when the feed-forward is not 0"
                 : "learned positions, pre-LayerNorm, GELU, the head tied to the embedding");
}

}  // namespace

// A byte-level BPE is learned for a text's model only; a classifier's vocabulary is words or characters.
void ModelForm::offerBpe(bool offer) {
  const int at = tokenizer_->findText("bpe");
  if (offer && at < 0) tokenizer_->addItem("bpe");
  if (!offer && at >= 0) {
    if (tokenizer_->currentIndex() == at) tokenizer_->setCurrentText("word");
    tokenizer_->removeItem(at);
  }
}

void ModelForm::useLmPreset(const LmPreset& p) {
  lm_ = &p;
  text_ = false;
  offerBpe(false);
  arch_->setText(QString("%1; causal, next-token loss over the scored tokens; %2 tokens")
                     .arg(decoder_description(p.shape.arch))
                     .arg(p.shape.max_len));
  showLmRows(true);
  {
    QSignalBlocker block(start_from_);
    start_from_->setCurrentIndex(0);  // a new model: the preset's
  }
  layers_->setValue(p.shape.layers), heads_->setValue(p.shape.heads), dim_->setValue(p.shape.dim);
  ff_->setValue(p.shape.ff), max_len_->setValue(p.shape.max_len);
  lr_->setValue(p.lr), epochs_->setValue(p.epochs), batch_->setValue(p.batch),
      seed_->setValue(static_cast<int>(p.seed));
  dropout_->setValue(0.0);
  weight_decay_->setValue(p.weight_decay);  // grokking needs its decay
  updateStartFrom();
}

void ModelForm::useTextLm(const ShippedText* row) {
  lm_ = nullptr;
  text_ = true;
  const LmShape d = row ? row->shape : LmShape{};  // attnlab-cli train --objective lm --data's defaults
  const TextLmOptions o = row ? row->text : TextLmOptions{};
  arch_->setText(QString("%1; causal, next-token loss at every position. The text is cut into sequences of "
                         "\"max length\" tokens, read by the tokenizer below (char keeps case, word lower-cases, bpe "
                         "learns 1,024 byte-level pieces from the text); the last tenth held out")
                     .arg(decoder_description(d.arch)));
  showLmRows(true);
  {
    QSignalBlocker block(start_from_);
    start_from_->setCurrentIndex(0);
  }
  layers_->setValue(d.layers), heads_->setValue(d.heads), dim_->setValue(d.dim), ff_->setValue(d.ff);
  {
    const QSignalBlocker b1(max_len_), b2(tokenizer_);  // the caller estimates the run once
    max_len_->setValue(o.seq);
    offerBpe(true);
    tokenizer_->setCurrentText(to_string(o.tokenizer));
  }
  lr_->setValue(row ? row->lr : 1e-3), epochs_->setValue(row ? row->epochs : 5),
      batch_->setValue(row ? row->batch : 32);
  dropout_->setValue(row ? row->dropout : 0.0), weight_decay_->setValue(0.0);
  updateStartFrom();
}

void ModelForm::useClassifier() {
  if (!lm()) return;
  lm_ = nullptr;
  text_ = false;
  offerBpe(false);
  showLmRows(false);
  weight_decay_->setValue(0.0);         // the classifiers' default, not a preset's
  applyPreset(preset_->currentText());  // the classifier's sizes again
  updateStartFrom();
}

LmShape ModelForm::lmShape() const {
  LmShape s = lm_ ? lm_->shape : LmShape{};
  s.layers = layers_->value(), s.heads = heads_->value(), s.dim = dim_->value(), s.ff = ff_->value();
  if (text_) s.max_len = max_len_->value();
  return s;
}

TextLmOptions ModelForm::textOptions() const {
  TextLmOptions o;
  o.tokenizer = parse_text_tokenizer(tokenizer_->currentText().toStdString());
  o.vocab_size = TextLmOptions::default_vocab_size(o.tokenizer);
  o.min_count = TextLmOptions::default_min_count(o.tokenizer);
  o.seq = max_len_->value();
  return o;
}

bool ModelForm::setTextTokenizer(const QString& name) {
  if (!text_ || tokenizer_->findText(name) < 0) return false;
  tokenizer_->setCurrentText(name);
  return true;
}

void ModelForm::setEpochs(int epochs) {
  epochs_->setValue(epochs);
}

void ModelForm::useShipped(const QString& tokenizer, int max_len) {
  tokenizer_->setCurrentText(tokenizer);
  max_len_->setValue(max_len);
}

uint64_t ModelForm::seed() const {
  return static_cast<uint64_t>(seed_->value());
}

ModelConfig ModelForm::modelConfig() const {
  ModelConfig c;
  c.num_layers = layers_->value();
  c.num_heads = heads_->value();
  c.embed_size = dim_->value();
  c.ff_dim = ff_->value();
  c.max_len = max_len_->value();
  c.positional = parse_positional(positional_->currentText().toStdString());
  c.norm = parse_norm(norm_->currentText().toStdString());
  c.activation = parse_activation(activation_->currentText().toStdString());
  c.tokenizer = parse_tokenizer(tokenizer_->currentText().toStdString());
  c.pooling = parse_pooling(pooling_->currentText().toStdString());
  c.add_cls = c.pooling == Pooling::Cls;  // a new model that pools on [CLS] gets a tokenizer that adds it
  return c;
}

TrainConfig ModelForm::trainConfig() const {
  TrainConfig tc;
  tc.epochs = epochs_->value();
  tc.batch = batch_->value();
  tc.optimizer.lr = static_cast<float>(lr_->value());
  tc.optimizer.weight_decay = static_cast<float>(weight_decay_->value());
  tc.optimizer.clip_norm = static_cast<float>(clip_->value());
  tc.dropout = static_cast<float>(dropout_->value());
  tc.seed = seed();
  tc.backend = precision_->currentIndex() == 1 ? "cpu-bf16" : "cpu";
  tc.freeze_encoder = fineTune() && freeze_->isChecked();
  if (lm_) {  // the preset's schedule and weights kept (the last, or grokking's best held-out epoch)
    tc.optimizer.warmup_steps = lm_->warmup;
    tc.optimizer.cosine = lm_->cosine;
    tc.optimizer.beta2 = lm_->beta2;
    tc.keep_best = lm_keeps_best(lm_->task);
  }
  if (text_) tc.keep_best = false;  // as attnlab-cli: the last weights
  return tc;
}

}  // namespace attnlab
