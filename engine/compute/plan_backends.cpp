// The "reference" and "cpu" backends: the one layer plan (plan.cpp) over the reference ops
// (plain loops, the ones to read next to the articles) or the cpu ops (Eigen + OpenMP).
#include <omp.h>

#include "engine/compute/plan.h"
#include "engine/core/tuning.h"

namespace attnlab {

namespace {

// Small passes run on one thread (see Tuning::single_thread_flops). The setting is per calling
// thread and restored afterwards.
class ThreadBudget {
 public:
  explicit ThreadBudget(double flops) : saved_(omp_get_max_threads()) {
    if (flops < kTuning.single_thread_flops) omp_set_num_threads(1);
  }
  ~ThreadBudget() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

double forward_flops(const ModelConfig& c, double T, double S) {
  const double E = c.embed_size, F = c.ff_dim;
  return c.num_layers * (2.0 * T * E * E * 2 + 2.0 * S * E * E * 2 + 4.0 * T * S * E + 4.0 * T * E * F);
}

class PlanBackend final : public Backend {
 public:
  PlanBackend(std::string name, std::unique_ptr<Ops> ops, std::string notice = {})
      : name_(std::move(name)), ops_(std::move(ops)), notice_(std::move(notice)) {}

  std::string name() const override { return name_; }
  std::string notice() const override { return notice_; }

  EncodeOutput encode(const Model& model, const std::vector<int>& ids, const AttnMask& mask,
                      const EncodeOptions& options) override {
    const double T = static_cast<double>(ids.size());
    const ThreadBudget threads(forward_flops(model.config, T, T));
    ops_->set_weights_version(model.weights.version);
    return attnlab::encode(model, *ops_, ids, mask, options);
  }

  Tensor cross_attention(const Model& model, int layer, const Tensor& xa, const Tensor& xb,
                         const AttnMask& mask) override {
    const ThreadBudget threads(
        forward_flops(model.config, static_cast<double>(xa.dim(0)), static_cast<double>(xb.dim(0))) /
        model.config.num_layers);
    ops_->set_weights_version(model.weights.version);
    return cross_attention_probs(model, *ops_, layer, xa, xb, mask);
  }

  bool recomputes_attention() const override { return true; }
  Tensor self_attention(const Model& model, int, const Tensor& q, const Tensor& k, const AttnMask& mask) override {
    ops_->set_weights_version(model.weights.version);
    return self_attention_probs(model, *ops_, q, k, mask);
  }

 private:
  std::string name_;
  std::unique_ptr<Ops> ops_;
  std::string notice_;
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() {
  return std::make_unique<PlanBackend>("reference", make_reference_ops());
}

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<PlanBackend>("cpu", make_cpu_ops());
}

std::unique_ptr<Backend> make_cpu_bf16_backend() {
  return std::make_unique<PlanBackend>("cpu-bf16", make_cpu_bf16_ops(), bf16_notice());
}

}  // namespace attnlab
