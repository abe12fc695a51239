// ExploreView implementation.
#include "ui/explore_view.h"

#include <QAction>
#include <QCheckBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QFile>
#include <QTextStream>
#include <QFileInfo>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QKeyEvent>
#include <QListView>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSignalBlocker>
#include <QShortcut>
#include <QSlider>
#include <QSpinBox>
#include <QSplitter>
#include <QHeaderView>
#include <QPointer>
#include <QTabWidget>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>
#include <cmath>
#include <limits>

#include <qcustomplot.h>

#include "engine/analysis/methods.h"
#include "engine/lm.h"
#include "engine/npy.h"
#include "ui/colormaps.h"
#include "ui/heatmap_data.h"
#include "ui/figure_export.h"
#include "ui/heatmap_view.h"
#include "ui/line_view.h"
#include "ui/mask_editor.h"
#include "ui/methods_view.h"
#include "ui/token_model.h"

namespace attnlab {

namespace {

// Axis labels: a space made visible, and long ones (<|begin_of_text|>) cut to 8 characters so
// one label does not take a small heatmap's width (hover and exports keep the whole token).
QStringList to_labels(const std::vector<std::string>& tokens) {
  QStringList l;
  for (const auto& t : tokens) {
    QString s = t == " " ? QStringLiteral("\u2423") : QString::fromStdString(t);
    if (s.size() > 9) s = s.left(8) + QStringLiteral("\u2026");
    l << s;
  }
  return l;
}

}  // namespace

ExploreView::ExploreView(QWidget* parent) : QWidget(parent), controller_(new ExploreController(this)) {
  clock_.start();
  auto* root = new QVBoxLayout(this);

  // --- text inputs and token strip
  auto* inputs = new QHBoxLayout;
  text_ = new QLineEdit(this);
  text_->setObjectName("text");
  text_->installEventFilter(this);
  text_->setPlaceholderText("Type text: every head's attention updates as you type");
  text_->setToolTip("The input: tokenised as you type, every view follows");
  cross_on_ = new QCheckBox("Cross-attention with:", this);
  cross_text_ = new QLineEdit(this);
  cross_text_->setObjectName("crossText");
  cross_text_->installEventFilter(this);
  cross_text_->setPlaceholderText("second text (keys and values)");
  cross_text_->setEnabled(false);
  cross_text_->setToolTip("Cross-attention: the text's queries attend to this text's keys and values");
  pair_label_ = new QLabel("Sentence B:", this);
  pair_text_ = new QLineEdit(this);
  pair_text_->setObjectName("pairText");
  pair_text_->installEventFilter(this);
  pair_text_->setPlaceholderText("optional: [CLS] A [SEP] B [SEP]");
  pair_text_->setToolTip("A sentence pair as BERT reads it: token type 0 for the text, 1 for sentence B");
  // Token-view options beside the input they transform, shown for tokenizers that make special
  // tokens and word pieces (the Hugging Face ones).
  hide_special_ = new QCheckBox("hide [CLS]/[SEP]", this);
  hide_special_->setObjectName("hideSpecial");
  hide_special_->setToolTip("Leave the tokenizer's special tokens out of the views (rows are not renormalised)");
  merge_pieces_ = new QCheckBox("merge pieces", this);
  merge_pieces_->setObjectName("mergePieces");
  merge_pieces_->setToolTip("One row and column per word: attention to a word = sum over its pieces (keys), "
                            "from a word = mean over its pieces (queries)");
  inputs->addWidget(new QLabel("Text:", this));
  inputs->addWidget(text_, 3);
  inputs->addWidget(pair_label_);
  inputs->addWidget(pair_text_, 2);
  inputs->addWidget(hide_special_);
  inputs->addWidget(merge_pieces_);
  inputs->addWidget(cross_on_);
  inputs->addWidget(cross_text_, 2);
  root->addLayout(inputs);

  token_model_ = new TokenListModel(this);
  token_view_ = new QListView(this);
  token_view_->setModel(token_model_);
  token_view_->setFlow(QListView::LeftToRight);
  token_view_->setWrapping(true);
  token_view_->setResizeMode(QListView::Adjust);
  token_view_->setSpacing(2);
  token_view_->setFixedHeight(44);  // fitted to its rows of tokens (fitTokenStrip)
  token_view_->setToolTip(
      "Tokens and ids. Orange: not in the vocabulary ([UNK]). Tick a token to make it a global token. Select "
      "tokens (click, Ctrl-click or Shift-click) to see every head's attention from or to them in Beyond attention.");
  token_view_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  root->addWidget(token_view_);
  token_legend_ = new QLabel(this);
  token_legend_->setObjectName("tokenLegend");
  token_legend_->setText(
      "<span style='background:#ffd699'>&nbsp;orange&nbsp;</span> not in the vocabulary (read as [UNK]) &nbsp; "
      "<span style='background:#bedcff'>&nbsp;blue&nbsp;</span> global token (ticked)");
  token_legend_->setVisible(false);
  root->addWidget(token_legend_);
  notice_ = new QLabel(this);
  notice_->setStyleSheet("color: #b35900;");
  notice_->setWordWrap(true);
  root->addWidget(notice_);

  auto* split = new QSplitter(Qt::Horizontal, this);
  split->setObjectName("exploreSplitter");
  root->addWidget(split, 1);

  // --- left: masks, prediction, display options; scrolls rather than setting the window's
  // minimum height (the window fits a 1280x720 screen)
  auto* left_scroll = new QScrollArea(split);
  left_scroll->setWidgetResizable(true);
  left_scroll->setFrameShape(QFrame::NoFrame);
  left_scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  auto* left = new QWidget;
  left_scroll->setWidget(left);
  auto* lv = new QVBoxLayout(left);
  // The prediction first (a classifier's label, a language model's next tokens): what the
  // model says, above how it is looked at.
  prediction_ = new QLabel(left);
  prediction_->setObjectName("prediction");
  prediction_->setWordWrap(true);
  prediction_->setTextFormat(Qt::RichText);
  lv->addWidget(prediction_);
  next_pos_ = new QSpinBox(left);
  next_pos_->setObjectName("nextTokenPosition");
  next_pos_->setRange(-1, 0);
  next_pos_->setSpecialValueText("after the last token");
  next_pos_->setValue(-1);
  next_pos_->setPrefix("after position ");
  next_pos_->setToolTip("Language models: the position whose likeliest next tokens are listed above");
  next_pos_->setVisible(false);
  lv->addWidget(next_pos_);
  connect(next_pos_, &QSpinBox::valueChanged, this, [this] { renderPrediction(); });
  auto* masks = new QGroupBox("Masks", left);
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
  mask_view_ = new HeatmapView(masks);
  mask_view_->setCompact(true);
  mask_view_->setColourTop(1.0f);
  mask_view_->setMinimumSize(150, 150);
  mask_view_->setToolTip("The effective mask: blocked cells in the blocked colour, visible ones in the map's middle");
  mf->addRow(mask_view_);
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
  lv->addWidget(masks);
  auto* opts = new QGroupBox("Display", left);
  auto* of = new QFormLayout(opts);
  auto* cmap = new QComboBox(opts);
  cmap->addItems(colormap_names());
  cmap->setToolTip("Colour map of every heatmap (perceptually uniform; blocked cells get their own colour)");
  of->addRow("colour map", cmap);
  scale_mode_ = new QComboBox(opts);
  scale_mode_->setObjectName("colourScale");
  scale_mode_->addItems({"per head", "per layer", "shared 0-1"});
  scale_mode_->setToolTip(
      "Where the colour bar ends: each head's own maximum, the layer's maximum (heads comparable), "
      "or 1 (comparable across layers and inputs). Exports use the same setting.");
  of->addRow("colour scale", scale_mode_);
  connect(scale_mode_, &QComboBox::currentTextChanged, this, [this] { render(); });
  annotate_ = new QCheckBox("values in cells (short inputs)", opts);
  annotate_->setToolTip("Print each probability in its cell when the cells are large enough");
  of->addRow(annotate_);

  lv->addWidget(opts);
  lv->addStretch();
  // as wide as its widest control plus the vertical scroll bar (which would otherwise cover the
  // controls' right edge: "after the last token"'s arrows), at most 320
  left_scroll->setMinimumWidth(std::min(320, left->minimumSizeHint().width() +
                                                 left_scroll->verticalScrollBar()->sizeHint().width()));
  left_scroll->setMaximumWidth(320);

  // --- right: layer controls and the views
  auto* right = new QWidget(split);
  auto* rv = new QVBoxLayout(right);
  auto* lbar = new QHBoxLayout;
  auto* prev = new QPushButton("< Layer", right);
  auto* next = new QPushButton("Layer >", right);
  layer_slider_ = new QSlider(Qt::Horizontal, right);
  layer_slider_->setObjectName("layerSlider");
  layer_slider_->setToolTip("The layer every view shows (Ctrl+PageUp / Ctrl+PageDown)");
  prev->setToolTip("Previous layer (Ctrl+PageUp)");
  next->setToolTip("Next layer (Ctrl+PageDown)");
  layer_label_ = new QLabel("layer 0", right);
  lbar->addWidget(prev);
  lbar->addWidget(layer_slider_, 1);
  lbar->addWidget(next);
  lbar->addWidget(layer_label_);
  weighting_ = new QComboBox(right);
  weighting_->setObjectName("headWeighting");
  weighting_->addItems({"attention", "value-weighted"});
  weighting_->setToolTip("What the Heads and Head tabs draw: the attention weights, or each weight times the size of "
                         "what its key sends through the head's value and output projections (Kobayashi et al. 2020)");
  lbar->addWidget(new QLabel("heads show:", right));
  lbar->addWidget(weighting_);
  rv->addLayout(lbar);
  tabs_ = new QTabWidget(right);
  heads_page_ = new QWidget;
  heads_grid_ = new QGridLayout(heads_page_);
  heads_grid_->setSpacing(4);
  heads_page_->setToolTip(
      "Every head of the layer. A badge after a head's name says what it mostly attends to (Clark et al. 2019), when "
      "one thing takes more than half its attention on average: prev / next (the neighbouring token), self, first "
      "(or [CLS]), [SEP], punct, → a particular token; broad: spread almost evenly. Double-click a head to enlarge it; right-click to "
      "ablate it.");
  tabs_->addTab(heads_page_, "Heads");
  overview_page_ = new QWidget;
  overview_grid_ = new QGridLayout(overview_page_);
  overview_grid_->setSpacing(2);
  auto* scroll = new QScrollArea;
  scroll->setWidget(overview_page_);
  scroll->setWidgetResizable(true);
  tabs_->addTab(scroll, "All layers");
  head_page_ = new QWidget;
  auto* hp = new QVBoxLayout(head_page_);
  auto* hbar = new QHBoxLayout;
  head_box_ = new QComboBox(head_page_);
  head_box_->setObjectName("headBox");
  head_box_->setToolTip("The head shown large (double-click a head in the Heads tab)");
  hbar->addWidget(new QLabel("head:", head_page_));
  hbar->addWidget(head_box_);
  hbar->addStretch();
  hp->addLayout(hbar);
  big_ = new HeatmapView(head_page_);
  big_->setPlaceholder("Type some text first");
  big_->setMaxCells(1024);
  big_->setSquareCells(true);
  hp->addWidget(big_, 1);
  tabs_->addTab(head_page_, "Head");
  connect(head_box_, &QComboBox::currentIndexChanged, this, [this](int h) {
    if (h >= 0 && h != big_head_) openHead(layer_, h);
  });
  editor_ = new MaskEditor;
  tabs_->addTab(editor_, "Mask editor");
  // BertViz's line view of the current layer: one head or all, hover a token for its lines.
  lines_page_ = new QWidget;
  auto* lp = new QVBoxLayout(lines_page_);
  auto* lbar2 = new QHBoxLayout;
  line_head_ = new QComboBox(lines_page_);
  line_head_->setObjectName("lineHead");
  line_head_->setToolTip("Lines of one head, or of every head in its own colour");
  lbar2->addWidget(new QLabel("heads:", lines_page_));
  lbar2->addWidget(line_head_);
  lbar2->addStretch();
  lp->addLayout(lbar2);
  lines_ = new LineView(lines_page_);
  lp->addWidget(lines_, 1);
  tabs_->insertTab(1, lines_page_, "Lines");
  // The logit lens (language models): each layer's output read through the final norm and the
  // LM head; the likeliest next token per layer and position, coloured by its probability.
  lens_page_ = new QWidget;
  auto* lensv = new QVBoxLayout(lens_page_);
  lens_status_ = new QLabel(lens_page_);
  lens_status_->setWordWrap(true);
  lensv->addWidget(lens_status_);
  lens_table_ = new QTableWidget(lens_page_);
  lens_table_->setObjectName("lensTable");
  lens_table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  lens_table_->horizontalHeader()->setDefaultSectionSize(64);
  lens_table_->verticalHeader()->setDefaultSectionSize(22);
  lensv->addWidget(lens_table_, 1);
  lens_page_->setEnabled(false);
  tabs_->addTab(lens_page_, "Logit lens");
  // Head importance (Michel et al. 2019): p(prediction) minus p(prediction) with one head
  // ablated, for every head; click a cell to ablate or restore that head in every view.
  imp_page_ = new QWidget;
  auto* impv = new QVBoxLayout(imp_page_);
  auto* imp_bar = new QHBoxLayout;
  auto* imp_run = new QPushButton("Compute head importance", imp_page_);
  imp_run->setObjectName("importanceRun");
  imp_run->setToolTip("One pass per head with that head ablated: how much the prediction's probability drops");
  imp_status_ = new QLabel(imp_page_);
  imp_status_->setWordWrap(true);
  imp_progress_ = new QProgressBar(imp_page_);
  imp_progress_->setObjectName("importanceProgress");
  imp_progress_->setToolTip("Heads ablated so far");
  imp_progress_->setVisible(false);
  imp_stop_ = new QPushButton("Cancel", imp_page_);
  imp_stop_->setObjectName("importanceCancel");
  imp_stop_->setToolTip("Stop computing head importance");
  imp_stop_->setVisible(false);
  imp_bar->addWidget(imp_run);
  imp_bar->addWidget(imp_progress_);
  imp_bar->addWidget(imp_stop_);
  imp_bar->addWidget(imp_status_, 1);
  impv->addLayout(imp_bar);
  imp_table_ = new QTableWidget(imp_page_);
  imp_table_->setObjectName("importanceTable");
  imp_table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  imp_table_->horizontalHeader()->setDefaultSectionSize(76);  // "-1.96e-05" fits
  impv->addWidget(imp_table_, 1);
  tabs_->addTab(imp_page_, "Importance");
  methods_ = new MethodsView;
  tabs_->addTab(methods_, "Beyond attention");
  tabs_->setTabToolTip(tabs_->indexOf(methods_),
                       "Rollout, gradient-weighted relevance, value-weighted attention and averages (engine/analysis)");
  // Token selection: the selected tokens' rows (or columns) for every head, on the Beyond attention page.
  connect(token_view_->selectionModel(), &QItemSelectionModel::selectionChanged, this, [this] {
    std::vector<int> rows;
    for (const QModelIndex& i : token_view_->selectionModel()->selectedIndexes()) rows.push_back(i.row());
    std::sort(rows.begin(), rows.end());
    methods_->setSelection(rows);
    if (rows.empty()) return;
    if (methods_->method() != MethodsView::SelectedQueries && methods_->method() != MethodsView::SelectedKeys)
      methods_->setMethod(MethodsView::SelectedQueries);
    tabs_->setCurrentWidget(methods_);
  });
  connect(imp_run, &QPushButton::clicked, this, &ExploreView::computeImportance);
  connect(imp_stop_, &QPushButton::clicked, this, [this] {
    imp_job_.cancel();  // whatever the thread still sends is dropped
    imp_progress_->setVisible(false);
    imp_stop_->setVisible(false);
    imp_status_->setText("Head importance cancelled.");
  });
  connect(imp_table_, &QTableWidget::cellClicked, this, [this](int row, int col) {
    if (!model_) return;
    const int l = row;  // layer 0 first, as in All layers and the CLI
    setAblated(l, col, !isAblated(l, col));
  });
  connect(line_head_, &QComboBox::currentIndexChanged, this, [this](int i) { lines_->setHead(i - 1); });
  rv->addWidget(tabs_, 1);
  split->addWidget(left_scroll);
  split->addWidget(right);
  split->setStretchFactor(1, 1);

  for (QLineEdit* e : {text_, cross_text_, pair_text_})
    connect(e, &QLineEdit::textChanged, this, &ExploreView::schedule);
  connect(cross_on_, &QCheckBox::toggled, this, [this](bool on) {
    cross_text_->setEnabled(on);
    pair_text_->setEnabled(!on);  // a pair is one sequence; cross-attention is two
    schedule();
  });
  for (QCheckBox* c : {padding_, causal_, window_on_, strided_on_, custom_on_, hide_special_, merge_pieces_})
    connect(c, &QCheckBox::toggled, this, &ExploreView::schedule);
  for (QSpinBox* s : {pad_to_, window_, stride_}) connect(s, &QSpinBox::valueChanged, this, &ExploreView::schedule);
  connect(token_model_, &TokenListModel::globalsChanged, this, &ExploreView::schedule);
  connect(token_model_, &TokenListModel::globalsChanged, this, &ExploreView::updateTokenLegend);
  connect(editor_, &MaskEditor::maskChanged, this, [this] {
    if (!custom_on_->isChecked() && !editor_->isEmpty()) custom_on_->setChecked(true);  // an edit means "use it"
    schedule();
  });
  connect(cmap, &QComboBox::currentTextChanged, this, &ExploreView::setColormap);
  setColormap(colormap_);  // the mask legend's colours
  connect(annotate_, &QCheckBox::toggled, this, [this](bool on) {
    for (HeatmapView* h : heads_) h->setAnnotate(on);
    big_->setAnnotate(on);
  });
  connect(layer_slider_, &QSlider::valueChanged, this, &ExploreView::setLayer);
  connect(weighting_, &QComboBox::currentIndexChanged, this, [this] {
    if (valueWeighted() && !vn_) startValueNorm();
    render();
  });
  connect(prev, &QPushButton::clicked, this, [this] { setLayer(layer_ - 1); });
  connect(next, &QPushButton::clicked, this, [this] { setLayer(layer_ + 1); });
  new QShortcut(QKeySequence(Qt::CTRL | Qt::Key_PageUp), this, [this] { setLayer(layer_ - 1); });
  new QShortcut(QKeySequence(Qt::CTRL | Qt::Key_PageDown), this, [this] { setLayer(layer_ + 1); });
  connect(tabs_, &QTabWidget::currentChanged, this, [this, scroll] {
    if (tabs_->currentWidget() == lens_page_ && lens_dirty_) startLens();
    if (tabs_->currentWidget() == scroll && overview_dirty_) renderOverview();
    if (tabs_->currentWidget() == head_page_) openHead(layer_, big_head_);
    if (tabs_->currentWidget() == editor_) showOtherMasks();
  });
  overview_tab_ = scroll;
  controller_->setMaskProvider([this] { return currentMask(); });
  connect(controller_, &ExploreController::inputPrepared, this, &ExploreView::onInputPrepared);
  connect(controller_, &ExploreController::resultChanged, this, &ExploreView::onResult);
  connect(controller_, &ExploreController::resultCleared, this, [this] {
    result_.reset();
    grids_.clear();
    mask_grid_ = {};
    row_labels_.clear();
    col_labels_.clear();
    render();
    emit warnings({});
    emit status("no input: type some text");
  });
  connect(controller_, &ExploreController::failed, this, [this](const QString& error) {
    notice_->setText(error);
    emit status("error: " + error);
  });
}

// The controller stops its runner first, so no result reaches the half-destroyed window.
ExploreView::~ExploreView() {
  vn_job_.stop();
  lens_job_.stop();
  imp_job_.stop();
  controller_->shutdown();
}

void ExploreView::setModel(std::shared_ptr<const Model> model) {
  model_ = std::move(model);
  const ModelConfig& c = model_->config;
  // A sentence-B box for tokenizers with a pair template (BERT family); the piece options for
  // tokenizers that make pieces and special tokens.
  const bool lm = c.causal;
  const bool pairs = model_->tokenizer && model_->tokenizer->has_pair_template() && !lm;
  pair_label_->setVisible(pairs);
  pair_text_->setVisible(pairs);
  hide_special_->setVisible(model_->tokenizer != nullptr);
  hide_special_->setText(lm ? "hide special tokens" : "hide [CLS]/[SEP]");
  merge_pieces_->setVisible(model_->tokenizer != nullptr);
  // A decoder's causal mask is part of the model: shown ticked, not a choice; no cross mode.
  {
    QSignalBlocker block(causal_);
    causal_->setChecked(lm || causal_->isChecked());
  }
  causal_->setEnabled(!lm);
  causal_->setToolTip(lm ? QString("Part of this model: a causal language model only attends to earlier tokens%1")
                               .arg(c.sliding_window ? QString(", at most %1 back (its sliding window)").arg(c.sliding_window)
                                                     : QString())
                         : QString("Each query sees only itself and earlier keys (article 003, section 2.2)"));
  if (lm) cross_on_->setChecked(false);
  cross_on_->setEnabled(!lm);
  cross_on_->setToolTip(lm ? "Cross-attention compares two sequences through an encoder; this is a language model"
                           : "Queries from the text, keys and values from a second text (article 005, section 5.2)");
  next_pos_->setVisible(c.lm_head);
  lens_page_->setEnabled(c.lm_head);
  tabs_->setTabVisible(tabs_->indexOf(lens_page_), c.lm_head);  // language models only
  tabs_->setTabToolTip(tabs_->indexOf(lens_page_), c.lm_head ? "Each layer's guess of the next token"
                                                             : "Language models only (a model with an LM head)");
  ablated_.clear();
  applyAblation();
  methods_->setModel(model_);
  imp_job_.cancel();
  imp_table_->clear();
  imp_table_->setRowCount(0);
  imp_table_->setColumnCount(0);
  imp_status_->setText(c.num_classes > 0 || c.lm_head
                           ? "How much each head matters to the prediction: click Compute (one pass per head)."
                           : "Head importance needs a prediction (a classifier or a language model); this model has none.");
  imp_page_->setEnabled(c.num_classes > 0 || c.lm_head);
  lens_dirty_ = true;
  lens_table_->clear();
  lens_table_->setRowCount(0);
  lens_table_->setColumnCount(0);
  lens_status_->setText(c.lm_head ? "" : "The logit lens reads a language model's layers through its LM head; this model has none.");
  layer_slider_->setRange(0, c.num_layers - 1);
  rebuildHeadGrid(c.num_heads);
  // overview thumbnails: layers x heads
  for (HeatmapView* t : thumbs_) t->deleteLater();
  thumbs_.clear();
  for (int l = 0; l < c.num_layers; ++l) {
    auto* label = new QLabel(QString("layer %1").arg(l), overview_page_);
    overview_grid_->addWidget(label, l, 0);
    for (int h = 0; h < c.num_heads; ++h) {
      auto* t = new HeatmapView(overview_page_);
      t->setCompact(true);
      t->setMaxCells(128);
      t->setMinimumSize(c.num_heads > 8 ? 60 : 90, c.num_heads > 8 ? 60 : 90);  // 12 heads fit 1280 px
      t->setToolTip(QString("layer %1, head %2: click to open this layer").arg(l).arg(h));
      connect(t, &HeatmapView::clicked, this, [this, l] {
        setLayer(l);
        tabs_->setCurrentWidget(heads_page_);
      });
      overview_grid_->addWidget(t, l, h + 1);
      thumbs_.push_back(t);
    }
  }
  if (layer_ >= c.num_layers) layer_ = 0;
  updateLayerLabel();
  result_.reset();
  controller_->setModel(model_);
}

void ExploreView::rebuildHeadGrid(int heads) {
  {
    QSignalBlocker block(head_box_);
    head_box_->clear();
    for (int h = 0; h < heads; ++h) head_box_->addItem(QString("head %1").arg(h));
  }
  {
    QSignalBlocker block(line_head_);
    line_head_->clear();
    line_head_->addItem("all heads");
    for (int h = 0; h < heads; ++h) line_head_->addItem(QString("head %1").arg(h));
  }
  lines_->setHead(-1);
  for (HeatmapView* h : heads_) h->deleteLater();
  heads_.clear();
  ablate_actions_.clear();
  grid_cols_ = 0;
  for (int h = 0; h < heads; ++h) {
    auto* v = new HeatmapView(heads_page_);
    v->setMaxCells(256);  // the worker pools to 256 already
    v->setGradient(colormap_);
    v->setAnnotate(annotate_->isChecked());
    v->setToolTip("Double-click to enlarge");
    connect(v, &HeatmapView::clicked, this, [this, h] { openHead(layer_, h); });
    connect(v, &HeatmapView::labelStepsNeeded, this, &ExploreView::syncLabelSteps, Qt::QueuedConnection);
    auto* act = new QAction("Ablate this head (its probabilities times 0 before they weight the values)", v);
    act->setCheckable(true);
    v->setContextMenuPolicy(Qt::ActionsContextMenu);
    v->addAction(act);
    connect(act, &QAction::triggered, this, [this, h](bool on) { setAblated(layer_, h, on); });
    ablate_actions_.push_back(act);
    heads_.push_back(v);
  }
  layoutHeadGrid();
}

// The heads grid: the column count that gives each head the largest square plot on the page
// (8 heads at 1280x720: 4 x 2; 4 heads: 2 x 2; MiniLM's 12: 4 x 3, no scrolling), redone when
// the window is resized.
void ExploreView::layoutHeadGrid() {
  const int n = static_cast<int>(heads_.size());
  if (n == 0) return;
  // The arrangement that gives each head the largest square plot: a plot's labels, title and
  // colour bar take about 140 px across and 100 px down whatever its size.
  const int W = std::max(heads_page_->width(), 200), H = std::max(heads_page_->height(), 150);
  int best_cols = 1, best_side = -1000000;
  for (int c = 1; c <= n; ++c) {
    const int rows = (n + c - 1) / c;
    const int side = std::min(W / c - 140, H / rows - 100);
    if (side >= best_side) best_side = side, best_cols = c;  // ties: more columns
  }
  if (best_cols == grid_cols_) return;
  grid_cols_ = best_cols;
  QTimer::singleShot(0, this, [this] { syncLabelSteps(); });  // once the heads have their new sizes
  for (HeatmapView* v : heads_) heads_grid_->removeWidget(v);
  for (int c = 0; c < heads_grid_->columnCount(); ++c) heads_grid_->setColumnStretch(c, 0);
  for (int r = 0; r < heads_grid_->rowCount(); ++r) heads_grid_->setRowStretch(r, 0);
  for (int h = 0; h < n; ++h) heads_grid_->addWidget(heads_[static_cast<size_t>(h)], h / best_cols, h % best_cols);
  for (int c = 0; c < best_cols; ++c) heads_grid_->setColumnStretch(c, 1);
  for (int r = 0; r < (n + best_cols - 1) / best_cols; ++r) heads_grid_->setRowStretch(r, 1);
}

// The token strip is as tall as its rows of tokens (one row of a short sentence leaves the
// heatmaps the rest), up to three rows; more scroll.
void ExploreView::fitTokenStrip() {
  const int n = token_model_->rowCount();
  int h = 0;
  if (n > 0) {  // down to the bottom of the third row of tokens (its ids too), measured, not estimated
    const int top = token_view_->visualRect(token_model_->index(0)).top();
    int rows = 0, row_top = std::numeric_limits<int>::min(), bottom = top;
    for (int i = 0; i < n; ++i) {
      const QRect r = token_view_->visualRect(token_model_->index(i));
      if (r.top() != row_top && ++rows > 3) break;
      row_top = r.top();
      bottom = std::max(bottom, r.bottom());
    }
    h = bottom - top + 1 + 2 * token_view_->spacing();
  }
  const int row = token_view_->sizeHintForRow(0) > 0 ? token_view_->sizeHintForRow(0) : 32;
  h = std::max(h, row + 2 * token_view_->spacing());
  token_view_->setFixedHeight(h + 2 * token_view_->frameWidth());
}

// The token strip's legend, while it has an unknown or a global token to explain.
void ExploreView::updateTokenLegend() {
  bool any_unknown = false;
  for (uint8_t u : controller_->prepared().unknown) any_unknown = any_unknown || u;
  token_legend_->setVisible(any_unknown || !token_model_->globalPositions().empty());
}

void ExploreView::setPairText(const QString& text) {
  pair_text_->setText(text);
}

void ExploreView::setTokenView(bool hide_special, bool merge_pieces) {
  hide_special_->setChecked(hide_special);
  merge_pieces_->setChecked(merge_pieces);
}

void ExploreView::setText(const QString& text) {
  text_->setText(text);
}
QString ExploreView::text() const {
  return text_->text();
}

void ExploreView::setCrossText(const QString& text) {
  cross_on_->setChecked(!text.isEmpty());
  cross_text_->setText(text);
}

void ExploreView::setBackend(const QString& name) {
  controller_->setBackend(name);
}

void ExploreView::setLayer(int layer) {
  if (!model_) return;
  layer = std::clamp(layer, 0, model_->config.num_layers - 1);
  const bool changed = layer != layer_;
  layer_ = layer;
  layer_slider_->blockSignals(true);
  layer_slider_->setValue(layer);
  layer_slider_->blockSignals(false);
  updateLayerLabel();
  methods_->setLayer(layer);
  if (changed) {
    const qint64 start = clock_.nsecsElapsed();
    render();
    emit layerChanged(layer);
    if (perf_log_) {
      const int n = result_ ? static_cast<int>(result_->ids.size()) : 0;
      QTimer::singleShot(0, this, [this, start, n] {
        perf_log_->write(
            QString("layer\t%1\t\t%2\n").arg(n).arg((clock_.nsecsElapsed() - start) / 1e6, 0, 'f', 2).toUtf8());
        perf_log_->flush();
      });
    }
  }
}

// The colour bar's top for every head of the grid (and the enlarged head): its own maximum, the
// layer's, or 1.
float ExploreView::colourTop() const {
  const QString mode = scale_mode_->currentText();
  if (mode == "shared 0-1" && !valueWeighted()) return 1.0f;  // norms have no 1: per layer instead
  if (mode != "per layer" && mode != "shared 0-1") return 0.0f;
  float top = 0;
  for (HeatmapView* h : heads_) top = std::max(top, h->data().vmax);
  return top > 0 ? top : 1.0f;
}

void ExploreView::applyColourScale() {
  const float top = colourTop();
  for (HeatmapView* h : heads_) h->setColourTop(top);
  big_->setColourTop(top);
}

// One label step for every head of the grid (the densest any of them needs), so all heads show
// the same tokens; recomputed when the grid is laid out anew.
void ExploreView::syncLabelSteps() {
  // One small-cell layout for the whole grid (heads in different rows differ by a pixel)
  bool small = false;
  for (HeatmapView* h : heads_) small = small || h->plot()->height() < 200 || h->plot()->width() < 220;
  for (HeatmapView* h : heads_) h->setSmallMode(small ? 1 : 0);
  QSize k(1, 1);
  for (HeatmapView* h : heads_) {
    if (h->data().empty()) return;
    k = k.expandedTo(h->autoLabelSteps());
  }
  for (HeatmapView* h : heads_) h->setLabelSteps(k);
}

void ExploreView::resizeEvent(QResizeEvent* e) {
  QWidget::resizeEvent(e);
  QTimer::singleShot(0, this, [this] {  // after the pages have their new sizes
    layoutHeadGrid();
    syncLabelSteps();
  });
}

// Layers are numbered from 0 everywhere (titles, exports, --layer); the label gives the range.
void ExploreView::updateLayerLabel() {
  if (!model_) return;
  layer_label_->setText(QString("layer %1 (0-%2)").arg(layer_).arg(model_->config.num_layers - 1));
}

void ExploreView::setColormap(const QString& name) {
  colormap_ = name;
  // The mask preview's legend in this map's colours (visible cells are drawn at its middle).
  const QColor visible = make_gradient(name).color(0.5, QCPRange(0, 1)), blocked = blocked_color(name);
  visible_swatch_->setStyleSheet(QString("background: %1; border: 1px solid #777;").arg(visible.name()));
  blocked_swatch_->setStyleSheet(QString("background: %1; border: 1px solid #777;").arg(blocked.name()));
  for (HeatmapView* h : heads_) h->setGradient(name);
  for (HeatmapView* h : thumbs_) h->setGradient(name);
  big_->setGradient(name);
  methods_->setGradient(name);
}

void ExploreView::setPerfLog(const QString& path) {
  perf_log_ = std::make_unique<QFile>(path);
  if (!perf_log_->open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) {
    emit status("cannot write the performance log " + path);
    perf_log_.reset();
    return;
  }
  perf_log_->write("event\ttokens\tforward_ms\tlatency_ms\n");
}

void ExploreView::setMaskArgs(const QStringList& args) {
  MaskSpec spec;
  for (const QString& a : args) add_mask_arg(spec, a.toStdString());  // Error on a bad one
  padding_->setChecked(spec.padding);
  causal_->setChecked(spec.causal);
  window_on_->setChecked(spec.window > 0);
  if (spec.window > 0) window_->setValue(spec.window);
  strided_on_->setChecked(spec.stride > 0);
  if (spec.stride > 0) stride_->setValue(spec.stride);
  token_model_->setGlobalPositions(spec.global);
  schedule();
}

void ExploreView::setPadTo(int length) {
  pad_to_->setValue(length);
}

QStringList ExploreView::maskArgs() const {
  QStringList a;
  if (padding_->isChecked()) a << "padding";
  if (causal_->isChecked()) a << "causal";
  if (window_on_->isChecked()) a << QString("window:%1").arg(window_->value());
  if (strided_on_->isChecked()) a << QString("strided:%1").arg(stride_->value());
  const auto g = token_model_->globalPositions();
  if (!g.empty()) {
    QStringList p;
    for (int v : g) p << QString::number(v);
    a << "global:" + p.join(',');
  }
  return a;
}

MaskSpec ExploreView::currentMask() const {
  MaskSpec s;
  s.padding = padding_->isChecked();
  s.causal = causal_->isChecked();
  s.window = window_on_->isChecked() ? window_->value() : 0;
  s.stride = strided_on_->isChecked() ? stride_->value() : 0;
  s.global = token_model_->globalPositions();
  if (custom_on_->isChecked() && !editor_->isEmpty()) {
    s.custom = editor_->toNpy();
    s.custom_source = "mask editor";
  }
  return s;
}

void ExploreView::schedule() {
  ExploreInput in;
  in.text = text_->text().toStdString();
  in.cross = cross_on_->isChecked();
  in.cross_text = cross_text_->text().toStdString();
  in.pair = pair_text_->isVisibleTo(this) && !in.cross;
  in.pair_text = pair_text_->text().toStdString();
  in.pad_to = pad_to_->value();
  in.view.hide_special = hide_special_->isChecked() && hide_special_->isVisibleTo(this);
  in.view.merge_pieces = merge_pieces_->isChecked() && merge_pieces_->isVisibleTo(this);
  controller_->setInput(std::move(in));
}

// The new input as the model reads it: the token strip and the mask editor take its shape at
// once (the editor's mask for the next pass is read right after this).
void ExploreView::onInputPrepared(const QStringList& notices) {
  const PreparedInput& a = controller_->prepared();
  const PreparedInput& b = controller_->preparedCross();
  token_model_->setTokens(a.tokens, a.ids, std::vector<bool>(a.unknown.begin(), a.unknown.end()));
  updateTokenLegend();
  QTimer::singleShot(0, this, [this] { fitTokenStrip(); });
  const bool cross = cross_on_->isChecked();
  const int T = static_cast<int>(a.size()), S = cross ? static_cast<int>(b.size()) : T;
  if (model_)
    editor_->setShape(T, S, model_->config.num_heads, to_labels(a.tokens), to_labels(cross ? b.tokens : a.tokens));
  QStringList all = notices;
  // A pretrained model never saw these masks in training: what they show is an experiment.
  const bool own_causal = model_ && model_->config.causal;  // a decoder's causal mask is its own
  if (model_ && model_->is_hf() && ((causal_->isChecked() && !own_causal) || window_on_->isChecked() || strided_on_->isChecked() ||
                                    custom_on_->isChecked() || !token_model_->globalPositions().empty()))
    all << "Masks on a pretrained model are experiments: it was not trained with them.";
  notice_->setText(all.join(" "));
}

void ExploreView::onResult(const ForwardOutcome& out) {
  result_ = out.result;
  {  // the analysis page computes from the same input, at full token resolution
    QStringList labels;
    for (const auto& t : controller_->prepared().tokens) labels << QString::fromStdString(t);
    methods_->setInput(analysisRequest(), labels, text_->text());
    // and draws its T x T maps through the token view this result was drawn through
    std::optional<TokenGroups> groups;
    if (out.token_view && result_ && !result_->is_cross()) groups = out.token_view->first;
    methods_->setTokenGroups(std::move(groups));
    methods_->setResult(result_);
  }
  if (tabs_->currentWidget() == editor_) showOtherMasks();
  vn_.reset();  // value-weighted maps are of the previous input
  if (valueWeighted()) startValueNorm();
  grids_ = out.heads;
  patterns_ = out.patterns;
  mask_grid_ = out.mask;
  row_labels_ = to_labels(result_->tokens);  // the result's own tokens: never another input's
  col_labels_ = to_labels(result_->is_cross() ? result_->cross_tokens : result_->tokens);
  render();
  QStringList warn;
  for (const auto& w : result_->warnings) warn << QString::fromStdString(w);
  emit warnings(warn);
  // Counts of the input; with hidden or merged tokens, also how many rows the views show.
  const size_t n = controller_->prepared().size(), shown = result_->ids.size();
  QString count = n == 1 ? QString("1 token") : QString("%1 tokens").arg(n);
  if (result_->is_cross()) count += QString(" attending to %1").arg(controller_->preparedCross().size());
  if (shown != n) count += QString(" (%1 shown)").arg(shown);
  QString ablated;
  for (const auto& [l, h] : ablated_) ablated += (ablated.isEmpty() ? " | ablated " : ", ") + QString("%1:%2").arg(l).arg(h);
  emit status(QString("backend %1 (%2) | %3 | forward %4 ms%5%6")
                  .arg(out.backend, out.device)
                  .arg(count)
                  .arg(result_->millis, 0, 'f', 1)
                  .arg(ablated)
                  .arg(warn.isEmpty() ? "" : " | " + warn.join("; ")));
  if (perf_log_) {
    const qint64 submitted = out.submitted_ns;
    const double fwd = result_->millis;
    const int n = static_cast<int>(result_->ids.size());
    // Measured once the queued replots have run: the next turn of the event loop.
    QTimer::singleShot(0, this, [this, submitted, fwd, n] {
      const double latency = (controller_->nowNs() - submitted) / 1e6;
      perf_log_->write(QString("forward\t%1\t%2\t%3\n").arg(n).arg(fwd, 0, 'f', 2).arg(latency, 0, 'f', 2).toUtf8());
      perf_log_->flush();
    });
  }
}

void ExploreView::render() {
  if (!result_ || !model_) {
    lines_->setResult(nullptr, 0);
    for (HeatmapView* h : heads_) h->setData({});
    mask_view_->setData({});
    prediction_->clear();
    return;
  }
  QElapsedTimer t;
  t.start();
  const ForwardResult& r = *result_;
  const int H = static_cast<int>(heads_.size());
  for (int h = 0; h < H; ++h) {
    HeatmapData d = headData(layer_, h, 0);
    d.row_labels = row_labels_;
    d.col_labels = col_labels_;
    d.title = headTitle(layer_, h, false);
    d.hatched = isAblated(layer_, h);
    heads_[static_cast<size_t>(h)]->setData(std::move(d));
    if (static_cast<size_t>(h) < ablate_actions_.size()) ablate_actions_[static_cast<size_t>(h)]->setChecked(isAblated(layer_, h));
  }
  syncLabelSteps();
  applyColourScale();
  lines_->setResult(result_, layer_);
  mask_view_->setData(mask_grid_);
  if (tabs_->currentWidget() == head_page_) openHead(layer_, big_head_);
  overview_dirty_ = true;
  if (tabs_->currentWidget() == overview_tab_) renderOverview();
  renderPrediction();
  lens_dirty_ = true;
  if (tabs_->currentWidget() == lens_page_) startLens();
  if (perf_log_) {
    perf_log_->write(QString("render\t%1\t\t%2\n").arg(r.ids.size()).arg(t.nsecsElapsed() / 1e6, 0, 'f', 2).toUtf8());
    perf_log_->flush();
  }
}

namespace {

// A vocabulary token as a person reads it (byte-level tokens decoded).
QString token_text(const Model& m, int id) {
  return QString::fromStdString(m.readable_token(id));
}

}  // namespace

void ExploreView::renderPrediction() {
  next_pos_->setVisible(result_ && model_ && model_->config.lm_head);
  if (!result_ || !model_) {
    prediction_->clear();
    return;
  }
  const ForwardResult& r = *result_;
  if (r.predicted >= 0) {
    QString html =
        QString("<b>Prediction: %1</b><br>").arg(QString::fromStdString(model_->label(r.predicted)).toHtmlEscaped());
    for (size_t k = 0; k < r.class_probs.size(); ++k)
      html += QString("%1: %2<br>")
                  .arg(QString::fromStdString(model_->label(static_cast<int>(k))).toHtmlEscaped())
                  .arg(r.class_probs[k], 0, 'f', 3);
    prediction_->setText(html);
    return;
  }
  if (!model_->config.lm_head) {
    prediction_->setText("Encoder-only model: no prediction.");
    return;
  }
  // Next tokens after a position of the input (the hidden rows are the input's, whatever the
  // token view shows).
  const int T = static_cast<int>(r.hidden.dim(0));
  {
    QSignalBlocker block(next_pos_);
    next_pos_->setRange(-1, T - 1);
  }
  const int pos = next_pos_->value() < 0 ? T - 1 : next_pos_->value();
  const auto& prepared = controller_->prepared();
  const QString after =
      pos < static_cast<int>(prepared.tokens.size()) ? QString::fromStdString(prepared.tokens[static_cast<size_t>(pos)]) : "";
  const auto top = pos == T - 1 && !r.next_tokens.empty() ? r.next_tokens : top_next_tokens(*model_, r.hidden, pos, 10);
  QString html = QString("<b>Next token after \"%1\"</b> (position %2)<br><table cellspacing='0' cellpadding='1'>")
                     .arg(after.toHtmlEscaped())
                     .arg(pos);
  for (const auto& [id, p] : top) {
    const int bar = static_cast<int>(std::lround(p * 80));
    html += QString("<tr><td>%1</td><td align='right'>&nbsp;%2</td><td>&nbsp;<span style='background:#4c78a8'>%3</span></td></tr>")
                .arg(token_text(*model_, id).toHtmlEscaped())
                .arg(p >= 0.001f ? QString::number(p, 'f', 3) : QString::number(p, 'e', 1))
                .arg(QString("&nbsp;").repeated(std::max(1, bar / 4)));
  }
  prediction_->setText(html + "</table>");
}

QString ExploreView::predictionText() const {
  return prediction_->text();
}

void ExploreView::setNextTokenPosition(int position) {
  next_pos_->setValue(position);
  renderPrediction();
}

QString ExploreView::headTitle(int layer, int head, bool with_layer) const {
  QString t = with_layer ? QString("layer %1, head %2").arg(layer).arg(head) : QString("head %1").arg(head);
  // the pattern badge (Clark et al. 2019): what the head mostly attends to, when one thing dominates
  // (badges describe the raw attention: none over value-weighted maps)
  if (!valueWeighted() && static_cast<size_t>(layer) < patterns_.size() &&
      static_cast<size_t>(head) < patterns_[static_cast<size_t>(layer)].size()) {
    const std::string& label = patterns_[static_cast<size_t>(layer)][static_cast<size_t>(head)].label;
    const HeadPattern& pat = patterns_[static_cast<size_t>(layer)][static_cast<size_t>(head)];
    QString badge = QString::fromStdString(label);
    if (label == "sep") badge = "[SEP]";
    if (label == "token") badge = QString::fromUtf8("\u2192 ") + col_labels_.value(pat.focus, QString::number(pat.focus));
    if (label == "first" && !row_labels_.isEmpty() && row_labels_[0].startsWith('[')) badge = row_labels_[0];  // [CLS]
    if (!badge.isEmpty()) t += QString::fromUtf8(" \u00b7 ") + badge;
  }
  if (valueWeighted() && with_layer) t += ", value-weighted";  // the enlarged head: its scale is not probabilities
  if (isAblated(layer, head)) t += " (ablated)";
  return t;
}

void ExploreView::renderOverview() {
  overview_dirty_ = false;
  if (!result_ || !model_) return;
  const size_t H = heads_.size();
  for (size_t k = 0; k < thumbs_.size() && k < grids_.size(); ++k) {
    HeatmapData d = grids_[k];
    d.title = headTitle(static_cast<int>(k / H), static_cast<int>(k % H), false);  // the row's label says the layer
    d.hatched = isAblated(static_cast<int>(k / H), static_cast<int>(k % H));
    thumbs_[k]->setData(std::move(d));
  }
}

void ExploreView::openHead(int layer, int head) {
  big_layer_ = layer;
  big_head_ = head;
  if (!result_) return;
  // Full resolution up to 1024 cells per axis; built here, on demand, for the one head shown.
  HeatmapData d = headData(layer, head, 1024);
  d.row_labels = row_labels_;
  d.col_labels = col_labels_;
  d.title = headTitle(layer, head, true);
  d.hatched = isAblated(layer, head);
  big_->setColourTop(colourTop());
  big_->setData(std::move(d));
  if (tabs_->currentWidget() != head_page_) tabs_->setCurrentWidget(head_page_);
  {
    QSignalBlocker block(head_box_);
    head_box_->setCurrentIndex(head);
  }
}

// The text boxes would take Ctrl+E (end of line on X11) before the window's export shortcut sees
// it: leave that key to the window.
bool ExploreView::eventFilter(QObject* obj, QEvent* ev) {
  if ((obj == text_ || obj == cross_text_ || obj == pair_text_) && ev->type() == QEvent::ShortcutOverride) {
    auto* ke = static_cast<QKeyEvent*>(ev);
    if (ke->key() == Qt::Key_E && ke->modifiers() == Qt::ControlModifier) return true;  // not accepted
  }
  return QWidget::eventFilter(obj, ev);
}

bool ExploreView::showPage(const QString& name) {
  QWidget* page = name == "heads"    ? heads_page_
                  : name == "methods" ? static_cast<QWidget*>(methods_)
                  : name == "lines"  ? lines_page_
                  : name == "layers" ? overview_tab_
                  : name == "head"   ? head_page_
                  : name == "mask"   ? static_cast<QWidget*>(editor_)
                  : name == "lens"   ? lens_page_
                  : name == "importance" ? imp_page_
                                     : nullptr;
  if (!page || !tabs_->isTabVisible(tabs_->indexOf(page))) return false;  // the lens: language models only
  tabs_->setCurrentWidget(page);
  return true;
}

HeatmapView* ExploreView::headView(int head) const {
  return heads_.at(static_cast<size_t>(head));
}

void ExploreView::flush() {
  controller_->flush();
}

void ExploreView::exportLines(const QString& path) {
  flush();
  if (!result_) throw Error("nothing to export: type some text first");
  lines_->exportTo(path);
}

void ExploreView::exportTo(const QString& path, int layer, int head) {
  flush();
  if (!result_) throw Error("nothing to export: type some text first");
  ExportSpec spec;
  spec.layer = layer;
  spec.head = head;
  spec.colormap = colormap_;
  spec.annotate = annotate_->isChecked();
  spec.dpi = export_dpi_;
  spec.note = token_view_note(hide_special_->isChecked() && hide_special_->isVisibleTo(this),
                              merge_pieces_->isChecked() && merge_pieces_->isVisibleTo(this));
  // One colour bar for the figure: 0-1 when the screen uses 0-1, else the exported panels'
  // maximum (the layer's, for a layer's heads, as "per layer" shows them).
  spec.unit_range = scale_mode_->currentText() == "shared 0-1";
  export_attention(*result_, spec, path);
}

}  // namespace attnlab
