// Generation without Python: a KV-cached pass against a full pass of the same ids (appending,
// editing in the middle, one token at a time, a changed mask, GPT-2's learned positions and
// Llama's rotary ones), the warpers against their definitions, the sampler's seed, greedy
// generation against repeated full passes, and the decoders' text. (Greedy output against
// transformers' generate and decode against tokenizers' are tests/crosscheck/hf_decoders.py.)
#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>

#include "engine/compute/forward.h"
#include "engine/compute/generate.h"
#include "engine/compute/kv_cache.h"
#include "engine/compute/lm.h"
#include "engine/core/memory.h"
#include "tests/engine/hf_test_model.h"
#include "tests/engine/pass_bound.h"
#include "tests/engine/test_util.h"
#include "tests/engine/tolerance.h"

using namespace attnlab;
using namespace attnlab::test;
namespace fs = std::filesystem;

namespace {

// A cached result's rows against the full pass's rows P..T-1, within the bound of two float32
// passes of the same values (the cached pass multiplies the same numbers in other shapes).
void check_rows(const Model& m, const ForwardRequest& full_req, const ForwardResult& full, const ForwardResult& part) {
  const PassBound tol = pass_bound(m, full_req, full);
  const int T = static_cast<int>(full.ids.size()), P = part.first_position, E = m.config.embed_size;
  REQUIRE(part.hidden.dim(0) == T - P);
  double hidden = 0;
  for (int i = P; i < T; ++i)
    for (int e = 0; e < E; ++e)
      hidden = std::max(hidden, std::abs(double(full.hidden.data[static_cast<size_t>(i * E + e)]) -
                                         part.hidden.data[static_cast<size_t>((i - P) * E + e)]));
  CHECK(hidden <= tol.hidden);
  for (int l = 0; l < m.config.num_layers; ++l) {
    const Tensor &a = full.attention[static_cast<size_t>(l)], &b = part.attention[static_cast<size_t>(l)];
    REQUIRE(b.shape == std::vector<int64_t>{m.config.num_heads, T - P, T});
    double worst = 0;
    for (int h = 0; h < m.config.num_heads; ++h)
      for (int i = P; i < T; ++i)
        for (int j = 0; j < T; ++j)
          worst = std::max(worst, std::abs(double(a.data[static_cast<size_t>((h * T + i) * T + j)]) -
                                           b.data[static_cast<size_t>((h * (T - P) + i - P) * T + j)]));
    CHECK(worst <= tol.probs[static_cast<size_t>(l)]);
  }
}

// The next tokens of two passes over the same ids, one computing the last row alone (a cached
// pass): their logits differ by the last hidden row's error (pass_bound) through the LM head, each
// logit by at most ||W_v||_1 of it plus its E-term product's own rounding, and a probability by at
// most twice the largest logit error (softmax moves p_v by p_v (dz_v - sum_u p_u dz_u)). The ids
// agree wherever two candidates are further apart than that.
void check_next_tokens(const Model& m, const ForwardRequest& full_req, const ForwardResult& full,
                       const ForwardResult& part) {
  const PassBound tol = pass_bound(m, full_req, full);
  const Tensor& W = m.config.tied_lm_head ? m.weights.embedding : m.weights.lm_head;
  const int E = m.config.embed_size, last = static_cast<int>(full.ids.size()) - 1;
  double z_err = 0;
  for (int v = 0; v < m.config.vocab_size; ++v) {
    double w1 = 0, terms = 0;
    for (int e = 0; e < E; ++e) {
      w1 += std::fabs(W.at(v, e));
      terms += std::fabs(static_cast<double>(full.hidden.at(last, e)) * W.at(v, e));
    }
    z_err = std::max(z_err, w1 * tol.hidden + 2 * sum_bound(E, terms));
  }
  const double p_err = 2 * z_err;
  REQUIRE(part.next_tokens.size() == full.next_tokens.size());
  for (size_t k = 0; k < full.next_tokens.size(); ++k) {
    // plus each side's probability rounded to float32 once (p <= 1: 2^-24 each)
    CHECK(std::fabs(part.next_tokens[k].second - full.next_tokens[k].second) <= p_err + 2 * 0x1p-24);
    const bool separated =
        (k == 0 || full.next_tokens[k - 1].second - full.next_tokens[k].second > 2 * p_err) &&
        (k + 1 == full.next_tokens.size() || full.next_tokens[k].second - full.next_tokens[k + 1].second > 2 * p_err);
    if (separated) CHECK(part.next_tokens[k].first == full.next_tokens[k].first);
  }
}

}  // namespace

TEST_CASE("the memory a pass is estimated to take counts what it keeps", "[generate][memory]") {
  const std::string dir = scratch_dir("gen", "memory");
  const Model m = tiny_decoder(dir, false, 0, true, 6);  // Qwen3-style: head_dim 6 over hidden 16
  auto cpu = make_backend("cpu");
  const ModelConfig& c = m.config;
  KvCache cache;
  ForwardRequest req;
  req.ids = random_ids(19, c.vocab_size, 2);
  req.kv = &cache;
  req.keep_attention.assign(static_cast<size_t>(c.num_layers), false);
  req.keep_attention[0] = true;  // one layer's probabilities kept
  const PassMemory est = estimate_pass_memory(m, req);
  const ForwardResult r = run_forward(m, *cpu, req);
  double kept = 0;
  for (const Tensor& a : r.attention) kept += static_cast<double>(a.numel()) * sizeof(float);
  CHECK(kept > 0);
  CHECK(est.attention == kept);                               // the probabilities the result holds
  CHECK(est.kv_cache == static_cast<double>(cache.bytes()));  // the cache the pass left
  CHECK(est.weights == weight_bytes(c));
  CHECK(est.pass() == est.attention + est.activations + est.hooks + est.kv_cache);
  CHECK(est.hooks == 0);
  req.kv = nullptr;
  req.keep_attention.clear();  // every layer now, and no cache
  const PassMemory all = estimate_pass_memory(m, req);
  CHECK(all.attention == est.attention * c.num_layers);
  CHECK(all.kv_cache == 0);

  CHECK(memory_text(512) == "1 kB");
  CHECK(memory_text(12.4e6) == "12 MB");
  CHECK(memory_text(4.44e9) == "4.4 GB");
}

TEST_CASE("KV cache over 1 to 200 tokens: one at a time, each step's rows equal a full pass", "[generate]") {
  const std::string dir = scratch_dir("gen", "kv-long");
  // Mistral's window of 5 is crossed 40 times; Qwen2's biases enter every cached key and value
  for (const int kind : {0, 1}) {
    CAPTURE(kind);
    const Model m = tiny_decoder(dir, false, kind == 0 ? 5 : 0, false, 0, kind == 1, 256);
    auto cpu = make_backend("cpu");
    const std::vector<int> ids = random_ids(200, m.config.vocab_size, 17);
    KvCache cache;
    ForwardRequest one;
    one.kv = &cache;
    for (int t = 1; t <= 200; ++t) {
      one.ids.assign(ids.begin(), ids.begin() + t);
      const ForwardResult r = run_forward(m, *cpu, one);
      REQUIRE(r.first_position == t - 1);
      CHECK(cache.size() == t);
      if (t == 1 || t == 2 || t == 6 || t == 64 || t == 65 || t == 128 || t == 199 || t == 200) {
        CAPTURE(t);
        ForwardRequest full_req;
        full_req.ids = one.ids;
        const ForwardResult full = run_forward(m, *cpu, full_req);
        check_rows(m, full_req, full, r);
        check_next_tokens(m, full_req, full, r);
      }
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("KV cache: appended, edited, one token at a time and with a changed mask, the rows equal a full pass",
          "[generate]") {
  const std::string dir = scratch_dir("gen", "kv");
  // Llama (rotary, grouped-query), GPT-2 (learned positions), Mistral (window 5), Qwen3 with heads
  // of 6 over a hidden size of 16 (q/k norm, the cache's rows head_dim wide), Qwen2 (q, k, v biases)
  for (const int kind : {0, 1, 2, 3, 4}) {
    CAPTURE(kind);
    const Model m = tiny_decoder(dir, kind == 1, kind == 2 ? 5 : 0, kind == 3, kind == 3 ? 6 : 0, kind == 4);
    if (kind == 4) REQUIRE(m.config.qkv_bias);
    auto cpu = make_backend("cpu");
    const std::vector<int> ids = random_ids(23, m.config.vocab_size, 11);
    ForwardRequest full_req;
    full_req.ids = ids;
    const ForwardResult full = run_forward(m, *cpu, full_req);

    KvCache cache;
    ForwardRequest req;
    req.kv = &cache;
    req.ids.assign(ids.begin(), ids.begin() + 9);  // a prefix, then the rest
    const ForwardResult first = run_forward(m, *cpu, req);
    CHECK(first.first_position == 0);
    CHECK(cache.size() == 9);
    CHECK(cache.bytes() == 9 * kv_bytes_per_position(m.config));
    req.ids = ids;
    const ForwardResult rest = run_forward(m, *cpu, req);
    CHECK(rest.first_position == 9);
    CHECK(cache.kept == 9);
    check_rows(m, full_req, full, rest);

    // the same ids again: only the last position is computed
    const ForwardResult again = run_forward(m, *cpu, req);
    CHECK(again.first_position == 22);
    check_rows(m, full_req, full, again);
    check_next_tokens(m, full_req, full, again);

    // merged with the pass the cache came from, it is the full result
    ForwardResult merged = rest;
    merge_cached_rows(first, merged);
    const PassBound tol = pass_bound(m, full_req, full);
    CHECK(merged.first_position == 0);
    CHECK(max_abs_diff(merged.hidden, full.hidden) <= tol.hidden);
    for (int l = 0; l < m.config.num_layers; ++l)
      CHECK(max_abs_diff(merged.attention[l], full.attention[l]) <= tol.probs[static_cast<size_t>(l)]);

    // an edit at position 5: positions from 5 on are computed again, and equal a full pass of the new ids
    std::vector<int> edited = ids;
    edited[5] = (edited[5] + 1) % m.config.vocab_size;
    ForwardRequest edited_full_req;
    edited_full_req.ids = edited;
    const ForwardResult edited_full = run_forward(m, *cpu, edited_full_req);
    req.ids = edited;
    const ForwardResult edited_part = run_forward(m, *cpu, req);
    CHECK(edited_part.first_position == 5);
    check_rows(m, edited_full_req, edited_full, edited_part);

    // every split point: the first p positions cached, the rest computed
    for (int p = 1; p < 23; ++p) {
      KvCache split;
      ForwardRequest a;
      a.kv = &split;
      a.ids.assign(ids.begin(), ids.begin() + p);
      run_forward(m, *cpu, a);
      a.ids = ids;
      const ForwardResult r = run_forward(m, *cpu, a);
      REQUIRE(r.first_position == p);
      check_rows(m, full_req, full, r);
    }
    // one token at a time from scratch
    KvCache steps;
    ForwardRequest one;
    one.kv = &steps;
    for (int t = 1; t <= 23; ++t) {
      one.ids.assign(ids.begin(), ids.begin() + t);
      const ForwardResult r = run_forward(m, *cpu, one);
      CHECK(r.first_position == t - 1);
      if (t == 23) check_rows(m, full_req, full, r);
    }

    // a mask that changes row 12 on (a window of 3 from there is not what the cache holds): no reuse past it
    req.ids = ids;
    run_forward(m, *cpu, req);
    ForwardRequest windowed = req;
    windowed.mask.window = 3;  // |i - j| <= 1 with the causal mask: every row from 2 on changes
    const ForwardResult w = run_forward(m, *cpu, windowed);
    CHECK(w.first_position == 2);
    ForwardRequest windowed_full = windowed;
    windowed_full.kv = nullptr;
    check_rows(m, windowed_full, run_forward(m, *cpu, windowed_full), w);
  }
  fs::remove_all(dir);
}

TEST_CASE("KV cache: a pass cancelled between layers leaves the cache as it was before it", "[generate]") {
  const std::string dir = scratch_dir("gen", "cancel");
  const Model m = tiny_decoder(dir);
  auto cpu = make_backend("cpu");
  const std::vector<int> ids = random_ids(15, m.config.vocab_size, 4);
  KvCache cache;
  ForwardRequest req;
  req.kv = &cache;
  req.ids.assign(ids.begin(), ids.begin() + 6);
  run_forward(m, *cpu, req);
  std::atomic<bool> cancel{false};
  req.ids = ids;
  req.cancel = &cancel;
  req.on_layer = [&](int) { cancel = true; };  // layer 0 runs (and appends its rows), layer 1 is not reached
  CHECK_THROWS_AS(run_forward(m, *cpu, req), Cancelled);
  req.cancel = nullptr;
  req.on_layer = nullptr;
  const ForwardResult r = run_forward(m, *cpu, req);
  CHECK(r.first_position == 6);
  ForwardRequest full;
  full.ids = ids;
  check_rows(m, full, run_forward(m, *cpu, full), r);
  fs::remove_all(dir);
}

TEST_CASE("KV cache: refused for encoders and with hooks; new weights drop it", "[generate][errors]") {
  const std::string dir = scratch_dir("gen", "refuse");
  {
    const Model bert = tiny_bert(dir + "/bert");
    auto cpu = make_backend("cpu");
    KvCache cache;
    ForwardRequest req;
    req.ids = {2, 5, 6, 3};
    req.kv = &cache;
    CHECK_THROWS_WITH(run_forward(bert, *cpu, req), Catch::Contains("causal language models"));
  }
  Model m = tiny_decoder(dir + "/llama");
  auto cpu = make_backend("cpu");
  KvCache cache;
  ForwardRequest req;
  req.ids = random_ids(8, m.config.vocab_size, 5);
  req.kv = &cache;
  run_forward(m, *cpu, req);
  CHECK(run_forward(m, *cpu, req).first_position == 7);
  m.weights.version = next_weights_version();  // new weights: nothing is reused
  CHECK(run_forward(m, *cpu, req).first_position == 0);
  req.ablate = {{0, 1}};
  CHECK_THROWS_WITH(run_forward(m, *cpu, req), Catch::Contains("plain pass"));
  fs::remove_all(dir);
}

TEST_CASE("warpers: temperature, top-k, top-p and min-p as transformers defines them, in its order", "[generate]") {
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f, 0.5f, -1.0f, -3.0f};
  auto softmax = [](std::vector<double> s) {
    double m = *std::max_element(s.begin(), s.end()), z = 0;
    for (double& v : s) z += (v = std::exp(v - m));
    for (double& v : s) v /= z;
    return s;
  };
  auto prob = [](const NextTokenDistribution& d, int id) {
    for (const auto& [k, p] : d.kept)
      if (k == id) return static_cast<double>(p);
    return 0.0;
  };
  SamplingOptions o;
  o.greedy = false;
  // nothing set: the raw softmax, every token kept, likeliest first, ties by id
  NextTokenDistribution d = warp_logits(logits, o);
  REQUIRE(d.kept.size() == 6);
  CHECK(d.kept[0].first == 0);
  CHECK(d.kept[2].first == 2);
  CHECK(d.kept[3].first == 3);
  const std::vector<double> raw = softmax({2, 1, 0.5, 0.5, -1, -3});
  for (int k = 0; k < 6; ++k) CHECK(std::abs(prob(d, k) - raw[static_cast<size_t>(k)]) < 1e-6);
  double H = 0;
  for (double p : raw) H -= p * std::log(p);
  CHECK(std::abs(d.entropy - H) < 1e-5);
  // temperature 2: softmax(logits / 2)
  o.temperature = 2.0f;
  d = warp_logits(logits, o);
  const std::vector<double> warm = softmax({1, 0.5, 0.25, 0.25, -0.5, -1.5});
  for (int k = 0; k < 6; ++k) CHECK(std::abs(prob(d, k) - warm[static_cast<size_t>(k)]) < 1e-6);
  // top-k 3: the k-th largest is 0.5, shared by ids 2 and 3: both kept (scores < it are removed)
  o.temperature = 1.0f;
  o.top_k = 3;
  d = warp_logits(logits, o);
  CHECK(d.kept.size() == 4);
  const std::vector<double> four = softmax({2, 1, 0.5, 0.5});
  for (int k = 0; k < 4; ++k) CHECK(std::abs(prob(d, k) - four[static_cast<size_t>(k)]) < 1e-6);
  // top-p: the smallest set from the top whose mass reaches top_p (removed where the ascending
  // cumulative mass is <= 1 - top_p)
  o.top_k = 0;
  o.top_p = static_cast<float>(raw[0] + raw[1] + 0.01);  // ids 0, 1 are not enough, the next tie adds one
  d = warp_logits(logits, o);
  CHECK(d.kept.size() == 3);
  CHECK(prob(d, 0) > 0);
  CHECK(prob(d, 1) > 0);
  o.top_p = 1e-4f;  // the largest is always kept
  d = warp_logits(logits, o);
  REQUIRE(d.kept.size() == 1);
  CHECK(d.kept[0] == std::pair<int, float>(0, 1.0f));
  CHECK(d.entropy == 0.0);
  // min-p 0.2: drop p < 0.2 x p_max
  o.top_p = 1.0f;
  o.min_p = 0.2f;
  d = warp_logits(logits, o);
  size_t expect = 0;
  for (double p : raw) expect += p >= 0.2 * raw[0];
  CHECK(d.kept.size() == expect);
  // order: temperature before top-p (a hot temperature flattens the distribution, so top-p keeps more)
  o.min_p = 0.0f;
  o.top_p = 0.8f;
  const size_t cold = warp_logits(logits, o).kept.size();
  o.temperature = 3.0f;
  CHECK(warp_logits(logits, o).kept.size() > cold);
  // bad values are errors
  o.temperature = 0.0f;
  CHECK_THROWS_WITH(warp_logits(logits, o), Catch::Contains("--temperature"));
  o.temperature = 1.0f;
  o.top_p = 1.5f;
  CHECK_THROWS_WITH(warp_logits(logits, o), Catch::Contains("--top-p"));
}

TEST_CASE("sampling: one seed, one text; draws follow the distribution", "[generate]") {
  NextTokenDistribution d;
  d.kept = {{4, 0.5f}, {9, 0.3f}, {1, 0.2f}};
  SamplingOptions o;
  o.greedy = false;
  SampleRng a(42), b(42), c(43);
  std::vector<int> counts(10, 0);
  bool differ = false;
  for (int k = 0; k < 20000; ++k) {
    const int x = choose_token(d, o, a);
    CHECK(x == choose_token(d, o, b));
    differ |= x != choose_token(d, o, c);
    ++counts[static_cast<size_t>(x)];
  }
  CHECK(differ);
  // 20,000 draws: each share within 5 standard deviations (sqrt(p (1 - p) / n) <= 0.0036)
  CHECK(std::abs(counts[4] / 20000.0 - 0.5) < 0.018);
  CHECK(std::abs(counts[9] / 20000.0 - 0.3) < 0.018);
  CHECK(std::abs(counts[1] / 20000.0 - 0.2) < 0.018);
  o.greedy = true;
  CHECK(choose_token(d, o, a) == 4);
}

TEST_CASE("generate: greedy equals the argmax of full passes; the attention is the final sequence's", "[generate]") {
  const std::string dir = scratch_dir("gen", "greedy");
  for (const bool gpt2 : {false, true}) {
    CAPTURE(gpt2);
    const Model m = tiny_decoder(dir, gpt2);
    auto cpu = make_backend("cpu");
    GenerateRequest req;
    req.prompt = random_ids(6, m.config.vocab_size, 3);
    req.max_new = 12;
    req.keep_attention = true;
    int told = 0;
    req.on_step = [&](const GenerateStep&) { return ++told < 100; };
    const GenerateResult g = generate(m, *cpu, req);
    REQUIRE(g.ids.size() == 18);
    CHECK(told == 12);
    CHECK(g.stopped == "max_new");
    CHECK(g.cache_bytes == 17 * kv_bytes_per_position(m.config));
    // each generated token is the argmax of a full pass over the text before it, unless the two
    // likeliest are closer than the two passes' difference could explain
    for (size_t t = 6; t < g.ids.size(); ++t) {
      ForwardRequest fr;
      fr.ids.assign(g.ids.begin(), g.ids.begin() + static_cast<std::ptrdiff_t>(t));
      const ForwardResult r = run_forward(m, *cpu, fr);
      const auto& top = r.next_tokens;
      if (top[0].second - top[1].second > 1e-4) CHECK(g.ids[t] == top[0].first);
      CHECK(std::abs(g.steps[t - 6].prob - top[0].second) < 1e-4);
      if (t + 1 == g.ids.size()) {  // the final sequence's attention, every row
        ForwardRequest last;
        last.ids.assign(g.ids.begin(), g.ids.end() - 1);
        const ForwardResult lr = run_forward(m, *cpu, last);
        const PassBound tol = pass_bound(m, last, lr);
        for (int l = 0; l < m.config.num_layers; ++l)
          CHECK(max_abs_diff(g.attention[static_cast<size_t>(l)], lr.attention[static_cast<size_t>(l)]) <=
                tol.probs[static_cast<size_t>(l)]);
      }
    }
    // a stop token ends the text when produced; on_step returning false ends it after that step
    GenerateRequest stop = req;
    stop.keep_attention = false;
    stop.stop_ids = {g.ids[8]};
    const GenerateResult s = generate(m, *cpu, stop);
    CHECK(s.stopped == "stop token");
    CHECK(s.ids.back() == g.ids[8]);
    CHECK(s.ids.size() <= 9);
    stop.stop_ids.clear();
    int n = 0;
    stop.on_step = [&](const GenerateStep&) { return ++n < 3; };
    CHECK(generate(m, *cpu, stop).ids.size() == 9);
    // sampled: reproducible from the seed
    GenerateRequest sampled = stop;
    sampled.on_step = nullptr;
    sampled.sampling.greedy = false;
    sampled.sampling.temperature = 1.5f;
    sampled.sampling.top_k = 20;
    sampled.sampling.seed = 7;
    CHECK(generate(m, *cpu, sampled).ids == generate(m, *cpu, sampled).ids);
  }
  fs::remove_all(dir);
}

TEST_CASE("generate: clear errors for encoders, empty prompts and no room left", "[generate][errors]") {
  const std::string dir = scratch_dir("gen", "errors");
  const Model bert = tiny_bert(dir + "/bert");
  auto cpu = make_backend("cpu");
  GenerateRequest req;
  req.prompt = {2, 5, 3};
  CHECK_THROWS_WITH(generate(bert, *cpu, req), Catch::Contains("causal language model"));
  const Model m = tiny_decoder(dir + "/llama");
  req.prompt.clear();
  CHECK_THROWS_WITH(generate(m, *cpu, req), Catch::Contains("at least one token"));
  req.prompt.assign(64, 5);
  CHECK_THROWS_WITH(generate(m, *cpu, req), Catch::Contains("none left"));
  req.prompt.assign(60, 5);  // 4 positions left: stops at the model's length
  req.max_new = 10;
  const GenerateResult r = generate(m, *cpu, req);
  CHECK(r.stopped == "max_len");
  CHECK(r.ids.size() == 64);
  fs::remove_all(dir);
}

TEST_CASE("decode: byte-level text back exactly, SentencePiece spaces and byte fallback, WordPiece joins",
          "[generate][tokenizer]") {
  const std::string dir = scratch_dir("gen", "decode");
  const Model m = tiny_decoder(dir);
  REQUIRE(m.tokenizer);
  for (const std::string text : {"hello world", " two  spaces\n", "caf\xC3\xA9 \xE6\x9D\xB1"}) {
    const Encoding e = m.tokenizer->encode(text);
    const std::string back = m.tokenizer->decode(e.ids);
    CHECK(back.substr(back.size() - text.size()) == text);  // after the template's BOS token, if any
  }
  // a character split over tokens: its bytes alone are not valid UTF-8 (U+FFFD), together they are
  const Encoding e = m.tokenizer->encode("\xE6\x9D\xB1");
  CHECK(m.tokenizer->decode(e.ids).find("\xE6\x9D\xB1") != std::string::npos);
  // its first byte alone decodes to U+FFFD: a character not yet whole
  CHECK(ends_mid_character(m.tokenizer->decode({0xE6})));
  CHECK_FALSE(ends_mid_character(m.tokenizer->decode(e.ids)));
  CHECK(m.tokenizer->decode({100000, 256}) == "he");  // an id without a token is left out
  // WordPiece (BERT): "##" pieces join, other tokens get a space, cleanup before punctuation
  const Model bert = tiny_bert(dir + "/bert");
  CHECK(bert.tokenizer->decode({2, 5, 7, 8, 14, 6, 15, 3}) == "[CLS] the playing, movie. [SEP]");
  // TinyLlama's decoder: Replace(U+2581 -> space), ByteFallback, Fuse, Strip(one leading space)
  const char* sp = R"({"added_tokens": [], "normalizer": null, "pre_tokenizer": null, "post_processor": null,
    "decoder": {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
      {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true,
              "vocab": {"<unk>": 0, "▁hello": 1, "▁world": 2, "<0xE6>": 3, "<0x9D>": 4, "<0xB1>": 5,
                        "<0xFF>": 6}, "merges": []}})";
  const auto tok = HfTokenizer::from_tokenizer_json(sp);
  CHECK(tok->decode({1, 2}) == "hello world");
  CHECK(tok->decode({1, 3, 4, 5, 2}) == "hello\xE6\x9D\xB1 world");
  CHECK(tok->decode({1, 6, 3}) == "hello\xEF\xBF\xBD\xEF\xBF\xBD");  // invalid bytes: U+FFFD each
  // Metaspace (prepend_scheme always): every replacement in the first token is the prepended space
  const char* ms = R"({"added_tokens": [], "normalizer": null, "pre_tokenizer": null, "post_processor": null,
    "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true},
    "model": {"type": "BPE", "unk_token": null, "vocab": {"\u2581\u2581hi": 0, "\u2581there": 1}, "merges": []}})";
  CHECK(HfTokenizer::from_tokenizer_json(ms)->decode({0, 1}) == "hi there");
  CHECK(HfTokenizer::from_tokenizer_json(ms)->decode({1, 0}) == "there  hi");
  fs::remove_all(dir);
}

TEST_CASE("generation rules: transformers' no-repeat n-gram, min_length, forced BOS and EOS", "[generate]") {
  const std::vector<float> flat(8, 0.0f);
  const float ninf = -std::numeric_limits<float>::infinity();
  GenerationRules r;
  r.no_repeat_ngram = 2;
  std::vector<float> l = flat;
  apply_generation_rules(l, {3, 4, 5, 3}, 20, r, {7});  // 3 was followed by 4: 4 may not follow 3 again
  for (int v = 0; v < 8; ++v) CHECK((l[static_cast<size_t>(v)] == ninf) == (v == 4));
  r.no_repeat_ngram = 3;
  l = flat;
  apply_generation_rules(l, {3, 4, 5, 3, 4}, 20, r, {7});  // (3, 4) was followed by 5
  for (int v = 0; v < 8; ++v) CHECK((l[static_cast<size_t>(v)] == ninf) == (v == 5));
  l = flat;
  apply_generation_rules(l, {3, 4}, 20, r, {7});  // shorter than an n-gram: nothing banned
  CHECK(l == flat);
  r = {};
  r.min_length = 3;
  l = flat;
  apply_generation_rules(l, {1, 2}, 20, r, {7, 6});  // 2 tokens < 3: no end-of-text yet
  CHECK(l[7] == ninf);
  CHECK(l[6] == ninf);
  CHECK(l[5] == 0.0f);
  l = flat;
  apply_generation_rules(l, {1, 2, 3}, 20, r, {7, 6});
  CHECK(l == flat);
  r = {};
  r.forced_bos = 5;
  r.forced_eos = 6;
  l = flat;
  apply_generation_rules(l, {2}, 4, r, {});  // the first token after the decoder's start
  for (int v = 0; v < 8; ++v) CHECK(l[static_cast<size_t>(v)] == (v == 5 ? 0.0f : ninf));
  l = flat;
  apply_generation_rules(l, {2, 5}, 4, r, {});
  CHECK(l == flat);
  l = flat;
  apply_generation_rules(l, {2, 5, 1}, 4, r, {});  // the last token max_length allows
  for (int v = 0; v < 8; ++v) CHECK(l[static_cast<size_t>(v)] == (v == 6 ? 0.0f : ninf));
  CHECK_FALSE(GenerationRules{}.any());
}
