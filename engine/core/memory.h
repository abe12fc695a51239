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
// of text_bytes bytes would take more than 90% of `available`. Reading it takes per_byte bytes a
// byte at most: the text is tokenized as every input is (prepare_text: each token's label, a
// 32-byte string, and 14 bytes of ids and flags, made twice on the way), one token a byte at
// worst (characters), then its ids and sequences. Measured peaks: 95 bytes a byte for characters
// and 67 for a BPE learned and applied (a 9.8 MB text, AMD EPYC). Checked before the file is read;
// available <= 0 checks nothing.
void check_text_fits(double text_bytes, double available, const std::string& where, double per_byte = 100);
}  // namespace attnlab
