// Alignments from an encoder-decoder's cross-attention: which source tokens each target token
// reads, averaged over a chosen set of layers and heads (the translation alignments of Bahdanau
// et al. 2015 and of fairseq's --print-alignment, which takes the argmax of such an average).
#pragma once

#include <vector>

#include "engine/compute/forward.h"

namespace attnlab {

struct Alignment {
  int T = 0, S = 0;        // target rows (the decoder's positions) x source columns
  std::vector<float> map;  // [T, S]: the mean of the chosen heads' cross-attention; each row sums to 1
  std::vector<int> best;   // [T]: per row the source position with the largest weight
};

// The cross-attention of an encoder-decoder's result (ForwardResult::decoder_cross_attention, or
// cross_attention once seq2seq_part made it the shown part), averaged over `layers` x `heads`
// (empty: every one). Error for a result without it or a layer or head that does not exist.
Alignment cross_alignment(const ForwardResult& r, const std::vector<int>& layers, const std::vector<int>& heads);

}  // namespace attnlab
