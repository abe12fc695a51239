// Saving Hugging Face folders (see hf_model.h): a model's weights under its folder's names
// (hf_tensors), a language model made here in GPT-2's or Llama's form (as_hf_language_model, with a
// tokenizer.json that splits as the word tokenizer), and the folder itself (write_hf_folder).
#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "engine/core/io_util.h"
#include "engine/model/hf_model.h"

namespace attnlab {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// One parameter into its stored tensor: whole, a block of rows (c_attn, qkv_proj, gate_up_proj) or,
// transposed, a block of columns (GPT-2's Conv1D stores [in, out]).
void put_stored(TensorMap& tensors, const LayoutName& n, const std::string& name, const Tensor& t) {
  if (!n.transposed && n.rows < 0) {
    tensors[name] = t;
    return;
  }
  Tensor& dst = tensors[name];
  if (dst.shape != n.stored_shape) dst = Tensor(n.stored_shape);
  if (n.transposed) {
    const int64_t R = t.shape[0], C = t.shape.size() > 1 ? t.shape[1] : 1, ld = n.stored_shape.back();
    for (int64_t r = 0; r < R; ++r)
      for (int64_t k = 0; k < C; ++k)
        dst.data[static_cast<size_t>(k * ld + n.row0 + r)] = t.data[static_cast<size_t>(r * C + k)];
  } else {
    const int64_t row = t.numel() / std::max<int64_t>(1, n.rows);  // values per row of the stored tensor
    std::copy(t.data.begin(), t.data.end(), dst.data.begin() + n.row0 * row);
  }
}

}  // namespace

TensorMap hf_tensors(const Model& model, const ModelWeights& w, bool gradients) {
  if (!model.is_hf()) throw Error("internal: hf_tensors of a model that is not a Hugging Face folder's");
  if (has_half(w)) {  // saved as float32, as every folder attnlab writes
    ModelWeights full = w;
    widen_all(full);
    return hf_tensors(model, full, gradients);
  }
  // Gemma's gains go back to the w the folder stores (1 + w - 1: w to within half a float32 step
  // of 1); their gradients are the same for w and for 1 + w
  std::vector<const Tensor*> offset;
  if (model.config.norm_unit_offset && !gradients)
    for (Tensor* g : rms_gains(model.config, const_cast<ModelWeights&>(w))) offset.push_back(g);
  TensorMap out;
  for (const WeightEntry& e : weight_entries(model.config)) {
    const LayoutName n = layout_name(hf_layout(model.hf.model_type), e, model.config);
    const Tensor& t = e.in(w);
    if (std::find(offset.begin(), offset.end(), &t) == offset.end()) {
      put_stored(out, n, (n.head ? "" : model.hf.prefix) + n.name, t);
      continue;
    }
    Tensor stored = t;
    for (float& v : stored.data) v -= 1.0f;
    put_stored(out, n, (n.head ? "" : model.hf.prefix) + n.name, stored);
  }
  return out;
}

namespace {

// A vocabulary as tokenizer.json's model holds it ({token: id}), and its longest token's bytes.
std::pair<json, size_t> vocab_ids(const Vocab& vocab) {
  json ids = json::object();
  size_t longest = 0;
  for (int id = 0; id < vocab.size(); ++id) {
    ids[vocab.token(id)] = id;
    longest = std::max(longest, vocab.token(id).size());
  }
  return {ids, longest};
}

// The vocabulary's [PAD], [UNK] and [CLS] as tokenizer.json's added tokens.
json special_tokens(const Vocab& vocab) {
  json added = json::array();
  for (const char* special : {kPadToken, kUnkToken, kClsToken})
    if (vocab.id(special) >= 0)
      added.push_back({{"id", vocab.id(special)},
                       {"content", special},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", true}});
  return added;
}

// tokenizer.json for attnlab's word tokenizer over `vocab` (tokenizer.cpp's split_text): each
// step is one that both tokenizers and attnlab's HfTokenizer run, and each matches split_text's
// ASCII rules exactly (Unicode-aware steps such as Lowercase or WhitespaceSplit would not).
json word_tokenizer_json(const Vocab& vocab) {
  json lower = json::array();
  for (char ch = 'A'; ch <= 'Z'; ++ch)
    lower.push_back({{"type", "Replace"},
                     {"pattern", {{"String", std::string(1, ch)}}},
                     {"content", std::string(1, static_cast<char>(ch - 'A' + 'a'))}});
  json pre = json::array();
  // std::isspace in the C locale: space, \t \n \v \f \r; removed between words
  pre.push_back({{"type", "Split"},
                 {"pattern", {{"Regex", "[ \\t\\n\\x0B\\f\\r]+"}}},
                 {"behavior", "Removed"},
                 {"invert", false}});
  // std::ispunct in the C locale (! to /, : to @, [ to `, { to ~) but the apostrophe: one token each
  pre.push_back({{"type", "Split"},
                 {"pattern", {{"Regex", "[!-&(-/:-@\\[-`{-~]"}}},
                 {"behavior", "Isolated"},
                 {"invert", false}});
  const auto [ids, longest] = vocab_ids(vocab);
  // WordPiece with no "##" pieces in the vocabulary (the split isolates every '#') is a word
  // lookup: a word is its token or [UNK]; no word is cut for length (split_text cuts none)
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", special_tokens(vocab)},
          {"normalizer", {{"type", "Sequence"}, {"normalizers", lower}}},
          {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", pre}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", false}}},
          {"model",
           {{"type", "WordPiece"},
            {"unk_token", kUnkToken},
            {"continuing_subword_prefix", "##"},
            {"max_input_chars_per_word", std::max<size_t>(100, 4 * longest + 1)},
            {"vocab", ids}}}};
}

// tokenizer.json for attnlab's character tokenizer over `vocab` (split_text with Char): a run of
// ASCII white space (space, \t \n \v \f \r) is one " " token and none is kept at either end; every
// other code point is a token, its case kept, [UNK] when not in the vocabulary. Normalizers:
// the runs to one space, then the space at either end removed; each code point its own piece
// ([^\n]: any, the line breaks being spaces by then, where "." would follow each regex engine's
// newline rules); WordPiece looks each up; Fuse joins them back.
json char_tokenizer_json(const Vocab& vocab) {
  const json ids = vocab_ids(vocab).first;
  json norm = json::array();
  norm.push_back({{"type", "Replace"}, {"pattern", {{"Regex", "[ \\t\\n\\x0B\\f\\r]+"}}}, {"content", " "}});
  norm.push_back({{"type", "Replace"}, {"pattern", {{"Regex", "\\A | \\z"}}}, {"content", ""}});
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", special_tokens(vocab)},
          {"normalizer", {{"type", "Sequence"}, {"normalizers", norm}}},
          {"pre_tokenizer",
           {{"type", "Split"}, {"pattern", {{"Regex", "[^\\n]"}}}, {"behavior", "Isolated"}, {"invert", false}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "Fuse"}}},
          {"model",
           {{"type", "WordPiece"},
            {"unk_token", kUnkToken},
            {"continuing_subword_prefix", "##"},
            {"max_input_chars_per_word", 100},
            {"vocab", ids}}}};
}

}  // namespace

Model as_hf_language_model(const Model& model) {
  const ModelConfig& c = model.config;
  const std::string what = "saving as a Hugging Face folder: ";
  if (model.is_hf()) return model;  // already one
  if (!c.lm_head || !c.causal || c.num_classes > 0)
    throw Error(what + "only a language model (a causal decoder with its LM head) has a Hugging Face form here");
  // A byte-level BPE learned from a text (new_text_language_model) carries its tokenizer.json.
  const bool learned = model.tokenizer && model.hf.tokenizer_files.count("tokenizer.json");
  const bool words = c.tokenizer == TokenizerKind::Word && c.lowercase,
             chars = c.tokenizer == TokenizerKind::Char && !c.lowercase;
  if (!learned && (!(words || chars) || c.add_cls || model.tokenizer))
    throw Error(what +
                "only the lower-cased word tokenizer and the case-keeping character tokenizer, without [CLS], are "
                "written as a tokenizer.json");
  if (!learned && model.vocab.unk_id() < 0) throw Error(what + "the vocabulary has no [UNK] token");
  const bool gpt2 = c.positional == Positional::Learned && c.norm_kind == NormKind::LayerNorm &&
                    c.activation == Activation::GeluTanh && c.tied_lm_head && c.qkv_bias && c.out_bias && !c.gated_ff &&
                    c.kv_heads() == c.num_heads;
  const bool llama = c.positional == Positional::Rotary && c.norm_kind == NormKind::RmsNorm &&
                     c.activation == Activation::Silu && !c.tied_lm_head && !c.qkv_bias && !c.out_bias && !c.ff_bias &&
                     (c.gated_ff || c.ff_dim == 0) && c.rope_scaling.type == "default";
  if (!gpt2 && !llama)
    throw Error(what + "the model is neither GPT-2-style nor Llama-style as train --objective lm makes them");
  if (gpt2 && c.ff_dim == 0)
    throw Error(what +
                "transformers' GPT-2 cannot run a feed-forward of width 0 (an attention-only model); train "
                "it with --arch llama, whose folder keeps an empty feed-forward, or with --ff > 0");
  if (c.norm != NormPlacement::Pre || !c.final_norm || c.embedding_norm || c.type_vocab_size > 0 ||
      c.sliding_window > 0 || c.qk_norm || c.sandwich_norm || c.head_size > 0 || c.attn_scale != 0.0f)
    throw Error(what + "the model has a part that GPT2LMHeadModel / LlamaForCausalLM do not");
  json j;
  if (gpt2) {
    j = {{"model_type", "gpt2"},
         {"architectures", {"GPT2LMHeadModel"}},
         {"vocab_size", c.vocab_size},
         {"n_embd", c.embed_size},
         {"n_layer", c.num_layers},
         {"n_head", c.num_heads},
         {"n_inner", c.ff_dim},
         {"n_positions", c.max_len},
         {"activation_function", "gelu_new"},
         {"layer_norm_epsilon", c.layer_norm_eps},
         {"tie_word_embeddings", true},
         {"resid_pdrop", 0.0},
         {"embd_pdrop", 0.0},
         {"attn_pdrop", 0.0}};
  } else {
    j = {{"model_type", "llama"},
         {"architectures", {"LlamaForCausalLM"}},
         {"vocab_size", c.vocab_size},
         {"hidden_size", c.embed_size},
         {"intermediate_size", c.ff_dim},
         {"num_hidden_layers", c.num_layers},
         {"num_attention_heads", c.num_heads},
         {"num_key_value_heads", c.kv_heads()},
         {"max_position_embeddings", c.max_len},
         {"rms_norm_eps", c.layer_norm_eps},
         {"rope_theta", c.rope_theta},
         {"hidden_act", "silu"},
         {"tie_word_embeddings", false},
         {"attention_bias", false},
         {"mlp_bias", false}};
  }
  // The classes' defaults (50256; 1 and 2) are not this vocabulary's; a learned BPE's end of
  // text (GPT-2's <|endoftext|>) is its bos and eos.
  const int end_of_text = model.vocab.id("<|endoftext|>");
  j["bos_token_id"] = learned && end_of_text >= 0 ? json(end_of_text) : json(nullptr);
  j["eos_token_id"] = j["bos_token_id"];
  j["pad_token_id"] = model.vocab.pad_id() >= 0 ? json(model.vocab.pad_id()) : json(nullptr);
  j["torch_dtype"] = "float32";  // transformers 4.x's key; 5.x reads dtype
  j["dtype"] = "float32";
  Model out = model;
  out.hf.model_type = gpt2 ? "gpt2" : "llama";
  out.hf.architecture = gpt2 ? "GPT2LMHeadModel" : "LlamaForCausalLM";
  out.hf.prefix = hf_prefix(out.hf.model_type);
  out.hf.config_text = j.dump();
  if (!learned)
    out.hf.tokenizer_files["tokenizer.json"] =
        (words ? word_tokenizer_json(model.vocab) : char_tokenizer_json(model.vocab)).dump(2) + "\n";
  json tc = {{"tokenizer_class", "PreTrainedTokenizerFast"},
             {"model_max_length", c.max_len},
             {"clean_up_tokenization_spaces", false}};
  if (learned && end_of_text >= 0) tc["bos_token"] = tc["eos_token"] = "<|endoftext|>";
  for (const auto& [key, token] : {std::pair<const char*, const char*>{"pad_token", kPadToken},
                                   {"unk_token", kUnkToken},
                                   {"cls_token", kClsToken}})
    if (!learned && model.vocab.id(token) >= 0) tc[key] = token;
  out.hf.tokenizer_files["tokenizer_config.json"] = tc.dump(2) + "\n";
  return out;
}

namespace {

// What every Hugging Face folder holds: the weights, config.json and the tokenizer's files as read.
void write_folder_files(const Model& model, const std::string& dir, const TensorMap& tensors, const json& config) {
  if (model.hf.tokenizer_files.empty()) throw Error("internal: a Hugging Face model without its tokenizer files");
  write_file_atomic((fs::path(dir) / "model.safetensors").string(), serialize_safetensors(tensors));
  write_file_atomic((fs::path(dir) / "config.json").string(), config.dump(2) + "\n");
  for (const auto& [name, bytes] : model.hf.tokenizer_files) write_file_atomic((fs::path(dir) / name).string(), bytes);
}

}  // namespace

void write_hf_folder(const Model& model, const std::string& dir) {
  const ModelConfig& c = model.config;
  if (model.is_seq2seq()) throw Error("saving an encoder-decoder (" + model.hf.model_type + ") is not supported yet");
  json j = model.hf.config_text.empty() ? json::object() : json::parse(model.hf.config_text);
  if (is_decoder_type(model.hf.model_type)) {  // a language model fine-tuned here: the same architecture
    if (c.num_classes > 0) throw Error("internal: a classifier on a " + model.hf.model_type + " decoder");
    if (!j.contains("architectures")) j["architectures"] = {model.hf.architecture};
    TensorMap tensors = hf_tensors(model, model.weights);
    if (c.ff_dim == 0 &&
        hf_layout(model.hf.model_type) == WeightLayout::HfLlama)  // attention-only: LlamaMLP of width 0 adds 0
      for (int l = 0; l < c.num_layers; ++l) {
        const std::string at = model.hf.prefix + "layers." + std::to_string(l) + ".";
        tensors[at + "mlp.gate_proj.weight"] = Tensor({0, c.embed_size});
        tensors[at + "mlp.up_proj.weight"] = Tensor({0, c.embed_size});
        tensors[at + "mlp.down_proj.weight"] = Tensor({c.embed_size, 0});
        tensors[at + "post_attention_layernorm.weight"] = Tensor({c.embed_size}, 1.0f);
      }
    return write_folder_files(model, dir, tensors, j);
  }
  const bool classifier = c.num_classes > 0;
  j["architectures"] = {hf_class_name(model.hf.model_type, classifier)};
  if (classifier) {
    json id2label = json::object(), label2id = json::object();
    for (int i = 0; i < c.num_classes; ++i) {
      id2label[std::to_string(i)] = model.label(i);
      label2id[model.label(i)] = i;
    }
    j["id2label"] = id2label;
    j["label2id"] = label2id;
  }
  // A task model keeps its base under the model_type's prefix, as transformers saves it.
  const std::string prefix = classifier ? hf_prefix(model.hf.model_type) : model.hf.prefix;
  const WeightLayout layout = hf_layout(model.hf.model_type);
  ModelWeights widened;  // a BF16 folder's 16-bit matrices saved as float32
  if (has_half(model.weights)) widen_all(widened = model.weights);
  const ModelWeights& w = has_half(model.weights) ? widened : model.weights;
  TensorMap tensors;
  for (const WeightEntry& e : weight_entries(c)) {
    const LayoutName n = layout_name(layout, e, c);
    tensors[(n.head ? "" : prefix) + n.name] = e.in(w);
  }
  write_folder_files(model, dir, tensors, j);
}

}  // namespace attnlab
