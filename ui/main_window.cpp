// MainWindow implementation.
#include "ui/main_window.h"

#include "ui/methods_view.h"

#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QInputDialog>
#include <QLabel>
#include <QDialog>
#include <QScrollArea>
#include <QDockWidget>
#include <QListWidget>
#include <QPushButton>
#include <QHBoxLayout>
#include <QVBoxLayout>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QSettings>
#include <QSignalBlocker>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QToolBar>

#include "engine/compute/ops.h"
#include "engine/core/memory.h"
#include "engine/formats/attention_file.h"
#include "ui/explore_view.h"
#include "ui/mask_editor.h"
#include "ui/methods_view.h"
#include "ui/tour.h"
#include "ui/train_view.h"

namespace attnlab {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("attnlab");
  setAcceptDrops(true);
  tabs_ = new QTabWidget(this);
  explore_ = new ExploreView(tabs_);
  tabs_->addTab(explore_, "Explore");
  train_ = new TrainView(tabs_);
  tabs_->addTab(train_, "Train");
  connect(train_, &TrainView::status, this, [this](const QString& s) { statusBar()->showMessage(s); });
  connect(train_, &TrainView::openInExplore, this,
          [this](std::shared_ptr<const Model> m, const QString& name, const QString& text) {
            useModel(std::move(m), name);
            if (!text.isEmpty()) explore_->setText(text);
            tabs_->setCurrentWidget(explore_);
          });
  setCentralWidget(tabs_);

  auto* tb = addToolBar("Model");
  tb->setObjectName("modelToolbar");
  summary_ = new QLabel(this);
  summary_->setObjectName("modelSummary");
  tb->addWidget(summary_);
  // On the Train tab the bar says whose model it is: Explore's, not the one being trained.
  connect(tabs_, &QTabWidget::currentChanged, this, [this] { showSummary(); });
  tb->addSeparator();
  tb->addWidget(new QLabel(" Backend: ", this));
  backend_ = new QComboBox(this);
  backend_->setObjectName("backendBox");
  for (const auto& b : backend_names()) {
    backend_->addItem(QString::fromStdString(b));
    backend_->setItemData(backend_->count() - 1, QString::fromStdString(backend_description(b)), Qt::ToolTipRole);
  }
  backend_->setToolTip(
      "cpu: Eigen, multi-threaded (the fast choice on a CPU). reference: plain loops (slow, for checking).\n"
      "opencl:N: an OpenCL device (fast on a GPU; the first pass compiles its kernels).");
  tb->addWidget(backend_);
  connect(backend_, &QComboBox::currentTextChanged, this, [this](const QString& name) {
    if (name.startsWith("opencl"))
      statusBar()->showMessage("OpenCL on " + QString::fromStdString(backend_description(name.toStdString())) +
                               ": the first pass compiles the kernels in the background");
    else if (name == "cpu-bf16" && !bf16_notice().empty())  // measured slower than fp32 here, or emulated
      statusBar()->showMessage(QString::fromStdString(bf16_notice()));
    explore_->setBackend(name);
  });

  warn_ = new QLabel(this);
  warn_->setStyleSheet("color: #b35900;");
  statusBar()->addPermanentWidget(warn_);
  connect(explore_, &ExploreView::status, this, [this](const QString& s) { statusBar()->showMessage(s); });
  connect(explore_, &ExploreView::warnings, this, [this](const QStringList& w) {
    warn_->setText(w.isEmpty() ? "" : QString("%1 warning(s)").arg(w.size()));
    warn_->setToolTip(w.join("\n"));
  });

  QMenu* file = menuBar()->addMenu("&File");
  file->addAction("&Open model folder...", QKeySequence::Open, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, "Open model folder", model_dir_);
    if (!dir.isEmpty()) openModel(dir);
  });
  file->addAction("Open &attention file (.npz, .safetensors)...", QKeySequence("Ctrl+Shift+O"), this, [this] {
    const QString f = QFileDialog::getOpenFileName(
        this, "Open attention file", QFileInfo(attention_file_).absolutePath(),
        "Attention (*.npz *.safetensors);;NumPy archives (*.npz);;safetensors (*.safetensors)");
    if (!f.isEmpty()) openAttention(f);
  });
  recent_ = file->addMenu("&Recent models");
  fillRecent();
  QMenu* exp = file->addMenu("&Export");
  exp->addAction("Enlarged head as image...", this, [this] { exportDialog(0); });
  exp->addAction("Current layer's heads as image...", QKeySequence("Ctrl+E"), this, [this] { exportDialog(1); });
  exp->addAction("Every layer as image...", this, [this] { exportDialog(2); });
  exp->addAction("Probabilities as CSV, .npy or an attention file...", this, [this] { exportDialog(3); });
  exp->addAction("Beyond-attention map (rollout, relevance, ...)...", this, [this] {
    explore_->showPage("methods");
    const QString f = QFileDialog::getSaveFileName(
        this, "Export", "map.png", "PNG image (*.png);;SVG (*.svg);;PDF (*.pdf);;CSV (*.csv);;NumPy array (*.npy)");
    if (f.isEmpty()) return;
    try {
      explore_->methodsView()->exportTo(f, explore_->exportDpi());
      statusBar()->showMessage("exported " + f);
    } catch (const Error& e) {
      showError(QString::fromStdString(e.what()));
    }
  });
  for (const auto& [label, which] : {std::pair<QString, QString>{"Head importance as CSV or .npy...", "importance"},
                                     {"Logit lens as CSV or .npy...", "lens"}}) {
    exp->addAction(label, this, [this, which] {
      const QString f =
          QFileDialog::getSaveFileName(this, "Export", which + ".csv", "CSV (*.csv);;NumPy array (*.npy)");
      if (f.isEmpty()) return;
      try {
        explore_->exportTable(which, f);
        statusBar()->showMessage("exported " + f);
      } catch (const Error& e) {
        showError(QString::fromStdString(e.what()));
      }
    });
  }
  exp->addAction("Line view as image...", this, [this] {
    const QString f = QFileDialog::getSaveFileName(this, "Export", "lines.png", "PNG image (*.png);;SVG (*.svg)");
    if (f.isEmpty()) return;
    try {
      explore_->exportLines(f);
      statusBar()->showMessage("exported " + f);
    } catch (const Error& e) {
      showError(QString::fromStdString(e.what()));
    }
  });
  file->addSeparator();
  file->addAction("&Quit", QKeySequence::Quit, this, &QWidget::close);
  QMenu* mask = menuBar()->addMenu("&Mask");
  mask->addAction("&Load custom mask (.npy)...", this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, "Load mask", {}, "NumPy arrays (*.npy)");
    if (f.isEmpty()) return;
    try {
      explore_->maskEditor()->load(f);
    } catch (const Error& e) {
      showError(QString::fromStdString(e.what()));
    }
  });
  mask->addAction("&Save custom mask (.npy)...", this, [this] {
    const QString f = QFileDialog::getSaveFileName(this, "Save mask", "mask.npy", "NumPy arrays (*.npy)");
    if (f.isEmpty()) return;
    try {
      explore_->maskEditor()->save(f);
    } catch (const Error& e) {
      showError(QString::fromStdString(e.what()));
    }
  });
  QAction* undo = explore_->maskEditor()->undoStack()->createUndoAction(this, "Undo mask edit");
  undo->setShortcut(QKeySequence::Undo);
  mask->addAction(undo);
  QAction* redo = explore_->maskEditor()->undoStack()->createRedoAction(this, "Redo mask edit");
  redo->setShortcut(QKeySequence::Redo);
  mask->addAction(redo);
  QMenu* view = menuBar()->addMenu("&View");
  view->addAction("&Previous layer", QKeySequence(Qt::ALT | Qt::Key_Up), this,
                  [this] { explore_->setLayer(explore_->layer() - 1); });
  view->addAction("&Next layer", QKeySequence(Qt::ALT | Qt::Key_Down), this,
                  [this] { explore_->setLayer(explore_->layer() + 1); });
  QMenu* help = menuBar()->addMenu("&Help");
  help->addAction("&Tour: attention step by step", this, [this] { showTour(); });
  help->addAction("&Keyboard shortcuts", this, [this] {
    QMessageBox box(QMessageBox::NoIcon, "Keyboard shortcuts", shortcutsText(), QMessageBox::Close, this);
    box.setTextFormat(Qt::RichText);
    box.exec();
  });
  help->addAction("&About attnlab", this, [this] {
    QMessageBox box(QMessageBox::NoIcon, "About attnlab", aboutText(), QMessageBox::Close, this);
    box.setTextFormat(Qt::RichText);
    box.exec();
  });
  resize(1400, 900);
}

// The tour: a panel docked at the window's right (not a window over the head it explains), so the
// step's text and the view it opens are seen together, in screenshots too: the steps listed on
// top, what to look at below, Next step. showTour(N) opens step N (attnlab --tour-step).
void MainWindow::showTour(int step) {
  auto* dock = findChild<QDockWidget*>("tourDock");
  if (!dock) {
    dock = new QDockWidget("Tour: attention step by step", this);
    dock->setObjectName("tourDock");
    dock->setAllowedAreas(Qt::LeftDockWidgetArea | Qt::RightDockWidgetArea);
    auto* body = new QWidget(dock);
    auto* lay = new QVBoxLayout(body);
    auto* list = new QListWidget(body);
    list->setObjectName("tourSteps");
    for (size_t i = 0; i < tour_steps().size(); ++i) {
      list->addItem(QString("%1. %2").arg(i + 1).arg(tour_steps()[i].title));
      list->item(static_cast<int>(i))->setToolTip(tour_steps()[i].title);
    }
    // long titles end in "..." in a narrow dock (they needed a horizontal scroll bar)
    list->setTextElideMode(Qt::ElideRight);
    list->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    list->setMaximumHeight(list->sizeHintForRow(0) * static_cast<int>(tour_steps().size()) + 6);
    auto* text = new QLabel(body);
    text->setObjectName("tourText");
    text->setWordWrap(true);
    text->setTextFormat(Qt::RichText);
    text->setAlignment(Qt::AlignTop | Qt::AlignLeft);
    auto* scroll = new QScrollArea(body);
    scroll->setWidget(text);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    auto* next = new QPushButton("Next step", body);
    lay->addWidget(list);
    lay->addWidget(scroll, 1);
    lay->addWidget(next);
    dock->setWidget(body);
    dock->setMinimumWidth(200);  // beside the Explore view at 1280 wide (its own minimum is ~1060)
    addDockWidget(Qt::RightDockWidgetArea, dock);
    // as wide as the Explore view leaves (its minimum is ~1,060): 214 px at 1280, 340 at 1600
    resizeDocks({dock}, {std::clamp(width() - 1066, 214, 340)}, Qt::Horizontal);
    connect(list, &QListWidget::currentRowChanged, this, [this, text](int row) {
      if (row < 0) return;
      const TourStep& s = tour_steps()[static_cast<size_t>(row)];
      text->setText(QString("<h3>%1</h3><p><i>%2</i></p><p>%3</p><p style='color:#666'>The tour is written for "
                            "the shipped default model. %4</p>")
                        .arg(s.title.toHtmlEscaped(), s.source.toHtmlEscaped(), s.text, tour_articles_note()));
      show_tour_step(*this, row, shipped_models_);
    });
    connect(next, &QPushButton::clicked, list,
            [list] { list->setCurrentRow(std::min(list->currentRow() + 1, list->count() - 1)); });
    if (step < 0) list->setCurrentRow(0);
  }
  auto* list = dock->findChild<QListWidget*>("tourSteps");
  if (step >= 0 && list) {
    if (list->currentRow() == step)
      show_tour_step(*this, step, shipped_models_);  // again: the user may have changed the state since
    else
      list->setCurrentRow(step);
  }
  dock->show();
  dock->raise();
}

QString MainWindow::shortcutsText() const {
  const char* rows[][2] = {
      {"Ctrl+O", "open a model folder"},
      {"Ctrl+Shift+O", "open an attention file (.npz, .safetensors) without a model"},
      {"Ctrl+E", "export the current layer's heads as an image"},
      {"Alt+Up / Alt+Down, Ctrl+PgUp / Ctrl+PgDown", "previous / next layer"},
      {"Ctrl+Z / Ctrl+Shift+Z", "undo / redo a mask edit (after clicking the mask editor)"},
      {"double-click a head", "enlarge it (Head tab)"},
      {"mouse wheel / drag (Head tab)", "zoom / pan"},
      {"Ctrl+wheel (Mask editor)", "zoom; the scroll bars move around"},
      {"Ctrl+Q", "quit"},
  };
  QString html = "<table cellspacing=4>";
  for (const auto& r : rows) html += QString("<tr><td><b>%1</b></td><td>%2</td></tr>").arg(r[0], r[1]);
  return html + "</table>";
}

// Version, the libraries it was built with, and the backends this machine offers.
QString MainWindow::aboutText() const {
  QString backends;
  for (const auto& b : backend_names())
    backends += QString("<br>&nbsp;&nbsp;%1: %2")
                    .arg(QString::fromStdString(b), QString::fromStdString(backend_description(b)).toHtmlEscaped());
  return QString(
             "<h3>attnlab %1</h3>"
             "<p>See how transformer attention works: every head, every mask, any model it opens, "
             "live as you type; train and fine-tune in the app.</p>"
             "<p>Qt %2 (built with %3), Eigen %4%7<br>Backends:%5</p>"
             "<p>Model: %6</p>")
      .arg(ATTNLAB_VERSION, qVersion(), QT_VERSION_STR, QString::fromStdString(eigen_version()), backends,
           explore_->model() ? QString::fromStdString(explore_->model()->summary()).toHtmlEscaped() : QString("none"),
           onednn_version().empty() ? QString() : ", oneDNN " + QString::fromStdString(onednn_version()));
}

MainWindow::~MainWindow() = default;

void MainWindow::showError(const QString& message) {
  statusBar()->showMessage("error: " + message);
  if (QApplication::platformName() != "offscreen" && QApplication::platformName() != "minimal")
    QMessageBox::warning(this, "attnlab", message);
}

// A model or file that could not be opened: the status bar (quiet: batch runs, the reuse channel,
// which read it from there) or a dialog, which says what stays shown when something is.
void MainWindow::openFailed(const QString& message, const QString& kept, bool quiet) {
  if (quiet)
    statusBar()->showMessage(message);
  else
    showError(message + (explore_->model() ? "\n" + kept : QString()));
}

bool MainWindow::openModel(const QString& dir, bool quiet) {
  std::shared_ptr<const Model> m;
  try {
    m = std::make_shared<const Model>(load_model(dir.toStdString()));
  } catch (const std::exception& e) {  // Error, and anything a malformed file could still raise
    openFailed("Could not open the model: " + QString::fromStdString(e.what()), "The current model stays open.", quiet);
    return false;
  }
  useModel(m, dir);
  return true;
}

bool MainWindow::openAttention(const QString& path, int batch, bool quiet) {
  std::shared_ptr<const ForwardResult> result;
  std::shared_ptr<const Model> shape;
  std::string layout;
  try {
    AttentionFile file = load_attention_file(path.toStdString(), batch, available_bytes());
    layout = file.layout;
    result = std::make_shared<const ForwardResult>(attention_result(std::move(file)));
    shape = std::make_shared<const Model>(attention_model(*result, path.toStdString()));
  } catch (const std::exception& e) {
    openFailed("Could not open the attention file: " + QString::fromStdString(e.what()), "What was shown stays open.",
               quiet);
    return false;
  }
  attention_file_ = QFileInfo(path).absoluteFilePath();
  summary_text_ = QString("%1 - %2").arg(QFileInfo(path).fileName(), QString::fromStdString(shape->summary()));
  showSummary();
  summary_->setToolTip(attention_file_ + "\n" + QString::fromStdString(layout) +
                       "\nThe views that read probabilities show the file; the others need a model's weights.");
  explore_->setAttention(std::move(shape), std::move(result));
  tabs_->setCurrentWidget(explore_);
  return true;
}

void MainWindow::useModel(std::shared_ptr<const Model> m, const QString& source) {
  model_dir_ = source;
  attention_file_.clear();
  const ModelConfig& c = m->config;
  QString labels;
  for (const auto& l : c.labels) labels += (labels.isEmpty() ? "" : ", ") + QString::fromStdString(l);
  const QString name = QFileInfo(source).fileName().isEmpty() ? source : QFileInfo(source).fileName();
  summary_text_ = QString("%1 - %2").arg(name, QString::fromStdString(m->summary()));
  showSummary();
  QString tip = source + QString("\nfeed-forward %1, max length %2").arg(c.ff_dim).arg(c.max_len);
  if (m->tokenizer) tip += "\ntokenizer: " + QString::fromStdString(m->tokenizer->describe());
  if (!labels.isEmpty()) tip += "\nlabels: " + labels;
  for (const auto& n : m->hf.notes) tip += "\n" + QString::fromStdString(n);
  if (m->is_hf()) tip += "\nMasks are experiments on this model: it was not trained with them.";
  if (m->config.causal) tip += "\nA causal language model: its causal mask is always on.";
  summary_->setToolTip(tip);
  if (QFileInfo(source).isDir()) rememberRecent(QFileInfo(source).absoluteFilePath());
  train_->setBaseModel(m, name);
  explore_->setModel(std::move(m));
}

void MainWindow::showSummary() {
  if (summary_text_.isEmpty()) return summary_->clear();
  summary_->setText(tabs_->currentWidget() == train_ ? " In Explore: " + summary_text_ + " "
                                                     : " " + summary_text_ + " ");
}

// File > Recent models: the last eight folders opened (kept in the settings unless --no-settings).
void MainWindow::rememberRecent(const QString& dir) {
  if (!remember_recent_) return;
  QSettings s;
  QStringList list = s.value("model/recent").toStringList();
  list.removeAll(dir);
  list.prepend(dir);
  while (list.size() > 8) list.removeLast();
  s.setValue("model/recent", list);
  fillRecent();
}

void MainWindow::fillRecent() {
  recent_->clear();
  const QStringList list = remember_recent_ ? QSettings().value("model/recent").toStringList() : QStringList();
  for (const QString& d : list)
    recent_->addAction(QFileInfo(d).fileName() + "  (" + d + ")", this, [this, d] { openModel(d); });
  recent_->setEnabled(!list.isEmpty());
}

void MainWindow::exportDialog(int scope) {
  const QString filter = scope == 3 ? "CSV (*.csv);;NumPy (*.npy);;Attention file: tokens and probabilities (*.npz)"
                                    : "PNG image (*.png);;SVG (*.svg);;PDF (*.pdf)";
  const QString name = scope == 3 ? "attention.csv" : scope == 2 ? "all-layers.png" : "attention.png";
  const QString f = QFileDialog::getSaveFileName(this, "Export", name, filter);
  if (f.isEmpty()) return;
  if (f.endsWith(".png", Qt::CaseInsensitive)) {
    bool ok = false;
    const int dpi = QInputDialog::getInt(this, "Export", "Resolution (DPI):", explore_->exportDpi(), 48, 1200, 50, &ok);
    if (!ok) return;
    explore_->setExportDpi(dpi);
  }
  try {
    if (scope == 0)
      explore_->exportTo(f, explore_->layer(), explore_->enlargedHead());
    else if (scope == 1)
      explore_->exportTo(f, explore_->layer(), -1);
    else if (scope == 2)
      explore_->exportTo(f, -1, -1);
    else
      explore_->exportTo(f, -1, -1);
    statusBar()->showMessage("exported " + f);
  } catch (const Error& e) {
    showError(QString::fromStdString(e.what()));
  }
}

void MainWindow::dragEnterEvent(QDragEnterEvent* e) {
  if (e->mimeData()->hasUrls()) e->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* e) {
  for (const QUrl& u : e->mimeData()->urls()) {
    QString path = u.toLocalFile();
    const QFileInfo info(path);
    // attention made elsewhere: an .npz, or a .safetensors that is not a model folder's weights
    if (info.isFile() && (info.suffix().compare("npz", Qt::CaseInsensitive) == 0 ||
                          (info.suffix().compare("safetensors", Qt::CaseInsensitive) == 0 &&
                           !QFileInfo::exists(info.absolutePath() + "/config.json")))) {
      openAttention(path);
      break;
    }
    if (info.isFile()) path = info.absolutePath();  // a file inside the folder
    openModel(path);
    break;
  }
}

void MainWindow::setBackend(const QString& name) {
  int idx = backend_->findText(name);
  // "opencl" is the preferred device (the first GPU, else the first device; make_opencl_backend):
  // the toolbar shows it by its opencl:N name
  for (int i = 0; idx < 0 && name == "opencl" && i < backend_->count(); ++i)
    if (backend_->itemText(i).startsWith("opencl:") &&
        backend_->itemData(i, Qt::ToolTipRole).toString().contains(", GPU"))
      idx = i;
  for (int i = 0; idx < 0 && name == "opencl" && i < backend_->count(); ++i)
    if (backend_->itemText(i).startsWith("opencl:")) idx = i;
  if (idx >= 0) {
    const QSignalBlocker block(backend_);  // the controller gets the name asked for, once, below
    backend_->setCurrentIndex(idx);
  }
  explore_->setBackend(name);  // also names the combo cannot hold (an opencl:N that is not there)
}

void MainWindow::restoreSettings() {
  QSettings s;
  restoreGeometry(s.value("window/geometry").toByteArray());
  for (QSplitter* sp : findChildren<QSplitter*>())  // the layout: splitter positions
    if (!sp->objectName().isEmpty()) sp->restoreState(s.value("layout/" + sp->objectName()).toByteArray());
  tabs_->setCurrentWidget(s.value("layout/tab").toString() == "train" ? static_cast<QWidget*>(train_) : explore_);
  const QString text = s.value("explore/text").toString();
  if (!text.isEmpty()) explore_->setText(text);
  try {
    explore_->setMaskArgs(s.value("explore/masks").toStringList());
  } catch (const Error&) {
  }
  const QString backend = s.value("explore/backend").toString();
  const int idx = backend_->findText(backend);
  if (idx >= 0) backend_->setCurrentIndex(idx);
  explore_->setLayer(s.value("explore/layer").toInt());
}

void MainWindow::saveSettings() const {
  QSettings s;
  s.setValue("window/geometry", saveGeometry());
  for (QSplitter* sp : findChildren<QSplitter*>())
    if (!sp->objectName().isEmpty()) s.setValue("layout/" + sp->objectName(), sp->saveState());
  s.setValue("layout/tab", tabs_->currentWidget() == train_ ? "train" : "explore");
  s.setValue("model/dir", model_dir_);
  s.setValue("explore/text", explore_->text());
  s.setValue("explore/masks", explore_->maskArgs());
  s.setValue("explore/backend", backend_->currentText());
  s.setValue("explore/layer", explore_->layer());
}

void MainWindow::closeEvent(QCloseEvent* e) {
  saveSettings();
  if (train_->isTraining()) {
    train_->stopTraining();  // the trainer stops before its next batch
    train_->waitForFinish();
  }
  e->accept();
}

}  // namespace attnlab
