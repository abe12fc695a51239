// Encoder-decoders without Python (BART's structure; tests/crosscheck/hf_seq2seq.py checks them
// against transformers): the decoder layer's plan, what a pass must hold exactly (causal zeros,
// padded source keys at 0, the encoder run as a model of its own), and the errors.
#include <catch2/catch.hpp>

#include "engine/analysis/alignment.h"
#include "engine/analysis/methods.h"
#include "engine/compute/forward.h"
#include "engine/compute/generate.h"
#include "engine/compute/hooks.h"
#include "engine/compute/plan.h"
#include "engine/train/train_model.h"
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
  // training and gradients say they do not run encoder-decoders (not an internal error)
  TrainBatch batch;
  batch.B = 1, batch.T = 2, batch.ids = {2, 5}, batch.is_pad = {0, 0}, batch.targets = {5, -1};
  auto ops = make_reference_ops();
  CHECK_THROWS_WITH(train_step(m, *ops, batch, StepOptions{}, nullptr), Catch::Contains("encoder-decoders yet"));
  ForwardRequest grad;
  grad.ids = {2, 5};
  CHECK_THROWS_WITH(prediction_gradients(m, grad, -1, nullptr), Catch::Contains("encoder-decoders yet"));
  // the decoder alone (an analysis that runs the stack without the encoder) says what it lacks
  EncodeOptions o;
  CHECK_THROWS_WITH(cpu->encode(m, {2, 5}, AttnMask(), o), Catch::Contains("encoder-decoder's decoder"));
}

TEST_CASE("an encoder-decoder's parts as the views draw them: cross, decoder, encoder", "[seq2seq]") {
  const Model m = random_seq2seq();
  auto cpu = make_backend("cpu");
  ForwardRequest req;
  req.source_ids = random_ids(6, m.config.vocab_size, 4);
  req.source_ids.push_back(0);  // a <pad> the padding mask blocks
  req.mask.padding = true;
  req.target_ids = random_ids(5, m.config.vocab_size, 5);
  req.ids = decoder_input_ids(m, req.target_ids);
  const ForwardResult r = run_forward(m, *cpu, req);
  CHECK(r.target_ids == req.target_ids);  // the labels carried for the views, one per decoder position
  CHECK(r.target_tokens.size() == 5);
  {
    ForwardRequest wrong = req;
    wrong.target_ids.pop_back();
    CHECK_THROWS_WITH(run_forward(m, *cpu, wrong),
                      Catch::Contains("labels are as many as the decoder's inputs (4 and 5)"));
  }
  {  // the memory a pass takes counts the encoder's weights and probabilities and the cross-attention's
    const PassMemory pm = estimate_pass_memory(m, req);
    CHECK(pm.weights == resident_bytes(m.weights) + resident_bytes(m.encoder->weights));
    // decoder 3 x 4 x 5 x 5, cross 3 x 4 x 5 x 7, encoder 2 x 2 x 7 x 7 floats at least
    CHECK(pm.attention >= 4.0 * (3 * 4 * 5 * 5 + 3 * 4 * 5 * 7 + 2 * 2 * 7 * 7));
  }
  REQUIRE(r.source_mask.T == 7);
  REQUIRE(r.memory_mask.T == 5);
  REQUIRE(r.memory_mask.S == 7);

  // cross: the decoder's rows, the source's columns, in cross mode; the padded key blocked
  const ForwardResult x = seq2seq_part(r, Seq2SeqPart::Cross);
  REQUIRE(x.is_cross());
  CHECK(x.ids == r.ids);
  CHECK(x.cross_ids == r.source_ids);
  CHECK(x.cross_tokens == r.source_tokens);
  REQUIRE(x.cross_attention.size() == 3);
  for (int l = 0; l < 3; ++l) CHECK(max_abs_diff(x.probs(l), r.decoder_cross_attention[static_cast<size_t>(l)]) == 0);
  CHECK(x.mask.is_blocked(0, 4, 6));
  CHECK(!x.mask.is_blocked(0, 4, 5));
  CHECK(x.stacked_probs().shape == std::vector<int64_t>{3, 4, 5, 7});
  CHECK(x.next_logits == r.next_logits);

  // decoder: the causal self-attention, as the pass left it
  const ForwardResult d = seq2seq_part(r, Seq2SeqPart::Decoder);
  CHECK(!d.is_cross());
  for (int l = 0; l < 3; ++l) CHECK(max_abs_diff(d.probs(l), r.attention[static_cast<size_t>(l)]) == 0);
  CHECK(d.mask.is_blocked(0, 1, 2));  // causal

  // encoder: the source is the sequence, its 2 layers of 2 heads; the prediction stays the decoder's
  const ForwardResult e = seq2seq_part(r, Seq2SeqPart::Encoder);
  CHECK(!e.is_cross());
  CHECK(e.ids == r.source_ids);
  CHECK(e.tokens == r.source_tokens);
  REQUIRE(e.attention.size() == 2);
  CHECK(e.stacked_probs().shape == std::vector<int64_t>{2, 2, 7, 7});
  CHECK(max_abs_diff(e.probs(1), r.encoder_attention[1]) == 0);
  CHECK(e.mask.is_blocked(0, 0, 6));
  CHECK(!e.mask.is_blocked(0, 6, 0));
  CHECK(max_abs_diff(e.hidden, r.hidden) == 0);

  CHECK(parse_seq2seq_part("encoder") == Seq2SeqPart::Encoder);
  CHECK_THROWS_WITH(parse_seq2seq_part("self"), Catch::Contains("cross, decoder or encoder"));
  ForwardRequest one;
  one.ids = {5, 6};
  CHECK_THROWS_WITH(seq2seq_part(run_forward(*m.encoder, *cpu, one), Seq2SeqPart::Cross),
                    Catch::Contains("encoder-decoder"));
}

TEST_CASE("an alignment: the chosen heads' mean cross-attention, rows summing to 1, the argmax per row", "[seq2seq]") {
  const Model m = random_seq2seq();
  auto cpu = make_backend("cpu");
  ForwardRequest req;
  req.source_ids = random_ids(6, m.config.vocab_size, 4);
  req.ids = decoder_input_ids(m, random_ids(5, m.config.vocab_size, 5));
  const ForwardResult r = run_forward(m, *cpu, req);
  auto x = [&](int l, int h, int i, int j) {  // layer l's cross-attention [4 heads, 5, 6]
    return r.decoder_cross_attention[static_cast<size_t>(l)].data[static_cast<size_t>((h * 5 + i) * 6 + j)];
  };
  const Alignment all = cross_alignment(r, {}, {});
  REQUIRE(all.T == 5);
  REQUIRE(all.S == 6);
  for (int i = 0; i < 5; ++i) {
    double row = 0;
    for (int j = 0; j < 6; ++j) {
      double want = 0;  // the mean of 3 layers x 4 heads, summed here in another order
      for (int h = 3; h >= 0; --h)
        for (int l = 2; l >= 0; --l) want += x(l, h, i, j);
      want /= 12;
      // 12 terms in [0, 1]: each sum's rounding at most 12 u (double) before one float rounding
      CHECK(std::abs(all.map[static_cast<size_t>(i * 6 + j)] - want) <= kU32 * want + 1e-12);
      row += all.map[static_cast<size_t>(i * 6 + j)];
      CHECK(all.map[static_cast<size_t>(i * 6 + j)] <=
            all.map[static_cast<size_t>(i * 6 + all.best[static_cast<size_t>(i)])]);
    }
    // each head's row sums to 1 within its sum's rounding and the division's (as above); the mean
    // keeps that, and each of the 6 means is rounded to float once more
    CHECK(std::abs(row - 1.0) <= sum_bound(6, 1.0) + 2 * kU32 + 6 * kU32);
  }
  // one layer and one head: that head's map itself; the same from the shown cross part
  const Alignment one = cross_alignment(r, {1}, {2});
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 6; ++j) CHECK(one.map[static_cast<size_t>(i * 6 + j)] == x(1, 2, i, j));
  const Alignment shown = cross_alignment(seq2seq_part(r, Seq2SeqPart::Cross), {1}, {2});
  CHECK(shown.map == one.map);
  CHECK(cross_alignment(seq2seq_part(r, Seq2SeqPart::Encoder), {}, {}).map == all.map);
  CHECK_THROWS_WITH(cross_alignment(r, {3}, {}), Catch::Contains("no layer 3 (the decoder has 3)"));
  CHECK_THROWS_WITH(cross_alignment(r, {}, {4}), Catch::Contains("no head 4"));
  ForwardRequest one_seq;
  one_seq.ids = {5, 6};
  CHECK_THROWS_WITH(cross_alignment(run_forward(*m.encoder, *cpu, one_seq), {}, {}), Catch::Contains("has none"));
}

TEST_CASE("generate on an encoder-decoder: each greedy token the argmax of a teacher-forced pass", "[seq2seq]") {
  const Model m = random_seq2seq();
  auto cpu = make_backend("cpu");
  GenerateRequest g;
  g.source = random_ids(6, m.config.vocab_size, 4);
  g.prompt = {m.config.decoder_start_id};
  g.max_new = 6;
  g.keep_attention = true;
  const GenerateResult out = generate(m, *cpu, g);
  REQUIRE(out.ids.size() == 7);
  CHECK(out.ids.front() == 2);
  for (size_t k = 1; k < out.ids.size(); ++k) {
    ForwardRequest req;
    req.source_ids = g.source;
    req.ids.assign(out.ids.begin(), out.ids.begin() + static_cast<std::ptrdiff_t>(k));
    const ForwardResult r = run_forward(m, *cpu, req);
    const auto best = std::max_element(r.next_logits.begin(), r.next_logits.end()) - r.next_logits.begin();
    CHECK(out.ids[k] == best);
  }
  // the decoder's self-attention of the final sequence (its last token never run): 3 layers [4, 6, 6]
  REQUIRE(out.attention.size() == 3);
  CHECK(out.attention[0].shape == std::vector<int64_t>{4, 6, 6});
  // a forced first token, as a folder's forced_bos_token_id asks
  g.rules.forced_bos = 9;
  CHECK(generate(m, *cpu, g).ids[1] == 9);
  GenerateRequest none = g;
  none.source.clear();
  CHECK_THROWS_WITH(generate(m, *cpu, none), Catch::Contains("generates from a source"));
  GenerateRequest one;
  one.prompt = {5};
  one.source = {6};
  ModelConfig lm = m.config;
  lm.cross_attention = false;
  CHECK_THROWS_WITH(generate(random_model(lm, 3), *cpu, one), Catch::Contains("a source is for encoder-decoder"));
}
