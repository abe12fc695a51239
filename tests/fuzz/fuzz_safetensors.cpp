// libFuzzer harness: the safetensors reader on arbitrary bytes. Errors are expected; crashes,
// sanitizer reports and huge allocations are not.
#include <cstdint>
#include <string>

#include "engine/formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    attnlab::parse_safetensors(std::string(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
  } catch (const attnlab::Error&) {
  }
  return 0;
}
