// Attention made elsewhere, opened for attnlab's views: transformers' `outputs.attentions`, a
// TransformerLens cache, a user's own module. The probabilities are all a view needs; no model,
// no weights, nothing in the file runs (no pickle). Formats (docs/attention-files.md):
//
//   .npz          `attentions` [layers, heads, T, S], [heads, T, S] or [layers, batch, heads, T, S]
//                 (torch.stack(outputs.attentions)); or one array per layer: `attentions_0`, ...,
//                 `arr_0`, ... (np.savez(f, *outputs.attentions)) or TransformerLens's
//                 `blocks.0.attn.hook_pattern`, ..., each [heads, T, S] or [batch, heads, T, S].
//                 `tokens` [T] (or [batch, T]) strings, `tokens_b` [S] for cross attention, and
//                 `mask` [S] (or [batch, S]): Hugging Face's attention_mask, 1 keeps a key, 0 is
//                 padding. np.savez or np.savez_compressed.
//   .safetensors  the same tensors (F32, F16 or BF16); `tokens`, `tokens_b` and `mask` as JSON lists
//                 in the header's __metadata__ (safetensors keeps only strings there).
//
// Everything is checked before a view sees it: shapes that disagree, NaN or infinite values and
// negative probabilities are Errors; rows that do not sum to 1 are warnings.
#pragma once

#include <string>
#include <vector>

#include "engine/compute/forward.h"
#include "engine/core/tensor.h"
#include "engine/model/model.h"

namespace attnlab {

struct AttentionFile {
  std::vector<Tensor> layers;                 // per layer [heads, T, S]
  std::vector<std::string> tokens, tokens_b;  // T query labels; S key labels of another sequence (cross)
  std::vector<uint8_t> key_kept;              // [S] from the file's mask (empty: no mask)
  std::string layout;                         // what was read, for people: "attentions [6, 12, 9, 9] (npz)"
  std::vector<std::string> warnings;          // rows that are not distributions, a batch chosen, ...

  int num_layers() const { return static_cast<int>(layers.size()); }
  int heads() const { return layers.empty() ? 0 : static_cast<int>(layers[0].dim(0)); }
  int queries() const { return layers.empty() ? 0 : static_cast<int>(layers[0].dim(1)); }
  int keys() const { return layers.empty() ? 0 : static_cast<int>(layers[0].dim(2)); }
  bool is_cross() const { return !tokens_b.empty(); }
};

// batch: which sequence of a batched file (-1: the only one, or the first with a warning when
// there are several). available: the memory free for it (bytes; <= 0 skips the check).
AttentionFile parse_attention_file(const std::string& bytes, const std::string& where, int batch = -1);
AttentionFile load_attention_file(const std::string& path, int batch = -1, double available = -1);

// The file as a pass's result, for the views and exports that draw probabilities: attention (or
// cross_attention), tokens, the mask's blocked keys; ids number the distinct token strings (there
// is no vocabulary).
// Taken by value: a caller done with the file moves it in, and its layers are not copied.
ForwardResult attention_result(AttentionFile file);

// A Model that holds only the shape of an attention file's result, for the app's views: layers and
// heads, max_len the longer sequence, the result's ids as its vocabulary (token_name(id) is the
// file's token), probabilities_only set; no weights, no tokenizer. source names the file.
Model attention_model(const ForwardResult& result, const std::string& source);

// A pass's result (or a file's) as an attention file that load_attention_file reads back to the
// same float32s: `attentions` [layers, heads, T, S] (every layer, or only `layer`), `tokens`,
// `tokens_b` in cross mode, and `mask` [S] when some keys are padding (blocked for every query
// of every head). np.savez's layout: numpy, attnlab.load_attention and the app open it.
std::string serialize_attention_file(const ForwardResult& r, int layer = -1);
void save_attention_file(const std::string& path, const ForwardResult& r, int layer = -1);

}  // namespace attnlab
