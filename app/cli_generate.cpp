// attnlab-cli generate: a causal language model writes, one token a step over a KV cache, with
// transformers' sampling warpers; the text streams to stdout, --json gives every step's
// distribution, --attn-out the final sequence's attention. An encoder-decoder writes a target
// for its source (--text), from the decoder's start token.
#include <chrono>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "app/cli_args.h"
#include "app/cli_common.h"
#include "engine/compute/generate.h"
#include "engine/compute/kv_cache.h"
#include "engine/formats/npy.h"

namespace attnlab::cli {

int cmd_generate(const std::vector<std::string>& argv, const std::string& argv0) {
  const Args a(argv,
               with(kModelValued, {"--text", "--ids", "--max-new", "--temperature", "--top-k", "--top-p", "--min-p",
                                   "--seed", "--stop", "--attn-out", "--json-top"}),
               {"--greedy", "--sample", "--json", "--random-init", "--ignore-eos"});
  const Model model = resolve_model(a, argv0);
  const PreparedInput in = input_from_flags(a, model, "--text", "--ids");
  if (in.ids.empty()) throw Error("generate needs --text \"...\" or --ids ...");
  GenerateRequest req;
  req.prompt = in.ids;
  if (model.is_seq2seq()) {  // the text is the source; the decoder starts from its start token
    if (a.has("--attn-out"))
      throw Error(
          "--attn-out: an encoder-decoder's attention is three arrays: run forward --text SOURCE "
          "--target-ids ... --attn-out F.npz on the generated ids");
    req.source = in.ids;
    req.prompt = {model.config.decoder_start_id};
  }
  // transformers' processors the folder's generation_config.json turns on (forced BOS / EOS, ...)
  req.rules = generation_rules(model);
  if (req.rules.num_beams > 1)
    std::fprintf(stderr,
                 "note: the folder asks for beam search (num_beams %d); attnlab decodes one sequence (greedy or "
                 "sampled), as generate(num_beams=1) does\n",
                 req.rules.num_beams);
  req.max_new = a.get_int("--max-new", 20);
  const bool sampling = a.has("--sample") || a.has("--temperature") || a.has("--top-k") || a.has("--top-p") ||
                        a.has("--min-p") || a.has("--seed");
  if (sampling && a.has("--greedy"))
    throw Error("--greedy takes the likeliest token; it cannot be combined with sampling flags");
  SamplingOptions& s = req.sampling;
  s.greedy = !sampling;
  s.temperature = static_cast<float>(a.get_double("--temperature", 1.0));
  s.top_k = a.get_int("--top-k", 0);
  s.top_p = a.get_double("--top-p", 1.0);
  s.min_p = static_cast<float>(a.get_double("--min-p", 0.0));
  s.seed = static_cast<uint64_t>(a.get_int("--seed", 0));
  check_sampling(s);
  if (!a.has("--ignore-eos")) req.stop_ids = end_of_text_ids(model);
  req.keep_attention = a.has("--attn-out");
  const std::vector<std::string> stops = a.all("--stop");
  for (const std::string& st : stops)
    if (st.empty()) throw Error("--stop needs a non-empty text");
  const bool json_out = a.has("--json");
  const int json_top = a.get_int("--json-top", 100);
  if (json_top < 0) throw Error("--json-top must be 0 (every token) or more");
  req.keep_top = json_out ? json_top : 1;  // what the output shows of each step's distribution
  std::vector<int> ids = req.prompt;
  size_t printed = 0;
  req.on_step = [&](const GenerateStep& step) {
    ids.push_back(step.id);
    const std::string text = continuation_text(model, req.prompt, ids);
    if (!json_out && !ends_mid_character(text) && text.size() > printed) {
      std::fwrite(text.data() + printed, 1, text.size() - printed, stdout);
      std::fflush(stdout);
      printed = text.size();
    }
    for (const std::string& st : stops)
      if (text.find(st) != std::string::npos) return false;
    return true;
  };
  auto backend = make_backend(a.get("--backend", "cpu"));
  const auto t0 = std::chrono::steady_clock::now();
  const GenerateResult r = generate(model, *backend, req);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string text = continuation_text(model, req.prompt, r.ids);
  if (a.has("--attn-out")) {
    const ModelConfig& c = model.config;
    const int64_t T = r.attention.empty() ? 0 : r.attention[0].dim(1);
    Tensor all({c.num_layers, c.num_heads, T, T});
    for (size_t l = 0; l < r.attention.size(); ++l)
      std::copy(r.attention[l].data.begin(), r.attention[l].data.end(),
                all.data.begin() + static_cast<std::ptrdiff_t>(l * r.attention[l].data.size()));
    save_npy(a.get("--attn-out"), all);
  }
  if (model.tokenizer) {  // ids past the tokenizer's vocabulary (an embedding padded past it) have no text
    int silent = 0;
    for (size_t k = req.prompt.size(); k < r.ids.size(); ++k) silent += r.ids[k] >= model.tokenizer->vocab_size();
    if (silent > 0)
      std::fprintf(stderr,
                   "warning: %d generated token(s) have no text: their ids are past the tokenizer's %d tokens (the "
                   "model's embedding has %d rows)\n",
                   silent, model.tokenizer->vocab_size(), model.config.vocab_size);
  }
  if (!json_out) {
    if (text.size() > printed) std::fwrite(text.data() + printed, 1, text.size() - printed, stdout);
    std::printf("\n");
    const double kb = static_cast<double>(r.cache_bytes) / 1e3;
    std::fprintf(stderr, "(%zu tokens, stopped: %s; KV cache %.1f %s)\n", r.steps.size(), r.stopped.c_str(),
                 kb >= 1e3 ? kb / 1e3 : kb, kb >= 1e3 ? "MB" : "kB");
    return 0;
  }
  using json = nlohmann::json;
  json j;
  j["model"] = model.source;
  j["backend"] = backend->name();
  j["prompt_ids"] = req.prompt;
  if (model.is_seq2seq()) j["source_ids"] = req.source;  // prompt_ids: the decoder's start
  j["ids"] = r.ids;
  j["generated_ids"] = std::vector<int>(r.ids.begin() + static_cast<std::ptrdiff_t>(req.prompt.size()), r.ids.end());
  j["text"] = text;
  j["stopped"] = r.stopped;
  j["sampling"] = s.greedy ? json{{"greedy", true}}
                           : json{{"greedy", false},
                                  {"temperature", a.get_double("--temperature", 1.0)},  // as given, not as float32
                                  {"top_k", s.top_k},
                                  {"top_p", s.top_p},
                                  {"min_p", a.get_double("--min-p", 0.0)},
                                  {"seed", s.seed}};
  j["kv_cache_bytes"] = r.cache_bytes;
  j["generate_seconds"] = seconds;  // the prompt's pass and every step, the model's loading not included
  j["kv_bytes_per_token"] = kv_bytes_per_position(model.config);
  json steps = json::array();
  for (const GenerateStep& st : r.steps) {
    json top = json::array();
    for (const auto& [id, p] : st.dist.kept) {
      if (json_top > 0 && top.size() >= static_cast<size_t>(json_top)) break;
      top.push_back({id, p});
    }
    steps.push_back({{"id", st.id},
                     {"token", model.token_name(st.id)},
                     {"label", model.readable_token(st.id)},
                     {"prob", st.prob},
                     {"raw_prob", st.raw_prob},
                     {"entropy", st.dist.entropy},
                     {"kept", st.dist.kept_total},
                     {"top", top}});
  }
  j["steps"] = steps;
  std::cout << j.dump(1) << "\n";
  return 0;
}

}  // namespace attnlab::cli
