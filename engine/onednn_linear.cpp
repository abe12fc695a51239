// oneDNN matmuls for the cpu ops' linear layers (see onednn_linear.h).
#include "engine/onednn_linear.h"

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "engine/ops.h"

namespace attnlab {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct OnednnLinear::Impl {
  bool bf16 = false;
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{eng};
  uint64_t version = 0;
  // Converted weights by (address, out, in): bf16 in the layout the kernels want.
  std::map<std::tuple<const float*, int64_t, int64_t>, dnnl::memory> weights;
  // Matmuls by (rows, out, in, bias).
  std::map<std::tuple<int64_t, int64_t, int64_t, bool>, dnnl::matmul> prims;
  std::vector<uint16_t> src;  // x in bf16

  // The blocked weights layout for [in, out]: what a matmul with weights "any" picks.
  dnnl::memory::desc weights_desc(int64_t out, int64_t in) {
    const dnnl::memory::desc s({512, in}, dt::bf16, tag::ab), w({in, out}, dt::bf16, tag::any),
        d({512, out}, dt::f32, tag::ab);
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(s, w, d), eng).weights_desc();
  }

  const dnnl::memory& converted(const Tensor& W) {
    const int64_t out = W.dim(0), in = W.dim(1);
    const auto key = std::make_tuple(W.ptr(), out, in);
    auto it = weights.find(key);
    if (it != weights.end()) return it->second;
    std::vector<uint16_t> plain(static_cast<size_t>(out * in));
    for (size_t k = 0; k < plain.size(); ++k) plain[k] = to_bf16_bits(W.data[k]);
    // nn.Linear's [out, in] is the matmul's [in, out] weights in column-major ("ba")
    dnnl::memory from({{in, out}, dt::bf16, tag::ba}, eng, plain.data());
    dnnl::memory to(weights_desc(out, in), eng);
    dnnl::reorder(from, to).execute(stream, from, to);
    stream.wait();
    return weights.emplace(key, std::move(to)).first->second;
  }

  dnnl::matmul& prim(int64_t N, int64_t out, int64_t in, bool bias, const dnnl::memory::desc& wd) {
    const auto key = std::make_tuple(N, out, in, bias);
    auto it = prims.find(key);
    if (it != prims.end()) return it->second;
    if (prims.size() >= 256) prims.clear();  // many input lengths seen (typing in the app): start over
    const dnnl::memory::desc s({N, in}, bf16 ? dt::bf16 : dt::f32, tag::ab), d({N, out}, dt::f32, tag::ab);
    const dnnl::matmul::desc desc = bias ? dnnl::matmul::desc(s, wd, dnnl::memory::desc({1, out}, dt::f32, tag::ab), d)
                                         : dnnl::matmul::desc(s, wd, d);
    return prims.emplace(key, dnnl::matmul(dnnl::matmul::primitive_desc(desc, eng))).first->second;
  }
};

OnednnLinear::OnednnLinear(bool bf16) : impl_(std::make_unique<Impl>()) {
  impl_->bf16 = bf16;
}
OnednnLinear::~OnednnLinear() = default;

void OnednnLinear::set_weights_version(uint64_t version) {
  if (version == impl_->version && version != 0) return;
  impl_->version = version;
  impl_->weights.clear();
}

void OnednnLinear::run(const Tensor& x, const Tensor& W, const Tensor& b, Tensor& y) {
  Impl& m = *impl_;
  const int64_t N = x.dim(0), in = x.dim(1), out = W.dim(0);
  y.reshape_for_overwrite({N, out});
  if (N == 0) return;
  if (m.version == 0) m.weights.clear();  // unknown weights: never trust a cached conversion
  try {
    if (!m.bf16) {  // fp32: the weights in place, as the matmul's column-major [in, out]
      const dnnl::memory w({{in, out}, dt::f32, tag::ba}, m.eng, const_cast<float*>(W.ptr()));
      dnnl::matmul& p = m.prim(N, out, in, !b.empty(), w.get_desc());
      std::unordered_map<int, dnnl::memory> args = {
          {DNNL_ARG_SRC, dnnl::memory({{N, in}, dt::f32, tag::ab}, m.eng, const_cast<float*>(x.ptr()))},
          {DNNL_ARG_WEIGHTS, w},
          {DNNL_ARG_DST, dnnl::memory({{N, out}, dt::f32, tag::ab}, m.eng, y.ptr())}};
      if (!b.empty())
        args[DNNL_ARG_BIAS] = dnnl::memory({{1, out}, dt::f32, tag::ab}, m.eng, const_cast<float*>(b.ptr()));
      p.execute(m.stream, args);
      m.stream.wait();
      return;
    }
    const dnnl::memory& w = m.converted(W);
    dnnl::matmul& p = m.prim(N, out, in, !b.empty(), w.get_desc());
    m.src.resize(static_cast<size_t>(N * in));
    const float* xs = x.ptr();
    // serial: ~0.1 ms at 512 x 768, and no thread wake-ups
    for (int64_t k = 0; k < N * in; ++k) m.src[static_cast<size_t>(k)] = to_bf16_bits(xs[k]);
    dnnl::memory src({{N, in}, dt::bf16, tag::ab}, m.eng, m.src.data());
    dnnl::memory dst({{N, out}, dt::f32, tag::ab}, m.eng, y.ptr());
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, dst}};
    if (!b.empty())
      args[DNNL_ARG_BIAS] = dnnl::memory({{1, out}, dt::f32, tag::ab}, m.eng, const_cast<float*>(b.ptr()));
    p.execute(m.stream, args);
    m.stream.wait();
  } catch (const dnnl::error& e) {
    throw Error(std::string("oneDNN matmul failed: ") + e.what());
  }
}

std::string OnednnLinear::isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx2: return "avx2";
    default: return "other";
  }
}

bool OnednnLinear::native() {
  const auto isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

}  // namespace attnlab
