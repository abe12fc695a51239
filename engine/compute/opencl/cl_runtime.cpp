// OpenCL runtime: devices, context, program, buffers, kernel launches, CLBlast GEMMs.
#include "engine/compute/opencl/cl_runtime.h"

#include <clblast.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/compute/opencl/opencl_kernels.h"  // generated: kKernelSources
#include "engine/core/tuning.h"

namespace attnlab::cl {

const char* error_name(cl_int code) {
  // the codes' names, each written once (ROW makes the string from the name)
#define ROW(c) \
  { c, #c }
  static const struct {
    cl_int code;
    const char* name;
  } kNames[] = {
      ROW(CL_DEVICE_NOT_FOUND),        ROW(CL_DEVICE_NOT_AVAILABLE),
      ROW(CL_COMPILER_NOT_AVAILABLE),  ROW(CL_MEM_OBJECT_ALLOCATION_FAILURE),
      ROW(CL_OUT_OF_RESOURCES),        ROW(CL_OUT_OF_HOST_MEMORY),
      ROW(CL_BUILD_PROGRAM_FAILURE),   ROW(CL_INVALID_VALUE),
      ROW(CL_INVALID_DEVICE),          ROW(CL_INVALID_CONTEXT),
      ROW(CL_INVALID_COMMAND_QUEUE),   ROW(CL_INVALID_MEM_OBJECT),
      ROW(CL_INVALID_PROGRAM),         ROW(CL_INVALID_KERNEL_NAME),
      ROW(CL_INVALID_KERNEL),          ROW(CL_INVALID_ARG_INDEX),
      ROW(CL_INVALID_ARG_VALUE),       ROW(CL_INVALID_ARG_SIZE),
      ROW(CL_INVALID_KERNEL_ARGS),     ROW(CL_INVALID_WORK_DIMENSION),
      ROW(CL_INVALID_WORK_GROUP_SIZE), ROW(CL_INVALID_WORK_ITEM_SIZE),
      ROW(CL_INVALID_GLOBAL_OFFSET),   ROW(CL_INVALID_BUFFER_SIZE),
      ROW(CL_INVALID_PLATFORM),        ROW(CL_PLATFORM_NOT_FOUND_KHR),
  };
#undef ROW
  for (const auto& n : kNames)
    if (n.code == code) return n.name;
  return "unknown OpenCL error";
}

void check(cl_int code, const char* what) {
  if (code != CL_SUCCESS)
    throw Error(std::string("OpenCL: ") + what + " failed: " + error_name(code) + " (" + std::to_string(code) + ")");
}

namespace {

struct RawDevice {
  cl_device_id id;
  DeviceInfo info;
};

std::vector<RawDevice> raw_devices() {
  std::vector<RawDevice> out;
  cl_uint np = 0;
  if (clGetPlatformIDs(0, nullptr, &np) != CL_SUCCESS || np == 0) return out;
  std::vector<cl_platform_id> platforms(np);
  if (clGetPlatformIDs(np, platforms.data(), nullptr) != CL_SUCCESS) return out;
  auto str = [](auto getter, auto obj, cl_uint param) {
    size_t n = 0;
    getter(obj, param, 0, nullptr, &n);
    std::string s(n, '\0');
    getter(obj, param, n, s.data(), nullptr);
    while (!s.empty() && s.back() == '\0') s.pop_back();
    return s;
  };
  for (cl_platform_id p : platforms) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
    std::vector<cl_device_id> devs(nd);
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, devs.data(), nullptr) != CL_SUCCESS) continue;
    for (cl_device_id d : devs) {
      RawDevice r{d, {}};
      r.info.index = static_cast<int>(out.size());
      r.info.platform = str(clGetPlatformInfo, p, CL_PLATFORM_NAME);
      r.info.name = str(clGetDeviceInfo, d, CL_DEVICE_NAME);
      r.info.version = str(clGetDeviceInfo, d, CL_DEVICE_VERSION);
      cl_device_type type = 0;
      clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof type, &type, nullptr);
      r.info.gpu = (type & CL_DEVICE_TYPE_GPU) != 0;
      cl_ulong mem = 0;
      clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, nullptr);
      r.info.memory = mem;
      cl_uint cu = 0;
      clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, nullptr);
      r.info.compute_units = static_cast<int>(cu);
      out.push_back(r);
    }
  }
  return out;
}

}  // namespace

std::vector<DeviceInfo> list_devices() {
  std::vector<DeviceInfo> out;
  for (const auto& r : raw_devices()) out.push_back(r.info);
  return out;
}

int resolve_device(const std::string& spec) {
  const auto devs = list_devices();
  if (devs.empty()) throw Error("OpenCL: no platform or device found (install an OpenCL driver, e.g. pocl-opencl-icd)");
  if (spec == "opencl") {
    for (const auto& d : devs)
      if (d.gpu) return d.index;
    return 0;
  }
  const std::string num = spec.substr(spec.find(':') + 1);
  if (num.empty() || num.find_first_not_of("0123456789") != std::string::npos || num.size() > 6)
    throw Error("backend \"" + spec + "\": expected opencl or opencl:N");
  const int n = std::atoi(num.c_str());
  if (n >= static_cast<int>(devs.size()))
    throw Error("OpenCL: there is no device " + std::to_string(n) + " (" + std::to_string(devs.size()) +
                " device(s) found; see attnlab-cli devices)");
  return n;
}

std::string program_source() {
  std::string src;
  if (const char* dir = std::getenv("ATTNLAB_OPENCL_KERNELS"); dir && *dir) {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().extension() == ".cl") files.push_back(e.path());
    if (files.empty()) throw Error(std::string("OpenCL: ATTNLAB_OPENCL_KERNELS=") + dir + " holds no .cl files");
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::ifstream in(f);
      std::stringstream ss;
      ss << in.rdbuf();
      src += "// " + f.filename().string() + "\n" + ss.str() + "\n";
    }
    return src;
  }
  for (const auto& k : cl_sources::kKernelSources) src += std::string("// ") + k.name + "\n" + k.source + "\n";
  return src;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    if (mem_) clReleaseMemObject(mem_);
    mem_ = o.mem_, bytes_ = o.bytes_;
    o.mem_ = nullptr, o.bytes_ = 0;
  }
  return *this;
}

Buffer::~Buffer() {
  if (mem_) clReleaseMemObject(mem_);
}

std::shared_ptr<Runtime> Runtime::get(int device_index) {
  static std::mutex mutex;
  static std::map<int, std::shared_ptr<Runtime>> runtimes;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = runtimes.find(device_index);
  if (it != runtimes.end()) return it->second;
  std::shared_ptr<Runtime> rt(new Runtime(device_index));
  runtimes[device_index] = rt;
  return rt;
}

Runtime::Runtime(int device_index) {
  const auto devs = raw_devices();
  if (device_index < 0 || device_index >= static_cast<int>(devs.size()))
    throw Error("OpenCL: no device " + std::to_string(device_index));
  device_ = devs[static_cast<size_t>(device_index)].id;
  info_ = devs[static_cast<size_t>(device_index)].info;
  cl_int err = CL_SUCCESS;
  context_ = clCreateContext(nullptr, 1, &device_, nullptr, nullptr, &err);
  check(err, "clCreateContext");
  queue_ = clCreateCommandQueue(context_, device_, CL_QUEUE_PROFILING_ENABLE, &err);
  check(err, "clCreateCommandQueue");
  const std::string src = program_source();
  const char* p = src.c_str();
  const size_t len = src.size();
  program_ = clCreateProgramWithSource(context_, 1, &p, &len, &err);
  check(err, "clCreateProgramWithSource");
  err = clBuildProgram(program_, 1, &device_, "-cl-std=CL1.2", nullptr, nullptr);
  if (err != CL_SUCCESS) {
    size_t n = 0;
    clGetProgramBuildInfo(program_, device_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
    std::string log(n, '\0');
    clGetProgramBuildInfo(program_, device_, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
    const size_t first_line = log.find('\n', log.find("error"));
    throw Error(
        std::string("OpenCL: building attnlab's kernels failed: ") +
        log.substr(0, std::min(first_line == std::string::npos ? log.size() : first_line, static_cast<size_t>(300))));
  }
  size_t wg = 0;
  clGetDeviceInfo(device_, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, nullptr);
  max_local_ = 1;
  while (max_local_ * 2 <= std::min<size_t>(wg, static_cast<size_t>(kTuning.opencl_max_work_group))) max_local_ *= 2;
}

Runtime::~Runtime() {
  for (auto& [name, k] : kernels_) clReleaseKernel(k);
  if (program_) clReleaseProgram(program_);
  if (queue_) clReleaseCommandQueue(queue_);
  if (context_) clReleaseContext(context_);
}

cl_kernel Runtime::kernel(const char* name) {
  auto it = kernels_.find(name);
  if (it != kernels_.end()) return it->second;
  cl_int err = CL_SUCCESS;
  cl_kernel k = clCreateKernel(program_, name, &err);
  check(err, name);
  kernels_[name] = k;
  return k;
}

void Runtime::reserve(Buffer& b, size_t bytes) {
  bytes = std::max<size_t>(bytes, 4);
  if (b.mem_ && b.bytes_ >= bytes) return;
  if (b.mem_) clReleaseMemObject(b.mem_);
  b.mem_ = nullptr;
  cl_int err = CL_SUCCESS;
  b.mem_ = clCreateBuffer(context_, CL_MEM_READ_WRITE, bytes, nullptr, &err);
  check(err, "clCreateBuffer");
  b.bytes_ = bytes;
}

void Runtime::upload(Buffer& b, const void* data, size_t bytes) {
  reserve(b, bytes);
  if (bytes)
    check(clEnqueueWriteBuffer(queue_, b.mem_, CL_FALSE, 0, bytes, data, 0, nullptr, event(true)),
          "clEnqueueWriteBuffer");
  // Non-blocking: the caller's data must live until the next finish(); every caller finishes
  // before returning, and the queue is in order.
}

void Runtime::download(const Buffer& b, void* data, size_t bytes, size_t offset) {
  if (bytes)
    check(clEnqueueReadBuffer(queue_, b.mem_, CL_TRUE, offset, bytes, data, 0, nullptr, event(true)),
          "clEnqueueReadBuffer");
}

void Runtime::finish() {
  check(clFinish(queue_), "clFinish");
}

cl_event* Runtime::event(bool transfer) {
  if (!profiling_) return nullptr;
  events_.emplace_back(transfer, nullptr);
  return &events_.back().second;
}

Runtime::Profile Runtime::take_profile() {
  finish();
  Profile p;
  for (auto& [transfer, ev] : events_) {
    if (!ev) continue;
    cl_ulong start = 0, end = 0;
    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof start, &start, nullptr);
    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof end, &end, nullptr);
    (transfer ? p.transfer_ms : p.kernel_ms) += (end - start) / 1e6;
    clReleaseEvent(ev);
  }
  events_.clear();
  return p;
}

void Runtime::run(cl_kernel k, int dims, const size_t* global, const size_t* local) {
  check(clEnqueueNDRangeKernel(queue_, k, static_cast<cl_uint>(dims), nullptr, global, local, 0, nullptr, event(false)),
        "clEnqueueNDRangeKernel");
}

namespace {
template <class T>
void arg(cl_kernel k, cl_uint i, const T& v) {
  check(clSetKernelArg(k, i, sizeof(T), &v), "clSetKernelArg");
}
size_t round_up(size_t n, size_t m) {
  return (n + m - 1) / m * m;
}
}  // namespace

void Runtime::embed(const Buffer& ids, const Buffer& table, const Buffer* pos, int T, int E, Buffer& x) {
  cl_kernel k = kernel("embed");
  const cl_mem pm = pos ? pos->get() : table.get();
  arg(k, 0, ids.get()), arg(k, 1, table.get()), arg(k, 2, pm), arg(k, 3, static_cast<cl_int>(pos != nullptr));
  arg(k, 4, static_cast<cl_int>(E)), arg(k, 5, x.get());
  const size_t g[2] = {static_cast<size_t>(E), static_cast<size_t>(T)};
  run(k, 2, g, nullptr);
}

void Runtime::add_bias(Buffer& y, const Buffer& b, int rows, int cols) {
  cl_kernel k = kernel("add_bias");
  arg(k, 0, y.get()), arg(k, 1, b.get()), arg(k, 2, static_cast<cl_int>(cols));
  const size_t g[2] = {static_cast<size_t>(cols), static_cast<size_t>(rows)};
  run(k, 2, g, nullptr);
}

// The elementwise kernels of two buffers and a count: (a, b, n), one work item per value.
void Runtime::elementwise(const char* name, Buffer& a, const Buffer& b, int n) {
  cl_kernel k = kernel(name);
  arg(k, 0, a.get()), arg(k, 1, b.get()), arg(k, 2, static_cast<cl_int>(n));
  const size_t g = round_up(static_cast<size_t>(n), 64);
  run(k, 1, &g, nullptr);
}

void Runtime::add_inplace(Buffer& y, const Buffer& x, int n) {
  elementwise("add_inplace", y, x, n);
}

void Runtime::copy(Buffer& dst, const Buffer& src, int n) {
  elementwise("copy_buffer", dst, src, n);
}

void Runtime::activation(Buffer& x, int n, Activation act) {
  cl_kernel k = kernel(act == Activation::Relu       ? "relu_inplace"
                       : act == Activation::Gelu     ? "gelu_inplace"
                       : act == Activation::GeluTanh ? "gelu_tanh_inplace"
                                                     : "silu_inplace");
  arg(k, 0, x.get()), arg(k, 1, static_cast<cl_int>(n));
  const size_t g = round_up(static_cast<size_t>(n), 64);
  run(k, 1, &g, nullptr);
}

void Runtime::layer_norm(Buffer& x, const Buffer& g, const Buffer& b, int rows, int E, float eps) {
  cl_kernel k = kernel("layer_norm");
  size_t local = 1;
  while (local * 2 <= std::min<size_t>(max_local_, static_cast<size_t>(E))) local *= 2;
  arg(k, 0, x.get()), arg(k, 1, g.get()), arg(k, 2, b.get()), arg(k, 3, static_cast<cl_int>(E)), arg(k, 4, eps);
  check(clSetKernelArg(k, 5, local * sizeof(float), nullptr), "clSetKernelArg");
  const size_t global = static_cast<size_t>(rows) * local;
  run(k, 1, &global, &local);
}

void Runtime::masked_softmax(Buffer& P, int H, int T, int S, float scale, const Buffer* blocked, const Buffer* additive,
                             int planes, float softcap) {
  cl_kernel k = kernel("masked_softmax");
  size_t local = 1;
  while (local * 2 <= std::min<size_t>(max_local_, static_cast<size_t>(S))) local *= 2;
  arg(k, 0, P.get()), arg(k, 1, static_cast<cl_int>(T)), arg(k, 2, static_cast<cl_int>(S)), arg(k, 3, scale);
  arg(k, 4, blocked ? blocked->get() : P.get()), arg(k, 5, additive ? additive->get() : P.get());
  arg(k, 6, static_cast<cl_int>(planes)), arg(k, 7, static_cast<cl_int>(blocked != nullptr));
  arg(k, 8, static_cast<cl_int>(additive != nullptr)), arg(k, 9, softcap);
  check(clSetKernelArg(k, 10, local * sizeof(float), nullptr), "clSetKernelArg");
  const size_t global = static_cast<size_t>(H) * static_cast<size_t>(T) * local;
  run(k, 1, &global, &local);
}

void Runtime::rms_norm(Buffer& x, const Buffer& g, int rows, int E, float eps) {
  cl_kernel k = kernel("rms_norm");
  size_t local = 1;
  while (local * 2 <= std::min<size_t>(max_local_, static_cast<size_t>(E))) local *= 2;
  arg(k, 0, x.get()), arg(k, 1, g.get()), arg(k, 2, static_cast<cl_int>(E)), arg(k, 3, eps);
  check(clSetKernelArg(k, 4, local * sizeof(float), nullptr), "clSetKernelArg");
  const size_t global = static_cast<size_t>(rows) * local;
  run(k, 1, &global, &local);
}

void Runtime::rope(Buffer& x, const Buffer& cos, const Buffer& sin, int rows, int width, int D) {
  cl_kernel k = kernel("rope");
  arg(k, 0, x.get()), arg(k, 1, cos.get()), arg(k, 2, sin.get()), arg(k, 3, static_cast<cl_int>(width));
  arg(k, 4, static_cast<cl_int>(D));
  const size_t g[3] = {static_cast<size_t>(D / 2), static_cast<size_t>(width / D), static_cast<size_t>(rows)};
  run(k, 3, g, nullptr);
}

void Runtime::mul_inplace(Buffer& a, const Buffer& b, int n) {
  elementwise("mul_inplace", a, b, n);
}

void Runtime::scale_inplace(Buffer& x, float s, int n) {
  cl_kernel k = kernel("scale_inplace");
  arg(k, 0, x.get()), arg(k, 1, s), arg(k, 2, static_cast<cl_int>(n));
  const size_t g = round_up(static_cast<size_t>(n), 64);
  run(k, 1, &g, nullptr);
}

void Runtime::add_relative(Buffer& P, const Buffer& G, int H, int T, int S, int nrel, int lo, int max_len) {
  cl_kernel k = kernel("add_relative");
  arg(k, 0, P.get()), arg(k, 1, G.get()), arg(k, 2, static_cast<cl_int>(T)), arg(k, 3, static_cast<cl_int>(S));
  arg(k, 4, static_cast<cl_int>(nrel)), arg(k, 5, static_cast<cl_int>(lo)), arg(k, 6, static_cast<cl_int>(max_len));
  const size_t g[3] = {static_cast<size_t>(S), static_cast<size_t>(T), static_cast<size_t>(H)};
  run(k, 3, g, nullptr);
}

void Runtime::gemm(bool b_trans, size_t m, size_t n, size_t k, const Buffer& A, size_t a_off, size_t lda,
                   const Buffer& B, size_t b_off, size_t ldb, Buffer& C, size_t c_off, size_t ldc, size_t batch,
                   size_t a_stride, size_t b_stride, size_t c_stride, bool a_trans) {
  using namespace clblast;
  const Transpose ta = a_trans ? Transpose::kYes : Transpose::kNo;
  const Transpose tb = b_trans ? Transpose::kYes : Transpose::kNo;
  StatusCode s;
  if (batch == 1) {
    s = Gemm<float>(Layout::kRowMajor, ta, tb, m, n, k, 1.0f, A.get(), a_off, lda, B.get(), b_off, ldb, 0.0f, C.get(),
                    c_off, ldc, &queue_, event(false));
  } else {
    s = GemmStridedBatched<float>(Layout::kRowMajor, ta, tb, m, n, k, 1.0f, A.get(), a_off, lda, a_stride, B.get(),
                                  b_off, ldb, b_stride, 0.0f, C.get(), c_off, ldc, c_stride, batch, &queue_,
                                  event(false));
  }
  if (s != StatusCode::kSuccess)
    throw Error("OpenCL: CLBlast GEMM failed with status " + std::to_string(static_cast<int>(s)));
}

}  // namespace attnlab::cl
