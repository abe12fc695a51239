// Writing attention files (engine/formats/attention_file.h): a pass's result in the format the
// reader takes. Apart from the reader because it needs the pass (layer_probs recomputes a layer
// kept as queries and keys); the reader, and the fuzz harness built on it, do not.
#include <algorithm>
#include <map>

#include "engine/core/io_util.h"
#include "engine/formats/attention_file.h"
#include "engine/formats/npy.h"

namespace attnlab {

std::string serialize_attention_file(const ForwardResult& r, int layer) {
  const int L = static_cast<int>(r.is_cross() ? r.cross_attention.size() : r.attention.size());
  if (L == 0) throw Error("no attention to write");
  if (layer < -1 || layer >= L) throw Error("layer " + std::to_string(layer) + " does not exist");
  const int first = layer < 0 ? 0 : layer, count = layer < 0 ? L : 1;
  const std::shared_ptr<const Tensor> head = r.layer_probs(first);
  const int64_t H = head->dim(0), T = head->dim(1), S = head->dim(2);
  Tensor all({count, H, T, S});
  for (int k = 0; k < count; ++k) {
    const std::shared_ptr<const Tensor> p = k == 0 ? head : r.layer_probs(first + k);  // kept, or recomputed
    std::copy(p->data.begin(), p->data.end(), all.data.begin() + static_cast<std::ptrdiff_t>(k * H * T * S));
  }
  std::map<std::string, Tensor> arrays{{"attentions", std::move(all)}};
  // the file's mask is Hugging Face's attention_mask: a key blocked for every query of every head
  // is padding (0); a causal or windowed mask is in the probabilities already
  const AttnMask& m = r.mask_of(first);
  Tensor kept({S}, 1.0f);
  bool padding = false;
  for (int64_t j = 0; j < S; ++j) {
    bool all_blocked = !m.blocked.empty();
    for (int64_t h = 0; h < H && all_blocked; ++h)
      for (int64_t i = 0; i < T && all_blocked; ++i)
        all_blocked = m.is_blocked(static_cast<int>(h), static_cast<int>(i), static_cast<int>(j));
    if (all_blocked) kept.data[static_cast<size_t>(j)] = 0.0f, padding = true;
  }
  if (padding) arrays.emplace("mask", std::move(kept));
  std::map<std::string, std::vector<std::string>> strings{{"tokens", r.tokens}};
  if (r.is_cross()) strings.emplace("tokens_b", r.cross_tokens);
  return serialize_npz(arrays, strings);
}

void save_attention_file(const std::string& path, const ForwardResult& r, int layer) {
  write_file_atomic(path, serialize_attention_file(r, layer));
}

}  // namespace attnlab
