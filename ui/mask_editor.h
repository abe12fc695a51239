// MaskEditor: a T x S grid where clicking or dragging toggles blocked cells, for all heads or
// one head; presets (band, block-diagonal, dilated, invert, clear); undo/redo; .npy save/load.
// Its mask is the "custom" mask of the explore view; every edit emits maskChanged().
#pragma once

#include <QUndoStack>
#include <QWidget>
#include <vector>

#include "engine/formats/npy.h"

class QComboBox;
class QSpinBox;

namespace attnlab {

class MaskGrid;

class MaskEditor : public QWidget {
  Q_OBJECT
 public:
  explicit MaskEditor(QWidget* parent = nullptr);

  // Resizes to T x S with H heads, keeping the overlapping cells.
  void setShape(int T, int S, int heads, const QStringList& row_labels, const QStringList& col_labels);
  int rows() const { return T_; }
  int cols() const { return S_; }
  int heads() const { return H_; }
  // [T * S]: cells the other masks block (drawn in their own colour under the painted mask); empty: none.
  void setOthers(std::vector<uint8_t> blocked);
  const std::vector<uint8_t>& others() const { return others_; }
  // -1: edits apply to every head; else to that head only.
  void setTargetHead(int head);
  int targetHead() const { return target_; }
  bool blocked(int head, int i, int j) const {
    return planes_[static_cast<size_t>(head)][static_cast<size_t>(i) * S_ + j] != 0;
  }
  bool isEmpty() const;
  // [T, S] when every head has the same mask, else [heads, T, S]; bool kind.
  NpyArray toNpy() const;
  void loadNpy(const NpyArray& a);  // Error on a shape that does not fit
  void save(const QString& path) const;
  void load(const QString& path);

  enum class Preset { Band, BlockDiagonal, Dilated, Invert, Clear };
  void applyPreset(Preset p, int param);
  // Toggles or sets cells as one undoable edit (the grid calls this for a click or a drag).
  void setCells(const std::vector<std::pair<int, int>>& cells, bool value);
  QUndoStack* undoStack() { return &undo_; }
  // Where cell (i, j) is drawn, in the grid widget's coordinates (for tests and tooltips).
  QWidget* gridWidget() const;
  QPoint cellCenter(int i, int j) const;
  // 1 = the whole mask in view; larger enlarges it (the view scrolls), up to 40 px cells.
  void setZoom(double zoom);
  double zoom() const;

 signals:
  void maskChanged();

 private:
  friend class MaskEdit;
  using Planes = std::vector<std::vector<uint8_t>>;
  void replace(const Planes& planes, const QString& what);
  void setPlanes(const Planes& p);

  int T_ = 0, S_ = 0, H_ = 1, target_ = -1;
  Planes planes_;
  bool painted_ = false;  // any cell of planes_ blocked (a shape change then keeps them)
  std::vector<uint8_t> others_;
  QUndoStack undo_;
  MaskGrid* grid_;
  QComboBox* head_box_ = nullptr;
  QComboBox* preset_box_ = nullptr;  // say the preset last applied, also when applied from code
  QSpinBox* param_box_ = nullptr;
  QStringList row_labels_, col_labels_;
  friend class MaskGrid;
};

}  // namespace attnlab
