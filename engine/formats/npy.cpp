// .npy parsing: magic, version, header dict ('descr', 'fortran_order', 'shape'), raw data.
#include "engine/formats/npy.h"

#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/core/io_util.h"
#include "engine/formats/safetensors.h"  // half_to_float

namespace attnlab {

namespace {

// Value of 'key' in the header's Python dict literal, as the raw text after the colon.
std::string dict_value(const std::string& h, const std::string& key, const std::string& where) {
  const std::string k1 = "'" + key + "'";
  size_t p = h.find(k1);
  if (p == std::string::npos) throw Error(where + ": header has no '" + key + "'");
  p = h.find(':', p + k1.size());
  if (p == std::string::npos) throw Error(where + ": malformed header near '" + key + "'");
  ++p;
  while (p < h.size() && h[p] == ' ') ++p;
  if (p >= h.size()) throw Error(where + ": malformed header near '" + key + "'");
  size_t end;
  if (h[p] == '\'') {
    end = h.find('\'', p + 1);
    if (end == std::string::npos) throw Error(where + ": malformed header near '" + key + "'");
    return h.substr(p + 1, end - p - 1);
  }
  if (h[p] == '(') {
    end = h.find(')', p);
    if (end == std::string::npos) throw Error(where + ": malformed header near '" + key + "'");
    return h.substr(p, end - p + 1);
  }
  end = h.find_first_of(",}", p);
  if (end == std::string::npos) throw Error(where + ": malformed header near '" + key + "'");
  return h.substr(p, end - p);
}

}  // namespace

NpyArray parse_npy(const std::string& bytes, const std::string& where) {
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0)
    throw Error(where + ": not a .npy file (bad magic)");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t hlen, hstart;
  if (major == 1) {
    hlen = static_cast<unsigned char>(bytes[8]) | static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8;
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw Error(where + ": truncated header");
    hlen = 0;
    for (int i = 3; i >= 0; --i) hlen = (hlen << 8) | static_cast<unsigned char>(bytes[8 + static_cast<size_t>(i)]);
    hstart = 12;
  } else {
    throw Error(where + ": unsupported .npy version " + std::to_string(major));
  }
  if (hlen > bytes.size() - hstart) throw Error(where + ": header runs past the end of the file");
  const std::string h = bytes.substr(hstart, hlen);
  const std::string descr = dict_value(h, "descr", where);
  const std::string fortran = dict_value(h, "fortran_order", where);
  const std::string shape_txt = dict_value(h, "shape", where);
  if (fortran.find("True") != std::string::npos)
    throw Error(where + ": Fortran-order arrays are not supported (save with np.ascontiguousarray)");

  NpyArray out;
  std::vector<int64_t> shape;
  {
    if (shape_txt.empty() || shape_txt.front() != '(') throw Error(where + ": malformed shape " + shape_txt);
    size_t i = 1;
    while (i < shape_txt.size()) {
      while (i < shape_txt.size() && (shape_txt[i] == ' ' || shape_txt[i] == ',')) ++i;
      if (i >= shape_txt.size() || shape_txt[i] == ')') break;
      if (shape_txt[i] < '0' || shape_txt[i] > '9') throw Error(where + ": malformed shape " + shape_txt);
      int64_t v = 0;
      while (i < shape_txt.size() && shape_txt[i] >= '0' && shape_txt[i] <= '9') {
        v = v * 10 + (shape_txt[i] - '0');
        if (v > (int64_t(1) << 40)) throw Error(where + ": shape is absurdly large");
        ++i;
      }
      shape.push_back(v);
    }
  }
  uint64_t count = 1;
  for (int64_t d : shape) {
    if (d != 0 && count > (uint64_t(1) << 40) / static_cast<uint64_t>(d))
      throw Error(where + ": shape is absurdly large");
    count *= static_cast<uint64_t>(d);
  }
  if (descr.size() < 3) throw Error(where + ": unsupported dtype '" + descr + "'");
  const char order = descr[0];
  const char kind = descr[1];
  const int size = std::atoi(descr.c_str() + 2);
  if (order == '>' && size > 1) throw Error(where + ": big-endian arrays are not supported");
  const bool ok_kind = (kind == 'b' && size == 1) ||
                       ((kind == 'i' || kind == 'u') && (size == 1 || size == 2 || size == 4 || size == 8)) ||
                       (kind == 'f' && (size == 2 || size == 4 || size == 8));
  if (!ok_kind) throw Error(where + ": unsupported dtype '" + descr + "' (bool, int, uint, float are read)");
  const size_t data_start = hstart + hlen;
  if (bytes.size() - data_start < count * static_cast<uint64_t>(size))
    throw Error(where + ": data is truncated: shape " + shape_str(shape) + " needs " + std::to_string(count * size) +
                " bytes, file has " + std::to_string(bytes.size() - data_start));
  const char* p = bytes.data() + data_start;
  out.tensor.shape = shape;
  out.tensor.data.resize(count);
  out.kind = kind == 'b' ? NpyKind::Bool : kind == 'f' ? NpyKind::Float : NpyKind::Int;
  for (uint64_t i = 0; i < count; ++i) {
    const char* e = p + i * static_cast<uint64_t>(size);
    float v = 0;
    if (kind == 'b' || (kind == 'u' && size == 1))
      v = static_cast<unsigned char>(*e);
    else if (kind == 'i' && size == 1)
      v = static_cast<signed char>(*e);
    else if (kind == 'f' && size == 2) {
      uint16_t x;
      std::memcpy(&x, e, 2);
      v = half_to_float(x);
    } else if (kind == 'f' && size == 4)
      std::memcpy(&v, e, 4);
    else if (kind == 'f' && size == 8) {
      double x;
      std::memcpy(&x, e, 8);
      v = static_cast<float>(x);
    } else if (kind == 'i' && size == 2) {
      int16_t x;
      std::memcpy(&x, e, 2);
      v = x;
    } else if (kind == 'i' && size == 4) {
      int32_t x;
      std::memcpy(&x, e, 4);
      v = static_cast<float>(x);
    } else if (kind == 'i' && size == 8) {
      int64_t x;
      std::memcpy(&x, e, 8);
      v = static_cast<float>(x);
    } else if (kind == 'u' && size == 2) {
      uint16_t x;
      std::memcpy(&x, e, 2);
      v = x;
    } else if (kind == 'u' && size == 4) {
      uint32_t x;
      std::memcpy(&x, e, 4);
      v = static_cast<float>(x);
    } else if (kind == 'u' && size == 8) {
      uint64_t x;
      std::memcpy(&x, e, 8);
      v = static_cast<float>(x);
    }
    out.tensor.data[i] = v;
  }
  return out;
}

NpyArray load_npy(const std::string& path) {
  return parse_npy(read_file_bytes(path), path);
}

namespace {
std::string npy_header(const std::vector<int64_t>& dims, const char* descr) {
  std::string shape = "(";
  for (size_t i = 0; i < dims.size(); ++i)
    shape += std::to_string(dims[i]) + (dims.size() == 1 ? "," : i + 1 < dims.size() ? ", " : "");
  shape += ")";
  std::string h = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad with spaces so that magic + version + length + header + '\n' is a multiple of 64.
  while ((10 + h.size() + 1) % 64 != 0) h.push_back(' ');
  h.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back(1);
  out.push_back(0);
  if (h.size() > 65535) throw Error("npy header too long");
  out.push_back(static_cast<char>(h.size() & 0xff));
  out.push_back(static_cast<char>(h.size() >> 8));
  return out + h;
}
}  // namespace

std::string serialize_npy(const Tensor& t) {
  std::string out = npy_header(t.shape, "<f4");
  out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * 4);
  return out;
}

std::string serialize_npy_bool(const std::vector<int64_t>& shape, const std::vector<uint8_t>& values) {
  if (static_cast<int64_t>(values.size()) != Tensor::numel_of(shape)) throw Error("npy: shape and data disagree");
  std::string out = npy_header(shape, "|b1");
  for (uint8_t v : values) out.push_back(v ? 1 : 0);
  return out;
}

void save_npy_bool(const std::string& path, const std::vector<int64_t>& shape, const std::vector<uint8_t>& values) {
  write_file_atomic(path, serialize_npy_bool(shape, values));
}

void save_npy(const std::string& path, const Tensor& t) {
  write_file_atomic(path, serialize_npy(t));
}

void save_npy_parts(const std::string& path, const std::vector<int64_t>& shape,
                    const std::function<std::shared_ptr<const Tensor>(int64_t)>& part) {
  if (shape.empty()) throw Error("npy: an array of parts needs a first dimension");
  const int64_t per_part = Tensor::numel_of(std::vector<int64_t>(shape.begin() + 1, shape.end()));
  const std::string tmp = path + ".tmp";
  try {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw Error(path + ": cannot write");
    const std::string header = npy_header(shape, "<f4");
    f.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (int64_t i = 0; i < shape[0] && f; ++i) {
      const std::shared_ptr<const Tensor> t = part(i);
      if (t->numel() != per_part)
        throw Error("internal: part " + std::to_string(i) + " of " + path + " has another shape");
      f.write(reinterpret_cast<const char*>(t->data.data()), static_cast<std::streamsize>(per_part * 4));
    }
    f.flush();
    if (!f) throw Error(path + ": write failed");
  } catch (...) {  // nothing half-written is left behind
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error(path + ": cannot rename into place (" + ec.message() + ")");
}

namespace {

// CRC-32 (IEEE 802.3, reflected, as zip stores it), table-driven.
uint32_t crc32(const std::string& data) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

void put16(std::string& out, uint32_t v) {
  out += static_cast<char>(v & 0xFF);
  out += static_cast<char>((v >> 8) & 0xFF);
}
void put32(std::string& out, uint32_t v) {
  put16(out, v & 0xFFFF);
  put16(out, v >> 16);
}

}  // namespace

// PKWARE's APPNOTE 4.3: per member a local header and the data; then the central directory
// (one entry per member) and its end record. Method 0 (stored), no data descriptors, times 0.
std::string serialize_npz(const std::map<std::string, Tensor>& arrays) {
  if (arrays.size() > 0xFFFF) throw Error("an .npz (a plain zip archive) holds at most 65535 arrays");
  std::string out, central;
  for (const auto& [key, tensor] : arrays) {
    const std::string name = key + ".npy", data = serialize_npy(tensor);
    if (out.size() + data.size() + name.size() + 30 > 0xFFFFFFF0ull || data.size() > 0xFFFFFFF0ull)
      throw Error("the .npz would be larger than 4 GiB, which a plain zip archive cannot hold: keep fewer activations");
    const uint32_t crc = crc32(data), size = static_cast<uint32_t>(data.size()),
                   offset = static_cast<uint32_t>(out.size());
    put32(out, 0x04034b50);  // local file header
    put16(out, 20), put16(out, 0), put16(out, 0), put16(out, 0),
        put16(out, 0x21);  // version, flags, stored, time, date
    put32(out, crc), put32(out, size), put32(out, size);
    put16(out, static_cast<uint32_t>(name.size())), put16(out, 0);
    out += name;
    out += data;
    put32(central, 0x02014b50);  // central directory entry
    put16(central, 20), put16(central, 20), put16(central, 0), put16(central, 0), put16(central, 0),
        put16(central, 0x21);
    put32(central, crc), put32(central, size), put32(central, size);
    put16(central, static_cast<uint32_t>(name.size())), put16(central, 0), put16(central, 0);  // name, extra, comment
    put16(central, 0), put16(central, 0), put32(central, 0);                                   // disk, attributes
    put32(central, offset);
    central += name;
  }
  const uint32_t dir_offset = static_cast<uint32_t>(out.size()), dir_size = static_cast<uint32_t>(central.size());
  out += central;
  put32(out, 0x06054b50);  // end of central directory
  put16(out, 0), put16(out, 0);
  put16(out, static_cast<uint32_t>(arrays.size())), put16(out, static_cast<uint32_t>(arrays.size()));
  put32(out, dir_size), put32(out, dir_offset), put16(out, 0);
  return out;
}

void save_npz(const std::string& path, const std::map<std::string, Tensor>& arrays) {
  write_file_atomic(path, serialize_npz(arrays));
}

}  // namespace attnlab
