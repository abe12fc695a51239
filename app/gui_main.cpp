// attnlab: the desktop app. Opens the shipped default model (or --model DIR) and, with
// --screenshot FILE.png, renders the window once, writes the PNG and exits.
#include <QApplication>
#include <QCommandLineParser>
#include <QTimer>

#include "app/default_model.h"
#include "ui/main_window.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName("attnlab");
  QCommandLineParser p;
  p.addHelpOption();
  p.addOption({"model", "Model folder to open.", "DIR"});
  p.addOption({"text", "Text to show.", "TEXT"});
  p.addOption({"screenshot", "Render the window to FILE.png and exit.", "FILE"});
  p.process(app);

  attnlab::MainWindow w;
  const QString dir = p.isSet("model") ? p.value("model") : QString::fromStdString(attnlab::default_model_dir(argv[0]));
  w.openModel(dir);
  if (p.isSet("text")) w.setText(p.value("text"));
  w.show();
  if (p.isSet("screenshot")) {
    const QString file = p.value("screenshot");
    QTimer::singleShot(200, [&w, file] {
      const bool ok = w.grab().save(file);
      QApplication::exit(ok ? 0 : 1);
    });
  }
  return app.exec();
}
