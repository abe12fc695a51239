// Attention on demand (PassOptions::attention_on_demand): a pass keeps every layer's queries and
// keys (cross mode: the layer inputs) instead of its probabilities, and ForwardResult::layer_probs
// recomputes a layer's probabilities in the same attention op, so they equal the kept ones bit
// for bit: on every backend that recomputes, for every kind of attention (sinusoidal, learned,
// relative, rotary with grouped-query heads, q/k norms, a window, Gemma 2's soft cap and its
// windowed and full layers), at T 1, 7 and 33, after a KV-cached pass and in cross mode.
#include <atomic>
#include <cmath>
#include <limits>
#include <thread>

#include "engine/compute/forward.h"
#include "engine/compute/hooks.h"
#include "engine/compute/kv_cache.h"
#include "tests/engine/hf_test_model.h"
#include "tests/engine/test_util.h"

using namespace attnlab;
using namespace attnlab::test;

namespace {

std::vector<std::string> recomputing_backends() {
  std::vector<std::string> out;
  const std::vector<std::string> here = backend_names();
  for (const std::string name : {"reference", "cpu", "cpu-bf16"}) {
    if (name == "cpu-bf16" && std::find(here.begin(), here.end(), name) == here.end())
      continue;  // built without oneDNN, or no bf16 kernels on this CPU (AVX2 only)
    out.push_back(name);
  }
  return out;
}

ForwardRequest on_demand(ForwardRequest req, int layers) {
  req.keep_attention.assign(static_cast<size_t>(layers), false);
  req.attention_on_demand = true;
  return req;
}

// Every layer of `lazy` recomputed equals the kept probabilities of `kept`, bit for bit.
void check_equal(const ForwardResult& kept, const ForwardResult& lazy, int layers) {
  REQUIRE(lazy.on_demand);
  for (int l = 0; l < layers; ++l) {
    CAPTURE(l);
    CHECK(lazy.probs(l).empty());  // not kept
    REQUIRE(lazy.has_probs(l));
    const std::shared_ptr<const Tensor> p = lazy.layer_probs(l);
    REQUIRE(p->shape == kept.probs(l).shape);
    CHECK(max_abs_diff(*p, kept.probs(l)) == 0.0);
  }
  CHECK(max_abs_diff(lazy.hidden, kept.hidden) == 0.0);  // the pass itself is unchanged
}

}  // namespace

TEST_CASE("attention on demand recomputes every layer's probabilities exactly", "[forward][on-demand]") {
  const std::string dir = scratch_dir("on-demand", "models");
  std::vector<std::pair<std::string, Model>> models;
  for (const Positional pos : {Positional::Sinusoidal, Positional::Relative}) {
    ModelConfig c = small_config(16, 4, 2, 24, 64);
    c.positional = pos;
    models.emplace_back(pos == Positional::Relative ? "relative" : "sinusoidal", random_model(c));
  }
  models.emplace_back("bert", tiny_bert(dir + "/bert"));
  models.emplace_back("llama", tiny_decoder(dir + "/llama"));
  models.emplace_back("gpt2", tiny_decoder(dir + "/gpt2", true));
  models.emplace_back("mistral", tiny_decoder(dir + "/mistral", false, 5));
  models.emplace_back("qwen3", tiny_decoder(dir + "/qwen3", false, 0, true, 6));
  models.emplace_back("gemma2", tiny_gemma2(dir + "/gemma2"));
  for (const auto& [kind, m] : models)
    for (const std::string& name : recomputing_backends()) {
      CAPTURE(kind, name);
      auto backend = make_backend(name);
      REQUIRE(backend->recomputes_attention());
      for (const int T : {1, 7, 33}) {
        if (T > m.config.max_len) continue;
        CAPTURE(T);
        ForwardRequest req;
        req.ids = random_ids(T, m.config.vocab_size, 5);
        const ForwardResult kept = run_forward(m, *backend, req);
        const ForwardResult lazy = run_forward(m, *backend, on_demand(req, m.config.num_layers));
        check_equal(kept, lazy, m.config.num_layers);
        CHECK(max_abs_diff(lazy.stacked_probs(), kept.stacked_probs()) == 0.0);
        // what the estimate counts is what the pass keeps
        const PassMemory est = estimate_pass_memory(m, on_demand(req, m.config.num_layers));
        CHECK(est.attention == lazy.on_demand->bytes());
      }
    }
  std::filesystem::remove_all(dir);
}

TEST_CASE("attention on demand caches the recent layers and is safe from several threads", "[forward][on-demand]") {
  ModelConfig c = small_config(16, 4, 4, 24, 64);
  const Model m = random_model(c);
  auto cpu = make_backend("cpu");
  ForwardRequest req;
  req.ids = random_ids(21, c.vocab_size, 8);
  const ForwardResult kept = run_forward(m, *cpu, req);
  const ForwardResult lazy = run_forward(m, *cpu, on_demand(req, c.num_layers));
  const std::shared_ptr<const Tensor> a = lazy.layer_probs(1);
  CHECK(lazy.layer_probs(1).get() == a.get());  // cached
  lazy.layer_probs(2);
  lazy.layer_probs(3);  // two more layers: layer 1 leaves the cache
  const std::shared_ptr<const Tensor> b = lazy.layer_probs(1);
  CHECK(b.get() != a.get());
  CHECK(max_abs_diff(*a, *b) == 0.0);  // the one held is still valid, and equal
  // copies of a result share its source
  const ForwardResult copy = lazy;
  CHECK(copy.layer_probs(1).get() == b.get());
  // four threads asking for every layer in turns
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < 12; ++k) {
        const int l = (k + t) % c.num_layers;
        if (max_abs_diff(*lazy.layer_probs(l), kept.probs(l)) != 0.0) ++wrong;
      }
    });
  for (std::thread& t : threads) t.join();
  CHECK(wrong == 0);
  CHECK_THROWS_WITH(lazy.layer_probs(c.num_layers), Catch::Contains("no layer 4"));
  // a pass that kept neither
  ForwardRequest none = req;
  none.keep_attention.assign(static_cast<size_t>(c.num_layers), false);
  const ForwardResult bare = run_forward(m, *cpu, none);
  CHECK_FALSE(bare.has_probs(0));
  CHECK_THROWS_WITH(bare.layer_probs(0), Catch::Contains("was not kept"));
}

TEST_CASE("attention on demand after a KV-cached pass and in cross mode", "[forward][on-demand]") {
  const std::string dir = scratch_dir("on-demand", "cached");
  for (const bool gemma : {false, true}) {
    CAPTURE(gemma);
    const Model m = gemma ? tiny_gemma2(dir + "/g") : tiny_decoder(dir + "/l");
    auto cpu = make_backend("cpu");
    const std::vector<int> ids = random_ids(23, m.config.vocab_size, 11);
    ForwardRequest full_req;
    full_req.ids = ids;
    const ForwardResult full = run_forward(m, *cpu, full_req);
    auto [first, rest] = cached_passes(m, *cpu, on_demand(full_req, m.config.num_layers), ids, 9, false);
    REQUIRE(rest.on_demand->queries[0].dim(0) == 23 - 9);  // the new rows' queries
    merge_cached_rows(first, rest);
    REQUIRE(rest.on_demand->queries[0].dim(0) == 23);
    // the cached rows' keys went through the same ops: within float32 rounding of the full pass
    // (pass_bound's), and the recomputed rows are what the cached pass's own probabilities are
    for (int l = 0; l < m.config.num_layers; ++l) {
      const Tensor& want = full.attention[static_cast<size_t>(l)];
      CHECK(max_abs_diff(*rest.layer_probs(l), want) <= 1e-5);
    }
    const ForwardResult krest = cached_passes(m, *cpu, full_req, ids, 9).rest;
    // against the kept probabilities of the same cached passes: their rows < 9 came from the
    // first pass's softmax over 9 keys, the recomputed ones over 23 (the blocked ones adding 0):
    // the sum of a row's exponentials rounds in another order, within 23 float32 ulps of 1
    const double bound = 23 * std::numeric_limits<float>::epsilon();
    for (int l = 0; l < m.config.num_layers; ++l)
      CHECK(max_abs_diff(*rest.layer_probs(l), krest.attention[static_cast<size_t>(l)]) <= bound);
  }
  {  // cross mode: the two sequences' layer inputs kept, the cross-attention recomputed
    const Model m = tiny_bert(dir + "/bert");
    auto cpu = make_backend("cpu");
    ForwardRequest req;
    req.ids = random_ids(6, m.config.vocab_size, 1, 5);
    req.cross_ids = random_ids(9, m.config.vocab_size, 2, 5);
    const ForwardResult kept = run_forward(m, *cpu, req);
    const ForwardResult lazy = run_forward(m, *cpu, on_demand(req, m.config.num_layers));
    REQUIRE(lazy.is_cross());
    REQUIRE(lazy.on_demand->inputs_a.size() == static_cast<size_t>(m.config.num_layers));
    check_equal(kept, lazy, m.config.num_layers);
    CHECK(estimate_pass_memory(m, on_demand(req, m.config.num_layers)).attention == lazy.on_demand->bytes());
  }
  std::filesystem::remove_all(dir);
}

namespace {

// Rows first.. of a kept [H, T, S] tensor.
Tensor rows_from(const Tensor& all, int first) {
  const int64_t H = all.dim(0), T = all.dim(1), S = all.dim(2);
  Tensor out({H, T - first, S});
  for (int64_t h = 0; h < H; ++h)
    std::copy_n(all.ptr() + (h * T + first) * S, (T - first) * S, out.ptr() + h * (T - first) * S);
  return out;
}

// How far a recomputed row of some queries may be from the same rows of a whole layer's
// recompute: each score is a D-term float32 dot product of the same query and key, which a
// product over fewer queries may sum in another order: |ds| <= 2 gamma_D sum_d |q_d k_d| |scale|
// (each within gamma_D of the exact value), and a softmax moves a probability by at most
// p (e^{2 max |ds|} - 1) <= e^{2 max |ds|} - 1.
double rows_bound(const Model& m, const AttentionSource& src, int layer) {
  const ModelConfig& c = m.config;
  const int H = c.num_heads, KV = c.kv_heads(), D = c.head_dim();
  const Tensor &q = src.queries[static_cast<size_t>(layer)], &k = src.keys[static_cast<size_t>(layer)];
  const double eps = std::numeric_limits<float>::epsilon() / 2, gamma = D * eps / (1 - D * eps);
  const double scale = c.attn_scale > 0 ? c.attn_scale : 1.0 / std::sqrt(static_cast<double>(D));
  double worst = 0;
  for (int h = 0; h < H; ++h) {
    const int g = h / (H / KV);
    for (int64_t i = 0; i < q.dim(0); ++i)
      for (int64_t j = 0; j < k.dim(0); ++j) {
        double dot = 0;
        for (int d = 0; d < D; ++d)
          dot += std::fabs(static_cast<double>(q.at(i, static_cast<int64_t>(h) * D + d)) *
                           k.at(j, static_cast<int64_t>(g) * D + d));
        worst = std::max(worst, dot);
      }
  }
  return std::expm1(2 * 2 * gamma * worst * scale);
}

}  // namespace

TEST_CASE("layer_rows: the rows from a first query, copied where kept, computed for those queries on demand",
          "[forward][on-demand]") {
  const std::string dir = scratch_dir("on-demand", "rows");
  std::vector<std::pair<std::string, Model>> models;
  {
    ModelConfig c = small_config(16, 4, 2, 24, 64);
    c.positional = Positional::Relative;  // a row's bias depends on its position: recomputed whole and cut
    models.emplace_back("relative", random_model(c));
  }
  models.emplace_back("llama", tiny_decoder(dir + "/llama"));
  models.emplace_back("gpt2", tiny_decoder(dir + "/gpt2", true));
  models.emplace_back("mistral", tiny_decoder(dir + "/mistral", false, 5));
  for (const auto& [kind, m] : models)
    for (const std::string name : {"reference", "cpu"}) {
      CAPTURE(kind, name);
      auto backend = make_backend(name);
      const int T = 40;
      ForwardRequest req;
      req.ids = random_ids(T, m.config.vocab_size, 7);
      const ForwardResult kept = run_forward(m, *backend, req);
      const ForwardResult lazy = run_forward(m, *backend, on_demand(req, m.config.num_layers));
      for (int l = 0; l < m.config.num_layers; ++l)
        for (const int first : {0, 1, 17, 39}) {
          CAPTURE(l, first);
          const Tensor want = rows_from(kept.attention[static_cast<size_t>(l)], first);
          const std::shared_ptr<const Tensor> k = kept.layer_rows(l, first), z = lazy.layer_rows(l, first);
          REQUIRE(k->shape == want.shape);
          REQUIRE(z->shape == want.shape);
          CHECK(max_abs_diff(*k, want) == 0.0);  // a copy
          // the reference ops sum each score the same way whatever the number of queries; the cpu
          // ops' products may not (rows_bound). The relative model's rows are cut from the whole.
          if (name == "reference" || kind == "relative" || first == 0)
            CHECK(max_abs_diff(*z, want) == 0.0);
          else
            CHECK(max_abs_diff(*z, want) <= rows_bound(m, *lazy.on_demand, l));
        }
      CHECK_THROWS_WITH(lazy.layer_rows(0, T), Catch::Contains("rows from 40 of 40"));
      CHECK_THROWS_WITH(kept.layer_rows(0, -1), Catch::Contains("rows from -1"));
    }
  std::filesystem::remove_all(dir);
}

TEST_CASE("an edit of the scores or patterns keeps the probabilities instead", "[forward][on-demand][hooks]") {
  ModelConfig c = small_config(16, 4, 2, 24, 64);
  const Model m = random_model(c);
  auto cpu = make_backend("cpu");
  ForwardRequest req;
  req.ids = random_ids(9, c.vocab_size, 8);
  HookSpec spec;
  HookEdit edit;  // head 0's pattern replaced by uniform weights
  edit.name = "blocks.1.attn.hook_pattern";
  edit.head = 0;
  edit.value = Tensor({9, 9});
  edit.value.data.assign(edit.value.data.size(), 1.0f / 9);
  spec.edits.push_back(edit);
  ForwardRequest edited = on_demand(req, c.num_layers);
  edited.hooks = &spec;
  const ForwardResult r = run_forward(m, *cpu, edited);
  CHECK_FALSE(r.on_demand);
  REQUIRE_FALSE(r.attention[1].empty());  // what the edit made, not what q and k give
  ForwardRequest plain_req = req;
  const ForwardResult plain = run_forward(m, *cpu, plain_req);
  CHECK(max_abs_diff(r.attention[1], plain.attention[1]) > 1e-3);
}
