// The cpu backend: the same layers as reference_backend.cpp with Eigen GEMMs (multi-threaded
// through OpenMP) for projections and feed-forward, per-head score/context products run in
// parallel over heads, and a vectorised masked softmax written straight into the result.
// This is the only translation unit of the engine that includes Eigen's heavy headers.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include <omp.h>

#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include "engine/backend.h"
#include "engine/cpu_kernels.h"

namespace attnlab {

namespace {

using kernels::RowMat;
using ConstMap = Eigen::Map<const RowMat>;
using ConstVec = Eigen::Map<const Eigen::RowVectorXf>;

ConstMap as_mat(const Tensor& t) {
  return ConstMap(t.ptr(), t.dim(0), t.rank() == 2 ? t.dim(1) : 1);
}
ConstVec as_vec(const Tensor& t) {
  return ConstVec(t.ptr(), t.numel());
}

// y = x W^T + b   (nn.Linear)
RowMat linear(const RowMat& x, const Tensor& W, const Tensor& b) {
  RowMat y(x.rows(), W.dim(0));
  y.noalias() = x * as_mat(W).transpose();
  y.rowwise() += as_vec(b);
  return y;
}

void layer_norm_inplace(RowMat& x, const Tensor& g, const Tensor& b, float eps) {
  const auto gv = as_vec(g).array();
  const auto bv = as_vec(b).array();
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    kernels::normalize_row(x.row(t).data(), x.cols(), eps);
    x.row(t).array() = x.row(t).array() * gv + bv;
  }
}

RowMat layer_norm(const RowMat& x, const Tensor& g, const Tensor& b, float eps) {
  RowMat y = x;
  layer_norm_inplace(y, g, b, eps);
  return y;
}

RowMat feed_forward(const RowMat& x, const LayerWeights& L, Activation act) {
  RowMat h = linear(x, L.w1, L.b1);
  if (act == Activation::Relu) {
    h = h.cwiseMax(0.0f);
  } else {
    h.array() = 0.5f * h.array() * (1.0f + (h.array() * static_cast<float>(M_SQRT1_2)).erf());
  }
  return linear(h, L.w2, L.b2);
}

// Rows of queries handled together: one GEMM per (head, block) over the keys the block can see.
constexpr int kQueryBlock = 64;

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

// Multi-head attention without its residual. Writes probabilities (H, T, S) to `probs` when it
// is not null (it must then be zero-filled: only visible ranges are written) and returns
// fc_out(concat_h(P_h V_h)) when with_output.
//
// Work is split into (head, block of 64 queries) tasks. Each task multiplies only the key range
// [lo, hi] that some query of the block can see, so sparse masks (sliding window, causal,
// strided with a small stride's band) skip the blocked work instead of computing and discarding
// it; keys outside the range are blocked for every row of the block, so the softmax over the
// range equals the softmax over the row. Without a mask the range is every key.
RowMat multi_head_attention(const Model& model, const LayerWeights& L, const RowMat& xq, const RowMat& xkv,
                            const AttnMask& mask, float* probs, bool with_output) {
  const ModelConfig& c = model.config;
  const int T = static_cast<int>(xq.rows()), S = static_cast<int>(xkv.rows());
  const int H = c.num_heads, D = c.head_dim();
  const RowMat Q = linear(xq, L.wq, L.bq);
  const RowMat K = linear(xkv, L.wk, L.bk);
  RowMat V;
  if (with_output) V = linear(xkv, L.wv, L.bv);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const bool relative = c.positional == Positional::Relative;
  const std::vector<Span> spans = visible_spans(mask);
  const int blocks = (T + kQueryBlock - 1) / kQueryBlock;
  RowMat context = RowMat::Zero(with_output ? T : 0, with_output ? c.embed_size : 0);

#pragma omp parallel
  {
    RowMat scratch, G;
    Eigen::ArrayXf buf;
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < H * blocks; ++task) {
      const int h = task / blocks, i0 = (task % blocks) * kQueryBlock, n = std::min(kQueryBlock, T - i0);
      const int plane = mask.plane_of_head(h);
      int r0 = S, r1 = -1;
      for (int i = i0; i < i0 + n; ++i) {
        const Span sp = spans[static_cast<size_t>(plane) * T + i];
        if (sp.lo <= sp.hi) r0 = std::min(r0, sp.lo), r1 = std::max(r1, sp.hi);
      }
      if (r1 < r0) continue;  // every row of the block sees nothing: zero probabilities, zero context
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
      P.noalias() = Qb * K.block(r0, h * D, R, D).transpose();
      if (relative) {
        // q_i . r_(i-j) for every table row the block reaches, then gathered per (i, j).
        const int lo = relative_index(i0, r1, c.max_len), hi = relative_index(i0 + n - 1, r0, c.max_len);
        G.noalias() = Qb * as_mat(model.weights.rel_pos).block(lo, h * D, hi - lo + 1, D).transpose();
        for (int i = 0; i < n; ++i)
          for (int j = 0; j < R; ++j) P(i, j) += G(i, relative_index(i0 + i, r0 + j, c.max_len) - lo);
      }
      P *= scale;
      for (int i = 0; i < n; ++i) {
        const size_t off = mask.index(plane, i0 + i, r0);
        kernels::masked_softmax_row(&P(i, 0), R, mask.blocked.empty() ? nullptr : mask.blocked.data() + off,
                                    mask.additive.empty() ? nullptr : mask.additive.data() + off, buf);
      }
      if (with_output) context.block(i0, h * D, n, D).noalias() = P * V.block(r0, h * D, R, D);
    }
  }
  if (!with_output) return {};
  return linear(context, L.wo, L.bo);
}

// Small passes run on one thread: below a few tens of MFLOP the fork/join and barrier costs of a
// second thread outweigh the work, and on a busy 2-core machine (the GUI thread painting) a
// descheduled worker turns a 0.3 ms pass into a 40 ms one. The setting is per calling thread.
class ThreadBudget {
 public:
  explicit ThreadBudget(double flops) : saved_(omp_get_max_threads()) {
    if (flops < kSingleThreadFlops) omp_set_num_threads(1);
  }
  ~ThreadBudget() { omp_set_num_threads(saved_); }
  static constexpr double kSingleThreadFlops = 5e7;

 private:
  int saved_;
};

double forward_flops(const ModelConfig& c, double T, double S) {
  const double E = c.embed_size, F = c.ff_dim;
  return c.num_layers * (2.0 * T * E * E * 2 + 2.0 * S * E * E * 2 + 4.0 * T * S * E + 4.0 * T * E * F);
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  EncodeOutput encode(const Model& model, const std::vector<int>& ids, const AttnMask& mask,
                      const EncodeOptions& options) override {
    const ModelConfig& c = model.config;
    const float eps = c.layer_norm_eps;
    const int T = static_cast<int>(ids.size()), H = c.num_heads;
    const ThreadBudget threads(forward_flops(c, T, T));
    EncodeOutput out;
    out.attention.resize(static_cast<size_t>(c.num_layers));
    const Tensor x0 = embed_tokens(model, ids);
    RowMat x = as_mat(x0);
    for (int l = 0; l < c.num_layers; ++l) {
      const LayerWeights& L = model.weights.layers[static_cast<size_t>(l)];
      if (options.keep_layer_inputs) {
        Tensor in({T, c.embed_size});
        Eigen::Map<RowMat>(in.ptr(), T, c.embed_size) = x;
        out.layer_inputs.push_back(std::move(in));
      }
      // Layers the caller does not keep never hold a [H, T, T] buffer: each task works in a
      // per-thread block of at most 64 x T.
      const bool keep = options.keep_attention.empty() || options.keep_attention[static_cast<size_t>(l)];
      float* probs = nullptr;
      if (keep) {
        out.attention[static_cast<size_t>(l)] = Tensor({H, T, T});
        probs = out.attention[static_cast<size_t>(l)].ptr();
      }
      if (c.norm == NormPlacement::Post) {
        x += multi_head_attention(model, L, x, x, mask, probs, true);
        layer_norm_inplace(x, L.ln1_g, L.ln1_b, eps);
        if (c.ff_dim > 0) {
          x += feed_forward(x, L, c.activation);
          layer_norm_inplace(x, L.ln2_g, L.ln2_b, eps);
        }
      } else {
        const RowMat n = layer_norm(x, L.ln1_g, L.ln1_b, eps);
        x += multi_head_attention(model, L, n, n, mask, probs, true);
        if (c.ff_dim > 0) x += feed_forward(layer_norm(x, L.ln2_g, L.ln2_b, eps), L, c.activation);
      }
    }
    out.hidden = Tensor({T, c.embed_size});
    Eigen::Map<RowMat>(out.hidden.ptr(), T, c.embed_size) = x;
    return out;
  }

  Tensor cross_attention(const Model& model, int layer, const Tensor& xa, const Tensor& xb,
                         const AttnMask& mask) override {
    const ModelConfig& c = model.config;
    const LayerWeights& L = model.weights.layers[static_cast<size_t>(layer)];
    const ThreadBudget threads(forward_flops(c, static_cast<double>(xa.dim(0)), static_cast<double>(xb.dim(0))) /
                               c.num_layers);
    Tensor probs({c.num_heads, xa.dim(0), xb.dim(0)});
    RowMat a = as_mat(xa), b = as_mat(xb);
    if (c.norm == NormPlacement::Pre) {
      layer_norm_inplace(a, L.ln1_g, L.ln1_b, c.layer_norm_eps);
      layer_norm_inplace(b, L.ln1_g, L.ln1_b, c.layer_norm_eps);
    }
    multi_head_attention(model, L, a, b, mask, probs.ptr(), false);
    return probs;
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>();
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

}  // namespace attnlab
