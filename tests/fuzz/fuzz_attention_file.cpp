// libFuzzer harness: attention files (.npz with its zip, Zip64, deflate and string arrays; or
// .safetensors with tokens in its metadata), then the result and the shape the app opens them as.
// The first byte picks the format and the batch; the rest is the file.
#include <cstdint>
#include <string>

#include "engine/formats/attention_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool npz = (data[0] & 1) == 0;
  const int batch = (data[0] >> 1) % 4 - 1;  // -1 (the only or first), 0, 1, 2
  try {
    attnlab::AttentionFile f = attnlab::parse_attention_file(
        std::string(reinterpret_cast<const char*>(data + 1), size - 1), npz ? "fuzz.npz" : "fuzz.safetensors", batch);
    const attnlab::ForwardResult r = attnlab::attention_result(std::move(f));
    attnlab::attention_model(r, "fuzz");
  } catch (const attnlab::Error&) {
  }
  return 0;
}
