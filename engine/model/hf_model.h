// Hugging Face model folders, unmodified: config.json (by model_type), model.safetensors or its
// shards (model.safetensors.index.json), and the folder's tokenizer. Each architecture is a
// config mapping plus a weight-name map over the weight table (WeightLayout::HfBert, ...); the
// forward is the same plan as every other model. Never reads pickles (pytorch_model.bin).
#pragma once

#include <string>

#include "engine/formats/safetensors.h"
#include "engine/model/model.h"

namespace attnlab {

// From the architecture table (hf_model.cpp: one row per model_type):
// the model types this build opens, for messages: "bert, distilbert, gpt2, ...";
std::string supported_hf_model_types();
// whether a model type is a causal language model (gpt2, llama, mistral, qwen2);
bool is_decoder_type(const std::string& model_type);
// whether a model type is an encoder-decoder (bart): Model::encoder holds its encoder;
bool is_seq2seq_type(const std::string& model_type);
// transformers' class name of its base model ("BertModel") or task model
// ("BertForSequenceClassification", "LlamaForCausalLM"); Error for a model type without a row.
std::string hf_class_name(const std::string& model_type, bool task);
// its tensor names (WeightLayout::HfBert, ...) and its base model's prefix inside a task model's
// tensors ("bert.", "model."); Error for a model type without a row.
WeightLayout hf_layout(const std::string& model_type);
std::string hf_prefix(const std::string& model_type);

// True when DIR/config.json names a "model_type" (a Hugging Face folder).
bool is_hf_folder(const std::string& dir);

// Error naming the folder and what is wrong (unknown model_type, no weights, a pickle only, a
// missing shard, a vocabulary that does not fit the embedding, ...).
Model load_hf_model(const std::string& dir);

// Hugging Face config.json text -> ModelConfig + architecture (exposed for the fuzz harness).
ModelConfig parse_hf_config(const std::string& text, HfInfo& info, const std::string& where = "config.json");

// The shard index's file names, in order of first use (exposed for the fuzz harness).
std::vector<std::string> parse_shard_index(const std::string& text, const std::string& where);

// Saving (hf_export.cpp).
// The tensors of w (the model's weights, or gradients shaped as them) under the names the model's
// folder gives them: its layout and prefix, GPT-2's Conv1D weights transposed and c_attn fused,
// Phi-3's qkv_proj and gate_up_proj fused (the stored tensors, as transformers' state_dict holds them).
// Weights go back to what the folder stores (Gemma's RMSNorm gains as w, not the 1 + w held);
// gradients (gradients = true) are written as they are.
TensorMap hf_tensors(const Model& model, const ModelWeights& w, bool gradients = false);

// A language model made in attnlab (new_language_model, new_text_language_model: GPT-2 or Llama
// style, the word or the character tokenizer) as a Hugging Face folder holds it: model_type gpt2
// (GPT2LMHeadModel) or llama (LlamaForCausalLM), config.json as that class's config, and a
// tokenizer.json (with tokenizer_config.json) that splits text as attnlab's tokenizer does: words
// (ASCII letters lower-cased; ASCII white space separates; ASCII punctuation but the apostrophe
// stands alone; a word not in the vocabulary is [UNK]) or characters (case kept; a run of ASCII
// white space one " ", none at either end; a character not in the vocabulary [UNK]), except that
// the vocabulary's [PAD], [UNK] and [CLS] written in a text are read as those tokens. Saving the
// result (save_model) writes a folder transformers opens and computes the same logits from. Error
// naming what has no counterpart (an attention-only GPT-2: transformers' GPT-2 cannot run a
// feed-forward of width 0; a classifier).
Model as_hf_language_model(const Model& model);

// Writes config.json, model.safetensors (in the Hugging Face names, a classifier model as
// *ForSequenceClassification) and the tokenizer files copied from the source folder into dir.
void write_hf_folder(const Model& model, const std::string& dir);

}  // namespace attnlab
