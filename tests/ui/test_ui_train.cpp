// The Train tab: training from the tab, bf16, Stop, malformed data, closing while training,
// the dataset preview, the tab after a run, fine-tuning the model open in Explore.
// long inputs, export files, a broken model folder, and the token model's contract.
#include <QAbstractItemModelTester>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFile>
#include <QImage>
#include <QLabel>
#include <QMenuBar>
#include <QLineEdit>
#include <QListWidget>
#include <QTabWidget>
#include <QStatusBar>
#include <QScrollArea>
#include <QSettings>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>
#include <qcustomplot.h>
#include <QThread>
#include <QTimer>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "engine/analysis/methods.h"
#include "engine/compute/forward.h"
#include "engine/compute/lm.h"
#include "engine/formats/npy.h"
#include "engine/compute/ops.h"
#include "engine/train/trainer.h"
#include "ui/colormaps.h"
#include "ui/explore_view.h"
#include "ui/tour.h"
#include "ui/forward_runner.h"
#include "ui/heatmap_view.h"
#include "ui/line_view.h"
#include "ui/main_window.h"
#include "ui/mask_editor.h"
#include "ui/token_model.h"
#include "tests/engine/hf_test_model.h"
#include "tests/ui/ui_test_util.h"

using namespace attnlab;
using namespace attnlab::test;

// ---------------------------------------------------------------- the Train tab

#include <QElapsedTimer>
#include <QPushButton>

#include "engine/core/io_util.h"
#include "engine/analysis/detectors.h"
#include "engine/train/tasks.h"
#include "ui/curve_view.h"
#include "ui/dataset_model.h"
#include "ui/train_view.h"

namespace {
QString write_tsv(const QTemporaryDir& dir, const QString& name, const std::string& text) {
  const QString path = dir.filePath(name);
  write_file_atomic(path.toStdString(), text);
  return path;
}

// The Train tab's "Open in Explore", clicked: the Explore tab with the trained model's pass on the probe.
ExploreView* open_in_explore(MainWindow& w, TrainView* t) {
  QPushButton* open = nullptr;
  for (QPushButton* b : t->findChildren<QPushButton*>())
    if (b->text() == "Open in Explore") open = b;
  REQUIRE(open);
  open->click();
  ExploreView* e = w.explore();
  e->flush();
  REQUIRE(e->result());
  return e;
}
}  // namespace

TEST_CASE("training a tiny dataset adds curve points; the saved model opens in Explore", "[ui][train]") {
  QTemporaryDir dir;
  MainWindow w;
  TrainView* t = w.train();
  REQUIRE(t->loadDataset(write_tsv(dir, "neg.tsv", examples_to_tsv(make_negation_task(300, 3)))));
  t->applyPreset("tiny (fast)");
  t->setEpochs(3);
  REQUIRE(t->startTraining());
  CHECK(t->isTraining());
  t->waitForFinish();
  CHECK_FALSE(t->isTraining());
  CHECK(t->lossCurve()->pointCount(0) > 10);      // one point per step
  CHECK(t->accuracyCurve()->pointCount(0) == 3);  // one per epoch
  CHECK(t->snapshotCount() >= 2);                 // the probe's heads over time
  REQUIRE(t->trainedModel());
  const QString out = dir.filePath("model");
  REQUIRE(t->saveModel(out));
  REQUIRE(w.openModel(out));
  w.explore()->setText("the film was good");
  w.explore()->flush();
  REQUIRE(w.explore()->result());
  CHECK(w.explore()->model()->config.labels == std::vector<std::string>{"negative", "positive"});
  CHECK(w.explore()->headCount() == 4);
}

TEST_CASE(
    "the induction preset in the Train tab: head scores as it trains, the phase change marked, Explore opens "
    "it on the probe",
    "[ui][train][lm]") {
  MainWindow w;
  TrainView* t = w.train();
  const LmPreset& p = lm_preset("induction");
  REQUIRE(t->chooseLmPreset("induction"));
  CHECK(t->datasetChoiceText() == p.label);
  auto* positions = t->findChild<QComboBox*>("startFrom");
  REQUIRE(positions);
  CHECK_FALSE(positions->isEnabled());  // a new decoder: nothing to fine-tune
  // before the run, the charts it will draw: loss and head scores, no accuracy or confusion matrix
  CHECK(t->accuracyCurve()->isHidden());
  CHECK(t->confusionTable()->isHidden());
  CHECK_FALSE(t->scoresCurve()->isHidden());
  REQUIRE(t->startTraining());
  t->waitForFinish();
  REQUIRE(t->trainedModel());
  const Model& m = *t->trainedModel();
  CHECK(m.config.lm_head);
  CHECK(m.config.num_layers == p.shape.layers);
  CHECK(t->confusionTable()->isHidden());
  CurveView* scores = t->scoresCurve();
  CHECK(scores->isVisibleTo(t));
  REQUIRE(scores->seriesCount() == 4);  // induction and previous-token for each of the 2 heads
  REQUIRE(t->snapshotCount() >= 10);
  CHECK(scores->pointCount(1) == t->snapshotCount());
  // the phase change is marked on the loss curve, and the message says when
  CHECK(t->phaseChangeStep() > 0);
  CHECK(t->lossCurve()->markerCount() == 1);
  CHECK(t->message().contains(QString("phase change came at step %1").arg(t->phaseChangeStep())));

  // Explore opens the model on the probe, and the curve's last point is its layer-1 head's
  // induction score on that text (the final weights; the same pass)
  ExploreView* e = open_in_explore(w, t);
  REQUIRE(e->result()->ids.size() == static_cast<size_t>(2 * p.task.seq));
  const Tensor ind = head_detector_scores(*e->result(), HeadDetector::Induction, p.task.seq);
  const QCPGraph* g = scores->plot()->graph(1);  // L1H0 induction
  REQUIRE(g->dataCount() > 0);
  CHECK(std::fabs(g->data()->at(g->dataCount() - 1)->value - ind.at(1, 0)) < 1e-5);
  CHECK(ind.at(1, 0) >= 0.5f);

  // the duplicate-token scores instead, redrawn from every snapshot, the phase change still marked;
  // the last point is layer 1's head on the same pass
  auto* kind = t->findChild<QComboBox*>("scoreKind");
  REQUIRE(kind);
  CHECK(kind->isVisibleTo(t));
  kind->setCurrentIndex(1);
  REQUIRE(scores->seriesCount() == 2);
  CHECK(scores->pointCount(1) == t->snapshotCount());
  CHECK(scores->markerCount() == 1);
  const Tensor dup = head_detector_scores(*e->result(), HeadDetector::DuplicateToken, p.task.seq);
  const QCPGraph* gd = scores->plot()->graph(1);  // L1H0 duplicate
  CHECK(std::fabs(gd->data()->at(gd->dataCount() - 1)->value - dup.at(1, 0)) < 1e-5);
  kind->setCurrentIndex(0);
  CHECK(scores->seriesCount() == 4);
  CHECK(scores->pointCount(1) == t->snapshotCount());

  // the weight norms: one line per layer and one for the rest, a point per snapshot, the last the
  // trained model's
  auto* norms = t->findChild<CurveView*>("weightNorms");
  REQUIRE(norms);
  CHECK(norms->isVisibleTo(t));
  REQUIRE(norms->seriesCount() == m.config.num_layers + 1);
  CHECK(norms->pointCount(0) == t->snapshotCount());
  const std::vector<double> wn = weight_norms(m.config, m.weights);
  for (int k = 0; k < norms->seriesCount(); ++k) {
    const QCPGraph* gn = norms->plot()->graph(k);
    CHECK(gn->data()->at(gn->dataCount() - 1)->value == Approx(wn[static_cast<size_t>(k)]).epsilon(1e-12));
  }

  // a dataset again: the classifier's form and charts
  QTemporaryDir dir;
  REQUIRE(t->loadDataset(write_tsv(dir, "neg.tsv", examples_to_tsv(make_negation_task(60, 3)))));
  CHECK(positions->isEnabled());
  CHECK_FALSE(t->trainedModel());
  CHECK(t->scoresCurve()->isHidden());
  CHECK_FALSE(t->accuracyCurve()->isHidden());
  CHECK(t->lossCurve()->markerCount() == 0);
  t->setEpochs(1);
  REQUIRE(t->startTraining());
  t->waitForFinish();
  CHECK(t->scoresCurve()->isHidden());
  CHECK_FALSE(t->confusionTable()->isHidden());
  CHECK(t->trainedModel()->config.num_classes == 2);
  CHECK(norms->isHidden());  // a classifier's run draws no weight norms
  CHECK(kind->isHidden());
}

TEST_CASE(
    "the grokking preset in the Train tab: training and held-out accuracy over log-scaled steps, the model "
    "reads numbers",
    "[ui][train][lm]") {
  MainWindow w;
  TrainView* t = w.train();
  const LmPreset& p = lm_preset("grokking");
  REQUIRE(t->chooseLmPreset("grokking"));
  CHECK(t->datasetChoiceText() == p.label);
  // before the run, the charts it will draw: the loss and both accuracies, no head scores, no
  // confusion matrix; the weight decay grokking needs is in the form
  CurveView* grok = t->findChild<CurveView*>("grokCurve");
  REQUIRE(grok);
  CHECK_FALSE(grok->isHidden());
  CHECK(t->scoresCurve()->isHidden());
  CHECK(t->accuracyCurve()->isHidden());
  CHECK(t->confusionTable()->isHidden());
  CHECK(grok->plot()->xAxis->scaleType() == QCPAxis::stLogarithmic);
  auto* decay = t->findChild<QDoubleSpinBox*>("weightDecay");
  REQUIRE(decay);
  CHECK(decay->value() == Approx(1.0));
  // the probe is a held-out sum, in the task's numbers: "a b ="
  const QStringList probe = t->probeText().split(' ');
  REQUIRE(probe.size() == 3);
  CHECK(probe[2] == "=");
  bool ok_a = false, ok_b = false;
  const int a = probe[0].toInt(&ok_a), b = probe[1].toInt(&ok_b);
  CHECK((ok_a && ok_b && a >= 0 && a < 59 && b >= 0 && b < 59));
  // a short run (the preset's is 3,000 steps): one point per step on both series
  t->setEpochs(150);
  REQUIRE(t->startTraining());
  t->waitForFinish();
  REQUIRE(t->trainedModel());
  const Model& m = *t->trainedModel();
  CHECK(m.vocab.id("58") == 3 + 58);
  CHECK(m.vocab.id("=") == 3 + 59);
  CHECK(t->progressText() == "finished after 150 of 150 steps");  // the full batch: a step an epoch
  CHECK(grok->pointCount(0) == 150);
  CHECK(grok->pointCount(1) == 150);
  auto* norms = t->findChild<CurveView*>("weightNorms");
  REQUIRE(norms);
  CHECK(norms->isVisibleTo(t));
  CHECK(norms->seriesCount() == 2);  // the layer, and the embeddings and head
  CHECK(norms->pointCount(0) == t->snapshotCount());
  // full batch, weight decay 1: the 1,044 training pairs are fitted well within 150 steps, the
  // held-out ones not yet (they stay near a third for ~1,500 steps here)
  CHECK(t->memorisedStep() > 0);
  CHECK(t->memorisedStep() <= 150);
  CHECK(t->generalisedStep() == -1);
  CHECK(grok->markerCount() == 1);
  CHECK(t->message().contains(QString("learnt at step %1").arg(t->memorisedStep())));
  CHECK(t->message().contains("train longer"));
  // Explore opens it on the probe: the sum's tokens are the numbers
  ExploreView* e = open_in_explore(w, t);
  CHECK(e->result()->tokens == std::vector<std::string>{probe[0].toStdString(), probe[1].toStdString(), "="});
  // the induction preset again: its charts, not grokking's
  REQUIRE(t->chooseLmPreset("induction"));
  CHECK(grok->isHidden());
  CHECK_FALSE(t->scoresCurve()->isHidden());
  CHECK(decay->value() == Approx(0.0));
}

TEST_CASE("the reverse preset in the Train tab: held-out accuracy by epoch, heads on a held-out sequence",
          "[ui][train][lm]") {
  MainWindow w;
  TrainView* t = w.train();
  const LmPreset& p = lm_preset("reverse");
  REQUIRE(t->chooseLmPreset("reverse"));
  CHECK(t->datasetChoiceText() == p.label);
  // a task without head detectors or a grokking gap: the loss and the accuracy by epoch
  CurveView* grok = t->findChild<CurveView*>("grokCurve");
  REQUIRE(grok);
  CHECK(grok->isHidden());
  CHECK(t->scoresCurve()->isHidden());
  CHECK_FALSE(t->accuracyCurve()->isHidden());
  CHECK(t->confusionTable()->isHidden());
  // the probe: a held-out sequence up to its last token, "|" in the middle, in the task's tokens
  const QStringList probe = t->probeText().split(' ');
  const qsizetype bar = probe.indexOf("|");
  REQUIRE(bar >= 4);
  CHECK(probe.size() == 2 * bar);  // L tokens, "|", L - 1 of the reversal
  CHECK(probe[bar + 1] == probe[bar - 1]);
  t->setEpochs(2);
  REQUIRE(t->startTraining());
  t->waitForFinish();
  REQUIRE(t->trainedModel());
  CHECK(t->trainedModel()->vocab.id("|") == 15);
  CHECK(t->accuracyCurve()->pointCount(0) == 2);
  CHECK(t->scoresCurve()->isHidden());
  CHECK(t->message().contains("next-token accuracy"));
  CHECK_FALSE(t->message().contains("induction"));
  CHECK(t->snapshotCount() >= 2);
  // saved as transformers saves GPT2LMHeadModel, which attnlab opens again with the same weights
  QTemporaryDir dir;
  const QString out = dir.filePath("reverse");
  REQUIRE(t->saveModel(out));
  const Model back = load_model(out.toStdString());
  CHECK(back.hf.model_type == "gpt2");
  CHECK(back.vocab.id("|") == 15);
  CHECK(back.weights.embedding.data == t->trainedModel()->weights.embedding.data);
}

TEST_CASE("a text file in the Train tab: a new character model learns to continue it, its heads on a held-out piece",
          "[ui][train][lm]") {
  MainWindow w;
  TrainView* t = w.train();
  QTemporaryDir dir;
  // a text of a few sentences in varied order (seeded), with newlines
  const char* sentences[] = {"The cat sat on the mat.", "A dog ran to the park.", "Birds sing at dawn.",
                             "The sun is warm today.", "We read a book."};
  std::mt19937 gen(5);
  std::string text;
  for (int k = 0; k < 200; ++k) text += std::string(sentences[gen() % 5]) + (k % 4 == 3 ? "\n" : " ");
  const QString path = write_tsv(dir, "story.txt", text);
  // what cannot be trained on says so, and nothing changes
  CHECK_FALSE(t->loadLmText(dir.filePath("none.txt")));
  CHECK(t->message().contains("could not be read"));
  CHECK_FALSE(t->loadLmText(write_tsv(dir, "blank.txt", " \n\n ")));
  CHECK(t->message().contains("has no text"));

  REQUIRE(t->loadLmText(path));
  CHECK(t->datasetChoiceText() == "story.txt");
  CHECK(t->message().isEmpty());
  CHECK_FALSE(t->accuracyCurve()->isHidden());  // the loss and the held-out accuracy by epoch
  CHECK(t->scoresCurve()->isHidden());
  CHECK(t->confusionTable()->isHidden());
  auto* arch = t->findChild<QLabel*>("lmArchitecture");
  REQUIRE(arch);
  CHECK(arch->isVisibleTo(t));
  CHECK(arch->text().contains("max length"));
  t->setEpochs(1);
  REQUIRE(t->startTraining());
  t->waitForFinish();
  REQUIRE(t->trainedModel());
  const Model& m = *t->trainedModel();
  // the vocabulary: [PAD] [UNK] [CLS] and the text's characters, white space as one " "
  std::set<std::string> chars;
  for (const char ch : text) chars.insert(std::isspace(static_cast<unsigned char>(ch)) ? " " : std::string(1, ch));
  CHECK(m.vocab.size() == static_cast<int>(chars.size()) + 3);
  CHECK(m.config.tokenizer == TokenizerKind::Char);
  CHECK(m.config.lm_head);
  CHECK(m.config.max_len == 64);  // the form's max length: the sequences' length
  CHECK(t->accuracyCurve()->pointCount(0) == 1);
  CHECK(t->message().contains("next-token accuracy"));
  auto* norms = t->findChild<CurveView*>("weightNorms");
  REQUIRE(norms);
  CHECK(norms->seriesCount() == m.config.num_layers + 1);
  // the probe is a held-out piece of the text (its last tenth), its white space as the model reads it
  const QString probe = t->probeText();
  CHECK(probe.size() >= 20);
  const QString flat = QString::fromStdString(text).simplified();
  CHECK(flat.contains(probe));
  CHECK(flat.lastIndexOf(probe) >= flat.size() * 8 / 10);  // (the sentences repeat: found earlier too)
  // Explore opens the model on it: the same characters
  ExploreView* e = open_in_explore(w, t);
  std::string joined;
  for (const std::string& tok : e->result()->tokens) joined += tok;
  CHECK(QString::fromStdString(joined) == probe);
  // saved as a Hugging Face GPT-2 folder whose tokenizer.json reads the text as the model did
  const QString out = dir.filePath("story-model");
  REQUIRE(t->saveModel(out));
  const Model back = load_model(out.toStdString());
  CHECK(back.hf.model_type == "gpt2");
  CHECK(back.vocab.size() == m.vocab.size());
  CHECK(prepare_text(back, probe.toStdString()).ids == prepare_text(m, probe.toStdString()).ids);
  // a dataset again: the classifier's form, the text gone from the choice
  REQUIRE(t->loadDataset(write_tsv(dir, "neg.tsv", examples_to_tsv(make_negation_task(60, 3)))));
  CHECK(t->datasetChoiceText() == "neg.tsv");
  CHECK_FALSE(arch->isVisibleTo(t));
}

TEST_CASE("a text file in the Train tab read by a byte-level BPE learned from it", "[ui][train][lm][bpe]") {
  MainWindow w;
  TrainView* t = w.train();
  QTemporaryDir dir;
  std::string text;
  for (int k = 0; k < 120; ++k)
    text += std::string(k % 3 ? "The mind is wayward and hard to hold. " : "Attention heads attend, ") +
            (k % 5 == 4 ? "\n" : "");
  REQUIRE(t->loadLmText(write_tsv(dir, "verses.txt", text)));
  auto* tokenizer = t->findChild<QComboBox*>("trainTokenizer");
  REQUIRE(tokenizer);
  REQUIRE(tokenizer->findText("bpe") >= 0);  // offered for a text's model
  QSignalSpy said(t, &TrainView::status);
  CHECK_FALSE(t->setTextTokenizer("sentencepiece"));  // (attnlab --train-tokenizer's refusal)
  CHECK(said.count() == 0);
  REQUIRE(t->setTextTokenizer("bpe"));  // the epochs are estimated again for the BPE's fewer tokens
  CHECK(tokenizer->currentText() == "bpe");
  REQUIRE(said.count() == 1);
  CHECK(said.takeFirst().at(0).toString().contains("bpe tokenizer"));
  t->setEpochs(1);
  REQUIRE(t->startTraining());
  t->waitForFinish();
  REQUIRE(t->trainedModel());
  const Model& m = *t->trainedModel();
  // a GPT-2 folder's model from the start: the learned tokenizer.json, <|endoftext|> first
  CHECK(m.is_hf());
  REQUIRE(m.tokenizer);
  CHECK(m.vocab.id("<|endoftext|>") == 0);
  CHECK(m.vocab.size() > 257);
  CHECK(m.vocab.size() <= 1024);
  InputOptions keep;
  keep.overflow = Overflow::Keep;
  CHECK(m.tokenizer->decode(prepare_text(m, text, keep).ids) == text);
  // Explore opens the model on the probe, the ids its tokenizer reads from the text shown
  const QString probe = t->probeText();
  CHECK(QString::fromStdString(text).contains(probe));
  ExploreView* e = open_in_explore(w, t);
  CHECK(e->result()->ids == prepare_text(m, probe.toStdString()).ids);
  auto* summary = w.findChild<QLabel*>("modelSummary");
  REQUIRE(summary);
  CHECK(summary->text().startsWith(" trained on verses.txt - GPT2LMHeadModel"));
  w.tabs()->setCurrentWidget(t);  // on the Train tab the top bar says the model is Explore's
  CHECK(summary->text().startsWith(" In Explore: trained on verses.txt - GPT2LMHeadModel"));
  // saved: the same tokenizer.json
  const QString out = dir.filePath("bpe-model");
  REQUIRE(t->saveModel(out));
  const Model back = load_model(out.toStdString());
  CHECK(back.hf.model_type == "gpt2");
  CHECK(back.hf.tokenizer_files.at("tokenizer.json") == m.hf.tokenizer_files.at("tokenizer.json"));
  // a classifier's dataset: bpe leaves the choices (a classifier's vocabulary is words or characters)
  REQUIRE(t->loadDataset(write_tsv(dir, "neg.tsv", examples_to_tsv(make_negation_task(60, 3)))));
  CHECK(tokenizer->findText("bpe") < 0);
  CHECK(tokenizer->currentText() == "word");
}

TEST_CASE("the shipped text in the Train tab: chosen from the Data list with its row's model and run",
          "[ui][train][lm]") {
  MainWindow w;
  TrainView* t = w.train();
  t->setDataDir(ATTNLAB_RESOURCE_DIR "/data");  // as the app finds it installed
  const ShippedText& row = shipped_texts().front();
  auto* choice = t->findChild<QComboBox*>("dataChoice");
  REQUIRE(choice);
  const int at = choice->findData(QString("shipped-text:0"));
  REQUIRE(at >= 0);
  emit choice->activated(at);  // as a click on the entry
  CHECK(t->datasetChoiceText() == row.label);
  CHECK(t->message().isEmpty());
  // the preview starts at the verses' title, past the archive's notice; characters counted, not bytes
  auto* summary = t->findChild<QLabel*>("dataSummary");
  REQUIRE(summary);
  CHECK(summary->text().contains("... THE DHAMMAPADA An anthology of 423 Buddhist verses"));
  CHECK_FALSE(summary->text().contains("coombspapers"));
  QFile f(ATTNLAB_RESOURCE_DIR "/data/" + QString(row.file));
  REQUIRE(f.open(QIODevice::ReadOnly));
  CHECK(summary->text().contains(QString("%1 characters").arg(QString::fromUtf8(f.readAll()).size())));
  auto* arch = t->findChild<QLabel*>("lmArchitecture");
  REQUIRE(arch);
  CHECK(arch->isVisibleTo(t));
  t->setEpochs(1);  // the row's are 20
  REQUIRE(t->startTraining());
  t->waitForFinish();
  REQUIRE(t->trainedModel());
  const Model& m = *t->trainedModel();
  CHECK(m.config.num_layers == row.shape.layers);
  CHECK(m.config.embed_size == row.shape.dim);
  CHECK(m.config.ff_dim == row.shape.ff);
  CHECK(m.config.max_len == row.text.seq);
  CHECK(m.config.tokenizer == TokenizerKind::Char);
  CHECK(m.vocab.size() == 80);  // the text's 77 characters (white space as one) and [PAD] [UNK] [CLS]
  CHECK(m.vocab.id("M") >= 3);
  CHECK(t->accuracyCurve()->pointCount(0) == 1);
  // a user's text afterwards is listed by its own name; the shipped one can be chosen again
  QTemporaryDir dir;
  REQUIRE(t->loadLmText(write_tsv(dir, "mine.txt", std::string(40, 'a') + std::string(3000, 'b') + " ab ba")));
  CHECK(t->datasetChoiceText() == "mine.txt");
  emit choice->activated(choice->findData(QString("shipped-text:0")));
  CHECK(t->datasetChoiceText() == row.label);
}

TEST_CASE("bf16 precision in the Train tab trains with bf16 products and learns the task", "[ui][train][bf16]") {
  QTemporaryDir dir;
  MainWindow w;
  TrainView* t = w.train();
  auto* precision = t->findChild<QComboBox*>("trainPrecision");
  REQUIRE(precision);
  if (!bf16_available()) {
    CHECK_FALSE(precision->isEnabled());
    return;
  }
  REQUIRE(t->loadDataset(write_tsv(dir, "neg.tsv", examples_to_tsv(make_negation_task(2000, 5)))));
  t->applyPreset("tiny (fast)");
  t->setEpochs(8);
  precision->setCurrentIndex(1);  // "bf16", or "bf16 (slower here)" where this CPU measured it slower
  REQUIRE(precision->currentText().startsWith("bf16"));
  // the item says so exactly when the engine does
  CHECK((precision->currentText() == "bf16") == bf16_notice().empty());
  REQUIRE(t->startTraining());
  t->waitForFinish();
  REQUIRE(t->trainedModel());
  CHECK(t->accuracyCurve()->pointCount(0) == 8);
  // the model learned the task: it reads the negation as the fp32 model does
  auto backend = make_backend("cpu");
  const Model& m = *t->trainedModel();
  int right = 0;
  for (const auto& [text, label] :
       std::vector<std::pair<std::string, std::string>>{{"the film was good", "positive"},
                                                        {"the film was not good", "negative"},
                                                        {"the food was bad", "negative"},
                                                        {"the food was not bad", "positive"}}) {
    ForwardRequest req;
    req.ids = prepare_text(m, text).ids;
    right += m.label(run_forward(m, *backend, req).predicted) == label;
  }
  CHECK(right >= 3);
}

TEST_CASE("Stop ends training within a second", "[ui][train]") {
  QTemporaryDir dir;
  MainWindow w;
  TrainView* t = w.train();
  REQUIRE(t->loadDataset(write_tsv(dir, "neg.tsv", examples_to_tsv(make_negation_task(2000, 4)))));
  // The guarantee is "before the next batch"; a small model keeps one batch far below a second
  // even in the sanitizer build, so the bound tests the mechanism, not the machine's speed.
  t->applyPreset("tiny (fast)");
  t->setEpochs(200);
  REQUIRE(t->startTraining());
  QElapsedTimer warm;
  warm.start();
  while (t->lossCurve()->pointCount(0) < 2 && warm.elapsed() < 20000)
    QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
  QElapsedTimer timer;
  timer.start();
  t->stopTraining();
  t->waitForFinish();
  INFO("stopped after " << timer.elapsed() << " ms");
  CHECK(timer.elapsed() < 1000);
  CHECK_FALSE(t->isTraining());
  CHECK(t->trainButton()->isEnabled());
  CHECK(t->message().contains("stopped by the user"));
}

TEST_CASE("a malformed TSV shows its errors and does not start training", "[ui][train][errors]") {
  QTemporaryDir dir;
  MainWindow w;
  TrainView* t = w.train();
  const QString bad =
      write_tsv(dir, "bad.tsv", "text\tlabel\nthe film was good\tpositive\n\tnegative\nok\tpositive\textra\n");
  CHECK_FALSE(t->loadDataset(bad));
  CHECK(t->message().contains("2 row(s) have problems"));
  CHECK_FALSE(t->startTraining());
  CHECK_FALSE(t->isTraining());
  CHECK_FALSE(t->loadDataset(dir.filePath("missing.tsv")));
  CHECK(t->message().contains("cannot open"));
  CHECK_FALSE(t->startTraining());
}

TEST_CASE("closing the window during training stops it cleanly", "[ui][train]") {
  QTemporaryDir dir;
  auto* w = new MainWindow;
  TrainView* t = w->train();
  REQUIRE(t->loadDataset(write_tsv(dir, "neg.tsv", examples_to_tsv(make_negation_task(2000, 5)))));
  t->setEpochs(100);
  REQUIRE(t->startTraining());
  QElapsedTimer timer;
  timer.start();
  w->close();  // closeEvent stops the trainer and waits for it
  delete w;
  CHECK(timer.elapsed() < 2000);
}

TEST_CASE("the dataset preview model passes QAbstractItemModelTester", "[ui][models]") {
  DatasetTableModel m;
  QAbstractItemModelTester tester(&m, QAbstractItemModelTester::FailureReportingMode::Fatal);
  m.setRows(make_negation_task(5, 1));
  CHECK(m.rowCount() == 5);
  CHECK(m.columnCount() == 3);
  CHECK(m.data(m.index(0, 2), Qt::DisplayRole).toString() == QString::fromStdString(make_negation_task(5, 1)[0].label));
  m.setRows({});
  CHECK(m.rowCount() == 0);
}

TEST_CASE("the Train tab after a run: no time left shown, labelled confusion matrix, another dataset clears the run",
          "[ui][train][stale]") {
  QTemporaryDir dir;
  MainWindow w;
  TrainView* t = w.train();
  REQUIRE(t->loadDataset(write_tsv(dir, "neg.tsv", examples_to_tsv(make_negation_task(300, 3)))));
  t->applyPreset("tiny (fast)");
  t->setEpochs(1);
  REQUIRE(t->startTraining());
  t->waitForFinish();
  CHECK_FALSE(t->progressText().contains("left"));  // the estimate is for running runs only
  CHECK(t->progressText().startsWith("finished"));
  QTableWidget* cm = t->confusionTable();
  REQUIRE(cm->rowCount() == 2);
  CHECK(cm->verticalHeaderItem(0)->text() == "actual negative");
  CHECK(cm->horizontalHeaderItem(1)->text() == "predicted positive");
  REQUIRE(t->snapshotCount() >= 1);
  // Another dataset: nothing of the run stays (heads, timeline, matrix, curves, progress).
  REQUIRE(t->loadDataset(write_tsv(dir, "fl.tsv", examples_to_tsv(make_first_last_task(200, 2)))));
  CHECK(t->datasetChoiceText() == "fl.tsv");  // the dropdown names the file that is loaded
  CHECK(t->snapshotCount() == 0);
  CHECK(cm->rowCount() == 0);
  CHECK(t->lossCurve()->pointCount(0) == 0);
  CHECK(t->progressText().isEmpty());
  CHECK_FALSE(t->trainedModel());
  // An error after a success is shown in red.
  CHECK_FALSE(t->loadDataset(dir.filePath("missing.tsv")));
  CHECK(t->messageLabel()->styleSheet().contains("#a00"));
}

TEST_CASE("the Train tab fine-tunes the model open in Explore; a frozen encoder stays as it was", "[ui][train][hf]") {
  QTemporaryDir dir;
  const std::string base_dir = dir.filePath("tiny-bert").toStdString();
  save_model(test::tiny_bert(dir.filePath("src").toStdString()), base_dir);
  MainWindow w;
  REQUIRE(w.openModel(QString::fromStdString(base_dir)));
  const std::shared_ptr<const Model> base = std::make_shared<const Model>(load_model(base_dir));
  TrainView* t = w.train();
  REQUIRE(t->loadDataset(write_tsv(dir, "neg.tsv", examples_to_tsv(make_negation_task(200, 3)))));
  t->setFineTune(true, true);
  t->setEpochs(1);
  REQUIRE(t->startTraining());
  t->waitForFinish();
  REQUIRE(t->trainedModel());
  const Model& m = *t->trainedModel();
  CHECK(m.hf.architecture == "BertForSequenceClassification");
  CHECK(m.config.labels == std::vector<std::string>{"negative", "positive"});
  const auto mask = encoder_mask(m.config);
  const auto after = parameters(m.weights), before = parameters(base->weights);
  REQUIRE(after.size() == mask.size());
  size_t k_base = 0;
  for (size_t k = 0; k < after.size(); ++k)
    if (mask[k]) CHECK(after[k]->data == before[k_base++]->data);  // the base's encoder tensors come first, in order
  // saved as a Hugging Face folder that opens again
  const QString out = dir.filePath("tuned");
  REQUIRE(t->saveModel(out));
  REQUIRE(w.openModel(out));
  CHECK(w.explore()->model()->hf.architecture == "BertForSequenceClassification");
}

TEST_CASE("a chart keeps its plot wide without series, drops crowded circles and keeps marker labels inside",
          "[ui][train][curves]") {
  CurveView c("step");
  c.resize(250, 180);
  c.show();
  QCustomPlot* p = c.plot();
  p->replot();
  // no series yet (a run's head scores and norms before training): the axes span the chart
  CHECK(p->axisRect()->width() > 250 / 2);
  const int a = c.addSeries("held-out", Qt::red, false, true);
  p->replot();
  CHECK(p->legend->visible());
  CHECK(p->axisRect()->width() > 250 / 2);
  c.removeSeries();
  p->replot();
  CHECK(p->axisRect()->width() > 250 / 2);
  // an evaluation's circle at each point while there are few; a line alone past 60 of them
  const int b = c.addSeries("held-out", Qt::red, false, true);
  CHECK(b == 0);
  (void)a;
  for (int k = 1; k <= 60; ++k) c.append(b, k, 0.5);
  CHECK(p->graph(0)->scatterStyle().shape() == QCPScatterStyle::ssCircle);
  c.append(b, 61, 0.5);
  CHECK(p->graph(0)->scatterStyle().shape() == QCPScatterStyle::ssNone);
  c.clear();
  CHECK(p->graph(0)->scatterStyle().shape() == QCPScatterStyle::ssCircle);
  // a marker's label, late on a narrow axis, stays inside the axis rect (cut short when it must)
  for (int k = 1; k <= 100; ++k) c.append(b, k, 0.5);
  c.addMarker(70, "the training pairs learnt, the held-out ones not yet");
  p->replot();
  QCPItemText* text = nullptr;
  for (int i = 0; i < p->itemCount(); ++i)
    if (auto* t = qobject_cast<QCPItemText*>(p->item(i))) text = t;
  REQUIRE(text);
  const QFontMetrics fm(text->font());
  const double x = p->xAxis->coordToPixel(70);
  const int width = fm.horizontalAdvance(text->text());
  const bool left = text->positionAlignment() & Qt::AlignRight;
  CHECK((left ? x - width : x + width) >= p->axisRect()->left() - 1);
  CHECK((left ? x - width : x + width) <= p->axisRect()->right() + 1);
  CHECK(text->text().contains(QChar(0x2026)));  // 250 px cannot hold it whole
}
