// ModelForm: the Train tab's model and optimiser: a new model from the form (a preset fills it)
// or fine-tuning the model open in Explore, and the optimiser's settings.
#pragma once

#include <QGroupBox>
#include <memory>

#include "engine/model/model.h"
#include "engine/train/trainer.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
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
  ModelConfig modelConfig() const;                         // a new model's architecture
  TrainConfig trainConfig() const;                         // epochs, batch, optimiser, dropout, seed, backend
  uint64_t seed() const;

 private:
  void updateStartFrom();

  std::shared_ptr<const Model> base_;
  QComboBox *start_from_, *preset_;
  QCheckBox* freeze_;
  QSpinBox *layers_, *heads_, *dim_, *ff_, *max_len_, *batch_, *epochs_, *seed_;
  QComboBox* precision_;  // fp32 or bf16 products (cpu-bf16)
  QComboBox *positional_, *norm_, *activation_, *tokenizer_, *pooling_;
  QDoubleSpinBox *dropout_, *lr_, *weight_decay_, *clip_;
};

}  // namespace attnlab
