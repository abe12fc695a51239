// libFuzzer harness: the CLI's --mask parser, one argument per input line (custom: files are
// skipped: they would read arbitrary paths), then the mask those arguments build for T = S = 9
// with two [PAD] keys, and its warnings.
#include <cstdint>
#include <string>

#include "engine/compute/mask.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  attnlab::MaskSpec spec;
  size_t start = 0;
  while (start <= bytes.size()) {
    size_t end = bytes.find('\n', start);
    if (end == std::string::npos) end = bytes.size();
    const std::string arg = bytes.substr(start, end - start);
    start = end + 1;
    if (arg.rfind("custom", 0) == 0) continue;
    try {
      attnlab::add_mask_arg(spec, arg);
    } catch (const attnlab::Error&) {
    }
  }
  try {
    const attnlab::AttnMask m = attnlab::build_mask(spec, 9, 9, 4, {5, 5, 5, 5, 5, 5, 5, 0, 0}, 0);
    attnlab::mask_warnings(m, "fuzz");
  } catch (const attnlab::Error&) {
  }
  return 0;
}
