// The Explore tab's page table (see page_table.h).
#include "ui/explore/page_table.h"

#include <QTabWidget>

#include "engine/core/config.h"
#include "ui/explore/alignment_page.h"
#include "ui/explore/analysis_pages.h"
#include "ui/explore/circuits_page.h"
#include "ui/explore/generate_page.h"
#include "ui/explore/heads_page.h"
#include "ui/explore/input_bar.h"
#include "ui/explore/features_page.h"
#include "ui/explore/patterns_page.h"
#include "ui/explore/steering_page.h"
#include "ui/explore/view_pages.h"
#include "ui/explore_view.h"
#include "ui/mask_editor.h"
#include "ui/methods_view.h"

namespace attnlab {

namespace {

// An encoder-decoder's decoder (its layers attend to an encoder's output) shows its three
// attentions through the maps' pages; the pages that run passes of their own read one sequence.
bool one_sequence(const ModelConfig& c) {
  return !c.cross_attention;
}
bool is_seq2seq(const ModelConfig& c) {
  return c.cross_attention;
}
constexpr const char* kOneSequence =
    "an encoder-decoder shows its encoder, decoder and cross-attention in Heads, Lines, All layers, Head and "
    "Patterns; this page runs passes over one sequence";

bool is_causal_lm(const ModelConfig& c) {
  return c.lm_head && c.causal && one_sequence(c);
}

bool has_lm_head(const ModelConfig& c) {
  return c.lm_head && one_sequence(c);
}
bool has_prediction(const ModelConfig& c) {
  return (c.lm_head || c.num_classes > 0) && one_sequence(c);
}

// Beyond attention reads the same input as the pass, at full token resolution, and draws its
// T x T maps through the token view the result was drawn through; selecting tokens in the strip
// shows their rows (or columns) for every head here.
QWidget* make_methods(ExploreView& view) {
  auto* m = new MethodsView;
  ExploreState* s = view.state();
  QObject::connect(s, &ExploreState::modelChanged, m, [m, s] { m->setModel(s->model()); });
  QObject::connect(s, &ExploreState::resultChanged, m, [m, s, &view] {
    if (!s->result()) return;
    m->setResult(s->result());  // first: an attention file's maps are read from the result
    QStringList labels;
    for (const auto& t : s->controller()->prepared().tokens) labels << QString::fromStdString(t);
    m->setInput(s->analysisRequest(), labels, view.text());
    std::optional<TokenGroups> groups;
    if (s->outcome().token_view && !s->result()->is_cross()) groups = s->outcome().token_view->first;
    m->setTokenGroups(std::move(groups));
    m->setResult(s->result());
  });
  QObject::connect(s, &ExploreState::layerChanged, m, &MethodsView::setLayer);
  QObject::connect(s, &ExploreState::displayChanged, m, [m, s] { m->setGradient(s->colormap()); });
  QObject::connect(view.inputBar(), &InputBar::selectionChanged, m, [m, s, &view](const std::vector<int>& rows) {
    m->setSelection(rows);
    if (rows.empty()) return;
    // a generated token selected while the Generate page shows: that page shows its step
    const GeneratePage* g = view.findChild<GeneratePage*>();
    if (g && g->isCurrent() && rows.size() == 1 && g->stepAt(rows[0]) >= 0) return;
    if (m->method() != MethodsView::SelectedQueries && m->method() != MethodsView::SelectedKeys)
      m->setMethod(MethodsView::SelectedQueries);
    emit s->pageRequested("methods");
  });
  return m;
}

// The mask editor shows what the other masks (and the model's own) block, so that painting is
// seen combined with them (article 003, 2.3-2.4).
QWidget* make_mask_editor(ExploreView& view) {
  MaskEditor* editor = view.maskEditor();
  ExploreState* s = view.state();
  auto show_others = [editor, s] {
    if (!s->model() || !s->result() || s->result()->is_cross() || s->controller()->prepared().ids.empty())
      return editor->setOthers({});
    ForwardRequest req = s->analysisRequest();
    req.mask.custom.reset();
    const AttnMask m = self_attention_mask(*s->model(), req);
    if (m.T != editor->rows() || m.S != editor->cols()) return editor->setOthers({});
    std::vector<uint8_t> blocked(static_cast<size_t>(m.T) * m.S, 0);
    const int head = std::max(0, editor->targetHead());
    for (int i = 0; i < m.T; ++i)
      for (int j = 0; j < m.S; ++j) blocked[static_cast<size_t>(i) * m.S + j] = m.is_blocked(head, i, j);
    editor->setOthers(std::move(blocked));
  };
  QObject::connect(s, &ExploreState::resultChanged, editor, [editor, show_others, &view] {
    if (view.tabs()->currentWidget() == editor) show_others();
  });
  QObject::connect(s, &ExploreState::pageShown, editor, [show_others](const QString& name) {
    if (name == "mask") show_others();
  });
  return editor;
}

}  // namespace

const std::vector<ExplorePageRow>& explore_pages() {
  static const std::vector<ExplorePageRow> rows = {
      {"heads", "", "Heads", "", nullptr, "", true,
       [](ExploreView& v) -> QWidget* { return new HeadsPage(v.state()); }},
      {"lines", "", "Lines", "BertViz's line view: hover a token for its lines", nullptr, "", true,
       [](ExploreView& v) -> QWidget* { return new LinesPage(v.state()); }},
      {"layers", "", "All layers", "Every head of every layer; click one to open its layer", nullptr, "", true,
       [](ExploreView& v) -> QWidget* { return new LayersPage(v.state()); }},
      {"head", "", "Head", "One head, large", nullptr, "", true,
       [](ExploreView& v) -> QWidget* { return new HeadPage(v.state()); }},
      {"mask", "mask-editor", "Mask editor", "Paint a mask of your own (article 003, sections 2.3-2.4)", one_sequence,
       kOneSequence, false, make_mask_editor},
      {"patterns", "head-patterns", "Patterns",
       "What each head mostly attends to, every layer at once (Clark et al. 2019)", nullptr, "", true,
       [](ExploreView& v) -> QWidget* { return new PatternsPage(v.state()); }},
      {"alignment", "alignments", "Alignment",
       "Which source tokens each target token reads: an encoder-decoder's cross-attention averaged over the layers "
       "and heads you tick, as a matrix and as lines between the two sentences",
       is_seq2seq, "an alignment reads an encoder-decoder's cross-attention; this model reads one sequence", false,
       [](ExploreView& v) -> QWidget* { return new AlignmentPage(v.state()); }},
      {"lens", "logit-lens", "Logit lens", "Each layer's guess of the next token", has_lm_head,
       "the logit lens reads a language model's LM head; this model has none (or is an encoder-decoder)", false,
       [](ExploreView& v) -> QWidget* { return new LensPage(v.state()); }},
      {"generate", "", "Generate",
       "Let the model write, one token a step: its next-token distribution before and after temperature, top-k, "
       "top-p and min-p, what it attended to, and why it chose its token and not another",
       is_causal_lm,
       "generation needs a causal language model (one with an LM head); this model is not one (encoder-decoders: not "
       "yet)",
       false,
       [](ExploreView& v) -> QWidget* {
         auto* page = new GeneratePage(v.state());
         page->setTextSource([&v] { return v.text(); });
         QObject::connect(page, &GeneratePage::textRequested, page, [&v](const QString& text) { v.setText(text); });
         QObject::connect(page, &GeneratePage::generatedFrom, v.inputBar(), &InputBar::setGeneratedFrom);
         // a generated token clicked in the strip: its step (distribution, attention row, contrast)
         QObject::connect(v.inputBar(), &InputBar::selectionChanged, page, [page](const std::vector<int>& rows) {
           if (page->isCurrent() && rows.size() == 1) page->selectPosition(rows[0]);
         });
         return page;
       }},
      {"importance", "", "Importance", "How much the prediction drops without each head (Michel et al. 2019)",
       one_sequence, kOneSequence, false, [](ExploreView& v) -> QWidget* { return new ImportancePage(v.state()); }},
      {"circuits", "patching", "Circuits",
       "Activation and attribution patching, logit attribution: which layers, positions and heads carry the answer "
       "(Meng et al. 2022)",
       one_sequence, kOneSequence, false,
       [](ExploreView& v) -> QWidget* {
         auto* page = new CircuitsPage(v.state());
         // first shown: the clean prompt is the text being explored, the corrupted one a copy to edit
         QObject::connect(v.state(), &ExploreState::pageShown, page, [page, &v](const QString& name) {
           if (name == "circuits" && page->cleanText().isEmpty()) page->setPrompts(v.text(), v.text());
         });
         // a head clicked in a map: its pattern on the prompt the map was computed on
         QObject::connect(page, &CircuitsPage::headRequested, page, [&v](const QString& text, int layer, int head) {
           if (v.text() != text) v.setText(text);
           v.state()->setLayer(layer);
           v.state()->openHead(head);
         });
         return page;
       }},
      {"steer", "steering", "Steering",
       "Add the difference of two prompts' residual streams and watch the prediction move (Turner et al. 2023)",
       has_prediction,
       "steering moves a prediction: this model has neither a classifier nor an LM head (or is an encoder-decoder)",
       false, [](ExploreView& v) -> QWidget* { return new SteeringPage(v.state()); }},
      {"features", "sae", "Features",
       "A sparse autoencoder's features (SAELens format) on the text, and clamping them (Bricken et al. 2023)",
       one_sequence, kOneSequence, false, [](ExploreView& v) -> QWidget* { return new FeaturesPage(v.state()); }},
      {"methods", "beyond,beyond-attention", "Beyond attention",
       "Rollout, gradient-weighted relevance, value-weighted attention and averages (engine/analysis)", one_sequence,
       kOneSequence, true, make_methods},
  };
  return rows;
}

const ExplorePageRow* find_explore_page(const QString& name) {
  for (const ExplorePageRow& r : explore_pages()) {
    if (name == r.name) return &r;
    for (const QString& a : QString(r.aliases).split(',', Qt::SkipEmptyParts))
      if (name == a) return &r;
  }
  return nullptr;
}

QStringList explore_page_names() {
  QStringList n;
  for (const ExplorePageRow& r : explore_pages()) n << r.name;
  return n;
}

}  // namespace attnlab
