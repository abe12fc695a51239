// Helpers shared by the UI tests: a small random classifier, widgets found by their text.
#pragma once

#include <QCheckBox>
#include <QFile>
#include <QWidget>
#include <catch2/catch.hpp>
#include <memory>

#include "engine/model/model.h"
#include "engine/model/weights.h"
#include "ui/explore_view.h"
#include "ui/main_window.h"

namespace attnlab::test {

// heads: the grid tests need 4, 8 and 12 (other than 4: 4 values a head, one layer);
// layers: 0 for those, or as many as All layers' tests need.
inline std::shared_ptr<const Model> test_model(int max_len = 64, int heads = 4, int layers = 0) {
  ModelConfig c;
  c.vocab_size = 100, c.embed_size = heads == 4 ? 32 : 4 * heads, c.num_heads = heads,
  c.num_layers = layers > 0   ? layers
                 : heads == 4 ? 2
                              : 1;
  c.ff_dim = 32, c.max_len = max_len;
  c.tokenizer = TokenizerKind::Char, c.positional = Positional::Sinusoidal, c.num_classes = 2, c.labels = {"no", "yes"};
  auto m = std::make_shared<Model>();
  m->config = c;
  m->weights = random_weights(c, 1);
  m->vocab = default_vocab(c);
  return m;
}

// A shown main window on test_model() with `text` typed (and `masks` set first) and its pass done.
struct OpenWindow {
  MainWindow w;
  ExploreView* e = nullptr;
  explicit OpenWindow(const QString& text, const QStringList& masks = {}) {
    w.useModel(test_model(), "test");
    w.show();
    e = w.explore();
    if (!masks.isEmpty()) e->setMaskArgs(masks);
    e->setText(text);
    e->flush();
  }
};

inline QCheckBox* checkbox(QWidget* root, const QString& text) {
  for (QCheckBox* c : root->findChildren<QCheckBox*>())
    if (c->text() == text) return c;
  FAIL("no checkbox " << text.toStdString());
  return nullptr;
}

inline QByteArray head_bytes(const QString& path, int n) {
  QFile f(path);
  REQUIRE(f.open(QIODevice::ReadOnly));
  return f.read(n);
}

}  // namespace attnlab::test
