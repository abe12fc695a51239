// Sparse autoencoder features (Bricken et al. 2023, "Towards Monosemanticity"; Cunningham et al.
// 2023): a sparse autoencoder saved in SAELens's format, read at its hook point, and its features
// clamped as an intervention. The folder holds cfg.json and sae_weights.safetensors as SAELens
// writes them (SAE.save_model, 6.x; the keys of earlier versions are read as SAELens's
// handle_pre_6_0_config reads them):
//   cfg.json: architecture (standard | jumprelu | topk), d_in, d_sae, apply_b_dec_to_input,
//             normalize_activations (none | expected_average_only_in | constant_norm_rescale |
//             layer_norm), reshape_activations (none | hook_z), k and
//             rescale_acts_by_decoder_norm (topk), metadata.hook_name (or hook_name / hook_point)
//   weights:  W_enc [d_in, d_sae], b_enc [d_sae], W_dec [d_sae, d_in], b_dec [d_in],
//             threshold [d_sae] (jumprelu)
// The equations are SAELens's (saes/sae.py process_sae_in, standard_sae.py, jumprelu_sae.py,
// topk_sae.py):
//   x' = norm_in(x) - b_dec * apply_b_dec_to_input
//   pre = x' W_enc + b_enc            (topk with rescale_acts_by_decoder_norm: * ||W_dec_i||)
//   f = relu(pre)                     standard
//       relu(pre) * (pre > threshold) jumprelu
//       relu of the k largest of pre, 0 elsewhere   topk
//   x^ = norm_out(f W_dec + b_dec)    (topk with rescale: f / ||W_dec_i|| first)
// norm_in / norm_out: constant_norm_rescale scales each row to norm sqrt(d_in) and back;
// layer_norm centres each row and divides by (its unbiased std + 1e-5), and on the way out
// multiplies by the std (without the 1e-5, as SAELens does) and adds the mean back;
// none and expected_average_only_in (whose factor SAELens folds into the weights) do nothing.
// Clamping (SAELens's use_error_term): x -> x^(f with the clamps) + (x - x^(f)), so an SAE with
// nothing clamped, or a feature clamped to its own value, changes nothing. It is computed as
// x + (the changed features' decoder rows) times norm_out's factor, which that equals exactly.
#pragma once

#include <string>
#include <vector>

#include "engine/compute/hooks.h"
#include "engine/core/tensor.h"

namespace attnlab {

struct Sae {
  enum class Kind { Standard, JumpRelu, TopK };
  enum class Norm { None, ConstantNormRescale, LayerNorm };
  std::string folder, hook_name, architecture;
  Kind kind = Kind::Standard;
  Norm norm = Norm::None;
  int d_in = 0, d_sae = 0, k = 0;
  bool apply_b_dec_to_input = true, rescale_acts_by_decoder_norm = false;
  Tensor W_enc, b_enc, W_dec, b_dec, threshold;
  std::vector<float> dec_norm;  // ||W_dec_i|| (topk with rescale_acts_by_decoder_norm)
};

// Reads DIR/cfg.json and DIR/sae_weights.safetensors; Error naming what is missing or does not fit.
Sae load_sae(const std::string& dir);

// Per row of x [T, d_in]: the feature activations [T, d_sae] and the reconstruction [T, d_in].
struct SaeOutput {
  Tensor features, reconstruction;
};
SaeOutput sae_forward(const Sae& sae, const Tensor& x);

// One feature set to a value at some positions (empty: all).
struct FeatureClamp {
  int feature = 0;
  float value = 0;
  std::vector<int> positions;
};
// "F=V[:P,P...]" (F a feature index, V a number, P positions); Error otherwise.
FeatureClamp parse_feature_clamp(const std::string& text);

// The intervention at sae.hook_name: x -> decode(f with the clamps) + (x - decode(f)). The SAE
// must outlive the pass. Error for a feature or a width that does not fit.
HookEdit sae_clamp_edit(const Sae& sae, const std::vector<FeatureClamp>& clamps);

}  // namespace attnlab
