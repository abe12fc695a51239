// Head detectors (see detectors.h).
#include "engine/analysis/detectors.h"

#include <random>

namespace attnlab {

std::vector<int> repeated_random_tokens(const Model& model, int seq, uint64_t seed) {
  const int V = model.config.vocab_size, pad = model.vocab.pad_id();
  if (seq < 2) throw Error("--seq: a repeated sequence needs at least 2 tokens per copy");
  if (2 * seq > model.config.max_len)
    throw Error("--seq " + std::to_string(seq) + ": twice that is longer than the model's " +
                std::to_string(model.config.max_len) + " positions");
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> pick(0, V - 1);
  std::vector<int> ids;
  while (static_cast<int>(ids.size()) < seq)
    if (const int id = pick(gen); id != pad) ids.push_back(id);
  ids.insert(ids.end(), ids.begin(), ids.end());
  return ids;
}

Tensor head_detector_scores(const ForwardResult& r, HeadDetector kind, int seq) {
  if (r.is_cross()) throw Error("head detectors read self-attention");
  const int L = static_cast<int>(r.attention.size()), T = static_cast<int>(r.ids.size());
  if (T != 2 * seq)
    throw Error("head detectors read a sequence repeated twice (2 x " + std::to_string(seq) + " tokens)");
  const int H = L > 0 ? static_cast<int>(r.layer_probs(0)->dim(0)) : 0;
  Tensor out({L, H});
  for (int l = 0; l < L; ++l) {
    const std::shared_ptr<const Tensor> probs = r.layer_probs(l);  // kept, or recomputed (on demand)
    const Tensor& P = *probs;
    for (int h = 0; h < H; ++h) {
      auto p = [&](int i, int j) { return static_cast<double>(P.ptr()[(static_cast<size_t>(h) * T + i) * T + j]); };
      double sum = 0;
      int n = 0;
      if (kind == HeadDetector::PreviousToken) {
        for (int i = 1; i < T; ++i) sum += p(i, i - 1), ++n;
      } else {
        const int shift = kind == HeadDetector::Induction ? seq - 1 : seq;
        for (int i = seq; i < T; ++i) sum += p(i, i - shift), ++n;
      }
      out.at(l, h) = static_cast<float>(sum / n);
    }
  }
  return out;
}

Tensor detect_heads(const Model& model, Backend& backend, HeadDetector kind, int seq, uint64_t seed) {
  ForwardRequest req;
  req.ids = repeated_random_tokens(model, seq, seed);
  return head_detector_scores(run_forward(model, backend, req), kind, seq);
}

}  // namespace attnlab
