// Tensor: the engine's one value type for numbers: a row-major float32 array with a shape.
// Deliberately dumb (no views, no broadcasting): backends map it onto their own types
// (Eigen::Map in the cpu backend, device buffers in OpenCL) and tests compare it element-wise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnlab {

// Every failure the user can cause (bad file, bad flag, bad shape) is an attnlab::Error whose
// message names what and where; the CLI prints it on one line and exits non-zero.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Storage for tensor values: calloc'd, so a fresh tensor is zero without touching its pages.
// A [heads, T, T] probability tensor of a sparse mask is mostly zeros that are never written;
// the kernel's zero pages keep those free (a 4,096-token forward keeps 512 MB per layer).
// Value-initialisation is therefore a no-op: memory only ever comes from calloc, and tensors
// never shrink and regrow their storage.
template <class T>
struct ZeroedAllocator {
  using value_type = T;
  ZeroedAllocator() = default;
  template <class U>
  ZeroedAllocator(const ZeroedAllocator<U>&) noexcept {}
  T* allocate(size_t n) {
    void* p = std::calloc(n, sizeof(T));
    if (!p && n) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) noexcept { std::free(p); }
  template <class U>
  void construct(U*) noexcept {}  // already zero
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <class U>
  bool operator==(const ZeroedAllocator<U>&) const noexcept {
    return true;
  }
};
using FloatStorage = std::vector<float, ZeroedAllocator<float>>;

struct Tensor {
  std::vector<int64_t> shape;
  FloatStorage data;

  Tensor() = default;
  explicit Tensor(std::vector<int64_t> s, float fill = 0.0f) : shape(std::move(s)) {
    if (fill == 0.0f)
      data.resize(static_cast<size_t>(numel_of(shape)));  // fresh calloc: zeros for free
    else
      data.assign(static_cast<size_t>(numel_of(shape)), fill);
  }

  // Gives the tensor this shape for an op that overwrites every element: the storage is kept
  // when the size is unchanged (stale values until overwritten: no allocation, no page faults
  // on a pass's hot path), else replaced by fresh zeros.
  void reshape_for_overwrite(std::vector<int64_t> s) {
    if (numel_of(s) == numel())
      shape = std::move(s);
    else
      *this = Tensor(std::move(s));
  }

  static int64_t numel_of(const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
  }
  int64_t numel() const { return static_cast<int64_t>(data.size()); }
  bool empty() const { return data.empty(); }
  int rank() const { return static_cast<int>(shape.size()); }
  int64_t dim(int i) const { return shape.at(static_cast<size_t>(i)); }
  float* ptr() { return data.data(); }
  const float* ptr() const { return data.data(); }

  // Two-dimensional access for the plain reference code: t.at(i, j) on a [rows, cols] tensor.
  float& at(int64_t i, int64_t j) { return data[static_cast<size_t>(i * shape[1] + j)]; }
  float at(int64_t i, int64_t j) const { return data[static_cast<size_t>(i * shape[1] + j)]; }
};

std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace attnlab
