// Head detectors: scores in [0, 1] for every head, [layers, heads], read from the attention of one
// pass over a random token sequence repeated twice (Olsson et al. 2022, "In-context Learning and
// Induction Heads"; TransformerLens's induction score and head_detector). The sequence is `seq`
// tokens drawn uniformly from the vocabulary (padding excluded) with `seed`, then the same `seq`
// again: 2 seq positions, no special tokens added.
//   induction:        mean over the second copy's positions i of P[i, i - seq + 1]: attention
//                     from a token to the token after its first occurrence
//   previous-token:   mean over positions i >= 1 of P[i, i - 1]
//   duplicate-token:  mean over the second copy's positions i of P[i, i - seq]: attention to the
//                     same token's earlier occurrence
// A bidirectional encoder scores as well (it sees both copies); the scores are what its
// attention does on this input, not a claim about its training.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/compute/forward.h"

namespace attnlab {

enum class HeadDetector { Induction, PreviousToken, DuplicateToken };

std::vector<int> repeated_random_tokens(const Model& model, int seq, uint64_t seed);
// The scores of one pass's attention (self mode, every layer kept) over repeated_random_tokens.
Tensor head_detector_scores(const ForwardResult& result, HeadDetector kind, int seq);
// Both steps: the sequence, the pass, the scores.
Tensor detect_heads(const Model& model, Backend& backend, HeadDetector kind, int seq = 50, uint64_t seed = 0);

}  // namespace attnlab
