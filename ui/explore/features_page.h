// FeaturesPage: a sparse autoencoder's features on the explored text (engine/analysis/sae.h).
// Open a folder saved in SAELens's format; each token's strongest features, how many are active
// and how much of the activation the reconstruction misses are listed; a feature clamped to a
// value (at every position or one) runs the pass again with the reconstruction error added back,
// and the prediction is shown before and after.
#pragma once

#include <memory>

#include "ui/background_job.h"
#include "ui/explore/explore_page.h"

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace attnlab {

struct Sae;
struct FeaturesOutcome;

class FeaturesPage : public ExplorePage {
  Q_OBJECT
 public:
  explicit FeaturesPage(ExploreState* state, QWidget* parent = nullptr);
  bool openSae(const QString& folder);  // false: the reason is said on the page
  // position -1: every position. False (said on the page) for a feature or position that does not exist.
  bool setClamp(int feature, double value, int position);
  void clearClamp();
  void compute();
  void wait() { job_.wait(); }
  QTableWidget* table() const { return table_; }
  QString status() const;
  QString predictionText() const;
  const FeaturesOutcome* outcome() const { return outcome_.get(); }

 protected:
  void refresh() override { compute(); }
  void modelChanged() override;

 private:
  void fail(const QString& message);
  void enableClamp(bool on);  // the clamp's controls: usable once an autoencoder is open

  std::shared_ptr<const Sae> sae_;
  QPushButton *open_, *clamp_, *unclamp_;
  QLabel *info_, *status_, *prediction_;
  QTableWidget* table_;
  QSpinBox* feature_;
  QDoubleSpinBox* value_;
  QComboBox* at_;
  bool clamped_ = false;
  double clamp_value_ = 0;  // exact (the spin box shows it rounded; a user's edit replaces it)
  BackgroundJob job_{this};
  std::shared_ptr<const FeaturesOutcome> outcome_;
};

struct FeaturesOutcome {
  std::vector<std::string> tokens;
  std::vector<std::vector<std::pair<int, float>>> strongest;  // per token, up to 6
  std::vector<int> active;
  std::vector<double> error;          // ||x - x^|| / ||x||
  std::vector<std::string> labels;    // the prediction's entries (classes or top tokens)
  std::vector<double> before, after;  // their probabilities (after: with the clamp; empty without)
};

}  // namespace attnlab
