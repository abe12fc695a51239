// The tour's steps (see tour.h). Written for the shipped default model (2 layers, 8 heads,
// trained on the negation task), where "not" is what the heads look at.
#include "ui/tour.h"

#include <QDir>

#include <QTabWidget>

#include "ui/explore/circuits_page.h"
#include "ui/explore_view.h"
#include "ui/mask_editor.h"
#include "ui/main_window.h"
#include "ui/methods_view.h"
#include "ui/train_view.h"

namespace attnlab {

QString tour_articles_note() {
  return QString::fromUtf8(
      "Article 000: \u201cPyTorch 2.0 \u591a\u5934\u81ea\u6ce8\u610f\u529b\u673a\u5236\u5b9e\u6218\uff1a"
      "\u4ece\u96f6\u5b9e\u73b0 8 \u5934\u6ce8\u610f\u529b\u6a21\u5757\u201d (multi-head self-attention "
      "from scratch: an 8-head module); article 003: \u201cPyTorch 2.0 MultiHeadAttention "
      "\u6a21\u5757\u5b9e\u6218\uff1a3\u79cd\u63a9\u7801\u673a\u5236\u4e0e\u6ce8\u610f\u529b"
      "\u6743\u91cd\u53ef\u89c6\u5316\u201d (nn.MultiheadAttention: three kinds of mask and attention-weight "
      "heatmaps).");
}

std::vector<uint8_t> article_custom_mask(int n, bool start_from_ones) {
  // custom_mask = torch.zeros(seq_len, seq_len)   (the fix: torch.ones)
  std::vector<float> m(static_cast<size_t>(n) * n, start_from_ones ? 1.0f : 0.0f);
  for (int i = 0; i < n; ++i) {
    for (int j = std::max(0, i - 1); j < std::min(n, i + 2); ++j) m[static_cast<size_t>(i) * n + j] = 0;
    m[static_cast<size_t>(i) * n + i] = 0;  // always sees itself
  }
  // custom_mask.masked_fill(custom_mask == 1, float('-inf'))
  std::vector<uint8_t> blocked(m.size());
  for (size_t k = 0; k < m.size(); ++k) blocked[k] = m[k] == 1.0f;
  return blocked;
}

QString article_custom_mask_tables(int n) {
  auto table = [n](bool ones) {
    const std::vector<uint8_t> b = article_custom_mask(n, ones);
    int count = 0;
    QString rows;
    for (int i = 0; i < n; ++i) {
      rows += "<tr>";
      for (int j = 0; j < n; ++j) {
        const bool x = b[static_cast<size_t>(i) * n + j] != 0;
        count += x;
        rows += QString("<td bgcolor='%1' width='6' height='6'></td>").arg(x ? "#3b3b3b" : "#e8e8e8");
      }
      rows += "</tr>";
    }
    // a tiny font: an empty cell is a line of text tall, so cells were twice as tall as wide
    return QString(
               "<td align='center'><table cellspacing='1' cellpadding='0' style='font-size:4px'>%1</table>"
               "<br>%2<br>%3 blocked</td>")
        .arg(rows, ones ? QString("<code>torch.ones</code> (fixed)") : QString("<code>torch.zeros</code> (as printed)"))
        .arg(count);
  };
  return "<table cellspacing='4'><tr>" + table(false) + table(true) + "</tr></table>";  // fits the 214 px dock
}

const std::vector<TourStep>& tour_steps() {
  static const std::vector<TourStep> steps = {
      {"Scaled dot-product attention",
       "article 000, sections 2-3",
       "One head, enlarged: row <i>i</i> is softmax(q<sub>i</sub> &middot; k<sub>j</sub> / &radic;d) over the keys "
       "<i>j</i>; every row sums to 1. Hover a cell for its value; double-click a head in the grid to come here.",
       "the film was not very good",
       "",
       {},
       0,
       0,
       "head"},
      {"Eight heads",
       "article 000, section 3; article 003, section 4.3",
       "The same layer, all eight heads: each has its own query, key and value projections, so each learns its "
       "own pattern. In this model several heads send every word to \"not\", the word that decides the label.",
       "the film was not very good",
       "",
       {},
       0,
       0,
       "heads"},
      {"Padding and the padding mask",
       "article 003, section 2.1",
       "Batches pad short sentences with [PAD]. Here the text is padded to 10 tokens and the padding mask is on: "
       "no query attends to a [PAD] key (its column is blocked), while the [PAD] rows still attend to the words.",
       "the film was not good",
       "",
       {"padding"},
       10,
       0,
       "heads"},
      {"The causal mask",
       "article 003, section 2.2",
       "A decoder may not look ahead: key <i>j</i> &gt; query <i>i</i> is blocked, so each row spreads over the "
       "tokens up to itself and the map is a lower triangle. This model was not trained with it: the heads lose "
       "\"not\" for the words before it.",
       "the film was not very good",
       "",
       {"causal"},
       0,
       0,
       "heads"},
      {"Your own mask, combined",
       "article 003, sections 2.3-2.4",
       "Article 003's own mask, painted in the Mask editor (the cells it blocks are the ones you see there "
       "in the painted colour): each token sees itself and its neighbours at &plusmn;1, here combined with "
       "the padding mask and the causal mask. Masks combine as in nn.MultiheadAttention: a cell is blocked "
       "when any mask blocks it, so on the Heads tab each word sees only itself and the word before, and no "
       "query sees a [PAD]; the last [PAD] row sees no key at all (the status bar's warning: attnlab draws it as "
       "zeros, where PyTorch's softmax gives NaN). A careful reader finds that the article's code, as printed, blocks "
       "nothing: it "
       "starts from <code>torch.zeros</code>, writes zeros into the band, then fills &minus;inf where the "
       "mask equals 1, and there are no ones, so <code>attn_weights</code> come out unmasked (step 2's "
       "picture). The one-line fix: start from <code>torch.ones</code>. Both, as the code computes them for "
       "these 8 tokens (dark: blocked):" +
           article_custom_mask_tables(8) +
           "Paint any mask of your own on top, for every head or one; the Heads tab shows what it does.",
       "the film was not very good",
       "",
       {"padding", "causal"},
       8,
       0,
       "mask",
       "",
       "",
       "",
       "",
       "",
       "",
       1},
      {"One head, all heads, all layers",
       "article 003, sections 4.2-4.3",
       "Every layer and every head at once; click a thumbnail to open that layer. The second layer's heads "
       "gather what the first layer found.",
       "the film was not very good",
       "",
       {},
       0,
       1,
       "layers"},
      {"Queries and keys of different lengths",
       "article 003, section 5.2 (cross-attention)",
       "Cross-attention: queries from the first text, keys and values from a second one, so the maps are 6 x 3. "
       "Each sequence is encoded by the model first; the chosen layer's attention then compares them.",
       "the film was not very good",
       "this was bad",
       {},
       0,
       0,
       "heads"},
      {"Sliding-window (sparse) attention",
       "article 000, section 7.2",
       "Each token sees only its neighbours within the window (here 4: two on each side). Long inputs then cost "
       "time in proportion to their length, not its square.",
       "to be fair i think the film was not very good at all overall",
       "",
       {"window:4"},
       0,
       0,
       "heads"},
      {"Relative positions",
       "article 000, section 7.1",
       "A model trained with relative positions (Shaw et al. 2018): instead of adding a position to each "
       "token, every score gets a learned term for the distance between query and key, so a head can learn "
       "\"look one to the left\" for any position. This is the negation classifier trained that way, beside the "
       "default model (the same task and data, absolute positions): the map is its attention minus the default "
       "model's on the same text, the mean of the heads (red: the relative model attends more). Choose a head in "
       "the second box to compare one head, or open Heads for its own maps.",
       "the film was not very good",
       "",
       {},
       0,
       0,
       "methods",
       "relative",
       "",
       "",
       "",
       "",
       "default"},
      {"Which heads carry the answer",
       "activation patching (Meng et al. 2022; Wang et al. 2022)",
       "The Circuits tab runs the sentence with \"not\" (negative) and the same sentence with \"really\" "
       "(positive), then puts each head's output from the first run into the second, one head at a time: "
       "the map is the share of the negative answer each head restores. No single head carries it all: heads 2 "
       "and 5 of layer 0 restore the most, and both attend to \"not\"; heads 1 and 6 attend to it as much but "
       "restore little. Attending is not carrying. Choose \"both\" to see attribution patching's one-backward "
       "estimate beside it, and click a head to open its pattern.",
       "the film was not very good",
       "",
       {},
       0,
       0,
       "circuits",
       "",
       "the film was really very good",
       "negative",
       "positive",
       "z"},
      {"Training the TextClassifier",
       "article 000, section 6",
       "The Train tab trains the article's classifier on the negation task and plots loss and accuracy; the "
       "probe sentence's heads are redrawn after every epoch, so you can watch a head learn to look from "
       "\"good\" to \"not\". Press Train.",
       "the film was not very good",
       "",
       {},
       0,
       0,
       "train"},
  };
  return steps;
}

bool show_tour_step(MainWindow& w, int index, const QString& shipped_models) {
  const auto& steps = tour_steps();
  if (index < 0 || index >= static_cast<int>(steps.size())) return false;
  const TourStep& s = steps[static_cast<size_t>(index)];
  if (!shipped_models.isEmpty()) {
    const QDir root(shipped_models);
    const QString want = root.absoluteFilePath(s.model.isEmpty() ? "default" : s.model);
    // a step on another shipped model opens it; the next step goes back to the default one
    const bool on_other = [&] {
      for (const auto& t : steps)
        if (!t.model.isEmpty() && QDir(w.modelDir()) == QDir(root.absoluteFilePath(t.model))) return true;
      return false;
    }();
    if ((!s.model.isEmpty() || on_other) && QDir(w.modelDir()) != QDir(want) && !w.openModel(want, true)) return false;
  }
  ExploreView* e = w.explore();
  w.tabs()->setCurrentWidget(s.page == "train" ? static_cast<QWidget*>(w.train()) : e);
  e->setCrossText(s.cross);
  e->setText(s.input);
  e->setPadTo(s.pad_to);
  e->setMaskArgs(s.masks);
  e->setLayer(s.layer);
  // The custom mask: painted on this input's shape (the editor takes it from the pass), or
  // cleared, so a step's mask does not stay on for the next ones.
  MaskEditor* editor = e->maskEditor();
  if (s.custom_band >= 0) {
    e->flush();
    editor->setTargetHead(-1);
    editor->applyPreset(MaskEditor::Preset::Band, s.custom_band);  // an edit turns the custom mask on
  } else {
    if (!editor->isEmpty()) editor->applyPreset(MaskEditor::Preset::Clear, 0);
    e->setCustomMask(false);
  }
  if (s.page != "train") e->showPage(s.page);
  if (s.page == "methods" && !s.compare_model.isEmpty() && !shipped_models.isEmpty()) {
    MethodsView* m = e->methodsView();
    m->setMethod(MethodsView::Compare);
    try {
      m->setCompare({},
                    std::make_shared<const Model>(
                        load_model(QDir(shipped_models).absoluteFilePath(s.compare_model).toStdString())),
                    s.compare_model);
    } catch (const std::exception&) {
      return false;  // a shipped model that does not open: the install is broken
    }
  }
  if (s.page == "circuits")
    if (auto* c = qobject_cast<CircuitsPage*>(e->page("circuits"))) {
      c->setPrompts(s.input, s.corrupted);
      c->setAnswers(s.answer, s.wrong);
      c->setTarget(s.patch);
      c->compute();
    }
  return true;
}

}  // namespace attnlab
