// Attention masks: what the user asks for (MaskSpec) and what the backends apply (AttnMask).
// Semantics follow PyTorch's nn.MultiheadAttention: bool/int custom masks block where nonzero,
// float custom masks are added to the scores (-inf blocks). Combining = union of blocked
// positions plus the sum of additive terms. Blocked keys get probability exactly 0; a query row
// whose keys are all blocked is all zeros (PyTorch gives NaN there) and is reported as a warning.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/config.h"
#include "engine/formats/npy.h"
#include "engine/core/tensor.h"

namespace attnlab {

struct MaskSpec {
  bool padding = false;            // keys whose token is [PAD] are blocked
  bool causal = false;             // key j > query i is blocked
  int window = 0;                  // sliding window W: j visible iff |i - j| <= floor(W / 2)
  int stride = 0;                  // strided S: j visible iff |i - j| < S or (i - j) mod S == 0
  std::vector<int> global;         // Longformer global tokens: see all and are seen by all
  std::optional<NpyArray> custom;  // [T, S] or [heads, T, S]
  std::string custom_source;       // file name, for messages

  // Window, strided and global together form one sparse pattern: a key is visible when any of
  // them allows it. Global tokens alone therefore block nothing; they widen window/strided.
  bool has_sparse_pattern() const { return window > 0 || stride > 0; }
  bool empty() const { return !padding && !causal && !has_sparse_pattern() && !custom; }
  std::string describe() const;  // "causal + window:8", or "none"
};

// Parses one --mask argument (causal | padding | window:W | strided:S | global:0,7 |
// custom:FILE.npy) into spec. Error with the argument in the message when it is malformed.
void add_mask_arg(MaskSpec& spec, const std::string& arg);

struct AttnMask {
  int planes = 1;  // 1: shared by every head; else one plane per head
  int T = 0, S = 0;
  std::vector<uint8_t> blocked;  // [planes, T, S], empty when nothing is blocked
  std::vector<float> additive;   // [planes, T, S], empty when there is no additive term
  // The mask of the layers with a sliding window when only some layers have one (Gemma 2's
  // alternating layers, ModelConfig::mixed_windows): this mask plus the window. Null otherwise
  // (the window, when every layer has it, is in this mask itself).
  std::shared_ptr<const AttnMask> sliding;

  size_t index(int plane, int i, int j) const {
    return (static_cast<size_t>(plane) * static_cast<size_t>(T) + static_cast<size_t>(i)) * static_cast<size_t>(S) +
           static_cast<size_t>(j);
  }
  int plane_of_head(int h) const { return planes == 1 ? 0 : h; }
  bool is_blocked(int head, int i, int j) const {
    return !blocked.empty() && blocked[index(plane_of_head(head), i, j)] != 0;
  }
  float add(int head, int i, int j) const {
    return additive.empty() ? 0.0f : additive[index(plane_of_head(head), i, j)];
  }
  // [planes, T, S] float: 0 where visible, -inf where blocked, the additive term otherwise.
  Tensor as_tensor() const;
  // (plane, row) pairs whose keys are all blocked.
  std::vector<std::pair<int, int>> fully_blocked_rows() const;
};

// Builds the effective mask for T queries and S keys. key_ids are the key tokens' ids (for the
// padding mask; pad_id < 0 means the vocabulary has no [PAD]).
AttnMask build_mask(const MaskSpec& spec, int T, int S, int num_heads, const std::vector<int>& key_ids, int pad_id);

// Rows first..T-1 of a mask (every key): what the queries after a KV cache's prefix apply.
AttnMask mask_rows(const AttnMask& mask, int first);

// Human-readable warnings for rows with every key blocked ("" prefix names the attention kind).
std::vector<std::string> mask_warnings(const AttnMask& mask, const std::string& what);

// The user's mask with what the model itself always applies (a decoder's causal mask).
MaskSpec model_mask(const ModelConfig& c, MaskSpec spec);
// Blocks keys more than `window` positions before their query (i - j > window): a decoder's
// sliding window (Mistral), on top of its causal mask.
void block_outside_window(AttnMask& mask, int window);
// The model's own window on a pass's mask: blocked in place when every layer has it, else as
// the mask's `sliding` copy for the layers that do (none when the model has no window).
void apply_model_window(AttnMask& mask, const ModelConfig& c);
// The mask layer l applies: the sliding copy for a windowed layer of a mixed model, else mask.
const AttnMask& layer_mask(const AttnMask& mask, const ModelConfig& c, int layer);

}  // namespace attnlab
