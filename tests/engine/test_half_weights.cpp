// A BF16 / F16 folder's layer matrices, token embedding and LM head kept in 16 bits
// (engine/core/half.h): the same values as
// the float32 folder of the same numbers (widening is exact), half the bytes, the same pass
// (bit for bit on the reference backend, whose dot products do not depend on blocking; within
// float32 rounding on the cpu), widened for saving and training.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <tuple>

#include "engine/analysis/attribution.h"
#include "engine/compute/forward.h"
#include "engine/compute/linear_half.h"
#include "engine/compute/lm.h"
#include "engine/core/half.h"
#include "engine/core/memory.h"
#include "tests/engine/hf_test_model.h"
#include "tests/engine/test_util.h"

using namespace attnlab;
using namespace attnlab::test;
namespace fs = std::filesystem;

namespace {

uint16_t to_bf16_bits(float f) {  // round to nearest even (finite values)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// A safetensors file with every rank-2 tensor in BF16 (the others F32), as transformers writes a
// bfloat16 model (its norms too; F32 ones here check a mixed file).
void save_bf16(const std::string& path, const TensorMap& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& [name, t] : tensors) {
    const bool half = t.rank() == 2;
    const size_t begin = data.size();
    for (const float v : t.data) {
      if (half) {
        const uint16_t b = to_bf16_bits(v);
        data.append(reinterpret_cast<const char*>(&b), 2);
      } else {
        data.append(reinterpret_cast<const char*>(&v), 4);
      }
    }
    header[name] = {{"dtype", half ? "BF16" : "F32"}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string h = header.dump();
  while (h.size() % 8) h.push_back(' ');
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = h.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << h << data;
}

// A Llama folder twice: in BF16 (with dtype bfloat16) and in float32 holding the same bf16-rounded
// values. hidden 512 and intermediate 2304 make the feed-forward's matrices longer than one block
// of rows (linear_half.h's kHalfBlock), and a vocabulary of 2,101 the LM head's, so the blocked
// product runs.
void make_pair(const std::string& half_dir, const std::string& full_dir) {
  for (const std::string& d : {half_dir, full_dir}) {
    fs::create_directories(d);
    std::ofstream(d + "/tokenizer.json") << byte_level_tokenizer_json(true);
  }
  nlohmann::json cfg = {{"model_type", "llama"},    {"vocab_size", 2101},
                        {"hidden_size", 512},       {"intermediate_size", 2304},
                        {"num_hidden_layers", 2},   {"num_attention_heads", 8},
                        {"num_key_value_heads", 2}, {"max_position_embeddings", 64},
                        {"rms_norm_eps", 1e-6},     {"architectures", {"LlamaForCausalLM"}}};
  std::ofstream(full_dir + "/config.json") << cfg.dump();
  cfg["dtype"] = "bfloat16";
  std::ofstream(half_dir + "/config.json") << cfg.dump();
  HfInfo info;
  const ModelConfig c = parse_hf_config(cfg.dump(), info);
  ModelWeights w = random_weights(c, 5);
  for (const WeightEntry& e : weight_entries(c))
    for (float& v : e.in(w).data) v = bf16_to_float(to_bf16_bits(v * 0.5f));
  Model named;
  named.config = c;
  named.hf.model_type = "llama";
  named.hf.prefix = "model.";
  const TensorMap tensors = hf_tensors(named, w);
  save_safetensors(full_dir + "/model.safetensors", tensors);
  save_bf16(half_dir + "/model.safetensors", tensors);
}

}  // namespace

TEST_CASE("BF16 folders: layer matrices kept in 16 bits, the same values and passes as float32", "[hf][half]") {
  const std::string half_dir = scratch_dir("half", "bf16"), full_dir = scratch_dir("half", "f32"),
                    saved = scratch_dir("half", "saved");
  make_pair(half_dir, full_dir);
  const Model h = load_model(half_dir), f = load_model(full_dir);
  REQUIRE(has_half(h.weights));
  REQUIRE_FALSE(has_half(f.weights));
  // every layer matrix, the embedding and the LM head in 16 bits, their float32 members empty;
  // norms float32
  for (size_t l = 0; l < h.weights.layers.size(); ++l) {
    const LayerWeights& L = h.weights.layers[l];
    CHECK(L.half.size() == 7);  // q, k, v, o, gate, up, down
    CHECK(L.wq.empty());
    CHECK_FALSE(L.ln1_g.empty());
    for (const auto& [member, bits] : L.half) {
      Tensor scratch;
      const Tensor& wide16 = wide(L, member, scratch);
      CHECK(wide16.shape == (f.weights.layers[l].*member).shape);
      CHECK(wide16.data == (f.weights.layers[l].*member).data);  // exact: BF16 widens to the same floats
    }
  }
  REQUIRE(h.weights.half.size() == 2);
  for (const auto member : {&ModelWeights::embedding, &ModelWeights::lm_head}) {
    CHECK((h.weights.*member).empty());
    Tensor scratch;
    REQUIRE(half_of(h.weights, member));
    CHECK(wide(h.weights, member, scratch).data == (f.weights.*member).data);
    std::vector<float> row(512);
    weight_row(h.weights, member, 2100, row.data());  // the last row
    CHECK(std::equal(row.begin(), row.end(), (f.weights.*member).ptr() + 2100 * 512));
  }
  // bytes: the matrices at 2 instead of 4
  const double matrices = static_cast<double>(f.config.half_matrix_count());
  CHECK(resident_bytes(f.weights) == static_cast<double>(f.config.parameter_count()) * 4.0);
  CHECK(resident_bytes(h.weights) == resident_bytes(f.weights) - 2.0 * matrices);
  CHECK(weight_bytes(h.config, true) == resident_bytes(h.weights));

  // weight norms: the same from 16 bits (the same values, summed in the same order); all of them
  // together are every parameter's; each layer's is its own (doubling layer 1 doubles its norm only)
  const std::vector<double> nf = weight_norms(f.config, f.weights);
  REQUIRE(nf.size() == f.weights.layers.size() + 1);
  CHECK(weight_norms(h.config, h.weights) == nf);
  double all = 0, norms2 = 0, count = 0;
  for (const Tensor* t : parameters(f.weights))
    for (const float x : t->data) all += static_cast<double>(x) * x, ++count;
  for (const double v : nf) norms2 += v * v;
  // double sums of the same positive squares in other groupings: each within count x double's
  // unit roundoff of the exact sum (a chain of count additions), relative
  CHECK(norms2 == Approx(all).epsilon(2 * count * std::numeric_limits<double>::epsilon() / 2));
  ModelWeights doubled = f.weights;
  for (const WeightEntry& e : weight_entries(f.config))
    if (e.layer == 1)
      for (float& x : e.in(doubled).data) x *= 2;  // exact: a power of two
  const std::vector<double> nd = weight_norms(f.config, doubled);
  CHECK(nd[1] == Approx(2 * nf[1]).epsilon(1e-12));
  CHECK(nd[0] == nf[0]);
  CHECK(nd.back() == nf.back());

  for (const int T : {1, 9, 40}) {
    CAPTURE(T);
    ForwardRequest req;
    req.ids = random_ids(T, f.config.vocab_size, static_cast<uint64_t>(T) + 3);
    auto ref = make_backend("reference");
    const ForwardResult a = run_forward(h, *ref, req), b = run_forward(f, *ref, req);
    for (int l = 0; l < f.config.num_layers; ++l) CHECK(a.attention[l].data == b.attention[l].data);
    CHECK(a.hidden.data == b.hidden.data);
    // The LM head (next_token_logits, on the cpu ops) in two blocks of the vocabulary: the same
    // 512-term dot products, summed in an order that may depend on the block's width: within
    // sum_bound (both sides' rounding) of the row's sum of |h| |w|
    const Tensor& W = f.weights.lm_head;
    const float* last = a.hidden.ptr() + static_cast<int64_t>(T - 1) * 512;
    std::vector<double> logit_tol(W.dim(0));
    for (int64_t v = 0; v < W.dim(0); ++v) {
      double abs_sum = 0;
      for (int e = 0; e < 512; ++e) abs_sum += std::fabs(static_cast<double>(last[e]) * W.at(v, e));
      logit_tol[static_cast<size_t>(v)] = sum_bound(512, abs_sum);
    }
    REQUIRE(a.next_logits.size() == b.next_logits.size());
    for (size_t v = 0; v < a.next_logits.size(); ++v)
      CHECK(std::fabs(a.next_logits[v] - b.next_logits[v]) <= logit_tol[v]);
    // the lens (the LM head on every layer's rows) and logit attribution (two unembedding rows)
    // The lens's LM head reads the BF16 head in its 16 bits (a few rows: bf16_rows_product) and
    // the float32 one through sgemm: the same 512-term dot products in another order. A row after
    // the final RMSNorm has |x|_1 <= E g_max (its squares sum to at most E), so each logit is
    // within sum_bound(512, E g_max |W|_max) and each probability within softmax_bound of that.
    const LogitLens la = logit_lens(h, *ref, req.ids), lb = logit_lens(f, *ref, req.ids);
    double g_max = 0, w_max = 0;
    for (float g : f.weights.final_ln_g.data) g_max = std::max(g_max, std::fabs(static_cast<double>(g)));
    for (float w : W.data) w_max = std::max(w_max, std::fabs(static_cast<double>(w)));
    const double lens_tol = softmax_bound(static_cast<double>(W.dim(0)), sum_bound(512, 512 * g_max * w_max));
    REQUIRE(la.top_prob.size() == lb.top_prob.size());
    for (size_t k = 0; k < la.top_prob.size(); ++k) CHECK(std::fabs(la.top_prob[k] - lb.top_prob[k]) <= lens_tol);
    const LogitAttribution da = direct_logit_attribution(h, *ref, req, 2100, 7),
                           db = direct_logit_attribution(f, *ref, req, 2100, 7);
    CHECK(da.parts.data == db.parts.data);
    CHECK(std::fabs(da.logit_diff - db.logit_diff) <= logit_tol[2100] + logit_tol[7]);
    auto cpu = make_backend("cpu");
    const ForwardResult x = run_forward(h, *cpu, req), y = run_forward(f, *cpu, req);
    // The same dot products of length <= 2304; only how the backend blocks a product's rows may
    // differ. Hidden states of RMS ~1 after the final norm: a reordered float32 sum of 2304 terms
    // of size ~1 differs by at most ~2304 eps per product, carried through two layers.
    const double eps = std::numeric_limits<float>::epsilon();
    for (int l = 0; l < f.config.num_layers; ++l) CHECK(max_abs_diff(x.attention[l], y.attention[l]) <= 2304 * eps);
    CHECK(max_abs_diff(x.hidden, y.hidden) <= 4 * 2304 * eps);
  }

  // saved as float32: the folder reopens with the same values, now all float32
  save_model(h, saved);
  const Model s = load_model(saved);
  CHECK_FALSE(has_half(s.weights));
  for (size_t l = 0; l < s.weights.layers.size(); ++l)
    CHECK(s.weights.layers[l].w2.data == f.weights.layers[l].w2.data);
  fs::remove_all(half_dir);
  fs::remove_all(full_dir);
  fs::remove_all(saved);
}

TEST_CASE("the direct BF16 product of a few rows equals the widened product's sums", "[half]") {
  // Each output is a float32 sum of `in` products (and the bias) in some order: within
  // gamma_{in + 1} (sum |x_i w_i| + |b|) of the exact sum (Higham's bound for any order, fused or
  // not), computed here in double from the same widened values.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const double eps = std::numeric_limits<float>::epsilon() / 2;
  for (const int N : {1, 3, 4, 5, 17, 32})
    for (const int in : {1, 7, 16, 31, 33, 300, 2304})
      for (const int out : {1, 3, 5, 33})
        for (const bool bias : {false, true}) {
          CAPTURE(N, in, out, bias);
          Tensor x({N, in});
          for (float& v : x.data) v = u(rng);
          HalfTensor W;
          W.shape = {out, in};
          W.bf16 = true;
          for (int k = 0; k < out * in; ++k) W.bits.push_back(attnlab::to_bf16_bits(u(rng) * 3.0f));
          Tensor b;
          if (bias) {
            b = Tensor({out});
            for (float& v : b.data) v = u(rng);
          }
          Tensor y;
          bf16_rows_product(x, W, b, y);
          REQUIRE(y.shape == std::vector<int64_t>{N, out});
          const double gamma = (in + 1) * eps / (1 - (in + 1) * eps);
          double worst = 0;  // error / bound
          for (int t = 0; t < N; ++t)
            for (int o = 0; o < out; ++o) {
              double exact = bias ? b.data[static_cast<size_t>(o)] : 0.0, mag = std::fabs(exact);
              for (int i = 0; i < in; ++i) {
                const double p =
                    static_cast<double>(x.at(t, i)) * bf16_to_float(W.bits[static_cast<size_t>(o * in + i)]);
                exact += p, mag += std::fabs(p);
              }
              worst = std::max(worst, std::fabs(y.at(t, o) - exact) / (gamma * mag + 1e-300));
            }
          CHECK(worst <= 1.0);
        }
  // the cpu ops take this path for a few rows of a BF16 matrix, and widen an F16 one
  auto ops = make_cpu_ops();
  HalfTensor W;
  W.shape = {3, 40};
  W.bits.assign(120, attnlab::to_bf16_bits(0.5f));
  Tensor x({2, 40}, 1.0f), y;
  CHECK(ops->linear_half(x, W, Tensor(), y));
  CHECK(y.at(1, 2) == 20.0f);
  Tensor many({bf16_direct_rows() + 1, 40}, 1.0f);
  CHECK_FALSE(ops->linear_half(many, W, Tensor(), y));
  CHECK_FALSE(make_reference_ops()->linear_half(x, W, Tensor(), y));  // the reference widens, always
  W.bf16 = false;
  CHECK_FALSE(ops->linear_half(x, W, Tensor(), y));
  CHECK_THROWS_WITH(bf16_rows_product(x, W, Tensor(), y), Catch::Contains("reads BF16"));
}

TEST_CASE("16-bit matrices are read out of the file whole: large ones in two parts, at any offset", "[half][formats]") {
  // 1537 x 1500 BF16 is 4.6 MB, over the size a mapped file copies on two threads; it starts 4 bytes
  // into the data (after a one-float tensor), so neither part is page-aligned in the file
  const std::string dir = scratch_dir("half", "pread");
  fs::create_directories(dir);
  TensorMap t;
  t["a"] = Tensor({1});
  t["a"].data[0] = 3.0f;
  for (const auto& [name, rows, cols] : {std::tuple{"big", 1537, 1500}, std::tuple{"small", 3, 5}}) {
    Tensor m({rows, cols});
    for (size_t k = 0; k < m.data.size(); ++k) m.data[k] = std::sin(0.001f * static_cast<float>(k)) * (1.0f + k % 7);
    t[name] = std::move(m);
  }
  const std::string path = dir + "/m.safetensors";
  save_bf16(path, t);
  HalfMap mapped;
  const TensorMap from_file = load_safetensors(path, &mapped);  // mapped, read with pread
  std::ifstream f(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  HalfMap in_memory;
  parse_safetensors(bytes.data(), bytes.size(), path, nullptr, &in_memory);  // memcpy
  REQUIRE(mapped.size() == 2);
  for (const char* name : {"big", "small"}) {
    INFO(name);
    const HalfTensor& h = mapped.at(name);
    REQUIRE(h.bits.size() == t[name].data.size());
    CHECK(h.shape == t[name].shape);
    CHECK(h.bf16);
    size_t wrong = 0;
    for (size_t k = 0; k < h.bits.size(); ++k) wrong += h.bits[k] != attnlab::to_bf16_bits(t[name].data[k]);
    CHECK(wrong == 0);
    CHECK(std::equal(h.bits.begin(), h.bits.end(), in_memory.at(name).bits.begin()));
  }
  REQUIRE(from_file.at("a").data.size() == 1);
  CHECK(from_file.at("a").data[0] == 3.0f);
  fs::remove_all(dir);
}
