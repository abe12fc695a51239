// GeneratePage: a language model writes, one token a step, and each step's next-token
// distribution is drawn before and after the sampling warpers (as Transformer Explainer does),
// the chosen token marked. The warpers are transformers' (temperature, top-k, top-p, min-p, in
// that order; engine/compute/generate.h); the seed makes a run reproducible. Each token is
// appended to the explored text, so every view grows with it (the text is the truth: it is
// tokenized again, as if typed; the pass reuses the last one's KV cache). Undo takes a step back.
//
// A step chosen in the table (or a generated token selected in the strip while this page shows)
// shows its distribution and, under it, what the position that chose it attended to (every head
// of the layer, from the explored result: a causal model's earlier rows do not change as the text
// grows) and "why this token and not that one": the direct logit attribution of their logit
// difference at that step, per head and MLP (engine/analysis/attribution.h). Clicking a bar of
// the chart picks the other token.
#pragma once

#include <memory>
#include <vector>

#include "engine/compute/generate.h"
#include "ui/background_job.h"
#include "ui/explore/explore_page.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QPushButton;
class QSpinBox;
class QTabWidget;
class QTableWidget;

namespace attnlab {

class BarView;
class CurveView;
class HeatmapView;
struct LogitAttribution;

class GeneratePage : public ExplorePage {
  Q_OBJECT
 public:
  explicit GeneratePage(ExploreState* state, QWidget* parent = nullptr);
  // Where the explored text comes from (the view's text box); set by the page table.
  void setTextSource(std::function<QString()> text) { text_ = std::move(text); }
  void step();           // one token
  void generate(int n);  // n tokens, one after another; stop() ends it after the step in flight
  void stop();
  void undo();  // the last step taken back (its text, and the sampler as it was)
  void wait();  // until no step is in flight (tests)
  int steps() const { return static_cast<int>(steps_.size()); }
  void showStep(int k);  // the chart and summary of step k
  SamplingOptions sampling() const;
  void setSampling(const SamplingOptions& o);
  QTableWidget* table() const { return table_; }
  BarView* chart() const { return chart_; }
  CurveView* curve() const { return curve_; }
  QString summary() const;
  // The step whose token sits at `position` of the explored result (-1: none, or the text
  // tokenizes differently now than when it was generated).
  int stepAt(int position) const;
  // Shows the step of the token at `position` (false when no step made it).
  bool selectPosition(int position);
  // "Why step k's token, and not `other`": the logit attribution, computed in the background
  // (wait() waits for it too).
  void explain(int k, int other);
  // The same for the shown step against the chooser's text (`typed`, or what the box holds): a
  // token of the chart, or any text that is exactly one token. False, with the reason shown, when
  // it is neither.
  bool explainTyped(const QString& typed = QString());
  HeatmapView* rowView() const { return row_; }
  HeatmapView* contrastView() const { return contrast_; }
  const LogitAttribution* contrast() const { return contrast_result_.get(); }
  QString contrastText() const;

  // One step, as the table and the chart show it (the distribution itself is not kept: ~1 MB a
  // step for a 128k vocabulary).
  struct Step {
    int id = -1;
    float prob = 0, raw_prob = 0;
    double entropy = 0;
    int kept = 0;  // tokens the warpers left
    QString label;
    QStringList chart_labels;    // the chart's categories: the likeliest before and after the warpers
    std::vector<int> chart_ids;  // their ids
    std::vector<int> ids;        // the pass's input: the chosen token was to follow them
    std::vector<double> before, after;
    int marked = -1;
    bool greedy = true;   // the likeliest (no warpers), or drawn from the warped distribution
    QString text_before;  // the explored text before the token was appended
    SampleRng rng_before{0};
    // A character split over tokens (a byte-level emoji, byte-fallback CJK) is appended once it is
    // whole: until then its tokens wait here, and each step runs on the text's ids plus them.
    std::vector<int> pending_before;
    bool pending = false;  // this token waits for the rest of its character
  };
  const std::vector<Step>& history() const { return steps_; }

 signals:
  // The explored text with the step's token appended (or, after undo, taken away again).
  void textRequested(const QString& text);
  // Tokens from this position on are this page's (-1: none): the token strip colours them.
  void generatedFrom(int position);

 protected:
  void refresh() override;  // the attention row of the shown step
  void modelChanged() override;

 private:
  void finishStep(const Step& s, const QString& added);
  void setBusy(bool busy);
  void redrawCurve();
  void drawRow();  // the shown step's attention row
  void fillAgainst(int k);
  int shown_ = -1;  // the step the chart shows

  std::function<QString()> text_;
  QCheckBox* greedy_;
  QDoubleSpinBox *temperature_, *top_p_, *min_p_;
  QSpinBox *top_k_, *seed_, *count_;
  QPushButton *step_, *run_, *stop_, *undo_;
  QLabel* summary_;
  BarView* chart_;
  CurveView* curve_;
  QTableWidget* table_;
  HeatmapView *row_, *contrast_;
  QLabel *row_text_, *contrast_text_;
  QComboBox* against_;
  QTabWidget* detail_;  // its attention | why this, not that
  QPushButton* why_;
  std::shared_ptr<const LogitAttribution> contrast_result_;
  BackgroundJob job_{this}, contrast_job_{this};
  std::shared_ptr<KvCache> cache_ = std::make_shared<KvCache>();
  SampleRng rng_{0};
  uint64_t rng_seed_ = 0;
  std::vector<Step> steps_;
  std::vector<int> pending_;  // tokens of a character not yet whole (see Step)
  QString last_text_;         // the text the page last set: another text means the user edited it
  std::vector<int> stops_;    // the model's end-of-text tokens
  int prompt_tokens_ = 0;     // the text's tokens when the first step of the history was made
  int remaining_ = 0;         // tokens still to make in this Generate run
  bool busy_ = false;
};

}  // namespace attnlab
