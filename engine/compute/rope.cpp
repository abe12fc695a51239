// Rotary position embeddings' tables: the frequencies of every rope_type as transformers
// computes them, and the cos / sin tables the Rope op reads (split out of plan.cpp).
#include "engine/compute/rope.h"

#include <algorithm>
#include <cmath>

namespace attnlab {

void rope_tables(int T, int D, float theta, Tensor& cos_out, Tensor& sin_out) {
  ModelConfig c;
  c.rope_theta = theta;
  rope_tables(T, D, c, cos_out, sin_out);
}

namespace {

// base ** (arange(0, D, 2).float() / D) in float32, as every rope init computes it first
std::vector<float> rope_powers(float base, int D) {
  std::vector<float> p(static_cast<size_t>(D / 2));
  for (int i = 0; i < D / 2; ++i)
    p[static_cast<size_t>(i)] = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(D));
  return p;
}

}  // namespace

// Each line is transformers' (modeling_rope_utils.py, 5.24), in its order and its precision: the
// tensors are float32 and a Python number meets them as a float32 (so a / x on a tensor is
// reciprocal(x) * a, as torch's __rtruediv__); the scalars alone are Python doubles.
RopeFrequencies rope_frequencies(const ModelConfig& c, int D, int T) {
  const RopeScaling& r = c.rope_scaling;
  const float base = c.rope_theta;
  const std::vector<float> pw = rope_powers(base, D);
  const size_t half = pw.size();
  RopeFrequencies out;
  out.inv_freq.resize(half);
  auto recip = [](float x) { return 1.0f / x; };
  for (size_t i = 0; i < half; ++i) out.inv_freq[i] = recip(pw[i]);  // the default
  const int original = r.original_max > 0 ? r.original_max : c.max_len;
  if (r.type == "default" || r.type == "dynamic") return out;
  if (r.type == "linear") {
    for (float& f : out.inv_freq) f /= static_cast<float>(r.factor);
    return out;
  }
  if (r.type == "llama3") {
    const double factor = r.factor, low = r.low_freq_factor, high = r.high_freq_factor, old_len = original;
    const float low_wavelen = static_cast<float>(old_len / low), high_wavelen = static_cast<float>(old_len / high);
    const float two_pi = static_cast<float>(2 * M_PI), f_factor = static_cast<float>(factor);
    const float f_low = static_cast<float>(low), f_span = static_cast<float>(high - low),
                f_old = static_cast<float>(old_len);
    for (float& f : out.inv_freq) {
      const float inv = f;
      const float wavelen = recip(inv) * two_pi;
      const float inv_llama = wavelen > low_wavelen ? inv / f_factor : inv;
      const float smooth = (recip(wavelen) * f_old - f_low) / f_span;
      const float smoothed = (1.0f - smooth) * inv_llama / f_factor + smooth * inv_llama;
      const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
      f = medium ? smoothed : inv_llama;
    }
    return out;
  }
  if (r.type == "yarn") {
    const double factor = r.factor > 0 ? r.factor : static_cast<double>(c.max_len) / original;
    auto get_mscale = [](double scale, double mscale) {
      return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
    };
    double attention = r.attention_factor;
    if (attention < 0)
      attention = (r.mscale != 0 && r.mscale_all_dim != 0)
                      ? get_mscale(factor, r.mscale) / get_mscale(factor, r.mscale_all_dim)
                      : get_mscale(factor, 1.0);
    const double dbase = base;
    auto correction_dim = [&](double rotations) {
      return (D * std::log(original / (rotations * 2 * M_PI))) / (2 * std::log(dbase));
    };
    double lo = correction_dim(r.beta_fast), hi = correction_dim(r.beta_slow);
    if (r.truncate) lo = std::floor(lo), hi = std::ceil(hi);
    lo = std::max(lo, 0.0), hi = std::min(hi, static_cast<double>(D - 1));
    if (lo == hi) hi += 0.001;  // transformers' guard against a zero-width ramp
    const float f_lo = static_cast<float>(lo), f_span = static_cast<float>(hi - lo),
                f_factor = static_cast<float>(factor);
    for (size_t i = 0; i < half; ++i) {
      const float extrapolation = recip(pw[i]);
      const float interpolation = recip(f_factor * pw[i]);
      const float ramp = std::clamp((static_cast<float>(i) - f_lo) / f_span, 0.0f, 1.0f);
      const float extra_factor = 1.0f - ramp;
      out.inv_freq[i] = interpolation * (1.0f - extra_factor) + extrapolation * extra_factor;
    }
    out.scale = static_cast<float>(attention);
    return out;
  }
  if (r.type == "longrope") {
    const double factor = r.factor > 0 ? r.factor : static_cast<double>(c.max_len) / original;
    double attention = r.attention_factor;
    if (attention < 0)
      attention = factor <= 1.0 ? 1.0 : std::sqrt(1 + std::log(factor) / std::log(static_cast<double>(original)));
    const std::vector<float>& ext = T > original ? r.long_factor : r.short_factor;
    if (ext.size() != half) throw Error("rope_type longrope needs head_dim / 2 factors");
    for (size_t i = 0; i < half; ++i) out.inv_freq[i] = recip(ext[i] * pw[i]);
    out.scale = static_cast<float>(attention);
    return out;
  }
  throw Error("rope_type \"" + r.type + "\" is not supported");
}

void rope_tables(int T, int D, const ModelConfig& c, Tensor& cos_out, Tensor& sin_out, int first) {
  const RopeFrequencies f = rope_frequencies(c, D, first + T);
  const int half = D / 2;
  cos_out = Tensor({T, half});
  sin_out = Tensor({T, half});
  for (int i = 0; i < half; ++i) {
    const float inv = f.inv_freq[static_cast<size_t>(i)];
    for (int t = 0; t < T; ++t) {
      const float angle = static_cast<float>(first + t) * inv;  // float32 product, as torch's position_ids * inv_freq
      // emb.cos() * attention_scaling: a float32 cos, then times the scale in float32 (1: unchanged)
      cos_out.at(t, i) = static_cast<float>(std::cos(static_cast<double>(angle))) * f.scale;
      sin_out.at(t, i) = static_cast<float>(std::sin(static_cast<double>(angle))) * f.scale;
    }
  }
}

}  // namespace attnlab
