// ids back to text: tokenizers' decoders (tokenizers/src/decoders/*.rs), each a decode_chain
// over the tokens, run in the order tokenizer.json lists them, then joined.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "engine/text/hf_tokenizer.h"
#include "engine/text/hf_tokenizer_detail.h"
#include "engine/text/unicode.h"

namespace attnlab {

using json = nlohmann::json;
namespace uc = unicode;
using hf_detail::byte_table;
using hf_detail::ByteTable;
using hf_detail::fail;
using hf_detail::json_bool;

namespace {

// Bytes as text, each ill-formed sequence replaced by U+FFFD (String::from_utf8_lossy: one
// replacement per maximal invalid prefix, as the Unicode standard recommends).
std::string utf8_lossy(const std::string& b) {
  std::string out;
  size_t i = 0;
  while (i < b.size()) {
    const auto c = static_cast<unsigned char>(b[i]);
    int len = c < 0x80                   ? 1
              : (c >= 0xC2 && c <= 0xDF) ? 2
              : (c >= 0xE0 && c <= 0xEF) ? 3
              : (c >= 0xF0 && c <= 0xF4) ? 4
                                         : 0;
    size_t good = 0;  // bytes of a valid sequence starting at i, 0 when invalid
    if (len == 1) {
      good = 1;
    } else if (len > 1) {
      size_t k = 1;
      for (; k < static_cast<size_t>(len) && i + k < b.size(); ++k) {
        const auto d = static_cast<unsigned char>(b[i + k]);
        unsigned char lo = 0x80, hi = 0xBF;  // the second byte's narrower ranges
        if (k == 1 && c == 0xE0) lo = 0xA0;
        if (k == 1 && c == 0xED) hi = 0x9F;
        if (k == 1 && c == 0xF0) lo = 0x90;
        if (k == 1 && c == 0xF4) hi = 0x8F;
        if (d < lo || d > hi) break;
      }
      if (k == static_cast<size_t>(len))
        good = k;
      else
        len = static_cast<int>(k);  // the maximal invalid prefix: replaced once
    }
    if (good) {
      out.append(b, i, good);
      i += good;
    } else {
      out += "\xEF\xBF\xBD";
      i += static_cast<size_t>(std::max(len, 1));
    }
  }
  return out;
}

// "<0x41>" -> 0x41; -1 for any other token.
int byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int v = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = t[static_cast<size_t>(k)];
    const int d = (c >= '0' && c <= '9')   ? c - '0'
                  : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                  : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                           : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// tokenizers' wordpiece cleanup (decoders/wordpiece.rs)
std::string cleanup(std::string s) {
  static const std::pair<const char*, const char*> kPairs[] = {
      {" .", "."},   {" ?", "?"},           {" !", "!"},   {" ,", ","},     {" ' ", "'"},   {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kPairs) replace_all(s, from, to);
  return s;
}

}  // namespace

void HfTokenizer::parse_decoder(const json& d, const std::string& where) {
  if (d.is_null()) return;
  const std::string type = d.value("type", "");
  if (type == "Sequence") {
    for (const auto& step : d.at("decoders")) parse_decoder(step, where);
  } else if (type == "ByteLevel") {
    decoder_.push_back({DecodeStep::ByteLevel});
  } else if (type == "Replace") {
    DecodeStep st{DecodeStep::Replace};
    const json& pat = d.at("pattern");
    if (!pat.contains("String")) fail(where, "a Replace decoder with a regex pattern is not supported");
    st.from = pat["String"].get<std::string>();
    st.to = d.at("content").get<std::string>();
    decoder_.push_back(st);
  } else if (type == "ByteFallback") {
    decoder_.push_back({DecodeStep::ByteFallback});
  } else if (type == "Fuse") {
    decoder_.push_back({DecodeStep::Fuse});
  } else if (type == "Strip") {
    DecodeStep st{DecodeStep::Strip};
    st.from = d.at("content").get<std::string>();
    st.start = d.value("start", 0);
    st.stop = d.value("stop", 0);
    decoder_.push_back(st);
  } else if (type == "Metaspace") {
    DecodeStep st{DecodeStep::Metaspace};
    st.from = d.value("replacement", std::string("\xE2\x96\x81"));
    const std::string scheme = d.value("prepend_scheme", json_bool(d, "add_prefix_space", true) ? "always" : "never");
    st.prepend = scheme != "never";
    decoder_.push_back(st);
  } else if (type == "WordPiece") {
    DecodeStep st{DecodeStep::WordPiece};
    st.from = d.value("prefix", std::string("##"));
    st.cleanup = json_bool(d, "cleanup", true);
    decoder_.push_back(st);
  } else {
    fail(where, "decoder \"" + type +
                    "\" is not supported (ByteLevel, Metaspace, WordPiece, Replace, ByteFallback, Fuse, Strip are)");
  }
}

std::string HfTokenizer::decode(const std::vector<int>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int id : ids)  // an id without a token (an embedding row past the vocabulary) is left out, as there
    if (id >= 0 && id < vocab_.size()) tokens.push_back(vocab_.token(id));
  std::string out;
  if (decoder_.empty()) {  // tokenizers without a decoder: the tokens joined by spaces
    for (size_t k = 0; k < tokens.size(); ++k) out += (k ? " " : "") + tokens[k];
    return out;
  }
  const ByteTable& bytes = byte_table();
  for (const DecodeStep& st : decoder_) {
    std::vector<std::string> next;
    switch (st.kind) {
      case DecodeStep::ByteLevel: {  // every token's characters back to bytes, then one lossy string
        std::string raw;
        for (const std::string& t : tokens) {
          std::string mapped;
          bool all = true;
          for (char32_t c : uc::decode(t, "a token")) {
            auto it = bytes.to_byte.find(c);
            if (it == bytes.to_byte.end()) {
              all = false;
              break;
            }
            mapped += static_cast<char>(it->second);
          }
          raw += all ? mapped : t;
        }
        next = {utf8_lossy(raw)};
        break;
      }
      case DecodeStep::Replace:
        next = tokens;
        for (std::string& t : next) replace_all(t, st.from, st.to);
        break;
      case DecodeStep::ByteFallback: {  // runs of <0xNN> tokens become their bytes, or U+FFFD per byte
        std::string run;
        int count = 0;
        auto flush = [&] {
          if (count == 0) return;
          if (utf8_lossy(run) == run)
            next.push_back(run);
          else
            for (int k = 0; k < count; ++k) next.push_back("\xEF\xBF\xBD");
          run.clear();
          count = 0;
        };
        for (const std::string& t : tokens) {
          const int b = byte_token(t);
          if (b >= 0) {
            run += static_cast<char>(b);
            ++count;
          } else {
            flush();
            next.push_back(t);
          }
        }
        flush();
        break;
      }
      case DecodeStep::Fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        next = {all};
        break;
      }
      case DecodeStep::Strip: {  // up to `start` leading and `stop` trailing characters equal to content
        next = tokens;
        for (std::string& t : next) {
          std::u32string cps = uc::decode(t, "a token");
          const std::u32string c = uc::decode(st.from, "a Strip decoder");
          if (c.size() != 1) break;
          size_t lead = 0, trail = 0;
          while (lead < static_cast<size_t>(st.start) && lead < cps.size() && cps[lead] == c[0]) ++lead;
          while (trail < static_cast<size_t>(st.stop) && trail + lead < cps.size() &&
                 cps[cps.size() - 1 - trail] == c[0])
            ++trail;
          t = uc::encode(cps.substr(lead, cps.size() - lead - trail));
        }
        break;
      }
      case DecodeStep::Metaspace:
        next = tokens;
        for (size_t k = 0; k < next.size(); ++k)  // the first token's replacements are the prepended space: dropped
          replace_all(next[k], st.from, k == 0 && st.prepend ? "" : " ");
        break;
      case DecodeStep::WordPiece:
        next = tokens;
        for (size_t k = 0; k < next.size(); ++k) {
          std::string& t = next[k];
          if (k != 0) {
            if (t.compare(0, st.from.size(), st.from) == 0)
              t.erase(0, st.from.size());
            else
              t = " " + t;
          }
          if (st.cleanup) t = cleanup(t);
        }
        break;
    }
    tokens = std::move(next);
  }
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace attnlab
