// Alignments from cross-attention (see alignment.h).
#include "engine/analysis/alignment.h"

#include <string>

namespace attnlab {

Alignment cross_alignment(const ForwardResult& r, const std::vector<int>& layers, const std::vector<int>& heads) {
  const std::vector<Tensor>& x = r.is_seq2seq() && r.decoder_cross_attention.empty() && r.is_cross()
                                     ? r.cross_attention
                                     : r.decoder_cross_attention;
  if (!r.is_seq2seq() || x.empty() || x[0].shape.size() != 3)
    throw Error("an alignment reads an encoder-decoder's cross-attention; this result has none");
  const int L = static_cast<int>(x.size()), H = static_cast<int>(x[0].dim(0));
  Alignment a;
  a.T = static_cast<int>(x[0].dim(1)), a.S = static_cast<int>(x[0].dim(2));
  auto every = [](int n) {
    std::vector<int> all(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
    return all;
  };
  const std::vector<int> ls = layers.empty() ? every(L) : layers, hs = heads.empty() ? every(H) : heads;
  for (int l : ls)
    if (l < 0 || l >= L)
      throw Error("alignment: no layer " + std::to_string(l) + " (the decoder has " + std::to_string(L) + ")");
  for (int h : hs)
    if (h < 0 || h >= H)
      throw Error("alignment: no head " + std::to_string(h) + " (a layer has " + std::to_string(H) + ")");
  const size_t n = static_cast<size_t>(a.T) * static_cast<size_t>(a.S);
  std::vector<double> sum(n, 0.0);  // in double: the mean of up to layers x heads rows
  for (int l : ls) {
    if (x[static_cast<size_t>(l)].numel() != static_cast<int64_t>(H) * static_cast<int64_t>(n))
      throw Error("alignment: layer " + std::to_string(l) + "'s cross-attention was not kept");
    const float* p = x[static_cast<size_t>(l)].ptr();
    for (int h : hs)
      for (size_t k = 0; k < n; ++k) sum[k] += p[static_cast<size_t>(h) * n + k];
  }
  const double count = static_cast<double>(ls.size() * hs.size());
  a.map.resize(n);
  a.best.assign(static_cast<size_t>(a.T), 0);
  for (int i = 0; i < a.T; ++i)
    for (int j = 0; j < a.S; ++j) {
      const size_t k = static_cast<size_t>(i) * static_cast<size_t>(a.S) + static_cast<size_t>(j);
      a.map[k] = static_cast<float>(sum[k] / count);
      if (a.map[k] > a.map[static_cast<size_t>(i) * static_cast<size_t>(a.S) +
                           static_cast<size_t>(a.best[static_cast<size_t>(i)])])
        a.best[static_cast<size_t>(i)] = j;
    }
  return a;
}

}  // namespace attnlab
