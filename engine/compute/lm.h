// Language-model views (decoders with an LM head): the likeliest next tokens at a position, and
// the logit lens (nostalgebraist 2020): every layer's residual stream read through the final
// norm and the LM head, as if the model stopped there.
#pragma once

#include <utility>
#include <vector>

#include "engine/compute/backend.h"
#include "engine/model/model.h"

namespace attnlab {

// softmax(lm_head(hidden[position])) -> the k likeliest (id, probability), best first (ties:
// lower id first). hidden is the final hidden state [T, E] (after the final norm).
std::vector<std::pair<int, float>> top_next_tokens(const Model& model, const Tensor& hidden, int position, int k);
// The same from one position's logits (the LM head already run).
std::vector<std::pair<int, float>> top_of_logits(const std::vector<float>& logits, int k);

// softmax(lm_head(hidden[position]))[id], in double: one token's probability.
// The LM head's logits over the vocabulary at one position of hidden [T, E].
std::vector<float> next_token_logits(const Model& model, const Tensor& hidden, int position);
double next_token_probability(const Model& model, const Tensor& hidden, int position, int id);

struct LogitLens {
  int layers = 0, T = 0;        // T: the positions read (a window of the input)
  int first = 0;                // the input position of column 0
  std::vector<int> top_id;      // [layers, T]: the likeliest next token after layer l at position first + t
  std::vector<float> top_prob;  // [layers, T]: its probability
};

// Runs the model on ids (every layer's input kept, no probabilities) and reads each layer's
// output through the final norm and the LM head at positions [first, first + count) (count -1:
// to the end; the LM head is the lens's cost, layers x positions x vocabulary products, so a view
// reads the window it shows). Row l is after layer l; the last row is the model's own
// prediction. Throws Cancelled when cancel is set (checked per layer and row block).
LogitLens logit_lens(const Model& model, Backend& backend, const std::vector<int>& ids,
                     const std::atomic<bool>* cancel = nullptr, int first = 0, int count = -1);

}  // namespace attnlab
