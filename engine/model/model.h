// Model: config + weights + vocabulary, loaded from or saved to a model folder
// (config.json, model.safetensors, vocab.txt). Tensor names follow the modules people train
// in PyTorch: the seed articles' layout (what we write) and nn.TransformerEncoder's.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "engine/core/config.h"
#include "engine/text/hf_tokenizer.h"
#include "engine/formats/safetensors.h"
#include "engine/core/tensor.h"
#include "engine/text/tokenizer.h"
#include "engine/model/weights.h"

namespace attnlab {

// What a Hugging Face folder adds (engine/model/hf_model.h); empty model_type: attnlab's own format.
struct HfInfo {
  std::string model_type;          // "bert", "distilbert"
  std::string architecture;        // "BertForSequenceClassification", or what the weights make it
  std::string prefix;              // the base model's name prefix in the weight file ("bert.", "")
  std::string config_text;         // config.json as read: saving keeps the keys attnlab does not use
  std::vector<std::string> notes;  // what was left out ("the masked-LM head cls.* is not used")
  // The tokenizer's files as read (tokenizer.json, vocab.txt, ...): a saved copy carries them.
  std::map<std::string, std::string> tokenizer_files;
};

struct Model {
  ModelConfig config;
  ModelWeights weights;
  Vocab vocab;
  std::string source;  // folder it came from, or "random-init"
  HfInfo hf;
  // The folder's own tokenizer (Hugging Face models); null: the config's word/char tokenizer.
  std::shared_ptr<const HfTokenizer> tokenizer;
  // Opened from an attention file (engine/formats/attention_file.h): the config holds its shape
  // (layers, heads, tokens) and the vocabulary its token strings; there are no weights, so only
  // views of the file's probabilities apply.
  bool probabilities_only = false;
  // An encoder-decoder (BART): this model is its decoder (config.cross_attention: every layer also
  // attends to the encoder's output) and `encoder` its encoder, a model of its own with the same
  // vocabulary. A pass encodes a source and decodes a target (ForwardRequest::source_ids).
  std::shared_ptr<const Model> encoder;
  bool is_seq2seq() const { return encoder != nullptr; }

  const std::string& label(int c) const;
  // The vocabulary's string for an id, or "#N" for an embedding row without a token (models pad
  // their embedding past the tokenizer: GPT-2 checkpoints to 50,304, Qwen2 to 151,936).
  std::string token_name(int id) const;
  // Padding's id: the config's pad_token_id (BART's <pad>), else the vocabulary's [PAD]; -1: none.
  int pad_id() const { return config.pad_token_id >= 0 ? config.pad_token_id : vocab.pad_id(); }
  // A vocabulary token as the views show it (byte-level tokens decoded: "␣world").
  std::string readable_token(int id) const;
  bool is_hf() const { return !hf.model_type.empty(); }
  // "BertForSequenceClassification: 6 layers, 12 heads, hidden 384, vocabulary 30,522, 22.7 M parameters"
  std::string summary() const;
};

// attnlab's own folder (config.json, model.safetensors, vocab.txt); load_model (model_folder.h)
// opens either kind.
Model load_attnlab_folder(const std::string& dir);
// Builds weights from named tensors (any supported layout). Error names a missing or mis-shaped tensor.
ModelWeights weights_from_tensors(const ModelConfig& config, const TensorMap& tensors, WeightLayout* layout = nullptr);
// Weights from tensors named in `layout`: base-model names after `prefix` ("bert."), task-head
// names without it; old LayerNorm names (gamma, beta) accepted. Records the names it read in
// `used`; errors start with `where`.
ModelWeights weights_from_layout(const ModelConfig& config, const TensorMap& tensors, WeightLayout layout,
                                 const std::string& prefix, std::set<std::string>* used, const std::string& where);
// The same, moving each tensor that one weight reads as stored out of `tensors` (its entry stays,
// empty): loading keeps one copy of the weights, not two. The names stay for unused-tensor notes.
// halves holds the 16-bit matrices whose entries in tensors are shapes only (load_safetensors):
// each layer's matrix is kept in 16 bits (LayerWeights::half), the rest widened to float32.
ModelWeights take_weights_from_layout(const ModelConfig& config, TensorMap& tensors, WeightLayout layout,
                                      const std::string& prefix, std::set<std::string>* used, const std::string& where,
                                      HalfMap* halves = nullptr);
// The articles' layout, which is what save_model writes.
TensorMap weights_to_tensors(const ModelConfig& config, const ModelWeights& w);
// Writes DIR/config.json, DIR/model.safetensors, DIR/vocab.txt (each file atomically) into an
// existing folder; save_model (model_folder.h) writes either kind and replaces the folder whole.
void write_attnlab_folder(const Model& model, const std::string& dir);

// PyTorch-like initialisation (Linear: U(-1/sqrt(in), 1/sqrt(in)); Embedding: N(0, 1); LayerNorm: 1, 0),
// deterministic for a seed.
ModelWeights random_weights(const ModelConfig& config, uint64_t seed);
// A vocabulary for random-init models: [PAD], [UNK], [CLS], then printable ASCII (char) or
// placeholder words w0, w1, ... (word), up to vocab_size.
Vocab default_vocab(const ModelConfig& config);

}  // namespace attnlab
