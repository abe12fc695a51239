// The Explore tab's left column: PredictionPanel (a classifier's label or a language model's next
// tokens: what the model says, above how it is looked at), MaskPanel (the masks of every pass and
// a preview of their effect) and DisplayPanel (colour map, colour scale, values in cells).
#pragma once

#include "ui/explore/explore_page.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QSpinBox;

namespace attnlab {

class HeatmapView;
class MaskEditor;
class TokenListModel;

class PredictionPanel : public ExplorePage {
  Q_OBJECT
 public:
  explicit PredictionPanel(ExploreState* state, QWidget* parent = nullptr);
  void setNextTokenPosition(int position);  // -1: after the last token
  QString text() const;

 protected:
  void refresh() override;

 private:
  QLabel* prediction_;
  QSpinBox* next_pos_;
};

class MaskPanel : public ExplorePage {
  Q_OBJECT
 public:
  // tokens: where global tokens are ticked; editor: the painted mask ("custom").
  MaskPanel(ExploreState* state, TokenListModel* tokens, MaskEditor* editor, QWidget* parent = nullptr);
  MaskSpec mask() const;                      // the masks of the next pass
  void setMaskArgs(const QStringList& args);  // --mask style ("causal", "window:8"); Error on a bad one
  QStringList maskArgs() const;
  void setPadTo(int length);
  int padTo() const;
  void setCustomOn(bool on);  // the painted mask applies (an edit turns it on by itself)
  bool customOn() const;
  // Masks a pretrained model never saw in training (what they show is an experiment).
  bool experimental() const;

 signals:
  void changed();

 protected:
  void refresh() override;
  void modelChanged() override;

 private:
  TokenListModel* tokens_;
  MaskEditor* editor_;
  QCheckBox *padding_, *causal_, *window_on_, *strided_on_, *custom_on_;
  QSpinBox *pad_to_, *window_, *stride_;
  HeatmapView* preview_;
  QLabel *visible_swatch_, *blocked_swatch_;  // the preview's legend
};

class DisplayPanel : public QWidget {
  Q_OBJECT
 public:
  DisplayPanel(ExploreState* state, QWidget* parent = nullptr);
};

}  // namespace attnlab
