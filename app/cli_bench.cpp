// attnlab-cli's machine commands: devices (the backends and what this machine measured) and bench
// (forward passes, training steps, analysis methods and the matrix products, timed: medians and
// peak RSS).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <sstream>

#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include "app/cli_args.h"
#include "app/cli_common.h"
#include "engine/analysis/method_table.h"
#include "engine/analysis/methods.h"
#include "engine/compute/forward.h"
#include "engine/compute/measured.h"
#include "engine/compute/ops.h"
#include "engine/train/optimizer.h"
#include "engine/train/train_model.h"
#include "engine/train/trainer.h"

namespace attnlab::cli {

using json = nlohmann::json;

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;  // kilobytes on Linux
}

double probability_bytes(const ModelConfig& c, int T, const std::vector<bool>& keep) {
  int layers = 0;
  for (int l = 0; l < c.num_layers; ++l) layers += keep.empty() || keep[static_cast<size_t>(l)];
  return static_cast<double>(layers) * c.num_heads * T * T * 4;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One training step (forward + backward + Adam) on a random batch: samples per second. A
// classifier by default; --objective lm: a new GPT-2- or Llama-style decoder (--arch, as train
// --objective lm makes it) with next-token loss at every position.
int bench_train(const Args& a) {
  const bool lm = a.get("--objective", "classify") == "lm";
  if (!lm && a.get("--objective", "classify") != "classify")
    throw Error("--objective must be classify or lm, got \"" + a.get("--objective") + "\"");
  Model model;
  const int T = a.get_int("--seq", lm ? 256 : 64), B = a.get_int("--batch", lm ? 16 : 32),
            repeat = a.get_int("--repeat", 10);
  if (lm) {
    for (const char* f :
         {"--classes", "--positional", "--norm", "--activation", "--pooling", "--tokenizer", "--max-len"})
      if (a.has(f)) throw Error(std::string(f) + " does not apply to --objective lm (--arch sets the decoder's kind)");
    LmShape shape;
    shape.arch = a.get("--arch", "gpt2");
    shape.layers = a.get_int("--layers", 4), shape.heads = a.get_int("--heads", 4), shape.dim = a.get_int("--dim", 256);
    shape.kv_heads = a.get_int("--kv-heads", 0), shape.ff = a.get_int("--ff", 4 * shape.dim);
    shape.vocab = a.get_int("--vocab-size", 1000), shape.max_len = std::max(T, 1);
    model = new_language_model(shape, static_cast<uint64_t>(a.get_int("--seed", 0)));
  } else {
    if (a.has("--arch") || a.has("--kv-heads")) throw Error("--arch and --kv-heads are for --objective lm");
    ModelConfig d;
    d.vocab_size = 1000, d.embed_size = 128, d.num_heads = 8, d.num_layers = 2, d.ff_dim = 512, d.max_len = 512;
    d.num_classes = 2, d.positional = Positional::Learned, d.pooling = Pooling::MaskedMean;
    model = random_model(config_from_flags(a, d), static_cast<uint64_t>(a.get_int("--seed", 0)));
    if (model.config.num_classes < 2) throw Error("--train needs --classes >= 2");
  }
  const ModelConfig& c = model.config;
  if (T <= 0 || T > c.max_len || B <= 0 || repeat <= 0)
    throw Error("--seq, --batch and --repeat must be positive (seq <= max_len)");
  std::mt19937 rng(1);
  std::vector<std::vector<int>> seqs(static_cast<size_t>(B));
  std::vector<int> labels;
  for (auto& s : seqs) {
    for (int t = 0; t < T; ++t) s.push_back(3 + static_cast<int>(rng() % static_cast<unsigned>(c.vocab_size - 3)));
    if (!lm) labels.push_back(static_cast<int>(rng() % 2));
  }
  const TrainBatch batch = make_batch(model, seqs, labels);  // a language model's: every next token scored
  auto ops = make_ops(a.get("--backend", "cpu"));
  Adam adam(model.weights, OptimizerConfig{});
  ModelWeights grads = zeros_like(model.weights);
  StepOptions so;
  so.dropout = static_cast<float>(a.get_double("--dropout", lm ? 0.0 : 0.1));
  so.checkpoint = a.has("--checkpoint");
  auto step = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    for (Tensor* g : parameters(grads)) std::fill(g->data.begin(), g->data.end(), 0.0f);
    ++so.dropout_seed;
    train_step(model, *ops, batch, so, &grads);
    adam.step(model.weights, grads);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  step();
  std::vector<double> ms;
  for (int r = 0; r < repeat; ++r) ms.push_back(step());
  const double med = median(ms);
  const double sps = B / (med * 1e-3);
  if (a.has("--json")) {
    std::cout << json{{"backend", ops->name()},
                      {"train", true},
                      {"objective", lm ? "lm" : "classify"},
                      {"arch", lm ? (c.positional == Positional::Rotary ? "llama" : "gpt2") : "classifier"},
                      {"dropout", so.dropout},
                      {"params", c.parameter_count()},
                      {"layers", c.num_layers},
                      {"dim", c.embed_size},
                      {"heads", c.num_heads},
                      {"ff", c.ff_dim},
                      {"seq", T},
                      {"batch", B},
                      {"repeat", repeat},
                      {"median_ms", med},
                      {"samples_per_s", sps},
                      {"checkpoint", so.checkpoint},
                      {"peak_rss_mb", peak_rss_mb()}}
                     .dump()
              << "\n";
  } else {
    std::printf("train step (%s): backend %s layers %d dim %d heads %d ff %d seq %d batch %d\n",
                lm ? (c.positional == Positional::Rotary ? "llama-style LM" : "gpt2-style LM") : "classifier",
                ops->name().c_str(), c.num_layers, c.embed_size, c.num_heads, c.ff_dim, T, B);
    std::printf("median %.3f ms over %d steps  %.0f samples/s\n", med, repeat, sps);
  }
  return 0;
}

int cmd_devices(const std::vector<std::string>& argv) {
  const Args a(argv, {}, {"--json"});
  const auto names = backend_names();
  json list = json::array();
  for (const auto& n : names) {
    auto b = make_backend(n);
    list.push_back({{"backend", n}, {"device", b->device()}, {"notice", b->notice()}});
  }
  if (a.has("--json")) {
    std::cout << list.dump(2) << "\n";
    return 0;
  }
  for (const auto& d : list) {
    std::printf("%-10s %s\n", d["backend"].get<std::string>().c_str(), d["device"].get<std::string>().c_str());
    if (!d["notice"].get<std::string>().empty())
      std::printf("           (%s)\n", d["notice"].get<std::string>().c_str());
  }
  if (!opencl_compiled_in())
    std::printf("(built without OpenCL: ATTNLAB_OPENCL=OFF)\n");
  else if (names.size() == 2)
    std::printf("(no OpenCL device found: install a driver such as pocl-opencl-icd)\n");
  std::printf("--backend opencl picks the first GPU, else the first device.\n");
  return 0;
}

// The analysis methods' cost next to a plain forward pass (medians, in process): a 6-layer,
// 12-head, d=384 classifier (MiniLM's shape) at T = 128 unless --model / flags say otherwise.
// The benchmarks' model: --model DIR, else a random one of `shape` (flags may change it).
Model bench_model(const Args& a, const ModelConfig& shape) {
  if (a.has("--model")) return load_model(a.get("--model"));
  return random_model(config_from_flags(a, shape), static_cast<uint64_t>(a.get_int("--seed", 0)));
}

int bench_analysis(const Args& a) {
  ModelConfig d;
  d.vocab_size = 1000, d.embed_size = 384, d.num_heads = 12, d.num_layers = 6, d.ff_dim = 1536, d.max_len = 512;
  d.num_classes = 2, d.pooling = Pooling::MaskedMean, d.norm = NormPlacement::Post;
  const Model model = bench_model(a, d);
  const ModelConfig& c = model.config;
  const int T = a.get_int("--seq", 128), repeat = a.get_int("--repeat", 5);
  if (T <= 0 || T > c.max_len) throw Error("--seq must be in [1, max_len = " + std::to_string(c.max_len) + "]");
  if (repeat <= 0) throw Error("--repeat must be positive");
  std::mt19937 rng(1);
  ForwardRequest req;
  for (int t = 0; t < T; ++t) req.ids.push_back(3 + static_cast<int>(rng() % static_cast<unsigned>(c.vocab_size - 3)));
  auto backend = make_backend(a.get("--backend", "cpu"));
  auto timed = [&](const std::function<void()>& f, int n) {
    f();  // warm-up
    std::vector<double> ms;
    for (int r = 0; r < n; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return median(ms);
  };
  const bool predicts = c.num_classes > 0 || c.lm_head;
  json j = {{"layers", c.num_layers}, {"heads", c.num_heads}, {"dim", c.embed_size}, {"seq", T}, {"repeat", repeat}};
  j["forward_ms"] = timed([&] { run_forward(model, *backend, req); }, repeat);
  j["rollout_ms"] = timed([&] { attention_rollout(model, *backend, req); }, repeat);
  j["value_norm_ms"] = timed([&] { value_norm_attention(model, *backend, req); }, repeat);
  if (predicts) {
    j["grad_attention_ms"] = timed([&] { grad_attention(model, req, -1); }, repeat);
    j["head_importance_ms"] = timed([&] { head_importance(model, *backend, req, -1); }, std::max(1, repeat / 3));
  }
  if (a.has("--json")) {
    std::cout << j.dump() << "\n";
    return 0;
  }
  const double f = j["forward_ms"];
  std::printf("analysis, %d layers x %d heads, d=%d, T=%d (medians of %d): forward %.1f ms\n", c.num_layers,
              c.num_heads, c.embed_size, T, repeat, f);
  for (const char* k : {"rollout_ms", "value_norm_ms", "grad_attention_ms", "head_importance_ms"})
    if (j.contains(k))
      std::printf("  %-20s %8.1f ms  (%.2f forward passes)\n", k, j[k].get<double>(), j[k].get<double>() / f);
  return 0;
}

int cmd_bench(const std::vector<std::string>& argv, const std::string& argv0) {
  const Args a(argv,
               with(kModelValued, {"--seq", "--repeat", "--batch", "--dropout", "--keep-layers", "--objective",
                                   "--arch", "--kv-heads"}),
               {"--json", "--random-init", "--train", "--sgemm", "--checkpoint", "--analysis", "--on-demand"});
  if (a.has("--sgemm")) {
    // Measured again and kept as this machine's rates (engine/compute/measured.h): the cpu ops' fp32
    // product and cpu-bf16's notice follow them from the next run on.
    const int n = a.get_int("--seq", 512), repeat = a.get_int("--repeat", 20);
    const MatmulRates r = measure_matmul_rates(n, repeat);
    const std::string saved = save_matmul_rates(r);
    const std::string choice = fp32_gemm_choice(), slow = bf16_speed_notice();
    if (a.has("--json")) {
      json j = {{"sgemm", n}, {"repeat", repeat}, {"gflops", r.eigen}, {"machine", r.machine}, {"fp32_gemm", choice}};
      if (r.onednn > 0) j["onednn_gflops"] = r.onednn;
      if (r.onednn_bf16 > 0) j["onednn_bf16_gflops"] = r.onednn_bf16, j["bf16_slower_than_fp32"] = !slow.empty();
      std::cout << j.dump() << "\n";
    } else {
      std::printf("%s\n", r.machine.c_str());
      std::printf("Eigen SGEMM %dx%dx%d: %.1f GFLOP/s (median of %d)\n", n, n, n, r.eigen, repeat);
      if (r.onednn > 0) std::printf("oneDNN SGEMM %dx%dx%d: %.1f GFLOP/s\n", n, n, n, r.onednn);
      if (r.onednn_bf16 > 0)
        std::printf("oneDNN bf16 matmul %dx%dx%d: %.1f GFLOP/s (the cpu-bf16 products' ceiling)\n", n, n, n,
                    r.onednn_bf16);
      std::printf("the cpu ops' fp32 products: %s (ATTNLAB_GEMM=eigen|onednn overrides)\n", choice.c_str());
      if (!slow.empty()) std::printf("note: %s\n", slow.c_str());
      if (!saved.empty()) std::printf("kept as this machine's rates in %s\n", saved.c_str());
    }
    return 0;
  }
  if (a.has("--train")) return bench_train(a);
  for (const char* f : {"--objective", "--arch", "--kv-heads"})
    if (a.has(f)) throw Error(std::string(f) + " is for bench --train");
  if (a.has("--analysis")) return bench_analysis(a);
  ModelConfig d;
  d.vocab_size = 1000, d.embed_size = 512, d.num_heads = 8, d.num_layers = 6, d.ff_dim = 2048, d.max_len = 8192;
  d.positional = Positional::Sinusoidal;
  const Model model = bench_model(a, d);
  (void)argv0;
  const ModelConfig& c = model.config;
  const int T = a.get_int("--seq", 128);
  const int repeat = a.get_int("--repeat", 10);
  if (T <= 0 || T > c.max_len) throw Error("--seq must be in [1, max_len = " + std::to_string(c.max_len) + "]");
  if (repeat <= 0) throw Error("--repeat must be positive");
  std::mt19937 rng(1);
  ForwardRequest req;
  for (int t = 0; t < T; ++t) req.ids.push_back(static_cast<int>(rng() % static_cast<unsigned>(c.vocab_size)));
  req.mask = mask_from_flags(a);
  if (a.has("--keep-layers")) {
    // "none", or a list of layers whose probabilities are kept (default: all)
    req.keep_attention.assign(static_cast<size_t>(c.num_layers), false);
    if (a.get("--keep-layers") != "none")
      for (int l : parse_int_list(a.get("--keep-layers"), "--keep-layers")) {
        if (l < 0 || l >= c.num_layers) throw Error("--keep-layers: no layer " + std::to_string(l));
        req.keep_attention[static_cast<size_t>(l)] = true;
      }
  }
  const bool on_demand = a.has("--on-demand");
  if (on_demand) {  // every layer's queries and keys instead of its probabilities (unless --keep-layers names some)
    req.attention_on_demand = true;
    if (!a.has("--keep-layers")) req.keep_attention.assign(static_cast<size_t>(c.num_layers), false);
  }
  auto backend = make_backend(a.get("--backend", "cpu"));
  run_forward(model, *backend, req);  // warm-up: first-touch allocations, thread pool start
  std::vector<double> ms;
  for (int r = 0; r < repeat; ++r) ms.push_back(run_forward(model, *backend, req).millis);
  // On demand: what a view waits for when it shows another layer, each layer recomputed once
  std::vector<double> layer_ms;
  double kept_mb = 0;
  if (on_demand) {
    const ForwardResult r = run_forward(model, *backend, req);
    if (r.on_demand) {
      kept_mb = r.on_demand->bytes() / 1048576.0;
      r.on_demand->cached_layers = 1;
      for (int l = 0; l < c.num_layers; ++l) {
        if (r.has_probs(l) && !r.probs(l).empty()) continue;  // kept
        const auto t0 = std::chrono::steady_clock::now();
        r.layer_probs(l);
        layer_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
    }
  }
  const double E = c.embed_size, F = c.ff_dim, Td = T;
  const double flops = c.num_layers * (8.0 * Td * E * E + 4.0 * Td * Td * E + 4.0 * Td * E * F);
  const double med = median(ms);
  const double gflops = flops / (med * 1e-3) / 1e9;
  // Device time split (OpenCL): one more profiled pass.
  backend->set_profiling(true);
  run_forward(model, *backend, req);
  const auto [transfer_ms, kernel_ms] = backend->take_device_profile();
  backend->set_profiling(false);
  const double device_ms = transfer_ms + kernel_ms;
  // A reduced-precision backend: how far its probabilities are from fp32's on the same input.
  double prob_diff = -1;
  if (backend->name() == "cpu-bf16") {
    auto fp32 = make_backend("cpu");
    const ForwardResult x = run_forward(model, *backend, req), y = run_forward(model, *fp32, req);
    prob_diff = 0;
    for (size_t l = 0; l < x.attention.size(); ++l)
      for (size_t k = 0; k < x.attention[l].data.size(); ++k)
        prob_diff =
            std::max(prob_diff, static_cast<double>(std::fabs(x.attention[l].data[k] - y.attention[l].data[k])));
  }
  if (a.has("--json")) {
    json j = {{"backend", backend->name()},
              {"layers", c.num_layers},
              {"dim", c.embed_size},
              {"heads", c.num_heads},
              {"ff", c.ff_dim},
              {"seq", T},
              {"mask", model_mask(model.config, req.mask).describe()},
              {"repeat", repeat},
              {"median_ms", med},
              {"min_ms", *std::min_element(ms.begin(), ms.end())},
              {"gflops", gflops},
              {"device", backend->device()},
              {"peak_rss_mb", peak_rss_mb()},
              {"probability_mb", probability_bytes(c, T, req.keep_attention) / 1048576.0},
              {"model_mb", resident_bytes(model.weights) / 1048576.0}};  // as held (16-bit matrices at 2 bytes)
    if (device_ms > 0) j["transfer_share"] = transfer_ms / device_ms, j["kernel_share"] = kernel_ms / device_ms;
    if (!backend->notice().empty()) j["notice"] = backend->notice();
    if (prob_diff >= 0) j["max_prob_diff_vs_fp32"] = prob_diff;
    if (on_demand) j["on_demand_mb"] = kept_mb;
    if (!layer_ms.empty()) j["layer_recompute_ms"] = median(layer_ms);
    std::cout << j.dump() << "\n";
  } else {
    std::printf("backend %s  layers %d dim %d heads %d ff %d seq %d mask %s\n", backend->name().c_str(), c.num_layers,
                c.embed_size, c.num_heads, c.ff_dim, T, model_mask(model.config, req.mask).describe().c_str());
    std::printf("median %.3f ms over %d runs (min %.3f)  %.1f GFLOP/s  device %s\n", med, repeat,
                *std::min_element(ms.begin(), ms.end()), gflops, backend->device().c_str());
    if (device_ms > 0)
      std::printf("device time: transfers %.1f%%, kernels %.1f%% (%.2f ms of %.2f ms)\n", 100 * transfer_ms / device_ms,
                  100 * kernel_ms / device_ms, transfer_ms, device_ms);
    if (!layer_ms.empty())
      std::printf(
          "attention on demand: %.1f MB of queries and keys kept; a layer's probabilities in %.2f ms "
          "(median over %zu layers)\n",
          kept_mb, median(layer_ms), layer_ms.size());
    if (!backend->notice().empty()) std::printf("note: %s\n", backend->notice().c_str());
  }
  return 0;
}

}  // namespace attnlab::cli
