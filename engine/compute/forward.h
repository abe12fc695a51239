// The forward pass as the UI and CLI see it: ids (+ optional cross sequence) and a MaskSpec in,
// a ForwardResult value out (hidden states, logits, every layer's per-head probabilities, the
// effective masks, warnings). No widget or file format is involved here.
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/compute/backend.h"
#include "engine/compute/mask.h"
#include "engine/model/model.h"
#include "engine/model/model_folder.h"

namespace attnlab {

// A forward pass: the input, its masks and labels, and (PassOptions) what to keep besides the
// output. In cross mode keep_layer_inputs and keep_values are not used, and on_layer follows the
// first sequence's encoding.
struct ForwardRequest : PassOptions {
  std::vector<int> ids;
  std::vector<int> cross_ids;  // non-empty: cross-attention mode, ids attend to cross_ids
  MaskSpec mask;               // self mode: the self-attention mask. Cross mode: the cross-attention mask; each
                               // sequence's own encoding then uses only its padding mask (when padding is on).
  // Labels of ids and cross_ids, as prepare_text gave them; empty: the vocabulary's tokens.
  std::vector<std::string> tokens, cross_tokens;
  // Token types (segments) of ids and cross_ids, for models with a token-type embedding; empty = all 0.
  std::vector<int> token_types, cross_token_types;
  // (layer, head) pairs whose heads are ablated (EncodeOptions::ablate); Error for one that does not exist.
  std::vector<std::pair<int, int>> ablate;
  // An encoder-decoder (Model::encoder): the source the encoder reads, with its labels; ids are
  // then the decoder's input (decoder_input_ids: the target shifted right).
  std::vector<int> source_ids;
  std::vector<std::string> source_tokens;
  // Its labels (the target's tokens, the decoder's position i predicts label i), carried into the
  // result for the views that label rows by what they predict; optional.
  std::vector<int> target_ids;
  std::vector<std::string> target_tokens;
};

// What a pass with PassOptions::attention_on_demand kept to recompute any layer's probabilities,
// and the layers recomputed last. Shared by the copies of a result; thread-safe.
struct AttentionSource {
  const Model* model = nullptr;            // the pass's model: it must outlive the source (or be pinned)
  std::shared_ptr<const void> pin;         // an owner of the model the source keeps alive (the app's shared model)
  std::string backend;                     // the backend that ran the pass: the recompute runs the same ops
  std::vector<Tensor> queries, keys;       // self mode, per layer: [T, H * D], [S, KV * D] (EncodeOutput)
  std::vector<Tensor> inputs_a, inputs_b;  // cross mode, per layer: the two sequences' layer inputs
  size_t cached_layers = 2;                // how many recomputed layers stay cached
  double bytes() const;                    // what the kept inputs take

  std::mutex mutex;  // guards what follows
  std::unique_ptr<Backend> runner;
  std::deque<std::pair<int, std::shared_ptr<const Tensor>>> recent;  // most recent first
};

struct ForwardResult {
  // With a KV cache (PassOptions::kv): the first position the pass computed; hidden and attention
  // hold the rows from it on ([T - P, E], [heads, T - P, T]), the rest equal the previous pass's
  // (merge_cached_rows fills them in). 0 for a full pass.
  int first_position = 0;
  std::vector<int> ids, cross_ids;
  std::vector<std::string> tokens, cross_tokens;  // what ids and cross_ids are labelled with: every view
                                                  // labels what it draws from the result it draws
  Tensor hidden;                                  // [T, E]
  Tensor cross_hidden;                            // [T_b, E] in cross mode
  std::vector<float> logits, class_probs;         // empty for encoder-only models
  int predicted = -1;
  // Language models: the 10 likeliest next tokens after the last position (id, probability),
  // best first (engine/compute/lm.h for other positions).
  std::vector<std::pair<int, float>> next_tokens;
  std::vector<float> next_logits;       // language models: the LM head's logits after the last position [vocab]
  std::vector<Tensor> attention;        // per layer [heads, T, T] (self mode) or empty
  std::vector<Tensor> cross_attention;  // per layer [heads, T_a, T_b] (cross mode)
  // An encoder-decoder's pass (attention holds the decoder's causal self-attention): the source,
  // the encoder's final hidden states [S, E], its self-attention per encoder layer [heads, S, S]
  // and the decoder's cross-attention per decoder layer [heads, T, S] (transformers'
  // encoder_attentions and cross_attentions).
  std::vector<int> source_ids;
  std::vector<std::string> source_tokens;
  std::vector<int> target_ids;  // the request's labels, when it gave them
  std::vector<std::string> target_tokens;
  Tensor source_hidden;
  std::vector<Tensor> encoder_attention, decoder_cross_attention;
  AttnMask source_mask, memory_mask;  // the encoder's [S, S] and the cross-attention's [T, S] (the source's padding)
  bool is_seq2seq() const { return !source_ids.empty(); }
  std::vector<Tensor> layer_inputs;     // per layer [T, E] when the request asked for them
  std::vector<Tensor> values;           // per layer [T, KV * D] when asked for and the backend keeps them
  std::map<std::string, Tensor> cache;  // named activations kept (PassOptions::hooks, engine/compute/hooks.h)
  AttnMask mask;                        // the effective mask of what `attention`/`cross_attention` show
  std::vector<uint8_t> sliding_layers;  // the layers whose mask is mask.sliding (Gemma's windowed layers)
  // The mask layer `layer` applied: mask, or its windowed copy on a windowed layer of a mixed model.
  const AttnMask& mask_of(int layer) const {
    return mask.sliding && layer >= 0 && layer < static_cast<int>(sliding_layers.size()) &&
                   sliding_layers[static_cast<size_t>(layer)]
               ? *mask.sliding
               : mask;
  }
  std::vector<std::string> warnings;
  double millis = 0;  // wall time of the forward pass

  bool is_cross() const { return !cross_ids.empty(); }
  // The kept probabilities of the shown kind for one layer: attention[l] or cross_attention[l]
  // (empty for a layer not kept; layer_probs gives them on demand too).
  const Tensor& probs(int layer) const {
    return is_cross() ? cross_attention.at(static_cast<size_t>(layer)) : attention.at(static_cast<size_t>(layer));
  }
  // [layers, heads, T, S] of every layer, kept or recomputed (Error if any layer has neither).
  Tensor stacked_probs() const;
  // Attention on demand (PassOptions::attention_on_demand): what the layers' probabilities are
  // recomputed from; null when the pass kept only probabilities.
  std::shared_ptr<AttentionSource> on_demand;
  // Layer `layer`'s probabilities of the shown kind [heads, T, S]: the kept ones (owned by this
  // result: valid while it is), or recomputed from on_demand in one attention op (the same op as
  // the pass's, so the same values) and shared with its cache. Error when neither was kept.
  std::shared_ptr<const Tensor> layer_probs(int layer) const;
  // Rows first..T-1 of layer `layer`'s probabilities [heads, T - first, S]: layer_probs when
  // first is 0; else a copy of the kept rows, or (on demand) only those queries' rows computed
  // by the pass's attention op against every key (not cached): what a view that already holds
  // the first rows of a causal model's earlier pass needs after an edit at `first`.
  std::shared_ptr<const Tensor> layer_rows(int layer, int first) const;
  bool has_probs(int layer) const;  // kept, or recomputable
};

// What a pass takes in memory, estimated from its request before it runs (bytes): the kept
// probabilities (kept layers x heads x T x S floats), the mask and working activations, the
// activations hooks keep, and the KV cache the pass leaves (causal models, PassOptions::kv: every
// layer's keys and values of T positions); beside them the model's float32 weights and the memory
// the machine has available now (0 when unknown). run_forward refuses a pass over 90% of it.
struct PassMemory {
  double attention = 0, activations = 0, hooks = 0, kv_cache = 0;
  double weights = 0, available = 0;
  bool on_demand = false;  // attention counts queries and keys (PassOptions::attention_on_demand)
  double pass() const { return attention + activations + hooks + kv_cache; }
};
PassMemory estimate_pass_memory(const Model& model, const ForwardRequest& request);
// "12 MB", "4.4 GB": a byte count as the status bar and messages give it.
std::string memory_text(double bytes);

// Self mode: validates the ids (and token types) and builds the mask the attention applies: the
// request's MaskSpec with the model's own (causal, sliding window).
AttnMask self_attention_mask(const Model& model, const ForwardRequest& request);
// Per layer, 1 for each ablated head (EncodeOptions::ablate); empty when none. Error for a head
// that does not exist.
std::vector<std::vector<uint8_t>> ablation_flags(const ModelConfig& c, const std::vector<std::pair<int, int>>& heads);
// "1:3,0:0" -> {(1, 3), (0, 0)}; Error quoting a malformed or out-of-range pair.
std::vector<std::pair<int, int>> parse_ablate(const std::string& text, const ModelConfig& c);

// An encoder-decoder's decoder input for a target's labels, as transformers trains
// (shift_tokens_right): decoder_start_token_id, then every label but the last.
std::vector<int> decoder_input_ids(const Model& model, const std::vector<int>& labels);

// What of an encoder-decoder's pass a view draws: the decoder's cross-attention (target down,
// source across), its causal self-attention, or the encoder's self-attention.
enum class Seq2SeqPart { Cross, Decoder, Encoder };
const char* seq2seq_part_name(Seq2SeqPart part);  // "cross", "decoder", "encoder"
// Error naming the three for another name.
Seq2SeqPart parse_seq2seq_part(const std::string& name);
// An encoder-decoder's result as the one-sequence and cross-mode views read it: Cross puts the
// decoder's cross-attention in cross mode (ids the decoder's input, cross_ids the source,
// cross_attention and mask [T, S]); Decoder leaves the decoder's self-attention where it is;
// Encoder makes the source the sequence (ids, tokens, attention and mask the encoder's). The
// source, the decoder's hidden states (the prediction reads them), logits and predictions stay. Error for a result that
// is not an encoder-decoder's.
ForwardResult seq2seq_part(ForwardResult r, Seq2SeqPart part);

// Validates ids against the model (range, length <= max_len, non-empty) and runs the pass.
ForwardResult run_forward(const Model& model, Backend& backend, const ForwardRequest& request);

// A KV-cached result made whole: the rows before its first position (hidden states and every
// kept layer's probabilities) taken from `previous`, the pass the cache was left by, whose ids
// begin with the same first_position tokens. Error when previous does not hold those rows.
void merge_cached_rows(const ForwardResult& previous, ForwardResult& partial);

// Several sequences of different lengths, padded with [PAD] to the longest and run with the
// padding mask on (plus whatever `mask` adds), as in the articles' batch examples.
std::vector<ForwardResult> run_forward_batch(const Model& model, Backend& backend,
                                             const std::vector<std::vector<int>>& batch, const MaskSpec& mask);

// Appends [PAD] ids up to length n (no-op when already that long).
std::vector<int> pad_ids(const Model& model, std::vector<int> ids, int n);

// 1 where ids[t] is the vocabulary's [PAD].
std::vector<uint8_t> pad_flags(const Model& model, const std::vector<int>& ids);
// Pools hidden states [T, E] to [E] per the config, then applies the classifier.
std::vector<float> classify(const Model& model, const Tensor& hidden, const std::vector<int>& ids);
std::vector<float> softmax(const std::vector<float>& logits);

}  // namespace attnlab
