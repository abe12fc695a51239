#include "ui/attention_channel.h"

#include <QJsonDocument>
#include <QJsonObject>
#include <QLocalServer>
#include <QLocalSocket>
#include <QStandardPaths>
#include <QStatusBar>

#include <unistd.h>

#include "ui/explore_view.h"
#include "ui/main_window.h"

namespace attnlab {

QString attention_channel_name() {
  // the user's runtime folder ($XDG_RUNTIME_DIR, mode 0700; Qt makes a private one when it is
  // unset): no other user can put a socket of that name in its way
  const QString dir = QStandardPaths::writableLocation(QStandardPaths::RuntimeLocation);
  if (!dir.isEmpty()) return dir + "/attnlab-attention";
  return QString("attnlab-attention-%1").arg(getuid());  // the temporary folder
}

bool send_to_open_window(const QString& path, int batch, int layer, QString* reply) {
  QLocalSocket s;
  s.connectToServer(attention_channel_name());
  if (!s.waitForConnected(1000)) return false;  // nobody listens: the caller opens its own window
  const QJsonObject req{{"attention", path}, {"batch", batch}, {"layer", layer}};
  s.write(QJsonDocument(req).toJson(QJsonDocument::Compact) + "\n");
  if (!s.waitForBytesWritten(5000)) return false;
  // the window reads the file before it answers: a large one takes a while
  QByteArray answer;
  while (!answer.contains('\n') && s.waitForReadyRead(60000)) answer += s.readAll();
  *reply = answer.isEmpty() ? QString("error: the open window did not answer") : QString::fromUtf8(answer).trimmed();
  return true;
}

bool listen_for_attention(MainWindow* w, QString* error) {
  auto* server = new QLocalServer(w);
  server->setSocketOptions(QLocalServer::UserAccessOption);  // this user's notebooks only
  if (!server->listen(attention_channel_name())) {
    {  // a window that answers keeps its socket; only one left by a window that crashed goes
      QLocalSocket probe;
      probe.connectToServer(attention_channel_name());
      if (probe.waitForConnected(1000)) {
        *error = "another attnlab window already takes them";
        delete server;
        return false;
      }
    }
    QLocalServer::removeServer(attention_channel_name());
    if (!server->listen(attention_channel_name())) {
      *error = server->errorString();
      delete server;
      return false;
    }
  }
  QObject::connect(server, &QLocalServer::newConnection, w, [w, server] {
    while (QLocalSocket* s = server->nextPendingConnection()) {
      QObject::connect(s, &QLocalSocket::disconnected, s, &QObject::deleteLater);
      QObject::connect(s, &QLocalSocket::readyRead, w, [w, s] {
        if (!s->canReadLine()) return;
        const QJsonObject req = QJsonDocument::fromJson(s->readLine()).object();
        const QString path = req.value("attention").toString();
        QString answer;
        if (path.isEmpty()) {
          answer = "error: expected {\"attention\": FILE}";
        } else if (w->openAttention(path, req.value("batch").toInt(-1), /*quiet=*/true)) {
          const int layer = req.value("layer").toInt(-1);
          ExploreView* e = w->explore();
          if (layer >= 0 && e->model() && layer < e->model()->config.num_layers) e->setLayer(layer);
          w->showNormal();
          w->raise();
          w->activateWindow();
          answer = "opened " + path;
        } else {
          answer = "error: " + w->statusBar()->currentMessage();
        }
        s->write(answer.toUtf8() + "\n");
        s->flush();
        s->disconnectFromServer();
      });
    }
  });
  return true;
}

}  // namespace attnlab
