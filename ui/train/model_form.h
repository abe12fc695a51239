// ModelForm: the Train tab's model and optimiser: a new model from the form (a preset fills it)
// or fine-tuning the model open in Explore, and the optimiser's settings.
#pragma once

#include <QGroupBox>
#include <memory>

#include "engine/model/model.h"
#include "engine/train/tasks.h"
#include "engine/train/trainer.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QFormLayout;
class QLabel;
class QSpinBox;

namespace attnlab {

class ModelForm : public QGroupBox {
  Q_OBJECT
 public:
  explicit ModelForm(QWidget* parent = nullptr);
  void applyPreset(const QString& name);  // "tiny (fast)", "article model (d=128, 8 heads)", "default"
  // The model open in Explore: "start from" can fine-tune it (a new classifier on its encoder).
  void setBaseModel(std::shared_ptr<const Model> model, const QString& name);
  void setFineTune(bool on, bool freeze);
  bool fineTune() const;  // on and a base model is there
  const std::shared_ptr<const Model>& baseModel() const { return base_; }
  void setEpochs(int epochs);
  void useShipped(const QString& tokenizer, int max_len);  // a shipped dataset's tokenizer and length
  // A language-model preset: the form takes its layers, heads, width, feed-forward, learning
  // rate, epochs, batch and seed (all still editable); the classifier's fields (positions, norm,
  // activation, tokenizer, pooling, length, fine-tuning) are the preset's architecture's and are
  // disabled. useClassifier() enables them again (a dataset was chosen).
  void useLmPreset(const LmPreset& preset);
  void useClassifier();
  const LmPreset* lmPreset() const { return lm_; }
  // A new language model on a text of one's own (new_text_language_model): the sizes and the
  // optimiser as for a preset, plus the tokenizer (char or word) and "max length", the length of
  // the sequences the text is cut into; a GPT-2-style decoder. useClassifier() or useLmPreset()
  // leave it.
  void useTextLm(const ShippedText* row = nullptr);  // a shipped text's settings, or the defaults
  bool textLm() const { return text_; }
  TextLmOptions textOptions() const;           // the tokenizer and the sequence length
  bool setTextTokenizer(const QString& name);  // false: not offered (a text's model: char, word, bpe)
  LmShape lmShape() const;                     // the preset's (or a text model's) architecture with the form's sizes
  ModelConfig modelConfig() const;             // a new model's architecture
  TrainConfig trainConfig() const;             // epochs, batch, optimiser, dropout, seed, backend
  uint64_t seed() const;

 signals:
  void textOptionsChanged();  // a text's model: its tokenizer or length changed by the user

 private:
  void updateStartFrom();
  void showLmRows(bool lm);
  void offerBpe(bool offer);
  bool lm() const { return lm_ || text_; }  // a language model: a preset's or a text's

  std::shared_ptr<const Model> base_;
  const LmPreset* lm_ = nullptr;
  bool text_ = false;
  QComboBox *start_from_, *preset_;
  QCheckBox* freeze_;
  QSpinBox *layers_, *heads_, *dim_, *ff_, *max_len_, *batch_, *epochs_, *seed_;
  QComboBox* precision_;  // fp32 or bf16 products (cpu-bf16)
  QComboBox *positional_, *norm_, *activation_, *tokenizer_, *pooling_;
  QDoubleSpinBox *dropout_, *lr_, *weight_decay_, *clip_;
  QFormLayout* layout_;
  QLabel* arch_;  // a language-model preset's architecture, in place of the classifier's rows
};

}  // namespace attnlab
