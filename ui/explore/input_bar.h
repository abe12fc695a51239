// InputBar: the Explore tab's input: the text, sentence B (pair templates), the cross text, the
// token-view options, and the token strip that shows the input as the model reads it (ids,
// unknown words, global tokens to tick, tokens to select).
#pragma once

#include <QWidget>
#include <vector>

#include "ui/explore_controller.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QListView;

namespace attnlab {

class TokenListModel;

class InputBar : public QWidget {
  Q_OBJECT
 public:
  explicit InputBar(QWidget* parent = nullptr);
  void setModel(const Model& model);  // which boxes and options this model's tokenizer has

  ExploreInput input() const;  // what the controller computes from
  void setText(const QString& text);
  QString text() const;
  void setCrossText(const QString& text);  // empty: self-attention
  void setPairText(const QString& text);
  // An encoder-decoder's target (the text box is then its source) and the attention drawn.
  void setTargetText(const QString& text);
  void setPart(Seq2SeqPart part);
  void setTokenView(bool hide_special, bool merge_pieces);
  bool crossOn() const;
  TokenListModel* tokenModel() const { return tokens_; }
  // The prepared input: the strip shows it (and says what its colours mean); notices below it.
  void showPrepared(const PreparedInput& prepared);
  void setNotice(const QString& text);
  void selectTokens(const std::vector<int>& positions);  // Error for one past the end
  // Tokens from this position on were generated (drawn in their own colour until the user edits
  // the text); -1: none.
  void setGeneratedFrom(int position);
  QString tokenViewNote() const;  // what hide / merge did, for exports

 signals:
  void changed();  // anything the pass reads
  void selectionChanged(const std::vector<int>& positions);

 protected:
  bool eventFilter(QObject* obj, QEvent* ev) override;

 private:
  void fitStrip();
  void updateLegend();

  QLineEdit *text_, *cross_text_, *pair_text_, *target_text_;
  QLabel* target_label_;
  QComboBox* part_;  // an encoder-decoder's attention: cross, decoder, encoder
  QCheckBox* cross_on_;
  QLabel* pair_label_;
  QLabel *text_label_, *file_label_;  // file_label_: in place of the boxes while an attention file is shown
  QCheckBox *hide_special_, *merge_pieces_;
  QListView* strip_;
  TokenListModel* tokens_;
  QLabel* legend_;
  QLabel* notice_;
  bool any_unknown_ = false;
};

}  // namespace attnlab
