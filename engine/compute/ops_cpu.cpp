// The cpu ops: Eigen GEMMs (multi-threaded through OpenMP) for linear layers, attention in
// parallel tasks with a vectorised masked softmax, vectorised activations. Held to
// ops_reference.cpp by tests. This is the only translation unit of the engine that includes
// Eigen's heavy headers (with train-free kernels in cpu_kernels.h).
#include <chrono>
#include <cstring>
#include <mutex>

#include <malloc.h>

#include <omp.h>

#include <unsupported/Eigen/SpecialFunctions>

#ifdef ATTNLAB_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.h>

#include "engine/compute/onednn_linear.h"
#endif

#include "engine/compute/cpu_kernels.h"
#include "engine/compute/linear_half.h"
#include "engine/compute/measured.h"
#include "engine/compute/ops.h"
#include "engine/core/tuning.h"

namespace attnlab {

namespace {

using kernels::RowMat;
using Map = Eigen::Map<RowMat>;
using ConstMap = Eigen::Map<const RowMat>;

ConstMap cm(const Tensor& t) {
  return ConstMap(t.ptr(), t.dim(0), t.numel() / std::max<int64_t>(1, t.dim(0)));
}
Map mm(Tensor& t) {
  return Map(t.ptr(), t.dim(0), t.numel() / std::max<int64_t>(1, t.dim(0)));
}
Eigen::Map<const Eigen::RowVectorXf> cv(const Tensor& t) {
  return {t.ptr(), t.numel()};
}
Eigen::Map<Eigen::RowVectorXf> mv(Tensor& t) {
  return {t.ptr(), t.numel()};
}

// Whether gemm() goes through oneDNN's sgemm: what this machine measured (engine/compute/measured.h;
// oneDNN was 1.4x Eigen on one AMD EPYC, 0.94x on an Intel Xeon of our kind), read once.
bool use_onednn_sgemm() {
  static const bool yes = fp32_gemm_choice() == "onednn";
  return yes;
}

// C (M x N) = op(A) op(B) + beta C, row-major, op = transpose when t*: the one matrix product of
// the linear layers (forward and backward). oneDNN's sgemm or Eigen's, whichever this machine
// measured faster (use_onednn_sgemm). Both are deterministic for a thread count.
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
          float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
#ifdef ATTNLAB_WITH_ONEDNN
  if (K > 0 && 2.0 * M * N * K >= kTuning.onednn_min_flops && use_onednn_sgemm()) {
    const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    if (st != dnnl_success) throw Error("oneDNN sgemm failed (status " + std::to_string(static_cast<int>(st)) + ")");
    return;
  }
#endif
  using Stride = Eigen::OuterStride<>;
  Eigen::Map<RowMat, 0, Stride> Cm(C, M, N, Stride(ldc));
  if (beta == 0.0f) Cm.setZero();
  if (K == 0) return;
  const Eigen::Map<const RowMat, 0, Stride> Am(A, ta ? K : M, ta ? M : K, Stride(lda));
  const Eigen::Map<const RowMat, 0, Stride> Bm(B, tb ? N : K, tb ? K : N, Stride(ldb));
  if (ta && tb)
    Cm.noalias() += Am.transpose() * Bm.transpose();
  else if (ta)
    Cm.noalias() += Am.transpose() * Bm;
  else if (tb)
    Cm.noalias() += Am * Bm.transpose();
  else
    Cm.noalias() += Am * Bm;
}

// First and last visible key of every (plane, query) row; lo > hi when the row sees nothing.
struct Span {
  int lo, hi;
};
std::vector<Span> visible_spans(const AttnMask& mask) {
  const int T = mask.T, S = mask.S;
  std::vector<Span> spans(static_cast<size_t>(mask.planes) * T, Span{0, S - 1});
  if (mask.blocked.empty()) return spans;
  for (int p = 0; p < mask.planes; ++p)
    for (int i = 0; i < T; ++i) {
      const uint8_t* row = mask.blocked.data() + mask.index(p, i, 0);
      const void* first = std::memchr(row, 0, static_cast<size_t>(S));
      if (!first) {
        spans[static_cast<size_t>(p) * T + i] = Span{S, -1};
        continue;
      }
      const void* last = memrchr(row, 0, static_cast<size_t>(S));
      spans[static_cast<size_t>(p) * T + i] = Span{static_cast<int>(static_cast<const uint8_t*>(first) - row),
                                                   static_cast<int>(static_cast<const uint8_t*>(last) - row)};
    }
  return spans;
}

class CpuOps final : public Ops {
 public:
  explicit CpuOps(bool bf16 = false) : bf16_mode_(bf16) {
#ifdef ATTNLAB_WITH_ONEDNN
    if (bf16 && !bf16_available()) throw Error(bf16_notice());
    matmul_ = std::make_unique<OnednnLinear>(bf16);
    if (bf16) block_gemm_ = std::make_unique<Bf16BlockGemm>();
#else
    if (bf16) throw Error("this build has no bf16 path (it needs oneDNN: libdnnl-dev, -DATTNLAB_ONEDNN=ON)");
#endif
  }
  std::string name() const override {
    return bf16_mode_ ? "cpu-bf16" : "cpu";
  }
  void set_weights_version(uint64_t version) override {
    version_ = version;
#ifdef ATTNLAB_WITH_ONEDNN
    matmul_->set_weights_version(version);
#endif
  }

  void transient_weights(const Tensor& W) override {
#ifdef ATTNLAB_WITH_ONEDNN
    matmul_->forget(W);
#else
    (void)W;
#endif
  }

  void linear(const Tensor& x, const Tensor& W, const Tensor& b, Tensor& y) override {
#ifdef ATTNLAB_WITH_ONEDNN
    // Passes over known weights (the backends set the version): matmul primitives per shape.
    // Training (version 0, weights changing every step) and bf16 aside, sgemm below.
    if (bf16_mode_ || version_ != 0) return matmul_->run(x, W, b, y);
#endif
    const int64_t N = x.dim(0), in = x.dim(1), out = W.dim(0);
    y.reshape_for_overwrite({N, out});
    if (!b.empty())  // y = b, then y += x W^T
      for (int64_t n = 0; n < N; ++n) std::memcpy(y.ptr() + n * out, b.ptr(), static_cast<size_t>(out) * sizeof(float));
    gemm(false, true, N, out, in, x.ptr(), in, W.ptr(), in, b.empty() ? 0.0f : 1.0f, y.ptr(), out);
  }

  // A few rows by a BF16 matrix: read in its 16 bits (bf16_rows_product) instead of widened.
  bool linear_half(const Tensor& x, const HalfTensor& W, const Tensor& b, Tensor& y) override {
    if (!W.bf16 || x.dim(0) > bf16_direct_rows()) return false;
    bf16_rows_product(x, W, b, y);
    return true;
  }

  void linear_backward(const Tensor& x, const Tensor& W, const Tensor& dy, Tensor* dx, Tensor& dW,
                       Tensor& db) override {
    const int64_t N = x.dim(0), in = x.dim(1), out = W.dim(0);
    if (dx) {
      dx->reshape_for_overwrite({N, in});
      product(false, false, N, in, out, dy.ptr(), out, W.ptr(), in, 0.0f, dx->ptr(), in);  // dx = dy W
    }
    if (!dW.empty()) product(true, false, out, in, N, dy.ptr(), out, x.ptr(), in, 1.0f, dW.ptr(), in);  // dW += dy^T x
    if (db.empty()) return;  // a linear without bias
    // Column sums in a fixed order (row by row), so gradients do not depend on the heap.
    auto DB = mv(db);
    const auto DY = cm(dy);
    for (Eigen::Index n = 0; n < DY.rows(); ++n) DB += DY.row(n);
  }

  void layer_norm(const Tensor& x, const Tensor& g, const Tensor& b, float eps, Tensor& y, Tensor& xhat,
                  Tensor& rstd) override {
    xhat = x;
    y.reshape_for_overwrite(x.shape);
    rstd.reshape_for_overwrite({x.dim(0)});
    auto XH = mm(xhat);
    auto Y = mm(y);
    const auto gv = cv(g).array();
    const auto bv = cv(b).array();
    // rows are independent: split over the threads (the same result for any split)
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelMin)
    for (Eigen::Index n = 0; n < XH.rows(); ++n) {
      rstd.data[static_cast<size_t>(n)] = kernels::normalize_row(XH.row(n).data(), XH.cols(), eps);
      Y.row(n).array() = XH.row(n).array() * gv + bv;
    }
  }

  void layer_norm_backward(const Tensor& xhat, const Tensor& rstd, const Tensor& g, const Tensor& dy, Tensor& dx,
                           Tensor& dg, Tensor& db) override {
    const auto XH = cm(xhat);
    const auto DY = cm(dy);
    dx = Tensor(xhat.shape);
    auto DX = mm(dx);
    const bool weights = !dg.empty() && !db.empty();
    const auto gv = cv(g).array();
    const float inv_e = 1.0f / static_cast<float>(XH.cols());
    Eigen::ArrayXf dh(XH.cols()), tmp(XH.cols());
    for (Eigen::Index n = 0; n < XH.rows(); ++n) {
      if (weights) {
        mv(dg) += DY.row(n).cwiseProduct(XH.row(n));
        mv(db) += DY.row(n);
      }
      dh = (DY.row(n).array() * gv).transpose();
      const float m1 = kernels::stable_sum(dh.data(), dh.size()) * inv_e;
      tmp = dh * XH.row(n).array().transpose();
      const float m2 = kernels::stable_sum(tmp.data(), tmp.size()) * inv_e;
      DX.row(n).array() =
          rstd.data[static_cast<size_t>(n)] * (dh - m1 - XH.row(n).array().transpose() * m2).transpose();
    }
  }

  void activation(const Tensor& h, Activation act, Tensor& a) override {
    a.reshape_for_overwrite(h.shape);
    if (act == Activation::Relu) {
      mv(a).array() = cv(h).array().cwiseMax(0.0f);
      return;
    }
    // Exact GELU with Eigen's vectorised erf, chunk by padded chunk (for_each_padded_chunk).
    for_each_padded_chunk(h, [&](int64_t k0, Eigen::Index n, Eigen::ArrayXf x) {
      if (act == Activation::Gelu)
        x = 0.5f * x * (1.0f + (x * static_cast<float>(M_SQRT1_2)).erf());
      else if (act == Activation::Silu)
        x = x / (1.0f + (-x).exp());
      else  // GeluTanh
        x = 0.5f * x * (1.0f + (kTanhK * (x + kTanhA * x * x * x)).tanh());
      Eigen::Map<Eigen::ArrayXf>(a.ptr() + k0, n) = x.head(n);
    });
  }

  // RMSNorm, RoPE and Mul: the reference's per-row arithmetic (ops.h's row kernels), rows split
  // over the threads when the tensor is large; the same result for any split.
  void rms_norm(const Tensor& x, const Tensor& g, float eps, Tensor& y) override {
    const int64_t N = x.dim(0), E = x.dim(1);
    y.reshape_for_overwrite(x.shape);
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelMin)
    for (int64_t n = 0; n < N; ++n) rms_norm_row(x.ptr() + n * E, g.ptr(), E, eps, y.ptr() + n * E);
  }
  void rms_norm_backward(const Tensor& x, const Tensor& g, float eps, const Tensor& dy, Tensor& dx,
                         Tensor& dg) override {
    const int64_t N = x.dim(0), E = x.dim(1);
    dx.reshape_for_overwrite(x.shape);
    if (!dg.empty()) {  // dg sums over rows: in row order, on one thread, as the reference
      for (int64_t n = 0; n < N; ++n)
        rms_norm_backward_row(x.ptr() + n * E, g.ptr(), dy.ptr() + n * E, E, eps, dx.ptr() + n * E, dg.ptr());
      return;
    }
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelMin)
    for (int64_t n = 0; n < N; ++n)
      rms_norm_backward_row(x.ptr() + n * E, g.ptr(), dy.ptr() + n * E, E, eps, dx.ptr() + n * E, nullptr);
  }
  void rope(Tensor& x, const Tensor& cos, const Tensor& sin, int D, int T, bool inverse) override {
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelMin)
    for (int64_t n = 0; n < x.dim(0); ++n) rope_row(x, n, cos, sin, D, T, inverse);
  }
  void mul(Tensor& a, const Tensor& b) override {
    const int64_t n = a.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t c = 0; c < n; c += kChunk) {
      const int64_t len = std::min(kChunk, n - c);
      Eigen::Map<Eigen::ArrayXf>(a.ptr() + c, len) *= Eigen::Map<const Eigen::ArrayXf>(b.ptr() + c, len);
    }
  }

  // act'(h) with Eigen's vectorised tanh, exp and erf (the forward's), chunk by padded chunk as
  // activation() (the same bits for any buffer offset and split); the formulas are
  // the reference's act_grad, in float. The scalar loop took a fifth of a GPT-2-style
  // language model's training step in glibc's tanhf, on one thread.
  void activation_backward(const Tensor& h, Activation act, Tensor& da) override {
    if (act == Activation::Relu) {
      for (size_t i = 0; i < da.data.size(); ++i) da.data[i] *= h.data[i] > 0 ? 1.0f : 0.0f;
      return;
    }
    for_each_padded_chunk(h, [&](int64_t k0, Eigen::Index n, const Eigen::ArrayXf& v) {
      Eigen::ArrayXf g(v.size());
      if (act == Activation::GeluTanh) {
        const Eigen::ArrayXf t = (kTanhK * (v + kTanhA * v * v * v)).tanh();
        g = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kTanhK * (1.0f + 3.0f * kTanhA * v * v);
      } else if (act == Activation::Silu) {
        const Eigen::ArrayXf sg = 1.0f / (1.0f + (-v).exp());
        g = sg * (1.0f + v * (1.0f - sg));
      } else {  // Gelu: cdf + h pdf
        g = 0.5f * (1.0f + (v * static_cast<float>(M_SQRT1_2)).erf()) +
            v * ((-0.5f * v * v).exp() * 0.3989422804014327f);
      }
      Eigen::Map<Eigen::ArrayXf>(da.ptr() + k0, n) *= g.head(n);
    });
  }

  void attention(const AttnArgs& s, const Tensor& Q, const Tensor& K, const Tensor* V, Tensor* P,
                 Tensor* ctx) override {
    if (s.mask) return masked_attention(s, Q, K, V, P, ctx);
    if (!V || !ctx) throw Error("internal: batched attention needs V and ctx");
    Tensor unkept;
    batched_attention(s, Q, K, *V, P ? *P : unkept, *ctx);
  }

  // Form (b): batches with padding and causal masks, parallel over (sequence, head) pairs.
  void batched_attention(const AttnArgs& s, const Tensor& Q, const Tensor& K, const Tensor& V, Tensor& P, Tensor& ctx) {
    if (s.keys() != s.T) throw Error("internal: batched attention is self-attention");
    const int B = s.B, T = s.T, H = s.H, D = s.D;
    const float scale = static_cast<float>(s.score_scale());
    P.reshape_for_overwrite({B, H, T, T});
    ctx.reshape_for_overwrite({static_cast<int64_t>(B) * T, static_cast<int64_t>(H) * D});
    const auto QM = cm(Q), KM = cm(K), VM = cm(V);
    auto CM = mm(ctx);
#pragma omp parallel
    {
      Eigen::ArrayXf buf(T);
      RowMat Pd;
      std::vector<uint8_t> blocked(static_cast<size_t>(T));
#pragma omp for schedule(dynamic, 1)
      for (int bh = 0; bh < B * H; ++bh) {
        const int b = bh / H, h = bh % H, g = s.kv_head(h);  // g: the key/value head h reads (grouped-query)
        const auto Qb = QM.block(static_cast<Eigen::Index>(b) * T, h * D, T, D);
        const auto Kb = KM.block(static_cast<Eigen::Index>(b) * T, g * D, T, D);
        Map Pm(P.ptr() + static_cast<size_t>(bh) * T * T, T, T);
        Pm.noalias() = Qb * Kb.transpose();
        if (s.rel)
          for (int i = 0; i < T; ++i)
            for (int j = 0; j < T; ++j)
              Pm(i, j) += Qb.row(i).dot(cm(*s.rel).row(relative_index(i, j, s.max_len)).segment(h * D, D));
        Pm *= scale;
        if (s.softcap > 0) Pm = ((Pm.array() / s.softcap).tanh() * s.softcap).matrix();  // Gemma 2, before the mask
        for (int i = 0; i < T; ++i) {
          bool any = false;
          for (int j = 0; j < T; ++j) {
            blocked[static_cast<size_t>(j)] = (s.causal && j > i) || (s.window > 0 && i - j > s.window) ||
                                              (s.key_blocked && (*s.key_blocked)[static_cast<size_t>(b * T + j)]);
            any |= blocked[static_cast<size_t>(j)] != 0;
          }
          kernels::masked_softmax_row(&Pm(i, 0), T, any ? blocked.data() : nullptr, nullptr, buf);
        }
        if (s.drop_keep) {
          Pd = Pm;
          apply_keep(s, bh, Pd);
          CM.block(static_cast<Eigen::Index>(b) * T, h * D, T, D).noalias() =
              Pd * VM.block(static_cast<Eigen::Index>(b) * T, g * D, T, D);
        } else {
          CM.block(static_cast<Eigen::Index>(b) * T, h * D, T, D).noalias() =
              Pm * VM.block(static_cast<Eigen::Index>(b) * T, g * D, T, D);
        }
      }
    }
  }

  void attention_backward(const AttnArgs& s, const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P,
                          const Tensor& dctx, Tensor& dQ, Tensor& dK, Tensor& dV, Tensor* drel) override {
    if (s.mask || s.keys() != s.T) throw Error("internal: attention_backward takes self-attention batches");
    const int B = s.B, T = s.T, H = s.H, D = s.D;
    const float scale = static_cast<float>(s.score_scale());
    // Grouped-query heads: each query head's dK, dV go to its own columns first, then the heads
    // that share a key/value head are summed into it (in head order: deterministic).
    const bool grouped = s.kv_heads() != H;
    const int64_t N = static_cast<int64_t>(B) * T;
    dQ = Tensor(Q.shape);
    dK = grouped ? Tensor({N, static_cast<int64_t>(H) * D}) : Tensor(K.shape);
    dV = grouped ? Tensor({N, static_cast<int64_t>(H) * D}) : Tensor(V.shape);
    const auto QM = cm(Q), KM = cm(K), VM = cm(V), DC = cm(dctx);
    auto DQ = mm(dQ), DK = mm(dK), DV = mm(dV);
    // Relative-table gradients from different sequences land in the same rows: one buffer per
    // thread, summed in thread order afterwards (deterministic for a thread count).
    const int threads = omp_get_max_threads();
    std::vector<Tensor> drel_local(s.rel && drel ? static_cast<size_t>(threads) : 0);
    for (auto& t : drel_local) t = Tensor(drel->shape);
#pragma omp parallel
    {
      RowMat Pd, dP, dS, Zc;
      Eigen::VectorXf rowdot;
      Tensor* my_drel = drel_local.empty() ? nullptr : &drel_local[static_cast<size_t>(omp_get_thread_num())];
#pragma omp for schedule(static)
      for (int bh = 0; bh < B * H; ++bh) {
        const int b = bh / H, h = bh % H;
        const Eigen::Index r0 = static_cast<Eigen::Index>(b) * T;
        const ConstMap Pm(P.ptr() + static_cast<size_t>(bh) * T * T, T, T);
        const int g = s.kv_head(h);
        const auto Qb = QM.block(r0, h * D, T, D), Kb = KM.block(r0, g * D, T, D), Vb = VM.block(r0, g * D, T, D);
        const auto dC = DC.block(r0, h * D, T, D);
        Pd = Pm;
        if (s.drop_keep) apply_keep(s, bh, Pd);
        DV.block(r0, h * D, T, D).noalias() = Pd.transpose() * dC;  // ctx = Pd V
        dP.noalias() = dC * Vb.transpose();
        if (s.drop_keep) apply_keep(s, bh, dP);
        // softmax backward: dS = P * (dP - rowsum(dP * P)), times the score scale
        dS = Pm.cwiseProduct(dP);
        for (int i = 0; i < T; ++i) {
          const float dot = kernels::stable_sum(&dS(i, 0), T);
          dS.row(i) = (Pm.row(i).array() * (dP.row(i).array() - dot) * scale).matrix();
        }
        if (s.softcap > 0) {  // cap * tanh(z / cap): d/dz = 1 - tanh^2, z the scaled score (recomputed)
          if (s.rel) throw Error("internal: soft-capped scores with a relative-position table");
          Zc.noalias() = Qb * Kb.transpose();
          dS.array() *= 1.0f - ((Zc.array() * scale) / s.softcap).tanh().square();
        }
        DQ.block(r0, h * D, T, D).noalias() = dS * Kb;
        DK.block(r0, h * D, T, D).noalias() = dS.transpose() * Qb;
        if (s.rel) {
          const auto R = cm(*s.rel);
          for (int i = 0; i < T; ++i)
            for (int j = 0; j < T; ++j) {
              const float g = dS(i, j);
              if (g == 0.0f) continue;
              const int r = relative_index(i, j, s.max_len);
              DQ.row(r0 + i).segment(h * D, D) += g * R.row(r).segment(h * D, D);
              if (my_drel) mm(*my_drel).row(r).segment(h * D, D) += g * Qb.row(i);
            }
        }
      }
    }
    for (auto& t : drel_local) mm(*drel) += cm(t);
    if (grouped) {
      Tensor dk(K.shape), dv(V.shape);
      for (int h = 0; h < H; ++h) {
        const int g = s.kv_head(h);
        mm(dk).middleCols(g * D, D) += DK.middleCols(h * D, D);
        mm(dv).middleCols(g * D, D) += DV.middleCols(h * D, D);
      }
      dK = std::move(dk);
      dV = std::move(dv);
    }
  }

  // Form (a): one sequence with any mask (planes per head, additive terms). Work is split into
  // (head, block of 64 queries) tasks. Each task multiplies only the key range [lo, hi] that
  // some query of the block can see, so sparse masks (sliding window, causal, strided with a
  // small stride's band) skip the blocked work instead of computing and discarding it; keys
  // outside the range are blocked for every row of the block, so the softmax over the range
  // equals the softmax over the row. Probabilities go straight into P when it is kept (a
  // calloc'd tensor: only visible ranges are written), else into a per-thread block.
  void masked_attention(const AttnArgs& s, const Tensor& Qt, const Tensor& Kt, const Tensor* Vt, Tensor* Pt,
                        Tensor* ctx) {
    const AttnMask& mask = *s.mask;
    if (s.B != 1 || s.drop_keep) throw Error("internal: masked attention takes one sequence, without dropout");
    const int T = s.T, S = s.keys(), H = s.H, D = s.D;
    const bool with_output = Vt && ctx;
    const auto Q = cm(Qt), K = cm(Kt);
    const float scale = static_cast<float>(s.score_scale());
    const std::vector<Span> spans = visible_spans(mask);
    const int blocks = (T + kTuning.query_block - 1) / kTuning.query_block;
    float* probs = nullptr;
    if (Pt) {
      *Pt = Tensor({1, H, T, S});
      probs = Pt->ptr();
    }
    if (with_output) ctx->reshape_for_overwrite({T, static_cast<int64_t>(H) * D});
    // cpu-bf16: the scores' and the context's products in bf16 as well (fp32 accumulation,
    // scaling and softmax), as PyTorch's bf16 autocast runs them; relative positions stay fp32.
    const bool half = bf16_mode_ && !s.rel;
    std::vector<uint16_t> qh, kh, vh;
    if (half) {
      qh = bf16_copy(Qt), kh = bf16_copy(Kt);
      if (with_output) vh = bf16_copy(*Vt);
    }
    const int64_t lq = Qt.dim(1), lk = Kt.dim(1), lv = with_output ? Vt->dim(1) : 0, lc = with_output ? ctx->dim(1) : 0;
#pragma omp parallel
    {
      RowMat scratch, G;
      Eigen::ArrayXf buf;
      std::vector<uint16_t> pb;  // a block's probabilities in bf16 (cpu-bf16)
#pragma omp for schedule(dynamic, 1)
      for (int task = 0; task < H * blocks; ++task) {
        const int h = task / blocks, i0 = (task % blocks) * kTuning.query_block;
        const int n = std::min(kTuning.query_block, T - i0);
        const int plane = mask.plane_of_head(h);
        int r0 = S, r1 = -1;
        for (int i = i0; i < i0 + n; ++i) {
          const Span sp = spans[static_cast<size_t>(plane) * T + i];
          if (sp.lo <= sp.hi) r0 = std::min(r0, sp.lo), r1 = std::max(r1, sp.hi);
        }
        if (r1 < r0) {  // every row of the block sees nothing: zero probabilities, zero context
          if (with_output) mm(*ctx).block(i0, h * D, n, D).setZero();
          continue;
        }
        const int R = r1 - r0 + 1;
        float* dst;
        Eigen::Index ld;
        if (probs) {
          dst = probs + (static_cast<size_t>(h) * T + i0) * S + r0, ld = S;
        } else {
          scratch.resize(n, R);
          dst = scratch.data(), ld = R;
        }
        Eigen::Map<RowMat, 0, Eigen::OuterStride<>> P(dst, n, R, Eigen::OuterStride<>(ld));
        const auto Qb = Q.block(i0, h * D, n, D);
        const int g = s.kv_head(h);  // the key/value head this query head reads
        // one thread's products (oneDNN runs single-threaded inside this parallel loop)
        if (half)
          block_product(n, R, D, qh.data() + static_cast<int64_t>(i0) * lq + h * D, lq, true,
                        kh.data() + static_cast<int64_t>(r0) * lk + g * D, lk, dst, ld);
        else
          gemm(false, true, n, R, D, Qt.ptr() + static_cast<int64_t>(i0) * lq + h * D, lq,
               Kt.ptr() + static_cast<int64_t>(r0) * lk + g * D, lk, 0.0f, dst, ld);
        if (s.rel) {
          // q_i . r_(i-j) for every table row the block reaches, then gathered per (i, j).
          const int lo = relative_index(i0, r1, s.max_len), hi = relative_index(i0 + n - 1, r0, s.max_len);
          G.noalias() = Qb * cm(*s.rel).block(lo, h * D, hi - lo + 1, D).transpose();
          for (int i = 0; i < n; ++i)
            for (int j = 0; j < R; ++j) P(i, j) += G(i, relative_index(i0 + i, r0 + j, s.max_len) - lo);
        }
        P *= scale;
        if (s.softcap > 0) P = ((P.array() / s.softcap).tanh() * s.softcap).matrix();
        for (int i = 0; i < n; ++i) {
          const size_t off = mask.index(plane, i0 + i, r0);
          kernels::masked_softmax_row(&P(i, 0), R, mask.blocked.empty() ? nullptr : mask.blocked.data() + off,
                                      mask.additive.empty() ? nullptr : mask.additive.data() + off, buf);
        }
        if (with_output && half) {
          pb.resize(static_cast<size_t>(n) * R);
          for (int i = 0; i < n; ++i) to_bf16(&P(i, 0), pb.data() + static_cast<size_t>(i) * R, R);
          block_product(n, D, R, pb.data(), R, false, vh.data() + static_cast<int64_t>(r0) * lv + g * D, lv,
                        ctx->ptr() + static_cast<int64_t>(i0) * lc + h * D, lc);
        } else if (with_output) {
          gemm(false, false, n, D, R, dst, ld, Vt->ptr() + static_cast<int64_t>(r0) * lv + g * D, lv, 0.0f,
               ctx->ptr() + static_cast<int64_t>(i0) * lc + h * D, lc);
        }
      }
    }
  }

 private:
  // The training backward's products: fp32 sgemm, or bf16 with fp32 accumulation on the bf16 path.
  void product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
               int64_t ldb, float beta, float* C, int64_t ldc) {
#ifdef ATTNLAB_WITH_ONEDNN
    if (bf16_mode_) return matmul_->gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
#endif
    gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
  }

  bool bf16_mode_ = false;
  uint64_t version_ = 0;
#ifdef ATTNLAB_WITH_ONEDNN
  std::unique_ptr<OnednnLinear> matmul_;
  std::unique_ptr<Bf16BlockGemm> block_gemm_;  // cpu-bf16: the attention blocks' products
#endif
  static constexpr int64_t kChunk = 4096;           // activation chunk (floats), a multiple of every packet size
  static constexpr int64_t kParallelMin = 1 << 15;  // elements below which an elementwise op stays on one thread
  // n floats copied to an aligned array padded with zeros to a whole number of 64-byte packets:
  // Eigen computes every element with its vectorised function. Unpadded, a chunk's last n % 16
  // went through the scalar one (glibc's expf for exp), so a value's result depended on where
  // its chunk ended: on the buffer's offset and length.
  static Eigen::ArrayXf padded_chunk(const float* p, Eigen::Index n) {
    Eigen::ArrayXf x = Eigen::ArrayXf::Zero((n + 15) / 16 * 16);
    x.head(n) = Eigen::Map<const Eigen::ArrayXf>(p, n);
    return x;
  }
  // f(k0, n, x) for each kChunk-long run of h's values from k0, x its padded copy: elementwise
  // functions all through Eigen's vectorised code; runs are independent, so they are split over the
  // threads when h is large (the same bits for any buffer offset and split).
  template <class F>
  static void for_each_padded_chunk(const Tensor& h, F&& f) {
    const int64_t chunks = (h.numel() + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (h.numel() >= kParallelMin)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t k0 = c * kChunk;
      const Eigen::Index n = std::min<int64_t>(kChunk, h.numel() - k0);
      f(k0, n, padded_chunk(h.ptr() + k0, n));
    }
  }

  static constexpr float kTanhK = 0.7978845608028654f;  // sqrt(2 / pi)
  static constexpr float kTanhA = 0.044715f;

  void block_product(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool tb, const uint16_t* B,
                     int64_t ldb, float* C, int64_t ldc) {
#ifdef ATTNLAB_WITH_ONEDNN
    block_gemm_->run(M, N, K, A, lda, tb, B, ldb, C, ldc);
#else
    (void)M, (void)N, (void)K, (void)A, (void)lda, (void)tb, (void)B, (void)ldb, (void)C, (void)ldc;
    throw Error("internal: bf16 products need oneDNN");
#endif
  }

  static std::vector<uint16_t> bf16_copy(const Tensor& t) {
    std::vector<uint16_t> out(static_cast<size_t>(t.numel()));
    to_bf16(t.ptr(), out.data(), t.numel());
    return out;
  }

  static void apply_keep(const AttnArgs& s, int bh, RowMat& M) {
    const uint8_t* keep = s.drop_keep->data() + static_cast<size_t>(bh) * s.T * s.T;
    float* m = M.data();
    for (int k = 0; k < s.T * s.T; ++k) m[k] = keep[k] ? m[k] * s.drop_scale : 0.0f;
  }
};

}  // namespace

void apply_process_tuning() {
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, static_cast<int>(kTuning.malloc_mmap_threshold));
    mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTuning.malloc_trim_threshold));
  });
}

std::unique_ptr<Ops> make_cpu_ops() {
  apply_process_tuning();
  return std::make_unique<CpuOps>();
}

std::unique_ptr<Ops> make_cpu_bf16_ops() {
  apply_process_tuning();
  return std::make_unique<CpuOps>(true);
}

void to_bf16(const float* x, uint16_t* out, int64_t n) {
  constexpr int64_t kBlock = 1 << 14;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  // serial inside a parallel region (the attention tasks) or for small arrays
#pragma omp parallel for schedule(static) if (blocks > 1 && !omp_in_parallel())
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t end = std::min(n, (b + 1) * kBlock);
    for (int64_t k = b * kBlock; k < end; ++k) out[k] = to_bf16_bits(x[k]);
  }
}

bool bf16_available() {
#ifdef ATTNLAB_WITH_ONEDNN
  return OnednnLinear::bf16_supported();
#else
  return false;
#endif
}

std::string bf16_notice() {
#ifdef ATTNLAB_WITH_ONEDNN
  if (!OnednnLinear::bf16_supported())
    return "oneDNN has no bf16 kernels for this instruction set (" + OnednnLinear::isa() +
           "; they need AVX-512): no bf16 path here";
  if (!OnednnLinear::native())
    return "this CPU has no bf16 instructions (AVX512-BF16 or AMX; oneDNN uses " + OnednnLinear::isa() +
           "): bf16 is emulated and slower than fp32";
  return bf16_speed_notice();
#else
  return "this build has no bf16 path (it needs oneDNN)";
#endif
}

double sgemm_gflops(int n, int repeat) {
  RowMat a = RowMat::Random(n, n), b = RowMat::Random(n, n), c(n, n);
  c.noalias() = a * b;  // warm-up
  std::vector<double> secs;
  for (int r = 0; r < std::max(1, repeat); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    c.noalias() = a * b;
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(secs.begin(), secs.end());
  return 2.0 * n * n * n / secs[secs.size() / 2] / 1e9;
}

double onednn_sgemm_gflops(int n, int repeat) {
#ifdef ATTNLAB_WITH_ONEDNN
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a), c(a.size());
  const auto sgemm = [&] { dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n); };
  sgemm();  // warm-up
  std::vector<double> secs;
  for (int r = 0; r < std::max(1, repeat); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    sgemm();
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(secs.begin(), secs.end());
  return 2.0 * n * n * n / secs[secs.size() / 2] / 1e9;
#else
  (void)n, (void)repeat;
  return 0;
#endif
}

double onednn_bf16_gflops(int n, int repeat) {
#ifdef ATTNLAB_WITH_ONEDNN
  return OnednnLinear::bf16_matmul_gflops(n, repeat);
#else
  (void)n, (void)repeat;
  return 0;
#endif
}

std::string onednn_version() {
#ifdef ATTNLAB_WITH_ONEDNN
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) + " on " +
         OnednnLinear::isa();
#else
  return "";
#endif
}

std::string eigen_version() {
  return std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
         std::to_string(EIGEN_MINOR_VERSION);
}

}  // namespace attnlab
