// Hugging Face tokenizers: the BPE model (see hf_tokenizer.h), after `tokenizers`' models/bpe.
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

// ---------------------------------------------------------------- BPE (models/bpe)

namespace {
uint64_t pair_key(int a, int b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
}  // namespace

void HfTokenizer::add_merges(const std::vector<std::pair<std::string, std::string>>& merges, const std::string& where) {
  // model.rs: rank = position in the list; the merged token is a + b without b's subword prefix.
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const int ia = vocab_.id(a), ib = vocab_.id(b);
    if (ia < 0 || ib < 0)
      fail(where, "merge \"" + a + " " + b + "\" uses \"" + (ia < 0 ? a : b) + "\", which is not in the vocabulary");
    const std::string merged = a + (b.rfind(bpe_.prefix, 0) == 0 ? b.substr(bpe_.prefix.size()) : b);
    const int im = vocab_.id(merged);
    if (im < 0) fail(where, "merge \"" + a + " " + b + "\" makes \"" + merged + "\", which is not in the vocabulary");
    bpe_.merges[pair_key(ia, ib)] = {static_cast<int>(rank), im};
  }
}

void HfTokenizer::parse_bpe(const json& model, const std::string& where) {
  bpe_model_ = true;
  auto str_or_empty = [&](const char* key) {
    auto it = model.find(key);
    return it == model.end() || it->is_null() ? std::string() : it->get<std::string>();
  };
  if (auto it = model.find("dropout"); it != model.end() && !it->is_null() && it->get<double>() != 0.0)
    fail(where, "BPE dropout is random; a visualiser needs the same tokens every time (set dropout to null)");
  bpe_.prefix = str_or_empty("continuing_subword_prefix");
  bpe_.suffix = str_or_empty("end_of_word_suffix");
  bpe_.byte_fallback = json_bool(model, "byte_fallback", false);
  bpe_.ignore_merges = json_bool(model, "ignore_merges", false);
  bpe_.fuse_unk = json_bool(model, "fuse_unk", false);
  unk_ = str_or_empty("unk_token");
  bpe_.has_unk = !unk_.empty();
  if (bpe_.has_unk && vocab_.id(unk_) < 0) fail(where, "the unknown token \"" + unk_ + "\" is not in the vocabulary");
  std::vector<std::pair<std::string, std::string>> merges;
  for (const auto& m : model.at("merges")) {
    if (m.is_string()) {  // "a b": exactly one space (convert_merges_to_hashmap)
      const std::string line = m.get<std::string>();
      const size_t sp = line.find(' ');
      if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
        fail(where, "merge \"" + line + "\" is not two tokens separated by one space");
      merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      fail(where, "a merge must be \"a b\" or [\"a\", \"b\"]");
    }
  }
  add_merges(merges, where);
}

void HfTokenizer::bpe_word(const std::u32string& word, int word_index, int sequence, Encoding& out) const {
  if (word.empty()) return;
  const std::string word_text = uc::encode(word);
  auto push = [&](int id, bool unknown) {
    out.tokens.push_back(vocab_.token(id));
    out.ids.push_back(id);
    out.type_ids.push_back(sequence);
    out.special.push_back(0);
    out.unknown.push_back(unknown ? 1 : 0);
    out.word.push_back(word_index);
    out.word_text.push_back(word_text);
  };
  if (bpe_.ignore_merges)
    if (const int id = vocab_.id(word_text); id >= 0) return push(id, false);
  // merge_word: one symbol per character ([prefix] c [suffix]), else its bytes as <0xNN>, else [UNK]
  const int unk_id = bpe_.has_unk ? vocab_.id(unk_) : -1;
  std::vector<int> symbols;
  int pending_unk = 0;  // unknown characters waiting to become one [UNK] (fuse_unk) or several
  auto flush_unk = [&] {
    if (pending_unk > 0) symbols.push_back(unk_id);
    pending_unk = 0;
  };
  for (size_t i = 0; i < word.size(); ++i) {
    std::string ch = uc::encode(word[i]);
    if (i > 0) ch = bpe_.prefix + ch;
    if (i + 1 == word.size()) ch += bpe_.suffix;
    if (const int id = vocab_.id(ch); id >= 0) {
      flush_unk();
      symbols.push_back(id);
      continue;
    }
    if (bpe_.byte_fallback) {
      std::vector<int> bytes;
      for (unsigned char b : ch) {
        char code[8];
        std::snprintf(code, sizeof code, "<0x%02X>", b);
        const int id = vocab_.id(code);
        if (id < 0) break;
        bytes.push_back(id);
      }
      if (bytes.size() == ch.size()) {
        symbols.insert(symbols.end(), bytes.begin(), bytes.end());  // (a pending [UNK] stays pending, as in model.rs)
        continue;
      }
    }
    if (unk_id >= 0) {
      if (pending_unk > 0 && !bpe_.fuse_unk) flush_unk();
      ++pending_unk;
    }
  }
  flush_unk();
  // word.rs merge_all: always the lowest-ranked adjacent pair, leftmost first
  while (symbols.size() > 1) {
    int best = -1, best_rank = 0, best_id = 0;
    for (size_t k = 0; k + 1 < symbols.size(); ++k) {
      auto it = bpe_.merges.find(pair_key(symbols[k], symbols[k + 1]));
      if (it != bpe_.merges.end() && (best < 0 || it->second.first < best_rank))
        best = static_cast<int>(k), best_rank = it->second.first, best_id = it->second.second;
    }
    if (best < 0) break;
    symbols[static_cast<size_t>(best)] = best_id;
    symbols.erase(symbols.begin() + best + 1);
  }
  for (int id : symbols) push(id, id == unk_id);
}

}  // namespace attnlab
