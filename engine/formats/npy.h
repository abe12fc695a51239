// Our own small .npy reader and writer (NumPy format 1.0 / 2.0 / 3.0, C order, little-endian).
// Reads bool, int8..int64, uint8..uint64, float16/32/64 into float32 values and remembers
// whether the file held floats (a custom mask's meaning depends on that).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/core/tensor.h"

namespace attnlab {

enum class NpyKind { Bool, Int, Float };

struct NpyArray {
  Tensor tensor;  // values converted to float32
  NpyKind kind = NpyKind::Float;
};

NpyArray parse_npy(std::string_view bytes, const std::string& where = "array.npy");
// A numeric array cut along its first axis: one float32 tensor per index, without the whole array
// in memory at once beside them (a [layers, heads, T, S] stack read as its layers). An array of
// fewer than min_rank dimensions comes back whole, as one slice; shape is the stored shape.
struct NpySlices {
  std::vector<int64_t> shape;
  std::vector<Tensor> slices;
};
NpySlices parse_npy_slices(std::string_view bytes, const std::string& where, size_t min_rank);
NpyArray load_npy(const std::string& path);
// A string array ('<U' as np.array(strings) saves it, or '|S' bytes) in C order, as UTF-8;
// *shape, when given, gets its shape. Error for numbers, and for object arrays ('|O', pickled:
// never read).
std::vector<std::string> parse_npy_strings(std::string_view bytes, const std::string& where,
                                           std::vector<int64_t>* shape = nullptr);
bool npy_holds_strings(std::string_view bytes);
// The members of an .npz (numpy.savez: stored; numpy.savez_compressed: deflated; Zip64 as
// Python writes it past 4 GiB) in the archive's order: name without ".npy", and the .npy bytes.
// Every size, offset and CRC is checked; Error naming the member otherwise. A stored member's bytes
// are a view of `bytes` (valid while it is: a 600 MB archive is not copied again); a deflated
// one's are its own (owned).
struct NpzMember {
  std::string name;
  std::string_view bytes;
  std::shared_ptr<const std::string> owned;
};
std::vector<NpzMember> parse_npz_members(const std::string& bytes, const std::string& where);
std::string serialize_npy(const Tensor& t);
void save_npy(const std::string& path, const Tensor& t);
// A float32 array of shape [parts, ...] written part after part: part(i) gives part i (each of
// shape[1:]), so only one part is in memory at a time (every layer's attention without holding
// them all). Written to PATH.tmp and renamed into place, as save_npy.
void save_npy_parts(const std::string& path, const std::vector<int64_t>& shape,
                    const std::function<std::shared_ptr<const Tensor>(int64_t)>& part);
// A bool array ('|b1'): how masks are saved, so that loading one back blocks rather than adds.
std::string serialize_npy_bool(const std::vector<int64_t>& shape, const std::vector<uint8_t>& values);
void save_npy_bool(const std::string& path, const std::vector<int64_t>& shape, const std::vector<uint8_t>& values);
// A 1-D string array as np.array(list_of_str) saves it: '<UN', UTF-32, NUL-padded to the longest.
std::string serialize_npy_strings(const std::vector<std::string>& utf8);
// An .npz as numpy.savez writes it: a zip archive of stored (uncompressed) NAME.npy members,
// float32 arrays in the map's order, then the string arrays (tokens). Error above the plain zip
// format's 4 GiB.
std::string serialize_npz(const std::map<std::string, Tensor>& arrays,
                          const std::map<std::string, std::vector<std::string>>& strings = {});
void save_npz(const std::string& path, const std::map<std::string, Tensor>& arrays);

}  // namespace attnlab
