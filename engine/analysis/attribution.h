// Direct logit attribution (Elhage et al. 2021, "A Mathematical Framework for Transformer
// Circuits"; TransformerLens's cache.stack_head_results + apply_ln_to_stack): a pre-norm
// model's final residual stream at the last position is a sum of parts (the embedding, each
// head's z_h W_O^h, each attention output bias, each MLP's output); with the final norm's scale
// frozen from the run (LayerNorm: each part centred, then divided by the run's sigma; RMSNorm:
// divided by the run's rms) the logit difference is the sum of each part dotted with
// W_U[answer] - W_U[wrong], plus the norm's shift. Language models with a pre-norm stack only.
// Gemma 2's sandwich norms are frozen the same way; its soft-capped logits are explained before the cap.
#pragma once

#include "engine/compute/forward.h"

namespace attnlab {

struct LogitAttribution {
  Tensor parts;             // [layers, heads + 1]: each head's direct contribution, then the MLP output's
  double embedding = 0;     // the embedding's (token + position) contribution
  double biases = 0;        // the attention output biases' and the final norm's shift
  double total = 0;         // embedding + parts + biases
  double logit_diff = 0;    // the model's own logit[answer] - logit[wrong] at the last position
  bool before_cap = false;  // logit_diff is of the logits before Gemma 2's soft cap (what the parts sum to)
};

// wrong < 0: the answer's logit alone.
LogitAttribution direct_logit_attribution(const Model& model, Backend& backend, const ForwardRequest& request,
                                          int answer, int wrong);

}  // namespace attnlab
