// Training: every backward is checked by central finite differences (reference ops and the whole
// model), the fast ops are held to the reference ops on awkward shapes, and the training
// forward agrees with the inference forward.
#include <cmath>

#include <array>
#include <cstring>
#include <map>

#include "engine/plan.h"
#include "engine/train_model.h"
#include "tests/test_util.h"

using namespace attnlab;
using namespace attnlab::test;

namespace {

double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (size_t k = 0; k < a.data.size(); ++k) s += static_cast<double>(a.data[k]) * b.data[k];
  return s;
}

// Central difference of f at x[k], in double around float perturbations.
template <class F>
double central_diff(Tensor& x, size_t k, F f, float h = 1e-2f) {
  const float keep = x.data[k];
  x.data[k] = keep + h;
  const double up = f();
  x.data[k] = keep - h;
  const double down = f();
  x.data[k] = keep;
  return (up - down) / (2.0 * h);
}

// The gradient bound for float32 finite differences: the step (1e-2) makes truncation error
// ~h^2 |f'''| and rounding ~1e-7 |f| / h; 2% of the gradient plus 2e-3 absolute covers both
// with room, and a wrong backward misses it by orders of magnitude.
void check_grad(double fd, double an, const std::string& what) {
  INFO(what << ": finite difference " << fd << ", backward " << an);
  CHECK(std::fabs(fd - an) <= 2e-3 + 2e-2 * std::fabs(fd));
}

AttnArgs attn_shape(int B, int T, int H, int D, const std::vector<uint8_t>* pad, bool causal, const Tensor* rel,
                    int max_len, const std::vector<uint8_t>* keep) {
  AttnArgs s;
  s.B = B, s.T = T, s.H = H, s.D = D, s.key_blocked = pad, s.causal = causal, s.rel = rel, s.max_len = max_len;
  s.drop_keep = keep;
  s.drop_scale = keep ? 1.0f / 0.8f : 1.0f;
  return s;
}

}  // namespace

TEST_CASE("reference linear and LayerNorm backward match finite differences", "[train][fd]") {
  auto ops = make_reference_ops();
  Tensor x = random_tensor({3, 5}, 1), W = random_tensor({4, 5}, 2), b = random_tensor({4}, 3),
         R = random_tensor({3, 4}, 4);
  auto loss = [&] {
    Tensor y;
    ops->linear(x, W, b, y);
    return dot(y, R);
  };
  Tensor dx, dW({4, 5}), db({4});
  ops->linear_backward(x, W, R, &dx, dW, db);
  for (size_t k = 0; k < x.data.size(); ++k) check_grad(central_diff(x, k, loss), dx.data[k], "linear dx");
  for (size_t k = 0; k < W.data.size(); ++k) check_grad(central_diff(W, k, loss), dW.data[k], "linear dW");
  for (size_t k = 0; k < b.data.size(); ++k) check_grad(central_diff(b, k, loss), db.data[k], "linear db");

  Tensor g = random_tensor({6}, 5), beta = random_tensor({6}, 6), xl = random_tensor({4, 6}, 7),
         Rl = random_tensor({4, 6}, 8);
  auto ln_loss = [&] {
    Tensor y, xh, rs;
    ops->layer_norm(xl, g, beta, 1e-5f, y, xh, rs);
    return dot(y, Rl);
  };
  Tensor y, xh, rs, dxl, dg({6}), dbeta({6});
  ops->layer_norm(xl, g, beta, 1e-5f, y, xh, rs);
  ops->layer_norm_backward(xh, rs, g, Rl, dxl, dg, dbeta);
  for (size_t k = 0; k < xl.data.size(); ++k)
    check_grad(central_diff(xl, k, ln_loss, 1e-3f), dxl.data[k], "layer_norm dx");
  for (size_t k = 0; k < g.data.size(); ++k) check_grad(central_diff(g, k, ln_loss), dg.data[k], "layer_norm dg");
  for (size_t k = 0; k < beta.data.size(); ++k)
    check_grad(central_diff(beta, k, ln_loss), dbeta.data[k], "layer_norm db");
}

TEST_CASE("reference attention backward matches finite differences with masks, dropout, relative", "[train][fd]") {
  auto ops = make_reference_ops();
  const int B = 2, T = 4, H = 2, D = 3, E = H * D, max_len = 5;
  std::vector<uint8_t> pad = {0, 0, 0, 0, 0, 0, 1, 1};  // second sequence: two [PAD] keys
  Tensor rel = random_tensor({2 * max_len - 1, E}, 9, 0.5f);
  std::vector<uint8_t> keep(static_cast<size_t>(B * H * T * T));
  std::mt19937 rng(3);
  for (auto& k : keep) k = rng() % 5 != 0;
  for (const bool causal : {false, true})
    for (const bool use_rel : {false, true})
      for (const bool use_drop : {false, true}) {
        CAPTURE(causal, use_rel, use_drop);
        const AttnArgs s =
            attn_shape(B, T, H, D, &pad, causal, use_rel ? &rel : nullptr, max_len, use_drop ? &keep : nullptr);
        Tensor Q = random_tensor({B * T, E}, 10), K = random_tensor({B * T, E}, 11), V = random_tensor({B * T, E}, 12);
        const Tensor R = random_tensor({B * T, E}, 13);
        auto loss = [&] {
          Tensor P, ctx;
          ops->attention(s, Q, K, V, P, ctx);
          return dot(ctx, R);
        };
        Tensor P, ctx, dQ, dK, dV, drel(rel.shape);
        ops->attention(s, Q, K, V, P, ctx);
        ops->attention_backward(s, Q, K, V, P, R, dQ, dK, dV, use_rel ? &drel : nullptr);
        for (size_t k = 0; k < Q.data.size(); ++k) check_grad(central_diff(Q, k, loss), dQ.data[k], "dQ");
        for (size_t k = 0; k < K.data.size(); ++k) check_grad(central_diff(K, k, loss), dK.data[k], "dK");
        for (size_t k = 0; k < V.data.size(); ++k) check_grad(central_diff(V, k, loss), dV.data[k], "dV");
        if (use_rel)
          for (size_t k = 0; k < rel.data.size(); ++k) check_grad(central_diff(rel, k, loss), drel.data[k], "drel");
        // blocked keys get no gradient
        for (int t = 6; t < 8; ++t)
          for (int e = 0; e < E; ++e) {
            CHECK(dK.at(t, e) == 0.0f);
            CHECK(dV.at(t, e) == 0.0f);
          }
      }
}

TEST_CASE("activation ops: cpu matches the reference, GELU is exact and independent of alignment", "[train][cpu]") {
  auto ref = make_reference_ops();
  auto cpu = make_ops("cpu");
  for (const int64_t n : {1, 7, 4095, 4096, 4097, 20000})
    for (const Activation act : {Activation::Relu, Activation::Gelu, Activation::GeluTanh}) {
      CAPTURE(n, to_string(act));
      const Tensor h = random_tensor({n}, static_cast<uint64_t>(n), 3.0f);
      Tensor a1, a2;
      ref->activation(h, act, a1);
      cpu->activation(h, act, a2);
      CHECK(max_abs_diff(a1, a2) < 1e-6);  // Eigen's float erf vs the double one
      // GELU(x) = x * Phi(x): spot values from the definition
      for (int64_t k = 0; k < n; k += 997) {
        const double x = h.data[static_cast<size_t>(k)];
        const double want = act == Activation::Relu ? std::max(0.0, x)
                            : act == Activation::Gelu
                                ? 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)))
                                : 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
        CHECK(std::fabs(a2.data[static_cast<size_t>(k)] - want) < 1e-6);
      }
      // the same values one float further into a buffer give the same bits
      if (n > 1) {
        Tensor shifted({n + 1});
        std::copy(h.data.begin(), h.data.end(), shifted.data.begin() + 1);
        Tensor a3;
        cpu->activation(shifted, act, a3);
        CHECK(std::equal(a2.data.begin(), a2.data.end(), a3.data.begin() + 1));
      }
      const Tensor da = random_tensor({n}, 5);
      Tensor d1 = da, d2 = da;
      ref->activation_backward(h, act, d1);
      cpu->activation_backward(h, act, d2);
      CHECK(max_abs_diff(d1, d2) < 1e-5);
    }
}

TEST_CASE("cpu training ops match the reference on awkward shapes", "[train][cpu]") {
  auto ref = make_reference_ops();
  auto cpu = make_ops("cpu");
  struct S {
    int B, T, H, D;
  };
  for (const S sh : {S{1, 1, 1, 1}, S{1, 1, 8, 4}, S{3, 7, 2, 5}, S{2, 33, 16, 2}, S{1, 200, 4, 8}}) {
    CAPTURE(sh.B, sh.T, sh.H, sh.D);
    const int E = sh.H * sh.D, N = sh.B * sh.T, max_len = 256;
    const Tensor x = random_tensor({N, E}, 1), W = random_tensor({E + 3, E}, 2), b = random_tensor({E + 3}, 3);
    Tensor y1, y2;
    ref->linear(x, W, b, y1);
    cpu->linear(x, W, b, y2);
    CHECK(max_abs_diff(y1, y2) < 1e-4);
    const Tensor dy = random_tensor({N, E + 3}, 4);
    Tensor dx1, dx2, dW1({E + 3, E}), dW2({E + 3, E}), db1({E + 3}), db2({E + 3});
    ref->linear_backward(x, W, dy, &dx1, dW1, db1);
    cpu->linear_backward(x, W, dy, &dx2, dW2, db2);
    CHECK(max_abs_diff(dx1, dx2) < 1e-4);
    CHECK(max_abs_diff(dW1, dW2) < 1e-3);  // sums over N rows
    CHECK(max_abs_diff(db1, db2) < 1e-3);

    const Tensor g = random_tensor({E}, 5), bb = random_tensor({E}, 6);
    Tensor ya, yb, ha, hb, ra, rb;
    ref->layer_norm(x, g, bb, 1e-5f, ya, ha, ra);
    cpu->layer_norm(x, g, bb, 1e-5f, yb, hb, rb);
    CHECK(max_abs_diff(ya, yb) < 1e-4);
    Tensor dxa, dxb, dga({E}), dgb({E}), dba({E}), dbb({E});
    const Tensor dyl = random_tensor({N, E}, 7);
    ref->layer_norm_backward(ha, ra, g, dyl, dxa, dga, dba);
    cpu->layer_norm_backward(hb, rb, g, dyl, dxb, dgb, dbb);
    if (E > 1) CHECK(max_abs_diff(dxa, dxb) < 1e-3);  // E == 1 normalises to 0: dx is noise / rstd
    CHECK(max_abs_diff(dga, dgb) < 1e-3);
    CHECK(max_abs_diff(dba, dbb) < 1e-3);

    std::vector<uint8_t> pad(static_cast<size_t>(N), 0);
    for (int bi = 0; bi < sh.B; ++bi)
      if (bi % 2 == 1 && sh.T > 2) pad[static_cast<size_t>(bi * sh.T + sh.T - 1)] = 1;
    std::vector<uint8_t> keep(static_cast<size_t>(sh.B * sh.H * sh.T * sh.T));
    std::mt19937 rng(5);
    for (auto& k : keep) k = rng() % 4 != 0;
    const Tensor rel = random_tensor({2 * max_len - 1, E}, 8, 0.3f);
    for (const bool variant : {false, true}) {
      const AttnArgs s = attn_shape(sh.B, sh.T, sh.H, sh.D, &pad, variant, variant ? &rel : nullptr, max_len,
                                    variant ? &keep : nullptr);
      const Tensor Q = random_tensor({N, E}, 9), K = random_tensor({N, E}, 10), V = random_tensor({N, E}, 11);
      Tensor P1, P2, c1, c2;
      ref->attention(s, Q, K, V, P1, c1);
      cpu->attention(s, Q, K, V, P2, c2);
      CHECK(max_abs_diff(P1, P2) < 1e-5);
      CHECK(max_abs_diff(c1, c2) < 1e-4);
      const Tensor dc = random_tensor({N, E}, 12);
      Tensor q1, k1, v1, q2, k2, v2, r1(rel.shape), r2(rel.shape);
      ref->attention_backward(s, Q, K, V, P1, dc, q1, k1, v1, variant ? &r1 : nullptr);
      cpu->attention_backward(s, Q, K, V, P2, dc, q2, k2, v2, variant ? &r2 : nullptr);
      CHECK(max_abs_diff(q1, q2) < 1e-4);
      CHECK(max_abs_diff(k1, k2) < 1e-4);
      CHECK(max_abs_diff(v1, v2) < 1e-4);
      if (variant) CHECK(max_abs_diff(r1, r2) < 1e-3);
    }
  }
}

namespace {

Model tiny_model(NormPlacement norm, Activation act, Positional pos, Pooling pool, uint64_t seed, int ff = 6,
                 bool extras = false) {
  ModelConfig c;
  c.vocab_size = 12, c.embed_size = 8, c.num_heads = 2, c.num_layers = 2, c.ff_dim = ff, c.max_len = 6;
  c.num_classes = 3, c.norm = norm, c.activation = act, c.positional = pos, c.pooling = pool;
  c.labels = {"a", "b", "c"};
  if (extras) add_extras(c);
  Model m = random_model(c, seed);
  // Non-trivial LayerNorm gains and biases, so their gradients are exercised too.
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.2f);
  std::vector<Tensor*> norms = {&m.weights.emb_ln_g, &m.weights.emb_ln_b, &m.weights.final_ln_g, &m.weights.final_ln_b};
  for (auto& L : m.weights.layers)
    for (Tensor* t : {&L.ln1_g, &L.ln1_b, &L.ln2_g, &L.ln2_b}) norms.push_back(t);
  for (Tensor* t : norms)
    for (float& v : t->data) v += n(rng);
  return m;
}

}  // namespace

TEST_CASE("whole-model backward matches finite differences", "[train][fd]") {
  struct V {
    NormPlacement norm;
    Activation act;
    Positional pos;
    Pooling pool;
    float dropout;
    int ff;
    bool extras = false;
  };
  for (const V v :
       {V{NormPlacement::Post, Activation::Gelu, Positional::Learned, Pooling::Mean, 0.0f, 6},
        V{NormPlacement::Pre, Activation::Gelu, Positional::Relative, Pooling::MaskedMean, 0.0f, 6},
        V{NormPlacement::Post, Activation::Gelu, Positional::Sinusoidal, Pooling::Cls, 0.2f, 6},
        V{NormPlacement::Pre, Activation::Relu, Positional::Learned, Pooling::MaskedMean, 0.3f, 6},
        V{NormPlacement::Post, Activation::Relu, Positional::None, Pooling::Mean, 0.0f, 0},
        V{NormPlacement::Post, Activation::GeluTanh, Positional::Learned, Pooling::Cls, 0.0f, 6, true},
        V{NormPlacement::Pre, Activation::GeluTanh, Positional::Relative, Pooling::MaskedMean, 0.2f, 6, true}}) {
    CAPTURE(to_string(v.norm), to_string(v.act), to_string(v.pos), to_string(v.pool), v.dropout, v.ff, v.extras);
    Model m = tiny_model(v.norm, v.act, v.pos, v.pool, 17, v.ff, v.extras);
    auto ops = make_reference_ops();
    const TrainBatch batch = make_batch(m, {{3, 4, 5, 6, 7}, {8, 9, 3}, {10, 11, 4, 5}}, {0, 2, 1});
    StepOptions opt;
    opt.dropout = v.dropout;
    opt.dropout_seed = 99;  // the same dropout masks for every evaluation below
    ModelWeights grads = zeros_like(m.weights);
    train_step(m, *ops, batch, opt, &grads);
    auto loss = [&] { return train_step(m, *ops, batch, opt, nullptr).loss; };
    const auto params = parameters(m.weights);
    const auto gparams = parameters(grads);
    REQUIRE(params.size() == gparams.size());
    std::mt19937 pick(1);
    int checked = 0;
    for (size_t p = 0; p < params.size(); ++p) {
      // a few entries of every tensor (all of the small ones)
      const size_t n = params[p]->data.size();
      for (int r = 0; r < 4; ++r) {
        const size_t k = n <= 4 ? static_cast<size_t>(r) : pick() % n;
        if (k >= n) break;
        check_grad(central_diff(*params[p], k, loss, 1e-2f), gparams[p]->data[k], "parameter " + std::to_string(p));
        ++checked;
      }
    }
    CHECK(checked > 60);
  }
}

TEST_CASE("cpu training step matches the reference step", "[train][cpu]") {
  for (const Positional pos : {Positional::Sinusoidal, Positional::Relative}) {
    Model m = tiny_model(NormPlacement::Post, Activation::Gelu, pos, Pooling::MaskedMean, 5);
    m.config.max_len = 6;
    auto ref = make_reference_ops();
    auto cpu = make_ops("cpu");
    const TrainBatch batch = make_batch(m, {{3, 4, 5, 6, 7, 8}, {8, 9, 3}, {10}}, {0, 2, 1});
    StepOptions opt;
    opt.dropout = 0.1f;
    opt.dropout_seed = 4;
    ModelWeights g1 = zeros_like(m.weights), g2 = zeros_like(m.weights);
    const StepOutput a = train_step(m, *ref, batch, opt, &g1);
    const StepOutput b = train_step(m, *cpu, batch, opt, &g2);
    CHECK(a.loss == Approx(b.loss).epsilon(1e-5));
    const auto p1 = parameters(g1), p2 = parameters(g2);
    for (size_t p = 0; p < p1.size(); ++p) CHECK(max_abs_diff(*p1[p], *p2[p]) < 1e-4);
  }
}

TEST_CASE("activation checkpointing: the same loss and bit-identical gradients, dropout included", "[train][checkpoint]") {
  for (const NormPlacement norm : {NormPlacement::Post, NormPlacement::Pre})
    for (const char* backend : {"reference", "cpu"}) {
      Model m = tiny_model(norm, Activation::Gelu, Positional::Relative, Pooling::MaskedMean, 5);
      m.config.max_len = 6;
      auto ops = make_ops(backend);
      const TrainBatch batch = make_batch(m, {{3, 4, 5, 6, 7, 8}, {8, 9, 3}, {10}}, {0, 2, 1});
      StepOptions opt;
      opt.dropout = 0.2f;
      opt.dropout_seed = 11;
      ModelWeights g1 = zeros_like(m.weights), g2 = zeros_like(m.weights);
      const StepOutput a = train_step(m, *ops, batch, opt, &g1);
      opt.checkpoint = true;
      const StepOutput b = train_step(m, *ops, batch, opt, &g2);
      CHECK(a.loss == b.loss);
      const auto p1 = parameters(g1), p2 = parameters(g2);
      REQUIRE(p1.size() == p2.size());
      double worst = 0, total = 0;
      for (size_t p = 0; p < p1.size(); ++p) {
        worst = std::max(worst, max_abs_diff(*p1[p], *p2[p]));
        for (float v : p1[p]->data) total += std::fabs(v);
      }
      CHECK(worst == 0.0);
      CHECK(total > 0.0);  // gradients that exist
    }
}

TEST_CASE("training forward equals inference forward over the whole sweep", "[train][plan]") {
  // Both run the one layer plan, but through different attention kernels (batches with padding
  // and causal flags vs one sequence with any mask) and different callers: any drift between
  // training and what the app shows fails here. Bound 1e-5 on probabilities (float32 with the
  // same GEMMs; only summation inside the softmax kernels differs).
  auto cpu_ops = make_ops("cpu");
  auto cpu = make_backend("cpu");
  for (const int H : {1, 2, 8, 16})
    for (const Pooling pool : {Pooling::Mean, Pooling::MaskedMean, Pooling::Cls})
      for_each_config({{1, 16, H, 2, 24}, {7, 16, H, 2, 24}, {200, 16, H, 2, 24}},
                      [&](const ShapeCase& sh, ModelConfig c) {
                        CAPTURE(to_string(pool));
                        c.max_len = 256;
                        c.pooling = pool;
                        const Model m = random_model(c, static_cast<uint64_t>(sh.T * 31 + H));
                        const std::vector<int> ids = random_ids(sh.T, c.vocab_size, static_cast<uint64_t>(H));
                        StepOptions opt;
                        opt.keep_attention = true;
                        const StepOutput s = train_step(m, *cpu_ops, make_batch(m, {ids}, {1}), opt, nullptr);
                        ForwardRequest req;
                        req.ids = ids;
                        const ForwardResult r = run_forward(m, *cpu, req);
                        for (int l = 0; l < c.num_layers; ++l) {
                          Tensor p = s.attention[static_cast<size_t>(l)];
                          p.shape.erase(p.shape.begin());  // batch of one
                          CHECK(max_abs_diff(p, r.probs(l)) < 1e-5);
                        }
                        for (int k = 0; k < c.num_classes; ++k)
                          CHECK(std::fabs(s.logits.at(0, k) - r.logits[static_cast<size_t>(k)]) < 1e-4);
                        CHECK(s.predicted[0] == r.predicted);
                      });
}

TEST_CASE("a padded training batch equals inference of each padded sequence with the padding mask", "[train][plan]") {
  for (const Positional pos : {Positional::Learned, Positional::Relative})
    for (const NormPlacement norm : {NormPlacement::Post, NormPlacement::Pre}) {
      ModelConfig c = small_config(16, 4, 2, 24, 64);
      c.positional = pos, c.norm = norm, c.pooling = Pooling::MaskedMean;
      const Model m = random_model(c, 9);
      for (const std::string ops_name : {"reference", "cpu"}) {
        CAPTURE(to_string(pos), to_string(norm), ops_name);
        auto ops = make_ops(ops_name);
        auto backend = make_backend(ops_name);
        const std::vector<std::vector<int>> seqs = {random_ids(1, c.vocab_size, 1), random_ids(9, c.vocab_size, 2),
                                                    random_ids(30, c.vocab_size, 3)};
        StepOptions opt;
        opt.keep_attention = true;
        const StepOutput s = train_step(m, *ops, make_batch(m, seqs, {0, 1, 2}), opt, nullptr);
        const std::vector<ForwardResult> r = run_forward_batch(m, *backend, seqs, MaskSpec{});
        const int64_t per_seq = s.attention[0].numel() / 3;
        for (int b = 0; b < 3; ++b) {
          for (int l = 0; l < c.num_layers; ++l) {
            const Tensor& all = s.attention[static_cast<size_t>(l)];
            Tensor p({c.num_heads, 30, 30});
            std::copy(all.data.begin() + b * per_seq, all.data.begin() + (b + 1) * per_seq, p.data.begin());
            CHECK(max_abs_diff(p, r[static_cast<size_t>(b)].probs(l)) < 1e-5);
          }
          for (int k = 0; k < c.num_classes; ++k)
            CHECK(std::fabs(s.logits.at(b, k) - r[static_cast<size_t>(b)].logits[static_cast<size_t>(k)]) < 1e-4);
        }
      }
    }
}

TEST_CASE("the layer plan: one list of steps per norm placement", "[train][plan]") {
  for (const NormPlacement norm : {NormPlacement::Post, NormPlacement::Pre})
    for (const int ff : {0, 24}) {
      CAPTURE(to_string(norm), ff);
      ModelConfig c = small_config(16, 2, 1, ff, 20);
      c.norm = norm;
      const LayerPlan plan = make_layer_plan(c);
      INFO(plan.describe());
      std::map<OpKind, int> count;
      std::vector<int> written(static_cast<size_t>(plan.values), 0);
      for (const Step& s : plan.steps) {
        ++count[s.op];
        ++written[static_cast<size_t>(s.out)];
        for (int in : s.in) CHECK(in < s.out);  // reads only values written before
      }
      CHECK(std::count(written.begin() + 1, written.end(), 1) == plan.values - 1);  // each value written once
      CHECK(count[OpKind::Attention] == 1);
      CHECK(count[OpKind::LayerNorm] == (ff > 0 ? 2 : 1));
      CHECK(count[OpKind::Activation] == (ff > 0 ? 1 : 0));
      CHECK(count[OpKind::Linear] == (ff > 0 ? 6 : 4));
      CHECK(count[OpKind::Add] == (ff > 0 ? 2 : 1));
      const OpKind last = plan.steps.back().op;
      CHECK(plan.steps.back().out == plan.output);
      // post-norm ends in a LayerNorm, pre-norm in the residual Add; pre-norm's q reads LN1(x)
      CHECK(last == (norm == NormPlacement::Post ? OpKind::LayerNorm : OpKind::Add));
      const Step& att = plan.steps[static_cast<size_t>(plan.attention_step)];
      const std::vector<int> q_steps = steps_for(plan, att.in[0]);
      CHECK(q_steps.size() == (norm == NormPlacement::Pre ? 2u : 1u));
      CHECK(plan.steps[static_cast<size_t>(q_steps.back())].w == &LayerWeights::wq);
    }
}

TEST_CASE("bf16 training: backward products against a plain reference on bf16-rounded inputs, and a step near fp32",
          "[train][bf16]") {
  if (!bf16_available()) {
    CHECK_THROWS_WITH(make_ops("cpu-bf16"), Catch::Contains("oneDNN"));
    return;
  }
  auto bf = make_ops("cpu-bf16");
  auto round = [](float v) {
    const uint32_t u = static_cast<uint32_t>(to_bf16_bits(v)) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return static_cast<double>(f);
  };
  // linear_backward: dx = dy W and dW += dy^T x, both as bf16 products with fp32 sums
  for (const auto& [N, in, out] : std::vector<std::array<int, 3>>{{1, 1, 1}, {1, 5, 3}, {7, 17, 9}, {130, 96, 33}}) {
    CAPTURE(N, in, out);
    const Tensor x = random_tensor({N, in}, 1), W = random_tensor({out, in}, 2), dy = random_tensor({N, out}, 3);
    Tensor dx, dW = random_tensor({out, in}, 4), db({out});
    const Tensor dW0 = dW;
    bf->linear_backward(x, W, dy, &dx, dW, db);
    double worst = 0;
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < in; ++k) {
        double s = 0, mag = 0;
        for (int o = 0; o < out; ++o) s += round(dy.at(n, o)) * round(W.at(o, k)), mag += std::fabs(round(dy.at(n, o)) * round(W.at(o, k)));
        worst = std::max(worst, std::fabs(dx.at(n, k) - s) / (mag + 1e-6));
      }
    for (int o = 0; o < out; ++o)
      for (int k = 0; k < in; ++k) {
        double s = dW0.at(o, k), mag = std::fabs(s);
        for (int n = 0; n < N; ++n) s += round(dy.at(n, o)) * round(x.at(n, k)), mag += std::fabs(round(dy.at(n, o)) * round(x.at(n, k)));
        worst = std::max(worst, std::fabs(dW.at(o, k) - s) / (mag + 1e-6));  // accumulated onto what was there
      }
    CHECK(worst < 1e-5);
  }
  // a whole step: the loss and gradients near fp32's (bf16 keeps 8 bits of mantissa)
  Model m = tiny_model(NormPlacement::Post, Activation::Gelu, Positional::Learned, Pooling::MaskedMean, 30, 16);
  const TrainBatch batch = make_batch(m, {{3, 4, 5, 6, 7}, {8, 9, 3}, {10, 11, 4, 5}}, {0, 2, 1});
  ModelWeights g32 = zeros_like(m.weights), g16 = zeros_like(m.weights);
  auto cpu = make_ops("cpu");
  const StepOutput a = train_step(m, *cpu, batch, {}, &g32);
  const StepOutput b = train_step(m, *bf, batch, {}, &g16);
  CHECK(b.loss == Approx(a.loss).epsilon(2e-2));
  const auto p32 = parameters(g32), p16 = parameters(g16);
  for (size_t p = 0; p < p32.size(); ++p) {
    double diff = 0, norm = 0;
    for (size_t k = 0; k < p32[p]->data.size(); ++k) {
      diff += std::pow(static_cast<double>(p32[p]->data[k]) - p16[p]->data[k], 2);
      norm += std::pow(static_cast<double>(p32[p]->data[k]), 2);
    }
    INFO("parameter " << p);
    CHECK(std::sqrt(diff) <= 3e-2 * std::sqrt(norm) + 1e-6);
  }
}
