// Catch2 main for the UI tests: a QApplication on the offscreen platform.
#define CATCH_CONFIG_RUNNER
#include <QApplication>
#include <catch2/catch.hpp>

int main(int argc, char** argv) {
  qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  QApplication::setOrganizationName("attnlab-tests");  // keep the user's settings out of it
  return Catch::Session().run(argc, argv);
}
