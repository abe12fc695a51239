// Decoder models without Python: the cpu backend against the reference on grouped-query,
// rotary, gated, RMSNorm layers at awkward lengths; the model's own causal mask and sliding
// window; next tokens and the logit lens against their definitions; the regex rewrite and
// byte-level BPE worked out by hand; readable labels; what decoders refuse (cross mode,
// training). (Exactness against transformers and tokenizers is tests/crosscheck/hf_decoders.py.)
#include <algorithm>
#include <cmath>
#include <functional>
#include <filesystem>

#include "engine/analysis/methods.h"
#include "engine/compute/forward.h"
#include "engine/compute/hooks.h"
#include "engine/text/input.h"
#include "engine/compute/lm.h"
#include "engine/compute/plan.h"
#include "engine/text/regex.h"
#include "engine/train/trainer.h"
#include "tests/engine/hf_test_model.h"
#include "tests/engine/pass_bound.h"
#include "tests/engine/test_util.h"
#include "tests/engine/tolerance.h"

using namespace attnlab;
using namespace attnlab::test;
namespace fs = std::filesystem;

namespace {

std::string scratch(const std::string& name) {
  return scratch_dir("dec", name);
}

}  // namespace

TEST_CASE(
    "decoder layers: cpu matches reference (GQA, RoPE, SwiGLU, RMSNorm, window, q/k norm, head_dim apart) at T = 1, 7, "
    "63",
    "[decoders]") {
  const std::string dir = scratch("llama");
  // Llama, Mistral with a window of 5, Qwen3 (q_norm / k_norm), Qwen3 with heads of 6 over a hidden
  // size of 16 (wider than 16 / 4 heads, as Qwen3-0.6B's), Llama with heads of 2 (narrower)
  for (const int variant : {0, 5, -1, -6, -2}) {
    const int window = std::max(0, variant), head_dim = variant < -1 ? -variant : 0;
    const bool qwen3 = variant < 0 && variant != -2;
    CAPTURE(variant);
    const Model m = tiny_decoder(dir, false, window, qwen3, head_dim);
    REQUIRE(m.config.qk_norm == qwen3);
    CHECK(m.summary().find(head_dim ? "4 heads (2 key/value heads), " + std::to_string(head_dim) + " wide, hidden 16"
                                    : std::string("4 heads (2 key/value heads), hidden 16")) != std::string::npos);
    REQUIRE(m.config.head_dim() == (head_dim ? head_dim : 4));
    REQUIRE(m.weights.layers[0].wq.shape == std::vector<int64_t>{4 * m.config.head_dim(), 16});
    REQUIRE(m.weights.layers[0].wo.shape == std::vector<int64_t>{16, 4 * m.config.head_dim()});
    REQUIRE(m.config.kv_heads() == 2);
    REQUIRE(m.config.num_heads == 4);
    for (const int T : {1, 7, 63}) {
      ForwardRequest req;
      req.ids = random_ids(T, m.config.vocab_size, static_cast<uint64_t>(T));
      auto ref = make_backend("reference");
      auto cpu = make_backend("cpu");
      const ForwardResult a = run_forward(m, *ref, req), b = run_forward(m, *cpu, req);
      const PassBound tol = pass_bound(m, req, a);  // float32 passes of the same values (tests/engine/pass_bound.h)
      for (int l = 0; l < m.config.num_layers; ++l)
        CHECK(max_abs_diff(a.attention[l], b.attention[l]) <= tol.probs[static_cast<size_t>(l)]);
      CHECK(max_abs_diff(a.hidden, b.hidden) <= tol.hidden);
      // the model's own mask: causal, and the config's sliding_window W keys (i - W + 1 .. i, as
      // transformers masks it since 4.53)
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j) {
          const bool visible = j <= i && (window == 0 || i - j < window);
          CHECK(b.mask.is_blocked(0, i, j) == !visible);
          if (!visible) CHECK(b.attention[0].data[static_cast<size_t>(i * T + j)] == 0.0f);
        }
      REQUIRE(b.next_tokens.size() == 10);
      CHECK(b.next_tokens[0].second >= b.next_tokens[9].second);
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("GPT-2: Conv1D weights read transposed, causal, tied head", "[decoders]") {
  const std::string dir = scratch("gpt2");
  const Model m = tiny_decoder(dir, true);
  CHECK(m.hf.architecture == "GPT2LMHeadModel");
  CHECK(m.config.tied_lm_head);
  CHECK(m.config.causal);
  ForwardRequest req;
  req.ids = {5, 100, 200, 258};
  auto cpu = make_backend("cpu");
  const ForwardResult r = run_forward(m, *cpu, req);
  CHECK(r.attention[0].data[1] == 0.0f);  // query 0 never sees key 1
  // the top next token is the arg-max of hidden[last] . embedding rows (the tied head)
  const int E = m.config.embed_size, T = 4;
  int best = -1;
  double best_v = -1e30;
  for (int v = 0; v < m.config.vocab_size; ++v) {
    double s = 0;
    for (int e = 0; e < E; ++e) s += r.hidden.at(T - 1, e) * m.weights.embedding.at(v, e);
    if (s > best_v) best_v = s, best = v;
  }
  CHECK(r.next_tokens[0].first == best);
  // cross mode is for encoders
  req.cross_ids = {1, 2};
  CHECK_THROWS_WITH(run_forward(m, *cpu, req), Catch::Contains("causal language model"));
  fs::remove_all(dir);
}

TEST_CASE("logit lens: the last layer is the model's prediction; rows are probabilities", "[decoders]") {
  const std::string dir = scratch("lens");
  const Model m = tiny_decoder(dir);
  const std::vector<int> ids = random_ids(9, m.config.vocab_size, 4);
  auto cpu = make_backend("cpu");
  const LogitLens lens = logit_lens(m, *cpu, ids);
  REQUIRE(lens.layers == 2);
  REQUIRE(lens.T == 9);
  ForwardRequest req;
  req.ids = ids;
  const ForwardResult r = run_forward(m, *cpu, req);
  // The same backend on the same ids: the same hidden states. The two LM-head products (9 rows at
  // once, 1 row) may sum in other orders: each logit within sum_bound(E, sum_e |h_e W_ve|); the
  // probability 1 / sum_v e^{l_v - l_max} (summed in double) then moves by at most p (e^{2 dl} - 1),
  // and both round it to float once.
  const int E = m.config.embed_size, V = m.config.vocab_size;
  const Tensor& Wlm = m.config.tied_lm_head ? m.weights.embedding : m.weights.lm_head;
  std::vector<double> bounds(9);  // per position, how far the lens's probability may be from top_next_tokens'
  for (int t = 0; t < 9; ++t) {
    const auto top = top_next_tokens(m, r.hidden, t, 1);
    double dl = 0;
    for (int v = 0; v < V; ++v) {
      double a = 0;
      for (int e = 0; e < E; ++e) a += std::fabs(static_cast<double>(r.hidden.at(t, e)) * Wlm.at(v, e));
      dl = std::max(dl, sum_bound(E, a));
    }
    bounds[static_cast<size_t>(t)] = top[0].second * (std::expm1(2 * dl) + 2 * kU32);
    CHECK(lens.top_id[static_cast<size_t>(9 + t)] == top[0].first);
    CHECK(std::fabs(lens.top_prob[static_cast<size_t>(9 + t)] - top[0].second) <=
          top[0].second * (std::expm1(2 * dl) + 2 * kU32));
    CHECK(lens.top_prob[static_cast<size_t>(t)] > 0.0f);
    CHECK(lens.top_prob[static_cast<size_t>(t)] <= 1.0f);
  }
  {  // a window of positions: the LM head runs for its rows alone, the same predictions (the last
     // layer's rows within the bound above of top_next_tokens', as the whole lens's)
    const LogitLens part = logit_lens(m, *cpu, ids, nullptr, 3, 4);
    REQUIRE(part.T == 4);
    CHECK(part.first == 3);
    REQUIRE(part.top_id.size() == 8u);
    for (int t = 0; t < 4; ++t) {
      const auto top = top_next_tokens(m, r.hidden, 3 + t, 1);
      CHECK(part.top_id[static_cast<size_t>(4 + t)] == top[0].first);
      CHECK(std::fabs(part.top_prob[static_cast<size_t>(4 + t)] - top[0].second) <= bounds[static_cast<size_t>(3 + t)]);
      CHECK(part.top_prob[static_cast<size_t>(t)] > 0.0f);  // layer 0's rows are probabilities too
      CHECK(part.top_prob[static_cast<size_t>(t)] <= 1.0f);
    }
    CHECK_THROWS_WITH(logit_lens(m, *cpu, ids, nullptr, 7, 3), Catch::Contains("positions 7..9 of a sequence of 9"));
  }
  fs::remove_all(dir);
}

TEST_CASE("RMSNorm, RoPE and Mul: the cpu ops equal the reference on shapes 1, odd and long", "[decoders][ops]") {
  // The cpu ops run the reference's row kernels (ops.h) with the rows split over threads: any
  // split gives the same bits, so the check is equality, on shapes below and above the size
  // where the cpu ops start using threads (2^15 elements).
  auto ref = make_reference_ops();
  auto cpu = make_ops("cpu");
  for (const auto& [N, E] : {std::pair{1, 1}, std::pair{7, 5}, std::pair{33, 64}, std::pair{1500, 48}}) {
    CAPTURE(N, E);
    const Tensor x = random_tensor({N, E}, 11), g = random_tensor({E}, 12), dy = random_tensor({N, E}, 13);
    Tensor y1, y2;
    ref->rms_norm(x, g, 1e-6f, y1);
    cpu->rms_norm(x, g, 1e-6f, y2);
    CHECK(max_abs_diff(y1, y2) == 0.0);
    for (const bool with_dg : {true, false}) {
      Tensor dx1, dx2, dg1 = with_dg ? Tensor({E}) : Tensor(), dg2 = dg1;
      ref->rms_norm_backward(x, g, 1e-6f, dy, dx1, dg1);
      cpu->rms_norm_backward(x, g, 1e-6f, dy, dx2, dg2);
      CHECK(max_abs_diff(dx1, dx2) == 0.0);
      if (with_dg) CHECK(max_abs_diff(dg1, dg2) == 0.0);
    }
    Tensor a1 = x, a2 = x;
    ref->mul(a1, dy);
    cpu->mul(a2, dy);
    CHECK(max_abs_diff(a1, a2) == 0.0);
    if (E % 2 == 0 && E >= 4) {  // two heads of D = E / 2 (D even), positions n % T with T = 9
      const int D = E / 2, T = 9;
      Tensor c, s;
      rope_tables(T, D, 10000.0f, c, s);
      Tensor r1 = x, r2 = x;
      ref->rope(r1, c, s, D, T, false);
      cpu->rope(r2, c, s, D, T, false);
      CHECK(max_abs_diff(r1, r2) == 0.0);
      // the inverse undoes it: per pair (a, b) of norm <= sqrt(2) max|x|, each rotation rounds two
      // products and a sum per output (<= 3 u of the pair's norm) and its cos, sin tables are
      // rounded (cos^2 + sin^2 = 1 within 2 u): 2 x 4 u sqrt(2) max|x| < 12 u max|x|; 16 u to spare
      cpu->rope(r2, c, s, D, T, true);
      CHECK(max_abs_diff(r2, x) <= 16 * kU32 * max_abs(x));
    }
  }
}

TEST_CASE("rotary tables: angle 0 at position 0, the rotation keeps lengths", "[decoders]") {
  Tensor c, s;
  rope_tables(5, 8, 10000.0f, c, s);
  for (int i = 0; i < 4; ++i) {
    CHECK(c.at(0, i) == 1.0f);
    CHECK(s.at(0, i) == 0.0f);
  }
  // inv_freq_0 = 1 and angle 1 exactly: cos(1) rounded to float once, u relative (2 u leaves room
  // for the double cos's own last bit)
  CHECK(c.at(1, 0) == Approx(std::cos(1.0)).epsilon(2 * kU32));
  // inv_freq_1 = 1 / 10000^(2/8) = 1 / 10: float pow (1 ulp = 2 u), 1 / (u) and 3 * (u) give the
  // angle 0.3 within 4 u relative, which moves sin by (0.3 cos 0.3 / sin 0.3) 4 u < 4 u relative;
  // then one rounding: 5 u; 8 u allows a float pow of 2 ulp
  CHECK(s.at(3, 1) == Approx(std::sin(3.0 / 10.0)).epsilon(8 * kU32));
  // c and s each rounded once, c * c, s * s and their sum once each: (1 + u)^4 - 1 <= gamma_4
  for (int t = 0; t < 5; ++t)
    for (int i = 0; i < 4; ++i)
      CHECK(c.at(t, i) * c.at(t, i) + s.at(t, i) * s.at(t, i) == Approx(1.0).epsilon(gamma32(4)));
}

TEST_CASE("regex: Oniguruma's \\s is White_Space; GPT-2's pattern splits as tokenizers does", "[decoders][regex]") {
  CHECK(Regex::to_pcre2(R"(\s+)").find("\\x{3000}") != std::string::npos);
  CHECK(Regex::to_pcre2(R"([^\s\p{L}])").rfind("[^\\x{9}", 0) == 0);
  const Regex ws(R"(\s)");
  CHECK(ws.find_all("a\u180eb").empty());  // MONGOLIAN VOWEL SEPARATOR is not White_Space
  CHECK(ws.find_all("a\u3000b").size() == 1);
  const Regex gpt2(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)");
  const std::string text = "Hello world's  123!";
  std::vector<std::string> parts;
  for (const auto& [b, e] : gpt2.find_all(text)) parts.push_back(text.substr(b, e - b));
  CHECK(parts == std::vector<std::string>{"Hello", " world", "'s", " ", " 123", "!"});
  CHECK_THROWS_WITH(Regex("(unclosed"), Catch::Contains("does not compile"));
}

TEST_CASE("byte-level BPE: merges by rank, BOS from the template, readable labels", "[decoders][tokenizer]") {
  const auto tok = HfTokenizer::from_tokenizer_json(byte_level_tokenizer_json(true));
  const Encoding e = tok->encode("the the w\xc3\xa9");
  // "the" -> t, he (no "Ġ" before the first word); " the" -> Ġthe; " w" -> Ġw; "é" -> two bytes
  CHECK(e.ids == std::vector<int>{260, 't', 256, 258, 259, 0xC3, 0xA9});
  CHECK(e.special[0] == 1);
  const std::vector<std::string> labels = tok->readable(e);
  CHECK(labels == std::vector<std::string>{"<|endoftext|>", "t", "he", "\u2423the", "\u2423w", "\u00e9", "\u2026"});
  CHECK(tok->describe() == "byte-level BPE, 261 tokens");
  // embedding rows past the tokenizer (padded vocabularies) are named by number, never looked up
  CHECK(tok->readable_token(4675) == "#4675");
  CHECK(tok->readable_token(0xC3) == "<0xC3>");  // half a character: its byte, named as byte fallback names it
  // controls by their code (their Unicode pictures are in no font we ship with), white space as marks
  CHECK(tok->readable_token(4) == "<0x04>");
  CHECK(tok->readable_token(0x7F) == "<0x7F>");
  CHECK(tok->readable_token('\n') == "\u21B5");
  CHECK(tok->readable(tok->encode("\xc2\x85")) == std::vector<std::string>{"<|endoftext|>", "<U+0085>", "\u2026"});
  const Encoding s = tok->encode("a<|endoftext|>b");  // a typed special token stays whole
  CHECK(s.ids == std::vector<int>{260, 'a', 260, 'b'});
}

TEST_CASE("decoders refuse training with a clear message", "[decoders][errors]") {
  const std::string dir = scratch("train");
  const Model m = tiny_decoder(dir);
  std::vector<Example> rows = {{"good", "pos"}, {"bad", "neg"}};
  CHECK_THROWS_WITH(fine_tune_setup(m, rows, rows, 1), Catch::Contains("causal language model"));
  fs::remove_all(dir);
}

TEST_CASE("value norms with heads set apart from the hidden size read each head's slice of W_O",
          "[decoders][analysis]") {
  const std::string dir = scratch("analysis-head-dim");
  const Model m = tiny_decoder(dir, false, 0, true, 6);  // 4 heads of 6 (2 key/value heads) over 16
  const ModelConfig& c = m.config;
  const int T = 5, H = c.num_heads, D = c.head_dim(), KV = c.kv_heads(), E = c.embed_size;
  auto cpu = make_backend("cpu");
  ForwardRequest req;
  req.ids = random_ids(T, c.vocab_size, 4);
  HookSpec keep;
  keep.cache = {"blocks.*.attn.hook_v"};
  ForwardRequest with = req;
  with.hooks = &keep;
  const ForwardResult r = run_forward(m, *cpu, with);
  const Tensor vn = value_norm_attention(m, *cpu, req);
  REQUIRE(vn.shape == std::vector<int64_t>{c.num_layers, H, T, T});
  for (int l = 0; l < c.num_layers; ++l) {
    const Tensor& v = r.cache.at("blocks." + std::to_string(l) + ".attn.hook_v");  // (T, KV, D)
    REQUIRE(v.numel() == static_cast<int64_t>(T) * KV * D);
    const Tensor& Wo = m.weights.layers[static_cast<size_t>(l)].wo;  // [E, H * D]
    for (int h = 0; h < H; ++h)
      for (int j = 0; j < T; ++j) {
        // ||f^h(x_j)|| = ||W_O[:, hD:(h+1)D] v_j^g||, in double from the stored values
        double n2 = 0;
        for (int e = 0; e < E; ++e) {
          double f = 0;
          for (int d = 0; d < D; ++d)
            f +=
                static_cast<double>(Wo.at(e, h * D + d)) * v.data[(static_cast<size_t>(j) * KV + h / (H / KV)) * D + d];
          n2 += f * f;
        }
        const double a = r.attention[static_cast<size_t>(l)].data[(static_cast<size_t>(h) * T + (T - 1)) * T + j];
        const double got = vn.data[((static_cast<size_t>(l) * H + h) * T + (T - 1)) * T + j];
        // the same values and probabilities; f's D-term products and the E-term norm in float32
        // round within gamma(D) and gamma(E) relative (all terms of f^2 are non-negative), and
        // a ||f|| once more
        CHECK(got == Approx(a * std::sqrt(n2)).epsilon(2 * gamma32(D) + gamma32(E) + gamma32(2)).margin(1e-30));
      }
  }
  fs::remove_all(dir);
}

TEST_CASE("analysis on a grouped-query decoder: value norms, rollout, head importance of the next token",
          "[decoders][analysis]") {
  const std::string dir = scratch("analysis");
  const Model m = tiny_decoder(dir);
  auto cpu = make_backend("cpu");
  ForwardRequest req;
  req.ids = random_ids(7, m.config.vocab_size, 8);
  const ForwardResult r = run_forward(m, *cpu, req);
  const Tensor vn = value_norm_attention(m, *cpu, req);
  REQUIRE(vn.shape == std::vector<int64_t>{2, 4, 7, 7});
  // a_ij ||f^h(x_j)||: for a fixed head and key, the ratio to a_ij is the same for every query
  // that sees the key; heads 0 and 1 share a key/value head but not their slice of W_O
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 4; ++h)
      for (int j = 0; j < 7; ++j) {
        double ratio = -1;
        for (int i = j; i < 7; ++i) {
          const double a = r.attention[l].data[(static_cast<size_t>(h) * 7 + i) * 7 + j];
          const double v = vn.data[((static_cast<size_t>(l) * 4 + h) * 7 + i) * 7 + j];
          // v = float(a ||f||) rounds once (the same a: the same backend on the same ids), so v / a
          // is ||f|| within u, two such ratios within 2 u; the guard keeps a (and v) far above
          // FLT_MIN, where the relative rounding would not hold
          if (a < 1e-6) continue;
          if (ratio < 0) ratio = v / a;
          CHECK(v / a == Approx(ratio).epsilon(gamma32(2)));
        }
        CHECK(vn.data[((static_cast<size_t>(l) * 4 + h) * 7 + 0) * 7 + 6] == 0.0f);  // causal: blocked stays 0
      }
  // A backend that keeps no values (OpenCL) takes the other path: recomputed from layer inputs.
  struct NoValues final : Backend {
    std::unique_ptr<Backend> inner = make_cpu_backend();
    std::string name() const override { return "cpu without values"; }
    EncodeOutput encode(const Model& model, const std::vector<int>& ids, const AttnMask& mask,
                        const EncodeOptions& options) override {
      EncodeOutput o = inner->encode(model, ids, mask, options);
      CHECK(o.values.size() == (options.keep_values ? 2u : 0u));
      o.values.clear();
      return o;
    }
    Tensor cross_attention(const Model& model, int layer, const Tensor& xa, const Tensor& xb,
                           const AttnMask& mask) override {
      return inner->cross_attention(model, layer, xa, xb, mask);
    }
  } no_values;
  const Tensor recomputed = value_norm_attention(m, no_values, req);
  REQUIRE(recomputed.shape == vn.shape);
  // Only the values differ: recomputed by another call (another summation order) from the same
  // layer inputs x, whose rows RMSNorm leaves of norm <= sqrt(E) max|g|, so a value entry (E terms)
  // is at most v_abs = ||x||_2 max_o ||W_v,o||_2 (Cauchy-Schwarz) and two evaluations differ by
  // sum_bound(E, v_abs). f_j = W_O,h v_j,h then moves by at most ||W_O,h||_F sqrt(D) of that, plus
  // the E entries' own D-term roundings (sum_bound(D, ||v_j,h||_2 ||W_O,h||_F) each), and ||f_j||
  // by as much; the probabilities a (<= 1) are the same; each side rounds a ||f|| once.
  double value_tol = 0;
  {
    const int E = m.config.embed_size, D = m.config.head_dim();
    for (const LayerWeights& L : m.weights.layers) {
      double wv = 0, wo = 0;
      for (int64_t o = 0; o < L.wv.dim(0); ++o) {
        double n2 = 0;
        for (int e = 0; e < E; ++e) n2 += std::pow(L.wv.at(o, e), 2);
        wv = std::max(wv, std::sqrt(n2));
      }
      for (int h = 0; h < m.config.num_heads; ++h) {
        double f2 = 0;
        for (int e = 0; e < E; ++e)
          for (int d = 0; d < D; ++d) f2 += std::pow(L.wo.at(e, h * D + d), 2);
        wo = std::max(wo, std::sqrt(f2));
      }
      const double x_norm = std::sqrt(static_cast<double>(E)) * max_abs(L.ln1_g);
      const double v_abs = x_norm * wv + max_abs(L.bv), sqrt_d = std::sqrt(static_cast<double>(D));
      const double f_move =
          wo * sqrt_d * sum_bound(E, v_abs) + std::sqrt(static_cast<double>(E)) * sum_bound(D, sqrt_d * v_abs * wo);
      value_tol = std::max(value_tol, f_move);
    }
    value_tol += 2 * kU32 * max_abs(vn);
  }
  for (size_t k = 0; k < vn.data.size(); ++k) CHECK(std::fabs(recomputed.data[k] - vn.data[k]) <= value_tol);
  const Tensor roll = attention_rollout(m, *cpu, req);
  // Row sums of a product of L = 2 row-stochastic maps: each map's rows sum to 1 within 2 u (its
  // entries rounded once), each T-term product adds gamma_T of its non-negative terms: L gamma_{T+2}.
  for (int i = 0; i < 7; ++i) {
    double s = 0;
    for (int j = 0; j < 7; ++j) s += roll.at(i, j);
    CHECK(s == Approx(1.0).epsilon(2 * gamma32(7 + 2)));
    for (int j = i + 1; j < 7; ++j) CHECK(roll.at(i, j) == 0.0f);  // nothing from the future
  }
  const Tensor imp = head_importance(m, *cpu, req, -1);
  REQUIRE(imp.shape == std::vector<int64_t>{2, 4});
  double any = 0;
  for (float v : imp.data) any += std::fabs(v);
  CHECK(any > 0.0);
  fs::remove_all(dir);
}

TEST_CASE("grouped-query attention forward and backward: cpu matches the reference at T = 1, 7, 33",
          "[decoders][train]") {
  auto ref = make_reference_ops();
  auto cpu = make_ops("cpu");
  for (const int KV : {1, 2})
    for (const int T : {1, 7, 33}) {
      CAPTURE(KV, T);
      AttnArgs a;
      a.B = 2, a.T = T, a.H = 4, a.D = 3, a.KV = KV;
      const Tensor Q = random_tensor({2 * T, 12}, 1), K = random_tensor({2 * T, KV * 3}, 2),
                   V = random_tensor({2 * T, KV * 3}, 3), dctx = random_tensor({2 * T, 12}, 4);
      Tensor P, ctx;
      ref->attention(a, Q, K, V, P, ctx);
      for (const bool causal : {false, true}) {  // the forward too: batched, grouped heads, with and without causality
        AttnArgs f = a;
        f.causal = causal;
        Tensor P1, c1, P2, c2;
        ref->attention(f, Q, K, V, P1, c1);
        cpu->attention(f, Q, K, V, P2, c2);
        REQUIRE(c2.shape == c1.shape);
        // scores: D products (gamma_{D+2} of sum |q_d k_d| with the scale); softmax_bound over T
        // keys, relative to p; the context: that times sum_j P_ij |V_j| plus its own T-term sum
        double qk = 0, pv = 0;
        for (int b = 0; b < 2; ++b)
          for (int h = 0; h < 4; ++h) {
            const int g = f.kv_head(h);
            for (int i = 0; i < T; ++i) {
              for (int j = 0; j < T; ++j) {
                double t = 0;
                for (int d = 0; d < 3; ++d) t += std::fabs(Q.at(b * T + i, h * 3 + d) * K.at(b * T + j, g * 3 + d));
                qk = std::max(qk, t * f.score_scale());
              }
              for (int d = 0; d < 3; ++d) {
                double t = 0;
                for (int j = 0; j < T; ++j)
                  t += P1.data[((static_cast<size_t>(b) * 4 + h) * T + i) * T + j] *
                       std::fabs(V.at(b * T + j, g * 3 + d));
                pv = std::max(pv, t);
              }
            }
          }
        const double sigma = softmax_bound(T, gamma32(3 + 2) * qk);
        CHECK(max_abs_diff(P1, P2) <= sigma);
        CHECK(max_abs_diff(c1, c2) <= sigma * pv + sum_bound(T, pv));
      }
      Tensor q1, k1, v1, q2, k2, v2;
      ref->attention_backward(a, Q, K, V, P, dctx, q1, k1, v1, nullptr);
      cpu->attention_backward(a, Q, K, V, P, dctx, q2, k2, v2, nullptr);
      REQUIRE(k2.shape == K.shape);
      const AttnGradBound tol = attention_backward_bound(a, Q, K, V, P, P, dctx);  // tests/engine/test_util.h
      CHECK(max_abs_diff(q1, q2) <= tol.dq);
      CHECK(max_abs_diff(k1, k2) <= tol.dk);
      CHECK(max_abs_diff(v1, v2) <= tol.dv);
    }
}

TEST_CASE("decoder backward (RMSNorm, RoPE, SwiGLU, GQA, LM head) matches finite differences of a logit",
          "[decoders][fd]") {
  // Llama (GQA), Mistral (window 3), GPT-2, Qwen3 (q/k norm), Qwen3 with heads of 6 over hidden 16
  for (const int kind : {0, 1, 2, 3, 4}) {
    CAPTURE(kind);
    const std::string dir = scratch("fd" + std::to_string(kind));
    Model m = tiny_decoder(dir, kind == 2, kind == 1 ? 3 : 0, kind >= 3, kind == 4 ? 6 : 0);
    ForwardRequest req;
    req.ids = random_ids(6, m.config.vocab_size, 3);
    const int target = 17;
    ModelWeights grads = zeros_like(m.weights);
    const PredictionGradients g = prediction_gradients(m, req, target, &grads);
    REQUIRE(g.target == target);
    REQUIRE(g.dprobs.size() == 2);
    auto y = [&] { return prediction_gradients(m, req, target).y; };
    // y's float32 error: the last hidden row's (pass_bound, any float32 pass) through the LM-head
    // row (||W_t||_1 of it) plus that E-term product's own rounding. The steps below move the
    // model's scales by O(h), which this leaves out.
    double f_err = 0;
    {
      auto cpu = make_backend("cpu");
      const ForwardResult base = run_forward(m, *cpu, req);
      const double hidden_err = pass_bound(m, req, base).hidden;
      const Tensor& Wlm = m.config.tied_lm_head ? m.weights.embedding : m.weights.lm_head;
      const int E = m.config.embed_size, last = static_cast<int>(req.ids.size()) - 1;
      double w1 = 0, terms = 0;
      for (int e = 0; e < E; ++e) {
        w1 += std::fabs(Wlm.at(target, e));
        terms += std::fabs(static_cast<double>(base.hidden.at(last, e)) * Wlm.at(target, e));
      }
      f_err = w1 * hidden_err + sum_bound_best(E, terms);
    }
    const auto params = parameters(m.weights);
    const auto gparams = parameters(grads);
    REQUIRE(params.size() == gparams.size());
    std::mt19937 pick(2);
    int checked = 0;
    for (size_t p = 0; p < params.size(); ++p) {
      const size_t n = params[p]->data.size();
      for (int r = 0; r < 3 && n > 0; ++r) {
        const size_t k = pick() % n;
        Tensor& x = *params[p];
        const float h = 1e-2f, keep = x.data[k];
        auto at = [&](float d) {
          x.data[k] = keep + d;
          const double v = y();
          x.data[k] = keep;
          return v;
        };
        const double up = at(h), down = at(-h), up2 = at(2 * h), down2 = at(-2 * h);
        const double fd = (up - down) / (2.0 * h), an = gparams[p]->data[k];
        // y is smooth (SiLU, tanh-GELU, RMSNorm, RoPE, softmax): f''' measured (tolerance.h)
        const double bound = measured_central_diff_bound(h, keep, f_err, up, down, up2, down2);
        INFO("parameter " << p << " entry " << k << ": finite difference " << fd << ", backward " << an << ", bound "
                          << bound);
        CHECK(std::fabs(fd - an) <= bound);
        ++checked;
      }
    }
    CHECK(checked > 30);
    fs::remove_all(dir);
  }
}

TEST_CASE("grad-attention: the identity plus non-negative relevance; causal models look only back",
          "[decoders][analysis]") {
  const std::string dir = scratch("grad");
  const Model m = tiny_decoder(dir);
  ForwardRequest req;
  req.ids = random_ids(8, m.config.vocab_size, 5);
  int used = -1;
  const Tensor R = grad_attention(m, req, -1, &used);
  auto cpu = make_backend("cpu");
  CHECK(used == run_forward(m, *cpu, req).next_tokens.at(0).first);  // default: the top next token
  double off = 0;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) {
      CHECK(R.at(i, j) >= (i == j ? 1.0f : 0.0f));
      if (j > i) CHECK(R.at(i, j) == 0.0f);
      if (j != i) off += R.at(i, j);
    }
  CHECK(off > 0.0);
  // ablating every head of both layers leaves no attention to weight: R = I
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 4; ++h) req.ablate.push_back({l, h});
  const Tensor I = grad_attention(m, req, used);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) CHECK(I.at(i, j) == (i == j ? 1.0f : 0.0f));
  fs::remove_all(dir);
}

// The rotary frequencies of each rope_type written from the papers' formulas in double (the
// engine follows transformers' float32 steps): every float32 step is within a few units of
// roundoff of the exact value, so 16 u relative (of the largest frequency, 1) bounds the
// difference of any frequency; the scale within 4 u.
TEST_CASE("rotary scaling: linear, dynamic, llama3, yarn and longrope by their definitions", "[decoders][rope]") {
  const int D = 16, half = D / 2;
  ModelConfig c;
  c.rope_theta = 10000.0f;
  c.max_len = 256;
  auto base_freq = [&](int i) { return 1.0 / std::pow(10000.0, 2.0 * i / D); };
  auto check = [&](const RopeFrequencies& f, const std::function<double(int)>& want, double scale) {
    REQUIRE(f.inv_freq.size() == static_cast<size_t>(half));
    for (int i = 0; i < half; ++i) {
      CAPTURE(i);
      CHECK(std::fabs(f.inv_freq[static_cast<size_t>(i)] - want(i)) <= 16 * kU32);
    }
    CHECK(f.scale == Approx(scale).epsilon(4 * kU32));
  };
  check(rope_frequencies(c, D, 10), base_freq, 1.0);
  c.rope_scaling.type = "linear", c.rope_scaling.factor = 4;
  check(
      rope_frequencies(c, D, 10), [&](int i) { return base_freq(i) / 4; }, 1.0);
  c.rope_scaling.type = "dynamic";  // only past max_position_embeddings: the default up to it
  check(rope_frequencies(c, D, 256), base_freq, 1.0);
  // llama3 (Llama 3.1): wavelengths past old / low divided by the factor, under old / high kept,
  // between blended by (old / wavelength - low) / (high - low)
  c.rope_scaling = RopeScaling{};
  c.rope_scaling.type = "llama3", c.rope_scaling.factor = 8, c.rope_scaling.original_max = 64;
  c.rope_scaling.low_freq_factor = 1, c.rope_scaling.high_freq_factor = 4;
  int kept = 0, divided = 0, blended = 0;
  check(
      rope_frequencies(c, D, 10),
      [&](int i) {
        const double f = base_freq(i), wl = 2 * M_PI / f;
        if (wl < 64.0 / 4) return ++kept, f;
        if (wl > 64.0 / 1) return ++divided, f / 8;
        const double s = (64.0 / wl - 1) / (4 - 1);
        return ++blended, (1 - s) * f / 8 + s * f;
      },
      1.0);
  CHECK(kept > 0);  // this D and length cross all three bands
  CHECK(divided > 0);
  CHECK(blended > 0);
  // yarn: a ramp over the correction range [floor(lo), ceil(hi)] from extrapolation (the plain
  // frequency) to interpolation (divided by the factor); scale 0.1 ln(factor) + 1
  c.rope_scaling = RopeScaling{};
  c.rope_scaling.type = "yarn", c.rope_scaling.factor = 4, c.rope_scaling.original_max = 64;
  auto corr = [&](double rot) { return D * std::log(64.0 / (rot * 2 * M_PI)) / (2 * std::log(10000.0)); };
  const double lo = std::max(0.0, std::floor(corr(32))), hi = std::min(D - 1.0, std::ceil(corr(1)));
  check(
      rope_frequencies(c, D, 10),
      [&](int i) {
        const double ramp = std::clamp((i - lo) / (hi - lo), 0.0, 1.0), f = base_freq(i);
        return f / 4 * ramp + f * (1 - ramp);
      },
      0.1 * std::log(4.0) + 1);
  c.rope_scaling.mscale = 0.707, c.rope_scaling.mscale_all_dim = 1.0;  // DeepSeek's ratio of two mscales
  CHECK(rope_frequencies(c, D, 10).scale ==
        Approx((0.1 * 0.707 * std::log(4.0) + 1) / (0.1 * std::log(4.0) + 1)).epsilon(4 * kU32));
  // longrope: divided by short_factor up to original_max positions, by long_factor past them;
  // scale sqrt(1 + ln(max / original) / ln(original))
  c.rope_scaling = RopeScaling{};
  c.rope_scaling.type = "longrope", c.rope_scaling.original_max = 16;
  for (int i = 0; i < half; ++i) {
    c.rope_scaling.short_factor.push_back(1.0f + 0.25f * i);
    c.rope_scaling.long_factor.push_back(2.0f + i);
  }
  const double s = std::sqrt(1 + std::log(256.0 / 16) / std::log(16.0));
  check(
      rope_frequencies(c, D, 16), [&](int i) { return base_freq(i) / (1.0 + 0.25 * i); }, s);
  check(
      rope_frequencies(c, D, 17), [&](int i) { return base_freq(i) / (2.0 + i); }, s);
  // the tables carry the scale: cos at position 0 is the scale itself
  Tensor cs, sn;
  rope_tables(17, D, c, cs, sn);
  CHECK(cs.at(0, 3) == static_cast<float>(s));
  CHECK(sn.at(0, 3) == 0.0f);
}

TEST_CASE("configs as transformers 5.x writes them: rope_parameters, layer_types, the sliding window's W keys",
          "[decoders][hf]") {
  nlohmann::json cfg = {{"model_type", "llama"},
                        {"vocab_size", 261},
                        {"hidden_size", 16},
                        {"intermediate_size", 24},
                        {"num_hidden_layers", 2},
                        {"num_attention_heads", 4},
                        {"num_key_value_heads", 2},
                        {"rope_parameters", {{"rope_theta", 500000.0}, {"rope_type", "default"}}},
                        {"layer_types", {"full_attention", "full_attention"}}};
  HfInfo info;
  CHECK(parse_hf_config(cfg.dump(), info).rope_theta == 500000.0f);
  // both: read as 5.x reads them (convert_rope_params_to_dict), the dict's theta first
  cfg["rope_theta"] = 10000.0;
  CHECK(parse_hf_config(cfg.dump(), info).rope_theta == 500000.0f);
  cfg["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};  // a non-empty rope_scaling is the dict
  CHECK(parse_hf_config(cfg.dump(), info).rope_scaling.type == "linear");
  CHECK(parse_hf_config(cfg.dump(), info).rope_theta == 10000.0f);  // then the top-level theta
  cfg.erase("rope_scaling");
  // Llama 3.2's rotary scaling as 5.x writes it (rope_parameters) and as 4.x did (rope_scaling)
  cfg["rope_parameters"] = {{"rope_theta", 500000.0},  {"rope_type", "llama3"},
                            {"factor", 32.0},          {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  cfg.erase("rope_theta");
  ModelConfig c = parse_hf_config(cfg.dump(), info);
  CHECK(c.rope_theta == 500000.0f);
  CHECK(c.rope_scaling.type == "llama3");
  CHECK(c.rope_scaling.factor == 32.0);
  CHECK(c.rope_scaling.original_max == 8192);
  nlohmann::json old = cfg;
  old.erase("rope_parameters");
  old["rope_theta"] = 500000.0;
  old["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 32.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
  const ModelConfig c4 = parse_hf_config(old.dump(), info);
  CHECK(c4.rope_scaling.type == "llama3");
  CHECK(c4.rope_scaling.original_max == 8192);
  old["rope_scaling"] = {{"type", "linear"}};  // no factor
  CHECK_THROWS_WITH(parse_hf_config(old.dump(), info), Catch::Contains("rope_type linear needs a positive factor"));
  old["rope_scaling"] = {{"type", "su"}, {"factor", 2.0}};
  CHECK_THROWS_WITH(parse_hf_config(old.dump(), info), Catch::Contains("rope_type \"su\" is not supported"));
  old["rope_scaling"] = {{"rope_type", "longrope"}, {"short_factor", {1.0, 1.0}}, {"long_factor", {1.0, 2.0, 3.0}}};
  CHECK_THROWS_WITH(parse_hf_config(old.dump(), info), Catch::Contains("head_dim / 2 = 2 values each, got 2 and 3"));
  old["rope_scaling"] = nullptr;
  old["partial_rotary_factor"] = 0.5;
  CHECK_THROWS_WITH(parse_hf_config(old.dump(), info), Catch::Contains("partial_rotary_factor"));
  cfg["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "default"}};
  cfg["layer_types"] = {"full_attention", "sliding_attention"};
  CHECK_THROWS_WITH(parse_hf_config(cfg.dump(), info), Catch::Contains("mixes attention kinds"));
  // Mistral's window of W: the W keys i - W + 1 .. i (attnlab counts the W - 1 before i)
  cfg = {{"model_type", "mistral"}, {"vocab_size", 261},        {"hidden_size", 16},        {"intermediate_size", 24},
         {"num_hidden_layers", 2},  {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"sliding_window", 6}};
  CHECK(parse_hf_config(cfg.dump(), info).sliding_window == 5);
  cfg["sliding_window"] = 1;
  CHECK_THROWS_WITH(parse_hf_config(cfg.dump(), info), Catch::Contains("sliding_window 1"));
}
