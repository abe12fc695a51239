// A tiny BERT classifier with a real WordPiece tokenizer.json, written to a folder: for tests of
// Hugging Face folders in the engine and the app, without Python.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/hf_model.h"

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

}  // namespace attnlab::test
