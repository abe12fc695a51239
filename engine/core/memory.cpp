// Memory figures (see memory.h).
#include "engine/core/memory.h"

#include <cstdio>
#include <fstream>

#include "engine/core/tensor.h"

namespace attnlab {

double available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  double kb = 0;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024.0;
  return 0;
}

double weight_bytes(const ModelConfig& c, bool half_matrices) {
  const double all = static_cast<double>(c.parameter_count());
  return half_matrices ? 4.0 * all - 2.0 * static_cast<double>(c.half_matrix_count()) : 4.0 * all;
}

void check_weights_fit(const ModelConfig& c, double available, const std::string& where, bool half_matrices) {
  const double need = weight_bytes(c, half_matrices);
  if (available <= 0 || need <= 0.9 * available) return;
  char msg[400];
  std::snprintf(msg, sizeof msg,
                ": %.2f B parameters take %.1f GB as weights (%s), more than the %.1f GB of memory available "
                "(close other programs or open a smaller model)",
                static_cast<double>(c.parameter_count()) / 1e9, need / 1e9,
                half_matrices ? "the layers' matrices in 16 bits, the rest float32" : "float32", available / 1e9);
  throw Error(where + msg);
}

void check_text_fits(double text_bytes, double available, const std::string& where, double per_byte) {
  const double need = per_byte * text_bytes;
  if (available <= 0 || need <= 0.9 * available) return;
  char msg[400];
  std::snprintf(msg, sizeof msg,
                ": a text of %.2f GB takes up to %.1f GB to read into training sequences (its tokens with their "
                "labels, ids and sequences), more than the %.1f GB of memory available; train on a part of it",
                text_bytes / 1e9, need / 1e9, available / 1e9);
  throw Error(where + msg);
}

}  // namespace attnlab
