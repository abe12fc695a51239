// libFuzzer harness: a Hugging Face config.json (model_type, sizes, activation, labels) and a
// sharded checkpoint's model.safetensors.index.json.
#include <cstdint>
#include <string>

#include "engine/model/hf_model.h"
#include "engine/core/tensor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  try {
    attnlab::HfInfo info;
    const attnlab::ModelConfig c = attnlab::parse_hf_config(input, info);
    c.validate();
  } catch (const attnlab::Error&) {
  }
  try {
    for (const std::string& f : attnlab::parse_shard_index(input, "index.json"))
      if (f.find('/') != std::string::npos) __builtin_trap();  // a shard must stay inside the folder
  } catch (const attnlab::Error&) {
  }
  return 0;
}
