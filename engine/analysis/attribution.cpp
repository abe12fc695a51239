// Direct logit attribution (see attribution.h).
#include "engine/analysis/attribution.h"

#include <cmath>

#include "engine/compute/hooks.h"
#include "engine/compute/lm.h"

namespace attnlab {

LogitAttribution direct_logit_attribution(const Model& model, Backend& backend, const ForwardRequest& request,
                                          int answer, int wrong) {
  const ModelConfig& c = model.config;
  if (!c.lm_head) throw Error("logit attribution reads a language model's LM head; this model has none");
  if (c.norm != NormPlacement::Pre)
    throw Error(
        "logit attribution splits the residual stream of a pre-norm model; this one normalises after each "
        "residual (post-norm), so its output is not a sum of parts");
  const int L = c.num_layers, H = c.num_heads, E = c.embed_size, D = c.head_dim(), V = c.vocab_size;
  for (int id : {answer, wrong})
    if (id >= V || (id < 0 && id != wrong)) throw Error("no token id " + std::to_string(id) + " in the vocabulary");
  const std::string last_post = "blocks." + std::to_string(L - 1) + ".hook_resid_post";
  HookSpec keep;
  keep.cache = {"blocks.*.attn.hook_z", "blocks.*.hook_mlp_out", "blocks.0.hook_resid_pre", last_post};
  ForwardRequest req = request;
  req.hooks = &keep;
  req.keep_attention = std::vector<bool>(static_cast<size_t>(L), false);
  const ForwardResult r = run_forward(model, backend, req);
  const int T = static_cast<int>(r.ids.size()), t = T - 1;

  // u = W_U[answer] - W_U[wrong]
  const auto unembed = c.tied_lm_head ? &ModelWeights::embedding : &ModelWeights::lm_head;
  std::vector<float> ua(static_cast<size_t>(E)), uw(static_cast<size_t>(E), 0.0f);
  weight_row(model.weights, unembed, answer, ua.data());
  if (wrong >= 0) weight_row(model.weights, unembed, wrong, uw.data());
  std::vector<double> u(static_cast<size_t>(E));
  for (size_t j = 0; j < u.size(); ++j) u[j] = ua[j] - static_cast<double>(uw[j]);
  // the final norm, frozen from the run: part p contributes sum_j n(p)_j g_j u_j
  const float* x = r.cache.at(last_post).ptr() + static_cast<size_t>(t) * E;
  double mean = 0, var = 0, ms = 0;
  for (int j = 0; j < E; ++j) mean += x[j], ms += static_cast<double>(x[j]) * x[j];
  mean /= E, ms /= E;
  for (int j = 0; j < E; ++j) var += (x[j] - mean) * (x[j] - mean);
  var /= E;
  const bool norm = c.final_norm, rms = c.norm_kind == NormKind::RmsNorm;
  const double scale = !norm ? 1.0 : rms ? std::sqrt(ms + c.layer_norm_eps) : std::sqrt(var + c.layer_norm_eps);
  auto part = [&](const std::vector<double>& p) {
    double centre = 0;
    if (norm && !rms) {
      for (double v : p) centre += v;
      centre /= E;
    }
    double s = 0;
    for (int j = 0; j < E; ++j)
      s += (p[static_cast<size_t>(j)] - centre) / scale *
           (norm ? model.weights.final_ln_g.data[static_cast<size_t>(j)] : 1.0) * u[static_cast<size_t>(j)];
    return s;
  };
  auto row = [&](const Tensor& t2, int width, int offset) {
    std::vector<double> p(static_cast<size_t>(width));
    for (int j = 0; j < width; ++j)
      p[static_cast<size_t>(j)] = t2.ptr()[static_cast<size_t>(t) * t2.data.size() / T + offset + j];
    return p;
  };

  LogitAttribution out;
  out.parts = Tensor({L, H + 1});
  out.embedding = part(row(r.cache.at("blocks.0.hook_resid_pre"), E, 0));
  if (norm && !rms)
    for (int j = 0; j < E; ++j)
      out.biases += model.weights.final_ln_b.data[static_cast<size_t>(j)] * u[static_cast<size_t>(j)];
  double total = out.embedding + out.biases;
  Tensor wo16;  // W_O widened when kept in 16 bits
  for (int l = 0; l < L; ++l) {
    const LayerWeights& lw = model.weights.layers[static_cast<size_t>(l)];
    const Tensor& Wo = wide(lw, &LayerWeights::wo, wo16);
    const Tensor& z = r.cache.at("blocks." + std::to_string(l) + ".attn.hook_z");  // [T, H, D]
    std::vector<std::vector<double>> heads(static_cast<size_t>(H));
    std::vector<double> sum(lw.bo.empty() ? std::vector<double>(static_cast<size_t>(E), 0.0)
                                          : std::vector<double>(lw.bo.data.begin(), lw.bo.data.end()));
    for (int h = 0; h < H; ++h) {
      std::vector<double>& p = heads[static_cast<size_t>(h)];  // z_h W_O^h: the output projection's columns of head h
      p.assign(static_cast<size_t>(E), 0.0);
      const float* zh = z.ptr() + (static_cast<size_t>(t) * H + h) * D;
      for (int i = 0; i < E; ++i) {
        double s = 0;
        for (int d = 0; d < D; ++d) s += static_cast<double>(Wo.at(i, h * D + d)) * zh[d];
        p[static_cast<size_t>(i)] = s;
        sum[static_cast<size_t>(i)] += s;
      }
    }
    // Gemma 2's sandwich norm on the attention output (an RMSNorm: no centring) is linear in its
    // input once its scale is frozen from the run, as the final norm's is: each head's part is
    // g * p_h / rms(sum of the parts), and the parts still add up to what the layer adds
    std::vector<double> post(static_cast<size_t>(E), 1.0);
    if (c.sandwich_norm) {
      double ms = 0;
      for (double v : sum) ms += v * v;
      const double rms = std::sqrt(ms / E + c.layer_norm_eps);
      for (int i = 0; i < E; ++i) post[static_cast<size_t>(i)] = lw.ln1_post_g.data[static_cast<size_t>(i)] / rms;
    }
    auto through_post = [&](std::vector<double> p) {
      for (int i = 0; i < E; ++i) p[static_cast<size_t>(i)] *= post[static_cast<size_t>(i)];
      return p;
    };
    for (int h = 0; h < H; ++h) {
      out.parts.at(l, h) = static_cast<float>(part(through_post(heads[static_cast<size_t>(h)])));
      total += out.parts.at(l, h);
    }
    if (!lw.bo.empty()) {
      const double v = part(through_post(std::vector<double>(lw.bo.data.begin(), lw.bo.data.end())));
      out.biases += v, total += v;
    }
    if (c.ff_dim > 0) {
      out.parts.at(l, H) =
          static_cast<float>(part(row(r.cache.at("blocks." + std::to_string(l) + ".hook_mlp_out"), E, 0)));
      total += out.parts.at(l, H);
    }
  }
  out.total = total;
  if (c.final_softcap > 0) {
    // Gemma 2 caps the logits (cap * tanh(l / cap)), which no sum of parts follows: the parts add
    // up to the difference of the logits before the cap, computed here from the final hidden state
    double d = 0;
    for (int j = 0; j < E; ++j) d += u[static_cast<size_t>(j)] * r.hidden.at(t, j);
    out.logit_diff = d;
    out.before_cap = true;
    return out;
  }
  const std::vector<float> logits = next_token_logits(model, r.hidden, t);
  out.logit_diff = static_cast<double>(logits[static_cast<size_t>(answer)]) -
                   (wrong >= 0 ? static_cast<double>(logits[static_cast<size_t>(wrong)]) : 0.0);
  return out;
}

}  // namespace attnlab
