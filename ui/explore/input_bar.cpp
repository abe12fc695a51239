// InputBar (see input_bar.h).
#include "ui/explore/input_bar.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QItemSelectionModel>
#include <QKeyEvent>
#include <QLabel>
#include <QPalette>
#include <QSignalBlocker>
#include <QStandardItemModel>
#include <QLineEdit>
#include <QListView>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>
#include <limits>

#include "ui/figure_export.h"
#include "ui/token_model.h"

namespace attnlab {

InputBar::InputBar(QWidget* parent) : QWidget(parent) {
  auto* root = new QVBoxLayout(this);
  root->setContentsMargins(0, 0, 0, 0);
  auto* inputs = new QHBoxLayout;
  text_ = new QLineEdit(this);
  text_->setObjectName("text");
  text_->setPlaceholderText("Type text: every head's attention updates as you type");
  text_->setToolTip("The input: tokenised as you type, every view follows");
  cross_on_ = new QCheckBox("Cross-attention with:", this);
  cross_text_ = new QLineEdit(this);
  cross_text_->setObjectName("crossText");
  cross_text_->setPlaceholderText("second text (keys and values)");
  cross_text_->setEnabled(false);
  cross_text_->setToolTip("Cross-attention: the text's queries attend to this text's keys and values");
  pair_label_ = new QLabel("Sentence B:", this);
  pair_text_ = new QLineEdit(this);
  pair_text_->setObjectName("pairText");
  pair_text_->setPlaceholderText("optional: [CLS] A [SEP] B [SEP]");
  pair_text_->setToolTip("A sentence pair as BERT reads it: token type 0 for the text, 1 for sentence B");
  // An encoder-decoder's target and which of its three attentions the views draw
  target_label_ = new QLabel("Target:", this);
  target_text_ = new QLineEdit(this);
  target_text_->setObjectName("targetText");
  target_text_->setPlaceholderText("target text (the decoder reads it shifted right)");
  target_text_->setToolTip(
      "The decoder's text, teacher-forced as transformers trains: it reads the start token and the target's tokens "
      "but the last, and predicts each next one");
  part_ = new QComboBox(this);
  part_->setObjectName("seq2seqPart");
  part_->addItem("cross-attention (target → source)", "cross");
  part_->addItem("decoder self-attention", "decoder");
  part_->addItem("encoder self-attention", "encoder");
  part_->setToolTip(
      "Which attention the views draw: the decoder's cross-attention (target tokens down, source tokens across), "
      "its causal self-attention, or the encoder's self-attention over the source");
  for (QWidget* w : std::initializer_list<QWidget*>{target_label_, target_text_, part_}) w->setVisible(false);
  for (QLineEdit* e : {text_, cross_text_, pair_text_, target_text_}) e->installEventFilter(this);
  // Token-view options beside the input they transform, shown for tokenizers that make special
  // tokens and word pieces (the Hugging Face ones).
  hide_special_ = new QCheckBox("hide [CLS]/[SEP]", this);
  hide_special_->setObjectName("hideSpecial");
  hide_special_->setToolTip("Leave the tokenizer's special tokens out of the views (rows are not renormalised)");
  merge_pieces_ = new QCheckBox("merge pieces", this);
  merge_pieces_->setObjectName("mergePieces");
  merge_pieces_->setToolTip(
      "One row and column per word: attention to a word = sum over its pieces (keys), "
      "from a word = mean over its pieces (queries)");
  text_label_ = new QLabel("Text:", this);
  file_label_ = new QLabel(this);
  file_label_->setObjectName("attentionFileLabel");
  file_label_->setTextFormat(Qt::RichText);
  file_label_->setVisible(false);
  inputs->addWidget(text_label_);
  inputs->addWidget(text_, 3);
  inputs->addWidget(file_label_, 1);
  inputs->addWidget(pair_label_);
  inputs->addWidget(pair_text_, 2);
  inputs->addWidget(hide_special_);
  inputs->addWidget(merge_pieces_);
  inputs->addWidget(cross_on_);
  inputs->addWidget(cross_text_, 2);
  inputs->addWidget(target_label_);
  inputs->addWidget(target_text_, 3);
  inputs->addWidget(part_);
  root->addLayout(inputs);

  tokens_ = new TokenListModel(this);
  strip_ = new QListView(this);
  strip_->setObjectName("tokenStrip");
  strip_->setModel(tokens_);
  strip_->setFlow(QListView::LeftToRight);
  strip_->setWrapping(true);
  strip_->setResizeMode(QListView::Adjust);
  strip_->setSpacing(2);
  strip_->setFixedHeight(44);  // fitted to its rows of tokens (fitStrip)
  strip_->setToolTip(
      "Tokens and ids. Orange: not in the vocabulary ([UNK]). Tick a token to make it a global token. Select "
      "tokens (click, Ctrl-click or Shift-click) to see every head's attention from or to them in Beyond attention.");
  strip_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  {  // selected tokens in dark grey: the style's dark blue read as "blue = global token"
    QPalette pal = strip_->palette();
    for (const QPalette::ColorGroup g : {QPalette::Active, QPalette::Inactive}) {
      pal.setColor(g, QPalette::Highlight, QColor(70, 70, 70));
      pal.setColor(g, QPalette::HighlightedText, Qt::white);
    }
    strip_->setPalette(pal);
  }
  root->addWidget(strip_);
  legend_ = new QLabel(this);
  legend_->setObjectName("tokenLegend");
  legend_->setText(
      "<span style='background:#ffd699'>&nbsp;orange&nbsp;</span> not in the vocabulary (read as [UNK]) &nbsp; "
      "<span style='background:#bedcff'>&nbsp;blue&nbsp;</span> global token (ticked)");
  legend_->setVisible(false);
  root->addWidget(legend_);
  notice_ = new QLabel(this);
  notice_->setStyleSheet("color: #b35900;");
  notice_->setWordWrap(true);
  root->addWidget(notice_);

  for (QLineEdit* e : {text_, cross_text_, pair_text_, target_text_})
    connect(e, &QLineEdit::textChanged, this, &InputBar::changed);
  connect(part_, &QComboBox::currentIndexChanged, this, &InputBar::changed);
  connect(text_, &QLineEdit::textEdited, this, [this] { setGeneratedFrom(-1); });  // typed over: the user's text now
  connect(cross_on_, &QCheckBox::toggled, this, [this](bool on) {
    cross_text_->setEnabled(on);
    pair_text_->setEnabled(!on);  // a pair is one sequence; cross-attention is two
    emit changed();
  });
  for (QCheckBox* c : {hide_special_, merge_pieces_}) connect(c, &QCheckBox::toggled, this, &InputBar::changed);
  connect(tokens_, &TokenListModel::globalsChanged, this, &InputBar::updateLegend);
  connect(strip_->selectionModel(), &QItemSelectionModel::selectionChanged, this, [this] {
    std::vector<int> rows;
    for (const QModelIndex& i : strip_->selectionModel()->selectedIndexes()) rows.push_back(i.row());
    std::sort(rows.begin(), rows.end());
    emit selectionChanged(rows);
  });
}

void InputBar::setModel(const Model& model) {
  // A sentence-B box for tokenizers with a pair template (BERT family); the piece options for
  // tokenizers that make pieces and special tokens; no cross mode for a language model.
  const bool lm = model.config.causal;
  const bool seq2seq = model.is_seq2seq() && !model.probabilities_only;
  const bool pairs = model.tokenizer && model.tokenizer->has_pair_template() && !lm && !seq2seq;
  pair_label_->setVisible(pairs);
  pair_text_->setVisible(pairs);
  hide_special_->setVisible(model.tokenizer != nullptr);
  hide_special_->setText(lm ? "hide special tokens" : "hide [CLS]/[SEP]");
  merge_pieces_->setVisible(model.tokenizer != nullptr);
  if (lm) cross_on_->setChecked(false);
  cross_on_->setEnabled(!lm);
  // An attention file brings its own tokens: no boxes to type in until a model is opened (the
  // text typed before stays in its box for then).
  const bool file = model.probabilities_only;
  for (QWidget* w : std::initializer_list<QWidget*>{text_label_, text_, cross_on_, cross_text_}) w->setVisible(!file);
  file_label_->setVisible(file);
  tokens_->setPlain(file);
  tokens_->setTickable(!seq2seq);
  if (file)
    file_label_->setText(QString("Attention file <b>%1</b>: its tokens and probabilities, without a model. "
                                 "Open a model folder (Ctrl+O) to type text.")
                             .arg(QFileInfo(QString::fromStdString(model.source)).fileName().toHtmlEscaped()));
  file_label_->setToolTip(QString::fromStdString(model.source));
  // an encoder-decoder: the text is its source, beside it the target and the attention drawn
  text_label_->setText(seq2seq ? "Source:" : "Text:");
  text_->setPlaceholderText(seq2seq ? "Type the source: the encoder reads it"
                                    : "Type text: every head's attention updates as you type");
  for (QWidget* w : std::initializer_list<QWidget*>{target_label_, target_text_, part_}) w->setVisible(seq2seq);
  for (QWidget* w : std::initializer_list<QWidget*>{cross_on_, cross_text_, hide_special_, merge_pieces_})
    if (seq2seq) w->setVisible(false);
  if (seq2seq) {  // the views draw one model's layers and heads: the encoder's when it has the decoder's shape
    const ModelConfig& e = model.encoder->config;
    const bool same = e.num_layers == model.config.num_layers && e.num_heads == model.config.num_heads;
    auto* items = qobject_cast<QStandardItemModel*>(part_->model());
    if (QStandardItem* item = items ? items->item(2) : nullptr) {
      item->setEnabled(same);
      item->setToolTip(same ? QString()
                            : QString("The encoder has %1 layers x %2 heads and the decoder %3 x %4: "
                                      "attnlab-cli forward --attn-out F.npz writes the encoder's")
                                  .arg(e.num_layers)
                                  .arg(e.num_heads)
                                  .arg(model.config.num_layers)
                                  .arg(model.config.num_heads));
    }
    if (!same && part_->currentIndex() == 2) {
      QSignalBlocker block(part_);  // the new model's pass follows (ExploreView::setModel)
      part_->setCurrentIndex(0);
    }
  }
  cross_on_->setToolTip(lm ? "Cross-attention compares two sequences through an encoder; this is a language model"
                           : "Queries from the text, keys and values from a second text (article 005, section 5.2)");
}

ExploreInput InputBar::input() const {
  ExploreInput in;
  in.text = text_->text().toStdString();
  in.cross = cross_on_->isChecked();
  in.cross_text = cross_text_->text().toStdString();
  in.pair = pair_text_->isVisibleTo(this) && !in.cross;
  in.pair_text = pair_text_->text().toStdString();
  in.view.hide_special = hide_special_->isChecked() && hide_special_->isVisibleTo(this);
  in.view.merge_pieces = merge_pieces_->isChecked() && merge_pieces_->isVisibleTo(this);
  in.target = target_text_->text().toStdString();
  in.part = parse_seq2seq_part(part_->currentData().toString().toStdString());
  return in;
}

QString InputBar::tokenViewNote() const {
  const ExploreInput in = input();
  return token_view_note(in.view.hide_special, in.view.merge_pieces);
}

void InputBar::setText(const QString& text) {
  text_->setText(text);
}
QString InputBar::text() const {
  return text_->text();
}
void InputBar::setPairText(const QString& text) {
  pair_text_->setText(text);
}
void InputBar::setTargetText(const QString& text) {
  target_text_->setText(text);
}
void InputBar::setPart(Seq2SeqPart part) {
  const int i = part_->findData(QString(seq2seq_part_name(part)));
  const auto* items = qobject_cast<QStandardItemModel*>(part_->model());
  if (items && items->item(i) && !items->item(i)->isEnabled())
    throw Error(items->item(i)->toolTip().toStdString());  // the encoder, of another shape than the decoder
  part_->setCurrentIndex(i);
}

bool InputBar::crossOn() const {
  return cross_on_->isChecked();
}

void InputBar::setCrossText(const QString& text) {
  cross_on_->setChecked(!text.isEmpty());
  cross_text_->setText(text);
}

void InputBar::setTokenView(bool hide_special, bool merge_pieces) {
  hide_special_->setChecked(hide_special);
  merge_pieces_->setChecked(merge_pieces);
}

void InputBar::showPrepared(const PreparedInput& a) {
  tokens_->setTokens(a.tokens, a.ids, std::vector<bool>(a.unknown.begin(), a.unknown.end()));  // keeps generatedFrom
  any_unknown_ = std::any_of(a.unknown.begin(), a.unknown.end(), [](uint8_t u) { return u != 0; });
  updateLegend();
  // a cut to max_len is marked on the box that lost tokens (the notice says how many)
  pair_label_->setText(a.cut.from_second > 0 ? QString("Sentence B (cut by %1):").arg(a.cut.from_second)
                                             : QString("Sentence B:"));
  pair_label_->setStyleSheet(a.cut.from_second > 0 ? "color: #b35900;" : "");
  text_->setToolTip(a.cut.from_first > 0
                        ? QString("The input: its last %1 tokens are past max_len and were cut").arg(a.cut.from_first)
                        : QString("The input: tokenised as you type, every view follows"));
  QTimer::singleShot(0, this, [this] {
    fitStrip();
    // typing at the end of a long text: the strip follows the last tokens (it stayed on the first)
    if (text_->cursorPosition() == text_->text().size() && text_->hasFocus()) strip_->scrollToBottom();
  });
}

void InputBar::setNotice(const QString& text) {
  notice_->setText(text);
}

void InputBar::setGeneratedFrom(int position) {
  tokens_->setGeneratedFrom(position);
  updateLegend();
}

// The legend, while the strip has an unknown, a global or a generated token to explain.
void InputBar::updateLegend() {
  QStringList parts;
  if (any_unknown_)
    parts << "<span style='background:#ffd699'>&nbsp;orange&nbsp;</span> not in the vocabulary (read as [UNK])";
  if (!tokens_->globalPositions().empty())
    parts << "<span style='background:#bedcff'>&nbsp;blue&nbsp;</span> global token (ticked)";
  if (tokens_->anyGenerated())
    parts << QString("<span style='color:%1'><b>coloured text</b></span> generated (the Generate tab)")
                 .arg(kGeneratedColor.name());
  legend_->setText(parts.join(" &nbsp; "));
  legend_->setVisible(!parts.isEmpty());
}

// The strip is as tall as its rows of tokens (one row of a short sentence leaves the heatmaps
// the rest), up to three rows; more scroll.
void InputBar::fitStrip() {
  const int n = tokens_->rowCount();
  int h = 0;
  if (n > 0) {  // down to the bottom of the third row of tokens (its ids too), measured, not estimated
    const int top = strip_->visualRect(tokens_->index(0)).top();
    int rows = 0, row_top = std::numeric_limits<int>::min(), bottom = top;
    for (int i = 0; i < n; ++i) {
      const QRect r = strip_->visualRect(tokens_->index(i));
      if (r.top() != row_top && ++rows > 3) break;
      row_top = r.top();
      bottom = std::max(bottom, r.bottom());
    }
    h = bottom - top + 1 + 2 * strip_->spacing();
  }
  const int row = strip_->sizeHintForRow(0) > 0 ? strip_->sizeHintForRow(0) : 32;
  h = std::max(h, row + 2 * strip_->spacing());
  strip_->setFixedHeight(h + 2 * strip_->frameWidth());
}

void InputBar::selectTokens(const std::vector<int>& positions) {
  QItemSelection sel;
  for (int t : positions) {
    if (t < 0 || t >= tokens_->rowCount())
      throw Error("--select: no token " + std::to_string(t) + " (the input has " + std::to_string(tokens_->rowCount()) +
                  ")");
    sel.select(tokens_->index(t), tokens_->index(t));
  }
  strip_->selectionModel()->select(sel, QItemSelectionModel::ClearAndSelect);
}

// The text boxes would take Ctrl+E (end of line on X11) before the window's export shortcut sees
// it: leave that key to the window.
bool InputBar::eventFilter(QObject* obj, QEvent* ev) {
  if ((obj == text_ || obj == cross_text_ || obj == pair_text_ || obj == target_text_) &&
      ev->type() == QEvent::ShortcutOverride) {
    auto* ke = static_cast<QKeyEvent*>(ev);
    if (ke->key() == Qt::Key_E && ke->modifiers() == Qt::ControlModifier) return true;  // not accepted
  }
  return QWidget::eventFilter(obj, ev);
}

}  // namespace attnlab
