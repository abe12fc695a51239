// Helpers shared by attnlab-cli's subcommands: model selection (folder, default, random init),
// config flags, input ids and mask flags.
#include "app/cli_common.h"
#include "engine/formats/npy.h"
#include "engine/core/memory.h"
#include "engine/formats/attention_file.h"

#include <cstdlib>

#include <cmath>

#include <fstream>
#include <sstream>

#include <filesystem>
#include <iostream>

#include "app/default_model.h"

namespace attnlab::cli {

extern const std::set<std::string> kModelValued;
const std::set<std::string> kModelValued = {
    "--model",   "--seed",       "--vocab-size", "--dim",        "--heads",   "--layers",    "--ff",      "--max-len",
    "--classes", "--positional", "--norm",       "--activation", "--pooling", "--tokenizer", "--backend", "--mask"};

std::set<std::string> with(std::set<std::string> a, const std::set<std::string>& b) {
  a.insert(b.begin(), b.end());
  return a;
}

ModelConfig config_from_flags(const Args& a, const ModelConfig& defaults) {
  ModelConfig c = defaults;
  c.vocab_size = a.get_int("--vocab-size", c.vocab_size);
  c.embed_size = a.get_int("--dim", c.embed_size);
  c.num_heads = a.get_int("--heads", c.num_heads);
  c.num_layers = a.get_int("--layers", c.num_layers);
  c.ff_dim = a.get_int("--ff", c.ff_dim);
  c.max_len = a.get_int("--max-len", c.max_len);
  c.num_classes = a.get_int("--classes", c.num_classes);
  if (a.has("--positional")) c.positional = parse_positional(a.get("--positional"));
  if (a.has("--norm")) c.norm = parse_norm(a.get("--norm"));
  if (a.has("--activation")) c.activation = parse_activation(a.get("--activation"));
  if (a.has("--pooling")) {
    c.pooling = parse_pooling(a.get("--pooling"));
    c.add_cls = c.pooling == Pooling::Cls;  // a new model that pools on [CLS] gets a tokenizer that adds it
  }
  if (a.has("--tokenizer")) c.tokenizer = parse_tokenizer(a.get("--tokenizer"));
  c.labels.clear();
  for (int k = 0; k < c.num_classes; ++k) c.labels.push_back("class_" + std::to_string(k));
  c.validate();
  return c;
}

Model random_model(const ModelConfig& c, uint64_t seed) {
  Model m;
  m.config = c;
  m.weights = random_weights(c, seed);
  m.vocab = default_vocab(c);
  m.source = "random-init (seed " + std::to_string(seed) + ")";
  return m;
}

Model resolve_model(const Args& a, const std::string& argv0) {
  if (a.has("--random-init")) {
    ModelConfig d;
    d.vocab_size = 128, d.embed_size = 64, d.num_heads = 8, d.num_layers = 2, d.ff_dim = 128, d.max_len = 512;
    d.tokenizer = TokenizerKind::Char;
    d.positional = Positional::Sinusoidal;
    return random_model(config_from_flags(a, d), static_cast<uint64_t>(a.get_int("--seed", 0)));
  }
  const std::string dir = a.has("--model") ? a.get("--model") : default_model_dir(argv0);
  if (!a.has("--model") && !std::filesystem::exists(dir))
    throw Error("no --model given and no default model at " + dir + " (pass --model DIR or --random-init)");
  return load_model(dir);
}

// "--text: 1 of 5 tokens not in the vocabulary, read as [UNK]: "hello"", or empty.
std::string unknown_note(const PreparedInput& in, const std::string& flag) {
  std::vector<std::string> words;
  for (size_t k = 0; k < in.unknown.size() && k < in.tokens.size(); ++k)
    if (in.unknown[k]) words.push_back("\"" + in.tokens[k] + "\"");
  if (words.empty()) return {};
  std::string list;
  for (size_t k = 0; k < words.size() && k < 8; ++k) list += (k ? ", " : "") + words[k];
  if (words.size() > 8) list += ", ...";
  return flag + ": " + std::to_string(words.size()) + " of " + std::to_string(in.ids.size()) +
         (in.ids.size() == 1 ? " token" : " tokens") + " not in the vocabulary, read as [UNK]: " + list;
}

// The input of --text / --ids (and the --cross- variants): the engine's input preparation, with
// more tokens than max_len an error (a silent cut would change a user's numbers). Empty when
// neither flag is given.
PreparedInput input_from_flags(const Args& a, const Model& m, const std::string& text_flag, const std::string& ids_flag,
                               int pad_to) {
  if (a.has(text_flag) && a.has(ids_flag)) throw Error(text_flag + " and " + ids_flag + " are exclusive");
  InputOptions o;
  o.overflow = Overflow::Error;
  o.pad_to = pad_to;
  o.what = text_flag.substr(2);
  if (text_flag == "--text" && a.has("--pair")) {
    if (!a.has(text_flag)) throw Error("--pair needs --text (sentence A)");
    o.pair = a.get("--pair");
  }
  if (a.has("--truncation")) o.truncation = parse_truncation(a.get("--truncation"));
  if (a.has(text_flag)) {
    PreparedInput in = prepare_text(m, a.get(text_flag), o);
    if (in.ids.empty()) throw Error(text_flag + ": the text has no tokens");
    if (const std::string note = unknown_note(in, text_flag); !note.empty()) std::cerr << "warning: " << note << "\n";
    for (const std::string& n : in.notices) std::cerr << "note: " << n << "\n";  // what --truncation cut
    return in;
  }
  if (a.has(ids_flag)) return prepare_ids(m, parse_int_list(a.get(ids_flag), ids_flag), o);
  return {};
}

MaskSpec mask_from_flags(const Args& a) {
  MaskSpec spec;
  for (const auto& m : a.all("--mask")) add_mask_arg(spec, m);
  return spec;
}

HookSpec hooks_from_flags(const Args& a) {
  HookSpec spec;
  for (const std::string& list : a.all("--cache")) {
    std::stringstream ss(list);
    for (std::string name; std::getline(ss, name, ',');)
      if (!name.empty()) spec.cache.push_back(name);
  }
  for (const char* flag : {"--patch", "--add"}) {
    const bool add = std::string(flag) == "--add";
    for (const std::string& arg : a.all(flag)) {
      const size_t eq = arg.find('=');
      if (eq == std::string::npos || eq == 0)
        throw Error(std::string(flag) + ": expected NAME=FILE.npy" + (add ? "[*ALPHA]" : "") + "[:POSITIONS], got \"" +
                    arg + "\"");
      HookEdit e;
      e.kind = add ? HookEdit::Kind::Add : HookEdit::Kind::Replace;
      e.name = arg.substr(0, eq);
      std::string file = arg.substr(eq + 1);
      // ":1,4" at the end: positions (a path may hold ':' elsewhere)
      if (const size_t colon = file.rfind(':'); colon != std::string::npos && colon + 1 < file.size() &&
                                                file.find_first_not_of("0123456789,", colon + 1) == std::string::npos) {
        e.positions = parse_int_list(file.substr(colon + 1), flag);
        file = file.substr(0, colon);
      }
      if (add)
        if (const size_t star = file.rfind('*'); star != std::string::npos) {
          char* end = nullptr;
          const std::string alpha = file.substr(star + 1);
          e.alpha = std::strtof(alpha.c_str(), &end);
          if (alpha.empty() || *end || !std::isfinite(e.alpha))
            throw Error(std::string(flag) + ": \"" + alpha + "\" after '*' is not a number");
          file = file.substr(0, star);
        }
      if (const size_t colon = file.rfind(':');
          colon != std::string::npos && !std::ifstream(file).good() && std::ifstream(file.substr(0, colon)).good())
        throw Error(std::string(flag) + ": \"" + file.substr(colon + 1) +
                    "\" after ':' is not a list of positions (numbers separated by commas, e.g. :1,4)");
      e.value = load_npy(file).tensor;
      spec.edits.push_back(std::move(e));
    }
  }
  return spec;
}

ForwardRequest request_from_flags(const Args& a, const Model& model, const std::string& cmd,
                                  std::pair<PreparedInput, PreparedInput>* prepared) {
  int pad_to = 0;
  if (a.has("--pad-to")) {
    pad_to = a.get_int("--pad-to", 0);
    if (pad_to <= 0) throw Error("--pad-to: expected a positive length");
  }
  ForwardRequest req;
  const PreparedInput in = input_from_flags(a, model, "--text", "--ids", pad_to);
  if (in.ids.empty()) throw Error(cmd + " needs --text \"...\" or --ids 1,2,3");
  req.ids = in.ids, req.tokens = in.tokens, req.token_types = in.token_types;
  const PreparedInput cross = input_from_flags(a, model, "--cross-text", "--cross-ids", pad_to);
  req.cross_ids = cross.ids, req.cross_tokens = cross.tokens, req.cross_token_types = cross.token_types;
  if (prepared) *prepared = {in, cross};
  req.mask = mask_from_flags(a);
  return req;
}

ForwardResult result_from_attention_flag(const Args& a, const std::string& cmd) {
  for (const std::string& flag :
       with(kModelValued, {"--random-init", "--text", "--ids", "--pair", "--cross-text", "--cross-ids", "--pad-to",
                           "--truncation", "--target", "--seq", "--answer", "--wrong", "--answer-id", "--wrong-id"}))
    if (a.has(flag))
      throw Error(std::string(flag) +
                  " does not apply to --attention: the file brings its own probabilities and tokens");
  const int batch = a.has("--batch") ? a.get_int("--batch", 0) : -1;
  if (a.has("--batch") && batch < 0) throw Error("--batch: a sequence of the file's batch, 0 or more");
  AttentionFile file = load_attention_file(a.get("--attention"), batch, available_bytes());
  for (const auto& w : file.warnings) std::cerr << "attnlab-cli " << cmd << ": warning: " << w << "\n";
  ForwardResult r = attention_result(std::move(file));  // the layers moved, not copied
  r.warnings.clear();                                   // said above
  return r;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace attnlab::cli
