// Built with ATTNLAB_OPENCL=OFF: "opencl" backends run on cpu and say so.
#include "engine/compute/backend.h"

namespace attnlab {

namespace {
class NoOpenClBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  std::string notice() const override {
    return "OpenCL: this build has no OpenCL support (ATTNLAB_OPENCL=OFF); using cpu";
  }
  EncodeOutput encode(const Model& m, const std::vector<int>& ids, const AttnMask& mask,
                      const EncodeOptions& o) override {
    return cpu_->encode(m, ids, mask, o);
  }
  Tensor cross_attention(const Model& m, int l, const Tensor& a, const Tensor& b, const AttnMask& mask) override {
    return cpu_->cross_attention(m, l, a, b, mask);
  }

 private:
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
};
}  // namespace

std::unique_ptr<Backend> make_opencl_backend(const std::string&) {
  return std::make_unique<NoOpenClBackend>();
}
std::vector<std::string> backend_names() {
  std::vector<std::string> names = {"cpu", "reference"};
  if (bf16_available()) names.insert(names.begin() + 1, "cpu-bf16");
  return names;
}
bool opencl_compiled_in() {
  return false;
}
std::string backend_description(const std::string& name) {
  if (name == "cpu-bf16") return bf16_notice().empty() ? "CPU, bf16 products (oneDNN)" : bf16_notice();
  return name.rfind("opencl", 0) == 0 ? "not available (built without OpenCL)" : "CPU";
}

}  // namespace attnlab
