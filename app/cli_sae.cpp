// attnlab-cli sae: a sparse autoencoder's features at its hook point, and its features clamped
// (engine/analysis/sae.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "app/cli_args.h"
#include "app/cli_common.h"
#include "engine/analysis/sae.h"
#include "engine/compute/forward.h"
#include "engine/compute/lm.h"
#include "engine/formats/npy.h"

namespace attnlab::cli {

namespace {

using json = nlohmann::json;

// The prediction a pass makes, as JSON: the classes' probabilities or the top next tokens.
json prediction(const Model& model, const ForwardResult& r) {
  json j = json::array();
  if (!r.class_probs.empty())
    for (size_t k = 0; k < r.class_probs.size(); ++k)
      j.push_back({{"label", model.label(static_cast<int>(k))}, {"probability", r.class_probs[k]}});
  for (const auto& [id, p] : r.next_tokens)
    j.push_back({{"id", id}, {"label", model.readable_token(id)}, {"probability", p}});
  return j;
}

void print_prediction(const Model& model, const ForwardResult& r) {
  for (size_t k = 0; k < r.class_probs.size(); ++k)
    std::printf(" %s %.3g", model.label(static_cast<int>(k)).c_str(), r.class_probs[k]);
  for (const auto& [id, p] : r.next_tokens) std::printf(" %s %.3g", model.readable_token(id).c_str(), p);
  std::printf("\n");
}

// The logits the prediction reads: the classifier's, or the next-token logits after the last position.
std::vector<float> read_logits(const Model& model, const ForwardResult& r) {
  if (!r.logits.empty() || !model.config.lm_head) return r.logits;
  return next_token_logits(model, r.hidden, static_cast<int>(r.hidden.dim(0)) - 1);
}

}  // namespace

int cmd_sae(const std::vector<std::string>& argv, const std::string& argv0) {
  const Args a(argv,
               with(kModelValued, {"--text", "--ids", "--pair", "--truncation", "--sae", "--top", "--clamp", "--out"}),
               {"--json", "--random-init"});
  if (!a.has("--sae"))
    throw Error("sae needs --sae DIR (a folder with SAELens's cfg.json and sae_weights.safetensors)");
  const Model model = resolve_model(a, argv0);
  const Sae sae = load_sae(a.get("--sae"));
  const int top = a.get_int("--top", 5);
  if (top < 1) throw Error("--top must be at least 1");
  ForwardRequest req = request_from_flags(a, model, "sae");
  HookSpec keep;
  keep.cache = {sae.hook_name};
  req.hooks = &keep;
  auto backend = make_backend(a.get("--backend", "cpu"));
  const ForwardResult r = run_forward(model, *backend, req);
  const auto found = r.cache.find(sae.hook_name);
  if (found == r.cache.end())
    throw Error("the sparse autoencoder reads " + sae.hook_name +
                ", which this model's pass does not have (attnlab-cli forward --list-hooks names them)");
  const Tensor& x = found->second;
  const SaeOutput s = sae_forward(sae, x);
  if (a.has("--out")) save_npy(a.get("--out"), s.features);
  const int T = static_cast<int>(s.features.dim(0)), S = sae.d_sae, E = sae.d_in;

  // per position: the strongest features, how many are active, how much of x the reconstruction misses
  std::vector<std::vector<std::pair<int, float>>> strongest(static_cast<size_t>(T));
  std::vector<int> l0(static_cast<size_t>(T));
  std::vector<double> rel_err(static_cast<size_t>(T));
  std::vector<int> order(static_cast<size_t>(S));
  for (int t = 0; t < T; ++t) {
    const float* f = s.features.ptr() + static_cast<int64_t>(t) * S;
    std::iota(order.begin(), order.end(), 0);
    const int k = std::min(top, S);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int i, int j) { return f[i] > f[j]; });
    for (int i = 0; i < k && f[order[static_cast<size_t>(i)]] > 0; ++i)
      strongest[static_cast<size_t>(t)].push_back({order[static_cast<size_t>(i)], f[order[static_cast<size_t>(i)]]});
    l0[static_cast<size_t>(t)] = static_cast<int>(std::count_if(f, f + S, [](float v) { return v > 0; }));
    double num = 0, den = 0;
    for (int e = 0; e < E; ++e) {
      const double xv = x.data[static_cast<size_t>(t) * E + e], d = xv - s.reconstruction.at(t, e);
      num += d * d, den += xv * xv;
    }
    rel_err[static_cast<size_t>(t)] = den > 0 ? std::sqrt(num / den) : 0.0;
  }

  // clamped features: the pass again with the intervention
  std::vector<FeatureClamp> clamps;
  for (const std::string& c : a.all("--clamp")) clamps.push_back(parse_feature_clamp(c));
  ForwardResult clamped;
  if (!clamps.empty()) {
    HookSpec edit;
    edit.edits.push_back(sae_clamp_edit(sae, clamps));
    ForwardRequest rq = req;  // the same input (its warnings were said once)
    rq.hooks = &edit;
    clamped = run_forward(model, *backend, rq);
  }

  if (a.has("--json")) {
    json j;
    j["sae"] = sae.folder, j["hook_name"] = sae.hook_name, j["architecture"] = sae.architecture;
    j["d_in"] = sae.d_in, j["d_sae"] = sae.d_sae;
    j["tokens"] = r.tokens;
    json rows = json::array();
    for (int t = 0; t < T; ++t) {
      json feats = json::array();
      for (const auto& [i, v] : strongest[static_cast<size_t>(t)]) feats.push_back({{"feature", i}, {"activation", v}});
      rows.push_back({{"token", r.tokens[static_cast<size_t>(t)]},
                      {"features", feats},
                      {"l0", l0[static_cast<size_t>(t)]},
                      {"relative_error", rel_err[static_cast<size_t>(t)]}});
    }
    j["positions"] = rows;
    j["prediction"] = prediction(model, r);
    if (!clamps.empty()) {
      json cl = json::array();
      for (const FeatureClamp& c : clamps)
        cl.push_back({{"feature", c.feature}, {"value", c.value}, {"positions", c.positions}});
      j["clamps"] = cl;
      j["clamped_prediction"] = prediction(model, clamped);
      j["clamped_logits"] = read_logits(model, clamped);
    }
    j["logits"] = read_logits(model, r);
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << "sparse autoencoder " << sae.folder << ": " << sae.architecture << ", " << sae.d_sae << " features of "
            << sae.hook_name << " (d_in " << sae.d_in << ")\n";
  std::cout << "position  token         active  error  strongest features (index activation)\n";
  for (int t = 0; t < T; ++t) {
    std::printf("%8d  %-12s  %6d  %5.3f ", t, r.tokens[static_cast<size_t>(t)].substr(0, 12).c_str(),
                l0[static_cast<size_t>(t)], rel_err[static_cast<size_t>(t)]);
    for (const auto& [i, v] : strongest[static_cast<size_t>(t)]) std::printf(" %d %.3g", i, v);
    std::printf("\n");
  }
  std::cout << "error: ||x - reconstruction|| / ||x||; active: features above 0\nprediction:";
  print_prediction(model, r);
  if (!clamps.empty()) {
    std::cout << "with";
    for (const FeatureClamp& c : clamps)
      std::cout << " feature " << c.feature << " = " << c.value
                << (c.positions.empty() ? " everywhere" : " at " + std::to_string(c.positions.size()) + " position(s)");
    std::cout << " (reconstruction error added back):";
    print_prediction(model, clamped);
  }
  return 0;
}

}  // namespace attnlab::cli
