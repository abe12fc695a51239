// A model folder, whichever kind: attnlab's own or an unmodified Hugging Face one. Loading picks
// the reader; saving writes into a sibling temporary folder, then exchanges it with the old one in
// one atomic rename (renameat2 RENAME_EXCHANGE), so a crash or kill at any moment leaves either
// the complete old model or the complete new one.
#include "engine/model/model_folder.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "engine/model/hf_model.h"

namespace attnlab {

namespace fs = std::filesystem;

Model load_model(const std::string& dir) {
  if (!fs::exists(dir)) throw Error(dir + ": no such model folder");
  if (!fs::is_directory(dir))
    throw Error(dir + ": not a folder (a model is a folder with config.json, model.safetensors, vocab.txt)");
  if (!fs::exists(fs::path(dir) / "config.json"))
    throw Error(dir + ": not a model folder (no config.json; a model folder holds config.json and its weights)");
  return is_hf_folder(dir) ? load_hf_model(dir) : load_attnlab_folder(dir);
}

void save_model(const Model& model, const std::string& dir_in) {
  const fs::path dir = fs::path(dir_in).lexically_normal();
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (fs::exists(dir) && !fs::is_directory(dir)) throw Error(dir.string() + ": exists and is not a folder");
  const fs::path tmp = parent / ("." + dir.filename().string() + ".saving-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec))
    throw Error(dir.string() + ": cannot create a temporary folder beside it (" + ec.message() + ")");
  try {
    if (model.is_hf())
      write_hf_folder(model, tmp.string());
    else
      write_attnlab_folder(model, tmp.string());
    if (fs::exists(dir)) {
      if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0)
        throw Error(dir.string() + ": cannot replace the folder (" + std::strerror(errno) + ")");
      fs::remove_all(tmp, ec);  // now holds the previous model
    } else {
      fs::rename(tmp, dir, ec);
      if (ec) throw Error(dir.string() + ": cannot create (" + ec.message() + ")");
    }
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace attnlab
