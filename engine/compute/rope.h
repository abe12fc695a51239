// Rotary position embeddings (Su et al. 2021) as Hugging Face computes them: the frequencies of
// each rope_type (transformers' ROPE_INIT_FUNCTIONS) and the cos / sin tables the Rope op reads.
#pragma once

#include <vector>

#include "engine/core/config.h"
#include "engine/core/tensor.h"

namespace attnlab {

// Hugging Face's rotary tables for positions 0..T-1 and head size D (LlamaRotaryEmbedding, in
// float32 as it computes them): inv_freq_i = 1 / theta^(2i / D), angle = t * inv_freq_i.
void rope_tables(int T, int D, float theta, Tensor& cos_out, Tensor& sin_out);
// The rotary frequencies and the cos / sin scale of a config's rope_type for a pass of T positions,
// as transformers' ROPE_INIT_FUNCTIONS compute them in float32 (modeling_rope_utils.py, 5.x):
// linear divides by the factor; llama3 divides the low frequencies and blends the middle ones;
// yarn blends interpolated and extrapolated frequencies over its correction range and scales
// cos / sin by its attention factor; longrope divides by short_factor, or long_factor past
// original_max_position_embeddings (transformers' longrope_frequency_update picks by the pass's
// length), with its attention factor; dynamic equals default up to max_position_embeddings (it
// only rescales past it, and attnlab never runs past it).
struct RopeFrequencies {
  std::vector<float> inv_freq;  // [D / 2]
  float scale = 1.0f;           // attention_scaling: cos and sin are multiplied by it
};
RopeFrequencies rope_frequencies(const ModelConfig& c, int D, int T);
// Tables for a config: cos = cos(t inv_freq) x scale, and the same for sin, for the T positions
// first..first+T-1 of a pass of first + T positions (first > 0: the new positions after a KV
// cache's prefix; the frequencies are those of the whole length, as the full pass has them).
void rope_tables(int T, int D, const ModelConfig& c, Tensor& cos_out, Tensor& sin_out, int first = 0);

}  // namespace attnlab
