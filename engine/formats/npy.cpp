// .npy parsing: magic, version, header dict ('descr', 'fortran_order', 'shape'), raw data.
#include "engine/formats/npy.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <zlib.h>

#include "engine/core/io_util.h"
#include "engine/formats/safetensors.h"  // half_to_float
#include "engine/text/unicode.h"

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

struct NpyHeader {
  std::string descr;
  std::vector<int64_t> shape;
  uint64_t count = 1;
  size_t data_start = 0;
};

// Magic, version, the header dict's descr / fortran_order / shape, and where the data starts.
NpyHeader read_header(std::string_view bytes, const std::string& where) {
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
  const std::string h(bytes.substr(hstart, hlen));
  NpyHeader out;
  out.descr = dict_value(h, "descr", where);
  const std::string fortran = dict_value(h, "fortran_order", where);
  const std::string shape_txt = dict_value(h, "shape", where);
  if (fortran.find("True") != std::string::npos)
    throw Error(where + ": Fortran-order arrays are not supported (save with np.ascontiguousarray)");

  std::vector<int64_t>& shape = out.shape;
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
  uint64_t& count = out.count;
  for (int64_t d : shape) {
    if (d != 0 && count > (uint64_t(1) << 40) / static_cast<uint64_t>(d))
      throw Error(where + ": shape is absurdly large");
    count *= static_cast<uint64_t>(d);
  }
  out.data_start = hstart + hlen;
  return out;
}

}  // namespace

namespace {

// `count` values of numpy's dtype (kind, size in bytes; little-endian) at p, as float32.
void convert_values(const char* p, uint64_t count, char kind, int size, float* out) {
  if (kind == 'f' && size == 4) {  // float32 as stored: one copy, not an element loop
    if (count) std::memcpy(out, p, count * 4);
    return;
  }
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
    out[i] = v;
  }
}

// The checks every numeric array passes: a dtype attnlab reads, and data as long as the shape says.
struct NumericLayout {
  NpyHeader head;
  char kind;
  int size;
};

NumericLayout numeric_layout(std::string_view bytes, const std::string& where) {
  const NpyHeader head = read_header(bytes, where);
  const std::string& descr = head.descr;
  const std::vector<int64_t>& shape = head.shape;
  const uint64_t count = head.count;
  if (descr == "|O")
    throw Error(where +
                ": an object array (it would need Python's pickle, which attnlab never runs): save numbers "
                "with a numeric dtype and strings with np.array(strings, dtype=str)");
  if (descr.size() < 3) throw Error(where + ": unsupported dtype '" + descr + "'");
  const char order = descr[0];
  const char kind = descr[1];
  const int size = std::atoi(descr.c_str() + 2);
  if (order == '>' && size > 1) throw Error(where + ": big-endian arrays are not supported");
  const bool ok_kind = (kind == 'b' && size == 1) ||
                       ((kind == 'i' || kind == 'u') && (size == 1 || size == 2 || size == 4 || size == 8)) ||
                       (kind == 'f' && (size == 2 || size == 4 || size == 8));
  if (!ok_kind) throw Error(where + ": unsupported dtype '" + descr + "' (bool, int, uint, float are read)");
  if (bytes.size() - head.data_start < count * static_cast<uint64_t>(size))
    throw Error(where + ": data is truncated: shape " + shape_str(shape) + " needs " + std::to_string(count * size) +
                " bytes, file has " + std::to_string(bytes.size() - head.data_start));
  return {head, kind, size};
}

}  // namespace

NpyArray parse_npy(std::string_view bytes, const std::string& where) {
  const NumericLayout a = numeric_layout(bytes, where);
  NpyArray out;
  out.tensor.shape = a.head.shape;
  out.tensor.data.resize(a.head.count);
  out.kind = a.kind == 'b' ? NpyKind::Bool : a.kind == 'f' ? NpyKind::Float : NpyKind::Int;
  convert_values(bytes.data() + a.head.data_start, a.head.count, a.kind, a.size, out.tensor.data.data());
  return out;
}

NpySlices parse_npy_slices(std::string_view bytes, const std::string& where, size_t min_rank) {
  const NumericLayout a = numeric_layout(bytes, where);
  NpySlices out;
  out.shape = a.head.shape;
  if (out.shape.size() < std::max<size_t>(min_rank, 1)) {
    out.slices.push_back(parse_npy(bytes, where).tensor);
    return out;
  }
  const std::vector<int64_t> inner(out.shape.begin() + 1, out.shape.end());
  const uint64_t n = static_cast<uint64_t>(Tensor::numel_of(inner));
  for (int64_t i = 0; i < out.shape[0]; ++i) {
    Tensor t(inner);
    convert_values(bytes.data() + a.head.data_start + static_cast<uint64_t>(i) * n * static_cast<uint64_t>(a.size), n,
                   a.kind, a.size, t.data.data());
    out.slices.push_back(std::move(t));
  }
  return out;
}

std::vector<std::string> parse_npy_strings(std::string_view bytes, const std::string& where,
                                           std::vector<int64_t>* shape) {
  const NpyHeader head = read_header(bytes, where);
  const std::string& d = head.descr;
  if (d == "|O")
    throw Error(where +
                ": an object array (it would need Python's pickle, which attnlab never runs): save strings "
                "with np.array(strings, dtype=str)");
  const bool utf32 = d.size() > 2 && (d[0] == '<' || d[0] == '=' || d[0] == '|') && d[1] == 'U';
  const bool raw = d.size() > 2 && (d[0] == '|' || d[0] == '<' || d[0] == '=') && d[1] == 'S';
  if (!utf32 && !raw) throw Error(where + ": expected strings (dtype str or bytes), got dtype '" + d + "'");
  const long chars = std::atol(d.c_str() + 2);
  if (chars <= 0 || chars > (1 << 20)) throw Error(where + ": unsupported string dtype '" + d + "'");
  const uint64_t width = static_cast<uint64_t>(chars) * (utf32 ? 4 : 1);
  if (head.count > (uint64_t(1) << 40) / width || bytes.size() - head.data_start < head.count * width)
    throw Error(where + ": data is truncated: shape " + shape_str(head.shape) + " of " + d + " needs " +
                std::to_string(head.count * width) + " bytes");
  if (shape) *shape = head.shape;
  std::vector<std::string> out;
  out.reserve(head.count);
  const unsigned char* p = reinterpret_cast<const unsigned char*>(bytes.data()) + head.data_start;
  for (uint64_t i = 0; i < head.count; ++i, p += width) {
    std::string s;
    if (!utf32) {
      s.assign(reinterpret_cast<const char*>(p), static_cast<size_t>(chars));
      s.resize(std::strlen(s.c_str()));  // NumPy pads with NULs
    } else {
      for (long c = 0; c < chars; ++c) {
        const uint32_t u =
            p[4 * c] | uint32_t(p[4 * c + 1]) << 8 | uint32_t(p[4 * c + 2]) << 16 | uint32_t(p[4 * c + 3]) << 24;
        if (u == 0) break;  // NumPy pads with NULs
        if (u > 0x10FFFF || (u >= 0xD800 && u <= 0xDFFF))
          throw Error(where + ": string " + std::to_string(i) + " holds an invalid code point");
        if (u < 0x80) {
          s += static_cast<char>(u);
        } else if (u < 0x800) {
          s += static_cast<char>(0xC0 | (u >> 6));
          s += static_cast<char>(0x80 | (u & 0x3F));
        } else if (u < 0x10000) {
          s += static_cast<char>(0xE0 | (u >> 12));
          s += static_cast<char>(0x80 | ((u >> 6) & 0x3F));
          s += static_cast<char>(0x80 | (u & 0x3F));
        } else {
          s += static_cast<char>(0xF0 | (u >> 18));
          s += static_cast<char>(0x80 | ((u >> 12) & 0x3F));
          s += static_cast<char>(0x80 | ((u >> 6) & 0x3F));
          s += static_cast<char>(0x80 | (u & 0x3F));
        }
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

bool npy_holds_strings(std::string_view bytes) {
  try {
    const NpyHeader head = read_header(bytes, "");
    return head.descr.size() > 2 && (head.descr[1] == 'U' || head.descr[1] == 'S');
  } catch (const Error&) {
    return false;
  }
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
// zip's CRC-32 (the polynomial 0xEDB88320), through zlib's, which folds many bytes a step: a
// table walk a byte at a time was a quarter of reading a 600 MB archive.
uint32_t crc32(std::string_view data) {
  uLong c = ::crc32(0L, Z_NULL, 0);
  for (size_t at = 0; at < data.size();) {  // zlib takes uInt lengths: 1 GiB at a time
    const size_t n = std::min<size_t>(data.size() - at, size_t{1} << 30);
    c = ::crc32(c, reinterpret_cast<const Bytef*>(data.data() + at), static_cast<uInt>(n));
    at += n;
  }
  return static_cast<uint32_t>(c);
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

std::string serialize_npy_strings(const std::vector<std::string>& strings) {
  std::vector<std::u32string> cps;
  size_t width = 1;  // numpy's narrowest '<U1' for an array of empty strings
  for (const std::string& s : strings) {
    cps.push_back(unicode::decode(s, "an array's string"));
    width = std::max(width, cps.back().size());
  }
  std::string out = npy_header({static_cast<int64_t>(strings.size())}, ("<U" + std::to_string(width)).c_str());
  for (const std::u32string& s : cps)
    for (size_t k = 0; k < width; ++k) {
      const uint32_t c = k < s.size() ? static_cast<uint32_t>(s[k]) : 0;  // NUL-padded, little-endian
      for (int byte = 0; byte < 4; ++byte) out.push_back(static_cast<char>((c >> (8 * byte)) & 0xff));
    }
  return out;
}

// PKWARE's APPNOTE 4.3: per member a local header and the data; then the central directory
// (one entry per member) and its end record. Method 0 (stored), no data descriptors, times 0.
std::string serialize_npz(const std::map<std::string, Tensor>& arrays,
                          const std::map<std::string, std::vector<std::string>>& strings) {
  if (arrays.size() + strings.size() > 0xFFFF) throw Error("an .npz (a plain zip archive) holds at most 65535 arrays");
  std::vector<std::pair<std::string, std::string>> members;  // name.npy, bytes
  for (const auto& [key, tensor] : arrays) members.emplace_back(key + ".npy", serialize_npy(tensor));
  for (const auto& [key, list] : strings) members.emplace_back(key + ".npy", serialize_npy_strings(list));
  std::string out, central;
  for (const auto& [name, data] : members) {
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
  put16(out, static_cast<uint32_t>(members.size())), put16(out, static_cast<uint32_t>(members.size()));
  put32(out, dir_size), put32(out, dir_offset), put16(out, 0);
  return out;
}

void save_npz(const std::string& path, const std::map<std::string, Tensor>& arrays) {
  write_file_atomic(path, serialize_npz(arrays));
}

namespace {

uint32_t get16(const std::string& b, uint64_t at) {
  return static_cast<unsigned char>(b[at]) | uint32_t(static_cast<unsigned char>(b[at + 1])) << 8;
}
uint32_t get32(const std::string& b, uint64_t at) {
  return get16(b, at) | get16(b, at + 2) << 16;
}
uint64_t get64(const std::string& b, uint64_t at) {
  return get32(b, at) | uint64_t(get32(b, at + 4)) << 32;
}

// A raw deflate stream (zip's method 8) of known output size, inflated with zlib.
std::string inflate_raw(const char* data, uint64_t size, uint64_t out_size, const std::string& where) {
  std::string out(out_size, '\0');
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) throw Error(where + ": cannot start zlib");
  int rc = Z_OK;
  while (rc == Z_OK) {  // zlib counts in uInt: at most 1 GiB in and out at a time
    if (z.avail_in == 0) {
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data + z.total_in));
      z.avail_in = static_cast<uInt>(std::min<uint64_t>(size - z.total_in, 1u << 30));
    }
    if (z.avail_out == 0) {
      z.next_out = reinterpret_cast<Bytef*>(out.data() + z.total_out);
      z.avail_out = static_cast<uInt>(std::min<uint64_t>(out_size - z.total_out, 1u << 30));
    }
    rc = inflate(&z, Z_NO_FLUSH);
  }
  const uint64_t out_done = z.total_out;
  const std::string msg = z.msg ? z.msg : "the stream ends early";
  inflateEnd(&z);
  if (rc != Z_STREAM_END || out_done != out_size)
    throw Error(where + ": the compressed data is damaged (zlib: " + msg + ")");
  return out;
}

}  // namespace

// APPNOTE 4.3: the end-of-central-directory record (and Zip64's, as Python's zipfile writes for
// large members), then one central entry per member: its name, method, sizes, CRC and offset.
std::vector<NpzMember> parse_npz_members(const std::string& b, const std::string& where) {
  if (b.size() < 22 || b.compare(0, 2, "PK") != 0) throw Error(where + ": not an .npz file (not a zip archive)");
  uint64_t eocd = std::string::npos;
  for (uint64_t i = b.size() - 22 + 1; i-- > 0 && b.size() - i <= 22 + 0xFFFF;)
    if (get32(b, i) == 0x06054b50) {
      eocd = i;
      break;
    }
  if (eocd == std::string::npos) throw Error(where + ": damaged zip archive (no end of central directory)");
  uint64_t entries = get16(b, eocd + 10), dir_size = get32(b, eocd + 12), dir_offset = get32(b, eocd + 16);
  if (eocd >= 20 && get32(b, eocd - 20) == 0x07064b50) {  // Zip64 locator
    const uint64_t z = get64(b, eocd - 20 + 8);
    if (b.size() < 56 || z > b.size() - 56 || get32(b, z) != 0x06064b50)
      throw Error(where + ": damaged Zip64 directory");
    entries = get64(b, z + 32);
    dir_size = get64(b, z + 40);
    dir_offset = get64(b, z + 48);
  }
  if (dir_offset > b.size() || dir_size > b.size() - dir_offset) throw Error(where + ": damaged zip directory");
  std::vector<NpzMember> out;
  uint64_t at = dir_offset;
  for (uint64_t e = 0; e < entries; ++e) {
    if (at + 46 > dir_offset + dir_size || get32(b, at) != 0x02014b50) throw Error(where + ": damaged zip directory");
    const uint32_t flags = get16(b, at + 8), method = get16(b, at + 10), crc = get32(b, at + 16);
    uint64_t csize = get32(b, at + 20), usize = get32(b, at + 24), local = get32(b, at + 42);
    const uint32_t nlen = get16(b, at + 28), xlen = get16(b, at + 30), clen = get16(b, at + 32);
    if (at + 46 + nlen + xlen + clen > dir_offset + dir_size) throw Error(where + ": damaged zip directory");
    std::string name = b.substr(at + 46, nlen);
    const uint64_t extra_end = at + 46 + nlen + xlen;
    for (uint64_t x = at + 46 + nlen; x + 4 <= extra_end;) {  // Zip64 sizes and offset
      const uint32_t id = get16(b, x), len = get16(b, x + 2);
      const uint64_t end = std::min<uint64_t>(x + 4 + len, extra_end);  // a field never reads past the extra area
      uint64_t f = x + 4;
      if (id == 1) {
        if (usize == 0xFFFFFFFFu && f + 8 <= end) usize = get64(b, f), f += 8;
        if (csize == 0xFFFFFFFFu && f + 8 <= end) csize = get64(b, f), f += 8;
        if (local == 0xFFFFFFFFu && f + 8 <= end) local = get64(b, f);
      }
      x += 4 + len;
    }
    at += 46 + nlen + xlen + clen;
    const std::string member = where + ": " + name;
    if (flags & 1) throw Error(member + " is encrypted");
    if (method != 0 && method != 8)
      throw Error(member + ": compression method " + std::to_string(method) +
                  " (np.savez and np.savez_compressed write 0 and 8)");
    if (local > b.size() - 30 || get32(b, local) != 0x04034b50) throw Error(member + ": damaged local header");
    const uint64_t data = local + 30 + get16(b, local + 26) + get16(b, local + 28);
    if (data > b.size() || csize > b.size() - data) throw Error(member + ": data runs past the end of the file");
    if (usize > (uint64_t(1) << 40)) throw Error(member + ": absurdly large");
    // deflate expands at most 1032 to 1 (zlib's technical notes): a member that claims more is a
    // damaged or hostile archive, refused before its output is allocated
    if (method == 8 && usize > csize * 1032 + 64)
      throw Error(member + ": claims " + std::to_string(usize) + " bytes from " + std::to_string(csize) +
                  " compressed, more than deflate can give");
    if (method == 0 && usize != csize) throw Error(member + ": a stored member whose sizes disagree");
    NpzMember m;
    if (method == 0) {  // stored: the archive's own bytes, not a copy
      m.bytes = std::string_view(b).substr(data, csize);
    } else {
      m.owned = std::make_shared<const std::string>(inflate_raw(b.data() + data, csize, usize, member));
      m.bytes = *m.owned;
    }
    if (m.bytes.size() != usize) throw Error(member + ": sizes disagree");
    if (crc32(m.bytes) != crc) throw Error(member + ": CRC mismatch (the file is damaged)");
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0) name.resize(name.size() - 4);
    m.name = std::move(name);
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace attnlab
