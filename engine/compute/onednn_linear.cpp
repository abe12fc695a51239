// oneDNN matmuls for the cpu ops' linear layers (see onednn_linear.h).
#include "engine/compute/onednn_linear.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "engine/compute/ops.h"

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
  std::vector<uint16_t> src;     // x in bf16
  std::vector<uint16_t> ga, gb;  // gemm_bf16's operands in bf16
  // gemm_bf16's matmuls by (ta, tb, M, N, K, lda, ldb, ldc, accumulate)
  std::map<std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool>, dnnl::matmul> gemms;

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
    to_bf16(W.ptr(), plain.data(), static_cast<int64_t>(plain.size()));
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

void OnednnLinear::gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                             const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (beta != 0.0f && beta != 1.0f) throw Error("internal: gemm_bf16 takes beta 0 or 1");
  Impl& m = *impl_;
  if (K == 0) {
    if (beta == 0.0f)
      for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.0f);
    return;
  }
  // the operands as stored (rows x ld), rounded to bf16
  auto round = [](const float* X, int64_t rows, int64_t ld, std::vector<uint16_t>& out) {
    out.resize(static_cast<size_t>(rows * ld));
    to_bf16(X, out.data(), rows * ld);
  };
  round(A, ta ? K : M, lda, m.ga);
  round(B, tb ? N : K, ldb, m.gb);
  try {
    // logical op(A) (M, K) and op(B) (K, N) by strides over the stored matrices
    const dnnl::memory::desc a({M, K}, dt::bf16, ta ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1});
    const dnnl::memory::desc b({K, N}, dt::bf16, tb ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
    const dnnl::memory::desc c({M, N}, dt::f32, dnnl::memory::dims{ldc, 1});
    const bool acc = beta != 0.0f;
    const auto key = std::make_tuple(ta, tb, M, N, K, lda, ldb, ldc, acc);
    auto it = m.gemms.find(key);
    if (it == m.gemms.end()) {
      if (m.gemms.size() >= 256) m.gemms.clear();
      dnnl::primitive_attr attr;
      if (acc) {  // C += product
        dnnl::post_ops po;
        po.append_sum(1.0f);
        attr.set_post_ops(po);
      }
      it = m.gemms.emplace(key, dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, m.eng)))
               .first;
    }
    it->second.execute(m.stream, {{DNNL_ARG_SRC, dnnl::memory(a, m.eng, m.ga.data())},
                                  {DNNL_ARG_WEIGHTS, dnnl::memory(b, m.eng, m.gb.data())},
                                  {DNNL_ARG_DST, dnnl::memory(c, m.eng, C)}});
    m.stream.wait();
  } catch (const dnnl::error& e) {
    throw Error(std::string("oneDNN bf16 gemm failed: ") + e.what());
  }
}

void OnednnLinear::set_weights_version(uint64_t version) {
  if (version == impl_->version && version != 0) return;
  impl_->version = version;
  impl_->weights.clear();
}

void OnednnLinear::forget(const Tensor& W) {
  auto& cached = impl_->weights;
  for (auto it = cached.begin(); it != cached.end();)
    it = std::get<0>(it->first) == W.ptr() ? cached.erase(it) : std::next(it);
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
    to_bf16(x.ptr(), m.src.data(), N * in);  // vectorised, over the threads when large
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
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    default:
      return "other";
  }
}

// One CPU engine for every block product, so each thread keeps one stream for all of them.
dnnl::engine& block_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

struct Bf16BlockGemm::Impl {
  dnnl::engine& eng = block_engine();
  std::mutex mu;
  struct Made {
    dnnl::matmul mm;
    size_t scratch = 0;
  };
  // by (M, N, K, lda, tb, ldb, ldc)
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool, int64_t, int64_t>, std::shared_ptr<const Made>> made;
};

Bf16BlockGemm::Bf16BlockGemm() : impl_(std::make_unique<Impl>()) {}
Bf16BlockGemm::~Bf16BlockGemm() = default;

void Bf16BlockGemm::run(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool tb, const uint16_t* B,
                        int64_t ldb, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  Impl& m = *impl_;
  const dnnl::memory::desc a({M, K}, dt::bf16, dnnl::memory::dims{lda, 1});
  const dnnl::memory::desc b({K, N}, dt::bf16, tb ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
  const dnnl::memory::desc c({M, N}, dt::f32, dnnl::memory::dims{ldc, 1});
  std::shared_ptr<const Impl::Made> p;
  try {
    {
      std::lock_guard<std::mutex> lock(m.mu);
      const auto key = std::make_tuple(M, N, K, lda, tb, ldb, ldc);
      auto it = m.made.find(key);
      if (it == m.made.end()) {
        if (m.made.size() >= 256) m.made.clear();  // many shapes seen (sliding windows, typing): start over
        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // each thread its own
        const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, m.eng);
        auto made = std::make_shared<Impl::Made>(Impl::Made{dnnl::matmul(pd), pd.scratchpad_desc().get_size()});
        it = m.made.emplace(key, std::move(made)).first;
      }
      p = it->second;
    }
    thread_local std::vector<uint8_t> scratch;
    thread_local dnnl::stream stream(block_engine());
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, dnnl::memory(a, m.eng, const_cast<uint16_t*>(A))},
                                                  {DNNL_ARG_WEIGHTS, dnnl::memory(b, m.eng, const_cast<uint16_t*>(B))},
                                                  {DNNL_ARG_DST, dnnl::memory(c, m.eng, C)}};
    if (p->scratch > 0) {
      if (scratch.size() < p->scratch) scratch.resize(p->scratch);
      args[DNNL_ARG_SCRATCHPAD] =
          dnnl::memory({{static_cast<int64_t>(p->scratch)}, dt::u8, tag::a}, m.eng, scratch.data());
    }
    p->mm.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    throw Error(std::string("oneDNN bf16 block product failed: ") + e.what());
  }
}

double OnednnLinear::bf16_matmul_gflops(int n, int repeat) {
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  std::vector<uint16_t> a(static_cast<size_t>(n) * n, to_bf16_bits(0.5f)), b(a);
  std::vector<float> c(a.size());
  const dnnl::memory::desc ad({n, n}, dt::bf16, tag::ab), cd({n, n}, dt::f32, tag::ab);
  dnnl::matmul mm(dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, ad, cd), eng));
  const std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, dnnl::memory(ad, eng, a.data())},
                                                      {DNNL_ARG_WEIGHTS, dnnl::memory(ad, eng, b.data())},
                                                      {DNNL_ARG_DST, dnnl::memory(cd, eng, c.data())}};
  mm.execute(stream, args);  // warm-up
  stream.wait();
  std::vector<double> secs;
  for (int r = 0; r < std::max(1, repeat); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    mm.execute(stream, args);
    stream.wait();
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(secs.begin(), secs.end());
  return 2.0 * n * n * n / secs[secs.size() / 2] / 1e9;
}

bool OnednnLinear::bf16_supported() {
  // oneDNN 2.x has bf16 matmul kernels from AVX-512 on (native with AVX512-BF16 or AMX, emulated
  // without); an instruction set capped below that (ONEDNN_MAX_CPU_ISA=AVX2, or an AVX2-only CPU)
  // has none, and making the primitive fails. Asked once by making a small one.
  static const bool ok = [] {
    try {
      dnnl::engine eng(dnnl::engine::kind::cpu, 0);
      const dnnl::memory::desc ad({8, 8}, dt::bf16, tag::ab), cd({8, 8}, dt::f32, tag::ab);
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, ad, cd), eng);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return ok;
}

bool OnednnLinear::native() {
  const auto isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

}  // namespace attnlab
