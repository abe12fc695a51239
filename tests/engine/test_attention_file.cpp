// Attention made elsewhere (engine/formats/attention_file.h): the layouts, the batch, the mask,
// strings in .npy, and every check a file must pass before a view sees it. Real files written by
// numpy, safetensors and transformers are read in tests/crosscheck/attention_files.py.
#include <cmath>
#include <cstring>

#include "engine/analysis/head_patterns.h"
#include "engine/analysis/methods.h"
#include "engine/formats/attention_file.h"
#include "engine/formats/npy.h"
#include "tests/engine/test_util.h"

using namespace attnlab;
using namespace attnlab::test;

namespace {

// Rows of positive random numbers normalised to sum to 1: [..., T, S] probabilities.
Tensor probabilities(std::vector<int64_t> shape, uint64_t seed) {
  Tensor t = random_tensor(shape, seed);
  const int64_t S = shape.back();
  for (int64_t r = 0; r < t.numel() / S; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < S; ++j) sum += (t.data[r * S + j] = std::exp(t.data[r * S + j]));
    for (int64_t j = 0; j < S; ++j) t.data[r * S + j] = static_cast<float>(t.data[r * S + j] / sum);
  }
  return t;
}

// A '<U' string .npy as np.array(strings) saves it: UTF-32 code points padded with NULs.
std::string unicode_npy(const std::vector<std::u32string>& s, size_t width) {
  std::string h = "{'descr': '<U" + std::to_string(width) + "', 'fortran_order': False, 'shape': (" +
                  std::to_string(s.size()) + ",), }";
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string out = std::string("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(h.size() & 0xFF);
  out += static_cast<char>(h.size() >> 8);
  out += h;
  for (const auto& str : s)
    for (size_t i = 0; i < width; ++i) {
      const uint32_t c = i < str.size() ? static_cast<uint32_t>(str[i]) : 0;
      out.append(reinterpret_cast<const char*>(&c), 4);
    }
  return out;
}

Tensor values(std::vector<float> v) {
  Tensor t({static_cast<int64_t>(v.size())});
  t.data.assign(v.begin(), v.end());
  return t;
}

Tensor slice(const Tensor& t, int64_t i) {
  Tensor out;
  out.shape.assign(t.shape.begin() + 1, t.shape.end());
  const int64_t n = Tensor::numel_of(out.shape);
  out.data.assign(t.data.begin() + i * n, t.data.begin() + (i + 1) * n);
  return out;
}

}  // namespace

TEST_CASE("attention files: layouts, batch and mask read back as written", "[formats][attention-file]") {
  const Tensor stacked = probabilities({2, 3, 5, 5}, 1);  // [layers, heads, T, S]
  AttentionFile f =
      parse_attention_file(serialize_npz({{"attentions", stacked}, {"mask", values({1, 1, 1, 1, 0})}}), "a.npz");
  REQUIRE(f.num_layers() == 2);
  CHECK(f.heads() == 3);
  CHECK(max_abs_diff(f.layers[1], slice(stacked, 1)) == 0);
  CHECK(f.tokens == std::vector<std::string>{"0", "1", "2", "3", "4"});  // positions, said in a warning
  REQUIRE(f.warnings.size() == 1);
  CHECK_THAT(f.warnings[0], Catch::Contains("no \"tokens\""));
  const ForwardResult r = attention_result(f);
  CHECK(!r.is_cross());
  CHECK(r.mask.is_blocked(0, 2, 4));
  CHECK(!r.mask.is_blocked(0, 2, 3));
  CHECK(head_patterns(r).size() == 2);

  // [layers, batch, heads, T, S]: --batch picks a sequence; none given with several is a warning
  const Tensor batched = probabilities({2, 3, 2, 4, 4}, 2);
  f = parse_attention_file(serialize_npz({{"attentions", batched}}), "b.npz", 2);
  CHECK(max_abs_diff(f.layers[1], slice(slice(batched, 1), 2)) == 0);
  f = parse_attention_file(serialize_npz({{"attentions", batched}}), "b.npz");
  CHECK(max_abs_diff(f.layers[0], slice(slice(batched, 0), 0)) == 0);
  CHECK_THAT(f.warnings[0], Catch::Contains("3 sequences"));
  CHECK_THROWS_WITH(parse_attention_file(serialize_npz({{"attentions", batched}}), "b.npz", 3),
                    Catch::Contains("holds 3 sequences"));

  // one array per layer, TransformerLens's names; a gap is an error
  const Tensor l0 = probabilities({2, 4, 4}, 3), l1 = probabilities({2, 4, 4}, 4);
  f = parse_attention_file(serialize_npz({{"blocks.0.attn.hook_pattern", l0}, {"blocks.1.attn.hook_pattern", l1}}),
                           "tl.npz");
  REQUIRE(f.num_layers() == 2);
  CHECK(max_abs_diff(f.layers[1], l1) == 0);
  CHECK_THROWS_WITH(parse_attention_file(serialize_npz({{"arr_0", l0}, {"arr_2", l1}}), "x.npz"),
                    Catch::Contains("layer 1 is missing"));

  // rollout from the file equals rollout from the pass that made the probabilities
  const Model m = random_model(small_config(16, 2, 3, 24, 16));
  auto cpu = make_backend("cpu");
  ForwardRequest req;
  req.ids = random_ids(7, m.config.vocab_size);
  const ForwardResult pass = run_forward(m, *cpu, req);
  f = parse_attention_file(serialize_npz({{"attentions", pass.stacked_probs()}}), "own.npz");
  CHECK(max_abs_diff(rollout_of(f.layers), attention_rollout(m, *cpu, req)) == 0);
}

TEST_CASE("attention files: strings in .npy, and what is refused", "[formats][attention-file][errors]") {
  const std::vector<std::string> s =
      parse_npy_strings(unicode_npy({U"[CLS]", U"caf\u00e9", U"\U0001F600", U""}, 5), "t");
  CHECK(s == std::vector<std::string>{"[CLS]", "caf\xC3\xA9", "\xF0\x9F\x98\x80", ""});
  CHECK(npy_holds_strings(unicode_npy({U"a"}, 1)));
  CHECK(!npy_holds_strings(serialize_npy(values({1, 2}))));
  std::string obj = serialize_npy(values({1, 2}));
  const size_t d = obj.find("<f4");
  obj.replace(d, 4, "|O' ");
  CHECK_THROWS_WITH(parse_npy(obj, "o.npy"), Catch::Contains("pickle"));
  CHECK_THROWS_WITH(parse_npy_strings(serialize_npy(values({1, 2})), "n.npy"), Catch::Contains("expected strings"));

  const Tensor p = probabilities({1, 2, 3, 3}, 5);
  auto fails = [&](Tensor t, const std::string& message) {
    CHECK_THROWS_WITH(parse_attention_file(serialize_npz({{"attentions", t}}), "bad.npz"), Catch::Contains(message));
  };
  Tensor nan = p;
  nan.data[7] = std::nanf("");
  fails(nan, "layer 0 head 0 row 2 column 1 is NaN");
  Tensor neg = p;
  neg.data[4] = -0.25f;
  fails(neg, "never negative");
  fails(probabilities({2, 3, 4}, 6), "cross attention needs \"tokens_b\"");
  fails(Tensor({3, 3}), "must be [heads, T, S]");
  CHECK_THROWS_WITH(parse_attention_file(serialize_npz({{"weights", p}}), "w.npz"),
                    Catch::Contains("no attention found") && Catch::Contains("weights [1, 2, 3, 3]"));
  CHECK_THROWS_WITH(parse_attention_file(serialize_npz({{"attentions", p}, {"mask", values({1, 2, 1})}}), "m.npz"),
                    Catch::Contains("attention_mask, 1 for a kept key"));

  // rows that are not distributions are drawn with a warning; all-zero rows are counted apart
  Tensor off = p;
  for (int j = 0; j < 3; ++j) off.data[static_cast<size_t>(j)] *= 2;
  for (int j = 3; j < 6; ++j) off.data[static_cast<size_t>(j)] = 0;
  const AttentionFile f = parse_attention_file(serialize_npz({{"attentions", off}}), "off.npz");
  CHECK_THAT(f.warnings[1], Catch::StartsWith("1 rows do not sum to 1 (layer 0 head 0 row 0"));
  CHECK_THAT(f.warnings[2], Catch::StartsWith("1 rows are all zero"));

  // a damaged archive: a flipped data byte fails the CRC, a cut one has no directory
  std::string zip = serialize_npz({{"attentions", p}});
  std::string flipped = zip;
  flipped[zip.find("\x93NUMPY") + 140] ^= 0x40;
  CHECK_THROWS_WITH(parse_attention_file(flipped, "f.npz"), Catch::Contains("CRC mismatch"));
  CHECK_THROWS_WITH(parse_attention_file(zip.substr(0, zip.size() - 30), "c.npz"), Catch::Contains("damaged"));
  CHECK_THROWS_WITH(parse_attention_file("not a file at all", "j.bin"), Catch::Contains("not an attention file"));
  // a Zip64 locator in a 42-byte file pointing far away: refused, not read
  std::string tiny = std::string("PK\x06\x07", 4) + std::string(4, '\0') + std::string("AAAAA\0\0\0", 8) +
                     std::string(4, '\0') + std::string("PK\x05\x06", 4) + std::string(18, '\0');
  REQUIRE(tiny.size() == 42);
  CHECK_THROWS_WITH(parse_attention_file(tiny, "z.npz"), Catch::Contains("damaged Zip64"));
}

TEST_CASE("attention files: string arrays written as numpy writes them, and the shape the app opens",
          "[formats][attention-file]") {
  const Tensor stacked = probabilities({2, 3, 4, 4}, 3);
  const std::vector<std::string> tokens = {"[CLS]", "caf\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac",
                                           ""};  // café, 日本, empty
  const std::string bytes = serialize_npz({{"attentions", stacked}}, {{"tokens", tokens}});
  AttentionFile f = parse_attention_file(bytes, "t.npz");
  CHECK(f.tokens == tokens);
  CHECK(f.warnings.empty());
  // '<U' of the longest string's code points ("[CLS]": 5), NUL-padded: numpy's own layout
  const std::string npy = serialize_npy_strings(tokens);
  CHECK(npy.find("'descr': '<U5'") != std::string::npos);
  CHECK(parse_npy_strings(npy, "t.npy") == tokens);
  CHECK_THROWS_WITH(serialize_npy_strings({"\xff"}), Catch::Contains("UTF-8"));

  const ForwardResult r = attention_result(std::move(f));
  const Model m = attention_model(r, "t.npz");
  CHECK(m.probabilities_only);
  CHECK(m.config.num_layers == 2);
  CHECK(m.config.num_heads == 3);
  CHECK(m.config.max_len == 4);
  for (size_t i = 0; i < tokens.size(); ++i) CHECK(m.token_name(r.ids[i]) == tokens[i]);
  CHECK(m.summary() == "Attention file: 2 layers, 3 heads, 4 tokens (probabilities only, no weights)");
}

TEST_CASE("a pass written as an attention file reads back as the same float32s", "[formats][attention-file]") {
  const ModelConfig c = small_config(16, 2, 3, 16, 32);
  const Model m = random_model(c, 4);
  auto cpu = make_backend("cpu");
  ForwardRequest req;
  req.ids = random_ids(5, c.vocab_size, 2);
  req.ids.insert(req.ids.end(), {0, 0});  // [PAD] (default_vocab's id 0), blocked as keys
  req.mask.padding = true;
  for (const bool on_demand : {false, true}) {  // kept probabilities, or recomputed when written
    ForwardRequest r_req = req;
    r_req.attention_on_demand = on_demand;
    if (on_demand) r_req.keep_attention.assign(3, false);
    const ForwardResult r = run_forward(m, *cpu, r_req);
    const AttentionFile f = parse_attention_file(serialize_attention_file(r), "pass.npz");
    REQUIRE(f.num_layers() == 3);
    for (int l = 0; l < 3; ++l) CHECK(f.layers[static_cast<size_t>(l)].data == r.layer_probs(l)->data);
    CHECK(f.tokens == r.tokens);
    CHECK(f.key_kept == std::vector<uint8_t>{1, 1, 1, 1, 1, 0, 0});  // the padding, as attention_mask says it
    CHECK(f.warnings.empty());
    // one layer: a file of one layer
    const AttentionFile one = parse_attention_file(serialize_attention_file(r, 1), "one.npz");
    REQUIRE(one.num_layers() == 1);
    CHECK(one.layers[0].data == r.layer_probs(1)->data);
    CHECK_THROWS_WITH(serialize_attention_file(r, 3), Catch::Contains("layer 3 does not exist"));
  }
  // a causal mask blocks no key for every query: it is in the probabilities, not in a file's mask
  ForwardRequest causal;
  causal.ids = random_ids(6, c.vocab_size, 5);
  causal.mask.causal = true;
  const ForwardResult rc = run_forward(m, *cpu, causal);
  const AttentionFile fc = parse_attention_file(serialize_attention_file(rc), "causal.npz");
  CHECK(fc.key_kept.empty());
  CHECK(fc.layers[2].data == rc.attention[2].data);
  // cross attention: tokens_b, and the file opens as cross attention
  ForwardRequest cross;
  cross.ids = random_ids(4, c.vocab_size, 6);
  cross.cross_ids = random_ids(7, c.vocab_size, 7);
  const ForwardResult rx = run_forward(m, *cpu, cross);
  const AttentionFile fx = parse_attention_file(serialize_attention_file(rx), "cross.npz");
  CHECK(fx.is_cross());
  CHECK(fx.tokens_b == rx.cross_tokens);
  CHECK(fx.keys() == 7);
  CHECK(fx.layers[0].data == rx.cross_attention[0].data);
}

TEST_CASE("an .npy read in slices along its first axis equals the whole array's slices", "[formats][attention-file]") {
  // awkward shapes: one slice, odd sizes, a 5-D batch stack; float32 (copied as stored) and
  // float16 / int64 (converted value by value)
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{1, 1, 1, 1}, std::vector<int64_t>{3, 5, 7, 7}, std::vector<int64_t>{2, 3, 1, 4, 9}}) {
    const Tensor t = random_tensor(shape, 11);
    const std::string npy = serialize_npy(t);
    const NpySlices s = parse_npy_slices(npy, "t.npy", 4);
    CHECK(s.shape == shape);
    REQUIRE(s.slices.size() == static_cast<size_t>(shape[0]));
    for (int64_t i = 0; i < shape[0]; ++i) CHECK(s.slices[static_cast<size_t>(i)].data == slice(t, i).data);
  }
  const NpySlices small = parse_npy_slices(serialize_npy(random_tensor({2, 3, 4}, 2)), "t.npy", 4);
  REQUIRE(small.slices.size() == 1);  // fewer dimensions than asked: whole
  CHECK(small.slices[0].shape == std::vector<int64_t>{2, 3, 4});
  // other dtypes: the same conversion as parse_npy
  std::string i64("\x93NUMPY\x01\x00", 8);
  std::string h = "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 1, 1, 2), }";
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  i64 += static_cast<char>(h.size()), i64 += '\0', i64 += h;
  for (int64_t v : {1, -2, 3, 40}) i64.append(reinterpret_cast<const char*>(&v), 8);
  const NpySlices ints = parse_npy_slices(i64, "i.npy", 4);
  REQUIRE(ints.slices.size() == 2);
  CHECK(std::vector<float>(ints.slices[0].data.begin(), ints.slices[0].data.end()) == std::vector<float>{1, -2});
  CHECK(std::vector<float>(ints.slices[1].data.begin(), ints.slices[1].data.end()) == std::vector<float>{3, 40});
  CHECK_THROWS_WITH(parse_npy_slices(i64.substr(0, i64.size() - 4), "i.npy", 4), Catch::Contains("truncated"));
}
