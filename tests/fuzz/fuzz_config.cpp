// libFuzzer harness: config.json parsing and validation (and writing back what parsed).
#include <cstdint>
#include <string>

#include "engine/core/config.h"
#include "engine/core/tensor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const attnlab::ModelConfig c = attnlab::parse_config_json(std::string(reinterpret_cast<const char*>(data), size));
    attnlab::parse_config_json(attnlab::config_to_json(c));  // what we write, we read
  } catch (const attnlab::Error&) {
  }
  return 0;
}
