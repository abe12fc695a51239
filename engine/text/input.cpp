// Input preparation (see input.h): tokenizing, the max_len policy, padding, labels.
#include "engine/text/input.h"

#include <algorithm>

namespace attnlab {

namespace {

void apply_policy(const Model& m, PreparedInput& in, const InputOptions& o) {
  const int max_len = m.config.max_len;
  if (static_cast<int>(in.ids.size()) > max_len && o.overflow != Overflow::Keep) {
    const std::string msg = "the " + o.what + " has " + std::to_string(in.ids.size()) +
                            " tokens, more than the model's max_len " + std::to_string(max_len);
    if (o.overflow == Overflow::Error && o.truncation == Truncation::None)
      throw Error(msg + " (--truncation longest_first keeps its first tokens)");
    if (o.truncation == Truncation::OnlySecond)
      throw Error("--truncation only_second needs a pair (sentence B) to cut");
    in.notices.push_back(msg + "; it was cut to " + std::to_string(max_len) + " tokens");
    in.cut.from_first = static_cast<int>(in.ids.size()) - max_len;
    in.tokens.resize(static_cast<size_t>(max_len));
    in.ids.resize(static_cast<size_t>(max_len));
    in.unknown.resize(static_cast<size_t>(max_len));
    in.special.resize(static_cast<size_t>(max_len));
    in.token_types.resize(static_cast<size_t>(max_len));
    in.words.resize(static_cast<size_t>(max_len));
  }
  const int n = std::min(o.pad_to, max_len);
  if (n > static_cast<int>(in.ids.size()) && !in.ids.empty()) {
    const int pad = m.pad_id();  // the config's pad_token_id (BART's <pad>), else the vocabulary's [PAD]
    if (pad < 0) throw Error("cannot pad: the vocabulary has no [PAD] token");
    in.tokens.resize(static_cast<size_t>(n), m.config.pad_token_id >= 0 ? m.token_name(pad) : kPadToken);
    in.ids.resize(static_cast<size_t>(n), pad);
    in.unknown.resize(static_cast<size_t>(n), 0);
    in.special.resize(static_cast<size_t>(n), 1);
    in.token_types.resize(static_cast<size_t>(n), in.token_types.empty() ? 0 : in.token_types.back());
    in.words.resize(static_cast<size_t>(n), -1);
  }
}

}  // namespace

namespace {

// A Hugging Face tokenizer's encoding: pieces as the vocabulary spells them ("##ing"; byte-level
// tokens as readable text, HfTokenizer::readable), except an unknown word, which keeps its text
// (marked unknown) so the views say what was not understood.
PreparedInput prepare_hf(const Model& m, const std::string& text, const InputOptions& o) {
  const std::string* pair = o.pair ? &*o.pair : nullptr;
  const int max_len = m.config.max_len;
  Truncation how = o.truncation;
  if (how == Truncation::None && o.overflow == Overflow::Cut) how = Truncation::LongestFirst;
  TruncationCut cut;
  Encoding e = m.tokenizer->encode(text, pair, max_len, how, &cut);
  const size_t full = e.size() + static_cast<size_t>(cut.from_first + cut.from_second);
  if (how == Truncation::None && o.overflow == Overflow::Error && static_cast<int>(e.size()) > max_len)
    throw Error("the " + o.what + (pair ? " and its pair have " : " has ") + std::to_string(e.size()) +
                " tokens, more than the model's max_len " + std::to_string(max_len) +
                " (--truncation longest_first|only_first|only_second cuts " + (pair ? "them" : "it") +
                " as transformers does)");
  const std::vector<std::string> labels = m.tokenizer->readable(e);
  PreparedInput in;
  in.cut = cut;
  if (cut.from_first + cut.from_second > 0) {
    std::string what = "the " + o.what + (pair ? " and its pair had " : " had ") + std::to_string(full) +
                       " tokens, more than the model's max_len " + std::to_string(max_len) + "; ";
    auto tokens = [](int n) { return std::to_string(n) + (n == 1 ? " token" : " tokens"); };
    if (!pair)
      what += "its last " + tokens(cut.from_first) + " were cut";
    else if (cut.from_second == 0)
      what += "sentence A lost its last " + tokens(cut.from_first) + ", sentence B is whole";
    else if (cut.from_first == 0)
      what += "sentence B lost its last " + tokens(cut.from_second) + ", sentence A is whole";
    else
      what += "sentence A lost its last " + tokens(cut.from_first) + ", sentence B its last " + tokens(cut.from_second);
    // one text: what was cut and what it means (the strategy's name matters for pairs only)
    const bool specials = std::find(e.special.begin(), e.special.end(), 1) != e.special.end();
    if (!pair)
      in.notices.push_back(what + ", as transformers truncates" +
                           (specials ? std::string(" (its special tokens are kept)") : std::string()) +
                           ": the views and the next-token prediction end at the cut");
    else
      in.notices.push_back(what + " (" + to_string(how) + ", as transformers cuts; the separators are kept)");
  }
  size_t content = 0;
  for (size_t i = 0; i < e.size(); ++i) {
    in.tokens.push_back(e.unknown[i] && !e.word_text[i].empty() ? e.word_text[i] : labels[i]);
    in.ids.push_back(e.ids[i]);
    in.unknown.push_back(e.unknown[i]);
    in.special.push_back(e.special[i]);
    in.token_types.push_back(e.type_ids[i]);
    in.words.push_back(e.special[i] ? -1 : e.word[i]);
    if (!e.special[i] || e.word[i] >= 0) ++content;  // typed special tokens count as input
  }
  if (content == 0) return PreparedInput{};  // nothing typed: no input at all, not "[CLS] [SEP]"
  apply_policy(m, in, o);
  return in;
}

}  // namespace

PreparedInput prepare_text(const Model& m, const std::string& text, const InputOptions& o) {
  if (o.pair && m.config.causal && !m.is_seq2seq())  // an encoder-decoder's source may be a pair (BART's template)
    throw Error("a language model reads one text; a pair (sentence B) is for BERT-style encoders");
  if (m.tokenizer) return prepare_hf(m, text, o);
  if (o.pair)
    throw Error(
        "this model's tokenizer takes one text; a pair (sentence B) needs a tokenizer with a pair template, "
        "as Hugging Face BERT models have");
  const Tokenized t = tokenize(text, m.config, m.vocab);
  PreparedInput in;
  in.tokens = t.tokens;
  in.ids = t.ids;
  in.unknown.assign(t.unknown.begin(), t.unknown.end());
  in.special.assign(t.ids.size(), 0);
  in.token_types.assign(t.ids.size(), 0);
  in.words.resize(t.ids.size());
  for (size_t i = 0; i < in.words.size(); ++i) in.words[i] = static_cast<int>(i) - (m.config.add_cls ? 1 : 0);
  if (m.config.add_cls && !in.ids.empty()) in.special[0] = 1;
  if (in.ids.size() == (m.config.add_cls ? 1u : 0u)) {  // nothing typed: no input at all
    PreparedInput none;
    none.notices = in.notices;
    return none;
  }
  apply_policy(m, in, o);
  return in;
}

PreparedInput prepare_ids(const Model& m, const std::vector<int>& ids, const InputOptions& o) {
  const Tokenized t = from_ids(ids, m.config, m.vocab);
  PreparedInput in;
  in.tokens = t.tokens;
  in.ids = t.ids;
  in.unknown.assign(t.ids.size(), 0);
  in.special.assign(t.ids.size(), 0);
  in.token_types.assign(t.ids.size(), 0);
  in.words.resize(t.ids.size());
  for (size_t i = 0; i < in.words.size(); ++i) in.words[i] = static_cast<int>(i);
  apply_policy(m, in, o);
  return in;
}

}  // namespace attnlab
