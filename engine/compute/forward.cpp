// The shared forward driver: input checks, mask building, cross mode, pooling, classifier,
// warnings. Backends only run the layers.
#include "engine/compute/forward.h"

#include "engine/compute/hooks.h"
#include "engine/compute/kv_cache.h"
#include "engine/core/memory.h"

#include "engine/compute/lm.h"
#include "engine/compute/plan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>

namespace attnlab {

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "reference") return make_reference_backend();
  if (name == "cpu") return make_cpu_backend();
  if (name == "cpu-bf16") return make_cpu_bf16_backend();
  if (name == "opencl" || name.rfind("opencl:", 0) == 0) return make_opencl_backend(name);
  throw Error("unknown backend \"" + name + "\" (expected cpu, cpu-bf16, reference, opencl or opencl:N)");
}

std::vector<float> softmax(const std::vector<float>& logits) {
  std::vector<float> p(logits.size());
  if (logits.empty()) return p;
  float m = logits[0];
  for (float v : logits) m = std::max(m, v);
  double sum = 0;
  for (size_t k = 0; k < logits.size(); ++k) sum += (p[k] = std::exp(logits[k] - m));
  for (float& v : p) v = static_cast<float>(v / sum);
  return p;
}

std::vector<float> pooling_weights(Pooling pooling, const uint8_t* is_pad, int T) {
  std::vector<float> w(static_cast<size_t>(T), 0.0f);
  int count = 0;
  for (int t = 0; t < T; ++t) {
    const bool use = pooling == Pooling::Cls ? t == 0 : pooling == Pooling::MaskedMean ? !is_pad[t] : true;
    if (use) w[static_cast<size_t>(t)] = 1.0f, ++count;
  }
  for (float& v : w) v = count ? v / static_cast<float>(count) : 0.0f;
  return w;
}

std::vector<uint8_t> pad_flags(const Model& model, const std::vector<int>& ids) {
  const int pad = model.pad_id();
  std::vector<uint8_t> flags(ids.size());
  for (size_t t = 0; t < ids.size(); ++t) flags[t] = ids[t] == pad;
  return flags;
}

std::vector<float> classify(const Model& model, const Tensor& hidden, const std::vector<int>& ids) {
  if (model.config.num_classes == 0) return {};
  // The head of the plan (pooling, pooler, classifier) on one sequence, with the reference ops:
  // a few thousand multiply-adds, the same code that training runs.
  static thread_local std::unique_ptr<Ops> ops = make_reference_ops();
  HeadState st;
  const Tensor logits =
      head_forward(model, *ops, hidden, pad_flags(model, ids), 1, static_cast<int>(hidden.dim(0)), st);
  return {logits.data.begin(), logits.data.end()};
}

std::vector<int> pad_ids(const Model& model, std::vector<int> ids, int n) {
  if (static_cast<int>(ids.size()) >= n) return ids;
  const int pad = model.pad_id();
  if (pad < 0) throw Error("cannot pad: the vocabulary has no [PAD] token");
  ids.resize(static_cast<size_t>(n), pad);
  return ids;
}

Tensor ForwardResult::stacked_probs() const {
  const auto& per_layer = is_cross() ? cross_attention : attention;
  if (per_layer.empty()) throw Error("no attention probabilities were kept");
  Tensor out;
  size_t n = 0;
  for (size_t l = 0; l < per_layer.size(); ++l) {
    const std::shared_ptr<const Tensor> p = layer_probs(static_cast<int>(l));
    if (l == 0) {
      std::vector<int64_t> shape = {static_cast<int64_t>(per_layer.size())};
      for (int64_t d : p->shape) shape.push_back(d);
      out = Tensor(shape);
      n = p->data.size();
    }
    if (p->data.size() != n) throw Error("internal: layer " + std::to_string(l) + "'s attention has another shape");
    std::copy(p->data.begin(), p->data.end(), out.data.begin() + static_cast<std::ptrdiff_t>(l * n));
  }
  return out;
}

double AttentionSource::bytes() const {
  double n = 0;
  for (const auto* v : {&queries, &keys, &inputs_a, &inputs_b})
    for (const Tensor& t : *v) n += static_cast<double>(t.data.size()) * 4.0;
  return n;
}

bool ForwardResult::has_probs(int layer) const {
  const auto& kept = is_cross() ? cross_attention : attention;
  if (layer < 0 || layer >= static_cast<int>(kept.size())) return false;
  if (!kept[static_cast<size_t>(layer)].empty()) return true;
  if (!on_demand) return false;
  const auto& from = is_cross() ? on_demand->inputs_a : on_demand->queries;
  return layer < static_cast<int>(from.size()) && !from[static_cast<size_t>(layer)].empty();
}

std::shared_ptr<const Tensor> ForwardResult::layer_probs(int layer) const {
  const auto& kept = is_cross() ? cross_attention : attention;
  if (layer < 0 || layer >= static_cast<int>(kept.size()))
    throw Error("no layer " + std::to_string(layer) + " (the pass has " + std::to_string(kept.size()) + ")");
  const Tensor& own = kept[static_cast<size_t>(layer)];
  if (!own.empty()) return std::shared_ptr<const Tensor>(std::shared_ptr<const Tensor>(), &own);  // not owned
  if (!has_probs(layer)) throw Error("layer " + std::to_string(layer) + "'s attention was not kept");
  AttentionSource& src = *on_demand;
  const std::lock_guard<std::mutex> lock(src.mutex);
  for (auto it = src.recent.begin(); it != src.recent.end(); ++it)
    if (it->first == layer) {
      auto hit = *it;
      src.recent.erase(it);
      src.recent.push_front(hit);
      return hit.second;
    }
  if (!src.runner) src.runner = make_backend(src.backend);
  const size_t l = static_cast<size_t>(layer);
  auto probs = std::make_shared<const Tensor>(
      is_cross() ? src.runner->cross_attention(*src.model, layer, src.inputs_a[l], src.inputs_b[l], mask)
                 : src.runner->self_attention(*src.model, layer, src.queries[l], src.keys[l], mask_of(layer)));
  src.recent.emplace_front(layer, probs);
  while (src.recent.size() > std::max<size_t>(src.cached_layers, 1)) src.recent.pop_back();
  return probs;
}

std::shared_ptr<const Tensor> ForwardResult::layer_rows(int layer, int first) const {
  if (first == 0) return layer_probs(layer);
  const auto& kept = is_cross() ? cross_attention : attention;
  const int T = static_cast<int>(ids.size());
  if (first < 0 || first >= T)
    throw Error("rows from " + std::to_string(first) + " of " + std::to_string(T) + " queries");
  // rows of a [heads, T, S] tensor, copied
  auto rows_of = [&](const Tensor& all) {
    const int64_t H = all.dim(0), S = all.dim(2), n = T - first;
    auto out = std::make_shared<Tensor>(std::vector<int64_t>{H, n, S});
    for (int64_t h = 0; h < H; ++h) std::copy_n(all.ptr() + (h * T + first) * S, n * S, out->ptr() + h * n * S);
    return std::shared_ptr<const Tensor>(std::move(out));
  };
  if (layer >= 0 && layer < static_cast<int>(kept.size()) && !kept[static_cast<size_t>(layer)].empty())
    return rows_of(kept[static_cast<size_t>(layer)]);
  // A query's row depends on its position beyond the mask only through relative positions (the
  // bias is indexed by i - j): those layers are recomputed whole and cut. Cross mode likewise
  // (its recompute runs from the layer inputs, not from queries).
  if (is_cross() || !on_demand || !has_probs(layer) ||
      (on_demand->model && on_demand->model->config.positional == Positional::Relative))
    return rows_of(*layer_probs(layer));
  AttentionSource& src = *on_demand;
  const size_t l = static_cast<size_t>(layer);
  const Tensor& q = src.queries[l];
  const int64_t W = q.dim(1);
  Tensor q_rows({T - first, W});
  std::copy_n(q.ptr() + static_cast<int64_t>(first) * W, static_cast<size_t>(T - first) * W, q_rows.ptr());
  const AttnMask rows_mask = mask_rows(mask_of(layer), first);
  const std::lock_guard<std::mutex> lock(src.mutex);
  if (!src.runner) src.runner = make_backend(src.backend);
  return std::make_shared<const Tensor>(src.runner->self_attention(*src.model, layer, q_rows, src.keys[l], rows_mask));
}

Tensor Backend::self_attention(const Model&, int, const Tensor&, const Tensor&, const AttnMask&) {
  throw Error("the " + name() + " backend keeps no queries and keys to recompute attention from");
}

namespace {

void check_ids(const Model& model, const std::vector<int>& ids, const char* what) {
  const ModelConfig& c = model.config;
  if (ids.empty()) throw Error(std::string(what) + " is empty: nothing to attend over");
  if (static_cast<int>(ids.size()) > c.max_len)
    throw Error(std::string(what) + " has " + std::to_string(ids.size()) + " tokens, more than the model's max_len " +
                std::to_string(c.max_len));
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab_size)
      throw Error(std::string(what) + ": id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                  " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
}

void check_types(const Model& model, const std::vector<int>& types, size_t n, const char* what) {
  if (types.empty()) return;
  if (types.size() != n)
    throw Error(std::string(what) + ": " + std::to_string(types.size()) + " token types for " + std::to_string(n) +
                " tokens");
  for (size_t i = 0; i < n; ++i)
    if (types[i] < 0 || types[i] >= std::max(1, model.config.type_vocab_size))
      throw Error(std::string(what) + ": token type " + std::to_string(types[i]) + " at position " + std::to_string(i) +
                  " is outside [0, " + std::to_string(std::max(1, model.config.type_vocab_size)) + ")");
}

// The request's labels, or the vocabulary's tokens when it gave none (ids typed by hand).
std::vector<std::string> labels_for(const Model& model, const std::vector<int>& ids,
                                    const std::vector<std::string>& given) {
  if (given.size() == ids.size()) return given;
  if (!given.empty())
    throw Error("internal: " + std::to_string(given.size()) + " token labels for " + std::to_string(ids.size()) +
                " ids");
  std::vector<std::string> labels;
  for (const int id : ids) labels.push_back(id < model.vocab.size() ? model.vocab.token(id) : "#" + std::to_string(id));
  return labels;
}

PassMemory pass_memory(const ModelConfig& c, int T, int S, const std::vector<bool>& keep, const HookSpec* hooks,
                       bool kv, bool on_demand, bool cross) {
  PassMemory m;
  int layers = 0;
  for (int l = 0; l < c.num_layers; ++l) layers += keep.empty() || keep[static_cast<size_t>(l)];
  if (hooks && !hooks->cache.empty()) {  // the activations the hooks keep (float32)
    const HookRun run(*hooks);
    for (const std::string& name : hook_names(c))
      if (run.kept(name)) m.hooks += static_cast<double>(hook_numel(c, name, T, S)) * 4.0;
  }
  m.attention = static_cast<double>(layers) * c.num_heads * T * static_cast<double>(S) * 4.0;
  if (on_demand)  // what the probabilities are recomputed from: queries and keys, or cross mode's layer inputs
    m.attention += c.num_layers * 4.0 *
                   (cross ? static_cast<double>(T + S) * c.embed_size
                          : static_cast<double>(T) * c.num_heads * c.head_dim() +
                                static_cast<double>(S) * c.kv_heads() * c.head_dim());
  m.activations = static_cast<double>(T) * S + 8.0 * T * (c.embed_size + c.ff_dim) * 4.0;  // mask + activations
  if (kv) m.kv_cache = static_cast<double>(kv_bytes_per_position(c)) * T;
  m.weights = weight_bytes(c);
  m.available = available_bytes();
  return m;
}

// Refuses a pass whose kept probabilities and named activations would not fit in memory, before
// allocating.
void check_memory(const ModelConfig& c, int T, int S, const std::vector<bool>& keep, const HookSpec* hooks, bool kv,
                  bool on_demand, bool cross) {
  const PassMemory m = pass_memory(c, T, S, keep, hooks, kv, on_demand, cross);
  const double need = m.pass(), have = m.available;
  int layers = 0;
  for (int l = 0; l < c.num_layers; ++l) layers += keep.empty() || keep[static_cast<size_t>(l)];
  if (have > 0 && m.hooks > 0 && need > 0.9 * have) {
    char msg[360];
    std::snprintf(msg, sizeof msg,
                  "the activations --cache names would take %.1f GB for %d tokens (%.1f GB with the pass), more "
                  "than the %.1f GB of memory available; name fewer (e.g. 'blocks.*.hook_resid_post') or shorten "
                  "the input",
                  m.hooks / 1e9, T, need / 1e9, have / 1e9);
    throw Error(msg);
  }
  if (have > 0 && need > 0.9 * have) {
    char msg[320];
    std::snprintf(
        msg, sizeof msg,
        "this pass would keep %d layer(s) x %d heads x %d x %d attention probabilities (%.1f GB), more than the "
        "%.1f GB of memory available; keep fewer layers%s or shorten the input",
        layers, c.num_heads, T, S, need / 1e9, have / 1e9, on_demand ? "" : ", compute attention on demand");
    throw Error(msg);
  }
}

}  // namespace

PassMemory estimate_pass_memory(const Model& model, const ForwardRequest& req) {
  const int T = static_cast<int>(req.ids.size());
  PassMemory m =
      pass_memory(model.config, T, req.cross_ids.empty() ? T : static_cast<int>(req.cross_ids.size()),
                  req.keep_attention, req.hooks, req.kv != nullptr, req.attention_on_demand, !req.cross_ids.empty());
  m.weights = resident_bytes(model.weights);  // what is held (a BF16 folder's matrices at 2 bytes)
  m.on_demand = req.attention_on_demand;
  if (model.is_seq2seq()) {  // the encoder's weights and pass (every probability kept) and the cross-attention's
    const ModelConfig& e = model.encoder->config;
    const int S = static_cast<int>(req.source_ids.size());
    const PassMemory enc = pass_memory(e, S, S, {}, nullptr, false, false, false);
    m.attention += enc.attention + static_cast<double>(model.config.num_layers) * model.config.num_heads * T * S * 4.0;
    m.activations += enc.activations;
    m.weights += resident_bytes(model.encoder->weights);
    m.on_demand = false;
  }
  return m;
}

std::string memory_text(double bytes) {
  char buf[32];
  if (bytes >= 1e9)
    std::snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  else if (bytes >= 1e6)
    std::snprintf(buf, sizeof buf, "%.0f MB", bytes / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.0f kB", std::max(bytes, 0.0) / 1e3);
  return buf;
}

std::vector<std::pair<int, int>> parse_ablate(const std::string& text, const ModelConfig& c) {
  std::vector<std::pair<int, int>> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t colon = item.find(':');
    int l = -1, h = -1;
    char tail = 0;
    if (colon == std::string::npos || std::sscanf(item.c_str(), "%d:%d%c", &l, &h, &tail) != 2)
      throw Error("--ablate: expected LAYER:HEAD[,LAYER:HEAD]..., got \"" + item + "\"");
    if (l < 0 || l >= c.num_layers || h < 0 || h >= c.num_heads)
      throw Error("--ablate: no head " + item + " (layers 0-" + std::to_string(c.num_layers - 1) + ", heads 0-" +
                  std::to_string(c.num_heads - 1) + ")");
    out.emplace_back(l, h);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<std::vector<uint8_t>> ablation_flags(const ModelConfig& c, const std::vector<std::pair<int, int>>& heads) {
  std::vector<std::vector<uint8_t>> flags;
  if (heads.empty()) return flags;
  flags.assign(static_cast<size_t>(c.num_layers), {});
  for (const auto& [l, h] : heads) {
    if (l < 0 || l >= c.num_layers || h < 0 || h >= c.num_heads)
      throw Error("ablate: no head " + std::to_string(l) + ":" + std::to_string(h) + " (layers 0-" +
                  std::to_string(c.num_layers - 1) + ", heads 0-" + std::to_string(c.num_heads - 1) + ")");
    auto& layer = flags[static_cast<size_t>(l)];
    layer.resize(static_cast<size_t>(c.num_heads), 0);
    layer[static_cast<size_t>(h)] = 1;
  }
  return flags;
}

AttnMask self_attention_mask(const Model& model, const ForwardRequest& req) {
  const ModelConfig& c = model.config;
  check_ids(model, req.ids, "the sequence");
  check_types(model, req.token_types, req.ids.size(), "the sequence");
  const int T = static_cast<int>(req.ids.size());
  AttnMask mask = build_mask(model_mask(c, req.mask), T, T, c.num_heads, req.ids, model.pad_id());
  apply_model_window(mask, c);
  return mask;
}

std::vector<int> decoder_input_ids(const Model& model, const std::vector<int>& labels) {
  const int start = model.config.decoder_start_id;
  if (!model.is_seq2seq() || start < 0) throw Error("decoder inputs are an encoder-decoder model's");
  std::vector<int> ids = {start};
  if (!labels.empty()) ids.insert(ids.end(), labels.begin(), labels.end() - 1);
  return ids;
}

const char* seq2seq_part_name(Seq2SeqPart part) {
  switch (part) {
    case Seq2SeqPart::Cross:
      return "cross";
    case Seq2SeqPart::Decoder:
      return "decoder";
    case Seq2SeqPart::Encoder:
      return "encoder";
  }
  return "cross";
}

Seq2SeqPart parse_seq2seq_part(const std::string& name) {
  for (Seq2SeqPart p : {Seq2SeqPart::Cross, Seq2SeqPart::Decoder, Seq2SeqPart::Encoder})
    if (name == seq2seq_part_name(p)) return p;
  throw Error("no attention \"" + name + "\" in an encoder-decoder: cross, decoder or encoder");
}

ForwardResult seq2seq_part(ForwardResult r, Seq2SeqPart part) {
  if (!r.is_seq2seq()) throw Error("the encoder, decoder and cross-attention are an encoder-decoder's");
  r.on_demand.reset();  // an encoder-decoder's pass keeps every probability
  r.sliding_layers.clear();
  r.layer_inputs.clear();
  r.values.clear();
  if (part == Seq2SeqPart::Cross) {
    r.cross_ids = r.source_ids;
    r.cross_tokens = r.source_tokens;
    r.cross_hidden = r.source_hidden;
    r.cross_attention = std::move(r.decoder_cross_attention);
    r.decoder_cross_attention.clear();
    r.attention.clear();
    r.mask = r.memory_mask;
  } else if (part == Seq2SeqPart::Encoder) {
    r.ids = r.source_ids;
    r.tokens = r.source_tokens;
    r.attention = std::move(r.encoder_attention);
    r.encoder_attention.clear();
    r.mask = r.source_mask;
    r.first_position = 0;
  }
  return r;
}

namespace {

// An encoder-decoder's pass: the encoder over the source (its padding mask only), then the
// decoder over ids (causal, plus the request's masks) whose every layer attends to the encoder's
// output with the source's padding mask (modeling_bart.py's encoder_attention_mask).
void run_seq2seq(const Model& model, Backend& backend, const ForwardRequest& req, EncodeOptions& opts,
                 ForwardResult& r) {
  const Model& enc = *model.encoder;
  if (req.source_ids.empty())
    throw Error(
        "an encoder-decoder model reads a source and a target: give both (attnlab-cli forward --text SOURCE "
        "--target TEXT)");
  if (!req.cross_ids.empty() || req.kv || req.start || (req.hooks && !req.hooks->empty()))
    throw Error("an encoder-decoder's pass takes no cross mode, KV cache, resumed start or named activations yet");
  check_ids(enc, req.source_ids, "the source");
  const int S = static_cast<int>(req.source_ids.size()), T = static_cast<int>(req.ids.size());
  // the encoder's pass and the decoder's cross-attention, each against the memory there is (the
  // decoder's self-attention was checked by run_forward)
  check_memory(enc.config, S, S, {}, nullptr, false, false, false);
  check_memory(model.config, T, S, {}, nullptr, false, false, true);
  const int pad = model.pad_id();
  r.source_ids = req.source_ids;
  r.source_tokens = labels_for(enc, req.source_ids, req.source_tokens);
  if (!req.target_ids.empty()) {
    if (req.target_ids.size() != req.ids.size())
      throw Error("an encoder-decoder's labels are as many as the decoder's inputs (" +
                  std::to_string(req.target_ids.size()) + " and " + std::to_string(req.ids.size()) + ")");
    r.target_ids = req.target_ids;
    r.target_tokens = labels_for(model, req.target_ids, req.target_tokens);
  }
  MaskSpec own;
  own.padding = req.mask.padding;
  const AttnMask source_mask = build_mask(own, S, S, enc.config.num_heads, req.source_ids, pad);
  EncodeOptions eo;
  eo.cancel = req.cancel;
  EncodeOutput e = backend.encode(enc, req.source_ids, source_mask, eo);
  const AttnMask memory_mask = build_mask(own, T, S, model.config.num_heads, req.source_ids, pad);
  EncodeOptions dec = opts;  // the decoder's pass: it reads the encoder's output
  dec.memory = &e.hidden;
  dec.memory_mask = &memory_mask;
  dec.attention_on_demand = false;
  // padding masks the source only: transformers gives the decoder its causal mask alone (no
  // decoder_attention_mask), so a <pad> among the decoder's inputs is still a key
  ForwardRequest decoder_req = req;
  decoder_req.mask.padding = false;
  r.mask = self_attention_mask(model, decoder_req);
  EncodeOutput out = backend.encode(model, req.ids, r.mask, dec);
  r.hidden = std::move(out.hidden);
  r.attention = std::move(out.attention);
  r.decoder_cross_attention = std::move(out.cross_attention);
  r.encoder_attention = std::move(e.attention);
  r.source_hidden = std::move(e.hidden);
  r.source_mask = source_mask;
  r.memory_mask = memory_mask;
  r.layer_inputs = std::move(out.layer_inputs);
  r.warnings = mask_warnings(r.mask, "attention mask");
}

}  // namespace

ForwardResult run_forward(const Model& model, Backend& backend, const ForwardRequest& req) {
  const auto t0 = std::chrono::steady_clock::now();
  const ModelConfig& c = model.config;
  check_ids(model, req.ids, "the sequence");
  check_types(model, req.token_types, req.ids.size(), "the sequence");
  ForwardResult r;
  r.ids = req.ids;
  r.tokens = labels_for(model, req.ids, req.tokens);
  const int T = static_cast<int>(req.ids.size());
  const int pad = model.pad_id();
  EncodeOptions opts;
  static_cast<PassOptions&>(opts) = req;  // what to keep, cancel, progress
  opts.token_types = req.token_types;
  opts.ablate = ablation_flags(c, req.ablate);

  // Attention on demand where the backend recomputes it and no edit of the scores or patterns
  // makes the pass's probabilities differ from what its queries and keys give; elsewhere every
  // layer's probabilities are kept instead (what a view asks for is then there).
  bool edits_attention = false;
  if (req.hooks && !req.hooks->empty()) {
    const HookRun hooks(*req.hooks);
    for (int l = 0; l < c.num_layers && !edits_attention; ++l) {
      const std::string b = "blocks." + std::to_string(l) + ".attn.";
      edits_attention = !hooks.edits_of(b + "hook_attn_scores").empty() || !hooks.edits_of(b + "hook_pattern").empty();
    }
  }
  if (!req.source_ids.empty() && !model.is_seq2seq())
    throw Error("a source text is for encoder-decoder models (BART); this model reads one sequence");
  // encoder-decoders keep every probability for now (no on-demand recompute of cross-attention)
  const bool on_demand =
      req.attention_on_demand && backend.recomputes_attention() && !edits_attention && !model.is_seq2seq();
  if (req.attention_on_demand && !on_demand) opts.keep_attention.clear();
  opts.attention_on_demand = on_demand && req.cross_ids.empty();
  check_memory(c, T, req.cross_ids.empty() ? T : static_cast<int>(req.cross_ids.size()), opts.keep_attention, req.hooks,
               req.kv != nullptr, on_demand, !req.cross_ids.empty());
  if (on_demand) {
    r.on_demand = std::make_shared<AttentionSource>();
    r.on_demand->model = &model;
    r.on_demand->backend = backend.name();
  }
  if (req.start && !req.cross_ids.empty()) throw Error("a resumed pass is a self-attention pass");
  if (req.kv && !c.causal)
    throw Error("a KV cache is for causal language models (an encoder's positions see every other)");
  if (req.kv &&
      (!req.cross_ids.empty() || c.num_classes > 0 || !req.ablate.empty() || (req.hooks && !req.hooks->empty())))
    throw Error("a KV-cached pass is a language model's plain pass (no cross mode, classifier, ablation or hooks)");
  if (req.hooks && !req.hooks->empty() && !req.cross_ids.empty())
    throw Error("named activations (--cache, --patch, --add) are for self-attention passes; cross mode has none");
  if (c.causal && !req.cross_ids.empty())
    throw Error(
        "cross-attention mode compares two sequences through an encoder's attention; this model is a causal "
        "language model");
  if (model.is_seq2seq()) {
    run_seq2seq(model, backend, req, opts, r);
  } else if (req.cross_ids.empty()) {
    r.mask = self_attention_mask(model, req);
    if (r.mask.sliding) r.sliding_layers = c.sliding_layers;
    EncodeOutput out = backend.encode(model, req.ids, r.mask, opts);
    r.first_position = out.first_position;
    r.hidden = std::move(out.hidden);
    r.attention = std::move(out.attention);
    r.layer_inputs = std::move(out.layer_inputs);
    r.values = std::move(out.values);
    r.cache = std::move(out.cache);
    if (on_demand) {
      if (out.queries.size() != static_cast<size_t>(c.num_layers) || out.keys.size() != out.queries.size())
        throw Error("internal: the " + backend.name() + " backend kept no queries for attention on demand");
      r.on_demand->queries = std::move(out.queries);
      r.on_demand->keys = std::move(out.keys);
      if (!out.recomputed_by.empty()) r.on_demand->backend = out.recomputed_by;
    }
    r.warnings = mask_warnings(r.mask, "attention mask");
  } else {
    check_ids(model, req.cross_ids, "the cross sequence");
    check_types(model, req.cross_token_types, req.cross_ids.size(), "the cross sequence");
    r.cross_ids = req.cross_ids;
    r.cross_tokens = labels_for(model, req.cross_ids, req.cross_tokens);
    const int S = static_cast<int>(req.cross_ids.size());
    r.mask = build_mask(req.mask, T, S, c.num_heads, req.cross_ids, pad);
    MaskSpec own;
    own.padding = req.mask.padding;
    const AttnMask mask_a = build_mask(own, T, T, c.num_heads, req.ids, pad);
    const AttnMask mask_b = build_mask(own, S, S, c.num_heads, req.cross_ids, pad);
    EncodeOptions inner;  // each sequence's own encoding: its layers' inputs, no probabilities
    inner.keep_attention.assign(static_cast<size_t>(c.num_layers), false);
    inner.keep_layer_inputs = true;
    inner.cancel = req.cancel;
    inner.ablate = opts.ablate;
    inner.token_types = req.cross_token_types;
    EncodeOutput b = backend.encode(model, req.cross_ids, mask_b, inner);
    inner.on_layer = req.on_layer;
    inner.token_types = req.token_types;
    EncodeOutput a = backend.encode(model, req.ids, mask_a, inner);
    r.cross_attention.resize(static_cast<size_t>(c.num_layers));
    for (int l = 0; l < c.num_layers; ++l) {
      if (!opts.keep_attention.empty() && !opts.keep_attention[static_cast<size_t>(l)]) continue;
      if (req.cancel && req.cancel->load()) throw Cancelled();
      r.cross_attention[static_cast<size_t>(l)] = backend.cross_attention(
          model, l, a.layer_inputs[static_cast<size_t>(l)], b.layer_inputs[static_cast<size_t>(l)], r.mask);
    }
    if (on_demand) {
      r.on_demand->inputs_a = std::move(a.layer_inputs);
      r.on_demand->inputs_b = std::move(b.layer_inputs);
    }
    r.hidden = std::move(a.hidden);
    r.cross_hidden = std::move(b.hidden);
    r.warnings = mask_warnings(r.mask, "cross-attention mask");
  }
  r.logits = classify(model, r.hidden, r.ids);
  if (c.lm_head) {  // the LM head once: generation reads the logits, the views the top 10
    r.next_logits = next_token_logits(model, r.hidden, static_cast<int>(r.hidden.dim(0)) - 1);
    r.next_tokens = top_of_logits(r.next_logits, 10);
  }
  if (const std::string n = backend.notice(); !n.empty()) r.warnings.push_back(n);
  if (!r.logits.empty()) {
    r.class_probs = softmax(r.logits);
    r.predicted =
        static_cast<int>(std::max_element(r.class_probs.begin(), r.class_probs.end()) - r.class_probs.begin());
  }
  for (float v : r.hidden.data)
    if (!std::isfinite(v)) {
      const bool edited = req.hooks && !req.hooks->edits.empty();
      r.warnings.push_back(edited ? "hidden states contain NaN or inf: an edit (--patch / --add) made them overflow"
                                  : "hidden states contain NaN or inf (the weights may be broken)");
      r.predicted = -1;  // no prediction from numbers that are not numbers
      break;
    }
  r.millis = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

void merge_cached_rows(const ForwardResult& previous, ForwardResult& partial) {
  const int P = partial.first_position;
  if (P == 0) return;
  const int T = static_cast<int>(partial.ids.size());
  if (static_cast<int>(previous.ids.size()) < P || previous.hidden.empty() || previous.first_position != 0 ||
      !std::equal(partial.ids.begin(), partial.ids.begin() + P, previous.ids.begin()))
    throw Error("internal: a KV-cached result merged with a pass that does not hold its first rows");
  const int64_t E = partial.hidden.dim(1);
  Tensor hidden({T, E});
  std::copy_n(previous.hidden.ptr(), static_cast<size_t>(P * E), hidden.ptr());
  std::copy(partial.hidden.data.begin(), partial.hidden.data.end(), hidden.ptr() + P * E);
  partial.hidden = std::move(hidden);
  const size_t L = partial.attention.size();
  std::vector<Tensor> full(L);
  std::vector<std::pair<int, int>> tasks;  // (layer, head): one copy each, over the threads
  for (size_t l = 0; l < L; ++l) {
    const Tensor& rows = partial.attention[l];
    if (rows.empty()) continue;
    const Tensor* before = l < previous.attention.size() ? &previous.attention[l] : nullptr;
    if (!before || before->empty())
      throw Error("internal: a KV-cached result needs the previous pass's layer " + std::to_string(l) + " attention");
    full[l] = Tensor({rows.dim(0), T, T});
    for (int h = 0; h < rows.dim(0); ++h) tasks.emplace_back(static_cast<int>(l), h);
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t task = 0; task < tasks.size(); ++task) {
    const auto [l, h] = tasks[task];
    const Tensor &rows = partial.attention[static_cast<size_t>(l)],
                 &before = previous.attention[static_cast<size_t>(l)];
    const int64_t Sp = before.dim(2);
    float* dst = full[static_cast<size_t>(l)].ptr() + static_cast<int64_t>(h) * T * T;
    // rows i < P see keys 0..i only (causal): the previous pass's first P columns
    for (int i = 0; i < P; ++i)
      std::copy_n(before.ptr() + (h * before.dim(1) + i) * Sp, std::min<int64_t>(i + 1, Sp),
                  dst + static_cast<int64_t>(i) * T);
    std::copy_n(rows.ptr() + static_cast<int64_t>(h) * (T - P) * T, static_cast<size_t>(T - P) * T,
                dst + static_cast<int64_t>(P) * T);
  }
  for (size_t l = 0; l < L; ++l)
    if (!full[l].empty()) partial.attention[l] = std::move(full[l]);
  if (partial.on_demand) {  // the queries of rows < P are the previous pass's (its keys hold all T already)
    std::vector<Tensor>& q = partial.on_demand->queries;
    const std::vector<Tensor>* before = previous.on_demand ? &previous.on_demand->queries : nullptr;
    for (size_t l = 0; l < q.size(); ++l) {
      if (!before || l >= before->size() || (*before)[l].empty() || (*before)[l].dim(0) < P)
        throw Error("internal: a KV-cached result needs the previous pass's layer " + std::to_string(l) + " queries");
      const int64_t W = q[l].dim(1);
      Tensor whole({T, W});
      std::copy_n((*before)[l].ptr(), static_cast<size_t>(P * W), whole.ptr());
      std::copy(q[l].data.begin(), q[l].data.end(), whole.ptr() + P * W);
      q[l] = std::move(whole);
    }
  }
  partial.first_position = 0;
}

std::vector<ForwardResult> run_forward_batch(const Model& model, Backend& backend,
                                             const std::vector<std::vector<int>>& batch, const MaskSpec& mask) {
  size_t longest = 0;
  for (const auto& ids : batch) longest = std::max(longest, ids.size());
  std::vector<ForwardResult> out;
  out.reserve(batch.size());
  for (const auto& ids : batch) {
    ForwardRequest req;
    req.ids = pad_ids(model, ids, static_cast<int>(longest));
    req.mask = mask;
    req.mask.padding = true;
    out.push_back(run_forward(model, backend, req));
  }
  return out;
}

}  // namespace attnlab
