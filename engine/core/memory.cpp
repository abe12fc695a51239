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

double weight_bytes(const ModelConfig& c) {
  return static_cast<double>(c.parameter_count()) * 4.0;
}

void check_weights_fit(const ModelConfig& c, double available, const std::string& where) {
  const double need = weight_bytes(c);
  if (available <= 0 || need <= 0.9 * available) return;
  char msg[400];
  std::snprintf(msg, sizeof msg,
                ": %.2f B parameters take %.1f GB as float32 weights, more than the %.1f GB of memory available "
                "(attnlab keeps weights in float32; close other programs or open a smaller model)",
                static_cast<double>(c.parameter_count()) / 1e9, need / 1e9, available / 1e9);
  throw Error(where + msg);
}

}  // namespace attnlab
