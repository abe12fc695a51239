// attnlab-cli forward: one pass over --text / --ids (a cross text, an encoder-decoder's source and
// target), with masks, ablation and named activations; --json describes it, --attn-out, --out,
// --mask-out, --cache-out and --align-out write what it kept.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "app/cli_args.h"
#include "app/cli_common.h"
#include "engine/analysis/alignment.h"
#include "engine/compute/forward.h"
#include "engine/compute/hooks.h"
#include "engine/compute/plan.h"
#include "engine/formats/npy.h"
#include "engine/model/model_folder.h"
#include "engine/text/input.h"

namespace attnlab::cli {

using json = nlohmann::json;

int cmd_forward(const std::vector<std::string>& argv, const std::string& argv0) {
  const Args a(argv,
               with(kModelValued,
                    {"--text",        "--pair",      "--truncation",   "--ids",        "--cross-text", "--cross-ids",
                     "--pad-to",      "--attn-out",  "--out",          "--mask-out",   "--save-model", "--ablate",
                     "--ablate-mean", "--cache",     "--cache-out",    "--patch",      "--add",        "--target",
                     "--target-ids",  "--align-out", "--align-layers", "--align-heads"}),
               {"--json", "--random-init", "--list-hooks"});
  const Model model = resolve_model(a, argv0);
  if (a.has("--list-hooks")) {  // every named activation of this model's pass, in pass order
    for (const std::string& name : hook_names(model.config)) std::cout << name << "\n";
    return 0;
  }
  std::pair<PreparedInput, PreparedInput> inputs;
  ForwardRequest req = request_from_flags(a, model, "forward", &inputs);
  std::vector<int> target_ids;  // an encoder-decoder's labels (the target's encoding)
  if (model.is_seq2seq()) {
    // --text / --ids is the source; the target is teacher-forced as transformers trains: the
    // decoder reads decoder_start_token_id and the target's tokens but the last
    if (a.has("--target") == a.has("--target-ids"))
      throw Error("forward: " + model.hf.model_type +
                  " is an encoder-decoder: --text (or --ids) is the source, and --target TEXT (or --target-ids) the "
                  "target");
    InputOptions o;
    o.overflow = Overflow::Error;
    o.what = "target";
    const PreparedInput t = a.has("--target")
                                ? prepare_text(model, a.get("--target"), o)
                                : prepare_ids(model, parse_int_list(a.get("--target-ids"), "--target-ids"), o);
    if (t.ids.empty()) throw Error("--target: the text has no tokens");
    if (const std::string note = unknown_note(t, "--target"); !note.empty()) std::cerr << "warning: " << note << "\n";
    target_ids = t.ids;
    req.source_ids = std::move(req.ids), req.source_tokens = std::move(req.tokens);
    req.ids = decoder_input_ids(model, t.ids);
    req.tokens = {model.readable_token(model.config.decoder_start_id)};
    req.tokens.insert(req.tokens.end(), t.tokens.begin(), t.tokens.end() - 1);
    req.token_types.clear();
  } else if (a.has("--target") || a.has("--target-ids")) {
    throw Error("--target is for encoder-decoder models (bart); this model reads one sequence");
  }
  for (const char* f : {"--align-out", "--align-layers", "--align-heads"})
    if (a.has(f) && !model.is_seq2seq())
      throw Error(std::string(f) + ": an alignment reads an encoder-decoder's cross-attention; this model has none");
  if (a.has("--align-out") && !ends_with(a.get("--align-out"), ".npy"))
    throw Error("--align-out: the alignment is one [target, source] array: name an .npy");
  // the layers and heads an alignment averages: "all" (the default) or a comma list
  auto pick = [&](const char* flag) {
    std::vector<int> out;
    if (a.has(flag) && a.get(flag) != "all") out = parse_int_list(a.get(flag), flag);
    return out;
  };
  const std::vector<int> align_layers = pick("--align-layers"), align_heads = pick("--align-heads");
  for (int l : align_layers)  // before the pass writes anything
    if (l < 0 || l >= model.config.num_layers)
      throw Error("alignment: no layer " + std::to_string(l) + " (the decoder has " +
                  std::to_string(model.config.num_layers) + ")");
  for (int h : align_heads)
    if (h < 0 || h >= model.config.num_heads)
      throw Error("alignment: no head " + std::to_string(h) + " (a layer has " +
                  std::to_string(model.config.num_heads) + ")");
  if (a.has("--ablate")) req.ablate = parse_ablate(a.get("--ablate"), model.config);
  HookSpec hooks = hooks_from_flags(a);
  if (a.has("--ablate-mean")) {  // each head's z replaced by its mean over the positions (through the hooks)
    std::vector<std::pair<int, int>> heads;
    try {
      heads = parse_ablate(a.get("--ablate-mean"), model.config);
    } catch (const Error& e) {  // parse_ablate names --ablate
      const std::string msg = e.what();
      throw Error(msg.rfind("--ablate:", 0) == 0 ? "--ablate-mean:" + msg.substr(9) : msg);
    }
    for (const auto& [l, h] : heads) hooks.edits.push_back(mean_ablation(l, h, model.config.head_dim()));
  }
  if (!hooks.cache.empty() && !a.has("--cache-out")) throw Error("--cache needs --cache-out FILE.npz");
  if (a.has("--cache-out") && hooks.cache.empty()) throw Error("--cache-out needs --cache NAME[,NAME|GLOB]...");
  req.hooks = &hooks;
  // attention on demand: the pass keeps each layer's queries and keys, and --attn-out recomputes
  // and writes one layer at a time (memory O(layers x T x d), not layers x heads x T^2)
  req.keep_attention.assign(static_cast<size_t>(model.config.num_layers), false);
  req.attention_on_demand = true;
  auto backend = make_backend(a.get("--backend", "cpu"));
  const ForwardResult r = run_forward(model, *backend, req);
  if (a.has("--cache-out")) {
    if (r.cache.empty())
      throw Error("--cache: no activation of this model's pass matches " + a.all("--cache").front() +
                  " (--list-hooks names them)");
    save_npz(a.get("--cache-out"), r.cache);
  }

  if (a.has("--attn-out") &&
      r.is_seq2seq()) {  // transformers' encoder_attentions, decoder_attentions, cross_attentions
    const std::string path = a.get("--attn-out");
    if (!ends_with(path, ".npz"))
      throw Error("--attn-out: an encoder-decoder's attention is three arrays (encoder, decoder, cross): name an .npz");
    auto stack = [](const std::vector<Tensor>& layers) {
      std::vector<int64_t> shape = {static_cast<int64_t>(layers.size())};
      shape.insert(shape.end(), layers.at(0).shape.begin(), layers.at(0).shape.end());
      Tensor all(shape);
      const size_t n = layers[0].data.size();
      for (size_t l = 0; l < layers.size(); ++l)
        std::copy(layers[l].data.begin(), layers[l].data.end(), all.ptr() + l * n);
      return all;
    };
    save_npz(path, {{"encoder", stack(r.encoder_attention)},
                    {"decoder", stack(r.attention)},
                    {"cross", stack(r.decoder_cross_attention)}});
  } else if (a.has("--attn-out")) {
    const int L = model.config.num_layers;
    const std::shared_ptr<const Tensor> first = r.layer_probs(0);
    std::vector<int64_t> shape = {L};
    shape.insert(shape.end(), first->shape.begin(), first->shape.end());
    save_npy_parts(a.get("--attn-out"), shape, [&](int64_t l) { return r.layer_probs(static_cast<int>(l)); });
  }
  std::optional<Alignment> alignment;  // an encoder-decoder's: which source tokens each target token reads
  if (r.is_seq2seq()) {
    alignment = cross_alignment(r, align_layers, align_heads);
    if (a.has("--align-out")) {
      Tensor t({alignment->T, alignment->S});
      std::copy(alignment->map.begin(), alignment->map.end(), t.data.begin());
      save_npy(a.get("--align-out"), t);
    }
  }
  if (a.has("--out")) save_npy(a.get("--out"), r.hidden);
  if (a.has("--mask-out")) save_npy(a.get("--mask-out"), r.mask.as_tensor());
  if (a.has("--save-model")) save_model(model, a.get("--save-model"));
  for (const auto& w : r.warnings) std::cerr << "warning: " << w << "\n";

  if (a.has("--json")) {
    json j;
    j["model"] = model.source;
    j["architecture"] = model.summary();
    j["notes"] = model.hf.notes;
    j["backend"] = backend->name();
    // tokens as the tokenizer gives them (its vocabulary's strings, "Ġthe"); labels as the views show them
    std::vector<std::string> pieces = r.tokens;
    if (model.is_hf())
      for (size_t t = 0; t < r.ids.size(); ++t) pieces[t] = model.token_name(r.ids[t]);
    j["tokens"] = pieces;
    j["labels"] = r.tokens;
    j["ids"] = r.ids;
    if (!r.next_tokens.empty()) {
      json next = json::array();
      for (const auto& [id, p] : r.next_tokens)
        next.push_back(
            {{"id", id}, {"token", model.token_name(id)}, {"label", model.readable_token(id)}, {"probability", p}});
      j["next_tokens"] = next;
    }
    j["token_type_ids"] = req.token_types.empty() ? std::vector<int>(r.ids.size(), 0) : req.token_types;
    if (r.is_cross()) {
      j["cross_tokens"] = r.cross_tokens;
      j["cross_ids"] = r.cross_ids;
    }
    if (r.is_seq2seq()) {  // tokens and ids above are the decoder's input (the target shifted right)
      std::vector<std::string> source_pieces;
      for (const int id : r.source_ids) source_pieces.push_back(model.token_name(id));
      j["source_tokens"] = source_pieces;
      j["source_labels"] = r.source_tokens;
      j["source_ids"] = r.source_ids;
      j["target_ids"] = target_ids;
      const ModelConfig& e = model.encoder->config;
      j["encoder_attention_shape"] = {e.num_layers, e.num_heads, r.source_ids.size(), r.source_ids.size()};
      j["cross_attention_shape"] = {model.config.num_layers, model.config.num_heads, r.ids.size(), r.source_ids.size()};
      // per target token (each label, as the decoder's position before it predicts it), the source
      // token the chosen layers' and heads' mean cross-attention weighs most, as fairseq's alignments
      json align = json::array();
      for (int i = 0; i < alignment->T; ++i) {
        const int src = alignment->best[static_cast<size_t>(i)];
        align.push_back(
            {{"target", i},
             {"target_token", model.token_name(target_ids[static_cast<size_t>(i)])},
             {"source", src},
             {"source_token", model.token_name(r.source_ids[static_cast<size_t>(src)])},
             {"weight",
              alignment->map[static_cast<size_t>(i) * static_cast<size_t>(alignment->S) + static_cast<size_t>(src)]}});
      }
      j["alignment"] = align;
      j["alignment_layers"] = align_layers.empty() ? json("all") : json(align_layers);
      j["alignment_heads"] = align_heads.empty() ? json("all") : json(align_heads);
    }
    j["mask"] = model_mask(model.config, req.mask).describe();  // a decoder's own causal mask included
    j["attention_shape"] = {model.config.num_layers, model.config.num_heads, r.ids.size(),
                            r.is_cross() ? r.cross_ids.size() : r.ids.size()};
    j["logits"] = r.logits;
    j["probabilities"] = r.class_probs;
    j["predicted_label"] = r.predicted >= 0 ? json(model.label(r.predicted)) : json(nullptr);
    // the pass's warnings, and the unknown words input_from_flags already printed
    std::vector<std::string> warnings = r.warnings;
    for (const auto& [in, flag] : {std::pair{&inputs.first, "--text"}, std::pair{&inputs.second, "--cross-text"}})
      if (const std::string note = unknown_note(*in, flag); !note.empty()) warnings.push_back(note);
    for (const PreparedInput* in : {&inputs.first, &inputs.second})  // what --truncation cut, as stderr says it
      for (const std::string& n : in->notices) warnings.push_back(n);
    j["warnings"] = warnings;
    j["millis"] = r.millis;
    // what the pass keeps of its attention: every layer's queries and keys (probabilities
    // recomputed when written), or the probabilities themselves (a backend or edit that needs them)
    j["attention_kept"] = r.on_demand ? "queries and keys" : "probabilities";
    if (!hooks.edits.empty()) {  // what was changed, so a run says it was
      json edits = json::array();
      for (const HookEdit& e : hooks.edits)
        edits.push_back({{"name", e.name},
                         {"kind", e.kind == HookEdit::Kind::Add     ? "add"
                                  : e.kind == HookEdit::Kind::Apply ? "mean ablation"
                                                                    : "patch"},
                         {"positions", e.positions},
                         {"alpha", e.alpha}});
      j["edits"] = edits;
    }
    if (!req.ablate.empty()) j["ablated"] = a.get("--ablate");
    if (a.has("--ablate-mean")) j["mean_ablated"] = a.get("--ablate-mean");
    if (!r.cache.empty()) {
      json cached = json::object();
      for (const auto& [name, t] : r.cache) cached[name] = t.shape;
      j["cache"] = cached;  // name: shape, as written to --cache-out
    }
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "model " << model.source << ", backend " << backend->name() << ", " << r.ids.size()
              << (r.ids.size() == 1 ? " token" : " tokens")
              << (r.is_cross() ? ", cross " + std::to_string(r.cross_ids.size()) +
                                     (r.cross_ids.size() == 1 ? " token" : " tokens")
                               : "")
              << ", mask " << model_mask(model.config, req.mask).describe() << ", " << r.millis << " ms\n";
    for (const HookEdit& e : hooks.edits)
      std::cout << (e.kind == HookEdit::Kind::Add ? "added to " : "patched ") << e.name
                << (e.positions.empty() ? std::string(" at every position")
                                        : " at " + std::to_string(e.positions.size()) + " position(s)")
                << "\n";
    if (a.has("--ablate")) std::cout << "ablated heads " << a.get("--ablate") << "\n";
    if (a.has("--ablate-mean")) std::cout << "mean-ablated heads " << a.get("--ablate-mean") << "\n";
    if (r.is_seq2seq()) {
      std::cout << "source:";
      for (const auto& t : r.source_tokens) std::cout << " " << t;
      std::cout << "\n";
    }
    std::cout << (r.is_seq2seq() ? "decoder input:" : "tokens:");
    for (const auto& t : r.tokens) std::cout << " " << t;
    std::cout << "\n";
    if (r.predicted >= 0) {
      std::cout << "predicted " << model.label(r.predicted) << " (";
      for (size_t k = 0; k < r.class_probs.size(); ++k)
        std::cout << (k ? ", " : "") << model.label(static_cast<int>(k)) << " " << r.class_probs[k];
      std::cout << ")\n";
    }
    if (!r.next_tokens.empty()) {
      std::cout << "next token after the last:";
      for (const auto& [id, p] : r.next_tokens) std::printf(" %s %.3g", model.readable_token(id).c_str(), p);
      std::cout << "\n";
    }
  }
  return 0;
}

}  // namespace attnlab::cli
