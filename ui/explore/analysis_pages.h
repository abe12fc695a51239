// The Explore tab's pages that compute something of their own in the background: LensPage (the
// logit lens, language models) and ImportancePage (head importance by ablation, Michel et al. 2019).
#pragma once

#include <memory>

#include "ui/background_job.h"
#include "ui/explore/explore_page.h"

class QLabel;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace attnlab {

struct LogitLens;

class LensPage : public ExplorePage {
  Q_OBJECT
 public:
  explicit LensPage(ExploreState* state, QWidget* parent = nullptr);
  QTableWidget* table() const { return table_; }
  void wait();  // until the pending computation has been shown (tests, screenshots)
  // The table shown as .csv or .npy ([2, layers, T]: top-1 ids, then their probabilities).
  void exportTo(const QString& path, const QString& ext) const;
  void setWindow(int positions);  // how many positions are read at once (placed again at the end)

 protected:
  void refresh() override;
  void modelChanged() override;

 private:
  // The positions read at once: the LM head (layers x positions x vocabulary products) is the
  // lens's cost, so it runs for the window shown (a 2,048-token input on a 32k vocabulary: 5.9
  // TFLOP whole, 0.7 per window of 256). Tests make it smaller.
  int window_ = 256;
  QLabel* status_;
  QLabel* window_label_;
  QSpinBox* from_;  // the window's first position (the last kWindow by default)
  QTableWidget* table_;
  BackgroundJob job_{this};
  std::shared_ptr<const LogitLens> lens_;  // the table shown, for export
  QStringList labels_;
  int shown_length_ = -1;  // the input length the window was placed for
};

class ImportancePage : public ExplorePage {
  Q_OBJECT
 public:
  explicit ImportancePage(ExploreState* state, QWidget* parent = nullptr);
  QTableWidget* table() const { return table_; }
  void compute();
  void wait() { job_.wait(); }
  bool running() const;  // a computation in flight (its progress bar shown)
  // The table shown as .csv (layer,head,importance) or .npy ([layers, heads]).
  void exportTo(const QString& path, const QString& ext) const;

 protected:
  void refresh() override {}  // computed on request only
  void modelChanged() override;

 private:
  void markAblated();

  QTableWidget* table_;
  QLabel* status_;
  QProgressBar* progress_;
  QPushButton* stop_;
  BackgroundJob job_{this};
  std::shared_ptr<const Tensor> values_;  // [layers, heads] shown, for export
};

}  // namespace attnlab
