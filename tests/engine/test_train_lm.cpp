// Language-model training: the next-token loss against the inference pass's -log p, and its
// gradients by central finite differences, on GPT-2-, Llama- and Qwen3-shaped decoders.
#include <cmath>
#include <filesystem>

#include "engine/compute/lm.h"
#include "engine/compute/plan.h"
#include "engine/train/train_model.h"
#include "tests/engine/fd_check.h"
#include "tests/engine/hf_test_model.h"
#include "tests/engine/pass_bound.h"
#include "tests/engine/test_util.h"
#include "tests/engine/tolerance.h"

using namespace attnlab;
using namespace attnlab::test;
namespace fs = std::filesystem;

namespace {

// A language model's training loss over equal-length sequences (no padding) can err by: the mean
// next-token cross-entropy has gradient (softmax - one-hot) / scored with respect to each scored
// row's logits, of 1-norm at most 2 / scored, so it moves by at most 2 max |d logit|; a logit
// h . W_v errs by ||W_v||_1 times the hidden state's bound (pass_bound) plus its own dot product's
// rounding over E terms (twice: both passes round).
double lm_loss_bound(const Model& m, const std::vector<std::vector<int>>& seqs, const PassSetup& setup) {
  auto ref = make_backend("reference");
  const Tensor& W = m.config.tied_lm_head ? m.weights.embedding : m.weights.lm_head;
  const int E = m.config.embed_size;
  double z_err = 0;
  for (const auto& q : seqs) {
    ForwardRequest req;
    req.ids = q;
    const ForwardResult r = run_forward(m, *ref, req);
    const PassBound pb = pass_bound(m, req, r, setup);
    for (int t = 0; t < static_cast<int>(q.size()); ++t)
      for (int v = 0; v < m.config.vocab_size; ++v) {
        double w1 = 0, terms = 0;
        for (int e = 0; e < E; ++e) {
          w1 += std::fabs(W.at(v, e));
          terms += std::fabs(static_cast<double>(r.hidden.at(t, e)) * W.at(v, e));
        }
        // (Gemma 2's cap on the logits: slope <= 1, and its own rounding, 8 u of the cap)
        z_err = std::max(z_err, w1 * pb.hidden + 2 * sum_bound(E, terms) + 8 * kU32 * m.config.final_softcap);
      }
  }
  return 2 * z_err;
}

}  // namespace

TEST_CASE("language-model training: next-token loss as a pass gives it, gradients by finite differences",
          "[train][fd][lm]") {
  const std::string dir = scratch_dir("train", "lm");
  // GPT-2 (learned positions, LayerNorm, GELU, tied head), Llama (RoPE, RMSNorm, SwiGLU, 4 query
  // heads over 2 key/value heads, untied head), Qwen3 (q/k norm, heads of 6 over a hidden size of 16)
  for (const int kind : {0, 1, 2}) {
    CAPTURE(kind);
    const Model m0 = tiny_decoder(dir + "/" + std::to_string(kind), kind == 0, 0, kind == 2, kind == 2 ? 6 : 0);
    Model m = m0;
    auto ops = make_reference_ops();
    const std::vector<std::vector<int>> seqs = {random_ids(6, m.config.vocab_size, 1),
                                                random_ids(6, m.config.vocab_size, 2)};
    const std::vector<int> loss_from = {0, 2};  // the second sequence scored from position 2 on
    const TrainBatch batch = make_batch(m, seqs, {}, loss_from);
    REQUIRE(batch.targets.size() == 12);
    CHECK(batch.targets[0] == seqs[0][1]);
    CHECK(batch.targets[5] == -1);  // the last position predicts nothing
    CHECK(batch.targets[6 + 1] == -1);
    CHECK(batch.targets[6 + 2] == seqs[1][3]);

    // the loss is the mean of -log p(next token) that inference gives at each scored position
    auto ref = make_backend("reference");
    double expect = 0;
    int scored = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      ForwardRequest req;
      req.ids = seqs[i];
      const ForwardResult r = run_forward(m, *ref, req);
      for (int t = loss_from[i]; t + 1 < 6; ++t, ++scored)
        expect -= std::log(next_token_probability(m, r.hidden, t, seqs[i][static_cast<size_t>(t + 1)]));
    }
    expect /= scored;
    const double f_err = lm_loss_bound(m, seqs, kReferencePass);
    const StepOutput out = train_step(m, *ops, batch, {}, nullptr);
    CHECK(out.scored == scored);
    CHECK(std::fabs(out.loss - expect) <= f_err);

    ModelWeights grads = zeros_like(m.weights);
    train_step(m, *ops, batch, {}, &grads);
    auto loss = [&] { return train_step(m, *ops, batch, {}, nullptr).loss; };
    const auto params = parameters(m.weights);
    const auto gparams = parameters(grads);
    REQUIRE(params.size() == gparams.size());
    const int checked =
        check_parameter_grads(params, gparams, loss, f_err, 3, [](float, double, double) { return 0.0; });
    CHECK(checked > 40);
    // the embedding rows of the batch's tokens get gradients (the input side), but for the last
    // one's: under the causal mask it reaches only the last position, which predicts nothing
    for (int id : std::vector<int>(seqs[0].begin(), seqs[0].end() - 1)) {
      double g = 0;
      for (int e = 0; e < m.config.embed_size; ++e) g += std::fabs(grads.embedding.at(id, e));
      CHECK(g > 0);
    }
  }
}

TEST_CASE("a sliding-window language model trains with its window: the loss is inference's", "[train][lm]") {
  // Mistral (a window of 3 on every layer) and Gemma 2 (on layers 0 and 2), on sequences of 9:
  // the batched training pass blocks what the inference mask blocks, layer by layer
  for (const bool gemma : {false, true}) {
    CAPTURE(gemma);
    const std::string dir = scratch_dir("train", gemma ? "lm-window-gemma" : "lm-window");
    const Model m = gemma ? tiny_gemma2(dir) : tiny_decoder(dir, false, 3);
    const std::vector<std::vector<int>> seqs = {random_ids(9, m.config.vocab_size, 1),
                                                random_ids(9, m.config.vocab_size, 2)};
    auto ref = make_backend("reference");
    double expect = 0;
    for (const auto& q : seqs) {
      ForwardRequest req;
      req.ids = q;
      const ForwardResult r = run_forward(m, *ref, req);
      for (int t = 0; t + 1 < 9; ++t)
        expect -= std::log(next_token_probability(m, r.hidden, t, q[static_cast<size_t>(t + 1)]));
    }
    expect /= 16;
    // the reference's own rounding, and the cpu's batched pass against the reference's
    const double f_err = lm_loss_bound(m, seqs, kReferencePass), cpu_err = f_err + lm_loss_bound(m, seqs, kCpuPass);
    StepOptions keep;
    keep.keep_attention = true;
    for (const char* backend : {"reference", "cpu"}) {
      CAPTURE(backend);
      auto ops = make_ops(backend);
      const StepOutput out = train_step(m, *ops, make_batch(m, seqs, {}), keep, nullptr);
      // (Gemma's bound is too loose to mean much: see test_gemma2.cpp; its loss is checked against
      // transformers' in hf_decoders)
      if (!gemma) CHECK(std::fabs(out.loss - expect) <= (std::string(backend) == "cpu" ? cpu_err : f_err));
      // each layer's probabilities: the 3 keys i - 2 .. i on a windowed layer, every earlier key on a full one
      REQUIRE(out.attention.size() == static_cast<size_t>(m.config.num_layers));
      for (int l = 0; l < m.config.num_layers; ++l)
        for (int bh = 0; bh < 2 * m.config.num_heads; ++bh)
          for (int i = 0; i < 9; ++i)
            for (int j = 0; j < 9; ++j) {
              const float p = out.attention[static_cast<size_t>(l)].data[static_cast<size_t>((bh * 9 + i) * 9 + j)];
              const bool visible = j <= i && (!m.config.layer_slides(l) || i - j < 3);
              CHECK((p > 0.0f) == visible);
            }
    }
    fs::remove_all(dir);
  }
}
