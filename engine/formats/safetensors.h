// Reading and writing .safetensors files (the format PyTorch users save weights in).
// The reader checks every length and offset against the file before touching data and
// converts F16 / BF16 to float32. Integer tensors (buffers such as position_ids) are checked and
// left out; any other dtype is an Error naming the tensor.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>

#include "engine/core/half.h"
#include "engine/core/tensor.h"

namespace attnlab {

using TensorMap = std::map<std::string, Tensor>;
using HalfMap = std::map<std::string, HalfTensor>;

TensorMap parse_safetensors(const std::string& bytes, const std::string& where = "model.safetensors");
// consumed(p, n), when given, is told of each tensor's bytes once they are converted (a mapped
// file gives those pages back).
// halves, when given, receives the F16 / BF16 matrices (rank 2) as the file stores them instead of
// widened into the result, whose entry for each keeps the name and shape with no values (a model
// keeps them in 16 bits: engine/core/half.h). copy(dst, p, n), when given, copies the bytes of
// those matrices and of F32 tensors out (a mapped file reads them with pread instead of touching
// its pages).
TensorMap parse_safetensors(const char* bytes, size_t size, const std::string& where,
                            const std::function<void(const char*, size_t)>& consumed = nullptr,
                            HalfMap* halves = nullptr,
                            const std::function<void(void*, const char*, size_t)>& copy = nullptr);
// The file memory-mapped while it is parsed (read into memory where it cannot be mapped).
TensorMap load_safetensors(const std::string& path, HalfMap* halves = nullptr);
std::string serialize_safetensors(const TensorMap& tensors);
// The header's "__metadata__" (a string-to-string map; empty when there is none).
std::map<std::string, std::string> parse_safetensors_metadata(const std::string& bytes, const std::string& where);
// Writes to PATH.tmp and renames into place, so a crash never leaves a half-written file.
void save_safetensors(const std::string& path, const TensorMap& tensors);

}  // namespace attnlab
