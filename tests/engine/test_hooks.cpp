// Named activations (engine/compute/hooks.h): the names a pass reaches, what it keeps, and
// interventions that must change nothing (a value replaced by itself, zero added), change exactly
// what they should (a causal model's earlier positions untouched), or carry one input into
// another (the whole residual stream patched). Values against transformers' own modules:
// tests/crosscheck/hf_decoders.py (check_hooks).
#include <cmath>
#include <filesystem>
#include <random>

#include "engine/analysis/attribution.h"
#include "engine/analysis/detectors.h"
#include "engine/analysis/methods.h"
#include "engine/analysis/patching.h"
#include "engine/compute/forward.h"
#include "engine/compute/hooks.h"
#include "engine/compute/plan.h"
#include "engine/formats/npy.h"
#include "tests/engine/hf_test_model.h"
#include "tests/engine/pass_bound.h"
#include "tests/engine/test_util.h"
#include "tests/engine/tolerance.h"

using namespace attnlab;
using namespace attnlab::test;
namespace fs = std::filesystem;

namespace {

std::string scratch(const std::string& name) {
  return scratch_dir("hooks", name);
}

ForwardResult pass(const Model& m, const std::vector<int>& ids, const HookSpec* hooks, const char* backend = "cpu") {
  ForwardRequest req;
  req.ids = ids;
  req.hooks = hooks;
  auto b = make_backend(backend);
  return run_forward(m, *b, req);
}

bool same(const Tensor& a, const Tensor& b) {
  return a.shape == b.shape && a.data == b.data;
}

}  // namespace

TEST_CASE("glob_match: '*' is any run of characters", "[hooks]") {
  CHECK(glob_match("*", ""));
  CHECK(glob_match("blocks.*.hook_z", "blocks.11.hook_z"));
  CHECK_FALSE(glob_match("blocks.*.hook_z", "blocks.1.attn.hook_q"));
  CHECK(glob_match("*hook_resid_*", "blocks.0.hook_resid_pre"));
  CHECK(glob_match("a*b*c", "aXbYbc"));
  CHECK_FALSE(glob_match("a*b*c", "aXbYbd"));
  CHECK_FALSE(glob_match("blocks.1.*", "blocks.10.hook_z"));  // "1." then anything: layer 10 is not layer 1
}

TEST_CASE("hooks: every name of a decoder's pass is kept, with TransformerLens's shapes and relations", "[hooks]") {
  const std::string dir = scratch("llama");
  const Model m = tiny_decoder(dir);  // GQA 4/2, rotary, SwiGLU, RMSNorm, final norm
  const ModelConfig& c = m.config;
  const int T = 7, H = c.num_heads, KV = c.kv_heads(), D = c.embed_size / c.num_heads;
  const std::vector<int> ids = random_ids(T, c.vocab_size, 2);
  HookSpec all;
  all.cache = {"*"};
  const ForwardResult plain = pass(m, ids, nullptr), r = pass(m, ids, &all);
  CHECK(same(plain.hidden, r.hidden));  // keeping changes nothing
  const std::vector<std::string> names = hook_names(c);
  REQUIRE(names.size() == r.cache.size());
  for (const std::string& n : names) CHECK(r.cache.count(n) == 1);
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    auto at = [&](const std::string& n) -> const Tensor& { return r.cache.at(b + n); };
    CHECK(at("attn.hook_q").shape == std::vector<int64_t>{T, H, D});
    CHECK(at("attn.hook_k").shape == std::vector<int64_t>{T, KV, D});
    CHECK(at("attn.hook_rot_k").shape == std::vector<int64_t>{T, KV, D});
    CHECK(at("attn.hook_z").shape == std::vector<int64_t>{T, H, D});
    CHECK(at("attn.hook_pattern").shape == std::vector<int64_t>{H, T, T});
    CHECK(at("mlp.hook_post").shape == std::vector<int64_t>{T, c.ff_dim});
    CHECK(same(at("attn.hook_pattern"), r.attention[static_cast<size_t>(l)]));
    // resid_mid = resid_pre + attn_out and resid_post = resid_mid + mlp_out, as the pass adds them
    Tensor mid = at("hook_attn_out"), post = at("hook_mlp_out");
    for (size_t k = 0; k < mid.data.size(); ++k) mid.data[k] += at("hook_resid_pre").data[k];
    for (size_t k = 0; k < post.data.size(); ++k) post.data[k] += at("hook_resid_mid").data[k];
    CHECK(same(mid, at("hook_resid_mid")));
    CHECK(same(post, at("hook_resid_post")));
    if (l + 1 < c.num_layers)
      CHECK(same(at("hook_resid_post"), r.cache.at("blocks." + std::to_string(l + 1) + ".hook_resid_pre")));
  }
  CHECK(same(r.cache.at("ln_final.hook_normalized"), r.hidden));
  // the reference backend names the same values
  const ForwardResult ref = pass(m, ids, &all, "reference");
  CHECK(ref.cache.size() == r.cache.size());
  // a glob keeps only what it matches
  HookSpec some;
  some.cache = {"blocks.1.attn.*"};
  const ForwardResult s = pass(m, ids, &some);
  for (const auto& [n, t] : s.cache) CHECK(n.rfind("blocks.1.attn.", 0) == 0);
  CHECK(s.cache.size() == 8);  // q, k, v, rot_q, rot_k, attn_scores, pattern, z
  fs::remove_all(dir);
}

TEST_CASE("hooks: interventions change what they should and nothing else", "[hooks]") {
  const std::string dir = scratch("interv");
  const Model m = tiny_decoder(dir);
  const ModelConfig& c = m.config;
  const int T = 9, E = c.embed_size;
  const std::vector<int> a = random_ids(T, c.vocab_size, 4), bids = random_ids(T, c.vocab_size, 5);
  HookSpec all;
  all.cache = {"*"};
  const ForwardResult ra = pass(m, a, &all), rb = pass(m, bids, &all);

  SECTION("a value replaced by itself, or zero added, changes nothing") {
    for (const char* name : {"blocks.0.hook_resid_pre", "blocks.1.attn.hook_z", "blocks.0.mlp.hook_pre_linear",
                             "blocks.1.hook_resid_post", "ln_final.hook_normalized"}) {
      INFO(name);
      HookSpec self;
      self.edits.push_back({HookEdit::Kind::Replace, name, ra.cache.at(name), {}, 1.0f});
      CHECK(same(pass(m, a, &self).hidden, ra.hidden));
      HookSpec zero;
      const Tensor& v = ra.cache.at(name);
      const Tensor row({1, static_cast<int64_t>(v.data.size()) / v.dim(0)});  // one row of zeros, at every position
      zero.edits.push_back({HookEdit::Kind::Add, name, row, {}, 5.0f});
      CHECK(same(pass(m, a, &zero).hidden, ra.hidden));
    }
  }
  SECTION("patching the whole residual stream at layer 0 carries the other input through") {
    HookSpec patch;
    patch.edits.push_back(
        {HookEdit::Kind::Replace, "blocks.0.hook_resid_pre", rb.cache.at("blocks.0.hook_resid_pre"), {}, 1.0f});
    CHECK(same(pass(m, a, &patch).hidden, rb.hidden));
  }
  SECTION("a steering vector at one position of a causal model leaves the earlier positions alone") {
    const int at = 5;
    HookSpec steer;
    steer.edits.push_back({HookEdit::Kind::Add, "blocks.0.hook_resid_mid", random_tensor({1, E}, 9), {at}, 3.0f});
    const ForwardResult r = pass(m, a, &steer);
    for (int t = 0; t < T; ++t) {
      double d = 0;
      for (int j = 0; j < E; ++j)
        d = std::max(d, std::fabs(static_cast<double>(r.hidden.at(t, j) - ra.hidden.at(t, j))));
      INFO("position " << t);
      if (t < at)
        CHECK(d == 0.0);
      else
        CHECK(d > 1e-3);  // a random vector of size ~3 sqrt(E) moves every later row
    }
  }
  SECTION("a whole cached activation with positions listed gives those rows") {
    HookSpec whole, rows;
    const Tensor& bv = rb.cache.at("blocks.1.hook_resid_pre");
    whole.edits.push_back({HookEdit::Kind::Replace, "blocks.1.hook_resid_pre", bv, {2, 6}, 1.0f});
    Tensor two({2, E});
    std::copy_n(bv.ptr() + 2 * E, E, two.ptr());
    std::copy_n(bv.ptr() + 6 * E, E, two.ptr() + E);
    rows.edits.push_back({HookEdit::Kind::Replace, "blocks.1.hook_resid_pre", two, {2, 6}, 1.0f});
    CHECK(same(pass(m, a, &whole).hidden, pass(m, a, &rows).hidden));
    CHECK_FALSE(same(pass(m, a, &rows).hidden, ra.hidden));
  }
  SECTION("edits that do not fit are errors that name them") {
    HookSpec bad_name;
    bad_name.edits.push_back({HookEdit::Kind::Replace, "blocks.0.hook_nope", Tensor({T, E}), {}, 1.0f});
    CHECK_THROWS_WITH(pass(m, a, &bad_name), Catch::Contains("no activation \"blocks.0.hook_nope\""));
    HookSpec bad_size;
    bad_size.edits.push_back({HookEdit::Kind::Replace, "blocks.0.hook_resid_pre", Tensor({T - 1, E}), {}, 1.0f});
    CHECK_THROWS_WITH(pass(m, a, &bad_size), Catch::Contains("need " + std::to_string(T * E)));
    HookSpec bad_pos;
    bad_pos.edits.push_back({HookEdit::Kind::Replace, "blocks.0.hook_resid_pre", Tensor({1, E}), {T}, 1.0f});
    CHECK_THROWS_WITH(pass(m, a, &bad_pos), Catch::Contains("no position " + std::to_string(T)));
    HookSpec pattern;  // the pattern can be replaced (hooks: "a replaced attention pattern"), not mapped
    HookEdit apply;
    apply.kind = HookEdit::Kind::Apply;
    apply.name = "blocks.0.attn.hook_pattern";
    apply.apply = [](Tensor&) {};
    pattern.edits.push_back(apply);
    CHECK_THROWS_WITH(pass(m, a, &pattern),
                      Catch::Contains("a function of a per-head [heads, T, S] value is not supported"));
  }
  fs::remove_all(dir);
}

TEST_CASE("hooks: a post-norm encoder's names follow TransformerLens's BertBlock", "[hooks]") {
  const Model m = random_model(small_config(16, 2, 2, 24, 32));
  REQUIRE(m.config.norm == NormPlacement::Post);
  const std::vector<std::string> names = hook_names(m.config);
  const std::vector<std::string> want = {"embed.hook_embed",
                                         "embed.hook_pos_embed",
                                         "blocks.0.hook_resid_pre",
                                         "blocks.0.attn.hook_q",
                                         "blocks.0.attn.hook_k",
                                         "blocks.0.attn.hook_v",
                                         "blocks.0.attn.hook_attn_scores",
                                         "blocks.0.attn.hook_pattern",
                                         "blocks.0.attn.hook_z",
                                         "blocks.0.hook_attn_out",
                                         "blocks.0.hook_resid_mid",
                                         "blocks.0.ln1.hook_normalized",
                                         "blocks.0.mlp.hook_pre",
                                         "blocks.0.mlp.hook_post",
                                         "blocks.0.hook_mlp_out",
                                         "blocks.0.hook_resid_post",
                                         "blocks.0.hook_normalized_resid_post"};
  REQUIRE(names.size() >= want.size());
  CHECK(std::vector<std::string>(names.begin(), names.begin() + static_cast<long>(want.size())) == want);
  HookSpec all;
  all.cache = {"*"};
  const ForwardResult r = pass(m, random_ids(6, m.config.vocab_size), &all);
  // the layer's output is LN2(resid_post): the next layer's resid_pre
  CHECK(same(r.cache.at("blocks.0.hook_normalized_resid_post"), r.cache.at("blocks.1.hook_resid_pre")));
}

TEST_CASE("npz: numpy's zip of stored .npy members", "[hooks][formats]") {
  std::map<std::string, Tensor> arrays;
  arrays["blocks.0.hook_z"] = random_tensor({3, 2, 4}, 1);
  arrays["x"] = random_tensor({5}, 2);
  const std::string z = serialize_npz(arrays);
  // local header magic, the member names, the end record's count
  CHECK(z.substr(0, 4) == std::string("PK\x03\x04", 4));
  CHECK(z.find("blocks.0.hook_z.npy") != std::string::npos);
  CHECK(z.find("x.npy") != std::string::npos);
  const size_t end = z.rfind(std::string("PK\x05\x06", 4));
  REQUIRE(end != std::string::npos);
  CHECK(static_cast<unsigned char>(z[end + 8]) == 2);
  // each member is the .npy of its array, stored as is (the first after its 30 + 19 byte header)
  const std::string npy = serialize_npy(arrays["blocks.0.hook_z"]);
  CHECK(z.substr(30 + 19, npy.size()) == npy);
  CHECK(parse_npy(z.substr(30 + 19, npy.size())).tensor.data == arrays["blocks.0.hook_z"].data);
}

TEST_CASE("activation patching: resumed and batched runs equal full ones; the changed token restores exactly 1",
          "[hooks][patching]") {
  const std::string dir = scratch("patch");
  const Model m = tiny_decoder(dir);
  const ModelConfig& c = m.config;
  const int T = 6, changed = 3, answer = 5, wrong = 9;
  ForwardRequest clean, corrupted;
  clean.ids = random_ids(T, c.vocab_size, 11);
  corrupted.ids = clean.ids;
  corrupted.ids[changed] = (clean.ids[changed] + 1) % c.vocab_size;
  // The reference backend resumes one patched run at a time: each equals the full pass bit for
  // bit. The cpu backend runs a layer's patched runs as one batch: its products see B * T rows and
  // may round differently, within two passes' float32 error of the logit difference (the last
  // hidden row's pass_bound through the two LM-head rows, plus those E-term products).
  double f_err = 0;
  {
    auto cpu = make_backend("cpu");
    const ForwardResult base = run_forward(m, *cpu, corrupted);
    const double hidden_err = pass_bound(m, corrupted, base).hidden;
    const Tensor& Wlm = c.tied_lm_head ? m.weights.embedding : m.weights.lm_head;
    for (const int id : {answer, wrong}) {
      double w1 = 0, terms = 0;
      for (int e = 0; e < c.embed_size; ++e) {
        w1 += std::fabs(Wlm.at(id, e));
        terms += std::fabs(static_cast<double>(base.hidden.at(T - 1, e)) * Wlm.at(id, e));
      }
      f_err += w1 * hidden_err + sum_bound_best(c.embed_size, terms);
    }
  }
  for (const char* backend_name : {"reference", "cpu"})
    for (const PatchTarget what :
         {PatchTarget::ResidPre, PatchTarget::AttnOut, PatchTarget::MlpOut, PatchTarget::Z, PatchTarget::Pattern}) {
      CAPTURE(backend_name);
      auto backend = make_backend(backend_name);
      // the pattern's sweep runs one patched run at a time on every backend: equal bit for bit
      const bool batched = std::string(backend_name) == "cpu" && what != PatchTarget::Pattern;
      const PatchResult p = activation_patching(m, *backend, clean, corrupted, answer, wrong, what);
      const bool heads = what == PatchTarget::Z || what == PatchTarget::Pattern;
      REQUIRE(p.values.shape == std::vector<int64_t>{c.num_layers, heads ? c.num_heads : T});
      // every entry again as a full pass (embedding and all layers) with the same edit: the same number
      HookSpec keep;
      keep.cache = {"*"};
      ForwardRequest rc = clean;
      rc.hooks = &keep;
      const ForwardResult cr = run_forward(m, *backend, rc);
      const char* hook = what == PatchTarget::ResidPre  ? "hook_resid_pre"
                         : what == PatchTarget::AttnOut ? "hook_attn_out"
                         : what == PatchTarget::MlpOut  ? "hook_mlp_out"
                         : what == PatchTarget::Z       ? "attn.hook_z"
                                                        : "attn.hook_pattern";
      for (int l = 0; l < c.num_layers; ++l)
        for (int j = 0; j < p.values.dim(1); ++j) {
          const Tensor& v = cr.cache.at("blocks." + std::to_string(l) + "." + hook);
          const int64_t width = static_cast<int64_t>(v.data.size()) / T;
          HookEdit e;
          e.name = "blocks." + std::to_string(l) + "." + hook;
          if (what == PatchTarget::Pattern) {  // [heads, T, T]: head j's block
            e.head = j;
            e.value = Tensor({T, T});
            std::copy_n(v.ptr() + static_cast<int64_t>(j) * T * T, T * T, e.value.ptr());
          } else if (heads) {
            const int64_t D = v.dim(2);
            e.head = j;
            e.value = Tensor({T, D});
            for (int t = 0; t < T; ++t) std::copy_n(v.ptr() + t * width + j * D, D, e.value.ptr() + t * D);
          } else {
            e.positions = {j};
            e.value = Tensor({1, width});
            std::copy_n(v.ptr() + j * width, width, e.value.ptr());
          }
          HookSpec spec;
          spec.edits = {e};
          ForwardRequest r = corrupted;
          r.hooks = &spec;
          const double full = logit_difference(m, run_forward(m, *backend, r), answer, wrong);
          INFO("layer " << l << ", column " << j);
          const float want = static_cast<float>((full - p.corrupted) / (p.clean - p.corrupted));
          if (batched)
            CHECK(std::fabs(p.values.at(l, j) - want) <= 2 * f_err / std::fabs(p.clean - p.corrupted));
          else
            CHECK(p.values.at(l, j) == want);
        }
      if (what == PatchTarget::ResidPre) {
        CHECK(p.values.at(0, changed) == 1.0f);  // the corrupted input becomes the clean one
        for (int t = 0; t < changed; ++t) CHECK(p.values.at(0, t) == 0.0f);  // a causal model: earlier rows are equal
      }
    }
  // what it refuses, saying why
  auto backend = make_backend("cpu");
  ForwardRequest shorter = corrupted;
  shorter.ids.pop_back();
  CHECK_THROWS_WITH(activation_patching(m, *backend, clean, shorter, answer, wrong, PatchTarget::ResidPre),
                    Catch::Contains("the clean one has 6, the corrupted one 5"));
  CHECK_THROWS_WITH(activation_patching(m, *backend, clean, clean, answer, wrong, PatchTarget::ResidPre),
                    Catch::Contains("nothing for a patch to restore"));
  CHECK_THROWS_WITH(parse_patch_target("patterns"),
                    Catch::Contains("expected resid_pre, attn_out, mlp_out, z or pattern"));
  CHECK_THROWS_WITH(activation_patching(m, *backend, clean, corrupted, answer, answer, PatchTarget::ResidPre),
                    Catch::Contains("are the same"));
  fs::remove_all(dir);
}

TEST_CASE("head detectors: each score reads its diagonal of a hand-made pattern", "[detectors]") {
  const int S = 5, T = 2 * S, H = 4;
  ForwardResult r;
  r.ids.assign(T, 7);
  Tensor P({H, T, T});
  auto put = [&](int h, int i, int j) { P.ptr()[(static_cast<size_t>(h) * T + i) * T + j] = 1.0f; };
  for (int i = 0; i < T; ++i) {
    put(0, i, i >= S ? i - S + 1 : 0);  // induction: the token after the first occurrence
    put(1, i, i >= 1 ? i - 1 : 0);      // previous token
    put(2, i, i >= S ? i - S : 0);      // the earlier occurrence
    put(3, i, i);                       // itself
  }
  r.attention = {P};
  const Tensor ind = head_detector_scores(r, HeadDetector::Induction, S),
               prev = head_detector_scores(r, HeadDetector::PreviousToken, S),
               dup = head_detector_scores(r, HeadDetector::DuplicateToken, S);
  CHECK(ind.at(0, 0) == 1.0f);
  CHECK(prev.at(0, 1) == 1.0f);
  CHECK(dup.at(0, 2) == 1.0f);
  CHECK(ind.at(0, 3) == 0.0f);
  CHECK(prev.at(0, 3) == 0.0f);
  CHECK(dup.at(0, 3) == 0.0f);
  CHECK(ind.at(0, 2) == 0.0f);                    // the earlier occurrence is not the token after it
  CHECK(prev.at(0, 0) == Approx(1.0 / (T - 1)));  // head 0 meets the previous token once: row 1 looks at 0
  const Model m = random_model(small_config(16, 2, 2, 24, 32));
  const std::vector<int> ids = repeated_random_tokens(m, 9, 4);
  REQUIRE(ids.size() == 18);
  CHECK(std::equal(ids.begin(), ids.begin() + 9, ids.begin() + 9));
  CHECK_THROWS_WITH(repeated_random_tokens(m, 20, 0), Catch::Contains("longer than the model's 32 positions"));
}

TEST_CASE("logit attribution: the parts sum to the model's own logit difference", "[hooks][attribution]") {
  const std::string dir = scratch("dla");
  // pre-norm, RMSNorm, GQA, gated MLP, an LM head; and heads of 6 over a hidden size of 16
  // (W_O's columns are heads x 6, not the hidden size)
  const int head_dim = GENERATE(0, 6);
  CAPTURE(head_dim);
  const Model m = tiny_decoder(dir, false, 0, head_dim > 0, head_dim);
  const ModelConfig& c = m.config;
  ForwardRequest req;
  req.ids = random_ids(9, c.vocab_size, 21);
  auto backend = make_backend("cpu");
  for (const int wrong : {11, -1}) {
    const LogitAttribution d = direct_logit_attribution(m, *backend, req, 4, wrong);
    REQUIRE(d.parts.shape == std::vector<int64_t>{c.num_layers, c.num_heads + 1});
    double magnitude = std::fabs(d.embedding) + std::fabs(d.biases);
    for (float v : d.parts.data) magnitude += std::fabs(v);
    // The total is summed in double from the pass's float32 activations; the logit difference
    // comes from the float32 final norm and LM head over E terms: both sides of the same sums,
    // so they differ by float32 rounding of sums of E terms of that magnitude (twice: norm, head).
    INFO("wrong " << wrong << ": total " << d.total << ", logit difference " << d.logit_diff);
    CHECK(std::fabs(d.total - d.logit_diff) <= 2 * sum_bound(c.embed_size, magnitude) + 1e-6 * magnitude);
    bool nonzero = false;
    for (float v : d.parts.data) nonzero = nonzero || v != 0.0f;
    CHECK(nonzero);
  }
  {  // an attention-only language model (what `train --objective lm` makes for induction heads):
     // its layers end in hook_resid_post (TransformerLens's attn_only), which the split reads
    ModelConfig a = small_config(16, 4, 2, 0, 32);
    a.num_classes = 0, a.labels.clear();
    a.causal = true, a.lm_head = true, a.final_norm = true;
    a.norm = NormPlacement::Pre, a.norm_kind = NormKind::RmsNorm, a.positional = Positional::Rotary;
    const Model lm = random_model(a);
    const std::vector<std::string> names = hook_names(a);
    CHECK(std::count(names.begin(), names.end(), "blocks.1.hook_resid_post") == 1);
    CHECK(std::count(names.begin(), names.end(), "blocks.1.hook_resid_mid") == 0);
    ForwardRequest r;
    r.ids = random_ids(7, a.vocab_size, 5);
    const LogitAttribution d = direct_logit_attribution(lm, *backend, r, 4, 9);
    double magnitude = std::fabs(d.embedding) + std::fabs(d.biases);
    for (float v : d.parts.data) magnitude += std::fabs(v);
    CHECK(std::fabs(d.total - d.logit_diff) <= 2 * sum_bound(a.embed_size, magnitude) + 1e-6 * magnitude);
    for (int l = 0; l < a.num_layers; ++l) CHECK(d.parts.at(l, a.num_heads) == 0.0f);  // no MLP
  }
  // post-norm models have no residual stream to split
  const Model post = random_model(small_config(16, 2, 2, 24, 32));
  ForwardRequest r2;
  r2.ids = random_ids(5, post.config.vocab_size);
  CHECK_THROWS_WITH(direct_logit_attribution(post, *backend, r2, 1, 2), Catch::Contains("LM head"));
  fs::remove_all(dir);
}

TEST_CASE("attribution patching: activation gradients match finite differences; equal rows give 0",
          "[hooks][patching][fd]") {
  for (const bool gpt2 : {false, true}) {  // Llama (GQA, RMSNorm, RoPE, SwiGLU) and GPT-2
    CAPTURE(gpt2);
    const std::string dir = scratch(gpt2 ? "attr-gpt2" : "attr-llama");
    const Model m = tiny_decoder(dir, gpt2);
    const ModelConfig& c = m.config;
    const int T = 6, changed = 2, answer = 5, wrong = 9, E = c.embed_size;
    ForwardRequest clean, corrupted;
    clean.ids = random_ids(T, c.vocab_size, 13);
    corrupted.ids = clean.ids;
    corrupted.ids[changed] = (clean.ids[changed] + 3) % c.vocab_size;
    GradientOptions o;
    o.target = answer, o.wrong = wrong;
    o.hooks = {"blocks.*.hook_resid_pre", "blocks.*.attn.hook_z", "blocks.*.hook_mlp_out", "blocks.*.hook_attn_out"};
    const PredictionGradients g = prediction_gradients(m, corrupted, o);
    REQUIRE(g.gradients.size() == 4 * static_cast<size_t>(c.num_layers));
    REQUIRE(g.gradients.at("blocks.1.attn.hook_z").shape == std::vector<int64_t>{T, c.num_heads, E / c.num_heads});
    auto backend = make_backend("cpu");
    // y = the logit difference with `delta` added to one entry of a named activation
    auto y = [&](const std::string& name, int t, int64_t e, int64_t width, float delta) {
      HookEdit add;
      add.kind = HookEdit::Kind::Add;
      add.name = name;
      add.positions = {t};
      add.value = Tensor({1, width});
      add.value.data[static_cast<size_t>(e)] = delta;
      HookSpec spec;
      spec.edits = {add};
      ForwardRequest r = corrupted;
      r.hooks = &spec;
      return logit_difference(m, run_forward(m, *backend, r), answer, wrong);
    };
    // y's float32 error: the last hidden row's (pass_bound) through the two LM-head rows, plus
    // those E-term products' own rounding
    double f_err = 0;
    {
      const ForwardResult base = run_forward(m, *backend, corrupted);
      const double hidden_err = pass_bound(m, corrupted, base).hidden;
      const Tensor& Wlm = c.tied_lm_head ? m.weights.embedding : m.weights.lm_head;
      for (const int id : {answer, wrong}) {
        double w1 = 0, terms = 0;
        for (int e = 0; e < E; ++e) {
          w1 += std::fabs(Wlm.at(id, e));
          terms += std::fabs(static_cast<double>(base.hidden.at(T - 1, e)) * Wlm.at(id, e));
        }
        f_err += w1 * hidden_err + sum_bound_best(E, terms);
      }
    }
    std::mt19937 pick(4);
    int checked = 0;
    for (const auto& [name, grad] : g.gradients) {
      const Tensor& a = g.activations.at(name);
      REQUIRE(a.shape == grad.shape);
      const int64_t width = static_cast<int64_t>(grad.data.size()) / T;
      // the entry with the largest gradient (where a wrong backward shows most), then a random one
      const size_t largest =
          static_cast<size_t>(std::max_element(grad.data.begin(), grad.data.end(),
                                               [](float u, float v) { return std::fabs(u) < std::fabs(v); }) -
                              grad.data.begin());
      for (int r = 0; r < 2; ++r) {
        const size_t at = r == 0 ? largest : pick() % grad.data.size();
        const int t = static_cast<int>(static_cast<int64_t>(at) / width);
        const int64_t e = static_cast<int64_t>(at) % width;
        const float h = 5e-2f, x = a.data[at];
        const double up = y(name, t, e, width, h), down = y(name, t, e, width, -h);
        const double up2 = y(name, t, e, width, 2 * h), down2 = y(name, t, e, width, -2 * h);
        const double fd = (up - down) / (2.0 * h), an = grad.data[at];
        // the activation is smooth downstream (softmax, norms, GELU/SiLU): the third derivative measured
        const double bound = measured_central_diff_bound(h, x, f_err, up, down, up2, down2);
        INFO(name << " [" << t << ", " << e << "]: finite difference " << fd << ", backward " << an << ", bound "
                  << bound);
        CHECK(std::fabs(fd - an) <= bound);
        if (r == 0) CHECK(bound < 0.5 * std::fabs(an));  // the check can tell the largest gradient from none
        ++checked;
      }
    }
    CHECK(checked == 8 * c.num_layers);
    // y is the logit difference the forward gives (the same float32 pass on the host ops)
    const double m_corr = logit_difference(m, run_forward(m, *backend, corrupted), answer, wrong);
    CHECK(std::fabs(g.y - m_corr) <= f_err);

    for (const PatchTarget what : {PatchTarget::ResidPre, PatchTarget::Z}) {
      const PatchResult p = attribution_patching(m, *backend, clean, corrupted, answer, wrong, what);
      const bool heads = what == PatchTarget::Z;
      REQUIRE(p.values.shape == std::vector<int64_t>{c.num_layers, heads ? c.num_heads : T});
      CHECK(p.corrupted == g.y);
      if (heads) continue;
      // layer 0's input is the embedding of each token alone: only the changed row differs,
      // and a causal model's earlier rows are the same at every layer
      for (int t = 0; t < T; ++t) CHECK((p.values.at(0, t) == 0.0f) == (t != changed));
      for (int l = 0; l < c.num_layers; ++l)
        for (int t = 0; t < changed; ++t) CHECK(p.values.at(l, t) == 0.0f);
    }
    ForwardRequest shorter = corrupted;
    shorter.ids.pop_back();
    CHECK_THROWS_WITH(attribution_patching(m, *backend, clean, shorter, answer, wrong, PatchTarget::ResidPre),
                      Catch::Contains("the clean one has 6, the corrupted one 5"));
    fs::remove_all(dir);
  }
}

TEST_CASE("hooks: a cache that cannot fit in memory is refused before the pass, naming its size", "[hooks]") {
  // 300,000 tokens: every attention pattern alone is 2 layers x 2 heads x 3e5^2 floats (1.4 TB)
  const Model m = random_model(small_config(16, 2, 2, 24, 300000));
  ForwardRequest r;
  r.ids.assign(300000, 5);
  r.keep_attention = {false, false};
  HookSpec all;
  all.cache = {"*"};
  r.hooks = &all;
  auto cpu = make_backend("cpu");
  CHECK_THROWS_WITH(run_forward(m, *cpu, r),
                    Catch::Contains("the activations --cache names would take") && Catch::Contains("name fewer"));
  CHECK(hook_numel(m.config, "blocks.0.attn.hook_pattern", 300000) == 2LL * 300000 * 300000);
  CHECK(hook_numel(m.config, "blocks.1.mlp.hook_post", 7) == 7 * 24);
  CHECK(hook_numel(m.config, "blocks.1.attn.hook_z", 7) == 7 * 16);
}

TEST_CASE("hooks: a replaced attention pattern weights the values with its rows; the other heads are untouched",
          "[hooks][patching]") {
  const std::string dir = scratch("pattern");
  const Model m = tiny_decoder(dir);  // 4 query heads on 2 key/value heads
  const ModelConfig& c = m.config;
  const int T = 5, head = 1, D = c.head_dim();
  const std::vector<int> ids = random_ids(T, c.vocab_size, 4);
  HookSpec keep;
  keep.cache = {"blocks.0.attn.hook_v", "blocks.0.attn.hook_z", "blocks.0.attn.hook_pattern"};
  const ForwardResult base = pass(m, ids, &keep);
  HookSpec edit = keep;
  HookEdit e;
  e.name = "blocks.0.attn.hook_pattern";
  e.head = head;
  e.value = Tensor({T, T});
  for (int t = 0; t < T; ++t)
    for (int j = 0; j <= t; ++j) e.value.at(t, j) = 1.0f / static_cast<float>(t + 1);  // uniform over the visible keys
  edit.edits = {e};
  const ForwardResult r = pass(m, ids, &edit);
  const Tensor &v = base.cache.at("blocks.0.attn.hook_v"), &z = r.cache.at("blocks.0.attn.hook_z"),
               &z0 = base.cache.at("blocks.0.attn.hook_z"), &P = r.cache.at("blocks.0.attn.hook_pattern");
  const int g = head / (c.num_heads / c.kv_heads());
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < T; ++j) CHECK(P.data[(static_cast<size_t>(head) * T + t) * T + j] == e.value.at(t, j));
    for (int d = 0; d < D; ++d) {
      double want = 0, mag = 0;
      for (int j = 0; j <= t; ++j) want += v.data[(static_cast<size_t>(j) * c.kv_heads() + g) * D + d] / (t + 1.0);
      for (int j = 0; j <= t; ++j) mag += std::fabs(v.data[(static_cast<size_t>(j) * c.kv_heads() + g) * D + d]);
      // the rows' own rounding (1/(t+1) in float) and one rounding of the sum, accumulated in double
      CHECK(std::fabs(z.data[(static_cast<size_t>(t) * c.num_heads + head) * D + d] - want) <= 2 * kU32 * mag);
      for (int h = 0; h < c.num_heads; ++h)
        if (h != head)
          CHECK(z.data[(static_cast<size_t>(t) * c.num_heads + h) * D + d] ==
                z0.data[(static_cast<size_t>(t) * c.num_heads + h) * D + d]);
    }
  }
  CHECK(r.hidden.data != base.hidden.data);
  e.head = 9;
  edit.edits = {e};
  CHECK_THROWS_WITH(pass(m, ids, &edit), Catch::Contains("no head 9"));
  e.head = head;
  e.value = Tensor({T, T - 1});
  edit.edits = {e};
  CHECK_THROWS_WITH(pass(m, ids, &edit), Catch::Contains("keys need"));
  fs::remove_all(dir);
}

TEST_CASE("hooks: the embedding's parts are named and sum to the first layer's input", "[hooks]") {
  SECTION("Llama: the token rows only, and they are the first layer's input") {
    const std::string dir = scratch("embed_llama");
    const Model m = tiny_decoder(dir);
    const std::vector<int> ids = random_ids(6, m.config.vocab_size, 8);
    HookSpec all;
    all.cache = {"*"};
    const ForwardResult r = pass(m, ids, &all);
    CHECK(r.cache.count("hook_pos_embed") == 0);
    const Tensor& e = r.cache.at("hook_embed");
    REQUIRE(e.shape == std::vector<int64_t>{6, m.config.embed_size});
    for (int t = 0; t < 6; ++t)
      for (int k = 0; k < m.config.embed_size; ++k)
        CHECK(e.at(t, k) == m.weights.embedding.at(ids[static_cast<size_t>(t)], k));
    CHECK(same(e, r.cache.at("blocks.0.hook_resid_pre")));
    fs::remove_all(dir);
  }
  SECTION("GPT-2: token rows plus learned positions; an edited part changes the sum") {
    const std::string dir = scratch("embed_gpt2");
    const Model m = tiny_decoder(dir, true);
    const int T = 5, E = m.config.embed_size;
    const std::vector<int> ids = random_ids(T, m.config.vocab_size, 9);
    HookSpec all;
    all.cache = {"*"};
    const ForwardResult r = pass(m, ids, &all);
    const Tensor &tok = r.cache.at("hook_embed"), &pos = r.cache.at("hook_pos_embed");
    const Tensor& x0 = r.cache.at("blocks.0.hook_resid_pre");
    for (int t = 0; t < T; ++t)
      for (int k = 0; k < E; ++k) {
        CHECK(pos.at(t, k) == m.weights.pos_embedding.at(t, k));
        CHECK(x0.at(t, k) == tok.at(t, k) + pos.at(t, k));  // one float addition, as the pass does it
      }
    // hook_names lists them first, in the order the pass reaches them
    const std::vector<std::string> names = hook_names(m.config);
    REQUIRE(names.size() >= 2);
    CHECK(names[0] == "hook_embed");
    CHECK(names[1] == "hook_pos_embed");
    // the positions zeroed: the first layer's input is the token rows alone
    HookSpec zero_pos = all;
    zero_pos.edits.push_back({HookEdit::Kind::Replace, "hook_pos_embed", Tensor({T, E}), {}, 1.0f});
    const ForwardResult z = pass(m, ids, &zero_pos);
    CHECK(same(z.cache.at("blocks.0.hook_resid_pre"), tok));
    CHECK(z.hidden.data != r.hidden.data);
    fs::remove_all(dir);
  }
  SECTION("BERT: embed.hook_embed + hook_pos_embed + hook_token_type_embed, then the LayerNorm") {
    const std::string dir = scratch("embed_bert");
    const Model m = tiny_bert(dir);
    const int T = 6, E = m.config.embed_size;
    ForwardRequest req;
    req.ids = random_ids(T, m.config.vocab_size, 10);
    req.token_types = {0, 0, 0, 1, 1, 1};
    HookSpec all;
    all.cache = {"*"};
    req.hooks = &all;
    auto b = make_backend("reference");
    const ForwardResult r = run_forward(m, *b, req);
    for (const char* n : {"embed.hook_embed", "embed.hook_pos_embed", "embed.hook_token_type_embed"})
      REQUIRE(r.cache.count(n) == 1);
    CHECK(r.cache.count("hook_embed") == 0);
    const Tensor& types = r.cache.at("embed.hook_token_type_embed");
    for (int k = 0; k < E; ++k) {
      CHECK(types.at(1, k) == m.weights.type_embedding.at(0, k));
      CHECK(types.at(4, k) == m.weights.type_embedding.at(1, k));
    }
    // LayerNorm(sum of the parts) is the first layer's input, within the norm's rounding
    const Tensor& x0 = r.cache.at("blocks.0.hook_resid_pre");
    for (int t = 0; t < T; ++t) {
      double mean = 0, var = 0;
      std::vector<double> v(static_cast<size_t>(E));
      for (int k = 0; k < E; ++k) {
        v[static_cast<size_t>(k)] = static_cast<double>(r.cache.at("embed.hook_embed").at(t, k)) +
                                    r.cache.at("embed.hook_pos_embed").at(t, k) + types.at(t, k);
        mean += v[static_cast<size_t>(k)] / E;
      }
      for (int k = 0; k < E; ++k) var += (v[static_cast<size_t>(k)] - mean) * (v[static_cast<size_t>(k)] - mean) / E;
      for (int k = 0; k < E; ++k) {
        const double want = (v[static_cast<size_t>(k)] - mean) / std::sqrt(var + m.config.layer_norm_eps) *
                                m.weights.emb_ln_g.data[static_cast<size_t>(k)] +
                            m.weights.emb_ln_b.data[static_cast<size_t>(k)];
        // the sum's two roundings relative to the row's spread, then the norm's few roundings
        const double scale = std::fabs(m.weights.emb_ln_g.data[static_cast<size_t>(k)]) *
                                 (std::fabs(v[static_cast<size_t>(k)] - mean) + 1) / std::sqrt(var) +
                             std::fabs(m.weights.emb_ln_b.data[static_cast<size_t>(k)]);
        CHECK(std::fabs(x0.at(t, k) - want) <= 2 * gamma32(E + 4) * scale);
      }
    }
    fs::remove_all(dir);
  }
}

TEST_CASE("hooks: attention scores are the pattern's logits; an edited score row is softmaxed into the pattern",
          "[hooks]") {
  const std::string dir = scratch("scores");
  const Model m = tiny_decoder(dir);  // 4 query heads on 2 key/value heads, rotary, causal
  const ModelConfig& c = m.config;
  const int T = 6, H = c.num_heads, D = c.head_dim();
  const std::vector<int> ids = random_ids(T, c.vocab_size, 11);
  HookSpec all;
  all.cache = {"*"};
  const ForwardResult r = pass(m, ids, &all);
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    const Tensor &sc = r.cache.at(b + "attn.hook_attn_scores"), &P = r.cache.at(b + "attn.hook_pattern");
    const Tensor &q = r.cache.at(b + "attn.hook_rot_q"), &k = r.cache.at(b + "attn.hook_rot_k");
    REQUIRE(sc.shape == std::vector<int64_t>{H, T, T});
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t) {
        const float* row = sc.ptr() + (static_cast<int64_t>(h) * T + t) * T;
        double best = -INFINITY, sum = 0, err = 0;
        for (int j = 0; j < T; ++j) {
          if (j > t) {  // causal: blocked keys score -inf
            CHECK(std::isinf(row[j]));
            CHECK(row[j] < 0);
            continue;
          }
          double dot = 0, mag = 0;
          for (int d = 0; d < D; ++d) {
            const double qa = q.data[(static_cast<size_t>(t) * H + h) * D + d];
            const double ka = k.data[(static_cast<size_t>(j) * c.kv_heads() + h / (H / c.kv_heads())) * D + d];
            dot += qa * ka, mag += std::fabs(qa * ka);
          }
          // q . k / sqrt(D) from the kept (rounded) q and k: the dot's roundings and the scaling's
          const double bound = (gamma32(D + 2) * mag + kU32 * std::fabs(dot)) / std::sqrt(D);
          CHECK(std::fabs(row[j] - dot / std::sqrt(D)) <= bound);
          // the pass's own scores (its backend's product) are as far from the exact ones
          err = std::max(err, 2 * bound);
          best = std::max(best, static_cast<double>(row[j]));
        }
        for (int j = 0; j <= t; ++j) sum += std::exp(row[j] - best);
        for (int j = 0; j <= t; ++j) {  // softmax(scores) is the pattern, within the softmax's bound
          const double want = std::exp(row[j] - best) / sum;
          CHECK(std::fabs(P.data[(static_cast<size_t>(h) * T + t) * T + j] - want) <= softmax_bound(T, err));
        }
      }
  }
  // scores set to 0 on the visible keys of head 2: its pattern is uniform, z the mean of the values
  const int head = 2, g = head / (H / c.kv_heads());
  HookEdit e;
  e.name = "blocks.1.attn.hook_attn_scores";
  e.head = head;
  e.value = Tensor({T, T});
  for (int t = 0; t < T; ++t)
    for (int j = t + 1; j < T; ++j) e.value.at(t, j) = -INFINITY;
  HookSpec edit = all;
  edit.edits = {e};
  const ForwardResult u = pass(m, ids, &edit);
  const Tensor &P = u.cache.at("blocks.1.attn.hook_pattern"), &z = u.cache.at("blocks.1.attn.hook_z"),
               &v = u.cache.at("blocks.1.attn.hook_v"), &z0 = r.cache.at("blocks.1.attn.hook_z");
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < T; ++j) {
      const float p = P.data[(static_cast<size_t>(head) * T + t) * T + j];
      if (j > t)
        CHECK(p == 0.0f);
      else
        CHECK(std::fabs(p - 1.0 / (t + 1)) <= 4 * kU32);
      CHECK(u.cache.at("blocks.1.attn.hook_attn_scores").data[(static_cast<size_t>(head) * T + t) * T + j] ==
            e.value.at(t, j));
    }
    for (int d = 0; d < D; ++d) {
      double want = 0, mag = 0;
      for (int j = 0; j <= t; ++j) {
        want += v.data[(static_cast<size_t>(j) * c.kv_heads() + g) * D + d] / (t + 1.0);
        mag += std::fabs(v.data[(static_cast<size_t>(j) * c.kv_heads() + g) * D + d]);
      }
      CHECK(std::fabs(z.data[(static_cast<size_t>(t) * H + head) * D + d] - want) <= 6 * kU32 * mag);
      for (int h = 0; h < H; ++h)  // the other heads are the unedited pass's, bit for bit
        if (h != head)
          CHECK(z.data[(static_cast<size_t>(t) * H + h) * D + d] == z0.data[(static_cast<size_t>(t) * H + h) * D + d]);
    }
  }
  // every key blocked by the edit: the row is all zeros, never NaN
  e.value = Tensor({1, T});
  std::fill(e.value.data.begin(), e.value.data.end(), -INFINITY);
  e.positions = {3};
  edit.edits = {e};
  const ForwardResult nan_free = pass(m, ids, &edit);
  for (int j = 0; j < T; ++j)
    CHECK(nan_free.cache.at("blocks.1.attn.hook_pattern").data[(static_cast<size_t>(head) * T + 3) * T + j] == 0.0f);
  for (float x : nan_free.hidden.data) CHECK(std::isfinite(x));
  // an edit of the wrong size is said
  e.value = Tensor({1, T - 1});
  edit.edits = {e};
  CHECK_THROWS_WITH(pass(m, ids, &edit), Catch::Contains("keys need"));
  fs::remove_all(dir);
}

TEST_CASE("hooks: mean ablation makes a head's z its mean over the positions, and nothing else", "[hooks]") {
  const std::string dir = scratch("mean_ablation");
  const Model m = tiny_decoder(dir);
  const ModelConfig& c = m.config;
  const int T = 7, H = c.num_heads, D = c.head_dim(), head = 1;
  const std::vector<int> ids = random_ids(T, c.vocab_size, 12);
  HookSpec keep;
  keep.cache = {"blocks.0.attn.hook_z"};
  const ForwardResult base = pass(m, ids, &keep);
  HookSpec ablate = keep;
  ablate.edits = {mean_ablation(0, head, D)};
  const ForwardResult r = pass(m, ids, &ablate);
  const Tensor &z0 = base.cache.at("blocks.0.attn.hook_z"), &z = r.cache.at("blocks.0.attn.hook_z");
  for (int d = 0; d < D; ++d) {
    double sum = 0;  // the same sum in the same order: the same float
    for (int t = 0; t < T; ++t) sum += z0.data[(static_cast<size_t>(t) * H + head) * D + d];
    const float mean = static_cast<float>(sum / T);
    for (int t = 0; t < T; ++t) {
      CHECK(z.data[(static_cast<size_t>(t) * H + head) * D + d] == mean);
      for (int h = 0; h < H; ++h)
        if (h != head)
          CHECK(z.data[(static_cast<size_t>(t) * H + h) * D + d] == z0.data[(static_cast<size_t>(t) * H + h) * D + d]);
    }
  }
  CHECK(r.hidden.data != base.hidden.data);
  ablate.edits = {mean_ablation(0, 9, D)};
  CHECK_THROWS_WITH(pass(m, ids, &ablate), Catch::Contains("no head 9"));
  fs::remove_all(dir);
}
