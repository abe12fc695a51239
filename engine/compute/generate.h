// Generation for causal language models: the next-token distribution warped as transformers'
// sampling warpers do it (temperature, then top-k, then top-p, then min-p), a seeded sampler,
// and a loop that extends the text one token at a time over a KV cache (kv_cache.h), so each
// step computes one position.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/compute/backend.h"
#include "engine/compute/kv_cache.h"
#include "engine/model/model.h"

namespace attnlab {

// transformers' GenerationConfig fields of the same names (generation/logits_process.py); the
// "off" values are 5.x's defaults (None): temperature 1, top_k 0, top_p 1, min_p 0.
struct SamplingOptions {
  bool greedy = true;        // argmax of the raw logits (do_sample=False); the warpers are then unused
  float temperature = 1.0f;  // scores / temperature (> 0)
  int top_k = 0;             // keep scores >= the k-th largest (ties with it kept); 0 = off
  double top_p = 1.0;        // keep the smallest set whose probability exceeds top_p; 1 = off (a Python
                             // float there: 1 - top_p is taken in double, then met as a float32)
  float min_p = 0.0f;        // drop tokens below min_p x the largest probability; 0 = off
  uint64_t seed = 0;         // the sampler's seed: one seed, one text
};

// One step's distribution: what the warpers kept, renormalised.
struct NextTokenDistribution {
  std::vector<std::pair<int, float>> kept;  // (id, p) with p > 0, likeliest first (ties: lower id first)
  std::vector<float> raw;                   // softmax of the raw logits over the vocabulary
  int kept_total = 0;                       // how many tokens the warpers kept (kept may hold fewer: keep_top)
  double entropy = 0;                       // of the kept distribution, in nats
};

// The warpers on one position's logits; Error for a temperature <= 0, top_p outside (0, 1] or
// min_p outside [0, 1]. Greedy: the raw distribution itself.
NextTokenDistribution warp_logits(const std::vector<float>& logits, const SamplingOptions& o);
// Checks the options (the same errors as warp_logits) before a run starts.
void check_sampling(const SamplingOptions& o);

// splitmix64 draws in [0, 1): the sampler's stream, reproducible from its seed.
class SampleRng {
 public:
  explicit SampleRng(uint64_t seed) : state_(seed) {}
  double uniform();

 private:
  uint64_t state_;
};
// Greedy: the likeliest kept token; else a draw from the kept distribution (inverse CDF in the
// order of `kept`).
int choose_token(const NextTokenDistribution& d, const SamplingOptions& o, SampleRng& rng);

struct GenerateStep {
  int id = -1;
  float prob = 0;      // its probability in the distribution it was drawn from
  float raw_prob = 0;  // its probability before the warpers
  NextTokenDistribution dist;
};

// transformers' logits processors that a folder's generation_config.json (over its config.json)
// turns on, applied to each step's logits before the warpers, in transformers' order:
// no_repeat_ngram_size, min_length (on the whole sequence, prompt or decoder start included),
// forced_bos_token_id, forced_eos_token_id (on the last step of max_new). num_beams is read to
// be reported: generate decodes greedily or samples, as do_sample with num_beams=1 does.
struct GenerationRules {
  int no_repeat_ngram = 0, min_length = 0, forced_bos = -1, forced_eos = -1, num_beams = 1;
  bool any() const { return no_repeat_ngram > 0 || min_length > 0 || forced_bos >= 0 || forced_eos >= 0; }
};
GenerationRules generation_rules(const Model& model);
// The rules on the logits of the token after `ids` (a sequence of ids.size() tokens that may grow
// to max_length); eos: the end-of-text ids min_length holds back.
void apply_generation_rules(std::vector<float>& logits, const std::vector<int>& ids, int max_length,
                            const GenerationRules& rules, const std::vector<int>& eos);

struct GenerateRequest {
  // An encoder-decoder's source, read once by the encoder per step; the prompt is then the
  // decoder's start ({decoder_start_token_id}, as transformers' generate begins).
  std::vector<int> source;
  GenerationRules rules;    // none unless set (attnlab-cli generate sets the folder's)
  std::vector<int> prompt;  // non-empty
  int max_new = 20;
  SamplingOptions sampling;
  std::vector<int> stop_ids;    // tokens that end the text once produced (the model's end-of-text)
  bool keep_attention = false;  // the final sequence's [layers][heads, T, T], generated rows included
  // How many of each step's kept tokens its distribution keeps in the result (0: all); the raw
  // distribution over the vocabulary is dropped once the step is made (a step would otherwise
  // hold ~1 MB for a 128k vocabulary).
  int keep_top = 0;
  const std::atomic<bool>* cancel = nullptr;
  // Told of each step as it is made; returning false stops after it (a stop text was produced).
  std::function<bool(const GenerateStep&)> on_step;
};

struct GenerateResult {
  std::vector<int> ids;  // prompt + generated
  std::vector<GenerateStep> steps;
  std::vector<Tensor> attention;  // when asked: per layer [heads, T, T] with T = ids.size() - 1
                                  // (the last token chosen is never run through the model)
  std::string stopped;            // "max_new", "stop token", "stop text", "max_len"
  int64_t cache_bytes = 0;        // the KV cache's size at the end
};

// Runs the prompt once, then one position per step. Error for a model without an LM head or a
// causal mask, a prompt that is empty or as long as the model's positions.
GenerateResult generate(const Model& model, Backend& backend, const GenerateRequest& request);

// The text the tokens after `prompt` add to it: decode(ids) after decode(prompt) with the model's
// tokenizer (so a token that starts with a space keeps it: SentencePiece decoders strip the
// first token's); without a tokenizer, a word model's tokens are joined with spaces and a
// character model's as they are. ids begins with prompt. Ends in U+FFFD while a character is
// split over tokens not all produced yet.
std::string continuation_text(const Model& model, const std::vector<int>& prompt, const std::vector<int>& ids);
// True when decoded text ends in U+FFFD: a character whose remaining tokens are not produced yet.
bool ends_mid_character(const std::string& text);

// The model's end-of-text tokens: config.json's eos_token_id (a number or a list) where the
// folder gives one, else the tokenizer's "<|endoftext|>" / "</s>" / "<|end_of_text|>" if present.
std::vector<int> end_of_text_ids(const Model& model);

}  // namespace attnlab
