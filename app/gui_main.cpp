// attnlab: the desktop app. Opens the last model (or the shipped default, or --model DIR). With
// --screenshot FILE.png it opens in the given state, renders the window, writes the PNG, exits.
#include <QApplication>
#include <QFileInfo>
#include <QCommandLineParser>
#include <QIcon>
#include <QKeyEvent>
#include <QLineEdit>
#include <QSaveFile>
#include <QSettings>
#include <QStatusBar>
#include <QTabWidget>
#include <QTimer>
#include <cstdio>

#include "app/default_model.h"
#include "engine/analysis/sae.h"
#include "engine/train/tasks.h"
#include "ui/attention_channel.h"
#include "ui/explore/circuits_page.h"
#include "ui/explore/features_page.h"
#include "ui/explore/generate_page.h"
#include "ui/explore/steering_page.h"
#include "ui/explore/page_table.h"
#include "ui/explore_view.h"
#include "ui/main_window.h"
#include "ui/methods_view.h"
#include "ui/tour.h"
#include "ui/train_view.h"

// The command line, for the window and for --help / --version (which need no display).
void add_options(QCommandLineParser& p) {
  p.setApplicationDescription("attnlab: see how transformer attention works");
  p.addHelpOption();
  p.addVersionOption();
  p.addOption({"model", "Model folder to open.", "DIR"});
  p.addOption({"attention",
               "Open attention made elsewhere (.npz or .safetensors: docs/attention-files.md) without a model.",
               "FILE"});
  p.addOption({"batch", "With --attention: which sequence of a batched file (default: the first).", "B"});
  p.addOption({"reuse-window",
               "With --attention: show the file in the attnlab window opened this way before (attnlab.show in "
               "Python), else open one that later calls reuse."});
  p.addOption({"text", "Text to show.", "TEXT"});
  p.addOption({"cross-text", "Second text: cross-attention mode.", "TEXT"});
  p.addOption({"pair", "Sentence B of a pair (BERT-family models).", "TEXT"});
  p.addOption({"target", "An encoder-decoder's target (--text is its source), teacher-forced.", "TEXT"});
  p.addOption({"part", "An encoder-decoder's attention to show: cross (default), decoder or encoder.", "PART"});
  p.addOption({"hide-special", "Leave [CLS] / [SEP] out of the views."});
  p.addOption({"merge-pieces", "One row and column per word (word pieces merged)."});
  p.addOption({"layer", "Layer to show.", "L"});
  p.addOption({"mask", "Mask: causal, padding, window:W, strided:S, global:0,7 (repeatable).", "MASK"});
  p.addOption({"tab", "Open on a tab: " + attnlab::explore_page_names().join(", ") + " in Explore, or train.", "NAME"});
  p.addOption({"corrupted", "With --tab circuits: patch the --text run's activations into this one.", "TEXT"});
  p.addOption({"answer", "With --tab circuits: the answer (a class or one token).", "TOKEN"});
  p.addOption({"wrong", "With --tab circuits: the answer it is measured against.", "TOKEN"});
  p.addOption({"patch", "With --tab circuits: resid_pre, attn_out, mlp_out, z or pattern.", "WHAT"});
  p.addOption({"patch-method", "With --tab circuits: exact (default), attribution or both.", "HOW"});
  p.addOption({"toward", "With --tab steer: steer towards this prompt's residual stream.", "TEXT"});
  p.addOption({"away", "With --tab steer: and away from this one's.", "TEXT"});
  p.addOption({"strength", "With --tab steer: how many times the vector is added (default 4).", "X"});
  p.addOption({"steer-layer",
               "With --tab steer: the layer whose input is steered (default: the middle layer, layers / 2).", "L"});
  p.addOption({"sae", "With --tab features: a sparse autoencoder folder (SAELens format).", "DIR"});
  p.addOption({"clamp", "With --tab features: clamp FEATURE=VALUE[:POSITION].", "SPEC"});
  p.addOption({"compare-text", "With --method compare: B is this text on the same model.", "TEXT"});
  p.addOption({"compare-model", "With --method compare: B is the same text on this model folder.", "DIR"});
  p.addOption({"heads", "What the Heads and Head tabs draw: attention (default) or value-weighted.", "WHAT"});
  p.addOption(
      {"ablate", "Ablate heads L:H[,L:H]... (their probabilities times 0), as the Importance tab does.", "LIST"});
  p.addOption({"select", "Select token positions in the token strip (e.g. 1,4): Beyond attention shows them.", "LIST"});
  p.addOption({"method",
               QString::fromStdString("On Beyond attention (opened when no --tab is given): " +
                                      attnlab::method_names(true) + " (or another name of one of them)."),
               "NAME"});
  p.addOption(
      {"train-epochs",
       "With --tab train: train the shipped negation task (or --train-preset's, or --train-text's) for N epochs "
       "before the "
       "screenshot.",
       "N"});
  QStringList presets;
  for (const attnlab::LmPreset& row : attnlab::lm_presets()) presets << row.name;
  p.addOption({"train-preset",
               "With --tab train: choose a language-model preset (" + presets.join(", ") +
                   ") in place of a dataset; with --train-epochs N, train it for N epochs.",
               "NAME"});
  p.addOption({"train-text",
               "With --tab train: a text file to train a new language model on (as \"Train a language model on a "
               "text file...\"); with --train-epochs N, train it for N epochs.",
               "FILE"});
  p.addOption({"train-tokenizer",
               "With --train-text: read the text by char, word or bpe (a byte-level BPE learned from it).", "NAME"});
  p.addOption({"generate", "Generate N tokens after the text on the Generate tab (language models; opens it).", "N"});
  p.addOption({"why",
               "With --generate: why the last token and not this one (a token of its chart, or text that is one "
               "token), per head and MLP.",
               "TOKEN"});
  p.addOption({"sampling",
               "With --generate: sample instead of greedy, e.g. temperature=0.8,top-k=40,top-p=0.9,min-p=0.05,seed=1.",
               "SPEC"});
  p.addOption({"backend", "Backend: cpu, cpu-bf16 (built with oneDNN), reference, opencl or opencl:N.", "NAME"});
  p.addOption({"size", "Window size WxH (for screenshots).", "WxH"});
  p.addOption({"tour-step", "Open step N of Help > Tour (1-based; the articles, step by step).", "N"});
  p.addOption({"screenshot", "Render the window to FILE.png and exit.", "FILE"});
  p.addOption({"perf-log", "Record keystroke-to-repaint latency to FILE (TSV).", "FILE"});
  p.addOption({"no-settings", "Neither read nor write saved settings."});
  p.addOption(
      {"type-text", "Benchmark: type TEXT into the text box one key at a time (after --text), then exit.", "TEXT"});
  p.addOption({"type-interval", "Milliseconds between simulated keystrokes (default 80).", "MS"});
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {  // --help and --version print without a display
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h" || arg == "--help-all" || arg == "--version" || arg == "-v") {
      QCoreApplication core(argc, argv);
      QCoreApplication::setApplicationName("attnlab");
      QCoreApplication::setApplicationVersion(ATTNLAB_VERSION);
      QCommandLineParser p;
      add_options(p);
      p.process(core);  // prints and exits
    }
  }
  QApplication app(argc, argv);
  QApplication::setApplicationName("attnlab");
  QApplication::setApplicationVersion(ATTNLAB_VERSION);
  QApplication::setOrganizationName("attnlab");
  QGuiApplication::setDesktopFileName("io.github.attnlab.attnlab");  // the menu entry this window belongs to
  {  // the installed icon (hicolor theme), else the one installed next to the binary's share/
    const QString beside = QCoreApplication::applicationDirPath() + "/../share/icons/hicolor/256x256/apps/attnlab.png";
    QApplication::setWindowIcon(QIcon::fromTheme("attnlab", QIcon(beside)));
  }
  QCommandLineParser p;
  add_options(p);
  p.process(app);

  const bool batch_run = p.isSet("screenshot") || p.isSet("type-text");
  if (p.isSet("reuse-window") && !p.isSet("attention")) {
    std::fprintf(stderr, "attnlab: --reuse-window shows an --attention file in an open window\n");
    return 2;
  }
  const bool reuse = p.isSet("reuse-window") && !batch_run;  // a screenshot run draws its own window
  if (reuse) {  // a window opened by an earlier call: hand it the file, and done
    bool ok_batch = true, ok_layer = true;
    const int b = p.isSet("batch") ? p.value("batch").toInt(&ok_batch) : -1;
    const int layer = p.isSet("layer") ? p.value("layer").toInt(&ok_layer) : -1;
    QString reply;
    if (ok_batch && ok_layer &&
        attnlab::send_to_open_window(QFileInfo(p.value("attention")).absoluteFilePath(), b, layer, &reply)) {
      const bool failed = reply.startsWith("error: ");
      std::fprintf(failed ? stderr : stdout, "attnlab: %s\n", qPrintable(reply));
      return failed ? 2 : 0;
    }
  }

  attnlab::MainWindow w;
  w.setShippedModels(QFileInfo(QString::fromStdString(attnlab::default_model_dir(argv[0]))).absolutePath());
  w.train()->setDataDir(QString::fromStdString(attnlab::default_data_dir(argv[0])));
  const bool use_settings = !p.isSet("no-settings") && !p.isSet("screenshot");
  w.setRememberRecent(use_settings && !p.isSet("type-text"));
  QString dir = p.value("model");
  if (dir.isEmpty() && use_settings) dir = QSettings().value("model/dir").toString();
  const bool batch = p.isSet("screenshot") || p.isSet("type-text");  // no dialogs: nobody to close them
  if (p.isSet("batch") && !p.isSet("attention")) {
    std::fprintf(stderr, "attnlab: --batch chooses a sequence of an --attention file\n");
    return 2;
  }
  if (p.isSet("attention")) {  // the file's probabilities and tokens: no model, no text, no mask
    for (const char* opt : {"model", "text", "cross-text", "target", "part", "pair", "hide-special", "merge-pieces",
                            "mask", "ablate", "generate", "heads", "compare-text", "compare-model", "type-text"})
      if (p.isSet(opt)) {
        std::fprintf(stderr,
                     "attnlab: --%s does not apply to --attention: the file brings its own probabilities "
                     "and tokens\n",
                     opt);
        return 2;
      }
    bool ok = true;
    const int b = p.isSet("batch") ? p.value("batch").toInt(&ok) : -1;
    if (!ok || (p.isSet("batch") && b < 0)) {
      std::fprintf(stderr, "attnlab: --batch: a sequence of the file's batch, 0 or more\n");
      return 2;
    }
    if (!w.openAttention(p.value("attention"), b, batch)) {
      if (batch) {
        std::fprintf(stderr, "attnlab: %s\n", qPrintable(w.statusBar()->currentMessage()));
        return 2;
      }
    }
    if (reuse) {  // later --reuse-window calls (attnlab.show) land in this window, from now on
      QString error;
      if (!attnlab::listen_for_attention(&w, &error))
        w.statusBar()->showMessage("Later calls of attnlab.show will open their own windows: " + error);
    }
  } else if (dir.isEmpty() || !w.openModel(dir, !p.isSet("model") || batch)) {
    if (batch && p.isSet("model") && !dir.isEmpty()) {
      std::fprintf(stderr, "attnlab: %s\n", qPrintable(w.statusBar()->currentMessage()));
      return 2;
    }
    if (!p.isSet("model") || dir.isEmpty()) w.openModel(QString::fromStdString(attnlab::default_model_dir(argv[0])));
  }
  // First start (nothing saved yet): the tour opens beside the window, as the thing to try first.
  const bool first_start = use_settings && !p.isSet("type-text") && !QSettings().contains("model/dir");
  if (use_settings) w.restoreSettings();
  attnlab::ExploreView* e = w.explore();
  if (p.isSet("perf-log")) e->setPerfLog(p.value("perf-log"));
  if (p.isSet("text"))
    e->setText(p.value("text"));
  else if (e->text().isEmpty() && !e->showsFile())
    e->setText("the film was not very good");
  if (p.isSet("cross-text")) e->setCrossText(p.value("cross-text"));
  if (p.isSet("target") || p.isSet("part")) {  // an encoder-decoder's target and the attention shown
    const attnlab::Model* m = e->model();
    if (!m || !m->is_seq2seq()) {
      std::fprintf(stderr,
                   "attnlab: --target and --part are for encoder-decoder models (bart); this model reads one "
                   "sequence\n");
      return 2;
    }
    try {
      if (p.isSet("part")) e->setPart(attnlab::parse_seq2seq_part(p.value("part").toStdString()));
    } catch (const attnlab::Error& err) {
      std::fprintf(stderr, "attnlab: --part: %s\n", err.what());
      return 2;
    }
    if (p.isSet("target")) e->setTargetText(p.value("target"));
  }
  if (p.isSet("pair")) e->setPairText(p.value("pair"));
  if (p.isSet("hide-special") || p.isSet("merge-pieces"))
    e->setTokenView(p.isSet("hide-special"), p.isSet("merge-pieces"));
  if (p.isSet("backend")) {
    const QString b = p.value("backend");
    if (b != "cpu" && b != "reference" && b != "opencl" && !b.startsWith("opencl:") &&
        !(b == "cpu-bf16" && attnlab::bf16_available())) {
      std::fprintf(stderr, "attnlab: --backend: unknown backend \"%s\" (%s, opencl)\n", qPrintable(b),
                   qPrintable(QString::fromStdString([] {
                     std::string all;
                     for (const auto& n : attnlab::backend_names()) all += (all.empty() ? "" : ", ") + n;
                     return all;
                   }())));
      return 2;
    }
    w.setBackend(p.value("backend"));
  }
  try {
    if (p.isSet("mask")) e->setMaskArgs(p.values("mask"));
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "attnlab: %s\n", ex.what());
    return 2;
  }
  if (p.isSet("size")) {
    const QStringList wh = p.value("size").split('x');
    bool ok_w = false, ok_h = false;
    const int width = wh.size() == 2 ? wh[0].toInt(&ok_w) : 0, height = wh.size() == 2 ? wh[1].toInt(&ok_h) : 0;
    if (!ok_w || !ok_h || width < 640 || height < 480 || width > 16384 || height > 16384) {
      std::fprintf(stderr, "attnlab: --size: \"%s\" is not a window size WxH of at least 640x480 (e.g. 1280x720)\n",
                   qPrintable(p.value("size")));
      return 2;
    }
    w.resize(width, height);
  }
  w.show();
  e->flush();
  if (p.isSet("layer")) {
    bool ok = false;
    const int layer = p.value("layer").toInt(&ok);
    const int L = e->model() ? e->model()->config.num_layers : 0;
    if (!ok || layer < 0 || layer >= L) {
      std::fprintf(stderr, "attnlab: --layer: no layer %s (the model has layers 0-%d)\n", qPrintable(p.value("layer")),
                   L - 1);
      return 2;
    }
    e->setLayer(layer);
  }
  QString tab = p.value("tab");
  if (tab.isEmpty() && p.isSet("method")) tab = "methods";  // a method is shown on Beyond attention
  if (!tab.isEmpty() && tab != "train") {
    const attnlab::ExplorePageRow* row = attnlab::find_explore_page(tab);  // names and aliases (page_table.h)
    if (!row) {
      std::fprintf(stderr, "attnlab: --tab: no tab \"%s\" (%s, train)\n", qPrintable(tab),
                   qPrintable(attnlab::explore_page_names().join(", ")));
      return 2;
    }
    if (row->available && e->model() && !row->available(e->model()->config)) {
      std::fprintf(stderr, "attnlab: --tab %s: %s\n", qPrintable(tab), row->unavailable);
      return 2;
    }
    if (e->showsFile() && !row->from_probabilities) {
      std::fprintf(stderr, "attnlab: --tab %s needs a model's weights; an attention file holds probabilities only\n",
                   qPrintable(tab));
      return 2;
    }
    tab = row->name;
    e->showPage(tab);
  }
  if (tab == "importance") e->computeImportance();
  for (const auto& [opt, page] : std::vector<std::pair<const char*, const char*>>{{"corrupted", "circuits"},
                                                                                  {"answer", "circuits"},
                                                                                  {"wrong", "circuits"},
                                                                                  {"patch", "circuits"},
                                                                                  {"patch-method", "circuits"},
                                                                                  {"toward", "steer"},
                                                                                  {"away", "steer"},
                                                                                  {"strength", "steer"},
                                                                                  {"steer-layer", "steer"},
                                                                                  {"sae", "features"},
                                                                                  {"clamp", "features"}})
    if (p.isSet(opt) && tab != page) {
      std::fprintf(stderr, "attnlab: --%s is for --tab %s\n", opt, page);
      return 2;
    }
  if (p.isSet("patch-method") && !QStringList{"exact", "attribution", "both"}.contains(p.value("patch-method"))) {
    std::fprintf(stderr, "attnlab: --patch-method: expected exact, attribution or both, got \"%s\"\n",
                 qPrintable(p.value("patch-method")));
    return 2;
  }
  if (p.isSet("patch") && !QStringList{"resid_pre", "attn_out", "mlp_out", "z", "pattern"}.contains(p.value("patch"))) {
    std::fprintf(stderr, "attnlab: --patch: expected resid_pre, attn_out, mlp_out, z or pattern, got \"%s\"\n",
                 qPrintable(p.value("patch")));
    return 2;
  }
  const bool circuits_flags =
      p.isSet("corrupted") || p.isSet("answer") || p.isSet("wrong") || p.isSet("patch") || p.isSet("patch-method");
  if (tab == "circuits" && circuits_flags) {  // the page set up as asked; computed when there is a corrupted text
    auto* page = static_cast<attnlab::CircuitsPage*>(e->page("circuits"));
    page->setPrompts(e->text(), p.isSet("corrupted") ? p.value("corrupted") : e->text());
    if (p.isSet("answer") || p.isSet("wrong")) page->setAnswers(p.value("answer"), p.value("wrong"));
    if (p.isSet("patch")) page->setTarget(p.value("patch"));
    if (p.isSet("patch-method")) page->setMethod(p.value("patch-method"));
    if (p.isSet("corrupted")) {
      page->compute();
      page->wait();
    }
  }
  if (tab == "steer" && (p.isSet("toward") || p.isSet("away") || p.isSet("strength") || p.isSet("steer-layer"))) {
    auto* page = static_cast<attnlab::SteeringPage*>(e->page("steer"));
    bool ok = true, ok_layer = true;
    const double alpha = p.isSet("strength") ? p.value("strength").toDouble(&ok) : page->strength();
    const int layers = e->model()->config.num_layers;
    const int layer = p.isSet("steer-layer") ? p.value("steer-layer").toInt(&ok_layer) : -1;
    if (!ok || alpha < -20 || alpha > 20) {
      std::fprintf(stderr, "attnlab: --strength: expected a number from -20 to 20, got \"%s\"\n",
                   qPrintable(p.value("strength")));
      return 2;
    }
    if (!ok_layer || (p.isSet("steer-layer") && (layer < 0 || layer >= layers))) {
      std::fprintf(stderr, "attnlab: --steer-layer: expected a layer from 0 to %d, got \"%s\"\n", layers - 1,
                   qPrintable(p.value("steer-layer")));
      return 2;
    }
    page->setPrompts(p.value("toward"), p.value("away"));
    if (layer >= 0) page->setLayer(layer);
    page->setStrength(alpha);
    page->compute();
    page->wait();
  }
  if (tab == "features" && p.isSet("clamp") && !p.isSet("sae")) {
    std::fprintf(stderr, "attnlab: --clamp needs --sae DIR (the sparse autoencoder whose feature it clamps)\n");
    return 2;
  }
  if (tab == "features" && p.isSet("sae")) {
    auto* page = static_cast<attnlab::FeaturesPage*>(e->page("features"));
    if (!page->openSae(p.value("sae"))) {
      std::fprintf(stderr, "attnlab: --sae: %s\n", qPrintable(page->status()));
      return 2;
    }
    page->wait();
    if (p.isSet("clamp")) {
      try {
        const attnlab::FeatureClamp c = attnlab::parse_feature_clamp(p.value("clamp").toStdString());
        if (c.positions.size() > 1) throw attnlab::Error("--clamp: the app clamps at one position or every one");
        if (!page->setClamp(c.feature, c.value, c.positions.empty() ? -1 : c.positions.front()))
          throw attnlab::Error("--clamp: " + page->status().toStdString());
      } catch (const attnlab::Error& err) {
        std::fprintf(stderr, "attnlab: %s\n", err.what());
        return 2;
      }
      page->wait();
    }
  }
  if (p.isSet("select")) {
    std::vector<int> positions;
    for (const QString& t : p.value("select").split(',', Qt::SkipEmptyParts)) {
      bool ok = false;
      positions.push_back(t.trimmed().toInt(&ok));
      if (!ok) {
        std::fprintf(stderr, "attnlab: --select: \"%s\" is not a token position\n", qPrintable(t));
        return 2;
      }
    }
    try {
      e->selectTokens(positions);
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "attnlab: %s\n", ex.what());
      return 2;
    }
  }
  if (p.isSet("method")) {  // after --select: the method chosen wins over the selection's default
    int m = -1;             // the page's methods, by any of the table's names (the CLI's too)
    try {
      const attnlab::MethodRow& row = attnlab::find_method(p.value("method").toStdString(), true);
      if (e->showsFile() && !row.from_probabilities)
        throw attnlab::Error(std::string(row.name) +
                             " needs a model's weights; an attention file holds probabilities only");
      m = row.page_index;
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "attnlab: --method: %s\n", ex.what());
      return 2;
    }
    e->methodsView()->setMethod(static_cast<attnlab::MethodsView::Method>(m));
  }
  try {
    if (p.isSet("compare-text")) e->methodsView()->setCompare(p.value("compare-text"), nullptr);
    if (p.isSet("compare-model"))
      e->methodsView()->setCompare(
          {}, std::make_shared<const attnlab::Model>(attnlab::load_model(p.value("compare-model").toStdString())),
          QFileInfo(p.value("compare-model")).fileName());
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "attnlab: --compare-model: %s\n", ex.what());
    return 2;
  }
  if (p.isSet("heads")) {
    try {
      e->setHeadWeighting(p.value("heads"));
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "attnlab: --%s\n", ex.what());
      return 2;
    }
  }
  if (p.isSet("ablate") && e->model() && e->model()->is_seq2seq()) {
    std::fprintf(stderr, "attnlab: --ablate: an encoder-decoder's heads are not ablated yet\n");
    return 2;
  }
  if (p.isSet("ablate")) {
    try {
      for (const auto& [l, h] : attnlab::parse_ablate(p.value("ablate").toStdString(), e->model()->config))
        e->setAblated(l, h, true);
      e->flush();
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "attnlab: %s\n", ex.what());
      return 2;
    }
  }

  if (p.isSet("generate")) {
    auto* g = qobject_cast<attnlab::GeneratePage*>(e->page("generate"));
    bool ok = false;
    const int n = p.value("generate").toInt(&ok);
    if (!ok || n < 1) {
      std::fprintf(stderr, "attnlab: --generate: expected a count of 1 or more, got %s\n",
                   qPrintable(p.value("generate")));
      return 2;
    }
    // the Generate tab, unless --tab asks for another view (which grows with the text as well)
    if (!g || !g->isEnabled() || !e->tabs()->isTabVisible(e->tabs()->indexOf(g))) {  // hidden: encoder-decoders
      std::fprintf(
          stderr,
          "attnlab: --generate needs a causal language model (one with an LM head; an encoder-decoder writes with "
          "attnlab-cli generate); %s is not one\n",
          e->model() ? e->model()->summary().c_str() : "this");
      return 2;
    }
    if (!p.isSet("tab")) e->showPage("generate");
    if (p.isSet("sampling")) {
      attnlab::SamplingOptions o;
      o.greedy = false;
      for (const QString& kv : p.value("sampling").split(',', Qt::SkipEmptyParts)) {
        const QString key = kv.section('=', 0, 0).trimmed(), value = kv.section('=', 1).trimmed();
        bool number = false;
        const double v = value.toDouble(&number);
        if (!number || !QStringList{"temperature", "top-k", "top-p", "min-p", "seed"}.contains(key)) {
          std::fprintf(stderr, "attnlab: --sampling: expected temperature=, top-k=, top-p=, min-p= or seed=, got %s\n",
                       qPrintable(kv));
          return 2;
        }
        if (key == "temperature") o.temperature = static_cast<float>(v);
        if (key == "top-k") o.top_k = static_cast<int>(v);
        if (key == "top-p") o.top_p = v;
        if (key == "min-p") o.min_p = static_cast<float>(v);
        if (key == "seed") o.seed = static_cast<uint64_t>(v);
      }
      try {
        attnlab::check_sampling(o);
      } catch (const std::exception& ex) {
        std::fprintf(stderr, "attnlab: --sampling: %s\n", ex.what());
        return 2;
      }
      g->setSampling(o);
    }
    e->flush();
    g->generate(n);
    g->wait();
    if (p.isSet("why")) {
      if (!g->explainTyped(p.value("why"))) {
        std::fprintf(stderr, "attnlab: --why: %s\n", qPrintable(g->contrastText()));
        return 2;
      }
      g->wait();
      if (!g->contrast()) {
        std::fprintf(stderr, "attnlab: --why: %s\n", qPrintable(g->contrastText()));
        return 2;
      }
    }
  }
  for (const char* option : {"sampling", "why"})
    if (p.isSet(option) && !p.isSet("generate")) {
      std::fprintf(stderr, "attnlab: --%s goes with --generate N\n", option);
      return 2;
    }
  if (p.isSet("tour-step")) {
    bool ok = false;
    const int step = p.value("tour-step").toInt(&ok) - 1;
    if (!ok || step < 0 || step >= static_cast<int>(attnlab::tour_steps().size())) {
      std::fprintf(stderr, "attnlab: --tour-step: no step %s (1-%zu)\n", qPrintable(p.value("tour-step")),
                   attnlab::tour_steps().size());
      return 2;
    }
    w.showTour(step);  // the step's text beside the view it opens
  }
  if (tab == "train") {
    w.tabs()->setCurrentWidget(w.train());
    if (p.isSet("train-preset") && !w.train()->chooseLmPreset(p.value("train-preset"))) {
      std::fprintf(stderr, "attnlab: %s\n", qPrintable(w.train()->message()));
      return 2;
    }
    if (p.isSet("train-text") && !w.train()->loadLmText(p.value("train-text"))) {
      std::fprintf(stderr, "attnlab: %s\n", qPrintable(w.train()->message()));
      return 2;
    }
    if (p.isSet("train-tokenizer") && !p.isSet("train-text")) {
      std::fprintf(stderr, "attnlab: --train-tokenizer is for a text's model: give --train-text FILE too\n");
      return 2;
    }
    if (p.isSet("train-tokenizer") && !w.train()->setTextTokenizer(p.value("train-tokenizer"))) {
      std::fprintf(stderr, "attnlab: --train-tokenizer: expected char, word or bpe, got \"%s\"\n",
                   qPrintable(p.value("train-tokenizer")));
      return 2;
    }
    if (p.isSet("train-epochs")) {
      w.train()->setEpochs(p.value("train-epochs").toInt());
      w.train()->startTraining();
      w.train()->waitForFinish();
    }
  }
  if (first_start) QTimer::singleShot(0, &w, [&w] { w.showTour(); });
  if (p.isSet("screenshot")) {
    const QString file = p.value("screenshot");
    QTimer::singleShot(300, [&w, e, file] {
      e->flush();
      e->waitForLens();  // the Logit lens and Importance tabs fill in the background
      e->waitForImportance();
      e->methodsView()->wait();
      e->waitForValueNorm();
      for (const char* name : {"circuits", "steer", "features"})  // pages that compute on request
        if (QWidget* page = e->page(name)) {
          if (auto* c = qobject_cast<attnlab::CircuitsPage*>(page)) c->wait();
          if (auto* st = qobject_cast<attnlab::SteeringPage*>(page)) st->wait();
          if (auto* f = qobject_cast<attnlab::FeaturesPage*>(page)) f->wait();
        }
      QApplication::processEvents();
      QSaveFile out(file);  // whole or not at all: a reader waiting for the file never sees half of it
      const bool ok =
          out.open(QIODevice::WriteOnly) &&
          w.grab().save(&out, QFileInfo(file).suffix().isEmpty() ? "PNG" : qPrintable(QFileInfo(file).suffix())) &&
          out.commit();
      if (!ok) std::fprintf(stderr, "attnlab: could not write %s\n", qPrintable(file));
      QApplication::exit(ok ? 0 : 1);
    });
  }
  if (p.isSet("type-text")) {
    // Real key events through the event loop, as a typist would send them: into an empty box, or
    // at the end of --text (typing after a long prompt).
    if (!p.isSet("text")) e->setText("");
    auto* edit = e->findChild<QLineEdit*>("text");
    edit->end(false);
    const QString text = p.value("type-text");
    auto* timer = new QTimer(&app);
    timer->setInterval(p.isSet("type-interval") ? p.value("type-interval").toInt() : 80);
    int pos = 0;
    QObject::connect(timer, &QTimer::timeout, [&, timer, edit, text]() mutable {
      if (pos >= text.size()) {
        // then step through the layers a few times (layer-switch latency)
        if (pos++ < text.size() + 20) {
          e->flush();
          e->setLayer((e->layer() + 1) % std::max(1, e->model() ? e->model()->config.num_layers : 1));
          return;
        }
        timer->stop();
        QTimer::singleShot(500, [] { QApplication::exit(0); });
        return;
      }
      const QChar ch = text[pos++];
      QKeyEvent press(QEvent::KeyPress, 0, Qt::NoModifier, QString(ch));
      QKeyEvent release(QEvent::KeyRelease, 0, Qt::NoModifier, QString(ch));
      QApplication::sendEvent(edit, &press);
      QApplication::sendEvent(edit, &release);
    });
    timer->start();
  }
  return app.exec();
}
