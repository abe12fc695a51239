// Encoder-decoders without Python (BART's structure; tests/crosscheck/hf_seq2seq.py checks them
// against transformers): the decoder layer's plan, what a pass must hold exactly (causal zeros,
// padded source keys at 0, the encoder run as a model of its own), and the errors.
#include <catch2/catch.hpp>

#include "engine/compute/forward.h"
#include "engine/compute/hooks.h"
#include "engine/compute/plan.h"
#include "tests/engine/test_util.h"
#include "tests/engine/tolerance.h"

using namespace attnlab;
using namespace attnlab::test;

namespace {

// A BART-shaped pair: post-LN, learned positions from row 2, embedding LayerNorm, a tied head with
// a bias; the encoder 2 layers of 2 heads, the decoder 3 of 4.
Model random_seq2seq() {
  ModelConfig d = small_config(16, 4, 3, 24, 64);
  d.num_classes = 0, d.labels.clear();
  d.positional = Positional::Learned;
  d.pos_offset = 2;
  d.embedding_norm = true;
  d.causal = d.cross_attention = d.lm_head = d.tied_lm_head = d.lm_head_bias = true;
  d.decoder_start_id = 2;
  d.pad_token_id = 0;
  Model m = random_model(d, 11);
  for (float& v : m.weights.lm_bias.data) v = 0.5f;
  ModelConfig e = d;
  e.num_heads = 2, e.num_layers = 2;
  e.causal = e.cross_attention = e.lm_head = e.tied_lm_head = e.lm_head_bias = false;
  auto enc = std::make_shared<Model>(random_model(e, 12));
  enc->weights.embedding = m.weights.embedding;  // shared, as BART's
  m.encoder = enc;
  return m;
}

}  // namespace

TEST_CASE("a decoder layer with cross-attention: its plan and weights", "[seq2seq]") {
  const Model m = random_seq2seq();
  const LayerPlan plan = make_layer_plan(m.config);
  REQUIRE(plan.memory > 0);
  REQUIRE(plan.cross_step > plan.attention_step);
  const Step& x = plan.steps[static_cast<size_t>(plan.cross_step)];
  CHECK(x.op == OpKind::CrossAttention);
  // keys and values are projections of the encoder's output, queries of the layer's own stream
  for (int in : {x.in[1], x.in[2]})
    for (const Step& s : plan.steps)
      if (s.out == in) CHECK((s.op == OpKind::Linear && s.in[0] == plan.memory));
  CHECK(plan.describe().find("CrossAttention(") != std::string::npos);
  CHECK(make_layer_plan(m.encoder->config).memory == -1);
  // the weight table: the cross-attention rows exist for the decoder only, positions have 2 more rows
  CHECK(m.weights.layers[0].cwq.shape == std::vector<int64_t>{16, 16});
  CHECK(m.weights.layers[0].ln3_g.numel() == 16);
  CHECK(m.encoder->weights.layers[0].cwq.empty());
  CHECK(m.weights.pos_embedding.dim(0) == 64 + 2);
  CHECK(m.weights.lm_bias.shape == std::vector<int64_t>{1, m.config.vocab_size});
}

TEST_CASE("an encoder-decoder's pass: causal decoder, padded source keys blocked, the encoder alone", "[seq2seq]") {
  const Model m = random_seq2seq();
  auto cpu = make_backend("cpu");
  const std::vector<int> labels = random_ids(9, m.config.vocab_size, 5);
  ForwardRequest req;
  req.source_ids = random_ids(7, m.config.vocab_size, 4);
  req.ids = decoder_input_ids(m, labels);
  CHECK(req.ids.front() == 2);
  CHECK(std::vector<int>(req.ids.begin() + 1, req.ids.end()) == std::vector<int>(labels.begin(), labels.end() - 1));
  const ForwardResult r = run_forward(m, *cpu, req);
  REQUIRE(r.is_seq2seq());
  REQUIRE(r.encoder_attention.size() == 2);
  REQUIRE(r.attention.size() == 3);
  REQUIRE(r.decoder_cross_attention.size() == 3);
  CHECK(r.encoder_attention[0].shape == std::vector<int64_t>{2, 7, 7});
  CHECK(r.decoder_cross_attention[2].shape == std::vector<int64_t>{4, 9, 7});
  for (size_t l = 0; l < 3; ++l) {
    const Tensor &P = r.attention[l], &X = r.decoder_cross_attention[l];
    for (int h = 0; h < 4; ++h)
      for (int i = 0; i < 9; ++i) {
        double causal = 0, cross = 0;
        for (int j = i + 1; j < 9; ++j) causal += P.data[static_cast<size_t>((h * 9 + i) * 9 + j)];
        for (int j = 0; j < 7; ++j) cross += X.data[static_cast<size_t>((h * 9 + i) * 7 + j)];
        CHECK(causal == 0.0);  // a masked score's weight is exactly 0
        // a softmax row of 7 probabilities sums to 1 within the sum's rounding (and the division's)
        CHECK(std::abs(cross - 1.0) <= sum_bound(7, 1.0) + 2 * kU32);
      }
  }
  // The encoder is a model of its own: the same ops on the same ids give the same numbers
  ForwardRequest alone;
  alone.ids = req.source_ids;
  const ForwardResult e = run_forward(*m.encoder, *cpu, alone);
  for (size_t l = 0; l < 2; ++l) CHECK(max_abs_diff(e.attention[l], r.encoder_attention[l]) == 0);
  CHECK(max_abs_diff(e.hidden, r.source_hidden) == 0);
  // with the LM head's bias: the next token's logits are the head's product plus 0.5
  REQUIRE(r.next_logits.size() == static_cast<size_t>(m.config.vocab_size));

  // A padded source: the padding keys get weight 0 in every cross-attention row; the rows of the
  // unpadded source's pass are those of the padded one's other keys (no key's weight moved to padding)
  ForwardRequest padded = req;
  padded.source_ids.insert(padded.source_ids.end(), 3, 0);
  padded.mask.padding = true;
  const ForwardResult p = run_forward(m, *cpu, padded);
  const Tensor& X = p.decoder_cross_attention[1];
  REQUIRE(X.shape == std::vector<int64_t>{4, 9, 10});
  for (int h = 0; h < 4; ++h)
    for (int i = 0; i < 9; ++i)
      for (int j = 7; j < 10; ++j) CHECK(X.data[static_cast<size_t>((h * 9 + i) * 10 + j)] == 0.0f);
}

TEST_CASE("an encoder-decoder's errors: no source, a source for one sequence, hooks", "[seq2seq][errors]") {
  const Model m = random_seq2seq();
  auto cpu = make_backend("cpu");
  ForwardRequest req;
  req.ids = {2, 5, 6};
  CHECK_THROWS_WITH(run_forward(m, *cpu, req), Catch::Contains("reads a source and a target"));
  req.source_ids = {7, 8};
  HookSpec hooks;
  hooks.cache = {"blocks.0.hook_resid_pre"};
  req.hooks = &hooks;
  CHECK_THROWS_WITH(run_forward(m, *cpu, req), Catch::Contains("named activations yet"));
  req.hooks = nullptr;
  req.source_ids = {7, 8, 99};
  CHECK_THROWS_WITH(run_forward(m, *cpu, req), Catch::Contains("the source: id 99"));
  ForwardRequest one;
  one.ids = {5, 6};
  one.source_ids = {7};
  CHECK_THROWS_WITH(run_forward(*m.encoder, *cpu, one), Catch::Contains("a source text is for encoder-decoder"));
  CHECK_THROWS_WITH(decoder_input_ids(*m.encoder, {5}), Catch::Contains("encoder-decoder"));
  // the decoder alone (an analysis that runs the stack without the encoder) says what it lacks
  EncodeOptions o;
  CHECK_THROWS_WITH(cpu->encode(m, {2, 5}, AttnMask(), o), Catch::Contains("encoder-decoder's decoder"));
}
