// "Tour: attention step by step": the two seed articles walked through in the app (multi-head
// attention from scratch, article 000; the masks and heatmaps of nn.MultiheadAttention, article
// 003), one step per section, each a state of the Explore or Train tab. Help > Tour lists them;
// `attnlab --tour-step N` opens one (docs/tour/make.sh takes the pictures of docs/tour.md).
#pragma once

#include <QString>
#include <QStringList>
#include <cstdint>
#include <vector>

namespace attnlab {

class MainWindow;

struct TourStep {
  QString title;      // "The padding mask"
  QString source;     // "article 003, section 2.1"
  QString text;       // what to look at, for the Tour dialog (rich text)
  QString input;      // the Explore text
  QString cross;      // cross-attention text (empty: self-attention)
  QStringList masks;  // --mask style arguments
  int pad_to = 0;     // [PAD] tokens appended up to this length
  int layer = 0;
  QString page;        // an Explore page ("heads", "head", "layers", "mask", "lines") or "train"
  QString model = "";  // a shipped model other than the default (resources/models/NAME), "" = none
  // page "circuits": the corrupted prompt, the answer and what it is measured against, what is patched
  QString corrupted = "", answer = "", wrong = "", patch = "";
  // page "methods": Compare, A - B, against this shipped model on the same text ("" = none)
  QString compare_model = "";
  // >= 0: the Mask editor paints a band (each token sees itself and its neighbours at +-band), the
  // custom mask on (article 003's own mask); -1: the custom mask cleared and off
  int custom_band = -1;
};

const std::vector<TourStep>& tour_steps();
// Which article is which: "Article 000: ... ; article 003: ..." (their titles, in Chinese and
// in English), for the tour's text.
QString tour_articles_note();

// Article 003 section 2.3's custom mask for n tokens, computed as its code runs: start from
// torch.zeros (as printed) or torch.ones (the fix), write 0 into the band |i - j| <= 1 and the
// diagonal, block where the value is 1. Row-major [n * n], 1 = blocked.
std::vector<uint8_t> article_custom_mask(int n, bool start_from_ones);
// The two masks side by side as rich text (a table of cells each), for the tour's step.
QString article_custom_mask_tables(int n);

// Puts the window in step `index`'s state (0-based). False for an index that does not exist. A
// step on another shipped model opens it from shipped_models (the folder holding "default"); the
// step after it opens the default model again.
bool show_tour_step(MainWindow& w, int index, const QString& shipped_models = QString());

}  // namespace attnlab
