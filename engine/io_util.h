// Small file helpers shared by the engine's readers and writers.
#pragma once

#include <string>

namespace attnlab {

// Whole file as bytes; Error "PATH: cannot open" when it cannot be read.
std::string read_file_bytes(const std::string& path);
// Writes PATH.tmp, flushes, renames over PATH: readers see the old or the new file, never half.
void write_file_atomic(const std::string& path, const std::string& bytes);
// A JSON library error as a user reads it: nlohmann's "[json.exception.parse_error.101] parse
// error at ..." without the bracketed internal name.
inline std::string json_error_text(std::string what) {
  const size_t close = what.find("] ");
  if (what.rfind("[json.exception", 0) == 0 && close != std::string::npos) what = what.substr(close + 2);
  return what;
}

}  // namespace attnlab
