// Measured matrix-product rates, cached per machine, and the choices made from them (see the
// header). The cache is a small JSON file; a missing, unreadable or foreign one is measured anew.
#include "engine/compute/measured.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/compute/backend.h"
#include "engine/compute/ops.h"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "unknown CPU";
}

std::string machine_key() {
  const std::string dnn = onednn_version();
  return cpu_model() + (dnn.empty() ? " / no oneDNN" : " / oneDNN " + dnn);
}

fs::path cache_dir() {
  if (const char* d = std::getenv("ATTNLAB_CACHE"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return fs::path(d) / "attnlab";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "attnlab";
  return {};
}

fs::path cache_file(const std::string& key) {
  const fs::path dir = cache_dir();
  if (dir.empty()) return {};
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016zx", std::hash<std::string>{}(key));
  return dir / ("matmul-rates-" + std::string(hex) + ".json");
}

nlohmann::json to_json(const MatmulRates& r) {
  return {{"n", r.n},
          {"eigen_gflops", r.eigen},
          {"onednn_gflops", r.onednn},
          {"onednn_bf16_gflops", r.onednn_bf16},
          {"machine", r.machine}};
}

// Writes to a temporary file, then links it into place: with overwrite false an existing file
// (another process was first) is kept, so every process of this machine reads the same rates.
std::string write_rates(const MatmulRates& r, bool overwrite) {
  const fs::path path = cache_file(r.machine);
  if (path.empty()) return "";
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  const fs::path tmp = path.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp);
    if (!f) return "";
    f << to_json(r).dump(1) << "\n";
    if (!f) return "";
  }
  if (overwrite) {
    fs::rename(tmp, path, ec);
  } else {
    fs::create_hard_link(tmp, path, ec);  // fails when the file exists: the first one stays
    fs::remove(tmp, ec);
    return fs::exists(path) ? path.string() : "";
  }
  if (ec) {
    fs::remove(tmp, ec);
    return "";
  }
  return path.string();
}

bool read_rates(const fs::path& path, const std::string& key, MatmulRates& r) {
  std::ifstream f(path);
  if (!f) return false;
  try {
    const auto j = nlohmann::json::parse(f);
    if (j.at("machine").get<std::string>() != key) return false;
    r.n = j.at("n").get<int>();
    r.eigen = j.at("eigen_gflops").get<double>();
    r.onednn = j.at("onednn_gflops").get<double>();
    r.onednn_bf16 = j.at("onednn_bf16_gflops").get<double>();
    r.machine = key;
    return r.eigen > 0;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

MatmulRates measure_matmul_rates(int n, int repeat) {
  MatmulRates r;
  r.n = n;
  r.machine = machine_key();
  r.eigen = sgemm_gflops(n, repeat);
  r.onednn = onednn_sgemm_gflops(n, repeat);
  try {
    r.onednn_bf16 = onednn_bf16_gflops(n, repeat);
  } catch (const std::exception&) {
    r.onednn_bf16 = 0;  // no bf16 matmul on this instruction set (ONEDNN_MAX_CPU_ISA=AVX2 caps it)
  }
  return r;
}

const MatmulRates& matmul_rates() {
  static MatmulRates rates;
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string key = machine_key();
    const fs::path path = cache_file(key);
    if (!path.empty() && read_rates(path, key, rates)) return;
    rates = measure_matmul_rates(384, 9);
    write_rates(rates, false);
    if (!path.empty()) read_rates(path, key, rates);  // another process's, if it was first
  });
  return rates;
}

std::string save_matmul_rates(const MatmulRates& r) {
  return write_rates(r, true);
}

std::string fp32_gemm_choice() {
#ifdef ATTNLAB_WITH_ONEDNN
  if (const char* g = std::getenv("ATTNLAB_GEMM"); g && *g) {
    const std::string s = g;
    if (s == "eigen" || s == "onednn") return s;
  }
  const MatmulRates& r = matmul_rates();
  return r.eigen >= 1.1 * r.onednn ? "eigen" : "onednn";
#else
  return "eigen";  // built without oneDNN
#endif
}

std::string bf16_speed_notice() {
  if (!bf16_available()) return "";
  const MatmulRates& r = matmul_rates();
  const double fp32 = std::max(r.eigen, r.onednn);
  if (r.onednn_bf16 >= fp32) return "";
  std::ostringstream s;
  s.precision(0);
  s << std::fixed << "bf16 is slower than fp32 on this CPU (measured " << r.onednn_bf16 << " vs " << fp32
    << " GFLOP/s): use cpu";
  return s.str();
}

}  // namespace attnlab
