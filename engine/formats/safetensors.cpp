// safetensors: 8-byte little-endian header length, a JSON header {name: {dtype, shape,
// data_offsets}}, then the raw data. Every offset is checked against the data size.
#include "engine/formats/safetensors.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

namespace {

// A file mapped read-only for the length of a parse (the page cache serves it; no copy of a
// multi-gigabyte file into the heap). Empty when it cannot be mapped (then it is read).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return;
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) return;
    size_ = static_cast<size_t>(st.st_size);
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    if (p == MAP_FAILED) {
      size_ = 0;
      return;
    }
    data_ = static_cast<const char*>(p);
    ::madvise(p, size_, MADV_SEQUENTIAL);  // two calls: the advice values are not flags
    ::madvise(p, size_, MADV_WILLNEED);
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<char*>(data_), size_);
    if (fd_ >= 0) ::close(fd_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const char* data() const { return data_; }
  size_t size() const { return size_; }
  // n bytes at p (inside the mapping) into dst by read(2): the kernel copies from the page cache
  // without mapping the file's pages into this process (memcpy from the mapping took a page
  // fault every 64 kB of a 2.2 GB file). Falls back to memcpy if the read fails.
  // Large copies run on two threads: most of a copy's time is the kernel's first touch of the
  // destination's pages (a fault and a clear each), which a second core halves.
  void copy(void* dst, const char* p, size_t n) const {
    constexpr size_t kSplit = size_t(4) << 20;
    if (n < kSplit) return copy_part(dst, p, n);
    const size_t half = n / 2 / 4096 * 4096;
    std::thread other([&] { copy_part(static_cast<char*>(dst) + half, p + half, n - half); });
    copy_part(dst, p, half);
    other.join();
  }
  void copy_part(void* dst, const char* p, size_t n) const {
    size_t done = 0;
    const off_t at = static_cast<off_t>(p - data_);
    while (done < n) {
      const ssize_t r = ::pread(fd_, static_cast<char*>(dst) + done, n - done, at + static_cast<off_t>(done));
      if (r <= 0) break;
      done += static_cast<size_t>(r);
    }
    if (done < n) std::memcpy(static_cast<char*>(dst) + done, p + done, n - done);
  }

 private:
  int fd_ = -1;
  const char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

std::map<std::string, std::string> parse_safetensors_metadata(const std::string& bytes, const std::string& where) {
  if (bytes.size() < 8) throw Error(where + ": too short to be a safetensors file");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  if (n > bytes.size() - 8) throw Error(where + ": header length runs past the end of the file");
  json header;
  try {
    header = json::parse(bytes.data() + 8, bytes.data() + 8 + n);
  } catch (const json::exception& e) {
    throw Error(where + ": header is not valid JSON (" + json_error_text(e.what()) + ")");
  }
  std::map<std::string, std::string> out;
  if (!header.is_object() || !header.contains("__metadata__")) return out;
  const json& m = header["__metadata__"];
  if (!m.is_object()) throw Error(where + ": __metadata__ is not a JSON object");
  for (const auto& [key, value] : m.items()) {
    if (!value.is_string())
      throw Error(where + ": __metadata__ \"" + key + "\" is not a string (safetensors keeps strings)");
    out[key] = value.get<std::string>();
  }
  return out;
}

TensorMap parse_safetensors(const std::string& bytes, const std::string& where) {
  return parse_safetensors(bytes.data(), bytes.size(), where);
}

TensorMap parse_safetensors(const char* bytes, size_t size, const std::string& where,
                            const std::function<void(const char*, size_t)>& consumed, HalfMap* halves,
                            const std::function<void(void*, const char*, size_t)>& copy) {
  if (size < 8) throw Error(where + ": too short to be a safetensors file");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  if (n > size - 8)
    throw Error(where + ": header length " + std::to_string(n) + " runs past the end of the file (" +
                std::to_string(size) + " bytes)");
  json header;
  try {
    header = json::parse(bytes + 8, bytes + 8 + n);
  } catch (const json::exception& e) {  // parse errors, and out_of_range for numbers like 1e99999
    throw Error(where + ": header is not valid JSON (" + json_error_text(e.what()) + ")");
  }
  if (!header.is_object()) throw Error(where + ": header is not a JSON object");
  const uint64_t data_size = size - 8 - n;
  const char* data = bytes + 8 + n;

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
    if (count == 0) {  // a dimension of 0 (an attention-only Llama's empty MLP): a shape, no bytes to copy
      out.emplace(name, std::move(t));
      continue;
    }
    const char* p = data + begin;
    if (halves && elem == 2 && t.shape.size() == 2) {  // a matrix kept in its 16 bits
      HalfTensor h;
      h.shape = t.shape;
      h.bf16 = dtype == "BF16";
      h.bits.resize(count);  // fresh calloc'd pages, not written until the copy
      if (copy)
        copy(h.bits.data(), p, count * 2);
      else
        std::memcpy(h.bits.data(), p, count * 2);
      if (consumed) consumed(p, end - begin);
      halves->emplace(name, std::move(h));
      out.emplace(name, std::move(t));  // its name and shape, no values: the bits are in halves
      continue;
    }
    t.data.resize(count);  // calloc: zero pages, written below
    if (elem == 4 && copy)
      copy(t.data.data(), p, count * 4);  // the format is little-endian, as is every host we build on
    else if (elem == 4)
      std::memcpy(t.data.data(), p, count * 4);
    else
      widen_bits(p, t.data.data(), static_cast<int64_t>(count), dtype == "BF16");
    if (consumed) consumed(p, end - begin);
    out.emplace(name, std::move(t));
  }
  return out;
}

TensorMap load_safetensors(const std::string& path, HalfMap* halves) {
  if (std::filesystem::is_directory(path)) throw Error(path + ": is a directory, expected a file");
  const MappedFile f(path);
  // A tensor's file pages are given back once it is converted: the peak is the float32 weights,
  // not those plus the whole file (the page cache keeps them for the next open).
  auto release = [&](const char* p, size_t n) {
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t first = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
    const uintptr_t last = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
    if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  };
  if (f.data())
    return parse_safetensors(f.data(), f.size(), path, release, halves,
                             [&](void* dst, const char* p, size_t n) { f.copy(dst, p, n); });
  const std::string bytes = read_file_bytes(path);  // not mappable (a pipe, an empty file): read it
  return parse_safetensors(bytes.data(), bytes.size(), path, nullptr, halves);
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
  for (const auto& [name, t] : tensors)
    if (!t.data.empty()) out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * 4);
  return out;
}

void save_safetensors(const std::string& path, const TensorMap& tensors) {
  write_file_atomic(path, serialize_safetensors(tensors));
}

}  // namespace attnlab
