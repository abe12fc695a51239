// The byte-level BPE learned from a text (engine/text/bpe_trainer.h) on corpora whose merges can
// be counted by hand, and the language model that reads its text with one. hf_decoders checks
// the vocabulary and merges against tokenizers' BpeTrainer on a real text.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "engine/compute/backend.h"
#include "engine/compute/forward.h"
#include "engine/model/hf_model.h"
#include "engine/model/model_folder.h"
#include "engine/text/bpe_trainer.h"
#include "engine/text/hf_tokenizer.h"
#include "engine/text/input.h"
#include "engine/train/trainer.h"
#include "tests/engine/test_util.h"

using namespace attnlab;
using attnlab::test::scratch_dir;

namespace {

using Merges = std::vector<std::pair<std::string, std::string>>;
const std::string G = "\xc4\xa0";  // U+0120, the byte-level character a space becomes

BpeVocabulary learn(const std::string& text, int min_frequency, int vocab_size = 1000) {
  BpeTrainOptions o;
  o.min_frequency = min_frequency, o.vocab_size = vocab_size;
  return train_byte_level_bpe(text, o);
}

}  // namespace

TEST_CASE("byte-level BPE: the most frequent pair merges first, ties to the smaller ids", "[bpe]") {
  // GPT-2's pre-tokenizer: "ab" " ab" " ab" " abc"; pairs (a,b) 4, (Ġ,a) 3, (b,c) 1
  const BpeVocabulary v = learn("ab ab ab abc", 2);
  CHECK(v.merges == Merges{{"a", "b"}, {G, "ab"}});  // (Ġab, c) is seen once: under min_frequency 2
  REQUIRE(v.tokens.size() == 1 + 256 + 2);
  CHECK(v.specials == 1);
  CHECK(v.tokens[0] == "<|endoftext|>");
  CHECK(v.tokens[1] == "!");  // the byte alphabet sorted by code point: '!' (33) first, U+0143 last
  CHECK(v.tokens[256] == "\xc5\x83");
  CHECK(v.tokens[257] == "ab");
  CHECK(v.tokens[258] == G + "ab");
  CHECK(learn("ab ab ab abc", 1).merges == Merges{{"a", "b"}, {G, "ab"}, {G + "ab", "c"}});
  // equal counts: (a,b) < (c,d) < (Ġ,c) by id; merging (c,d) takes (Ġ,c) away and makes (Ġ,cd)
  CHECK(learn("ab cd", 1).merges == Merges{{"a", "b"}, {"c", "d"}, {G, "cd"}});
  // overlapping occurrences merge from the left without overlap (Word::merge): aaaa -> aa aa
  CHECK(learn("aaaa", 1).merges == Merges{{"a", "a"}, {"aa", "aa"}});
  CHECK(learn("aaa", 1).merges == Merges{{"a", "a"}, {"aa", "a"}});  // aa a, then (aa, a)
}

TEST_CASE("byte-level BPE: the vocabulary stops at its size; too small a size is refused", "[bpe]") {
  const std::string text = "the cat sat on the mat; the hat";
  CHECK(learn(text, 1, 257 + 3).tokens.size() == 260);
  CHECK(learn(text, 1, 257 + 3).merges.size() == 3);
  BpeTrainOptions o;
  o.vocab_size = 256;
  CHECK_THROWS_WITH(train_byte_level_bpe(text, o), Catch::Contains("at least 257"));
  CHECK_THROWS_WITH(train_byte_level_bpe("caf\xc3", BpeTrainOptions{}), Catch::Contains("UTF-8"));
}

TEST_CASE("byte-level BPE: its tokenizer.json reads every text back, and splits a learned word whole", "[bpe]") {
  std::string text;
  for (int i = 0; i < 30; ++i)
    text +=
        "Attention is all you need.\nAttention heads attend; caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x99\x82 ";
  const BpeVocabulary v = learn(text, 2, 400);
  const auto tok = HfTokenizer::from_tokenizer_json(byte_level_bpe_json(v));
  CHECK(tok->vocab_size() == static_cast<int>(v.tokens.size()));
  for (size_t i = 0; i < v.tokens.size(); ++i) CHECK(tok->vocab().id(v.tokens[i]) == static_cast<int>(i));
  // a frequent word is one token; the text takes far fewer tokens than bytes
  const Encoding e = tok->encode("Attention is all you need.");
  CHECK(e.tokens.front() == "Attention");
  CHECK(tok->encode(text).size() * 4 < text.size());
  // nothing is unknown: strings never seen (bytes of any kind) come back as typed
  for (const std::string& s : {text, std::string("Zebra \t\r\n  q"), std::string("\xf0\x9f\x98\x80 \xd0\xb6"),
                               std::string(" lead"), std::string("<|endoftext|> after the special token")}) {
    CAPTURE(s);
    const Encoding got = tok->encode(s);
    CHECK(tok->decode(got.ids) == s);
    for (uint8_t u : got.unknown) CHECK(u == 0);
  }
  CHECK(tok->encode("<|endoftext|>").ids == std::vector<int>{0});  // the special token whole
}

TEST_CASE("a language model on a learned BPE is a GPT-2 folder that reads its text back", "[bpe][trainer][lm]") {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i % 7) + ". ";
  TextLmOptions o;
  o.tokenizer = TextTokenizer::Bpe, o.seq = 8, o.vocab_size = 300, o.min_count = 2;
  LmShape shape;
  shape.dim = 16, shape.heads = 2, shape.layers = 1, shape.ff = 32, shape.max_len = 8;
  const TextLm made = new_text_language_model(text, o, shape, 5);
  const Model& m = made.model;
  REQUIRE(m.is_hf());
  CHECK(m.hf.model_type == "gpt2");
  // at most 300: the merges stop where no pair is seen twice
  CHECK(m.config.vocab_size <= 300);
  CHECK(m.config.vocab_size > 257 + 20);
  CHECK(m.vocab.size() == m.config.vocab_size);
  CHECK(nlohmann::json::parse(m.hf.config_text)["eos_token_id"] == 0);
  // every sequence is 8 learned tokens of the text, in order; the last tenth held out
  InputOptions whole;
  whole.overflow = Overflow::Keep;
  const std::vector<int> ids = prepare_text(m, text, whole).ids;
  CHECK(made.data.train.size() + made.data.val.size() == ids.size() / 8);
  CHECK(made.data.train.seqs[0] == std::vector<int>(ids.begin(), ids.begin() + 8));
  CHECK(m.tokenizer->decode(ids) == text);
  // saved and opened again: the same tokenizer.json, ids and logits
  const std::string dir = scratch_dir("bpe", "gpt2");
  save_model(m, dir);
  const Model back = load_model(dir);
  REQUIRE(back.tokenizer);
  CHECK(back.hf.tokenizer_files.at("tokenizer.json") == m.hf.tokenizer_files.at("tokenizer.json"));
  CHECK(prepare_text(back, "the lazy fox, unseen: Zq").ids == prepare_text(m, "the lazy fox, unseen: Zq").ids);
  auto cpu = make_backend("cpu");
  ForwardRequest req;
  req.ids = prepare_text(m, "the quick dog").ids;
  CHECK(run_forward(m, *cpu, req).next_logits == run_forward(back, *cpu, req).next_logits);
  // the CLI's refusal of a vocabulary that cannot hold the bytes
  o.vocab_size = 100;
  CHECK_THROWS_WITH(new_text_language_model(text, o, shape, 5), Catch::Contains("--vocab-size must be at least 257"));
}
