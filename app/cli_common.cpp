// Helpers shared by attnlab-cli's subcommands: model selection (folder, default, random init),
// config flags, input ids and mask flags.
#include "app/cli_common.h"

#include <filesystem>

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
  if (a.has("--pooling")) c.pooling = parse_pooling(a.get("--pooling"));
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

// Ids for --text / --ids (and the --cross- variants).
std::vector<int> input_ids(const Args& a, const Model& m, const std::string& text_flag, const std::string& ids_flag,
                           std::vector<std::string>* tokens) {
  if (a.has(text_flag) && a.has(ids_flag)) throw Error(text_flag + " and " + ids_flag + " are exclusive");
  Tokenized t;
  if (a.has(text_flag)) {
    const std::string text = a.get(text_flag);
    t = tokenize(text, m.config, m.vocab);
    if (t.ids.empty()) throw Error(text_flag + ": the text has no tokens");
  } else if (a.has(ids_flag)) {
    t = from_ids(parse_int_list(a.get(ids_flag), ids_flag), m.config, m.vocab);
  } else {
    return {};
  }
  if (tokens) *tokens = t.tokens;
  return t.ids;
}

MaskSpec mask_from_flags(const Args& a) {
  MaskSpec spec;
  for (const auto& m : a.all("--mask")) add_mask_arg(spec, m);
  return spec;
}

std::vector<std::string> display_tokens(const Model& m, const std::vector<int>& ids, std::vector<std::string> tokens) {
  for (size_t i = tokens.size(); i < ids.size(); ++i) tokens.push_back(m.vocab.token(ids[i]));
  return tokens;
}

ForwardRequest request_from_flags(const Args& a, const Model& model, const std::string& cmd,
                                  std::vector<std::string>* tokens, std::vector<std::string>* cross_tokens) {
  ForwardRequest req;
  req.ids = input_ids(a, model, "--text", "--ids", tokens);
  if (req.ids.empty()) throw Error(cmd + " needs --text \"...\" or --ids 1,2,3");
  req.cross_ids = input_ids(a, model, "--cross-text", "--cross-ids", cross_tokens);
  if (a.has("--pad-to")) {
    const int n = a.get_int("--pad-to", 0);
    if (n <= 0) throw Error("--pad-to: expected a positive length");
    req.ids = pad_ids(model, req.ids, n);
    if (!req.cross_ids.empty()) req.cross_ids = pad_ids(model, req.cross_ids, n);
  }
  req.mask = mask_from_flags(a);
  return req;
}

}  // namespace attnlab::cli
