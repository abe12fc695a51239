// Hook points: every activation of a pass has a name, TransformerLens's (hook_points.py and the
// components that use them), so a notebook's vocabulary carries over, and a pass can keep,
// replace or add to any of them.
//   hook_embed                         [T, d_model]  the token embedding's rows
//   hook_pos_embed                     [T, d_model]  learned or sinusoidal positions' term
//   (post-norm encoders: embed.hook_embed, embed.hook_pos_embed and embed.hook_token_type_embed,
//   as TransformerLens's BertEmbed, summed and then normalised into blocks.0.hook_resid_pre)
//   blocks.{l}.hook_resid_pre          [T, d_model]  the layer's input
//   blocks.{l}.ln1.hook_normalized     [T, d_model]  pre-norm: the attention's input
//   blocks.{l}.attn.hook_q / hook_k / hook_v  [T, heads, d_head] (keys and values per KV head
//                                      for grouped-query models, TransformerLens's ungrouped=False)
//   blocks.{l}.attn.hook_rot_q / hook_rot_k   rotary models: q and k after the rotation
//   blocks.{l}.attn.hook_attn_scores   [heads, T, S] the scores the softmax takes: q.k / sqrt(d_head)
//                                      plus the mask's additive terms, -inf where a key is blocked
//                                      (an edited row's probabilities are its softmax)
//   blocks.{l}.attn.hook_pattern       [heads, T, S] the probabilities (replacing a head's rows
//                                      recomputes its z from them; scores and pattern are edited
//                                      in a single forward pass only, `head` picks one head's rows)
//   blocks.{l}.attn.hook_z             [T, heads, d_head] each head's weighted values
//   blocks.{l}.hook_attn_out           [T, d_model]  the output projection (bias included)
//   blocks.{l}.hook_resid_mid          [T, d_model]  resid_pre + attn_out (attention-only pre-norm
//                                      layers: hook_resid_post, as TransformerLens's attn_only blocks)
//   blocks.{l}.ln2.hook_normalized     [T, d_model]  pre-norm: the MLP's input
//   blocks.{l}.mlp.hook_pre            [T, d_mlp]    the first projection (gated: the gate's)
//   blocks.{l}.mlp.hook_pre_linear     [T, d_mlp]    gated MLPs: the up projection
//   blocks.{l}.mlp.hook_post           [T, d_mlp]    after the activation (gated: act(pre) * pre_linear)
//   blocks.{l}.hook_mlp_out            [T, d_model]
//   blocks.{l}.hook_resid_post         [T, d_model]  pre-norm: the layer's output
//   ln_final.hook_normalized           [T, d_model]  after the final norm (models with one)
// Post-norm encoders (BERT, the articles' models) follow TransformerLens's BertBlock:
// hook_resid_mid = resid_pre + attn_out, ln1.hook_normalized = LN1(resid_mid) (the MLP's input),
// hook_resid_post = ln1.hook_normalized + mlp_out, hook_normalized_resid_post = LN2(resid_post)
// (the layer's output). Shapes have no batch axis.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace attnlab {

// An intervention on one named activation: replace its rows, or add to them (a steering vector).
struct HookEdit {
  enum class Kind { Replace, Add, Apply };
  Kind kind = Kind::Replace;
  std::string name;            // exactly as above
  Tensor value;                // rows x width (any shape with that many elements): T rows, one per position
                               // listed, or (Add) 1 row added at every position listed
  std::vector<int> positions;  // empty: every position
  float alpha = 1.0f;          // Add: value * alpha
  int head = -1;               // per-head values ([T, heads, d_head]): only this head's d_head columns
  // Apply: a function of the activation as the pass reaches it ([T, width], every position;
  // value, positions, alpha and head unused), e.g. a sparse autoencoder's clamped features
  std::function<void(Tensor&)> apply = nullptr;
};

struct HookSpec {
  std::vector<std::string> cache;  // names to keep; '*' matches any run of characters
  std::vector<HookEdit> edits;
  bool empty() const { return cache.empty() && edits.empty(); }
};

// One pass's hooks: the spec, and what the pass kept.
class HookRun {
 public:
  explicit HookRun(const HookSpec& spec) : spec_(spec) {}
  bool wanted(const std::string& name) const;  // kept or edited
  bool kept(const std::string& name) const;
  std::vector<const HookEdit*> edits_of(const std::string& name) const;  // in the order given
  // Applies the edits of `name` to value (rows = positions), then keeps a copy in `cache`
  // shaped as `shape` (same element count) when asked to. Error for an edit that does not fit.
  void visit(const std::string& name, Tensor& value, const std::vector<int64_t>& shape);
  std::map<std::string, Tensor> cache;
  std::set<std::string> met;  // every name the pass reached

  // After the pass: Error naming any edit whose activation the pass never reached.
  void check_all_met() const;

 private:
  const HookSpec& spec_;
};

// Mean ablation of head `head` of layer `layer` (TransformerLens's mean ablation, the mean taken
// over this input's positions): its attn.hook_z at every position becomes the mean of its z
// over the positions, so what it reads no longer depends on where. d_head = the model's head size.
HookEdit mean_ablation(int layer, int head, int d_head);

// '*' matches any run of characters (none included); everything else matches itself.
bool glob_match(const std::string& pattern, const std::string& s);

}  // namespace attnlab
