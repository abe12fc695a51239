// One window for attention sent from notebooks (attnlab.show in Python): the first
// `attnlab --attention FILE --reuse-window` listens on a local socket named for the user; later
// ones hand their file to that window and exit, so a notebook's calls land in one window.
#pragma once

#include <QString>

namespace attnlab {

class MainWindow;

// The socket: one per user, in the user's runtime folder ($XDG_RUNTIME_DIR/attnlab-attention).
QString attention_channel_name();
// Hands FILE (batch, layer; -1: the file's first, the window's current) to a window already
// listening. True when one answered; *reply is its answer ("opened ..." or "error: ..."). False at
// once when no window listens.
bool send_to_open_window(const QString& path, int batch, int layer, QString* reply);
// Makes `w` the window later --reuse-window calls reach (a stale socket of a crashed window is
// replaced). False (and *error) when the socket cannot be made.
bool listen_for_attention(MainWindow* w, QString* error);

}  // namespace attnlab
