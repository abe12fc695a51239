// attnlab-cli: the engine headless. Subcommands: forward, bench (more join as they land).
// Every user error is one line on stderr and exit code 2; success prints results and exits 0.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>
#include <random>

#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include "app/cli_args.h"
#include "app/cli_common.h"
#include "app/default_model.h"
#include "engine/compute/forward.h"
#include "engine/compute/hooks.h"
#include "engine/compute/plan.h"
#include "engine/analysis/alignment.h"
#include "engine/analysis/attribution.h"
#include "engine/analysis/detectors.h"
#include "engine/analysis/method_table.h"
#include "engine/analysis/methods.h"
#include "engine/analysis/patching.h"
#include "engine/compute/lm.h"
#include "engine/compute/measured.h"
#include "engine/text/input.h"
#include "engine/core/io_util.h"
#include "engine/formats/npy.h"
#include "engine/compute/ops.h"
#include "engine/train/optimizer.h"
#include "engine/train/train_model.h"

namespace attnlab::cli {

int cmd_train(const std::vector<std::string>& argv);
int cmd_eval(const std::vector<std::string>& argv, const std::string& argv0);
int cmd_predict(const std::vector<std::string>& argv, const std::string& argv0);
int cmd_make_data(const std::vector<std::string>& argv);
int cmd_lm_loss(const std::vector<std::string>& argv, const std::string& argv0);
int cmd_bench(const std::vector<std::string>& argv, const std::string& argv0);  // cli_bench.cpp
int cmd_devices(const std::vector<std::string>& argv);
int cmd_sae(const std::vector<std::string>& argv, const std::string& argv0);       // cli_sae.cpp
int cmd_generate(const std::vector<std::string>& argv, const std::string& argv0);  // cli_generate.cpp
int cmd_forward(const std::vector<std::string>& argv, const std::string& argv0);   // cli_forward.cpp
#ifdef ATTNLAB_WITH_EXPORT
int cmd_export(const std::vector<std::string>& argv, const std::string& argv0);
#endif

namespace {

using json = nlohmann::json;

const char* kUsage = R"(attnlab-cli: transformer attention, headless.

usage:
  attnlab-cli --version
  attnlab-cli forward [--model DIR] (--text "..." [--pair "..."] | --ids 5,17,2)
                      [--truncation longest_first|only_first|only_second] (over max_len: cut as
                      transformers does, separators kept; without it, an error; every --text command)
                      [--cross-text "..." | --cross-ids ...]
                      [--target "..." | --target-ids ...] (encoder-decoders (bart): --text is the source, the
                      target teacher-forced; --attn-out F.npz holds encoder, decoder and cross;
                      --align-out A.npy [--align-layers all|0,2] [--align-heads all|1,3]: the mean
                      cross-attention [target, source]; --json lists each target token's aligned source token)
                      [--mask causal | padding | window:W | strided:S | global:0,7 | custom:FILE.npy]...
                      [--pad-to N] [--backend cpu|cpu-bf16|reference|opencl|opencl:N] [--attn-out A.npy] [--out H.npy]
                      [--ablate L:H[,L:H]...] (those heads' probabilities times 0 before they weight the values)
                      [--ablate-mean L:H[,L:H]...] (those heads' z replaced by its mean over the positions)
                      [--mask-out M.npy] [--json] [--save-model DIR]
                      [--cache NAME[,NAME|GLOB]... --cache-out F.npz]  named activations (TransformerLens's
                      names: blocks.3.attn.hook_z, blocks.*.hook_resid_post; --list-hooks prints them)
                      [--patch NAME=F.npy[:POSITIONS]]... [--add NAME=F.npy[*ALPHA][:POSITIONS]]...
  attnlab-cli generate [--model DIR] (--text "..." | --ids ...) [--max-new 20]
                      [--greedy | --temperature T --top-k K --top-p P --min-p M --seed S]
                      [--stop TEXT]... [--ignore-eos] [--attn-out A.npy] [--json [--json-top 100]]
                      language models write: one position a step over a KV cache, warped in transformers'
                      order (temperature, top-k, top-p, min-p; greedy by default), the text streamed to
                      stdout; --json gives ids, generated_ids and per step id, token, prob, raw_prob,
                      entropy and top: the warped distribution [[id, p], ...] (its --json-top likeliest,
                      0: all); --attn-out [layers, heads, T, T] of the final sequence
  attnlab-cli bench   [--model DIR] [--layers 6 --dim 512 --heads 8 --ff 2048] [--seq 128]
                      [--mask ...] [--keep-layers none|L,...] [--on-demand] [--backend cpu|opencl|...]
                      [--repeat N] [--json]   (--on-demand: queries and keys kept, each layer's
                      probabilities recomputed once and timed)
  attnlab-cli bench --sgemm [--seq 512]    this machine's SGEMM rate (Eigen, oneDNN)
  attnlab-cli bench --train [--layers 2 --dim 128 --heads 8 --ff 512] [--seq 64] [--batch 32] [--dropout 0.1]
  attnlab-cli bench --analysis [--model DIR] [--seq 128]   rollout, value-norm, grad-attention, head importance
                      against a forward pass (default: 6 layers, 12 heads, d=384, a classifier)
  attnlab-cli train --data FILE.tsv [--val-data FILE.tsv | --val-split 0.1] --out DIR
                      [--config config.json | --layers N --heads H --dim D --ff F --max-len T
                       --tokenizer word|char --positional ... --pooling ... --norm ... --activation ...]
                      [--epochs E] [--batch B] [--lr LR] [--weight-decay W] [--dropout P] [--clip C]
                      [--warmup STEPS] [--cosine] [--seed S] [--vocab-size V] [--min-count N]
                      [--text-column NAME|N] [--label-column NAME|N] [--backend cpu|cpu-bf16|reference]
                      [--init DIR [--freeze-encoder]]   fine-tune DIR's encoder (e.g. a Hugging Face BERT)
  attnlab-cli train --objective lm --preset induction --out DIR   the Train tab's preset (flags override it)
  attnlab-cli train --objective lm --init DIR --data FILE.txt --out OUT [--seq 64] (--steps N | --epochs E)
                      [--batch 8] [--lr 5e-5]   fine-tune a language model folder (GPT-2, Llama, ...) on a text
  attnlab-cli train --objective lm --data FILE.txt --out DIR [--tokenizer char|word|bpe] [--seq 64] [--vocab-size V]
                      [--min-count N] [--arch ...] [--layers 2] [--heads 4] [--dim 64] [--ff 0] (--steps N | --epochs E)
                      a new decoder on a text, its vocabulary learned from it (the last tenth held out); bpe: a
                      byte-level BPE as tokenizers' BpeTrainer learns it (V 1024, N 2), saved as a Hugging Face folder
  attnlab-cli train --objective lm --task induction|copy|reverse|parens|modadd --out DIR [--arch gpt2|llama]
                      [--layers 2] [--heads 4] [--kv-heads K] [--dim 64] [--ff 0] [--task-seq 16] [--task-vocab 64]
                      [--task-p 113] [--task-train-frac 0.3]
                      [--n 20000] (--steps N | --epochs E) [--lr 1e-3] [--warmup S] [--cosine]
                      [--log-every 100] [--eval-every 1] [--hf]   a new decoder on next-token loss (docs/training.md);
                      --hf saves it as a Hugging Face GPT-2 / Llama folder that transformers opens
  attnlab-cli eval    [--model DIR] --data FILE.tsv [--json]
  attnlab-cli predict [--model DIR] --text "..." [--pair "..."] [--json]
  attnlab-cli patch   [--model DIR] --clean "..." --corrupted "..." (--clean-ids / --corrupted-ids)
                      --answer TOK --wrong TOK (or --answer-id N --wrong-id N; classifiers: class names)
                      [--what resid_pre|attn_out|mlp_out|z|pattern] [--method exact|attribution]
                      [--mask ...] [--out F.npy] [--json]
                      activation patching: the share of the clean logit difference each patched
                      activation restores in the corrupted run ([layers, T], or [layers, heads] for z and pattern);
                      attribution: its first-order estimate from one backward pass (Nanda 2023)
  attnlab-cli sae     [--model DIR] --sae DIR (--text "..." | --ids ...) [--top K] [--out F.npy]
                      [--clamp FEATURE=VALUE[:POSITIONS]]... [--json]
                      a sparse autoencoder in SAELens's format (cfg.json, sae_weights.safetensors) at its
                      hook: per token the strongest features, how many are active, the reconstruction
                      error; --out the features [T, d_sae]; --clamp sets features and runs the pass again
                      (the reconstruction error added back), showing the prediction before and after
  attnlab-cli tokenize [--model DIR] (--text "..." [--pair "..."] | --lines FILE)
                      [--stage normalize|pre-tokenize|ids] [--json]   what the model's tokenizer makes of text
  attnlab-cli analyze [--model DIR] (--text "..." | --ids ...) [--pair B] [--mask ...]... --method M
                      [--target C] [--out FILE.npy] [--json]     beyond raw attention, every layer; --target is
                      a class index (classifiers) or a token id (language models), default the prediction:
                      rollout [T, T] (Abnar & Zuidema 2020), value-norm [L, H, T, T] (Kobayashi et al. 2020;
                      the app's value-weighted), grad-attention [T, T] (Chefer et al. 2021; the app's relevance:
                      for the logit of --target, default the prediction), mean-heads [L, T, T], mean-layers [T, T]
                      (attention averaged),
                      head-importance [L, H] (p_target minus p_target with the head ablated, Michel et al. 2019),
                      head-patterns (--json; Clark et al. 2019), logit-lens [2, L, T] (language models:
                      top-1 next-token ids, then probabilities, per layer and position)
  attnlab-cli analyze [--model DIR] --method induction|previous-token|duplicate-token [--seq 50] [--seed 0]
                      [--out F.npy] [--json]   head detectors [L, H] on random tokens repeated twice
                      (Olsson et al. 2022): attention to the token after the first occurrence, to the
                      previous token, to the earlier occurrence
  attnlab-cli analyze [--model DIR] (--text "..." | --ids ...) --method logit-attribution --answer TOK
                      [--wrong TOK] [--out F.npy] [--json]   direct logit attribution [L, H + 1] (pre-norm
                      language models): each head's z_h W_O^h and each MLP's output through the final norm
                      (its scale frozen) dotted with W_U[answer] - W_U[wrong]; --json adds the embedding,
                      the biases, their total and the model's logit difference
  attnlab-cli devices [--json]          backends and OpenCL devices
  attnlab-cli make-data --task negation|first_last --out FILE.tsv [--n 4000] [--seed 1]
  attnlab-cli lm-loss [--model DIR] (--text "..." | --ids 1,2,3) [--grad-out G.safetensors] [--json]
                      a language model's next-token loss, and its gradients in the folder's names
  attnlab-cli export  [--model DIR] (--text "..." [--pair "..."] | --ids ...) [--cross-text ...] [--layer L|all] [--head H|all]
                      [--mask ...]... [--pad-to N] --out FILE.png|svg|pdf|csv|npy|npz (.npz: an attention file)
                      [--width PX --height PX] [--dpi 150] [--colormap viridis] [--title T] [--annotate] [--scale max|0-1]
                      [--hide-special] [--merge-pieces]   (as the app's Display options)
  attnlab-cli export  --attention FILE.npz|FILE.safetensors [--batch B] [--layer L|all] [--head H|all] --out ...
                      attention made elsewhere (transformers' outputs.attentions, a TransformerLens cache):
                      `attentions` [layers, heads, T, S] (or per layer `attentions_0`.., `arr_0`..,
                      `blocks.0.attn.hook_pattern`..), `tokens`, `tokens_b`, `mask` (docs/attention-files.md)
  attnlab-cli analyze --attention FILE [--batch B] --method rollout|mean-heads|mean-layers|head-patterns
                      [--out F.npy] [--json]   the methods that need only the probabilities

model options (instead of --model, build a random model):
  --random-init --seed N --vocab-size V --dim D --heads H --layers L --ff F --max-len T
  [--classes C] [--positional none|sinusoidal|learned|relative|rotary] [--norm post|pre]
  [--activation relu|gelu|gelu_tanh|silu] [--pooling mean|masked_mean|cls] [--tokenizer word|char]

Without --model or --random-init the shipped default model is used. --model also opens an unmodified
Hugging Face folder: model_type bert, distilbert, gpt2, llama, mistral or qwen2 (config.json,
model.safetensors or its shards, tokenizer.json / vocab.txt / vocab.json + merges.txt). For language
models, forward --json adds next_tokens (the 10 likeliest after the last token).
)";

// One command's part of kUsage: its "  attnlab-cli CMD ..." lines and their continuations, and the
// model options for the commands that open a model. Empty for an unknown command.
std::string command_usage(const std::string& cmd) {
  std::istringstream in(kUsage);
  std::string line, out;
  bool inside = false, model_options = false;
  const std::string head = "  attnlab-cli " + cmd + " ", bare = "  attnlab-cli " + cmd;
  while (std::getline(in, line)) {
    if (line.rfind("  attnlab-cli ", 0) == 0)
      inside = line.rfind(head, 0) == 0 || line == bare;
    else if (line.empty() || line[0] != ' ')
      inside = false;
    if (line.rfind("model options", 0) == 0 && out.find("[--model DIR]") != std::string::npos) model_options = true;
    if (inside || model_options) out += line + "\n";
    if (model_options && line.empty()) model_options = false;
  }
  return out.empty() ? out : "usage:\n" + out;
}

// s cut or padded to n characters (code points, so ␣ counts as one), for plain-text tables.
std::string pad(const std::string& s, size_t n) {
  std::string out;
  size_t chars = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool lead = (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
    if (lead && chars == n) break;
    chars += lead;
    out += s[i];
  }
  return out + std::string(n - chars, ' ');
}

// Analysis methods (engine/analysis/methods.h) and the logit lens, one input, headless.
// --answer / --wrong (resolve_answer: a class name or one token), or --answer-id / --wrong-id.
int answer_from_flags(const Args& a, const Model& model, const std::string& which) {
  if (a.has("--" + which + "-id")) return a.get_int("--" + which + "-id", -1);
  if (!a.has("--" + which)) throw Error("this needs --" + which + " TOKEN (or --" + which + "-id N)");
  return resolve_answer(model, a.get("--" + which), "--" + which);
}

// Clark et al.'s head patterns of a result as JSON ([layer][head] objects), printed as a table
// too when `print`.
json head_patterns_json(const ForwardResult& r, bool print) {
  const std::vector<std::string>& labels = r.tokens;
  const auto pats = head_patterns(r);
  json layers = json::array();
  for (size_t l = 0; l < pats.size(); ++l) {
    json heads = json::array();
    for (size_t h = 0; h < pats[l].size(); ++h) {
      const HeadPattern& p = pats[l][h];
      heads.push_back({{"prev", p.prev},
                       {"next", p.next},
                       {"self", p.self},
                       {"first", p.first},
                       {"sep", p.sep},
                       {"punct", p.punct},
                       {"entropy", p.entropy},
                       {"induction", p.induction},
                       {"focus", p.focus},
                       {"focus_share", p.focus_share},
                       {"label", p.label}});
      if (print)
        std::printf(
            "layer %zu head %zu: prev %.2f next %.2f self %.2f first %.2f sep %.2f punct %.2f induction %.2f "
            "entropy %.2f%s%s\n",
            l, h, p.prev, p.next, p.self, p.first, p.sep, p.punct, p.induction, p.entropy,
            p.label.empty() ? "" : "  pattern: ",
            p.label == "token" ? ("-> " + labels[static_cast<size_t>(p.focus)]).c_str() : p.label.c_str());
    }
    layers.push_back(heads);
  }
  return layers;
}

// analyze --attention FILE: the methods that need only the probabilities, on a file made elsewhere.
int analyze_attention_file(const Args& a, const MethodRow& row) {
  const ForwardResult r = result_from_attention_flag(a, "analyze");
  json j;
  j["method"] = row.name;
  j["labels"] = r.tokens;
  if (row.id == MethodId::HeadPatterns) {
    if (r.is_cross()) throw Error("head-patterns reads self-attention; the file holds cross attention");
    if (a.has("--out")) throw Error("--out: head-patterns is a table; use --json");
    j["head_patterns"] = head_patterns_json(r, !a.has("--json"));
    if (a.has("--json")) std::cout << j.dump(2) << "\n";
    return 0;
  }
  const Tensor m = probability_map(row.id, r);  // rollout, mean-heads, mean-layers; else an Error
  if (a.has("--out")) save_npy(a.get("--out"), m);
  j["shape"] = m.shape;
  if (m.shape.size() == 2) {
    std::vector<std::vector<float>> rows;
    for (int64_t i = 0; i < m.dim(0); ++i) rows.emplace_back(m.ptr() + i * m.dim(1), m.ptr() + (i + 1) * m.dim(1));
    j[row.id == MethodId::Rollout ? "rollout" : "mean"] = rows;
  }
  if (a.has("--json"))
    std::cout << j.dump(2) << "\n";
  else if (!a.has("--out"))
    std::cout << row.name << ": " << shape_str(m.shape) << "; write it with --out FILE.npy or see it with --json\n";
  return 0;
}

int cmd_analyze(const std::vector<std::string>& argv, const std::string& argv0) {
  const Args a(
      argv,
      with(kModelValued, {"--text", "--ids", "--pair", "--truncation", "--pad-to", "--method", "--out", "--target",
                          "--seq", "--answer", "--wrong", "--answer-id", "--wrong-id", "--attention", "--batch"}),
      {"--json", "--random-init"});
  if (!a.has("--method")) throw Error("analyze needs --method (" + method_names() + ")");
  // the table's names and aliases (the app's "relevance" is grad-attention, and so on)
  const MethodRow* row = nullptr;
  try {
    row = &find_method(a.get("--method"));
  } catch (const Error& e) {
    throw Error(std::string("--method: ") + e.what());
  }
  const std::string method = row->name;
  if (a.has("--out") && !ends_with(a.get("--out"), ".npy"))
    throw Error("--out: analysis results are written as .npy, got \"" + a.get("--out") + "\"");
  if (a.has("--batch") && !a.has("--attention")) throw Error("--batch chooses a sequence of an --attention file");
  if (a.has("--attention")) return analyze_attention_file(a, *row);
  const int target = a.has("--target") ? a.get_int("--target", -1) : -1;
  if (a.has("--target") && target < 0)
    throw Error("--target: a class index (classifiers) or a token id (language models), 0 or more");
  const Model model = resolve_model(a, argv0);
  if (row->id == MethodId::Induction || row->id == MethodId::PreviousToken || row->id == MethodId::DuplicateToken) {
    // head detectors read their own input: a random sequence repeated twice (detectors.h)
    if (a.has("--text") || a.has("--ids"))
      throw Error("--method " + method + " reads its own input (a random sequence repeated twice: --seq N --seed S)");
    const HeadDetector kind = row->id == MethodId::Induction       ? HeadDetector::Induction
                              : row->id == MethodId::PreviousToken ? HeadDetector::PreviousToken
                                                                   : HeadDetector::DuplicateToken;
    // 50 as TransformerLens, or as many as the model's positions hold twice
    const int seq = a.get_int("--seq", std::max(1, std::min(50, model.config.max_len / 2)));
    const int seed = a.get_int("--seed", 0);
    auto backend = make_backend(a.get("--backend", "cpu"));
    const Tensor scores = detect_heads(model, *backend, kind, seq, static_cast<uint64_t>(seed));
    if (a.has("--out")) save_npy(a.get("--out"), scores);
    const int L = static_cast<int>(scores.dim(0)), H = static_cast<int>(scores.dim(1));
    if (a.has("--json")) {
      json j;
      j["method"] = method, j["seq"] = seq, j["seed"] = seed, j["shape"] = scores.shape;
      j["ids"] = repeated_random_tokens(model, seq, static_cast<uint64_t>(seed));  // the input it read
      j["scores"] = std::vector<float>(scores.data.begin(), scores.data.end());
      std::cout << j.dump(2) << "\n";
      return 0;
    }
    std::cout << row->value << "s (0 to 1) on " << seq << " random tokens repeated twice (seed " << seed
              << "): rows = layers, columns = heads\n";
    for (int l = 0; l < L; ++l) {
      for (int h = 0; h < H; ++h) std::printf(" %6.3f", scores.at(l, h));
      std::printf("\n");
    }
    return 0;
  }
  const ForwardRequest req = request_from_flags(a, model, "analyze");
  const std::vector<std::string>& labels = req.tokens;
  auto backend = make_backend(a.get("--backend", "cpu"));
  const int T = static_cast<int>(req.ids.size());
  auto save = [&](const Tensor& t) {
    if (a.has("--out")) save_npy(a.get("--out"), t);
  };
  json j;
  j["method"] = method;
  j["labels"] = labels;
  j["ids"] = req.ids;
  if (row->id == MethodId::Rollout || row->id == MethodId::ValueNorm || row->id == MethodId::GradAttention ||
      row->id == MethodId::MeanHeads || row->id == MethodId::MeanLayers) {
    const bool per_token = std::string(row->shape) == "[T, T]";
    int used = -1;
    Tensor r = compute_method_map(row->id, model, *backend, req, target, &used);
    if (method == "grad-attention") {
      j["target"] = used;
      j["readout_relevance"] = readout_relevance(model, req.ids, r);  // what the text output lists
      if (!a.has("--json") && !a.has("--out"))
        std::cout << "relevance for the logit of "
                  << (model.config.num_classes == 0
                          ? "next token \"" + model.readable_token(used) + "\" (id " + std::to_string(used) + ")"
                          : "class " + std::to_string(used) +
                                (used < static_cast<int>(model.config.labels.size())
                                     ? " (" + model.config.labels[static_cast<size_t>(used)] + ")"
                                     : ""))
                  << "\n";
    }
    save(r);
    j["shape"] = r.shape;
    if (!a.has("--json") && !a.has("--out")) {
      if (method == "grad-attention") {  // the readout's row: which tokens the prediction rests on
        const std::vector<float> rel = readout_relevance(model, req.ids, r);
        std::cout << "relevance of each token to that logit, read from the "
                  << (model.config.num_classes > 0 ? "pooled rows" : "last position's row")
                  << " (beyond each token's own identity term):\n";
        for (int j = 0; j < T; ++j) {
          char v[32];
          std::snprintf(v, sizeof v, "%.4f", rel[static_cast<size_t>(j)]);
          std::cout << "  " << pad(labels[static_cast<size_t>(j)], 18) << " " << v << "\n";
        }
      } else if (per_token) {  // [T, T]: what each token draws on most
        for (int i = 0; i < T; ++i) {
          int best = 0;
          for (int k = 1; k < T; ++k)
            if (r.at(i, k) > r.at(i, best)) best = k;
          std::cout << pad(labels[static_cast<size_t>(i)], 12) << " draws most on " << labels[static_cast<size_t>(best)]
                    << " (" << r.at(i, best) << ")\n";
        }
      } else {
        std::cout << method << ": " << shape_str(r.shape) << "; write it with --out FILE.npy\n";
      }
    }
    if (a.has("--json") && per_token) {
      std::vector<std::vector<float>> rows;
      for (int i = 0; i < T; ++i)
        rows.emplace_back(r.ptr() + static_cast<size_t>(i) * T, r.ptr() + static_cast<size_t>(i + 1) * T);
      j[method == "rollout" ? "rollout" : method == "grad-attention" ? "relevance" : "mean"] = rows;
    }
  } else if (row->id == MethodId::LogitAttribution) {
    const int answer = answer_from_flags(a, model, "answer");
    const int wrong = a.has("--wrong") || a.has("--wrong-id") ? answer_from_flags(a, model, "wrong") : -1;
    const LogitAttribution d = direct_logit_attribution(model, *backend, req, answer, wrong);
    save(d.parts);
    j["shape"] = d.parts.shape;
    j["parts"] = std::vector<float>(d.parts.data.begin(), d.parts.data.end());
    j["embedding"] = d.embedding, j["biases"] = d.biases, j["total"] = d.total, j["logit_diff"] = d.logit_diff;
    if (d.before_cap) j["logit_diff_before_softcap"] = true;
    j["answer"] = answer, j["wrong"] = wrong;
    if (!a.has("--json")) {
      const int L = static_cast<int>(d.parts.dim(0)), H = static_cast<int>(d.parts.dim(1)) - 1;
      std::cout << "direct contribution to logit[" << model.readable_token(answer) << "]"
                << (wrong >= 0 ? " - logit[" + model.readable_token(wrong) + "]" : std::string())
                << " at the last position: rows = layers, columns = heads, then the MLP\n";
      for (int l = 0; l < L; ++l) {
        for (int h = 0; h <= H; ++h) std::printf(" %+9.4f", d.parts.at(l, h));
        std::printf("\n");
      }
      std::printf("embedding %+.4f, biases %+.4f: total %+.4f (the model's logit difference%s %+.4f)\n", d.embedding,
                  d.biases, d.total, d.before_cap ? " before its soft cap" : "", d.logit_diff);
    }
  } else if (method == "head-importance") {
    const Tensor imp = head_importance(model, *backend, req, target);
    save(imp);
    j["shape"] = imp.shape;
    std::vector<std::vector<float>> rows;
    for (int l = 0; l < imp.dim(0); ++l)
      rows.emplace_back(imp.ptr() + static_cast<size_t>(l) * imp.dim(1),
                        imp.ptr() + static_cast<size_t>(l + 1) * imp.dim(1));
    j["importance"] = rows;
    if (!a.has("--json")) {
      std::cout << "p(target) with the head ablated subtracted from p(target): rows = layers, columns = heads\n";
      for (const auto& row : rows) {
        for (float v : row) std::printf(" %+10.3g", v);  // confident models: tiny drops
        std::printf("\n");
      }
    }
  } else if (method == "head-patterns") {
    ForwardRequest full = req;
    const ForwardResult r = run_forward(model, *backend, full);
    const json layers = head_patterns_json(r, !a.has("--json"));
    j["head_patterns"] = layers;
    if (a.has("--out")) throw Error("--out: head-patterns is a table; use --json");
  } else {  // logit-lens
    const LogitLens lens = logit_lens(model, *backend, req.ids);
    const int L = lens.layers;
    if (a.has("--out")) {
      Tensor out({2, L, T});
      for (int k = 0; k < L * T; ++k) {
        out.data[static_cast<size_t>(k)] = static_cast<float>(lens.top_id[static_cast<size_t>(k)]);
        out.data[static_cast<size_t>(L * T + k)] = lens.top_prob[static_cast<size_t>(k)];
      }
      save(out);
    }
    json layers = json::array();
    for (int l = 0; l < L; ++l) {
      json row = json::array();
      for (int t = 0; t < T; ++t) {
        const size_t k = static_cast<size_t>(l * T + t);
        row.push_back({{"id", lens.top_id[k]},
                       {"token", model.token_name(lens.top_id[k])},
                       {"label", model.readable_token(lens.top_id[k])},
                       {"probability", lens.top_prob[k]}});
      }
      layers.push_back(row);
    }
    j["logit_lens"] = layers;
    if (!a.has("--json") && !a.has("--out")) {  // a table: one row per input token, one column per layer
      std::cout << pad("after token", 14);
      for (int l = 0; l < L; ++l) std::cout << " | " << pad("layer " + std::to_string(l), 17);
      std::cout << "\n";
      for (int t = 0; t < T; ++t) {
        char pos[16], prob[16];
        std::snprintf(pos, sizeof pos, "%3d ", t);
        std::cout << pos << pad(labels[static_cast<size_t>(t)], 10);
        for (int l = 0; l < L; ++l) {
          const size_t k = static_cast<size_t>(l * T + t);
          std::snprintf(prob, sizeof prob, " %.3g", lens.top_prob[k]);
          std::cout << " | " << pad(model.readable_token(lens.top_id[k]), 12) << prob;
        }
        std::cout << "\n";
      }
    }
  }
  if (a.has("--json"))
    std::cout << j.dump(2) << "\n";
  else if (a.has("--out"))
    std::cout << "wrote " << a.get("--out") << "\n";
  return 0;
}

// What the model's tokenizer makes of text, stage by stage (the Hugging Face cross-check drives
// this over every code point with --lines).
int cmd_patch(const std::vector<std::string>& argv, const std::string& argv0) {
  const Args a(argv,
               with(kModelValued, {"--clean", "--clean-ids", "--corrupted", "--corrupted-ids", "--answer", "--wrong",
                                   "--answer-id", "--wrong-id", "--what", "--method", "--out"}),
               {"--json", "--random-init"});
  const Model model = resolve_model(a, argv0);
  const PreparedInput clean = input_from_flags(a, model, "--clean", "--clean-ids", 0);
  const PreparedInput corrupted = input_from_flags(a, model, "--corrupted", "--corrupted-ids", 0);
  if (clean.ids.empty() || corrupted.ids.empty())
    throw Error("patch needs --clean \"...\" and --corrupted \"...\" (or --clean-ids / --corrupted-ids)");
  const int answer = answer_from_flags(a, model, "answer"), wrong = answer_from_flags(a, model, "wrong");
  const PatchTarget what = parse_patch_target(a.get("--what", "resid_pre"));
  const std::string method = a.get("--method", "exact");
  if (method != "exact" && method != "attribution")
    throw Error("--method: expected exact (activation patching) or attribution (attribution patching), got \"" +
                method + "\"");
  const bool exact = method == "exact";
  ForwardRequest rc, rk;
  rc.ids = clean.ids, rc.tokens = clean.tokens, rc.token_types = clean.token_types;
  rk.ids = corrupted.ids, rk.tokens = corrupted.tokens, rk.token_types = corrupted.token_types;
  rc.mask = rk.mask = mask_from_flags(a);
  auto backend = make_backend(a.get("--backend", "cpu"));
  const auto t0 = std::chrono::steady_clock::now();
  const PatchResult p = exact ? activation_patching(model, *backend, rc, rk, answer, wrong, what)
                              : attribution_patching(model, *backend, rc, rk, answer, wrong, what);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (a.has("--out")) save_npy(a.get("--out"), p.values);
  const int L = static_cast<int>(p.values.dim(0)), C = static_cast<int>(p.values.dim(1));
  const bool heads = what == PatchTarget::Z || what == PatchTarget::Pattern;
  if (a.has("--json")) {
    json j;
    j["what"] = a.get("--what", "resid_pre");
    j["method"] = method;
    j["shape"] = p.values.shape;
    j["clean_logit_diff"] = p.clean;
    j["corrupted_logit_diff"] = p.corrupted;
    j["answer"] = answer, j["wrong"] = wrong;
    j["clean_tokens"] = clean.tokens, j["corrupted_tokens"] = corrupted.tokens;
    j["values"] = std::vector<float>(p.values.data.begin(), p.values.data.end());
    j["millis"] = ms;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << "logit difference: clean " << p.clean << ", corrupted " << p.corrupted << "; restored share when "
            << (heads ? "one head's " + a.get("--what") : "one position's " + a.get("--what", "resid_pre"))
            << " is patched in (1 = all)" << (exact ? "" : ", estimated to first order (attribution patching)") << ":\n"
            << pad("", 9);
  for (int j = 0; j < C; ++j)
    std::cout << " " << pad(heads ? "head " + std::to_string(j) : clean.tokens[static_cast<size_t>(j)], 8);
  std::cout << "\n";
  for (int l = 0; l < L; ++l) {
    std::cout << pad("layer " + std::to_string(l), 9);
    for (int j = 0; j < C; ++j) {
      char v[32];
      std::snprintf(v, sizeof v, "%8.3f", p.values.at(l, j));
      std::cout << " " << v;
    }
    std::cout << "\n";
  }
  if (exact)
    std::cout << L * C << " patched runs in " << ms << " ms\n";
  else
    std::cout << "one clean forward, one corrupted forward and backward in " << ms << " ms\n";
  return 0;
}

int cmd_tokenize(const std::vector<std::string>& argv, const std::string& argv0) {
  const Args a(argv, with(kModelValued, {"--text", "--pair", "--truncation", "--lines", "--stage"}),
               {"--json", "--random-init"});
  const Model model = resolve_model(a, argv0);
  const std::string stage = a.get("--stage", "ids");
  if (stage != "normalize" && stage != "pre-tokenize" && stage != "ids")
    throw Error("--stage: expected normalize, pre-tokenize or ids, got \"" + stage + "\"");
  if (stage != "ids" && !model.tokenizer)
    throw Error("--stage " + stage + " needs a model with its own tokenizer (a Hugging Face folder)");
  if (a.has("--text") == a.has("--lines")) throw Error("tokenize needs --text \"...\" or --lines FILE");
  std::vector<std::string> texts;
  if (a.has("--text")) {
    texts.push_back(a.get("--text"));
  } else {
    const std::string bytes = read_file_bytes(a.get("--lines"));
    size_t start = 0;
    while (start < bytes.size()) {
      size_t end = bytes.find('\n', start);
      if (end == std::string::npos) end = bytes.size();
      texts.push_back(bytes.substr(start, end - start));
      start = end + 1;
    }
  }
  for (size_t i = 0; i < texts.size(); ++i) {
    json j;
    try {
      if (stage == "normalize") {
        j = model.tokenizer->normalize(texts[i]);
      } else if (stage == "pre-tokenize") {
        j = model.tokenizer->pre_tokenize(model.tokenizer->normalize(texts[i]));
      } else {
        InputOptions o;
        o.overflow = Overflow::Keep;  // tokenizing is not a pass: report every token
        o.what = texts.size() > 1 ? "line " + std::to_string(i + 1) : "text";
        if (a.has("--pair")) o.pair = a.get("--pair");
        if (a.has("--truncation")) o.truncation = parse_truncation(a.get("--truncation"));
        const PreparedInput in = prepare_text(model, texts[i], o);
        std::vector<std::string> pieces = in.tokens;  // a Hugging Face tokenizer's own strings ("Ġthe")
        if (model.is_hf())
          for (size_t t = 0; t < in.ids.size(); ++t) pieces[t] = model.token_name(in.ids[t]);
        j = {{"tokens", pieces},      {"labels", in.tokens},   {"ids", in.ids},     {"token_type_ids", in.token_types},
             {"special", in.special}, {"unknown", in.unknown}, {"words", in.words}, {"notices", in.notices}};
        if (model.tokenizer) j["decoded"] = model.tokenizer->decode(in.ids);  // the ids back to text
      }
    } catch (const Error& e) {
      if (texts.size() == 1) throw;
      j = {{"error", e.what()}};
    }
    if (a.has("--json") || texts.size() > 1) {
      std::cout << j.dump() << "\n";
    } else if (j.is_object()) {
      for (size_t k = 0; k < j["tokens"].size(); ++k)
        std::cout << (k ? " " : "") << j["labels"][k].get<std::string>() << "("
                  << (j["unknown"][k].get<int>() ? "[UNK] " : "") << j["ids"][k].get<int>() << ")";
      std::cout << "\n";
    } else {
      std::cout << j.dump() << "\n";
    }
  }
  return 0;
}

}  // namespace
}  // namespace attnlab::cli

int main(int argc, char** argv) {
  using namespace attnlab::cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && (args[0] == "--version" || args[0] == "-V")) {
    const std::string dnnl = attnlab::onednn_version();
    std::cout << "attnlab-cli " << ATTNLAB_VERSION << " (Eigen " << attnlab::eigen_version()
              << (dnnl.empty() ? "" : ", oneDNN " + dnnl) << ")\n";
    return 0;
  }
  // "help CMD", "CMD --help", "CMD -h": that command's lines of the usage (else all of it)
  if (args.size() >= 2 && args[0] == "help") std::swap(args[0], args[1]), args[1] = "--help";
  if (args.size() >= 2 && (args[1] == "--help" || args[1] == "-h")) {
    const std::string usage = command_usage(args[0]);
    if (!usage.empty()) {
      std::cout << usage;
      return 0;
    }
  }
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    (args.empty() ? std::cerr : std::cout) << kUsage;  // no command: a usage error, on stderr
    return args.empty() ? 2 : 0;
  }
  const std::string cmd = args[0];
  args.erase(args.begin());
  // The commands, one row each: name and handler (the usage text above documents them).
  using Handler = int (*)(const std::vector<std::string>&, const std::string& argv0);
  static const struct {
    const char* name;
    Handler run;
  } kCommands[] = {
      {"forward", cmd_forward},
      {"generate", cmd_generate},
      {"tokenize", cmd_tokenize},
      {"analyze", cmd_analyze},
      {"patch", cmd_patch},
      {"sae", cmd_sae},
      {"train", [](const std::vector<std::string>& a, const std::string&) { return cmd_train(a); }},
      {"eval", cmd_eval},
      {"predict", cmd_predict},
#ifdef ATTNLAB_WITH_EXPORT
      {"export", cmd_export},
#else
      {"export",
       [](const std::vector<std::string>&, const std::string&) -> int {
         throw attnlab::Error(
             "this attnlab-cli was built without the GUI (ATTNLAB_BUILD_GUI=OFF): export is unavailable");
       }},
#endif
      {"make-data", [](const std::vector<std::string>& a, const std::string&) { return cmd_make_data(a); }},
      {"lm-loss", cmd_lm_loss},
      {"devices", [](const std::vector<std::string>& a, const std::string&) { return cmd_devices(a); }},
      {"bench", cmd_bench},
  };
  try {
    std::string names;
    for (const auto& c : kCommands) {
      if (cmd == c.name) return c.run(args, argv[0]);
      names += names.empty() ? c.name : std::string(", ") + c.name;
    }
    throw attnlab::Error("unknown command \"" + cmd + "\" (expected " + names + "; see --help)");
  } catch (const attnlab::Error& e) {
    std::cerr << "attnlab-cli " << cmd << ": error: " << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "attnlab-cli " << cmd << ": error: out of memory\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "attnlab-cli " << cmd << ": error: " << e.what() << "\n";
    return 3;
  }
}
