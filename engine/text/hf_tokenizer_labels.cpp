// Hugging Face tokenizers: readable labels for tokens (see hf_tokenizer.h).
#include "engine/text/hf_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/core/io_util.h"
#include "engine/core/tensor.h"
#include "engine/text/hf_tokenizer_detail.h"
#include "engine/text/unicode.h"

namespace attnlab {

using json = nlohmann::json;
namespace fs = std::filesystem;
namespace uc = unicode;
using namespace hf_detail;

// ---------------------------------------------------------------- readable labels

namespace {

// One character as a label shows it: white space and controls as visible marks.
std::string visible(char32_t c) {
  switch (c) {
    case U' ':
      return "\u2423";  // OPEN BOX
    case U'\n':
      return "\u21B5";  // DOWNWARDS ARROW WITH CORNER LEFTWARDS
    case U'\t':
      return "\u21E5";  // RIGHTWARDS ARROW TO BAR
    case U'\r':
      return "\u240D";  // SYMBOL FOR CARRIAGE RETURN
    default:
      break;
  }
  // Other controls by their code, as byte fallback names a byte: Unicode's control pictures
  // (U+2404 for 0x04) are in none of the fonts a Debian desktop has, so they drew as empty boxes.
  char buf[16];
  if (c < 0x20 || c == 0x7F) {
    std::snprintf(buf, sizeof buf, "<0x%02X>", static_cast<unsigned>(c));
    return buf;
  }
  if (c >= 0x80 && c <= 0x9F) {  // C1 controls
    std::snprintf(buf, sizeof buf, "<U+%04X>", static_cast<unsigned>(c));
    return buf;
  }
  return uc::encode(c);
}

// Length of the UTF-8 sequence starting at s[i], or 0 when it is not a valid one.
size_t utf8_length(const std::string& s, size_t i) {
  const unsigned char b = static_cast<unsigned char>(s[i]);
  const size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  try {
    uc::decode(std::string_view(s).substr(i, n));
  } catch (const Error&) {
    return 0;  // overlong, surrogate, past U+10FFFF
  }
  return n;
}

}  // namespace

std::vector<std::string> HfTokenizer::readable(const Encoding& e) const {
  if (!bpe_model_) return e.tokens;
  std::vector<std::string> labels(e.size());
  std::vector<uint8_t> opaque(e.size(), 0);  // special and added tokens: their own text
  std::string bytes;
  std::vector<size_t> owner;  // the token each byte came from
  auto flush = [&] {
    for (size_t i = 0; i < bytes.size();) {
      const size_t n = utf8_length(bytes, i);
      if (n == 0) {
        labels[owner[i]] += "\uFFFD";
        ++i;
        continue;
      }
      labels[owner[i]] += visible(uc::decode(std::string_view(bytes).substr(i, n))[0]);
      i += n;
    }
    bytes.clear();
    owner.clear();
  };
  for (size_t i = 0; i < e.size(); ++i) {
    const std::string& tok = e.tokens[i];
    bool added = e.special[i] != 0;
    for (const AddedToken& a : added_) added = added || a.id == e.ids[i];
    if (added) {
      flush();
      labels[i] = tok, opaque[i] = 1;
      continue;
    }
    std::string b;
    if (byte_level_) {
      for (char32_t c : uc::decode(tok)) {
        auto it = byte_table().to_byte.find(c);
        if (it != byte_table().to_byte.end())
          b.push_back(static_cast<char>(it->second));
        else
          b += uc::encode(c);
      }
    } else if (bpe_.byte_fallback && tok.size() == 6 && tok.compare(0, 3, "<0x") == 0 && tok[5] == '>') {
      b.push_back(static_cast<char>(std::stoi(tok.substr(3, 2), nullptr, 16)));
    } else {
      // SentencePiece-style BPE writes a space as U+2581
      for (char32_t c : uc::decode(tok)) b += c == 0x2581 ? std::string(" ") : uc::encode(c);
    }
    bytes += b;
    owner.insert(owner.end(), b.size(), i);
  }
  flush();
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i].empty() && !opaque[i]) labels[i] = "\u2026";  // only the middle or end of a character
  return labels;
}

std::string HfTokenizer::readable_token(int id) const {
  if (id < 0 || id >= vocab_.size()) return "#" + std::to_string(id);  // an embedding row past the tokenizer
  Encoding e;
  e.tokens = {vocab_.token(id)};
  e.ids = {id};
  e.type_ids = {0};
  e.special = {0};
  e.unknown = {0};
  e.word = {0};
  e.word_text = {""};
  for (const AddedToken& a : added_)
    if (a.id == id) e.special[0] = 1;
  std::string label = readable(e)[0];
  if (label != "\u2026" && label.find("\uFFFD") == std::string::npos) return label;
  // part of a character: its bytes
  std::string hex;
  for (char32_t c : uc::decode(e.tokens[0])) {
    auto it = byte_table().to_byte.find(c);
    const int b = it != byte_table().to_byte.end() ? it->second : -1;
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b & 0xFF);  // as byte-fallback vocabularies name a byte
    hex += buf;
  }
  return byte_level_ ? hex : e.tokens[0];
}

}  // namespace attnlab
