// Small file helpers shared by the engine's readers and writers.
#pragma once

#include <string>

namespace attnlab {

// Whole file as bytes; Error "PATH: cannot open" when it cannot be read.
std::string read_file_bytes(const std::string& path);
// Writes PATH.tmp, flushes, renames over PATH: readers see the old or the new file, never half.
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace attnlab
