// Generation over a KV cache with transformers' sampling warpers (see generate.h).
#include "engine/compute/generate.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/compute/forward.h"
#include "engine/compute/lm.h"
#include "engine/core/memory.h"

namespace attnlab {

void check_sampling(const SamplingOptions& o) {
  if (o.greedy) return;
  if (!(o.temperature > 0.0f) || !std::isfinite(o.temperature))
    throw Error("--temperature must be a positive number (got " + std::to_string(o.temperature) + ")");
  if (o.top_k < 0) throw Error("--top-k must be 0 (off) or more");
  if (!(o.top_p > 0.0 && o.top_p <= 1.0)) throw Error("--top-p must be in (0, 1]");
  if (!(o.min_p >= 0.0f && o.min_p <= 1.0f)) throw Error("--min-p must be in [0, 1]");
}

namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// torch.softmax over float32 scores (-inf: 0), in double then rounded
std::vector<float> softmax_of(const std::vector<float>& s) {
  float m = kMinusInf;
  for (float v : s) m = std::max(m, v);
  std::vector<float> p(s.size(), 0.0f);
  if (m == kMinusInf) return p;
  double sum = 0;
  std::vector<double> e(s.size());
  for (size_t k = 0; k < s.size(); ++k) sum += (e[k] = s[k] == kMinusInf ? 0.0 : std::exp(double(s[k]) - m));
  for (size_t k = 0; k < s.size(); ++k) p[k] = static_cast<float>(e[k] / sum);
  return p;
}

}  // namespace

NextTokenDistribution warp_logits(const std::vector<float>& logits, const SamplingOptions& o) {
  check_sampling(o);
  NextTokenDistribution d;
  d.raw = softmax_of(logits);
  std::vector<float> scores = logits;
  const size_t V = scores.size();
  if (!o.greedy) {
    // TemperatureLogitsWarper: scores / temperature (applied unless it is 1)
    if (o.temperature != 1.0f)
      for (float& v : scores) v = v / o.temperature;
    // TopKLogitsWarper: remove scores < the k-th largest
    if (o.top_k > 0 && static_cast<size_t>(o.top_k) < V) {
      std::vector<float> sorted = scores;
      std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<float>());
      const float kth = sorted[static_cast<size_t>(o.top_k - 1)];
      for (float& v : scores)
        if (v < kth) v = kMinusInf;
    }
    // TopPLogitsWarper: sorted ascending, cumulative softmax; remove where it is <= 1 - top_p,
    // the largest always kept (min_tokens_to_keep 1)
    if (o.top_p < 1.0) {
      std::vector<size_t> order(V);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
      const std::vector<float> p = softmax_of(scores);
      // torch's cumsum on the CPU adds in double and rounds each partial sum to float; the
      // Python scalar 1 - top_p meets the float tensor as a float32
      const float cut = static_cast<float>(1.0 - o.top_p);
      double cum = 0.0;
      std::vector<uint8_t> remove(V, 0);
      for (size_t r = 0; r < V; ++r) {
        cum += p[order[r]];
        remove[order[r]] = static_cast<float>(cum) <= cut && r + 1 < V;
      }
      for (size_t k = 0; k < V; ++k)
        if (remove[k]) scores[k] = kMinusInf;
    }
    // MinPLogitsWarper: remove probabilities < min_p x the largest (the largest kept)
    if (o.min_p > 0.0f) {
      const std::vector<float> p = softmax_of(scores);
      const size_t best = static_cast<size_t>(std::max_element(p.begin(), p.end()) - p.begin());
      const float cut = o.min_p * p[best];
      for (size_t k = 0; k < V; ++k)
        if (p[k] < cut && k != best) scores[k] = kMinusInf;
    }
  }
  const std::vector<float> p = o.greedy ? d.raw : softmax_of(scores);
  for (size_t k = 0; k < V; ++k)
    if (p[k] > 0.0f) {
      d.kept.emplace_back(static_cast<int>(k), p[k]);
      d.entropy -= static_cast<double>(p[k]) * std::log(static_cast<double>(p[k]));
    }
  std::stable_sort(d.kept.begin(), d.kept.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  d.kept_total = static_cast<int>(d.kept.size());
  return d;
}

double SampleRng::uniform() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

int choose_token(const NextTokenDistribution& d, const SamplingOptions& o, SampleRng& rng) {
  if (d.kept.empty()) throw Error("the next-token distribution is empty (the logits are not finite)");
  if (o.greedy) return d.kept.front().first;
  double total = 0;
  for (const auto& kp : d.kept) total += kp.second;
  const double u = rng.uniform() * total;
  double cum = 0;
  for (const auto& [id, p] : d.kept)
    if ((cum += p) > u) return id;
  return d.kept.back().first;
}

std::string continuation_text(const Model& model, const std::vector<int>& prompt, const std::vector<int>& ids) {
  if (!model.tokenizer) {  // a word model's tokens apart; a character model's as they are (" " is a token)
    const bool chars = model.config.tokenizer == TokenizerKind::Char;
    std::string out;
    for (size_t k = prompt.size(); k < ids.size(); ++k) out += (chars ? "" : " ") + model.token_name(ids[k]);
    return out;
  }
  const std::string all = model.tokenizer->decode(ids), base = model.tokenizer->decode(prompt);
  if (all.compare(0, base.size(), base) == 0) return all.substr(base.size());
  return model.tokenizer->decode(std::vector<int>(ids.begin() + static_cast<std::ptrdiff_t>(prompt.size()), ids.end()));
}

bool ends_mid_character(const std::string& text) {
  return text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

namespace {

// A Hugging Face folder's config.json and generation_config.json as read (a discarded value when
// the model has none or the text does not parse).
nlohmann::json config_json(const Model& model) {
  if (model.hf.config_text.empty()) return nlohmann::json::value_t::discarded;
  return nlohmann::json::parse(model.hf.config_text, nullptr, false);
}
nlohmann::json generation_config_json(const Model& model) {
  const std::filesystem::path gen = std::filesystem::path(model.source) / "generation_config.json";
  std::error_code ec;
  if (model.source.empty() || !std::filesystem::is_regular_file(gen, ec)) return nlohmann::json::value_t::discarded;
  std::ifstream f(gen);
  std::stringstream text;
  text << f.rdbuf();
  return nlohmann::json::parse(text.str(), nullptr, false);
}

}  // namespace

std::vector<int> end_of_text_ids(const Model& model) {
  std::vector<int> ids;
  auto add = [&](const nlohmann::json& j) {
    auto it = j.find("eos_token_id");
    if (it == j.end()) return false;
    ids.clear();
    if (it->is_number_integer()) ids.push_back(it->get<int>());
    if (it->is_array())
      for (const auto& v : *it)
        if (v.is_number_integer()) ids.push_back(v.get<int>());
    return true;
  };
  bool found = false;
  if (const nlohmann::json j = config_json(model); j.is_object()) found = add(j);
  // generation_config.json, as transformers' generate reads it, over config.json's
  if (const nlohmann::json j = generation_config_json(model); j.is_object() && add(j)) found = true;
  if (!found)
    for (const char* name : {"<|endoftext|>", "</s>", "<|end_of_text|>"})
      if (const int id = model.vocab.id(name); id >= 0) ids.push_back(id);
  ids.erase(std::remove_if(ids.begin(), ids.end(), [&](int id) { return id < 0 || id >= model.config.vocab_size; }),
            ids.end());
  return ids;
}

GenerationRules generation_rules(const Model& model) {
  GenerationRules r;
  auto read = [&](const nlohmann::json& j) {
    auto num = [&](const char* key, int& to, int off) {  // a number, or null for off
      auto it = j.find(key);
      if (it != j.end() && it->is_number_integer()) to = it->get<int>();
      if (it != j.end() && it->is_null()) to = off;
    };
    num("no_repeat_ngram_size", r.no_repeat_ngram, 0);
    num("min_length", r.min_length, 0);
    num("forced_bos_token_id", r.forced_bos, -1);
    num("forced_eos_token_id", r.forced_eos, -1);
    num("num_beams", r.num_beams, 1);
  };
  // GenerationConfig.from_pretrained: generation_config.json alone where there is one (its missing
  // keys at their defaults, not config.json's); config.json's fields where there is none, or
  // where the file says it was made from them (_from_model_config, which generate rebuilds from
  // the model's config)
  const nlohmann::json gen = generation_config_json(model);
  if (gen.is_object() && !gen.value("_from_model_config", false)) {
    read(gen);
  } else if (const nlohmann::json j = config_json(model); j.is_object()) {
    read(j);
  }
  const int V = model.config.vocab_size;
  if (r.forced_bos >= V) r.forced_bos = -1;
  if (r.forced_eos >= V) r.forced_eos = -1;
  return r;
}

void apply_generation_rules(std::vector<float>& logits, const std::vector<int>& ids, int max_length,
                            const GenerationRules& rules, const std::vector<int>& eos) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const int cur = static_cast<int>(ids.size()), n = rules.no_repeat_ngram;
  if (n > 0 && cur + 1 >= n) {  // NoRepeatNGramLogitsProcessor: no n-gram twice
    for (int start = 0; start + n <= cur; ++start) {
      bool same = true;  // the n-gram at start begins with the last n - 1 tokens
      for (int k = 0; k < n - 1 && same; ++k)
        same = ids[static_cast<size_t>(start + k)] == ids[static_cast<size_t>(cur - n + 1 + k)];
      if (same) logits[static_cast<size_t>(ids[static_cast<size_t>(start + n - 1)])] = ninf;
    }
  }
  if (cur < rules.min_length)  // MinLengthLogitsProcessor
    for (int e : eos) logits[static_cast<size_t>(e)] = ninf;
  auto force = [&](int id) {
    std::fill(logits.begin(), logits.end(), ninf);
    logits[static_cast<size_t>(id)] = 0.0f;
  };
  if (rules.forced_bos >= 0 && cur == 1) force(rules.forced_bos);               // ForcedBOSTokenLogitsProcessor
  if (rules.forced_eos >= 0 && cur == max_length - 1) force(rules.forced_eos);  // ForcedEOSTokenLogitsProcessor
}

GenerateResult generate(const Model& model, Backend& backend, const GenerateRequest& req) {
  const ModelConfig& c = model.config;
  if (!c.lm_head || !c.causal) throw Error("generate needs a causal language model (one with an LM head)");
  const bool seq2seq = model.is_seq2seq();
  if (seq2seq && req.source.empty())
    throw Error(
        "an encoder-decoder generates from a source: give --text SOURCE (the decoder starts from its start "
        "token)");
  if (!seq2seq && !req.source.empty())
    throw Error("a source is for encoder-decoder models; this model reads one sequence");
  if (req.prompt.empty()) throw Error("generate needs a prompt of at least one token");
  if (static_cast<int>(req.prompt.size()) >= c.max_len)
    throw Error("the prompt has " + std::to_string(req.prompt.size()) + " tokens; the model has " +
                std::to_string(c.max_len) + " positions, none left to generate into");
  if (req.max_new < 0) throw Error("--max-new must be 0 or more");
  check_sampling(req.sampling);
  GenerateResult out;
  out.ids = req.prompt;
  out.stopped = "max_new";
  KvCache cache;
  // relative positions are not cached (a query's terms depend on its own position), nor is an
  // encoder-decoder's decoder yet: whole passes
  const bool cached = c.positional != Positional::Relative && !seq2seq;
  SampleRng rng(req.sampling.seed);
  // the final sequence's probabilities: each pass's new rows, kept per step and assembled at the
  // end; checked before the first step against the memory there is, for the longest text it can become
  const int most = std::min(c.max_len, static_cast<int>(req.prompt.size()) + std::max(req.max_new - 1, 0));
  if (req.keep_attention) {
    const double need = 1.5 * c.num_layers * static_cast<double>(c.num_heads) * most * most * sizeof(float);
    const double have = available_bytes();
    if (have > 0 && need > 0.9 * have) {
      char msg[300];
      std::snprintf(msg, sizeof msg,
                    "keeping the attention of up to %d tokens needs %.1f GB, more than the %.1f GB available; "
                    "generate fewer tokens or leave out --attn-out",
                    most, need / 1e9, have / 1e9);
      throw Error(msg);
    }
  }
  std::vector<std::vector<Tensor>> rows_by_step;  // [step][layer]: (heads, the pass's new rows, T then)
  std::vector<int> first_of_step;
  int T = 0;
  for (int step = 0; step < req.max_new; ++step) {
    if (static_cast<int>(out.ids.size()) >= c.max_len) {
      out.stopped = "max_len";
      break;
    }
    ForwardRequest fr;
    fr.ids = out.ids;
    fr.source_ids = req.source;
    fr.kv = cached ? &cache : nullptr;
    fr.cancel = req.cancel;
    fr.keep_attention.assign(static_cast<size_t>(c.num_layers), req.keep_attention);
    ForwardResult r = run_forward(model, backend, fr);
    T = static_cast<int>(out.ids.size());
    if (req.keep_attention) {
      rows_by_step.push_back(std::move(r.attention));  // per layer [H, T - P, T]
      first_of_step.push_back(r.first_position);
    }
    GenerateStep s;
    if (req.rules.any())
      apply_generation_rules(r.next_logits, out.ids, static_cast<int>(req.prompt.size()) + req.max_new, req.rules,
                             req.stop_ids);
    s.dist = warp_logits(r.next_logits, req.sampling);
    s.id = choose_token(s.dist, req.sampling, rng);
    for (const auto& [id, p] : s.dist.kept)
      if (id == s.id) s.prob = p;
    s.raw_prob = s.dist.raw[static_cast<size_t>(s.id)];
    s.dist.raw = {};  // ~V floats a step: the caller has raw_prob
    if (req.keep_top > 0 && s.dist.kept.size() > static_cast<size_t>(req.keep_top))
      s.dist.kept.resize(static_cast<size_t>(req.keep_top));
    out.ids.push_back(s.id);
    out.steps.push_back(s);
    const bool go_on = !req.on_step || req.on_step(out.steps.back());
    if (std::find(req.stop_ids.begin(), req.stop_ids.end(), s.id) != req.stop_ids.end()) {
      out.stopped = "stop token";
      break;
    }
    if (!go_on) {
      out.stopped = "stop text";
      break;
    }
  }
  if (req.keep_attention) {  // each step's rows into [H, T, T] (a row's keys after it stay 0: causal)
    out.attention.assign(static_cast<size_t>(c.num_layers), Tensor());
    for (int l = 0; l < c.num_layers; ++l) {
      Tensor full({c.num_heads, T, T});
      for (size_t k = 0; k < rows_by_step.size(); ++k) {  // later steps overwrite rows a whole pass repeats
        Tensor& rows = rows_by_step[k][static_cast<size_t>(l)];
        const int P = first_of_step[k], n = static_cast<int>(rows.dim(1)), S = static_cast<int>(rows.dim(2));
        for (int h = 0; h < c.num_heads; ++h)
          for (int i = 0; i < n; ++i)
            std::copy_n(rows.ptr() + (static_cast<int64_t>(h) * n + i) * S, S,
                        full.ptr() + (static_cast<int64_t>(h) * T + P + i) * T);
        rows = Tensor();
      }
      out.attention[static_cast<size_t>(l)] = std::move(full);
    }
  }
  out.cache_bytes = cache.bytes();
  return out;
}

}  // namespace attnlab
