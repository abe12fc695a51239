// Forward pass: the cpu backend against the reference on awkward shapes and every mask, a tiny
// case worked out by hand, cross-attention, batches, and the invariants of the probabilities.
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/analysis/methods.h"
#include "engine/compute/kv_cache.h"
#include "engine/core/tuning.h"
#include "tests/engine/hf_test_model.h"
#include "engine/text/input.h"
#include "tests/engine/pass_bound.h"
#include "tests/engine/test_util.h"
#include "tests/engine/tolerance.h"

using namespace attnlab;
using namespace attnlab::test;

namespace {

// v rounded to bf16 as the bf16 kernels round it (to nearest even), back in double.
double bf16_round(float v) {
  const uint32_t u = static_cast<uint32_t>(to_bf16_bits(v)) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return static_cast<double>(f);
}

// Both backends compute in float32 (the reference accumulates in double, the cpu backend sums in
// Eigen's and oneDNN's orders, with Eigen's vectorised exp and erf): held to pass_bound, made from
// this pass's own reduction lengths and measured values (tests/engine/pass_bound.h).
void compare_backends(const Model& m, const ForwardRequest& req) {
  auto ref = make_backend("reference");
  auto cpu = make_backend("cpu");
  const ForwardResult a = run_forward(m, *ref, req);
  const ForwardResult b = run_forward(m, *cpu, req);
  REQUIRE(a.attention.size() == b.attention.size());
  REQUIRE(a.cross_attention.size() == b.cross_attention.size());
  const PassBound tol = pass_bound(m, req, a);
  for (int l = 0; l < m.config.num_layers; ++l)
    CHECK(max_abs_diff(a.probs(l), b.probs(l)) <= tol.probs[static_cast<size_t>(l)]);
  CHECK(max_abs_diff(a.hidden, b.hidden) <= tol.hidden);
  REQUIRE(a.logits.size() == b.logits.size());
  for (size_t k = 0; k < a.logits.size(); ++k) CHECK(std::fabs(a.logits[k] - b.logits[k]) <= tol.logits);
}

// Every row sums to 1 or (fully blocked) to 0; blocked cells are exactly 0; no NaN anywhere.
void check_prob_invariants(const ForwardResult& r) {
  for (size_t l = 0; l < (r.is_cross() ? r.cross_attention.size() : r.attention.size()); ++l) {
    const Tensor& p = r.probs(static_cast<int>(l));
    const int H = static_cast<int>(p.dim(0)), T = static_cast<int>(p.dim(1)), S = static_cast<int>(p.dim(2));
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i) {
        double sum = 0;
        bool all_blocked = true;
        for (int j = 0; j < S; ++j) {
          const float v = p.data[(static_cast<size_t>(h) * T + i) * S + j];
          REQUIRE(std::isfinite(v));
          if (r.mask.is_blocked(h, i, j))
            REQUIRE(v == 0.0f);
          else
            all_blocked = false;
          sum += v;
        }
        // p_j = e_j * (1 / sum_k e_k) in float: the S-term sum errs by gamma_{S-1} relative, the
        // reciprocal and each product by u, so the row sums to 1 within gamma_{S+1} (this sum is in
        // double); a blocked row is exact zeros.
        REQUIRE(std::fabs(sum - (all_blocked ? 0.0 : 1.0)) <= gamma32(S + 1));
      }
  }
}

}  // namespace

TEST_CASE("hand-worked two-token case matches the formula", "[forward]") {
  // E = 2, one head, identity projections, no feed-forward: Q = K = V = X = I, so
  // scores = I / sqrt(2) and row 0 is softmax([1/sqrt2, 0]).
  ModelConfig c;
  c.vocab_size = 2, c.embed_size = 2, c.num_heads = 1, c.num_layers = 1, c.ff_dim = 0, c.max_len = 4;
  Model m;
  m.config = c;
  m.vocab = Vocab({"x", "y"});
  m.weights = random_weights(c, 1);
  m.weights.embedding.data = {1, 0, 0, 1};
  LayerWeights& L = m.weights.layers[0];
  for (Tensor* w : {&L.wq, &L.wk, &L.wv, &L.wo}) w->data = {1, 0, 0, 1};
  for (Tensor* b : {&L.bq, &L.bk, &L.bv, &L.bo}) b->data = {0, 0};
  const double p = 1.0 / (1.0 + std::exp(-1.0 / std::sqrt(2.0)));  // 0.66976...
  // The only roundings: the scores (exact products 1 * 1, times the float scale 1/sqrt(2): two
  // roundings of |s| = 0.707), then the softmax of 2 entries: softmax_bound, absolute as p <= 1.
  const double tol = softmax_bound(2, 2 * kU32 / std::sqrt(2.0));  // 8.9e-7
  for (const std::string name : {"reference", "cpu"}) {
    auto be = make_backend(name);
    ForwardRequest req;
    req.ids = {0, 1};
    ForwardResult r = run_forward(m, *be, req);
    const Tensor& a = r.attention[0];
    CHECK(std::fabs(a.data[0] - p) <= tol);
    CHECK(std::fabs(a.data[1] - (1 - p)) <= tol);
    CHECK(std::fabs(a.data[2] - (1 - p)) <= tol);
    CHECK(std::fabs(a.data[3] - p) <= tol);
    req.mask.causal = true;
    r = run_forward(m, *be, req);
    CHECK(r.attention[0].data[0] == 1.0f);
    CHECK(r.attention[0].data[1] == 0.0f);
    CHECK(std::fabs(r.attention[0].data[2] - (1 - p)) <= tol);
  }
}

TEST_CASE("cpu matches reference on awkward shapes", "[forward][cpu]") {
  for_each_config(
      {{1, 16, 1, 1, 8}, {1, 16, 16, 2, 0}, {7, 18, 2, 2, 9}, {13, 24, 8, 3, 31}, {33, 32, 16, 1, 64}, {5, 8, 8, 2, 0}},
      [](const ShapeCase& s, const ModelConfig& c) {
        const Model m = random_model(c, static_cast<uint64_t>(s.T * 31 + s.E));
        ForwardRequest req;
        req.ids = random_ids(s.T, c.vocab_size);
        compare_backends(m, req);
      });
}

TEST_CASE("cpu matches reference at T = 1000", "[forward][cpu][long]") {
  for (const int H : {2, 8}) {
    ModelConfig c = small_config(32, H, 2, 48, 1024);
    c.positional = H == 8 ? Positional::Relative : Positional::Learned;
    const Model m = random_model(c, 11);
    ForwardRequest req;
    req.ids = random_ids(1000, c.vocab_size);
    req.mask.window = 65;
    compare_backends(m, req);
    req.mask = {};
    compare_backends(m, req);
  }
}

TEST_CASE("every mask kind and combination agrees across backends", "[forward][masks]") {
  const ModelConfig c = small_config(16, 4, 2, 16, 64);
  const Model m = random_model(c, 5);
  const int T = 11;
  std::vector<int> ids = random_ids(T - 3, c.vocab_size);
  ids = pad_ids(m, ids, T);  // three [PAD] keys at the end
  const std::vector<MaskSpec> specs = all_mask_combinations(T, c.num_heads);
  auto cpu = make_backend("cpu");
  for (const MaskSpec& s : specs) {
    CAPTURE(s.describe());
    ForwardRequest req;
    req.ids = ids;
    req.mask = s;
    compare_backends(m, req);
    check_prob_invariants(run_forward(m, *cpu, req));
  }
}

TEST_CASE("per-head custom masks apply to their own head only", "[forward][masks]") {
  const ModelConfig c = small_config(16, 4, 1, 0, 16);
  const Model m = random_model(c, 2);
  const int T = 6;
  NpyArray custom;
  custom.kind = NpyKind::Int;
  custom.tensor = Tensor({4, T, T});
  // head h blocks key h for every query
  for (int h = 0; h < 4; ++h)
    for (int i = 0; i < T; ++i) custom.tensor.data[(static_cast<size_t>(h) * T + i) * T + h] = 1;
  ForwardRequest req;
  req.ids = random_ids(T, c.vocab_size);
  req.mask.custom = custom;
  compare_backends(m, req);
  auto cpu = make_backend("cpu");
  const ForwardResult r = run_forward(m, *cpu, req);
  for (int h = 0; h < 4; ++h)
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < T; ++j) {
        const float v = r.attention[0].data[(static_cast<size_t>(h) * T + i) * T + j];
        if (j == h)
          CHECK(v == 0.0f);
        else
          CHECK(v > 0.0f);
      }
}

TEST_CASE("fully blocked rows are zeros, never NaN, and are reported", "[forward][masks]") {
  const ModelConfig c = small_config(16, 2, 2, 16, 32);
  const Model m = random_model(c, 9);
  const int T = 5;
  NpyArray custom;
  custom.kind = NpyKind::Bool;
  custom.tensor = Tensor({T, T});
  for (int j = 0; j < T; ++j) custom.tensor.data[static_cast<size_t>(2 * T + j)] = 1;  // query 2 sees nothing
  ForwardRequest req;
  req.ids = random_ids(T, c.vocab_size);
  req.mask.custom = custom;
  for (const std::string name : {"reference", "cpu"}) {
    auto be = make_backend(name);
    const ForwardResult r = run_forward(m, *be, req);
    check_prob_invariants(r);
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < T; ++j) CHECK(r.attention[0].data[(static_cast<size_t>(h) * T + 2) * T + j] == 0.0f);
    REQUIRE(r.warnings.size() == 1);
    CHECK_THAT(r.warnings[0], Catch::Contains("1 query row") && Catch::Contains(": 2"));
    for (float v : r.hidden.data) REQUIRE(std::isfinite(v));
  }
  compare_backends(m, req);
}

TEST_CASE("cross-attention gives [heads, T_a, T_b] per layer and agrees across backends", "[forward][cross]") {
  for (const NormPlacement norm : {NormPlacement::Post, NormPlacement::Pre})
    for (const Positional pos : {Positional::Sinusoidal, Positional::Relative}) {
      ModelConfig c = small_config(16, 8, 2, 16, 32);
      c.norm = norm, c.positional = pos;
      const Model m = random_model(c, 4);
      ForwardRequest req;
      req.ids = random_ids(5, c.vocab_size, 1);
      req.cross_ids = random_ids(7, c.vocab_size, 2);
      compare_backends(m, req);
      req.mask.causal = true;
      compare_backends(m, req);
      auto cpu = make_backend("cpu");
      const ForwardResult r = run_forward(m, *cpu, req);
      REQUIRE(r.cross_attention.size() == 2);
      CHECK(r.cross_attention[1].shape == std::vector<int64_t>{8, 5, 7});
      check_prob_invariants(r);
      // Layer 0 of cross mode is self-attention's layer 0 math with other keys: with B == A it
      // must reproduce the self-attention probabilities. The same math in float32, but q and k
      // are projected by another call (another thread budget, another summation order): within
      // the pass bound of the cross request.
      ForwardRequest same;
      same.ids = req.ids;
      same.cross_ids = req.ids;
      const ForwardResult x = run_forward(m, *cpu, same);
      ForwardRequest self;
      self.ids = req.ids;
      const ForwardResult s = run_forward(m, *cpu, self);
      const PassBound tol = pass_bound(m, same, x);
      for (int l = 0; l < 2; ++l)
        CHECK(max_abs_diff(x.cross_attention[static_cast<size_t>(l)], s.attention[static_cast<size_t>(l)]) <=
              tol.probs[static_cast<size_t>(l)]);
    }
}

TEST_CASE("batches pad to the longest sequence and block the padding", "[forward][batch]") {
  const ModelConfig c = small_config(16, 2, 2, 16, 32);
  const Model m = random_model(c, 6);
  auto cpu = make_backend("cpu");
  const std::vector<std::vector<int>> batch = {random_ids(3, c.vocab_size, 1), random_ids(6, c.vocab_size, 2),
                                               random_ids(4, c.vocab_size, 3)};
  const auto rs = run_forward_batch(m, *cpu, batch, {});
  REQUIRE(rs.size() == 3);
  for (size_t b = 0; b < 3; ++b) {
    REQUIRE(rs[b].ids.size() == 6);
    check_prob_invariants(rs[b]);
    for (int l = 0; l < 2; ++l)
      for (int i = 0; i < 6; ++i)
        for (size_t j = batch[b].size(); j < 6; ++j)
          CHECK(rs[b].attention[static_cast<size_t>(l)].data[static_cast<size_t>(i * 6) + j] == 0.0f);
  }
  // The real tokens' attention over real keys is what the unpadded sequence gives in layer 0
  // (keys are blocked, queries are unaffected; later layers differ only through pad queries'
  // rows, which no real query reads).
  // The two are float32 passes of the same values (other shapes: other summation orders): within
  // the pass bound of the padded request.
  ForwardRequest alone;
  alone.ids = batch[0];
  const ForwardResult a = run_forward(m, *cpu, alone);
  ForwardRequest padded;
  padded.ids = rs[0].ids;
  padded.mask.padding = true;
  const PassBound tol = pass_bound(m, padded, rs[0]);
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j)
          CHECK(std::fabs(rs[0].attention[static_cast<size_t>(l)].data[(static_cast<size_t>(h) * 6 + i) * 6 + j] -
                          a.attention[static_cast<size_t>(l)].data[(static_cast<size_t>(h) * 3 + i) * 3 + j]) <=
                tol.probs[static_cast<size_t>(l)]);
}

TEST_CASE("keep_attention drops the other layers' probabilities but not the result", "[forward]") {
  const ModelConfig c = small_config(16, 2, 3, 16, 32);
  const Model m = random_model(c, 6);
  auto cpu = make_backend("cpu");
  ForwardRequest req;
  req.ids = random_ids(9, c.vocab_size);
  const ForwardResult all = run_forward(m, *cpu, req);
  req.keep_attention = {false, true, false};
  const ForwardResult one = run_forward(m, *cpu, req);
  CHECK(one.attention[0].empty());
  CHECK(one.attention[2].empty());
  CHECK(max_abs_diff(one.attention[1], all.attention[1]) == 0.0);
  CHECK(max_abs_diff(one.hidden, all.hidden) == 0.0);
}

TEST_CASE("bad input is a clear error", "[forward][errors]") {
  const ModelConfig c = small_config(16, 2, 1, 0, 8);
  const Model m = random_model(c, 6);
  auto cpu = make_backend("cpu");
  ForwardRequest req;
  CHECK_THROWS_WITH(run_forward(m, *cpu, req), Catch::Contains("empty"));
  req.ids = {1, 2, 40};
  CHECK_THROWS_WITH(run_forward(m, *cpu, req), Catch::Contains("id 40 at position 2"));
  req.ids = random_ids(9, c.vocab_size);
  CHECK_THROWS_WITH(run_forward(m, *cpu, req), Catch::Contains("max_len 8"));
  req.ids = random_ids(4, c.vocab_size);
  req.mask.custom = NpyArray{Tensor({3, 4}), NpyKind::Bool};
  req.mask.custom_source = "m.npy";
  CHECK_THROWS_WITH(run_forward(m, *cpu, req), Catch::Contains("m.npy has shape [3, 4], expected [4, 4]"));
  CHECK_THROWS_WITH(make_backend("gpu"), Catch::Contains("unknown backend"));
}

TEST_CASE("a cancelled pass stops before its next layer, on every backend", "[forward][cancel]") {
  const Model m = random_model(small_config(16, 2, 6, 24, 64), 2);
  for (const std::string name : {"reference", "cpu", "opencl"}) {
    for (const bool cross : {false, true}) {
      CAPTURE(name, cross);
      auto backend = make_backend(name);
      std::atomic<bool> cancel{false};
      std::vector<int> started;
      ForwardRequest req;
      req.ids = random_ids(20, m.config.vocab_size, 1);
      if (cross) req.cross_ids = random_ids(9, m.config.vocab_size, 2);
      req.cancel = &cancel;
      req.on_layer = [&](int l) {
        started.push_back(l);
        if (l == 2) cancel = true;  // the user typed again while layer 2 runs
      };
      CHECK_THROWS_AS(run_forward(m, *backend, req), Cancelled);
      CHECK(started == std::vector<int>{0, 1, 2});  // layer 3 never starts
      // the same request without the flag completes, and a flag set before the start stops at once
      cancel = false;
      req.on_layer = nullptr;
      CHECK(run_forward(m, *backend, req).hidden.dim(0) == 20);
      cancel = true;
      CHECK_THROWS_AS(run_forward(m, *backend, req), Cancelled);
    }
  }
}

TEST_CASE("input preparation: one policy for text and ids", "[forward][input]") {
  ModelConfig c = small_config(16, 2, 1, 8, 6);
  c.tokenizer = TokenizerKind::Word;
  Model m = random_model(c, 1);
  m.vocab = parse_vocab("[PAD]\n[UNK]\n[CLS]\nthe\nfilm\nwas\nnot\ngood\n");
  // within max_len: tokens as typed, [UNK] flagged, nothing special, no notice
  PreparedInput in = prepare_text(m, "the film was bad", {});
  CHECK(in.tokens == std::vector<std::string>{"the", "film", "was", "bad"});
  CHECK(in.ids == std::vector<int>{3, 4, 5, 1});
  CHECK(in.unknown == std::vector<uint8_t>{0, 0, 0, 1});
  CHECK(in.special == std::vector<uint8_t>{0, 0, 0, 0});
  CHECK(in.notices.empty());
  // past max_len (6): cut with a notice by default, an error when asked
  const std::string long_text = "the film was not good the film was not good";
  in = prepare_text(m, long_text, {});
  CHECK(in.ids.size() == 6);
  CHECK(in.tokens.size() == 6);
  REQUIRE(in.notices.size() == 1);
  CHECK_THAT(in.notices[0], Catch::Contains("10 tokens, more than the model's max_len 6; it was cut to 6"));
  InputOptions strict;
  strict.overflow = Overflow::Error;
  strict.what = "text";
  CHECK_THROWS_WITH(prepare_text(m, long_text, strict), Catch::Contains("the text has 10 tokens"));
  // padding: [PAD] tokens flagged special, never past max_len
  InputOptions pad;
  pad.pad_to = 20;
  in = prepare_text(m, "good", pad);
  CHECK(in.ids == std::vector<int>{7, 0, 0, 0, 0, 0});
  CHECK(in.special == std::vector<uint8_t>{0, 1, 1, 1, 1, 1});
  // [CLS] comes from the tokenizer description (add_cls), flagged special; empty text is no input
  m.config.add_cls = true;
  in = prepare_text(m, "good", {});
  CHECK(in.tokens == std::vector<std::string>{"[CLS]", "good"});
  CHECK(in.special == std::vector<uint8_t>{1, 0});
  CHECK(prepare_text(m, "", {}).ids.empty());
  CHECK(prepare_text(m, "   ", {}).ids.empty());
  // ids typed by hand: labels from the vocabulary, the same length policy
  in = prepare_ids(m, {3, 4, 1}, {});
  CHECK(in.tokens == std::vector<std::string>{"the", "film", "[UNK]"});
  CHECK_THROWS_WITH(prepare_ids(m, {3, 99}, {}), Catch::Contains("id 99 at position 1"));
  // a forward result carries the labels it was given, or the vocabulary's
  auto cpu = make_backend("cpu");
  ForwardRequest req;
  req.ids = {3, 4, 1};
  req.tokens = {"the", "film", "bad"};
  CHECK(run_forward(m, *cpu, req).tokens == req.tokens);
  req.tokens.clear();
  CHECK(run_forward(m, *cpu, req).tokens == std::vector<std::string>{"the", "film", "[UNK]"});
}

TEST_CASE("bf16 linear: oneDNN against a plain reference on bf16-rounded inputs, awkward shapes", "[forward][bf16]") {
  if (!bf16_available()) {  // a build without oneDNN says so instead of running fp32 under the name
    CHECK_THROWS_WITH(make_backend("cpu-bf16"), Catch::Contains("oneDNN"));
    return;
  }
  CHECK(to_bf16_bits(1.0f) == 0x3F80);
  CHECK(to_bf16_bits(1.0f + 1.0f / 256) == 0x3F80);  // a tie: to even (down)
  CHECK(to_bf16_bits(1.0f + 3.0f / 256) == 0x3F82);  // a tie: to even (up)
  CHECK(to_bf16_bits(-2.5f) == 0xC020);
  CHECK(to_bf16_bits(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(to_bf16_bits(-0.0f) == 0x8000);
  CHECK(to_bf16_bits(std::numeric_limits<float>::max()) == 0x7F80);  // rounds up to infinity, as PyTorch's
  const uint16_t nan = to_bf16_bits(std::numeric_limits<float>::quiet_NaN());
  CHECK(((nan & 0x7F80) == 0x7F80 && (nan & 0x7F) != 0));
  {  // the array form, across its threads' blocks, equals the scalar one
    std::vector<float> x(100003);
    for (size_t k = 0; k < x.size(); ++k) x[k] = std::sin(0.37f * static_cast<float>(k)) * static_cast<float>(k);
    std::vector<uint16_t> y(x.size());
    to_bf16(x.data(), y.data(), static_cast<int64_t>(x.size()));
    size_t same = 0;
    for (size_t k = 0; k < x.size(); ++k) same += y[k] == to_bf16_bits(x[k]);
    CHECK(same == x.size());
  }
  auto ops = make_cpu_bf16_ops();
  uint64_t version = 100;
  for (const auto& [N, in, out] :
       std::vector<std::array<int, 3>>{{1, 1, 1}, {1, 5, 3}, {7, 17, 9}, {33, 64, 130}, {130, 96, 17}})
    for (const bool bias : {false, true}) {
      const Tensor x = random_tensor({N, in}, static_cast<uint64_t>(N * 7 + in)), W = random_tensor({out, in}, 5);
      const Tensor b = bias ? random_tensor({out}, 9) : Tensor();
      ops->set_weights_version(++version);
      Tensor y;
      ops->linear(x, W, b, y);
      REQUIRE(y.shape == std::vector<int64_t>{N, out});
      double worst = 0;
      for (int n = 0; n < N; ++n)
        for (int o = 0; o < out; ++o) {
          double s = bias ? b.data[static_cast<size_t>(o)] : 0.0, mag = std::fabs(s);
          for (int k = 0; k < in; ++k) {
            s += bf16_round(x.at(n, k)) * bf16_round(W.at(o, k));
            mag += std::fabs(bf16_round(x.at(n, k)) * bf16_round(W.at(o, k)));
          }
          // mag > 0 here (random inputs); 1e-6 only keeps a 0 / 0 out of an all-zero row
          worst = std::max(worst, std::fabs(y.at(n, o) - s) / (mag + 1e-6));
        }
      // bf16 products are exact in fp32: only the fp32 sum of in products and the bias rounds, in
      // any order (blocked, AVX512-BF16 pairs, AMX tiles): gamma_{in+1} relative to mag (s is in
      // double from the same rounded operands).
      CHECK(worst <= gamma32(in + 1));
    }
  // new weights under a new version are converted again; under the same version they are not
  Tensor W = random_tensor({4, 8}, 1), x = random_tensor({2, 8}, 2), y1, y2, y3;
  ops->set_weights_version(++version);
  ops->linear(x, W, Tensor(), y1);
  for (float& v : W.data) v *= 2;
  ops->linear(x, W, Tensor(), y2);
  CHECK(max_abs_diff(y1, y2) == 0.0);  // same version: the converted copy
  ops->set_weights_version(++version);
  ops->linear(x, W, Tensor(), y3);
  // doubled weights double y (bf16 rounding commutes with * 2): y3 - y1 = y1 up to the sums'
  // roundings, far above half of its largest entry
  CHECK(max_abs_diff(y3, y1) > max_abs(y1) / 2);
}

TEST_CASE("cpu-bf16 attention: the blocks' bf16 products against a plain reference, awkward shapes",
          "[forward][bf16]") {
  if (!bf16_available()) return;  // the linear case above checks the message
  auto ops = make_cpu_bf16_ops();
  // T across the 64-query blocks; S != T is cross-attention; KV 1 is grouped-query; window 5
  // gives blocks whose key range starts past 0; rows 0 and 3 of the "holes" mask see nothing.
  for (const auto& [T, S, D, KV] :
       std::vector<std::array<int, 4>>{{1, 1, 1, 3}, {7, 7, 5, 1}, {70, 70, 16, 3}, {130, 130, 8, 1}, {9, 200, 3, 3}})
    for (const int kind : {0, 1, 2}) {  // none, sliding window 5, holes
      CAPTURE(T, S, D, KV, kind);
      const int H = 3;
      AttnMask mask;
      mask.T = T, mask.S = S;
      if (kind > 0) {
        mask.blocked.assign(static_cast<size_t>(T) * S, 0);
        for (int i = 0; i < T; ++i)
          for (int j = 0; j < S; ++j)
            mask.blocked[static_cast<size_t>(i) * S + j] =
                kind == 1 ? std::abs(i - j) > 5 : (i == 0 || i == 3 || j % 3 == 1);
      }
      AttnArgs a;
      a.T = T, a.S = S, a.H = H, a.D = D, a.KV = KV, a.mask = &mask;
      const Tensor Q = random_tensor({T, H * D}, 1), K = random_tensor({S, KV * D}, 2),
                   V = random_tensor({S, KV * D}, 3);
      Tensor P, ctx;
      ops->attention(a, Q, K, &V, &P, &ctx);
      REQUIRE(P.shape == std::vector<int64_t>{1, H, T, S});
      REQUIRE(ctx.shape == std::vector<int64_t>{T, H * D});
      double worst_p = 0, worst_c = 0, top_p = 0, top_abs = 0;  // top_abs: largest sum_k |q_k k_k|
      for (int h = 0; h < H; ++h) {
        const int g = h / (H / KV);
        for (int i = 0; i < T; ++i) {
          std::vector<double> sc(static_cast<size_t>(S));
          double top = -1e300;
          for (int j = 0; j < S; ++j) {
            if (mask.is_blocked(h, i, j)) continue;
            double d = 0, abs_sum = 0;
            for (int k = 0; k < D; ++k) {
              const double t = bf16_round(Q.at(i, h * D + k)) * bf16_round(K.at(j, g * D + k));
              d += t, abs_sum += std::fabs(t);
            }
            top_abs = std::max(top_abs, abs_sum);
            sc[static_cast<size_t>(j)] = d / std::sqrt(static_cast<double>(D));
            top = std::max(top, sc[static_cast<size_t>(j)]);
          }
          double z = 0;
          for (int j = 0; j < S; ++j)
            if (!mask.is_blocked(h, i, j)) z += std::exp(sc[static_cast<size_t>(j)] - top);
          const float* prow = P.ptr() + (static_cast<int64_t>(h) * T + i) * S;
          for (int j = 0; j < S; ++j) {
            const double want = mask.is_blocked(h, i, j) ? 0.0 : std::exp(sc[static_cast<size_t>(j)] - top) / z;
            worst_p = std::max(worst_p, std::fabs(prow[j] - want));
            top_p = std::max(top_p, want);
          }
          for (int k = 0; k < D; ++k) {  // the context from the kernel's probabilities, rounded as it rounds them
            double c = 0, mag = 0;
            for (int j = 0; j < S; ++j) {
              c += bf16_round(prow[j]) * bf16_round(V.at(j, g * D + k));
              mag += std::fabs(bf16_round(prow[j]) * bf16_round(V.at(j, g * D + k)));
            }
            // 1e-6 only keeps 0 / 0 out of a row that sees nothing (mag = 0, c = ctx = 0)
            worst_c = std::max(worst_c, std::fabs(ctx.at(i, h * D + k) - c) / (mag + 1e-6));
          }
        }
      }
      // Scores: exact bf16 products summed in fp32 (gamma_D of their abs_sum), times the float
      // scale (two roundings), and the shift by the row's maximum (u of |s - max|, at most twice
      // the largest score): then softmax_bound over S keys, relative to p, times the largest p.
      const double scale = 1.0 / std::sqrt(static_cast<double>(D));
      const double score_err = scale * top_abs * (gamma32(D) + 4 * kU32);
      CHECK(worst_p <= top_p * softmax_bound(S, score_err));
      // The context: exact bf16 products of the kernel's own rounded probabilities and values,
      // summed in fp32 over at most S keys, in any order: gamma_{S+1} relative to mag.
      CHECK(worst_c <= gamma32(S + 1));
    }
}

TEST_CASE("cpu-bf16 backend: probabilities near fp32 on awkward shapes, every mask kind", "[forward][bf16]") {
  if (!bf16_available()) return;  // the case above checks the message
  for_each_config(
      {{1, 16, 2, 1, 8}, {7, 18, 2, 2, 9}, {33, 32, 4, 2, 64}}, [](const ShapeCase& s, const ModelConfig& c) {
        const Model m = random_model(c, static_cast<uint64_t>(s.T + 3));
        ForwardRequest req;
        req.ids = random_ids(s.T, c.vocab_size);
        req.mask.causal = s.T > 1;
        auto fp32 = make_backend("cpu"), bf16 = make_backend("cpu-bf16");
        CHECK(bf16->name() == "cpu-bf16");
        const ForwardResult a = run_forward(m, *fp32, req), b = run_forward(m, *bf16, req);
        // Layer l's scores come after 6 l + 2 chained bf16 products (each earlier layer's
        // q/k/v projection, scores, context, output projection and two feed-forward
        // products; then q and k, and the score), so they carry bf16_rel(6 l + 2) of
        // their terms' 2-norm; p_j moves by p_j (1 - p_j) (e^{2 ds} - 1) at most. Plus
        // both passes' float32 roundings (pass_bound).
        const PassBound tol = pass_bound(m, req, a);
        for (int l = 0; l < c.num_layers; ++l) {
          const size_t ul = static_cast<size_t>(l);
          const double ds = bf16_rel(6.0 * l + 2) * tol.score_terms[ul];
          CHECK(max_abs_diff(a.attention[ul], b.attention[ul]) <= tol.probs[ul] + tol.pq[ul] * std::expm1(2 * ds));
        }
        check_prob_invariants(b);
      });
}

TEST_CASE("head patterns: previous token, a particular token, broad, by their definitions", "[forward][analysis]") {
  ForwardResult r;
  const int T = 6;
  r.ids.assign(T, 3);
  r.tokens = {"the", "film", "was", "not", "very", "good"};
  Tensor P({3, T, T});
  for (int i = 0; i < T; ++i)
    for (int j = 0; j < T; ++j) {
      P.data[static_cast<size_t>((0 * T + i) * T + j)] = (i == 0 ? j == 0 : j == i - 1) ? 1.0f : 0.0f;  // prev
      P.data[static_cast<size_t>((1 * T + i) * T + j)] = j == 3 ? 0.8f : 0.04f;                         // "not"
      P.data[static_cast<size_t>((2 * T + i) * T + j)] = 1.0f / T;                                      // uniform
    }
  r.attention.push_back(P);
  // Means and an entropy of a few exact probabilities (1, 0.8f, 0.04f, 1/6f) in double: a few
  // float roundings of the inputs, far inside Approx's default of 100 float epsilons relative.
  const auto pats = head_patterns(r);
  REQUIRE(pats.size() == 1);
  REQUIRE(pats[0].size() == 3);
  CHECK(pats[0][0].label == "prev");
  CHECK(pats[0][0].prev == Approx(5.0 / 6));
  CHECK(pats[0][1].label == "token");
  CHECK(pats[0][1].focus == 3);
  CHECK(pats[0][1].focus_share == Approx(0.8));
  CHECK(pats[0][2].label == "broad");
  CHECK(pats[0][2].entropy == Approx(std::log(6.0)));
  CHECK(pats[0][0].induction == 0.0);  // every token repeats here: the previous one is not an induction key
  {  // even rows under a causal mask (row i over i + 1 keys): as broad as a causal head can be,
     // though their mean entropy (~ln T - 1) is far below 0.9 ln T
    ForwardResult c = r;
    Tensor E({1, T, T});
    for (int i = 0; i < T; ++i)
      for (int j = 0; j <= i; ++j) E.data[static_cast<size_t>(i * T + j)] = 1.0f / static_cast<float>(i + 1);
    c.attention = {E};
    const auto pc = head_patterns(c);
    CHECK(pc[0][0].entropy < 0.9 * std::log(6.0));
    CHECK(pc[0][0].label == "broad");
  }
  {  // induction: a repeated sequence, each repeat attending to the token after its earlier occurrence
    ForwardResult rep;
    rep.ids = {5, 6, 7, 8, 5, 6, 7, 8};
    rep.tokens = {"a", "b", "c", "d", "a", "b", "c", "d"};
    const int n = 8;
    Tensor Q({2, n, n});
    for (int i = 0; i < n; ++i) {
      Q.data[static_cast<size_t>(i * n + (i < 4 ? 0 : i - 3))] = 1.0f;         // head 0: induction
      Q.data[static_cast<size_t>((n + i) * n + (i == 0 ? 0 : i - 1))] = 1.0f;  // head 1: previous token
    }
    rep.attention.push_back(Q);
    const auto pr = head_patterns(rep);
    CHECK(pr[0][0].label == "induction");
    CHECK(pr[0][0].induction == Approx(1.0));  // rows 4..7, all on the key after the earlier occurrence
    CHECK(pr[0][1].label == "prev");
    CHECK(pr[0][1].induction == 0.0);
  }
  // one token: all its attention is on itself (and on the first token) in every head; no badge
  ForwardResult one;
  one.ids = {3};
  one.tokens = {"good"};
  Tensor P1({2, 1, 1});
  P1.data = {1.0f, 1.0f};
  one.attention.push_back(P1);
  const auto pats1 = head_patterns(one);
  REQUIRE(pats1.size() == 1);
  for (const HeadPattern& p : pats1[0]) {
    CHECK(p.label.empty());
    CHECK(p.self == Approx(1.0));  // the shares are still measured
  }
}

namespace {

// Every field of two head patterns equal (the same sums in the same order give the same doubles).
void check_same_patterns(const std::vector<std::vector<HeadPattern>>& a,
                         const std::vector<std::vector<HeadPattern>>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t l = 0; l < a.size(); ++l) {
    REQUIRE(a[l].size() == b[l].size());
    for (size_t h = 0; h < a[l].size(); ++h) {
      CAPTURE(l, h);
      const HeadPattern &x = a[l][h], &y = b[l][h];
      CHECK(x.prev == y.prev);
      CHECK(x.next == y.next);
      CHECK(x.self == y.self);
      CHECK(x.first == y.first);
      CHECK(x.sep == y.sep);
      CHECK(x.punct == y.punct);
      CHECK(x.entropy == y.entropy);
      CHECK(x.induction == y.induction);
      CHECK(x.focus == y.focus);
      CHECK(x.focus_share == y.focus_share);
      CHECK(x.label == y.label);
    }
  }
}

}  // namespace

TEST_CASE("head patterns carried from the last pass's checkpoint equal a whole scan", "[forward][analysis]") {
  const std::string dir = scratch_dir("forward", "pattern-scan");
  for (const bool gpt2 : {false, true}) {
    CAPTURE(gpt2);
    const Model m = tiny_decoder(dir + (gpt2 ? "/gpt2" : "/llama"), gpt2);
    const int L = m.config.num_layers, H = m.config.num_heads;
    auto cpu = make_backend("cpu");
    // a small alphabet, so that tokens repeat and the induction sums are not all 0
    const std::vector<int> ids = random_ids(45, 12, 4);
    const auto [a, b] = cached_passes(m, *cpu, ForwardRequest(), ids, 37);
    auto scan_a = std::make_shared<HeadPatternScan>(a, H);
    CHECK(scan_a->first_row() == 0);
    for (int l = 0; l < L; ++l) scan_a->add_layer(l, *a.layer_probs(l), 0);
    check_same_patterns(scan_a->patterns(), head_patterns(a));
    // b's rows < 32 (a's checkpoint: 36 rows rounded down to 16) are a's: only rows 32.. are read
    HeadPatternScan scan_b(b, H, scan_a, 37);
    REQUIRE(scan_b.first_row() == (37 - 1) / kTuning.pattern_checkpoint_rows * kTuning.pattern_checkpoint_rows);
    for (int l = 0; l < L; ++l) scan_b.add_layer(l, *b.layer_rows(l, scan_b.first_row()), scan_b.first_row());
    const auto whole = head_patterns(b);
    check_same_patterns(scan_b.patterns(), whole);
    bool any_induction = false;
    for (const auto& layer : whole)
      for (const HeadPattern& p : layer) any_induction = any_induction || p.induction > 0;
    CHECK(any_induction);
    {  // rows given from before the checkpoint are skipped: the same
      HeadPatternScan again(b, H, scan_a, 37);
      for (int l = 0; l < L; ++l) again.add_layer(l, *b.layer_probs(l), 0);
      check_same_patterns(again.patterns(), whole);
    }
    // no reuse: fewer shared rows than the checkpoint, a key before it labelled otherwise, or a
    // previous scan that did not read every head
    CHECK(HeadPatternScan(b, H, scan_a, 20).first_row() == 0);
    ForwardResult relabelled = b;
    relabelled.tokens[3] = "[SEP]";
    CHECK(HeadPatternScan(relabelled, H, scan_a, 37).first_row() == 0);
    auto partial = std::make_shared<HeadPatternScan>(a, H);
    partial->add_layer(0, *a.layer_probs(0), 0);
    CHECK(HeadPatternScan(b, H, partial, 37).first_row() == 0);
    CHECK_THROWS_WITH(scan_b.add_layer(0, *b.layer_rows(0, 40), 40), Catch::Contains("head patterns need rows"));
  }
  std::filesystem::remove_all(dir);
}
