// The OpenCL runtime: device discovery, one context + queue + program per device per process
// (built once, thread-safe), device buffers, and thin wrappers that launch our kernels and
// CLBlast's GEMMs. Every OpenCL failure becomes an attnlab::Error naming the call and the code.
#pragma once

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/core/config.h"
#include "engine/core/tensor.h"

namespace attnlab::cl {

struct DeviceInfo {
  int index = 0;  // position in the flattened list: what opencl:N means
  std::string platform, name, version;
  bool gpu = false;
  uint64_t memory = 0;
  int compute_units = 0;
};

// Every OpenCL device on every platform (empty when there is no platform).
std::vector<DeviceInfo> list_devices();
// "opencl" -> preferred device (first GPU, else first device); "opencl:N" -> device N.
// Error when there is no such device.
int resolve_device(const std::string& spec);

// A device buffer (RAII). Size in bytes; grows, never shrinks, when reused.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : mem_(o.mem_), bytes_(o.bytes_) { o.mem_ = nullptr, o.bytes_ = 0; }
  Buffer& operator=(Buffer&& o) noexcept;
  ~Buffer();
  cl_mem get() const { return mem_; }
  size_t bytes() const { return bytes_; }

 private:
  friend class Runtime;
  cl_mem mem_ = nullptr;
  size_t bytes_ = 0;
};

class Runtime {
 public:
  // The process-wide runtime of a device (created and its program built on first use).
  static std::shared_ptr<Runtime> get(int device_index);
  ~Runtime();

  const DeviceInfo& device() const { return info_; }
  // Kernel arguments and the queue are shared: one forward pass at a time holds this.
  std::mutex& mutex() { return mutex_; }
  // Opaque per-runtime caches (device weights, workspaces), kept across passes.
  std::map<std::string, std::shared_ptr<void>>& cache() { return cache_; }
  cl_command_queue* queue() { return &queue_; }

  // Ensures b holds at least `bytes` (reallocating when it is smaller).
  void reserve(Buffer& b, size_t bytes);
  void upload(Buffer& b, const void* data, size_t bytes);
  void download(const Buffer& b, void* data, size_t bytes, size_t offset = 0);
  void finish();

  // Profiling (for bench): while on, every command's device time is summed by kind.
  struct Profile {
    double transfer_ms = 0, kernel_ms = 0;
  };
  void set_profiling(bool on) { profiling_ = on; }
  Profile take_profile();  // waits for the queue, then returns and resets the sums

  // Kernel launches (see engine/compute/opencl/kernels/*.cl for what each does).
  void embed(const Buffer& ids, const Buffer& table, const Buffer* pos, int T, int E, Buffer& x);
  void add_bias(Buffer& y, const Buffer& b, int rows, int cols);
  void add_inplace(Buffer& y, const Buffer& x, int n);
  void copy(Buffer& dst, const Buffer& src, int n);
  void activation(Buffer& x, int n, Activation act);
  void layer_norm(Buffer& x, const Buffer& g, const Buffer& b, int rows, int E, float eps);
  void masked_softmax(Buffer& P, int H, int T, int S, float scale, const Buffer* blocked, const Buffer* additive,
                      int planes, float softcap = 0.0f);
  // The decoder steps (kernels/decoder.cl): RMSNorm over rows of E, rotary positions on rows of
  // `width` (heads of D; tables [rows, D / 2]), a *= b, x *= s.
  void rms_norm(Buffer& x, const Buffer& g, int rows, int E, float eps);
  void rope(Buffer& x, const Buffer& cos, const Buffer& sin, int rows, int width, int D);
  void mul_inplace(Buffer& a, const Buffer& b, int n);
  void scale_inplace(Buffer& x, float s, int n);
  void add_relative(Buffer& P, const Buffer& G, int H, int T, int S, int nrel, int lo, int max_len);

  // Row-major C = A op(B) through CLBlast (op = transpose when b_trans): one GEMM, or
  // `batch` of them at the given element strides.
  void gemm(bool b_trans, size_t m, size_t n, size_t k, const Buffer& A, size_t a_off, size_t lda, const Buffer& B,
            size_t b_off, size_t ldb, Buffer& C, size_t c_off, size_t ldc, size_t batch = 1, size_t a_stride = 0,
            size_t b_stride = 0, size_t c_stride = 0, bool a_trans = false);

 private:
  explicit Runtime(int device_index);
  cl_kernel kernel(const char* name);
  void run(cl_kernel k, int dims, const size_t* global, const size_t* local);
  void elementwise(const char* name, Buffer& a, const Buffer& b, int n);
  cl_event* event(bool transfer);  // where to store a command's event when profiling, else null

  DeviceInfo info_;
  cl_device_id device_ = nullptr;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
  cl_program program_ = nullptr;
  std::map<std::string, cl_kernel> kernels_;
  size_t max_local_ = 64;
  std::mutex mutex_;
  bool profiling_ = false;
  std::vector<std::pair<bool, cl_event>> events_;  // (is transfer, event)
  std::map<std::string, std::shared_ptr<void>> cache_;
};

// Throws Error("OpenCL: WHAT failed: CL_...") when code is not CL_SUCCESS.
void check(cl_int code, const char* what);
const char* error_name(cl_int code);
// The kernel sources: embedded at build time, or read from $ATTNLAB_OPENCL_KERNELS (a folder of
// .cl files) when that is set, which makes kernel work fast to iterate.
std::string program_source();

}  // namespace attnlab::cl
