// Fast training ops: Eigen GEMMs for linear layers and per-(sequence, head) attention products,
// parallel over (sequence, head) pairs with OpenMP. Held to train_ops_reference.cpp by tests.
#include <omp.h>

#include "engine/backend.h"  // relative_index
#include "engine/cpu_kernels.h"
#include "engine/train_ops.h"

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

class CpuTrainOps final : public TrainOps {
 public:
  std::string name() const override { return "cpu"; }

  void linear(const Tensor& x, const Tensor& W, const Tensor& b, Tensor& y) override {
    y = Tensor({x.dim(0), W.dim(0)});
    auto Y = mm(y);
    Y.noalias() = cm(x) * cm(W).transpose();
    Y.rowwise() += cv(b);
  }

  void linear_backward(const Tensor& x, const Tensor& W, const Tensor& dy, Tensor* dx, Tensor& dW,
                       Tensor& db) override {
    if (dx) {
      *dx = Tensor({x.dim(0), W.dim(1)});
      mm(*dx).noalias() = cm(dy) * cm(W);
    }
    mm(dW).noalias() += cm(dy).transpose() * cm(x);
    // Column sums in a fixed order (row by row), so gradients do not depend on the heap.
    auto DB = mv(db);
    const auto DY = cm(dy);
    for (Eigen::Index n = 0; n < DY.rows(); ++n) DB += DY.row(n);
  }

  void layer_norm(const Tensor& x, const Tensor& g, const Tensor& b, float eps, Tensor& y, Tensor& xhat,
                  Tensor& rstd) override {
    xhat = x;
    y = Tensor(x.shape);
    rstd = Tensor({x.dim(0)});
    auto XH = mm(xhat);
    auto Y = mm(y);
    const auto gv = cv(g).array();
    const auto bv = cv(b).array();
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
    auto DG = mv(dg);
    auto DB = mv(db);
    const auto gv = cv(g).array();
    const float inv_e = 1.0f / static_cast<float>(XH.cols());
    Eigen::ArrayXf dh(XH.cols()), tmp(XH.cols());
    for (Eigen::Index n = 0; n < XH.rows(); ++n) {
      DG += DY.row(n).cwiseProduct(XH.row(n));
      DB += DY.row(n);
      dh = (DY.row(n).array() * gv).transpose();
      const float m1 = kernels::stable_sum(dh.data(), dh.size()) * inv_e;
      tmp = dh * XH.row(n).array().transpose();
      const float m2 = kernels::stable_sum(tmp.data(), tmp.size()) * inv_e;
      DX.row(n).array() =
          rstd.data[static_cast<size_t>(n)] * (dh - m1 - XH.row(n).array().transpose() * m2).transpose();
    }
  }

  void attention(const AttnShape& s, const Tensor& Q, const Tensor& K, const Tensor& V, Tensor& P,
                 Tensor& ctx) override {
    const int B = s.B, T = s.T, H = s.H, D = s.D;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    P = Tensor({B, H, T, T});
    ctx = Tensor({static_cast<int64_t>(B) * T, static_cast<int64_t>(H) * D});
    const auto QM = cm(Q), KM = cm(K), VM = cm(V);
    auto CM = mm(ctx);
#pragma omp parallel
    {
      Eigen::ArrayXf buf(T);
      RowMat Pd;
      std::vector<uint8_t> blocked(static_cast<size_t>(T));
#pragma omp for schedule(dynamic, 1)
      for (int bh = 0; bh < B * H; ++bh) {
        const int b = bh / H, h = bh % H;
        const auto Qb = QM.block(static_cast<Eigen::Index>(b) * T, h * D, T, D);
        const auto Kb = KM.block(static_cast<Eigen::Index>(b) * T, h * D, T, D);
        Map Pm(P.ptr() + static_cast<size_t>(bh) * T * T, T, T);
        Pm.noalias() = Qb * Kb.transpose();
        if (s.rel)
          for (int i = 0; i < T; ++i)
            for (int j = 0; j < T; ++j)
              Pm(i, j) += Qb.row(i).dot(cm(*s.rel).row(relative_index(i, j, s.max_len)).segment(h * D, D));
        Pm *= scale;
        for (int i = 0; i < T; ++i) {
          bool any = false;
          for (int j = 0; j < T; ++j) {
            blocked[static_cast<size_t>(j)] =
                (s.causal && j > i) || (s.key_blocked && (*s.key_blocked)[static_cast<size_t>(b * T + j)]);
            any |= blocked[static_cast<size_t>(j)] != 0;
          }
          kernels::masked_softmax_row(&Pm(i, 0), T, any ? blocked.data() : nullptr, nullptr, buf);
        }
        if (s.drop_keep) {
          Pd = Pm;
          apply_keep(s, bh, Pd);
          CM.block(static_cast<Eigen::Index>(b) * T, h * D, T, D).noalias() =
              Pd * VM.block(static_cast<Eigen::Index>(b) * T, h * D, T, D);
        } else {
          CM.block(static_cast<Eigen::Index>(b) * T, h * D, T, D).noalias() =
              Pm * VM.block(static_cast<Eigen::Index>(b) * T, h * D, T, D);
        }
      }
    }
  }

  void attention_backward(const AttnShape& s, const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& P,
                          const Tensor& dctx, Tensor& dQ, Tensor& dK, Tensor& dV, Tensor* drel) override {
    const int B = s.B, T = s.T, H = s.H, D = s.D;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    dQ = Tensor(Q.shape);
    dK = Tensor(K.shape);
    dV = Tensor(V.shape);
    const auto QM = cm(Q), KM = cm(K), VM = cm(V), DC = cm(dctx);
    auto DQ = mm(dQ), DK = mm(dK), DV = mm(dV);
    // Relative-table gradients from different sequences land in the same rows: one buffer per
    // thread, summed in thread order afterwards (deterministic for a thread count).
    const int threads = omp_get_max_threads();
    std::vector<Tensor> drel_local(s.rel && drel ? static_cast<size_t>(threads) : 0);
    for (auto& t : drel_local) t = Tensor(drel->shape);
#pragma omp parallel
    {
      RowMat Pd, dP, dS;
      Eigen::VectorXf rowdot;
      Tensor* my_drel = drel_local.empty() ? nullptr : &drel_local[static_cast<size_t>(omp_get_thread_num())];
#pragma omp for schedule(static)
      for (int bh = 0; bh < B * H; ++bh) {
        const int b = bh / H, h = bh % H;
        const Eigen::Index r0 = static_cast<Eigen::Index>(b) * T;
        const ConstMap Pm(P.ptr() + static_cast<size_t>(bh) * T * T, T, T);
        const auto Qb = QM.block(r0, h * D, T, D), Kb = KM.block(r0, h * D, T, D), Vb = VM.block(r0, h * D, T, D);
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
  }

 private:
  static void apply_keep(const AttnShape& s, int bh, RowMat& M) {
    const uint8_t* keep = s.drop_keep->data() + static_cast<size_t>(bh) * s.T * s.T;
    float* m = M.data();
    for (int k = 0; k < s.T * s.T; ++k) m[k] = keep[k] ? m[k] * s.drop_scale : 0.0f;
  }
};

}  // namespace

std::unique_ptr<TrainOps> make_cpu_train_ops() {
  return std::make_unique<CpuTrainOps>();
}

}  // namespace attnlab
