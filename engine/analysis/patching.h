// Activation patching (Meng et al. 2022, "Locating and Editing Factual Associations in GPT";
// Wang et al. 2022, "Interpretability in the Wild"; TransformerLens's patching.get_act_patch_*):
// how much of the clean run's answer one activation restores when it is put into the corrupted
// run (denoising). The metric is the logit difference m = logit[last, answer] - logit[last, wrong]
// (a classifier's own logits), reported normalised:
//   (m(patched) - m(corrupted)) / (m(clean) - m(corrupted))
// so 1 is everything restored and 0 nothing. Each patched run resumes the corrupted run at the
// patched layer from its cached input (hook_resid_pre): layers before it are not run again.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "engine/compute/forward.h"

namespace attnlab {

enum class PatchTarget { ResidPre, AttnOut, MlpOut, Z, Pattern };
// "resid_pre" | "attn_out" | "mlp_out" | "z" | "pattern"; Error otherwise.
PatchTarget parse_patch_target(const std::string& name);

struct PatchResult {
  Tensor values;                    // normalised: [layers, T] (resid_pre, attn_out, mlp_out: one position at a time)
                                    // or [layers, heads] (z, pattern: one head at every position)
  double clean = 0, corrupted = 0;  // the metric of the two runs
};

// An answer as the metric reads it: a class name (classifiers) or text that is exactly one token
// (language models; a leading space matters to byte-level tokenizers). Error otherwise, naming
// the classes or showing how the text tokenizes; `what` names the field in messages ("--answer").
int resolve_answer(const Model& model, const std::string& text, const std::string& what);

// The logit difference the patching reads: logits at the last position (LM head) or the
// classifier's, answer minus wrong.
double logit_difference(const Model& model, const ForwardResult& r, int answer, int wrong);

// clean and corrupted: requests of the same length (an Error names both counts); answer and
// wrong: token ids (LM head) or class indices (a classifier). progress(done, total) after each
// patched run; cancel is checked between runs.
PatchResult activation_patching(const Model& model, Backend& backend, const ForwardRequest& clean,
                                const ForwardRequest& corrupted, int answer, int wrong, PatchTarget what,
                                const std::function<void(int, int)>& progress = {},
                                const std::atomic<bool>* cancel = nullptr);

// Attribution patching (Nanda 2023, "Attribution Patching: Activation Patching At Industrial
// Scale"; Syed et al. 2023): activation patching's first-order estimate,
//   (a_clean - a_corrupted) . d m / d a   at the corrupted run,
// summed over what one patched run would replace (one position's row, or one head's d_head
// columns at every position), normalised as above. One clean forward, one corrupted forward and
// one backward (fp32, host ops) instead of layers x columns patched runs. Exact where m is linear
// in the activation; a nonlinearity between it and the logits (LayerNorm, softmax, GELU) makes
// it an estimate, worst for large patches (early residual positions).
PatchResult attribution_patching(const Model& model, Backend& backend, const ForwardRequest& clean,
                                 const ForwardRequest& corrupted, int answer, int wrong, PatchTarget what);

}  // namespace attnlab
