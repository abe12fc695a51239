// The cpu backend: the same layers as reference_backend.cpp with Eigen GEMMs (multi-threaded
// through OpenMP) for projections and feed-forward, per-head score/context products run in
// parallel over heads, and a vectorised masked softmax written straight into the result.
// This is the only translation unit of the engine that includes Eigen's heavy headers.
#include <algorithm>
#include <cmath>
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

ConstMap as_mat(const Tensor& t) { return ConstMap(t.ptr(), t.dim(0), t.rank() == 2 ? t.dim(1) : 1); }
ConstVec as_vec(const Tensor& t) { return ConstVec(t.ptr(), t.numel()); }

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

// Multi-head attention without its residual. Writes probabilities (H, T, S) to `probs` and
// returns fc_out(concat_h(P_h V_h)) when `L` has to produce an output (with_output).
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
  // Rows of the relative table any (i, j) pair can reach: i - j runs from -(S-1) to T-1.
  const int rel_lo = relative ? relative_index(0, S - 1, c.max_len) : 0;
  const int rel_hi = relative ? relative_index(T - 1, 0, c.max_len) : 0;
  RowMat context(with_output ? T : 0, with_output ? c.embed_size : 0);

#pragma omp parallel for schedule(dynamic, 1)
  for (int h = 0; h < H; ++h) {
    Eigen::Map<RowMat> P(probs + static_cast<size_t>(h) * T * S, T, S);
    P.noalias() = Q.middleCols(h * D, D) * K.middleCols(h * D, D).transpose();
    if (relative) {
      // q_i . r_(i-j) for every reachable table row at once, then gathered per (i, j).
      const ConstMap rel = as_mat(model.weights.rel_pos);
      const RowMat G = Q.middleCols(h * D, D) * rel.block(rel_lo, h * D, rel_hi - rel_lo + 1, D).transpose();
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < S; ++j) P(i, j) += G(i, relative_index(i, j, c.max_len) - rel_lo);
    }
    P *= scale;
    const int plane = mask.plane_of_head(h);
    Eigen::ArrayXf buf(S);
    for (int i = 0; i < T; ++i) {
      const size_t off = mask.index(plane, i, 0);
      kernels::masked_softmax_row(&P(i, 0), S, mask.blocked.empty() ? nullptr : mask.blocked.data() + off,
                         mask.additive.empty() ? nullptr : mask.additive.data() + off, buf);
    }
    if (with_output) context.middleCols(h * D, D).noalias() = P * V.middleCols(h * D, D);
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
    std::vector<float> scratch;  // probabilities of layers the caller does not keep
    for (int l = 0; l < c.num_layers; ++l) {
      const LayerWeights& L = model.weights.layers[static_cast<size_t>(l)];
      if (options.keep_layer_inputs) {
        Tensor in({T, c.embed_size});
        Eigen::Map<RowMat>(in.ptr(), T, c.embed_size) = x;
        out.layer_inputs.push_back(std::move(in));
      }
      const bool keep = options.keep_attention.empty() || options.keep_attention[static_cast<size_t>(l)];
      float* probs;
      if (keep) {
        out.attention[static_cast<size_t>(l)] = Tensor({H, T, T});
        probs = out.attention[static_cast<size_t>(l)].ptr();
      } else {
        scratch.resize(static_cast<size_t>(H) * T * T);
        probs = scratch.data();
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

  Tensor cross_attention(const Model& model, int layer, const Tensor& xa, const Tensor& xb, const AttnMask& mask) override {
    const ModelConfig& c = model.config;
    const LayerWeights& L = model.weights.layers[static_cast<size_t>(layer)];
    const ThreadBudget threads(forward_flops(c, static_cast<double>(xa.dim(0)), static_cast<double>(xb.dim(0))) / c.num_layers);
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

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace attnlab
