// Hugging Face model folders, unmodified: config.json (by model_type), model.safetensors or its
// shards (model.safetensors.index.json), and the folder's tokenizer. Each architecture is a
// config mapping plus a weight-name map over the weight table (WeightLayout::HfBert, ...); the
// forward is the same plan as every other model. Never reads pickles (pytorch_model.bin).
#pragma once

#include <string>

#include "engine/model.h"

namespace attnlab {

// The model types this build opens, for messages: "bert, distilbert".
const char* supported_hf_model_types();

// gpt2, llama, mistral, qwen2: causal language models.
bool is_decoder_type(const std::string& model_type);

// True when DIR/config.json names a "model_type" (a Hugging Face folder).
bool is_hf_folder(const std::string& dir);

// Error naming the folder and what is wrong (unknown model_type, no weights, a pickle only, a
// missing shard, a vocabulary that does not fit the embedding, ...).
Model load_hf_model(const std::string& dir);

// Hugging Face config.json text -> ModelConfig + architecture (exposed for the fuzz harness).
ModelConfig parse_hf_config(const std::string& text, HfInfo& info, const std::string& where = "config.json");

// The shard index's file names, in order of first use (exposed for the fuzz harness).
std::vector<std::string> parse_shard_index(const std::string& text, const std::string& where);

// Writes config.json, model.safetensors (in the Hugging Face names, a classifier model as
// *ForSequenceClassification) and the tokenizer files copied from the source folder into dir.
void write_hf_folder(const Model& model, const std::string& dir);

}  // namespace attnlab
