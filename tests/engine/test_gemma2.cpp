// Gemma 2 without Python: the cpu backend against the reference with its soft caps, sandwich
// norms, scaled embedding and alternating windowed layers; the folder's names and the 1 + w
// gains; Gemma2Config's defaults. (Exactness against transformers' Gemma2ForCausalLM in float64,
// the backward through the caps included (grad-attention, every parameter's gradient of the
// next-token loss), is tests/crosscheck/hf_decoders.py under 5.x: the float32 bounds of pass_bound.h
// compound matrix infinity-norms through each sandwich norm, too loosely here for a
// finite-difference check of a whole Gemma to prove anything.)
#include <cmath>
#include <filesystem>

#include "engine/compute/forward.h"
#include "engine/compute/lm.h"
#include "engine/compute/mask.h"
#include "engine/compute/plan.h"
#include "tests/engine/hf_test_model.h"
#include "tests/engine/pass_bound.h"
#include "tests/engine/test_util.h"

using namespace attnlab;
using namespace attnlab::test;
namespace fs = std::filesystem;

namespace {

Tensor slice_rows(const Tensor& t, int64_t first, int64_t n) {
  Tensor out({n, t.dim(1)});
  std::copy_n(t.ptr() + first * t.dim(1), n * t.dim(1), out.ptr());
  return out;
}

}  // namespace

TEST_CASE(
    "soft-capped attention: the reference is its definition, the cpu equals it forward and backward at T = 1, 7, 33",
    "[decoders][gemma2][ops]") {
  auto ref = make_reference_ops();
  auto cpu = make_ops("cpu");
  for (const int T : {1, 7, 33}) {
    CAPTURE(T);
    AttnArgs a;
    a.B = 2, a.T = T, a.H = 4, a.D = 3, a.KV = 2, a.softcap = 0.7f, a.causal = true, a.window = 4;
    Tensor Q = random_tensor({2 * T, 12}, 1), K = random_tensor({2 * T, 6}, 2);
    for (float& v : Q.data) v *= 3;  // scores up to ~5: the cap (0.7) bites
    const Tensor V = random_tensor({2 * T, 6}, 3), dctx = random_tensor({2 * T, 12}, 4);
    Tensor P1, c1, P2, c2;
    ref->attention(a, Q, K, V, P1, c1);
    cpu->attention(a, Q, K, V, P2, c2);
    // the definition in double: p = softmax_j (cap tanh(q . k / sqrt(D) / cap)) over j in i - 4 .. i
    double worst = 0, moved = 0, qk = 0;
    for (int b = 0; b < 2; ++b)
      for (int h = 0; h < 4; ++h)
        for (int i = 0; i < T; ++i) {
          std::vector<double> s(static_cast<size_t>(T), -INFINITY), raw(static_cast<size_t>(T), -INFINITY);
          for (int j = std::max(0, i - 4); j <= i; ++j) {
            double z = 0, az = 0;
            for (int d = 0; d < 3; ++d) {
              const double t = static_cast<double>(Q.at(b * T + i, h * 3 + d)) * K.at(b * T + j, (h / 2) * 3 + d);
              z += t, az += std::fabs(t);
            }
            z /= std::sqrt(3.0), az /= std::sqrt(3.0);
            qk = std::max(qk, az);
            raw[static_cast<size_t>(j)] = z;
            s[static_cast<size_t>(j)] = 0.7 * std::tanh(z / 0.7);
          }
          auto softmax = [&](const std::vector<double>& x, int j) {
            double m = -INFINITY, sum = 0;
            for (double v : x) m = std::max(m, v);
            for (double v : x) sum += std::exp(v - m);
            return x[static_cast<size_t>(j)] == -INFINITY ? 0.0 : std::exp(x[static_cast<size_t>(j)] - m) / sum;
          };
          for (int j = 0; j < T; ++j) {
            const double want = softmax(s, j);
            const float got = P1.data[((static_cast<size_t>(b) * 4 + h) * T + i) * T + j];
            worst = std::max(worst, std::fabs(got - want) / std::max(want, 1e-30));
            moved = std::max(moved, std::fabs(softmax(raw, j) - want));
          }
        }
    CHECK(worst <= 4 * kU32);  // the reference sums in double and rounds p once
    // cpu: the scores' D products (gamma_{D+2} of sum |q k| with the scale) and the cap's own 8 u
    // of 0.7; softmax_bound over T keys, relative to p
    const double sigma = softmax_bound(T, gamma32(3 + 2) * qk + 8 * kU32 * 0.7);
    CHECK(max_abs_diff(P1, P2) <= sigma);
    if (T > 1) CHECK(moved > 1000 * sigma);  // without the cap the probabilities are far apart
    // the single-sequence form (a mask, as inference runs) gives the batched form's probabilities
    AttnArgs one = a;
    one.B = 1, one.causal = false, one.window = 0;
    const Tensor Q1 = slice_rows(Q, 0, T), K1 = slice_rows(K, 0, T), V1 = slice_rows(V, 0, T);
    MaskSpec spec;
    spec.causal = true;
    AttnMask mask = build_mask(spec, T, T, 4, {}, -1);
    block_outside_window(mask, 4);
    one.mask = &mask;
    Tensor P3, c3;
    cpu->attention(one, Q1, K1, &V1, &P3, &c3);
    for (size_t k = 0; k < P3.data.size(); ++k) REQUIRE(std::fabs(P3.data[k] - P1.data[k]) <= sigma);
    // backward: the cap's slope 1 - tanh^2 on dS (test_util.h's bound carries its recomputation)
    Tensor q1, k1, v1, q2, k2, v2;
    ref->attention_backward(a, Q, K, V, P1, dctx, q1, k1, v1, nullptr);
    cpu->attention_backward(a, Q, K, V, P2, dctx, q2, k2, v2, nullptr);
    const AttnGradBound tol = attention_backward_bound(a, Q, K, V, P1, P2, dctx);
    CHECK(max_abs_diff(q1, q2) <= tol.dq);
    CHECK(max_abs_diff(k1, k2) <= tol.dk);
    CHECK(max_abs_diff(v1, v2) <= tol.dv);
  }
}

TEST_CASE("Gemma 2: cpu matches the reference at T = 1, 7, 63; windowed and full layers alternate",
          "[decoders][gemma2]") {
  const std::string dir = scratch_dir("gemma2", "pass");
  const Model m = tiny_gemma2(dir);
  const ModelConfig& c = m.config;
  REQUIRE(c.head_dim() == 6);
  REQUIRE(c.attn_width() == 24);
  CHECK(c.attn_scale == static_cast<float>(std::pow(5.0, -0.5)));
  CHECK(c.embed_scale == 4.0f);
  CHECK(c.attn_softcap == 1.0f);
  CHECK(c.final_softcap == 2.0f);
  CHECK(c.sandwich_norm);
  CHECK(c.sliding_window == 2);  // a window of W = 3 keys: i - 2 .. i
  CHECK(c.sliding_layers == std::vector<uint8_t>{1, 0, 1});
  CHECK(c.mixed_windows());
  // without the caps: the same weights (the caps change the probabilities)
  Model uncapped = m;
  uncapped.config.attn_softcap = uncapped.config.final_softcap = 0;
  for (const int T : {1, 7, 63}) {
    CAPTURE(T);
    ForwardRequest req;
    req.ids = random_ids(T, c.vocab_size, static_cast<uint64_t>(T) + 3);
    auto ref = make_backend("reference");
    auto cpu = make_backend("cpu");
    const ForwardResult a = run_forward(m, *ref, req), b = run_forward(m, *cpu, req);
    const PassBound tol = pass_bound(m, req, a);
    double moved = 0, bound = 0;
    const ForwardResult u = run_forward(uncapped, *ref, req);
    for (int l = 0; l < c.num_layers; ++l) {
      CHECK(max_abs_diff(a.attention[l], b.attention[l]) <= tol.probs[static_cast<size_t>(l)]);
      moved = std::max(moved, max_abs_diff(a.attention[l], u.attention[l]));
      bound = std::max(bound, tol.probs[static_cast<size_t>(l)]);
    }
    CHECK(max_abs_diff(a.hidden, b.hidden) <= tol.hidden);
    // (these bounds are loose: a sandwich norm divides by the rms of an attention output that
    // averaging over many keys makes small, so the worst-case gain is large; the tight check is
    // against float64 transformers in hf_decoders, and the caps' kernels are checked above)
    INFO("largest probability bound " << bound << ", moved by the caps " << moved);
    if (T > 1) CHECK(moved > 0);
    // layers 0 and 2 see the 3 keys i - 2 .. i; layer 1 every key before i; the result says which
    // mask each layer applied (the views grey what it blocks)
    for (int l = 0; l < c.num_layers; ++l)
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j) {
          const float p = b.attention[static_cast<size_t>(l)].data[static_cast<size_t>(i * T + j)];
          const bool visible = j <= i && (l == 1 || i - j < 3);
          if (!visible) CHECK(p == 0.0f);
          if (visible) CHECK(p > 0.0f);
          CHECK(b.mask_of(l).is_blocked(0, i, j) == !visible);
        }
    // the next-token probabilities come from the capped logits (|logit| < 2)
    const std::vector<float> logits = next_token_logits(m, b.hidden, T - 1);
    for (float v : logits) REQUIRE(std::fabs(v) < 2.0f);
  }
  fs::remove_all(dir);
}

TEST_CASE("Gemma 2: the folder's names, gains stored as w and held as 1 + w, Gemma2Config's defaults",
          "[decoders][gemma2][hf]") {
  const std::string dir = scratch_dir("gemma2", "names");
  const Model m = tiny_gemma2(dir);
  const TensorMap stored = load_safetensors(dir + "/model.safetensors");
  // four norms a layer: Gemma's post_attention_layernorm is the attention output's, the MLP's
  // input norm is pre_feedforward_layernorm
  for (const char* name :
       {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"})
    CHECK(stored.count("model.layers.1." + std::string(name) + ".weight") == 1);
  CHECK(stored.count("lm_head.weight") == 0);  // tied
  const Tensor& w = stored.at("model.layers.1.pre_feedforward_layernorm.weight");
  for (size_t k = 0; k < w.data.size(); ++k) CHECK(m.weights.layers[1].ln2_g.data[k] == 1.0f + w.data[k]);
  const Tensor& post = stored.at("model.layers.0.post_attention_layernorm.weight");
  CHECK(m.weights.layers[0].ln1_post_g.data[3] == 1.0f + post.data[3]);
  // saved back as the folder has them, bit for bit (gains in 0.6 .. 1: g - 1 and 1 + w are exact)
  const TensorMap back = hf_tensors(m, m.weights);
  REQUIRE(back.size() == stored.size());
  for (const auto& [name, t] : stored) {
    INFO(name);
    REQUIRE(back.count(name) == 1);
    CHECK(back.at(name).data == t.data);
  }
  // gradients are written as they are (d / dw = d / d(1 + w))
  ModelWeights ones = zeros_like(m.weights);
  for (Tensor* t : parameters(ones))
    for (float& v : t->data) v = 1.0f;
  CHECK(hf_tensors(m, ones, true).at("model.norm.weight").data[0] == 1.0f);
  CHECK(hf_tensors(m, ones).at("model.norm.weight").data[0] == 0.0f);
  // saved, it is the Hugging Face folder again (attnlab's own config.json has no keys for these parts)
  CHECK_THROWS_WITH(config_to_json(m.config), Catch::Contains("saved as a Hugging Face folder"));
  save_model(m, dir + "/saved");
  const Model again = load_model(dir + "/saved");
  CHECK(again.hf.model_type == "gemma2");
  CHECK(again.weights.layers[2].ln2_post_g.data == m.weights.layers[2].ln2_post_g.data);
  CHECK(again.config.sliding_layers == m.config.sliding_layers);

  // Gemma2Config's defaults for keys save_pretrained leaves out (Gemma 2 2B's shape)
  HfInfo info;
  ModelConfig d = parse_hf_config(R"({"model_type": "gemma2"})", info);
  CHECK(d.vocab_size == 256000);
  CHECK(d.embed_size == 2304);
  CHECK(d.num_layers == 26);
  CHECK(d.num_heads == 8);
  CHECK(d.kv_heads() == 4);
  CHECK(d.head_dim() == 256);
  CHECK(d.attn_scale == 0.0625f);  // 256 ** -0.5
  CHECK(d.attn_softcap == 50.0f);
  CHECK(d.final_softcap == 30.0f);
  CHECK(d.sliding_window == 4095);
  REQUIRE(d.sliding_layers.size() == 26);
  CHECK(d.sliding_layers[0] == 1);  // even layers slide, as Gemma2Config's (i + 1) % 2
  CHECK(d.sliding_layers[1] == 0);
  CHECK(d.tied_lm_head);
  CHECK(d.activation == Activation::GeluTanh);
  CHECK(d.embed_scale == static_cast<float>(std::sqrt(2304.0)));
  CHECK(d.layer_norm_eps == 1e-6f);
  d = parse_hf_config(R"({"model_type": "gemma2", "attn_logit_softcapping": null, "final_logit_softcapping": null,
                          "sliding_window": null})",
                      info);
  CHECK(d.attn_softcap == 0.0f);
  CHECK(d.final_softcap == 0.0f);
  CHECK(!d.layer_slides(0));
  // Gemma 3's text model: q/k norms, no score cap, 5 sliding layers to a full one, a rotary base
  // per layer kind, as 5.x writes rope_parameters and as 4.x wrote rope_local_base_freq
  d = parse_hf_config(R"({"model_type": "gemma3_text", "num_hidden_layers": 7, "attn_logit_softcapping": 50,
                          "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                              "full_attention": {"rope_type": "linear", "factor": 8.0,
                                                                 "rope_theta": 1000000.0}}})",
                      info);
  CHECK(d.qk_norm);
  CHECK(d.attn_softcap == 0.0f);  // Gemma3Attention passes no softcap to the attention
  CHECK(d.final_softcap == 0.0f);
  CHECK(d.vocab_size == 262208);
  CHECK(d.sliding_layers == std::vector<uint8_t>{1, 1, 1, 1, 1, 0, 1});
  CHECK(d.rope_theta == 1e6f);
  CHECK(d.rope_scaling.type == "linear");
  CHECK(d.local_rope_theta == 1e4f);
  CHECK(d.layer_local_rope(0));
  CHECK(!d.layer_local_rope(5));
  d = parse_hf_config(R"({"model_type": "gemma3_text", "num_hidden_layers": 4, "sliding_window_pattern": 2,
                          "rope_theta": 500000.0, "rope_local_base_freq": 20000.0,
                          "rope_scaling": {"rope_type": "linear", "factor": 4.0}})",
                      info);
  CHECK(d.sliding_layers == std::vector<uint8_t>{1, 0, 1, 0});
  CHECK(d.rope_theta == 5e5f);
  CHECK(d.rope_scaling.factor == 4.0);
  CHECK(d.local_rope_theta == 2e4f);
  CHECK_THROWS_WITH(parse_hf_config(R"({"model_type": "gemma3_text", "rope_parameters": {"sliding_attention":
                          {"rope_type": "linear", "factor": 2.0}, "full_attention": {"rope_type": "default"}}})",
                                    info),
                    Catch::Contains("for the sliding layers"));
  CHECK_THROWS_WITH(parse_hf_config(R"({"model_type": "gemma2", "use_bidirectional_attention": true})", info),
                    Catch::Contains("use_bidirectional_attention"));
  CHECK_THROWS_WITH(
      parse_hf_config(R"({"model_type": "gemma2", "num_hidden_layers": 2, "layer_types": ["full_attention"]})", info),
      Catch::Contains("one attention kind per layer"));
  CHECK_THROWS_WITH(
      parse_hf_config(R"({"model_type": "gemma2", "num_hidden_layers": 1, "layer_types": ["chunked"]})", info),
      Catch::Contains("sliding_attention or full_attention"));
  fs::remove_all(dir);
}
