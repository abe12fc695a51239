// Memory the machine can give a pass or a model, and the check made before a model's weights are
// allocated: a model that cannot fit is refused with the figures, never killed by the kernel.
#pragma once

#include <string>

#include "engine/core/config.h"

namespace attnlab {

// MemAvailable from /proc/meminfo, in bytes (0 when unknown).
double available_bytes();

// Bytes the model's weights take once loaded, from the weight table: float32, or with each layer's
// matrices, token embedding and LM head in 16 bits (half_matrices: a BF16 / F16 folder's,
// LayerWeights::half and ModelWeights::half).
double weight_bytes(const ModelConfig& c, bool half_matrices = false);

// Error (naming `where`, the size and what is available) when the weights would take more than
// 90% of `available` bytes; available <= 0 (unknown) checks nothing.
void check_weights_fit(const ModelConfig& c, double available, const std::string& where, bool half_matrices = false);

// Error (naming `where`, the size and what is available) when a language model's training text
// of text_bytes bytes would take more than 90% of `available`: the text, an id of 4 bytes for each
// of at most text_bytes tokens (one a byte, a character tokenizer's worst case) and the sequences
// cut from them, 9 x text_bytes (per_byte; learning a BPE also holds every word of the text as a
// string, ~40 bytes a word of ~5: 17). Checked before the file is read. available <= 0 checks nothing.
void check_text_fits(double text_bytes, double available, const std::string& where, double per_byte = 9);
}  // namespace attnlab
