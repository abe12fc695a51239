// File formats: safetensors (incl. F16/BF16 and every malformed-header path), .npy, config.json,
// vocab.txt, tokenizers, and the model folder round trip in both PyTorch layouts.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "engine/core/io_util.h"
#include "engine/core/memory.h"
#include "engine/formats/npy.h"
#include "engine/train/optimizer.h"
#include "tests/engine/test_util.h"

using namespace attnlab;
using namespace attnlab::test;
namespace fs = std::filesystem;

namespace {

std::string make_safetensors(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("attnlab_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

}  // namespace

TEST_CASE("safetensors round trip and half-precision conversion", "[formats]") {
  TensorMap m;
  m["a"] = Tensor({2, 3});
  for (int k = 0; k < 6; ++k) m["a"].data[static_cast<size_t>(k)] = 0.5f * k - 1;
  m["b"] = Tensor({1});
  m["b"].data[0] = 3.25f;
  const TensorMap back = parse_safetensors(serialize_safetensors(m));
  REQUIRE(back.size() == 2);
  CHECK(back.at("a").shape == m["a"].shape);
  CHECK(back.at("a").data == m["a"].data);
  CHECK(back.at("b").data == m["b"].data);

  // F16 1.0 = 0x3c00, -2.0 = 0xc000, 65504 = 0x7bff, smallest subnormal 0x0001 = 2^-24; BF16 1.5 = 0x3fc0
  const uint16_t halves[] = {0x3c00, 0xc000, 0x7bff, 0x0001};
  const uint16_t bf[] = {0x3fc0};
  std::string data(reinterpret_cast<const char*>(halves), 8);
  data.append(reinterpret_cast<const char*>(bf), 2);
  const auto t = parse_safetensors(make_safetensors(
      R"({"h":{"dtype":"F16","shape":[4],"data_offsets":[0,8]},"g":{"dtype":"BF16","shape":[1],"data_offsets":[8,10]},"__metadata__":{"x":"y"}})",
      data));
  CHECK(t.at("h").data == FloatStorage{1.0f, -2.0f, 65504.0f, std::ldexp(1.0f, -24)});
  CHECK(t.at("g").data[0] == 1.5f);
}

TEST_CASE("a mapped safetensors file: large BF16 / F16 tensors converted over the threads, element by element",
          "[formats]") {
  // past the parallel threshold (2^16) and odd, with an F32 tensor between them at an odd offset
  const int64_t n = (1 << 17) + 3;
  std::vector<uint16_t> bf(static_cast<size_t>(n)), hf(static_cast<size_t>(n));
  uint32_t x = 12345;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;  // every bit pattern class: signs, subnormals, inf, NaN
    bf[static_cast<size_t>(i)] = static_cast<uint16_t>(x >> 16);
    hf[static_cast<size_t>(i)] = static_cast<uint16_t>(x >> 8);
  }
  const float f32[] = {1.25f, -7.0f, 3.0e-39f};
  std::string data(reinterpret_cast<const char*>(f32), 12);
  data.append(reinterpret_cast<const char*>(bf.data()), static_cast<size_t>(n) * 2);
  data.append(reinterpret_cast<const char*>(hf.data()), static_cast<size_t>(n) * 2);
  const std::string header = R"({"f":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"b":{"dtype":"BF16","shape":[)" +
                             std::to_string(n) + R"(],"data_offsets":[12,)" + std::to_string(12 + 2 * n) +
                             R"(]},"h":{"dtype":"F16","shape":[)" + std::to_string(n) + R"(],"data_offsets":[)" +
                             std::to_string(12 + 2 * n) + "," + std::to_string(12 + 4 * n) + "]}}";
  const fs::path dir = temp_dir("mapped");
  const std::string path = (dir / "w.safetensors").string();
  std::ofstream(path, std::ios::binary) << make_safetensors(header, data);
  const TensorMap t = load_safetensors(path);
  CHECK(t.at("f").data == FloatStorage{1.25f, -7.0f, 3.0e-39f});
  REQUIRE(t.at("b").data.size() == static_cast<size_t>(n));
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float want_b = bf16_to_float(bf[static_cast<size_t>(i)]), want_h = half_to_float(hf[static_cast<size_t>(i)]);
    const float got_b = t.at("b").data[static_cast<size_t>(i)], got_h = t.at("h").data[static_cast<size_t>(i)];
    // bit for bit (NaN payloads included)
    bad += std::memcmp(&want_b, &got_b, 4) != 0 || std::memcmp(&want_h, &got_h, 4) != 0;
  }
  CHECK(bad == 0);
  const TensorMap in_memory = parse_safetensors(make_safetensors(header, data));  // read, not mapped: the same bits
  CHECK(std::memcmp(in_memory.at("b").ptr(), t.at("b").ptr(), static_cast<size_t>(n) * 4) == 0);
  CHECK(std::memcmp(in_memory.at("h").ptr(), t.at("h").ptr(), static_cast<size_t>(n) * 4) == 0);
  fs::remove_all(dir);
}

TEST_CASE("malformed safetensors are errors naming the problem", "[formats][errors]") {
  const std::string good_data(8, '\0');
  CHECK_THROWS_WITH(parse_safetensors("abc"), Catch::Contains("too short"));
  std::string huge(8, '\xff');
  CHECK_THROWS_WITH(parse_safetensors(huge + "{}"), Catch::Contains("runs past the end"));
  CHECK_THROWS_WITH(parse_safetensors(make_safetensors("{not json", "")), Catch::Contains("not valid JSON"));
  CHECK_THROWS_WITH(parse_safetensors(make_safetensors("{not json", "")), !Catch::Contains("[json.exception"));
  CHECK_THROWS_WITH(
      parse_safetensors(make_safetensors(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", good_data)),
      Catch::Contains("\"w\"") && Catch::Contains("F64"));
  // integer buffers (BERT's position_ids) are bounds-checked, then left out
  CHECK(parse_safetensors(make_safetensors(R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", good_data))
            .empty());
  CHECK_THROWS_WITH(
      parse_safetensors(make_safetensors(R"({"w":{"dtype":"I64","shape":[2],"data_offsets":[0,8]}})", good_data)),
      Catch::Contains("needs 16 bytes"));
  CHECK_THROWS_WITH(
      parse_safetensors(make_safetensors(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", good_data)),
      Catch::Contains("outside the data"));
  CHECK_THROWS_WITH(
      parse_safetensors(make_safetensors(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", good_data)),
      Catch::Contains("needs 12 bytes"));
  CHECK_THROWS_WITH(
      parse_safetensors(make_safetensors(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}})", good_data)),
      Catch::Contains("non-negative"));
  CHECK_THROWS_WITH(parse_safetensors(make_safetensors(R"({"w":{"dtype":"F32","shape":[2]}})", good_data)),
                    Catch::Contains("data_offsets"));
  CHECK_THROWS_WITH(load_safetensors("/nonexistent/model.safetensors"), Catch::Contains("cannot open"));
}

TEST_CASE(".npy round trip and dtypes", "[formats]") {
  Tensor t({2, 3, 4});
  for (size_t k = 0; k < t.data.size(); ++k) t.data[k] = static_cast<float>(k) * 0.25f;
  const NpyArray back = parse_npy(serialize_npy(t));
  CHECK(back.kind == NpyKind::Float);
  CHECK(back.tensor.shape == t.shape);
  CHECK(back.tensor.data == t.data);
  Tensor v({5});
  CHECK(parse_npy(serialize_npy(v)).tensor.shape == std::vector<int64_t>{5});

  auto npy = [](const std::string& descr, const std::string& shape, const std::string& data) {
    std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
    while ((10 + h.size() + 1) % 64) h += ' ';
    h += '\n';
    std::string out = "\x93NUMPY\x01";
    out.push_back('\0');
    out.push_back(static_cast<char>(h.size()));
    out.push_back('\0');
    return out + h + data;
  };
  const NpyArray b = parse_npy(npy("|b1", "(2, 2)", std::string("\x00\x01\x01\x00", 4)));
  CHECK(b.kind == NpyKind::Bool);
  CHECK(b.tensor.data == FloatStorage{0, 1, 1, 0});
  const int64_t ints[] = {-3, 7};
  const NpyArray i = parse_npy(npy("<i8", "(2,)", std::string(reinterpret_cast<const char*>(ints), 16)));
  CHECK(i.kind == NpyKind::Int);
  CHECK(i.tensor.data == FloatStorage{-3, 7});
  const double ds[] = {-INFINITY, 0.5};
  const NpyArray d = parse_npy(npy("<f8", "(1, 2)", std::string(reinterpret_cast<const char*>(ds), 16)));
  CHECK(std::isinf(d.tensor.data[0]));
  CHECK(d.tensor.data[1] == 0.5f);

  CHECK_THROWS_WITH(parse_npy("hello world"), Catch::Contains("bad magic"));
  CHECK_THROWS_WITH(parse_npy(npy("<f4", "(2, 2)", std::string(8, '\0'))), Catch::Contains("truncated"));
  CHECK_THROWS_WITH(parse_npy(npy("<c8", "(1,)", std::string(8, '\0'))), Catch::Contains("unsupported dtype"));
  CHECK_THROWS_WITH(parse_npy(npy("<U3", "(1,)", std::string(12, '\0'))), Catch::Contains("unsupported dtype"));
}

TEST_CASE("config.json: defaults, validation, unknown keys ignored", "[formats][config]") {
  const ModelConfig c = parse_config_json(
      R"({"vocab_size": 100, "embed_size": 64, "num_heads": 8, "num_layers": 2, "max_len": 32, "ff_dim": 0,
          "positional": "relative", "something_new": [1, 2]})");
  CHECK(c.ff_dim == 0);
  CHECK(c.positional == Positional::Relative);
  CHECK(c.norm == NormPlacement::Post);
  CHECK(c.pooling == Pooling::Mean);
  CHECK(c.layer_norm_eps == 1e-5f);
  const ModelConfig back = parse_config_json(config_to_json(c));
  CHECK(back.embed_size == 64);
  CHECK(back.positional == Positional::Relative);

  CHECK_THROWS_WITH(parse_config_json(R"({"vocab_size": 100, "embed_size": 64, "num_heads": 8, "num_layers": 2})"),
                    Catch::Contains("missing required key \"max_len\""));
  CHECK_THROWS_WITH(
      parse_config_json(R"({"vocab_size": 100, "embed_size": 60, "num_heads": 8, "num_layers": 2, "max_len": 8})"),
      Catch::Contains("does not divide"));
  CHECK_THROWS_WITH(
      parse_config_json(
          R"({"vocab_size": 100, "embed_size": 64, "num_heads": 8, "num_layers": 2, "max_len": 8, "norm": "middle"})"),
      Catch::Contains("norm") && Catch::Contains("middle"));
  CHECK_THROWS_WITH(
      parse_config_json(
          R"({"vocab_size": 100, "embed_size": 64, "num_heads": 8, "num_layers": 2, "max_len": 8, "num_classes": 2, "labels": ["x"]})"),
      Catch::Contains("labels has 1"));
  CHECK_THROWS_WITH(parse_config_json("{"), Catch::Contains("not valid JSON"));
  CHECK_THROWS_WITH(parse_config_json("{"), !Catch::Contains("[json.exception"));  // no library internals
  CHECK_THROWS_WITH(parse_config_json(R"({"vocab_size": "many", "embed_size": 64})"),
                    Catch::Contains("must be an integer"));
}

TEST_CASE("tokenizers and vocabulary", "[formats][tokenizer]") {
  ModelConfig c = small_config();
  c.tokenizer = TokenizerKind::Word;
  c.vocab_size = 8;
  const Vocab v = parse_vocab("[PAD]\n[UNK]\n[CLS]\nthe\nfilm\nwas\nnot\ngood\n");
  const Tokenized t = tokenize("The film was  NOT good!", c, v);
  CHECK(t.tokens == std::vector<std::string>{"the", "film", "was", "not", "good", "!"});
  CHECK(t.ids == std::vector<int>{3, 4, 5, 6, 7, 1});
  CHECK(t.unknown.back());
  c.pooling = Pooling::Cls;  // pooling alone adds nothing: [CLS] comes from the tokenizer description
  CHECK(tokenize("good", c, v).ids == std::vector<int>{7});
  c.pooling = Pooling::Mean, c.add_cls = true;
  CHECK(tokenize("good", c, v).ids == std::vector<int>{2, 7});
  // config.json: add_cls is read and written; folders from before it existed added [CLS] for cls pooling
  CHECK(parse_config_json(config_to_json(c)).add_cls);
  ModelConfig old = c;
  old.pooling = Pooling::Cls;
  std::string json = config_to_json(old);
  json.replace(json.find("\"add_cls\": true,"), std::string("\"add_cls\": true,").size(), "");
  CHECK(parse_config_json(json).add_cls);
  old.pooling = Pooling::Mean;
  json = config_to_json(old);
  json.replace(json.find("\"add_cls\": true,"), std::string("\"add_cls\": true,").size(), "");
  CHECK_FALSE(parse_config_json(json).add_cls);
  CHECK_THROWS_WITH(parse_config_json(R"({"vocab_size": 8, "embed_size": 4, "num_heads": 1, "num_layers": 1,
                                          "max_len": 8, "add_cls": 1})"),
                    Catch::Contains("\"add_cls\" must be true or false"));
  CHECK(split_text("Añb c", TokenizerKind::Char, true) == std::vector<std::string>{"a", "ñ", "b", " ", "c"});
  CHECK_THROWS_WITH(split_text("a\xff", TokenizerKind::Char, true), Catch::Contains("not valid UTF-8 at byte 1"));
  CHECK_THROWS_WITH(parse_vocab("a\nb\na\n"), Catch::Contains("appears twice"));
  CHECK_THROWS_WITH(from_ids({1, 9}, c, v), Catch::Contains("id 9 at position 1"));
}

TEST_CASE("model folder round trip, and PyTorch encoder layout loads", "[formats][model]") {
  ModelConfig c = small_config(16, 4, 2, 12, 20);
  c.positional = Positional::Learned;
  const Model m = random_model(c, 3);
  const fs::path dir = temp_dir("roundtrip");
  save_model(m, dir.string());
  const Model back = load_model(dir.string());
  CHECK(back.config.embed_size == 16);
  CHECK(back.vocab.tokens() == m.vocab.tokens());
  CHECK(back.weights.layers[1].w2.data == m.weights.layers[1].w2.data);
  CHECK(back.weights.pos_embedding.data == m.weights.pos_embedding.data);
  for (const auto& e : fs::directory_iterator(dir)) CHECK(e.path().extension() != ".tmp");

  // nn.TransformerEncoder names: in_proj (Q, K, V stacked), out_proj, linear1/2, norm1/2.
  TensorMap torch;
  const TensorMap ours = weights_to_tensors(c, m.weights);
  for (const auto& [name, t] : ours)
    if (name.find("layers.") != 0) torch[name] = t;
  for (int l = 0; l < 2; ++l) {
    const LayerWeights& L = m.weights.layers[static_cast<size_t>(l)];
    const std::string p = "layers." + std::to_string(l) + ".";
    Tensor in_w({48, 16}), in_b({48});
    std::copy(L.wq.data.begin(), L.wq.data.end(), in_w.data.begin());
    std::copy(L.wk.data.begin(), L.wk.data.end(), in_w.data.begin() + 256);
    std::copy(L.wv.data.begin(), L.wv.data.end(), in_w.data.begin() + 512);
    std::copy(L.bq.data.begin(), L.bq.data.end(), in_b.data.begin());
    std::copy(L.bk.data.begin(), L.bk.data.end(), in_b.data.begin() + 16);
    std::copy(L.bv.data.begin(), L.bv.data.end(), in_b.data.begin() + 32);
    torch[p + "self_attn.in_proj_weight"] = in_w, torch[p + "self_attn.in_proj_bias"] = in_b;
    torch[p + "self_attn.out_proj.weight"] = L.wo, torch[p + "self_attn.out_proj.bias"] = L.bo;
    torch[p + "linear1.weight"] = L.w1, torch[p + "linear1.bias"] = L.b1;
    torch[p + "linear2.weight"] = L.w2, torch[p + "linear2.bias"] = L.b2;
    torch[p + "norm1.weight"] = L.ln1_g, torch[p + "norm1.bias"] = L.ln1_b;
    torch[p + "norm2.weight"] = L.ln2_g, torch[p + "norm2.bias"] = L.ln2_b;
  }
  WeightLayout layout;
  const ModelWeights w = weights_from_tensors(c, torch, &layout);
  CHECK(layout == WeightLayout::TorchEncoder);
  CHECK(w.layers[1].wk.data == m.weights.layers[1].wk.data);
  CHECK(w.layers[1].bv.data == m.weights.layers[1].bv.data);

  torch.erase("layers.1.linear2.bias");
  CHECK_THROWS_WITH(weights_from_tensors(c, torch), Catch::Contains("missing tensor \"layers.1.linear2.bias\""));
  torch["layers.1.linear2.bias"] = Tensor({15});
  CHECK_THROWS_WITH(weights_from_tensors(c, torch),
                    Catch::Contains("\"layers.1.linear2.bias\" has shape [15], expected [16]"));

  // The article's one-layer TextClassifier: attention.* without layers.0.
  ModelConfig one = small_config(16, 8, 1, 0, 20);
  const Model tc = random_model(one, 1);
  TensorMap single;
  for (const auto& [name, t] : weights_to_tensors(one, tc.weights))
    single[name.rfind("layers.0.", 0) == 0 ? name.substr(9) : name] = t;
  CHECK(weights_from_tensors(one, single, &layout).layers[0].wq.data == tc.weights.layers[0].wq.data);
  CHECK(layout == WeightLayout::ArticleSingleLayer);

  fs::remove(dir / "vocab.txt");
  CHECK_THROWS_WITH(load_model(dir.string()), Catch::Contains("vocab.txt: cannot open"));
  CHECK_THROWS_WITH(load_model((dir / "nope").string()), Catch::Contains("no such model folder"));
  fs::remove_all(dir);
}

TEST_CASE("a training text that cannot fit is refused before it is read", "[formats][memory]") {
  // 100 bytes a byte of text at most: 100 MB needs 10 GB
  CHECK_THROWS_WITH(check_text_fits(100e6, 11e9, "big.txt"),
                    Catch::Contains("big.txt: a text of 0.10 GB takes up to 10.0 GB") &&
                        Catch::Contains("more than the 11.0 GB of memory available"));
  CHECK_NOTHROW(check_text_fits(100e6, 11.2e9, "big.txt"));  // 10 GB within 90% of 11.2
  CHECK_NOTHROW(check_text_fits(100e6, 0, "big.txt"));       // unknown: nothing checked
  CHECK_NOTHROW(check_text_fits(70e3, available_bytes(), "dhammapada.txt"));
}

TEST_CASE("a model whose weights cannot fit is refused before they are allocated", "[formats][memory]") {
  const ModelConfig c = small_config(32, 4, 3, 48, 64);
  const Model m = random_model(c);
  double bytes = 0;  // what the loaded weights really hold
  for (const WeightEntry& e : weight_entries(c)) bytes += static_cast<double>(e.in(m.weights).numel()) * 4.0;
  CHECK(weight_bytes(c) == bytes);
  // more than 90% of what is available: refused with the figures; unknown (0): nothing checked
  CHECK_THROWS_WITH(check_weights_fit(c, bytes, "DIR"),
                    Catch::Contains("DIR: ") && Catch::Contains("GB of memory available"));
  CHECK_NOTHROW(check_weights_fit(c, bytes / 0.89, "DIR"));
  CHECK_NOTHROW(check_weights_fit(c, 0, "DIR"));
  // a 7 B Llama-shaped config against this machine's 24 GiB: 27 GB of float32 weights
  ModelConfig big;
  big.vocab_size = 32000, big.embed_size = 4096, big.num_heads = 32, big.num_layers = 32, big.ff_dim = 11008;
  big.max_len = 4096, big.positional = Positional::Rotary, big.norm = NormPlacement::Pre;
  big.norm_kind = NormKind::RmsNorm, big.gated_ff = true, big.lm_head = true, big.final_norm = true;
  big.qkv_bias = big.out_bias = big.ff_bias = false;
  CHECK(big.parameter_count() > 6'500'000'000LL);
  CHECK_THROWS_WITH(check_weights_fit(big, 24.0 * (1 << 30), "llama-7b"), Catch::Contains("B parameters take 2"));
}

TEST_CASE("the weight table: one entry per parameter, count, parameter order, versions", "[formats][weights]") {
  for (const int ff : {0, 12})
    for (const int classes : {0, 3})
      for (const Positional pos : {Positional::None, Positional::Learned, Positional::Relative}) {
        CAPTURE(ff, classes, to_string(pos));
        ModelConfig c = small_config(16, 4, 3, ff, 20);
        c.num_classes = classes;
        c.labels.clear();
        c.positional = pos;
        const Model m = random_model(c, 5);
        const auto entries = weight_entries(c);
        // every tensor that exists is an entry with the shape it was made with, each name once
        long long count = 0;
        std::set<std::string> names;
        const auto params = parameters(m.weights);
        REQUIRE(params.size() == entries.size());
        for (size_t i = 0; i < entries.size(); ++i) {
          CHECK(&entries[i].in(m.weights) == params[i]);
          CHECK(params[i]->shape == entries[i].shape);
          CHECK(names.insert(entries[i].name()).second);
          count += params[i]->numel();
        }
        CHECK(count == c.parameter_count());
        CHECK(names.count("layers.2.attention.fc_out.bias") == 1);
        CHECK(names.count("layers.2.ffn.fc2.weight") == (ff > 0 ? 1u : 0u));
        CHECK(names.count("fc.bias") == (classes > 0 ? 1u : 0u));
        CHECK(names.count("rel_pos.embedding.weight") == (pos == Positional::Relative ? 1u : 0u));
        // zeros_like keeps the structure and zeroes every value
        const ModelWeights z = zeros_like(m.weights);
        const auto zp = parameters(z);
        REQUIRE(zp.size() == params.size());
        for (size_t i = 0; i < zp.size(); ++i) {
          CHECK(zp[i]->shape == params[i]->shape);
          CHECK(std::all_of(zp[i]->data.begin(), zp[i]->data.end(), [](float v) { return v == 0.0f; }));
        }
        // saving and loading walks the same table
        const ModelWeights back = weights_from_tensors(c, weights_to_tensors(c, m.weights));
        const auto bp = parameters(back);
        REQUIRE(bp.size() == params.size());
        for (size_t i = 0; i < bp.size(); ++i) CHECK(bp[i]->data == params[i]->data);
      }
  // Versions: fresh for every set of weights made or loaded, and after every optimiser step.
  const ModelConfig c = small_config();
  Model a = random_model(c, 1);
  const Model b = random_model(c, 1);
  CHECK(a.weights.version != 0);
  CHECK(a.weights.version != b.weights.version);
  const uint64_t before = a.weights.version;
  Adam adam(a.weights, OptimizerConfig{});
  adam.step(a.weights, zeros_like(a.weights));
  CHECK(a.weights.version != before);
  CHECK(weights_from_tensors(c, weights_to_tensors(c, a.weights)).version != a.weights.version);
}
