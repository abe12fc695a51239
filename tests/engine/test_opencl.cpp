// The opencl backend (PoCL on this machine) against the reference: every kernel on its own, and
// the whole forward pass on every case the CLI accepts. The device computes in float32 with its
// own exp/erf/rsqrt (OpenCL's accuracy table: kOpenClPass) and CLBlast's summation order, the
// reference in double: bounds from tests/engine/pass_bound.h and tolerance.h. Decoders too (RMSNorm,
// RoPE, gated feed-forwards, grouped-query heads, q/k norms, windows, soft caps: Llama, Mistral,
// Qwen3, GPT-2, Gemma 2 and 3's layers), attention on demand, and the fallback paths.
#include <cmath>
#include <cstdlib>

#include "engine/compute/opencl/cl_runtime.h"
#include "engine/compute/ops.h"
#include "engine/compute/rope.h"
#include "engine/train/optimizer.h"
#include "tests/engine/hf_test_model.h"
#include "tests/engine/pass_bound.h"
#include "tests/engine/test_util.h"
#include "tests/engine/tolerance.h"

using namespace attnlab;
using namespace attnlab::test;

namespace {

std::shared_ptr<cl::Runtime> runtime() {
  static std::shared_ptr<cl::Runtime> rt = cl::Runtime::get(cl::resolve_device("opencl"));
  return rt;
}

Tensor download(cl::Runtime& rt, const cl::Buffer& b, std::vector<int64_t> shape) {
  Tensor t(std::move(shape));
  rt.download(b, t.ptr(), t.data.size() * 4);
  return t;
}

void compare_with_reference(const Model& m, const ForwardRequest& req) {
  auto ref = make_backend("reference");
  auto ocl = make_backend("opencl");
  const ForwardResult a = run_forward(m, *ref, req);
  const ForwardResult b = run_forward(m, *ocl, req);
  REQUIRE(ocl->notice().empty());  // really ran on OpenCL
  REQUIRE(ocl->name() == "opencl");
  const PassBound tol = pass_bound(m, req, a, kOpenClPass);
  for (int l = 0; l < m.config.num_layers; ++l)
    CHECK(max_abs_diff(a.probs(l), b.probs(l)) <= tol.probs[static_cast<size_t>(l)]);
  CHECK(max_abs_diff(a.hidden, b.hidden) <= tol.hidden);
  REQUIRE(a.logits.size() == b.logits.size());
  for (size_t k = 0; k < a.logits.size(); ++k) CHECK(std::fabs(a.logits[k] - b.logits[k]) <= tol.logits);
}

}  // namespace

TEST_CASE("an OpenCL device is present (CI installs PoCL)", "[opencl]") {
  const auto devs = cl::list_devices();
  REQUIRE_FALSE(devs.empty());
  CHECK_FALSE(devs[0].name.empty());
  CHECK(cl::resolve_device("opencl:0") == 0);
  CHECK_THROWS_WITH(cl::resolve_device("opencl:99"), Catch::Contains("no device 99"));
  CHECK_THROWS_WITH(cl::resolve_device("opencl:x"), Catch::Contains("expected opencl or opencl:N"));
}

TEST_CASE("each kernel matches the reference ops", "[opencl][kernels]") {
  auto rt = runtime();
  std::lock_guard<std::mutex> lock(rt->mutex());
  auto ref = make_reference_ops();
  for (const int E : {1, 7, 64, 300}) {
    CAPTURE(E);
    const int rows = 5;
    // layer_norm
    Tensor x = random_tensor({rows, E}, 1), g = random_tensor({E}, 2), b = random_tensor({E}, 3);
    cl::Buffer bx, bg, bb;
    rt->upload(bx, x.ptr(), x.data.size() * 4), rt->upload(bg, g.ptr(), E * 4), rt->upload(bb, b.ptr(), E * 4);
    rt->layer_norm(bx, bg, bb, rows, E, 1e-5f);
    Tensor want, xhat, rstd;
    ref->layer_norm(x, g, b, 1e-5f, want, xhat, rstd);
    CHECK(max_abs_diff(download(*rt, bx, {rows, E}), want) <= layer_norm_bound(x, g, rstd, want, kOpenClPass));
    // bias, residual, relu, gelu
    rt->upload(bx, x.ptr(), x.data.size() * 4);
    rt->add_bias(bx, bb, rows, E);
    Tensor z = download(*rt, bx, {rows, E});
    // x + b rounds once, on the device and here alike (IEEE addition is correctly rounded in
    // OpenCL too): the same float; 2 u of the sum allows one rounding each way
    for (int r = 0; r < rows; ++r)
      for (int e = 0; e < E; ++e) {
        const float want_z = x.at(r, e) + b.data[e];
        CHECK(std::fabs(z.at(r, e) - want_z) <= 2 * kU32 * std::fabs(want_z));
      }
    cl::Buffer by;
    rt->upload(by, x.ptr(), x.data.size() * 4);
    rt->add_inplace(bx, by, rows * E);
    z = download(*rt, bx, {rows, E});
    // (x + b) + x on the device rounds twice, 2 x + b here once (2 x is exact): at most
    // u |x + b| + u |2 x + b| for the device, u |2 x + b| here
    for (int r = 0; r < rows; ++r)
      for (int e = 0; e < E; ++e) {
        const float want_z = 2 * x.at(r, e) + b.data[e];
        CHECK(std::fabs(z.at(r, e) - want_z) <= kU32 * (std::fabs(x.at(r, e) + b.data[e]) + 2 * std::fabs(want_z)));
      }
    for (const Activation act : {Activation::Relu, Activation::Gelu, Activation::GeluTanh}) {
      rt->upload(bx, x.ptr(), x.data.size() * 4);
      rt->activation(bx, rows * E, act);
      ref->activation(x, act, want);
      CHECK(max_abs_diff(download(*rt, bx, {rows, E}), want) <= activation_bound(act, x, kOpenClPass));
    }
  }
  // masked softmax: shared and per-head planes, blocked, additive, a fully blocked row; odd S
  for (const int S : {1, 5, 77, 1000}) {
    CAPTURE(S);
    const int H = 3, T = 4;
    Tensor P = random_tensor({H, T, S}, 5, 3.0f);
    AttnMask mask;
    mask.planes = H, mask.T = T, mask.S = S;
    mask.blocked.assign(static_cast<size_t>(H) * T * S, 0);
    mask.additive.assign(mask.blocked.size(), 0.0f);
    std::mt19937 rng(static_cast<unsigned>(S));
    for (size_t k = 0; k < mask.blocked.size(); ++k) {
      mask.blocked[k] = rng() % 3 == 0;
      mask.additive[k] = static_cast<float>(rng() % 5) * 0.5f - 1.0f;
    }
    for (int j = 0; j < S; ++j) mask.blocked[mask.index(1, 2, j)] = 1;  // head 1, query 2: all blocked
    cl::Buffer bP, bm, ba;
    rt->upload(bP, P.ptr(), P.data.size() * 4);
    rt->upload(bm, mask.blocked.data(), mask.blocked.size());
    rt->upload(ba, mask.additive.data(), mask.additive.size() * 4);
    rt->masked_softmax(bP, H, T, S, 0.5f, &bm, &ba, H);
    const Tensor out = download(*rt, bP, {H, T, S});
    for (const float v : out.data) REQUIRE(std::isfinite(v));
    // The reference attention op computes the same softmax when its scores q_i . k_j / sqrt(D)
    // are the kernel's 0.5 * P: D = 4 (scale 1/2), one query row per (head, i) with q = e_0 and
    // keys k_j = P[h, i, j] e_0, i.e. one sequence per (head, query) with the mask row as its own.
    Tensor want_all({H, T, S});
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i) {
        AttnMask row;
        row.T = 1, row.S = S;
        row.blocked.assign(mask.blocked.begin() + mask.index(h, i, 0), mask.blocked.begin() + mask.index(h, i, 0) + S);
        row.additive.assign(mask.additive.begin() + mask.index(h, i, 0),
                            mask.additive.begin() + mask.index(h, i, 0) + S);
        AttnArgs a;
        a.T = 1, a.S = S, a.H = 1, a.D = 4, a.mask = &row;
        Tensor q({1, 4}), k({S, 4}), p;
        q.data[0] = 1.0f;
        for (int j = 0; j < S; ++j) k.at(j, 0) = P.data[(static_cast<size_t>(h) * T + i) * S + j];
        ref->attention(a, q, k, nullptr, &p, nullptr);
        std::copy(p.data.begin(), p.data.end(), want_all.data.begin() + (static_cast<size_t>(h) * T + i) * S);
      }
    // The kernel's scores 0.5 P are exact (a power of 2); adding the additive term and shifting by
    // the row's maximum round by u of |s + a| and of |s + a - max| <= 2 max|s + a|; exp's error
    // (3 ulp in OpenCL) and the division's (2.5 ulp) act like score errors of fn_err u: then
    // softmax_bound over S, relative to p, times the largest p.
    double top_s = 0;
    for (size_t k = 0; k < P.data.size(); ++k)
      if (!mask.blocked[k]) top_s = std::max(top_s, std::fabs(0.5 * P.data[k] + mask.additive[k]));
    const double score_err = 3 * kU32 * top_s + kOpenClPass.fn_err * kU32;
    CHECK(max_abs_diff(out, want_all) <= max_abs(want_all) * softmax_bound(S, score_err));
    for (int j = 0; j < S; ++j) CHECK(out.data[(static_cast<size_t>(1) * T + 2) * S + j] == 0.0f);  // fully blocked
    for (size_t k = 0; k < mask.blocked.size(); ++k)
      if (mask.blocked[k]) CHECK(out.data[k] == 0.0f);
  }
}

TEST_CASE("each decoder kernel matches the reference ops", "[opencl][kernels]") {
  auto rt = runtime();
  std::lock_guard<std::mutex> lock(rt->mutex());
  auto ref = make_reference_ops();
  for (const int E : {1, 7, 64, 300}) {
    CAPTURE(E);
    const int rows = 5;
    Tensor x = random_tensor({rows, E}, 11, 2.0f), g = random_tensor({E}, 12), y = random_tensor({rows, E}, 13);
    cl::Buffer bx, bg, by;
    // RMSNorm: the device sums the squares in float and has its own rsqrt (pass_bound.h's
    // rms_norm_err with the device's ln_err)
    rt->upload(bx, x.ptr(), x.data.size() * 4), rt->upload(bg, g.ptr(), E * 4);
    rt->rms_norm(bx, bg, rows, E, 1e-6f);
    Tensor want;
    ref->rms_norm(x, g, 1e-6f, want);
    CHECK(max_abs_diff(download(*rt, bx, {rows, E}), want) <=
          pass_detail::rms_norm_err(x, g, 1e-6f, want, {}, kOpenClPass).local);
    // a * b: one correctly rounded product on both sides (OpenCL's * is exact-rounded): equal
    rt->upload(bx, x.ptr(), x.data.size() * 4), rt->upload(by, y.ptr(), y.data.size() * 4);
    rt->mul_inplace(bx, by, rows * E);
    Tensor prod = x;
    ref->mul(prod, y);
    CHECK(max_abs_diff(download(*rt, bx, {rows, E}), prod) == 0.0);
    // x * s likewise
    rt->upload(bx, x.ptr(), x.data.size() * 4);
    rt->scale_inplace(bx, 4.1231055f, rows * E);
    Tensor scaled = x;
    for (float& v : scaled.data) v *= 4.1231055f;
    CHECK(max_abs_diff(download(*rt, bx, {rows, E}), scaled) == 0.0);
    // SiLU: OpenCL's exp and division against the reference's double
    rt->upload(bx, x.ptr(), x.data.size() * 4);
    rt->activation(bx, rows * E, Activation::Silu);
    ref->activation(x, Activation::Silu, want);
    CHECK(max_abs_diff(download(*rt, bx, {rows, E}), want) <= activation_bound(Activation::Silu, x, kOpenClPass));
  }
  // RoPE on rows of 3 heads, with the host's tables: a c - b s and b c + a s, two products and a
  // sum on each side (a fused multiply-add on the device rounds once less): 3 u of |a| + |b|
  // each, 9 u of max|x| as pass_bound.h counts it
  for (const int D : {2, 6, 64})
    for (const int T : {1, 5, 33}) {
      CAPTURE(D, T);
      ModelConfig c;
      c.rope_theta = 10000.0f;
      Tensor cs, sn;
      rope_tables(T, D, c, cs, sn);
      const Tensor x = random_tensor({T, 3 * D}, static_cast<uint64_t>(D + T), 3.0f);
      cl::Buffer bx, bc, bs;
      rt->upload(bx, x.ptr(), x.data.size() * 4), rt->upload(bc, cs.ptr(), cs.data.size() * 4);
      rt->upload(bs, sn.ptr(), sn.data.size() * 4);
      rt->rope(bx, bc, bs, T, 3 * D, D);
      Tensor want = x;
      ref->rope(want, cs, sn, D, T, false);
      CHECK(max_abs_diff(download(*rt, bx, {T, 3 * D}), want) <= 9 * kU32 * max_abs(x));
    }
}

TEST_CASE("the opencl forward pass matches the reference on every case", "[opencl][forward]") {
  for_each_config({{1, 16, 1, 1, 8}, {7, 18, 2, 2, 9}, {13, 32, 8, 2, 31}, {9, 32, 16, 1, 0}},
                  [](const ShapeCase& s, ModelConfig c) {
                    c.pooling = c.positional == Positional::Learned ? Pooling::MaskedMean : Pooling::Mean;
                    const Model m = random_model(c, static_cast<uint64_t>(s.T * 7 + s.H));
                    ForwardRequest req;
                    req.ids = random_ids(s.T, c.vocab_size);
                    compare_with_reference(m, req);
                  });
}

TEST_CASE("opencl: every mask kind and combination, cross-attention, T = 1000", "[opencl][masks]") {
  const ModelConfig c = small_config(16, 4, 2, 16, 1024);
  const Model m = random_model(c, 5);
  const int T = 11;
  const std::vector<int> ids = pad_ids(m, random_ids(T - 3, c.vocab_size), T);
  for (const MaskSpec& s : all_mask_combinations(T, c.num_heads)) {
    CAPTURE(s.describe());
    ForwardRequest req;
    req.ids = ids;
    req.mask = s;
    compare_with_reference(m, req);
  }
  ForwardRequest cross;
  cross.ids = random_ids(5, c.vocab_size, 1);
  cross.cross_ids = random_ids(7, c.vocab_size, 2);
  compare_with_reference(m, cross);
  cross.mask.causal = true;
  compare_with_reference(m, cross);
  ForwardRequest big;
  big.ids = random_ids(1000, c.vocab_size);
  big.mask.window = 33;
  compare_with_reference(m, big);
}

TEST_CASE("opencl runs decoders on the device, within the bound of the reference", "[opencl][decoders]") {
  const std::string dir = scratch_dir("opencl", "decoders");
  std::vector<std::pair<std::string, Model>> models;
  // Llama (GQA 4 / 2, RoPE, SwiGLU, no biases), Mistral with a window of 5, Qwen3's q/k norms with
  // heads of 6 over a hidden size of 16, Llama with heads of 2, GPT-2
  models.emplace_back("llama", tiny_decoder(dir + "/llama"));
  models.emplace_back("mistral", tiny_decoder(dir + "/mistral", false, 5));
  models.emplace_back("qwen3", tiny_decoder(dir + "/qwen3", false, 0, true, 6));
  models.emplace_back("llama heads of 2", tiny_decoder(dir + "/narrow", false, 0, false, 2));
  models.emplace_back("gpt2", tiny_decoder(dir + "/gpt2", true));
  // Gemma 2: the embedding scale, sandwich norms, GeGLU, query_pre_attn_scalar, soft caps, windowed
  // and full layers; and without caps
  models.emplace_back("gemma2", tiny_gemma2(dir + "/gemma2"));
  models.emplace_back("gemma2 no caps", tiny_gemma2(dir + "/gemma2-nocap", 0.0f));
  // Gemma 3's layers: q/k norms, no score cap, the sliding layers' own rotary base
  ModelConfig g3 = models.back().second.config;
  g3.qk_norm = true, g3.attn_softcap = 0, g3.rope_theta = 1e6f, g3.local_rope_theta = 1e4f;
  models.emplace_back("gemma3", random_model(g3, 3));
  for (const auto& [name, m] : models)
    for (const int T : {1, 7, 40}) {
      CAPTURE(name, T);
      ForwardRequest req;
      req.ids = random_ids(T, m.config.vocab_size, static_cast<uint64_t>(T));
      compare_with_reference(m, req);
    }
  std::filesystem::remove_all(dir);
}

TEST_CASE("opencl uploads 16-bit weights widened: the same pass as their float32 values", "[opencl][half]") {
  // A Llama's layer matrices, embedding and LM head moved into 16 bits (as a BF16 folder loads),
  // against the float32 model holding the same bf16-rounded values: the device receives the same
  // floats, so the device's passes are equal bit for bit (each upload finishes before its buffer is reused)
  const std::string dir = scratch_dir("opencl", "half");
  Model f = tiny_decoder(dir);
  Model h = f;
  h.weights.version = next_weights_version();
  auto to_half = [](Tensor& t, HalfTensor& out) {
    out.shape = t.shape;
    out.bits.resize(t.data.size());
    for (size_t k = 0; k < t.data.size(); ++k) out.bits[k] = to_bf16_bits(t.data[k]);
    for (size_t k = 0; k < t.data.size(); ++k) t.data[k] = bf16_to_float(out.bits[k]);  // the float32 twin
  };
  for (const WeightEntry& e : weight_entries(f.config)) {
    if (e.shape.size() != 2 || (e.layer < 0 && e.spec->model_member != &ModelWeights::embedding &&
                                e.spec->model_member != &ModelWeights::lm_head))
      continue;
    HalfTensor bits;
    to_half(e.in(f.weights), bits);
    if (e.layer >= 0)
      h.weights.layers[static_cast<size_t>(e.layer)].half.emplace_back(e.spec->layer_member, std::move(bits));
    else
      h.weights.half.emplace_back(e.spec->model_member, std::move(bits));
    e.in(h.weights) = Tensor();
  }
  REQUIRE(has_half(h.weights));
  auto ocl = make_backend("opencl");
  ForwardRequest req;
  req.ids = random_ids(21, f.config.vocab_size, 9);
  const ForwardResult a = run_forward(h, *ocl, req), b = run_forward(f, *ocl, req);
  REQUIRE(ocl->notice().empty());
  for (int l = 0; l < f.config.num_layers; ++l) CHECK(a.attention[l].data == b.attention[l].data);
  CHECK(a.hidden.data == b.hidden.data);
  // The LM head runs on the host: its 16-bit product and the float32 one are the same dot products
  // of E terms summed in orders that depend on the CPU (on an AVX2-only one the 16-bit rows are
  // widened per block and summed apart from sgemm's order): within sum_bound (both sides'
  // roundings) of each row's sum of |h| |w|, as test_half_weights.cpp's cpu check.
  const Tensor& W = f.weights.lm_head;
  const int64_t E = W.dim(1), T = static_cast<int64_t>(req.ids.size());
  REQUIRE(a.next_logits.size() == static_cast<size_t>(W.dim(0)));
  REQUIRE(b.next_logits.size() == a.next_logits.size());
  const float* last = a.hidden.ptr() + (T - 1) * E;
  for (int64_t v = 0; v < W.dim(0); ++v) {
    double abs_sum = 0;
    for (int64_t e = 0; e < E; ++e) abs_sum += std::fabs(static_cast<double>(last[e]) * W.at(v, e));
    CHECK(std::fabs(a.next_logits[static_cast<size_t>(v)] - b.next_logits[static_cast<size_t>(v)]) <=
          sum_bound(static_cast<double>(E), abs_sum));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("opencl recomputes attention on demand as its pass computed it", "[opencl][on-demand]") {
  const std::string dir = scratch_dir("opencl", "on-demand");
  std::vector<std::pair<std::string, Model>> models;
  models.emplace_back("llama", tiny_decoder(dir + "/llama"));
  models.emplace_back("gemma2", tiny_gemma2(dir + "/gemma2"));  // windowed and full layers: two masks
  ModelConfig rel = small_config(16, 4, 2, 24, 64);
  rel.positional = Positional::Relative;
  models.emplace_back("relative", random_model(rel, 4));
  for (const auto& [name, m] : models)
    for (const bool ablate : {false, true}) {  // an ablated pass runs on the host: the cpu recomputes it
      CAPTURE(name, ablate);
      ForwardRequest kept;
      kept.ids = random_ids(33, m.config.vocab_size, 5);
      if (ablate) kept.ablate = {{0, 1}};
      ForwardRequest lazy = kept;
      lazy.attention_on_demand = true;
      lazy.keep_attention.assign(static_cast<size_t>(m.config.num_layers), false);
      auto ocl = make_backend("opencl");
      const ForwardResult a = run_forward(m, *ocl, kept), b = run_forward(m, *ocl, lazy);
      REQUIRE(b.on_demand);
      CHECK(b.on_demand->backend == (ablate ? "cpu" : "opencl"));
      for (int l = 0; l < m.config.num_layers; ++l) {
        CAPTURE(l);
        CHECK(b.attention[static_cast<size_t>(l)].empty());  // not kept
        CHECK(max_abs_diff(*b.layer_probs(l), a.attention[static_cast<size_t>(l)]) == 0.0);
      }
      CHECK(max_abs_diff(a.hidden, b.hidden) == 0.0);
    }
  std::filesystem::remove_all(dir);
}

TEST_CASE("opencl falls back to cpu and says why", "[opencl][fallback]") {
  const ModelConfig c = small_config(16, 2, 1, 8, 16);
  const Model m = random_model(c, 1);
  ForwardRequest req;
  req.ids = random_ids(6, c.vocab_size);
  auto missing = make_backend("opencl:42");
  const ForwardResult r = run_forward(m, *missing, req);
  CHECK(missing->name() == "cpu");
  REQUIRE_FALSE(r.warnings.empty());
  CHECK_THAT(r.warnings.back(), Catch::Contains("no device 42") && Catch::Contains("using the cpu backend"));
  auto cpu = make_backend("cpu");
  CHECK(max_abs_diff(run_forward(m, *cpu, req).attention[0], r.attention[0]) == 0.0);
}

TEST_CASE("opencl runs on the cpu backend, and says so, what its kernels do not cover", "[opencl][fallback]") {
  // head ablation and hooks are the host's: those passes run on cpu, equal to it, with the
  // reason in a warning; a plain pass of the same model then runs on the device again
  ModelConfig c = small_config(16, 2, 2, 24, 16);
  c.activation = Activation::Silu, c.positional = Positional::Rotary;
  const Model m = random_model(c, 2);
  ForwardRequest req;
  req.ids = random_ids(6, c.vocab_size);
  req.ablate = {{1, 0}};
  auto ocl = make_backend("opencl");
  auto cpu = make_backend("cpu");
  const ForwardResult r = run_forward(m, *ocl, req), want = run_forward(m, *cpu, req);
  for (int l = 0; l < c.num_layers; ++l) CHECK(max_abs_diff(r.attention[l], want.attention[l]) == 0.0);
  CHECK(max_abs_diff(r.hidden, want.hidden) == 0.0);
  REQUIRE_FALSE(r.warnings.empty());
  CHECK_THAT(r.warnings.back(), Catch::Contains("head ablation") && Catch::Contains("ran on the cpu backend"));
  req.ablate.clear();
  CHECK(run_forward(m, *ocl, req).warnings.empty());
  CHECK(ocl->notice().empty());
}

TEST_CASE("opencl re-uploads weights when their version changes, and only then", "[opencl][weights]") {
  Model m = random_model(small_config(16, 2, 2, 24, 20), 4);
  auto ocl = make_backend("opencl");
  ForwardRequest req;
  req.ids = random_ids(9, m.config.vocab_size, 2);
  const ForwardResult first = run_forward(m, *ocl, req);
  // An optimiser step changes every weight in place (same buffers, same sizes): the device
  // copy must follow, as the Train tab's live heads need.
  Adam adam(m.weights, OptimizerConfig{});
  ModelWeights g = zeros_like(m.weights);
  for (Tensor* t : parameters(g)) std::fill(t->data.begin(), t->data.end(), 0.5f);
  adam.step(m.weights, g);
  auto ref = make_backend("reference");
  const ForwardResult moved = run_forward(m, *ocl, req), want = run_forward(m, *ref, req);
  const double tol = pass_bound(m, req, want, kOpenClPass).hidden;
  CHECK(max_abs_diff(moved.hidden, want.hidden) <= tol);
  // and it moved by more than any rounding could (a stale device copy would give 0)
  CHECK(max_abs_diff(moved.hidden, first.hidden) > tol);
  // The same version is served from the device cache: a change made without a new version
  // (which no engine code does) is not seen, which shows the cache is really used.
  m.weights.layers[0].wq.data[0] += 10.0f;
  CHECK(max_abs_diff(run_forward(m, *ocl, req).hidden, moved.hidden) == 0.0);
}
