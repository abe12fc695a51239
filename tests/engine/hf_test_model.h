// A tiny BERT classifier with a real WordPiece tokenizer.json, written to a folder: for tests of
// Hugging Face folders in the engine and the app, without Python.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/model/hf_model.h"
#include "engine/model/model_folder.h"
#include "engine/formats/safetensors.h"

#include <nlohmann/json.hpp>

namespace attnlab::test {

inline const char* kTokenizerJson = R"({
  "added_tokens": [
    {"id": 0, "content": "[PAD]", "special": true, "normalized": false},
    {"id": 1, "content": "[UNK]", "special": true, "normalized": false},
    {"id": 2, "content": "[CLS]", "special": true, "normalized": false},
    {"id": 3, "content": "[SEP]", "special": true, "normalized": false},
    {"id": 4, "content": "[MASK]", "special": true, "normalized": false}],
  "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                 "strip_accents": null, "lowercase": true},
  "pre_tokenizer": {"type": "BertPreTokenizer"},
  "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
    "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
             {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
             {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
    "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                       "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
  "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
            "max_input_chars_per_word": 13,
            "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "the": 5, "movie": 6,
                      "play": 7, "##ing": 8, "##s": 9, "un": 10, "##believ": 11, "##ably": 12, "cafe": 13,
                      ",": 14, ".": 15, "東": 16, "京": 17, "was": 18, "good": 19}}
})";

inline Model tiny_bert(const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json") << kTokenizerJson;
  Model m;
  m.config.vocab_size = 20, m.config.embed_size = 8, m.config.num_heads = 2, m.config.num_layers = 2;
  m.config.ff_dim = 16, m.config.max_len = 32, m.config.type_vocab_size = 2, m.config.embedding_norm = true;
  m.config.positional = Positional::Learned, m.config.pooling = Pooling::Cls, m.config.pooler = true;
  m.config.num_classes = 2, m.config.labels = {"neg", "pos"}, m.config.activation = Activation::Gelu;
  m.config.layer_norm_eps = 1e-12f;
  m.weights = random_weights(m.config, 5);
  m.tokenizer = HfTokenizer::from_folder(dir);
  m.vocab = m.tokenizer->vocab();
  m.hf.model_type = "bert";
  m.hf.architecture = "BertForSequenceClassification";
  m.hf.config_text = R"({"model_type": "bert", "vocab_size": 20, "hidden_size": 8, "num_attention_heads": 2,
    "num_hidden_layers": 2, "intermediate_size": 16, "max_position_embeddings": 32, "type_vocab_size": 2,
    "layer_norm_eps": 1e-12, "hidden_act": "gelu"})";
  m.source = dir;
  m.hf.tokenizer_files["tokenizer.json"] = kTokenizerJson;
  return m;
}

// GPT-2's byte-to-character table (bytes_to_unicode), for building byte-level vocabularies.
inline std::string byte_char(int b) {
  int n = 0;
  for (int x = 0; x < 256; ++x) {
    const bool printable = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
    const unsigned cp = printable ? static_cast<unsigned>(x) : 256u + static_cast<unsigned>(n++);
    if (x != b) continue;
    std::string out;
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return out;
  }
  return "";
}

// A byte-level BPE tokenizer.json: the 256 byte characters, then "he", "Ġt", "Ġthe", "Ġw", and
// the special <|endoftext|> (id 260); GPT-2's ByteLevel pre-tokenizer, [BOS] = <|endoftext|>
// when `bos`.
inline std::string byte_level_tokenizer_json(bool bos) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  vocab["he"] = 256, vocab["\u0120t"] = 257, vocab["\u0120the"] = 258, vocab["\u0120w"] = 259;
  vocab["<|endoftext|>"] = 260;
  nlohmann::json j = {
      {"added_tokens", {{{"id", 260}, {"content", "<|endoftext|>"}, {"special", true}, {"normalized", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", {"h e", "\u0120 t", "\u0120t he", "\u0120 w"}},
        {"unk_token", nullptr}}}};
  if (bos)
    j["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens", {{"<|endoftext|>", {{"id", "<|endoftext|>"}, {"ids", {260}}}}}}};
  else
    j["post_processor"] = {{"type", "ByteLevel"}};
  return j.dump();
}

// A tiny Llama-family causal LM folder (Hugging Face names, random weights): hidden 16, 4 query
// heads sharing 2 key/value heads, 2 layers, RoPE, SwiGLU, untied lm_head; or GPT-2 (gpt2 = true);
// qwen3: the same with Qwen3's per-head q_norm / k_norm (gains spread over 0.6 .. 1.0).
// head_dim > 0: heads of that width apart from hidden / heads (16 / 4 = 4), as transformers 5.x reads it.
inline Model tiny_decoder(const std::string& dir, bool gpt2 = false, int sliding_window = 0, bool qwen3 = false,
                          int head_dim = 0, bool qwen2 = false, int max_positions = 64) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json") << byte_level_tokenizer_json(!gpt2);
  nlohmann::json cfg;
  if (gpt2) {
    cfg = {{"model_type", "gpt2"},
           {"vocab_size", 261},
           {"n_embd", 16},
           {"n_layer", 2},
           {"n_head", 4},
           {"n_positions", max_positions},
           {"architectures", {"GPT2LMHeadModel"}}};
  } else {
    cfg = {{"model_type", sliding_window ? "mistral" : "llama"},
           {"vocab_size", 261},
           {"hidden_size", 16},
           {"intermediate_size", 24},
           {"num_hidden_layers", 2},
           {"num_attention_heads", 4},
           {"num_key_value_heads", 2},
           {"max_position_embeddings", max_positions},
           {"rms_norm_eps", 1e-6},
           {"architectures", {sliding_window ? "MistralForCausalLM" : "LlamaForCausalLM"}}};
    if (sliding_window) cfg["sliding_window"] = sliding_window;
    if (qwen3) {
      cfg["model_type"] = "qwen3";
      cfg["head_dim"] = 4;
      cfg["architectures"] = {"Qwen3ForCausalLM"};
    }
    if (qwen2) {  // Llama's steps with biases on q, k and v (Qwen2Attention)
      cfg["model_type"] = "qwen2";
      cfg["architectures"] = {"Qwen2ForCausalLM"};
    }
    if (head_dim > 0) cfg["head_dim"] = head_dim;
  }
  std::ofstream(dir + "/config.json") << cfg.dump();
  HfInfo info;
  ModelConfig c = parse_hf_config(cfg.dump(), info);
  ModelWeights w = random_weights(c, 9);
  for (const WeightEntry& e : weight_entries(c)) {
    Tensor& t = e.in(w);
    for (float& v : t.data) v *= 0.5f;  // keep the random logits tame
    if (e.spec->layer_member == &LayerWeights::q_norm || e.spec->layer_member == &LayerWeights::k_norm)
      for (size_t k = 0; k < t.data.size(); ++k) t.data[k] = 0.6f + 0.1f * static_cast<float>((k + e.layer) % 5);
  }
  Model named;  // what hf_tensors needs to name them: the folder's type and prefix
  named.config = c;
  named.hf.model_type = cfg["model_type"].get<std::string>();
  named.hf.prefix = gpt2 ? "transformer." : "model.";
  const TensorMap tensors = hf_tensors(named, w);
  save_safetensors(dir + "/model.safetensors", tensors);
  return load_model(dir);
}

// A tiny Gemma 2 folder (Hugging Face names, random weights): hidden 16, 4 query heads of 6 (wider
// than 16 / 4) on 2 key/value heads, 3 layers (windowed, full, windowed, as layer_types lists
// them), a window of 3 keys, GeGLU, scores scaled by 5^-1/2 and soft-capped at `cap`, logits at
// 2 cap (cap 0: no caps, written as null), every RMSNorm gain (held as 1 + w) spread over 0.6 .. 1.0.
inline Model tiny_gemma2(const std::string& dir, float cap = 1.0f, double query_scalar = 5) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json") << byte_level_tokenizer_json(true);
  nlohmann::json cfg = {{"model_type", "gemma2"},
                        {"vocab_size", 261},
                        {"hidden_size", 16},
                        {"intermediate_size", 24},
                        {"num_hidden_layers", 3},
                        {"num_attention_heads", 4},
                        {"num_key_value_heads", 2},
                        {"head_dim", 6},
                        {"max_position_embeddings", 64},
                        {"query_pre_attn_scalar", query_scalar},
                        {"sliding_window", 3},
                        {"layer_types", {"sliding_attention", "full_attention", "sliding_attention"}},
                        {"architectures", {"Gemma2ForCausalLM"}}};
  cfg["attn_logit_softcapping"] = cap > 0 ? nlohmann::json(cap) : nlohmann::json();
  cfg["final_logit_softcapping"] = cap > 0 ? nlohmann::json(2 * cap) : nlohmann::json();
  std::ofstream(dir + "/config.json") << cfg.dump();
  HfInfo info;
  const ModelConfig c = parse_hf_config(cfg.dump(), info);
  ModelWeights w = random_weights(c, 9);
  for (Tensor* t : parameters(w))
    for (float& v : t->data) v *= 0.5f;  // keep the random scores and logits tame, as tiny_decoder's
  for (Tensor* g : rms_gains(c, w))
    for (size_t k = 0; k < g->data.size(); ++k) g->data[k] = 0.6f + 0.1f * static_cast<float>(k % 5);
  Model named;
  named.config = c;
  named.hf.model_type = "gemma2";
  named.hf.prefix = "model.";
  save_safetensors(dir + "/model.safetensors", hf_tensors(named, w));  // the gains stored as w = g - 1
  return load_model(dir);
}

}  // namespace attnlab::test
