// Small file helpers shared by the engine's readers and writers.
#pragma once

#include <string>

namespace attnlab {

// Whole file as bytes; Error "PATH: cannot open" when it cannot be read.
std::string read_file_bytes(const std::string& path);
// Writes PATH.tmp, flushes, renames over PATH: readers see the old or the new file, never half.
void write_file_atomic(const std::string& path, const std::string& bytes);
// 30522 -> "30,522", for counts shown to people.
inline std::string thousands(long long v) {
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > (v < 0 ? 1 : 0); i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

// A JSON library error as a user reads it: nlohmann's "[json.exception.parse_error.101] parse
// error at ..." without the bracketed internal name.
inline std::string json_error_text(std::string what) {
  const size_t close = what.find("] ");
  if (what.rfind("[json.exception", 0) == 0 && close != std::string::npos) what = what.substr(close + 2);
  return what;
}

}  // namespace attnlab
