// Where the shipped default model lives: $ATTNLAB_MODEL if set, else the resources/ folder next to
// the running binary (installed: ../share/attnlab), else the source tree's resources/ (a build run
// in place).
#pragma once

#include <filesystem>
#include <string>

namespace attnlab {

inline std::string default_model_dir(const std::string& argv0) {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("ATTNLAB_MODEL"); env && *env) return env;
  std::error_code ec;
  // The running binary: /proc/self/exe (argv[0] is a bare name when it was found on PATH, as an
  // installed attnlab is), else argv[0].
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) exe = fs::canonical(fs::path(argv0), ec);
  if (!ec) {
    for (const fs::path& p :
         {exe.parent_path() / "../share/attnlab/models/default", exe.parent_path() / "resources/models/default"})
      if (fs::exists(p / "config.json")) return p.lexically_normal().string();
  }
  return std::string(ATTNLAB_RESOURCE_DIR) + "/models/default";
}

// The shipped datasets (resources/data), found the same way as the default model.
inline std::string default_data_dir(const std::string& argv0) {
  namespace fs = std::filesystem;
  const fs::path model(default_model_dir(argv0));
  const fs::path data = model.parent_path().parent_path() / "data";
  if (fs::exists(data)) return data.string();
  return std::string(ATTNLAB_RESOURCE_DIR) + "/data";
}

}  // namespace attnlab
