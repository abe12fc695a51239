// libFuzzer harness: the .npy reader, and a custom mask built from whatever parsed.
#include <cstdint>
#include <string>

#include "engine/compute/mask.h"
#include "engine/formats/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    attnlab::NpyArray a = attnlab::parse_npy(std::string(reinterpret_cast<const char*>(data), size), "fuzz.npy");
    bool small = a.tensor.shape.size() >= 2 && a.tensor.shape.size() <= 3;
    for (int64_t d : a.tensor.shape) small = small && d <= 64;  // a mask the harness can afford to build
    if (small) {
      attnlab::MaskSpec spec;
      spec.custom = a;
      const int S = static_cast<int>(a.tensor.shape.back()),
                T = static_cast<int>(a.tensor.shape[a.tensor.shape.size() - 2]);
      const int heads = a.tensor.shape.size() == 3 ? static_cast<int>(a.tensor.shape[0]) : 2;
      attnlab::build_mask(spec, T, S, heads, std::vector<int>(static_cast<size_t>(S), 3), 0);
    }
  } catch (const attnlab::Error&) {
  }
  return 0;
}
