// Tokenizers and vocabulary files.
#include "engine/text/tokenizer.h"

#include <cctype>

#include "engine/core/io_util.h"
#include "engine/core/tensor.h"

namespace attnlab {

Vocab::Vocab(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    auto [it, inserted] = index_.emplace(tokens_[i], static_cast<int>(i));
    if (!inserted)
      throw Error("vocabulary: token \"" + tokens_[i] + "\" appears twice (ids " + std::to_string(it->second) +
                  " and " + std::to_string(i) + ")");
  }
}

int Vocab::id(const std::string& token) const {
  auto it = index_.find(token);
  return it == index_.end() ? -1 : it->second;
}

Vocab parse_vocab(const std::string& text, const std::string& where) {
  std::vector<std::string> tokens;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    tokens.push_back(std::move(line));
    start = end + 1;
  }
  try {
    return Vocab(std::move(tokens));
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
}

Vocab load_vocab(const std::string& path) {
  return parse_vocab(read_file_bytes(path), path);
}

std::string vocab_to_text(const Vocab& v) {
  std::string out;
  for (const auto& t : v.tokens()) out += t + "\n";
  return out;
}

namespace {

// Length of the UTF-8 sequence starting at s[i]; Error when it is not valid UTF-8.
size_t utf8_len(const std::string& s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (n == 0 || i + n > s.size()) throw Error("text is not valid UTF-8 at byte " + std::to_string(i));
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2)
      throw Error("text is not valid UTF-8 at byte " + std::to_string(i));
  return n;
}

}  // namespace

std::vector<std::string> split_text(const std::string& text, TokenizerKind kind, bool lowercase) {
  std::vector<std::string> pieces;
  std::string word;
  auto flush = [&] {
    if (!word.empty()) pieces.push_back(std::move(word));
    word.clear();
  };
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_len(text, i);
    std::string cp = text.substr(i, n);
    if (n == 1 && lowercase) cp[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(cp[0])));
    i += n;
    if (kind == TokenizerKind::Char) {
      // Runs of white space become one " " token: spaces matter between words, their count does not.
      if (n == 1 && std::isspace(static_cast<unsigned char>(cp[0]))) {
        if (pieces.empty() || pieces.back() != " ") pieces.push_back(" ");
      } else {
        pieces.push_back(cp);
      }
      continue;
    }
    if (n == 1 && std::isspace(static_cast<unsigned char>(cp[0]))) {
      flush();
    } else if (n == 1 && std::ispunct(static_cast<unsigned char>(cp[0])) && cp[0] != '\'') {
      flush();
      pieces.push_back(cp);
    } else {
      word += cp;
    }
  }
  flush();
  if (kind == TokenizerKind::Char) {
    while (!pieces.empty() && pieces.back() == " ") pieces.pop_back();
    if (!pieces.empty() && pieces.front() == " ") pieces.erase(pieces.begin());
  }
  return pieces;
}

Tokenized tokenize(const std::string& text, const ModelConfig& config, const Vocab& vocab) {
  Tokenized out;
  if (config.add_cls) {
    const int cls = vocab.cls_id();
    if (cls < 0) throw Error("the tokenizer adds [CLS] (add_cls) but the vocabulary has no [CLS] token");
    out.tokens.push_back(kClsToken);
    out.ids.push_back(cls);
    out.unknown.push_back(false);
  }
  const int unk = vocab.unk_id();
  for (auto& piece : split_text(text, config.tokenizer, config.lowercase)) {
    int id = vocab.id(piece);
    const bool unknown = id < 0 || id >= config.vocab_size;
    if (unknown) {
      if (unk < 0) throw Error("\"" + piece + "\" is not in the vocabulary, which has no [UNK] token");
      id = unk;
    }
    out.tokens.push_back(piece);
    out.ids.push_back(id);
    out.unknown.push_back(unknown);
  }
  return out;
}

Tokenized from_ids(const std::vector<int>& ids, const ModelConfig& config, const Vocab& vocab) {
  Tokenized out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int id = ids[i];
    if (id < 0 || id >= config.vocab_size)
      throw Error("id " + std::to_string(id) + " at position " + std::to_string(i) + " is outside the vocabulary [0, " +
                  std::to_string(config.vocab_size) + ")");
    out.tokens.push_back(id < vocab.size() ? vocab.token(id) : "#" + std::to_string(id));
    out.ids.push_back(id);
    out.unknown.push_back(false);
  }
  return out;
}

}  // namespace attnlab
