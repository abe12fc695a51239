// Model folders of every kind: attnlab's own (config.json, model.safetensors, vocab.txt) and
// unmodified Hugging Face folders (config.json with "model_type"). The one place that knows both.
#pragma once

#include <string>

#include "engine/model/model.h"

namespace attnlab {

// Opens a model folder of either kind; Error says what is missing or wrong.
Model load_model(const std::string& dir);
// Writes the model as a folder of its kind (attnlab's: config.json, model.safetensors, vocab.txt;
// Hugging Face's in its own names with its tokenizer files), replacing DIR atomically.
void save_model(const Model& model, const std::string& dir);

}  // namespace attnlab
