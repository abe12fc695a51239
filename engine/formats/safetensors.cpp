// safetensors: 8-byte little-endian header length, a JSON header {name: {dtype, shape,
// data_offsets}}, then the raw data. Every offset is checked against the data size.
#include "engine/formats/safetensors.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/core/io_util.h"

namespace attnlab {

using json = nlohmann::json;

std::string read_file_bytes(const std::string& path) {
  if (std::filesystem::is_directory(path)) throw Error(path + ": is a directory, expected a file");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw Error(path + ": cannot write");
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.flush();
    if (!f) throw Error(path + ": write failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error(path + ": cannot rename into place (" + ec.message() + ")");
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal half -> normal float
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

TensorMap parse_safetensors(const std::string& bytes, const std::string& where) {
  if (bytes.size() < 8) throw Error(where + ": too short to be a safetensors file");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  if (n > bytes.size() - 8)
    throw Error(where + ": header length " + std::to_string(n) + " runs past the end of the file (" +
                std::to_string(bytes.size()) + " bytes)");
  json header;
  try {
    header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  } catch (const json::exception& e) {  // parse errors, and out_of_range for numbers like 1e99999
    throw Error(where + ": header is not valid JSON (" + json_error_text(e.what()) + ")");
  }
  if (!header.is_object()) throw Error(where + ": header is not a JSON object");
  const uint64_t data_size = bytes.size() - 8 - n;
  const char* data = bytes.data() + 8 + n;

  TensorMap out;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string at = where + ": tensor \"" + name + "\"";
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets"))
      throw Error(at + ": needs dtype, shape and data_offsets");
    if (!info["dtype"].is_string() || !info["shape"].is_array() || !info["data_offsets"].is_array() ||
        info["data_offsets"].size() != 2)
      throw Error(at + ": malformed entry");
    const std::string dtype = info["dtype"].get<std::string>();
    size_t elem = 0;
    bool skip = false;  // integer buffers (BERT's position_ids) are checked, then left out: no weight is one
    if (dtype == "F32")
      elem = 4;
    else if (dtype == "F16" || dtype == "BF16")
      elem = 2;
    else if (dtype == "I64" || dtype == "U64")
      elem = 8, skip = true;
    else if (dtype == "I32" || dtype == "U32")
      elem = 4, skip = true;
    else if (dtype == "I16" || dtype == "U16")
      elem = 2, skip = true;
    else if (dtype == "I8" || dtype == "U8" || dtype == "BOOL")
      elem = 1, skip = true;
    else
      throw Error(at + ": dtype " + dtype + " is not supported (F32, F16, BF16 are)");

    Tensor t;
    uint64_t count = 1;
    for (const auto& d : info["shape"]) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<long long>() >= 0))
        throw Error(at + ": shape entries must be non-negative integers");
      const uint64_t v = d.get<uint64_t>();
      if (v != 0 && count > (uint64_t(1) << 40) / v) throw Error(at + ": shape is absurdly large");
      count *= v;
      t.shape.push_back(static_cast<int64_t>(v));
    }
    for (const auto& o : info["data_offsets"])
      if (!o.is_number_unsigned() && !(o.is_number_integer() && o.get<long long>() >= 0))
        throw Error(at + ": data_offsets must be non-negative integers");
    const uint64_t begin = info["data_offsets"][0].get<uint64_t>();
    const uint64_t end = info["data_offsets"][1].get<uint64_t>();
    if (begin > end || end > data_size)
      throw Error(at + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                  "] lie outside the data (" + std::to_string(data_size) + " bytes)");
    if (end - begin != count * elem)
      throw Error(at + ": shape " + shape_str(t.shape) + " of " + dtype + " needs " + std::to_string(count * elem) +
                  " bytes but data_offsets give " + std::to_string(end - begin));
    if (skip) continue;
    t.data.resize(count);
    const char* p = data + begin;
    if (elem == 4) {
      std::memcpy(t.data.data(), p, count * 4);  // the format is little-endian, as is every host we build on
    } else {
      for (uint64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        t.data[i] = dtype == "F16" ? half_to_float(h) : bf16_to_float(h);
      }
    }
    out.emplace(name, std::move(t));
  }
  return out;
}

TensorMap load_safetensors(const std::string& path) {
  return parse_safetensors(read_file_bytes(path), path);
}

std::string serialize_safetensors(const TensorMap& tensors) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};  // transformers' from_pretrained requires it
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t bytes = t.data.size() * 4;
    header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  while ((h.size() + 8) % 8 != 0) h.push_back(' ');  // keep the data 8-byte aligned, as the format advises
  std::string out;
  out.reserve(8 + h.size() + offset);
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += h;
  for (const auto& [name, t] : tensors) out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * 4);
  return out;
}

void save_safetensors(const std::string& path, const TensorMap& tensors) {
  write_file_atomic(path, serialize_safetensors(tensors));
}

}  // namespace attnlab
