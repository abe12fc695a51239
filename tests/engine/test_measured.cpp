// What this machine measures (engine/compute/measured.h): the three products' rates, their cache file,
// and the choices made from them (the cpu ops' fp32 product, cpu-bf16's notice).
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "engine/compute/backend.h"
#include "engine/compute/measured.h"
#include "engine/compute/ops.h"

using namespace attnlab;

TEST_CASE("measured rates: positive, saved to the cache and read back", "[measured]") {
  const MatmulRates r = measure_matmul_rates(64, 3);
  CHECK(r.n == 64);
  CHECK(r.eigen > 0);
#ifdef ATTNLAB_WITH_ONEDNN
  CHECK(r.onednn > 0);
#else
  CHECK(r.onednn == 0);
#endif
  // a bf16 rate exactly where oneDNN has bf16 kernels (not with ONEDNN_MAX_CPU_ISA=AVX2)
  CHECK((r.onednn_bf16 > 0) == bf16_available());
  CHECK_FALSE(r.machine.empty());

  const auto dir = std::filesystem::temp_directory_path() / ("attnlab_rates_" + std::to_string(::getpid()));
  const char* before = std::getenv("ATTNLAB_CACHE");
  const std::string saved_env = before ? before : "";
  setenv("ATTNLAB_CACHE", dir.c_str(), 1);
  const std::string path = save_matmul_rates(r);
  if (saved_env.empty())
    unsetenv("ATTNLAB_CACHE");
  else
    setenv("ATTNLAB_CACHE", saved_env.c_str(), 1);
  REQUIRE_FALSE(path.empty());
  CHECK(std::filesystem::path(path).parent_path() == dir);
  std::ifstream f(path);
  const auto j = nlohmann::json::parse(f);
  CHECK(j.at("eigen_gflops").get<double>() == r.eigen);
  CHECK(j.at("onednn_bf16_gflops").get<double>() == r.onednn_bf16);
  CHECK(j.at("machine").get<std::string>() == r.machine);
  std::filesystem::remove_all(dir);
}

TEST_CASE("choices follow the measured rates", "[measured]") {
  const MatmulRates& r = matmul_rates();
  REQUIRE(r.eigen > 0);
  const std::string choice = fp32_gemm_choice();
#ifndef ATTNLAB_WITH_ONEDNN
  CHECK(choice == "eigen");  // no oneDNN in this build
#else
  if (const char* forced = std::getenv("ATTNLAB_GEMM"); forced && *forced)
    CHECK(choice == forced);
  else
    CHECK(choice == (r.eigen >= 1.1 * r.onednn ? "eigen" : "onednn"));
#endif
  // cpu-bf16 says it is slower exactly when its products measured slower than the best fp32 ones
  const std::string slow = bf16_speed_notice();
  if (bf16_available()) {
    CHECK(slow.empty() == (r.onednn_bf16 >= std::max(r.eigen, r.onednn)));
    if (!slow.empty()) CHECK(bf16_notice().find("slower") != std::string::npos);
  } else {
    CHECK(slow.empty());
  }
}
