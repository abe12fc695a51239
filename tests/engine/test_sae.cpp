// Sparse autoencoders in SAELens's format (engine/analysis/sae.h): the folder read as SAELens
// reads it, the features against a plain double-precision reference of SAELens's equations on
// awkward shapes, and clamping as an intervention (nothing clamped, or a feature clamped to its
// own value, changes nothing; a clamp moves the activation along that feature's decoder row).
// Against PyTorch on transformers' activations: tests/crosscheck/hf_decoders.py (check_sae).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "engine/analysis/sae.h"
#include "engine/compute/forward.h"
#include "engine/compute/lm.h"
#include "engine/formats/safetensors.h"
#include "tests/engine/hf_test_model.h"
#include "tests/engine/test_util.h"
#include "tests/engine/tolerance.h"

using namespace attnlab;
using namespace attnlab::test;
namespace fs = std::filesystem;

namespace {

Tensor randn(std::vector<int64_t> shape, std::mt19937& g, float scale) {
  Tensor t(std::move(shape));
  std::normal_distribution<float> n(0.0f, scale);
  for (float& v : t.data) v = n(g);
  return t;
}

// An SAE folder as SAELens 6 writes it (cfg_extra: more cfg.json fields, as JSON text).
void write_sae(const std::string& dir, const std::string& arch, const std::string& hook, int d_in, int d_sae,
               const std::string& norm, uint32_t seed, const std::string& cfg_extra = "") {
  fs::create_directories(dir);
  std::mt19937 g(seed);
  TensorMap w;
  w["W_enc"] = randn({d_in, d_sae}, g, 1.0f / std::sqrt(static_cast<float>(d_in)));
  w["b_enc"] = randn({d_sae}, g, 0.1f);
  w["W_dec"] = randn({d_sae, d_in}, g, 1.0f / std::sqrt(static_cast<float>(d_sae)));
  w["b_dec"] = randn({d_in}, g, 0.1f);
  if (arch == "jumprelu") {
    Tensor th({d_sae});
    std::uniform_real_distribution<float> u(0.0f, 0.3f);
    for (float& v : th.data) v = u(g);
    w["threshold"] = th;
  }
  save_safetensors(dir + "/sae_weights.safetensors", w);
  std::ofstream(dir + "/cfg.json") << "{\"architecture\": \"" << arch << "\", \"d_in\": " << d_in
                                   << ", \"d_sae\": " << d_sae << ", \"apply_b_dec_to_input\": true, "
                                   << "\"normalize_activations\": \"" << norm << "\", \"metadata\": {\"hook_name\": \""
                                   << hook << "\"}" << cfg_extra << "}";
}

// SAELens's equations in double, written out plainly (sae.h): features [T, d_sae], and per
// feature the sum of its pre-activation's terms' magnitudes (for the float32 bound).
std::vector<double> reference_features(const Sae& s, const Tensor& x, std::vector<double>& abs_sum) {
  const int64_t T = x.dim(0), E = s.d_in, S = s.d_sae;
  std::vector<double> f(static_cast<size_t>(T * S));
  abs_sum.assign(f.size(), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> in(static_cast<size_t>(E));
    double mu = 0, ss = 0;
    for (int64_t e = 0; e < E; ++e) mu += x.at(t, e);
    mu /= static_cast<double>(E);
    for (int64_t e = 0; e < E; ++e) {
      const double v = x.at(t, e);
      in[static_cast<size_t>(e)] = v;
      ss += s.norm == Sae::Norm::LayerNorm ? (v - mu) * (v - mu) : v * v;
    }
    for (int64_t e = 0; e < E; ++e) {
      double& v = in[static_cast<size_t>(e)];
      if (s.norm == Sae::Norm::ConstantNormRescale) v *= std::sqrt(static_cast<double>(E)) / std::sqrt(ss);
      if (s.norm == Sae::Norm::LayerNorm) v = (v - mu) / (std::sqrt(ss / static_cast<double>(E - 1)) + 1e-5);
      if (s.apply_b_dec_to_input) v -= s.b_dec.data[static_cast<size_t>(e)];
    }
    std::vector<double> pre(static_cast<size_t>(S));
    for (int64_t i = 0; i < S; ++i) {
      double acc = s.b_enc.data[static_cast<size_t>(i)], mag = std::fabs(acc);
      for (int64_t e = 0; e < E; ++e) {
        acc += in[static_cast<size_t>(e)] * s.W_enc.at(e, i);
        mag += std::fabs(in[static_cast<size_t>(e)] * s.W_enc.at(e, i));
      }
      if (s.rescale_acts_by_decoder_norm) {
        double n2 = 0;
        for (int64_t e = 0; e < E; ++e) n2 += static_cast<double>(s.W_dec.at(i, e)) * s.W_dec.at(i, e);
        acc *= std::sqrt(n2), mag *= std::sqrt(n2);
      }
      abs_sum[static_cast<size_t>(t * S + i)] = mag;
      pre[static_cast<size_t>(i)] = acc;
    }
    for (int64_t i = 0; i < S; ++i) {
      const double p = pre[static_cast<size_t>(i)];
      double out = std::max(p, 0.0);
      if (s.kind == Sae::Kind::JumpRelu && !(p > s.threshold.data[static_cast<size_t>(i)])) out = 0;
      if (s.kind == Sae::Kind::TopK) {  // kept when fewer than k others are larger
        int larger = 0;
        for (double q : pre) larger += q > p;
        if (larger >= s.k) out = 0;
      }
      f[static_cast<size_t>(t * S + i)] = out;
    }
  }
  return f;
}

}  // namespace

TEST_CASE("SAE: SAELens's folder and equations, on awkward shapes", "[sae]") {
  const std::string dir = scratch_dir("sae", "forms");
  struct Case {
    const char* arch;
    const char* norm;
    const char* extra;
  } cases[] = {{"standard", "none", ""},
               {"standard", "constant_norm_rescale", ""},
               {"jumprelu", "layer_norm", ""},
               {"jumprelu", "expected_average_only_in", ""},
               {"topk", "none", ", \"k\": 3"},
               {"topk", "constant_norm_rescale", ", \"k\": 1, \"rescale_acts_by_decoder_norm\": true"}};
  uint32_t seed = 1;
  for (const Case& c : cases)
    for (const int T : {1, 5})
      for (const int d_in : {1, 7}) {
        if (d_in == 1 && std::string(c.norm) == "layer_norm") continue;  // a one-number row has no std
        CAPTURE(c.arch, c.norm, T, d_in);
        const std::string sd = dir + "/" + std::to_string(seed);
        write_sae(sd, c.arch, "blocks.0.hook_resid_pre", d_in, 9, c.norm, seed++, c.extra);
        const Sae s = load_sae(sd);
        CHECK(s.hook_name == "blocks.0.hook_resid_pre");
        CHECK(s.architecture == c.arch);
        std::mt19937 g(seed);
        const Tensor x = randn({T, d_in}, g, 2.0f);
        const SaeOutput out = sae_forward(s, x);
        REQUIRE(out.features.shape == std::vector<int64_t>{T, 9});
        REQUIRE(out.reconstruction.shape == std::vector<int64_t>{T, d_in});
        std::vector<double> abs_sum;
        const std::vector<double> want = reference_features(s, x, abs_sum);
        int active = 0;
        for (size_t k = 0; k < want.size(); ++k) {
          // a float32 sum of d_in + 1 terms, each input x' carrying the normalisation's rounding
          // (a sum of d_in squares, a square root, a division: gamma(d_in + 4) relative), the
          // decoder-norm factor another gamma(d_in + 2)
          const double bound = sum_bound(d_in + 1, abs_sum[k]) + gamma32(2 * d_in + 6) * abs_sum[k];
          INFO("feature " << k % 9 << " at " << k / 9 << ": " << out.features.data[k] << " vs " << want[k]);
          CHECK(std::fabs(out.features.data[k] - want[k]) <= bound);
          active += want[k] > 0;
        }
        if (std::string(c.arch) == "topk") CHECK(active <= T * s.k);
      }
  // the keys of SAELens before 6: hook_point, activation_fn_str, activation_fn_kwargs.k
  const std::string old = dir + "/old";
  write_sae(old, "standard", "x", 4, 6, "none", 99);
  std::ofstream(old + "/cfg.json") << "{\"d_in\": 4, \"d_sae\": 6, \"hook_point\": \"blocks.1.hook_mlp_out\", "
                                      "\"activation_fn_str\": \"topk\", \"activation_fn_kwargs\": {\"k\": 2}, "
                                      "\"normalize_activations\": false}";
  const Sae o = load_sae(old);
  CHECK(o.hook_name == "blocks.1.hook_mlp_out");
  CHECK(o.kind == Sae::Kind::TopK);
  CHECK(o.k == 2);
  // what it refuses, saying why
  CHECK_THROWS_WITH(load_sae(dir + "/none"), Catch::Contains("not a folder"));
  fs::remove(old + "/sae_weights.safetensors");
  CHECK_THROWS_WITH(load_sae(old), Catch::Contains("no sae_weights.safetensors"));
  const std::string bad = dir + "/bad";
  write_sae(bad, "standard", "blocks.0.hook_resid_pre", 4, 6, "none", 5);
  std::ofstream(bad + "/cfg.json") << "{\"d_in\": 5, \"d_sae\": 6, \"metadata\": {\"hook_name\": \"h\"}}";
  CHECK_THROWS_WITH(load_sae(bad), Catch::Contains("W_enc is [4, 6], cfg.json's d_in and d_sae need [5, 6]"));
  std::ofstream(bad + "/cfg.json") << "{\"d_in\": 4, \"d_sae\": 6, \"architecture\": \"gated\", \"hook_name\": \"h\"}";
  CHECK_THROWS_WITH(load_sae(bad), Catch::Contains("architecture \"gated\""));
  std::ofstream(bad + "/cfg.json") << "{\"d_in\": 4, \"d_sae\": 6}";
  CHECK_THROWS_WITH(load_sae(bad), Catch::Contains("no hook_name"));
  CHECK_THROWS_WITH(parse_feature_clamp("3"), Catch::Contains("expected FEATURE=VALUE"));
  CHECK_THROWS_WITH(parse_feature_clamp("3=x"), Catch::Contains("expected FEATURE=VALUE"));
  CHECK_THROWS_WITH(parse_feature_clamp("3=1:2,a"), Catch::Contains("expected FEATURE=VALUE"));
  const FeatureClamp fc = parse_feature_clamp("12=-0.5:3,4");
  CHECK(fc.feature == 12);
  CHECK(fc.value == -0.5f);
  CHECK(fc.positions == std::vector<int>{3, 4});
  fs::remove_all(dir);
}

TEST_CASE("SAE: clamping in a pass changes only what it should", "[sae][hooks]") {
  const std::string dir = scratch_dir("sae", "clamp");
  const Model m = tiny_decoder(dir + "/model");
  const ModelConfig& c = m.config;
  const std::string hook = "blocks.1.hook_resid_pre";
  write_sae(dir + "/sae", "jumprelu", hook, c.embed_size, 40, "layer_norm", 7);
  const Sae sae = load_sae(dir + "/sae");
  const int T = 6;
  ForwardRequest req;
  req.ids = random_ids(T, c.vocab_size, 17);
  HookSpec keep;
  keep.cache = {hook};
  req.hooks = &keep;
  auto backend = make_backend("cpu");
  const ForwardResult base = run_forward(m, *backend, req);
  const Tensor x = base.cache.at(hook);
  const SaeOutput s = sae_forward(sae, x);
  int feature = 0;  // the most active feature at the last position
  for (int i = 1; i < sae.d_sae; ++i)
    if (s.features.at(T - 1, i) > s.features.at(T - 1, feature)) feature = i;
  REQUIRE(s.features.at(T - 1, feature) > 0);
  auto clamped_pass = [&](const std::vector<FeatureClamp>& clamps) {
    HookSpec spec;
    spec.cache = {hook};
    spec.edits.push_back(sae_clamp_edit(sae, clamps));
    ForwardRequest r = req;
    r.hooks = &spec;
    return run_forward(m, *backend, r);
  };
  SECTION("nothing clamped, or a feature clamped to its own value: the same pass, bit for bit") {
    for (const auto& clamps :
         {std::vector<FeatureClamp>{}, std::vector<FeatureClamp>{{feature, s.features.at(T - 1, feature), {T - 1}}}}) {
      const ForwardResult r = clamped_pass(clamps);
      CHECK(r.hidden.data == base.hidden.data);
      CHECK(r.cache.at(hook).data == x.data);
    }
  }
  SECTION("a clamp moves the activation along the feature's decoder row, at its position only") {
    const float value = 3.0f * s.features.at(T - 1, feature);
    const ForwardResult r = clamped_pass({{feature, value, {T - 1}}});
    const Tensor& y = r.cache.at(hook);
    // layer_norm: the decoder's output is multiplied by the row's std (SAELens's ln_out)
    double mu = 0, ss = 0;
    for (int e = 0; e < c.embed_size; ++e) mu += x.at(T - 1, e);
    mu /= c.embed_size;
    for (int e = 0; e < c.embed_size; ++e) ss += (x.at(T - 1, e) - mu) * (x.at(T - 1, e) - mu);
    const double sd = std::sqrt(ss / (c.embed_size - 1));
    const double d = static_cast<double>(value) - s.features.at(T - 1, feature);
    for (int t = 0; t < T; ++t)
      for (int e = 0; e < c.embed_size; ++e) {
        const double want = x.at(t, e) + (t == T - 1 ? d * sae.W_dec.at(feature, e) * sd : 0.0);
        // one float32 rounding of the sum
        CHECK(std::fabs(y.at(t, e) - want) <= kU32 * (std::fabs(want) + std::fabs(x.at(t, e))));
      }
    CHECK(r.hidden.data != base.hidden.data);
    // a causal model: the earlier positions' outputs are untouched
    for (int t = 0; t < T - 1; ++t)
      for (int e = 0; e < c.embed_size; ++e) CHECK(r.hidden.at(t, e) == base.hidden.at(t, e));
  }
  SECTION("what does not fit is said") {
    CHECK_THROWS_WITH(sae_clamp_edit(sae, {{sae.d_sae, 1.0f, {}}}), Catch::Contains("no feature 40"));
    CHECK_THROWS_WITH(clamped_pass({{feature, 1.0f, {T}}}), Catch::Contains("no position 6"));
    write_sae(dir + "/narrow", "standard", hook, c.embed_size - 1, 4, "none", 8);
    const Sae narrow = load_sae(dir + "/narrow");
    HookSpec spec;
    spec.edits.push_back(sae_clamp_edit(narrow, {{0, 1.0f, {}}}));
    ForwardRequest r = req;
    r.hooks = &spec;
    CHECK_THROWS_WITH(run_forward(m, *backend, r), Catch::Contains("reads d_in = " + std::to_string(c.embed_size - 1)));
    write_sae(dir + "/elsewhere", "standard", "blocks.9.hook_resid_pre", c.embed_size, 4, "none", 9);
    const Sae elsewhere = load_sae(dir + "/elsewhere");
    spec.edits = {sae_clamp_edit(elsewhere, {{0, 1.0f, {}}})};
    CHECK_THROWS_WITH(run_forward(m, *backend, r), Catch::Contains("blocks.9.hook_resid_pre"));
  }
  fs::remove_all(dir);
}
