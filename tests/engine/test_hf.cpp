// Hugging Face folders without Python: UTF-8 decoding, the WordPiece pipeline's rules on cases
// worked out by hand, pairs and token types, the token-view transform (hide special tokens, merge
// pieces) against direct sums and means, and saving a BERT classifier in Hugging Face names then
// loading it back. (Exactness against `tokenizers` and `transformers` is tests/crosscheck/hf_crosscheck.py.)
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "engine/model/hf_model.h"
#include "engine/text/input.h"
#include "engine/text/token_view.h"
#include "engine/text/unicode.h"
#include "tests/engine/hf_test_model.h"
#include "tests/engine/test_util.h"
#include "tests/engine/tolerance.h"

using namespace attnlab;
using namespace attnlab::test;
namespace fs = std::filesystem;

namespace {

float at3(const Tensor& t, int h, int i, int j) {  // [H, T, S]
  return t.data[static_cast<size_t>((h * t.shape[1] + i) * t.shape[2] + j)];
}

}  // namespace

TEST_CASE("UTF-8 decoding refuses overlong forms, surrogates and values past U+10FFFF", "[hf][unicode]") {
  CHECK(unicode::decode("a\xc3\xa9\xe6\x9d\xb1\xf0\x9f\x98\x80") == U"a\u00e9\u6771\U0001F600");
  CHECK(unicode::encode(U"a\u00e9\u6771\U0001F600") == "a\xc3\xa9\xe6\x9d\xb1\xf0\x9f\x98\x80");
  for (const char* bad : {"\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xff", "\xe6\x9d"})
    CHECK_THROWS_WITH(unicode::decode(bad), Catch::Contains("not valid UTF-8 at byte 0"));
  CHECK(unicode::to_lower(U"\u0130\u03a3A") == U"i\u0307\u03c3a");  // per character: no final sigma
}

TEST_CASE("WordPiece: normalising, splitting, longest match, unknown words, special tokens", "[hf][tokenizer]") {
  const auto t = HfTokenizer::from_tokenizer_json(kTokenizerJson);
  CHECK(t->normalize("Café\tPLAYING\x01") == "cafe playing");  // accents stripped, control dropped, lower case
  CHECK(t->normalize("東京") == " 東  京 ");                   // CJK ideographs spaced
  CHECK(t->pre_tokenize("the movie,was") == std::vector<std::string>{"the", "movie", ",", "was"});
  Encoding e = t->encode("Unbelievably playing movies [MASK] xyz");
  CHECK(e.tokens == std::vector<std::string>{"[CLS]", "un", "##believ", "##ably", "play", "##ing", "movie", "##s",
                                             "[MASK]", "[UNK]", "[SEP]"});
  CHECK(e.ids == std::vector<int>{2, 10, 11, 12, 7, 8, 6, 9, 4, 1, 3});
  CHECK(e.special == std::vector<uint8_t>{1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1});
  CHECK(e.unknown == std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0});
  CHECK(e.word == std::vector<int>{-1, 0, 0, 0, 1, 1, 2, 2, 3, 4, -1});
  CHECK(t->encode("playingplaying").tokens[1] == "[UNK]");            // 14 characters > max_input_chars_per_word 13
  CHECK(t->encode("[mask]").ids == std::vector<int>{2, 1, 1, 1, 3});  // special tokens are matched as typed
  const std::string b = "good.";
  e = t->encode("the movie", &b);
  CHECK(e.ids == std::vector<int>{2, 5, 6, 3, 19, 15, 3});
  CHECK(e.type_ids == std::vector<int>{0, 0, 0, 0, 1, 1, 1});
  CHECK_THROWS_WITH(t->encode("a\xff"), Catch::Contains("not valid UTF-8"));
}

TEST_CASE("tokenizer.json errors name the part", "[hf][tokenizer][errors]") {
  CHECK_THROWS_WITH(HfTokenizer::from_tokenizer_json("{"), Catch::Contains("not valid JSON"));
  CHECK_THROWS_WITH(HfTokenizer::from_tokenizer_json(R"({"model": {"type": "Unigram", "vocab": []}})"),
                    Catch::Contains("\"Unigram\" is not supported"));
  CHECK_THROWS_WITH(
      HfTokenizer::from_tokenizer_json(R"({"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"a": 0}}})"),
      Catch::Contains("unknown token \"[UNK]\" is not in the vocabulary"));
  CHECK_THROWS_WITH(HfTokenizer::from_tokenizer_json(
                        R"({"model": {"type": "WordPiece", "vocab": {"[UNK]": 0}},
                            "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 7], "cls": ["[CLS]", 8]}})"),
                    Catch::Contains("not in the vocabulary"));
}

TEST_CASE("pairs, token types and the input policy for Hugging Face tokenizers", "[hf][input]") {
  const std::string dir = (fs::temp_directory_path() / "attnlab-test-hf-input").string();
  const Model m = tiny_bert(dir);
  InputOptions o;
  o.pair = "was good";
  const PreparedInput in = prepare_text(m, "the movie", o);
  CHECK(in.token_types == std::vector<int>{0, 0, 0, 0, 1, 1, 1});
  CHECK(in.special == std::vector<uint8_t>{1, 0, 0, 1, 0, 0, 1});
  CHECK(in.words == std::vector<int>{-1, 0, 1, -1, 2, 3, -1});
  CHECK(prepare_text(m, " \x01 ").ids.empty());  // nothing typed: no input, not "[CLS] [SEP]"
  const PreparedInput unk = prepare_text(m, "xyz");
  CHECK(unk.tokens[1] == "xyz");  // an unknown word keeps its text (id [UNK], marked)
  CHECK(unk.ids[1] == 1);
  CHECK(unk.unknown[1] == 1);
  // an attnlab model has no pair template
  const Model own = random_model(small_config());
  CHECK_THROWS_WITH(prepare_text(own, "a", o), Catch::Contains("takes one text"));
  fs::remove_all(dir);
}

TEST_CASE("pairs past max_len are cut as tokenizers' truncation does: separators and sentence B kept", "[hf][input]") {
  const std::string dir = (fs::temp_directory_path() / "attnlab-test-hf-truncation").string();
  const Model m = tiny_bert(dir);  // max_len 32; a pair's template adds 3 tokens: 29 left for the texts
  auto words = [](int n, const char* w) {
    std::string s;
    for (int i = 0; i < n; ++i) s += (i ? " " : "") + std::string(w);
    return s;
  };
  auto cut = [&](int a, int b, Truncation how = Truncation::None, Overflow overflow = Overflow::Cut) {
    InputOptions o;
    o.overflow = overflow;
    o.truncation = how;
    if (b > 0) o.pair = words(b, "good");
    return prepare_text(m, words(a, "movie"), o);
  };
  auto count = [](const PreparedInput& in, int id) {
    return static_cast<int>(std::count(in.ids.begin(), in.ids.end(), id));
  };
  // only the longer text is cut while the shorter fits in the rest: 40 / 5 -> 24 / 5
  PreparedInput in = cut(40, 5);
  CHECK(in.ids.size() == 32);
  CHECK(count(in, 6) == 24);
  CHECK(count(in, 19) == 5);
  CHECK(in.ids.front() == 2);
  CHECK(in.ids.back() == 3);
  CHECK(count(in, 3) == 2);  // both [SEP]
  CHECK(in.cut.from_first == 16);
  CHECK(in.cut.from_second == 0);
  REQUIRE(in.notices.size() == 1);
  CHECK_THAT(in.notices[0], Catch::Contains("sentence A lost its last 16 tokens, sentence B is whole (longest_first"));
  {  // one text: what was cut and what it means, without the pair's vocabulary
    const PreparedInput one = cut(40, 0);
    CHECK(one.ids.size() == 32);
    REQUIRE(one.notices.size() == 1);
    CHECK_THAT(one.notices[0],
               Catch::Contains("its last 10 tokens were cut, as transformers truncates (its special "
                               "tokens are kept): the views and the next-token prediction end at the cut"));
    CHECK_THAT(one.notices[0], !Catch::Contains("longest_first"));
  }
  // both long: halves, the odd token to the longer one's side: 20 / 21 -> 14 / 15 (the shorter gets 29 / 2)
  in = cut(20, 21);
  CHECK(count(in, 6) == 14);
  CHECK(count(in, 19) == 15);
  REQUIRE(in.notices.size() == 1);
  CHECK_THAT(in.notices[0], Catch::Contains("sentence A lost its last 6 tokens, sentence B its last 6 tokens"));
  in = cut(21, 20);
  CHECK(count(in, 6) == 15);
  CHECK(count(in, 19) == 14);
  CHECK(in.token_types.back() == 1);
  // the other strategies, and their refusals
  in = cut(10, 25, Truncation::OnlySecond);
  CHECK(count(in, 6) == 10);
  CHECK(count(in, 19) == 19);
  CHECK_THROWS_WITH(cut(3, 30, Truncation::OnlyFirst), Catch::Contains("too short to lose the 4"));
  CHECK_THROWS_WITH(cut(40, 0, Truncation::OnlySecond), Catch::Contains("needs a pair"));
  // one text keeps [CLS] ... [SEP]: 30 of its 40 words
  in = cut(40, 0);
  CHECK(in.ids.size() == 32);
  CHECK(in.ids.back() == 3);
  CHECK(in.cut.from_first == 10);
  // the CLI's policy: an error that names the way out, unless a strategy is given
  CHECK_THROWS_WITH(cut(40, 5, Truncation::None, Overflow::Error), Catch::Contains("--truncation longest_first"));
  CHECK(cut(40, 5, Truncation::LongestFirst, Overflow::Error).ids.size() == 32);
  // within max_len nothing is cut and nothing is said
  in = cut(10, 10);
  CHECK(in.ids.size() == 23);
  CHECK(in.notices.empty());
  CHECK(in.cut.from_first + in.cut.from_second == 0);
  CHECK(parse_truncation("only_first") == Truncation::OnlyFirst);
  CHECK_THROWS_WITH(parse_truncation("longest"), Catch::Contains("expected longest_first, only_first or only_second"));
  fs::remove_all(dir);
}

TEST_CASE("token view: hidden special tokens and merged pieces are sums over keys, means over queries",
          "[hf][token_view]") {
  const std::string dir = (fs::temp_directory_path() / "attnlab-test-hf-view").string();
  const Model m = tiny_bert(dir);
  const PreparedInput in = prepare_text(m, "unbelievably playing movie");
  auto cpu = make_backend("cpu");
  ForwardRequest req;
  req.ids = in.ids, req.tokens = in.tokens, req.token_types = in.token_types;
  const ForwardResult full = run_forward(m, *cpu, req);
  // [CLS] un ##believ ##ably play ##ing movie [SEP]
  TokenViewOptions o;
  o.hide_special = true;
  o.merge_pieces = true;
  const TokenGroups g = group_tokens(in.tokens, in.special, in.words, o);
  CHECK(g.labels == std::vector<std::string>{"unbelievably", "playing", "movie"});
  CHECK(g.members == std::vector<std::vector<int>>{{1, 2, 3}, {4, 5}, {6}});
  ForwardResult r = full;
  apply_token_view(r, g, g);
  CHECK(r.tokens == g.labels);
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) {
          double want = 0;
          for (int a : g.members[i])
            for (int b : g.members[j]) want += at3(full.attention[l], h, a, b);
          want /= static_cast<double>(g.members[i].size());
          // the view sums in double and rounds the mean to float once, as want here is exact: u
          // of it; 2 u leaves room for want's own double roundings
          CHECK(std::fabs(at3(r.attention[l], h, i, j) - want) <= 2 * kU32 * want);
        }
  // without [CLS] / [SEP] a row sums to less than 1 (never renormalised): by more than a
  // renormalised row could miss 1 (the T = 8 probabilities summed and regrouped: gamma_{T+2})
  float row = 0;
  for (int j = 0; j < 3; ++j) row += at3(r.attention[0], 0, 0, j);
  CHECK(row < 1.0 - gamma32(8 + 2));
  // merge only: specials stay, each its own position
  o.hide_special = false;
  CHECK(group_tokens(in.tokens, in.special, in.words, o).labels ==
        std::vector<std::string>{"[CLS]", "unbelievably", "playing", "movie", "[SEP]"});
  fs::remove_all(dir);
}

TEST_CASE("a BERT classifier saves in Hugging Face names and loads back the same", "[hf][save]") {
  const std::string src = (fs::temp_directory_path() / "attnlab-test-hf-src").string();
  const std::string out = (fs::temp_directory_path() / "attnlab-test-hf-saved").string();
  const Model m = tiny_bert(src);
  save_model(m, out);
  const TensorMap t = load_safetensors(out + "/model.safetensors");
  CHECK(t.count("bert.encoder.layer.1.attention.self.query.weight"));
  CHECK(t.count("bert.pooler.dense.weight"));
  CHECK(t.count("classifier.weight"));
  CHECK(fs::exists(out + "/tokenizer.json"));
  const Model back = load_model(out);
  CHECK(back.hf.architecture == "BertForSequenceClassification");
  CHECK(back.config.labels == std::vector<std::string>{"neg", "pos"});
  const auto a = parameters(m.weights), b = parameters(back.weights);
  REQUIRE(a.size() == b.size());
  for (size_t k = 0; k < a.size(); ++k) CHECK(max_abs_diff(*a[k], *b[k]) == 0.0);
  fs::remove_all(src);
  fs::remove_all(out);
}

TEST_CASE("a folder without config.json is not a model folder, and says so", "[hf][errors]") {
  const fs::path dir = fs::temp_directory_path() / "attnlab-test-empty-folder";
  fs::create_directories(dir);
  CHECK_THROWS_WITH(load_model(dir.string()), Catch::Contains("not a model folder (no config.json"));
  fs::remove_all(dir);
}
