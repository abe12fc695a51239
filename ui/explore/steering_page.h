// SteeringPage: activation steering (Turner et al. 2023, "Activation Addition"; Rimsky et al.
// 2024, "Contrastive Activation Addition"): a vector from the difference of two prompts'
// residual streams at a layer, v = mean_t resid_pre_l(toward) - mean_t resid_pre_l(away from),
// added with a strength to the explored text's pass at that layer (every position, or the last),
// through the engine's hooks (blocks.{l}.hook_resid_pre, HookEdit::Kind::Add). The prediction
// (a classifier's classes, or a language model's next-token distribution) is shown before and
// after and follows the strength slider and the text as they change.
#pragma once

#include <memory>

#include "ui/background_job.h"
#include "ui/explore/explore_page.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QSlider;
class QSpinBox;
class QTableWidget;
class QTimer;

namespace attnlab {

struct SteeringOutcome;

class SteeringPage : public ExplorePage {
  Q_OBJECT
 public:
  explicit SteeringPage(ExploreState* state, QWidget* parent = nullptr);
  void setPrompts(const QString& toward, const QString& away);
  void setLayer(int layer);
  void setStrength(double alpha);  // the slider moves in steps of 0.25, from -20 to 20
  double strength() const;
  void compute();  // now (the controls' changes compute after a short pause)
  void wait() { job_.wait(); }
  QTableWidget* table() const { return table_; }
  QString status() const;
  const SteeringOutcome* outcome() const { return outcome_.get(); }

 protected:
  void refresh() override { compute(); }
  void modelChanged() override;

 private:
  void fail(const QString& message);

  QLineEdit *toward_, *away_;
  QSpinBox* layer_;
  QSlider* strength_;
  QLabel *strength_label_, *status_;
  QComboBox* where_;
  QTableWidget* table_;
  QTimer* pause_;
  BackgroundJob job_{this};
  std::shared_ptr<const SteeringOutcome> outcome_;
};

// What one steered pass gives: the prediction's entries (classes, or the most likely next tokens
// before or after) with their probabilities before and after, and the vector's norm.
struct SteeringOutcome {
  std::vector<std::string> labels;
  std::vector<double> before, after;
  double vector_norm = 0, residual_norm = 0;  // ||v||, and the mean ||resid_pre_l|| of the explored text
};

}  // namespace attnlab
