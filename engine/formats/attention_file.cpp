// Reading attention made elsewhere: the arrays' names and shapes, the batch, the tokens and the
// mask, then one check of every value.
#include "engine/formats/attention_file.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <regex>

#include "engine/core/io_util.h"
#include "engine/formats/npy.h"
#include "engine/formats/safetensors.h"

namespace attnlab {

namespace {

using json = nlohmann::json;

// What a file holds before the layout is worked out: named float arrays, named string arrays
// (with their shapes) and where it came from.
struct Contents {
  std::map<std::string, Tensor> arrays;
  std::map<std::string, std::pair<std::vector<std::string>, std::vector<int64_t>>> strings;
  // "attentions" of 4 or 5 dimensions in an .npz, read layer by layer (parse_npy_slices): the
  // layers are made without the whole stack in memory beside them
  std::map<std::string, NpySlices> stacks;
  std::string kind;  // "npz" or "safetensors"
};

Contents read_npz(const std::string& bytes, const std::string& where) {
  Contents c;
  c.kind = "npz";
  for (const NpzMember& member : parse_npz_members(bytes, where)) {
    const std::string& name = member.name;
    const std::string_view npy = member.bytes;
    const std::string at = where + ": " + name;
    if (npy_holds_strings(npy)) {
      std::vector<int64_t> shape;
      std::vector<std::string> s = parse_npy_strings(npy, at, &shape);
      c.strings[name] = {std::move(s), std::move(shape)};
    } else if (name == "attentions" || name == "attention") {
      NpySlices stack = parse_npy_slices(npy, at, 4);
      if (stack.shape.size() >= 4)
        c.stacks[name] = std::move(stack);
      else
        c.arrays[name] = std::move(stack.slices.at(0));
    } else {
      c.arrays[name] = parse_npy(npy, at).tensor;
    }
  }
  return c;
}

Contents read_safetensors(const std::string& bytes, const std::string& where) {
  Contents c;
  c.kind = "safetensors";
  c.arrays = parse_safetensors(bytes, where);
  for (const auto& [key, value] : parse_safetensors_metadata(bytes, where)) {
    if (key != "tokens" && key != "tokens_b" && key != "mask") continue;
    json j;
    try {
      j = json::parse(value);
    } catch (const json::exception& e) {
      throw Error(where + ": __metadata__ \"" + key + "\" is not a JSON list (" + json_error_text(e.what()) + ")");
    }
    if (!j.is_array()) throw Error(where + ": __metadata__ \"" + key + "\" is not a JSON list");
    if (key == "mask") {  // numbers: a float tensor like any other
      Tensor m;
      const bool nested = !j.empty() && j[0].is_array();
      m.shape = nested ? std::vector<int64_t>{static_cast<int64_t>(j.size()), static_cast<int64_t>(j[0].size())}
                       : std::vector<int64_t>{static_cast<int64_t>(j.size())};
      for (const auto& row : nested ? j : json::array({j})) {
        if (!row.is_array() || static_cast<int64_t>(row.size()) != m.shape.back())
          throw Error(where + ": __metadata__ \"mask\" rows differ in length");
        for (const auto& v : row) {
          if (!v.is_number() && !v.is_boolean()) throw Error(where + ": __metadata__ \"mask\" holds a non-number");
          m.data.push_back(v.is_boolean() ? (v.get<bool>() ? 1.0f : 0.0f) : v.get<float>());
        }
      }
      c.arrays["mask"] = std::move(m);
      continue;
    }
    std::vector<std::string> s;
    std::vector<int64_t> shape;
    const bool nested = !j.empty() && j[0].is_array();
    for (const auto& row : nested ? j : json::array({j})) {
      if (!row.is_array()) throw Error(where + ": __metadata__ \"" + key + "\" mixes lists and strings");
      if (nested && row.size() != j[0].size())
        throw Error(where + ": __metadata__ \"" + key + "\" rows differ in length");
      for (const auto& t : row) {
        if (!t.is_string()) throw Error(where + ": __metadata__ \"" + key + "\" holds a non-string");
        s.push_back(t.get<std::string>());
      }
    }
    shape = nested ? std::vector<int64_t>{static_cast<int64_t>(j.size()), static_cast<int64_t>(j[0].size())}
                   : std::vector<int64_t>{static_cast<int64_t>(s.size())};
    c.strings[key] = {std::move(s), std::move(shape)};
  }
  return c;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Sequence `b` of a [batch, ...] array, the array itself without one.
Tensor pick(const Tensor& t, int64_t b) {
  Tensor out;
  out.shape.assign(t.shape.begin() + 1, t.shape.end());
  const int64_t n = Tensor::numel_of(out.shape);
  out.data.assign(t.data.begin() + b * n, t.data.begin() + (b + 1) * n);
  return out;
}

// The per-layer arrays under one naming scheme ("attentions_", "arr_", "blocks.{l}.attn.hook_pattern"):
// layer index -> name, empty when the scheme is not used.
std::map<int, std::string> layer_arrays(const Contents& c) {
  static const std::regex schemes[] = {std::regex(R"(attentions?[._](\d+))"), std::regex(R"(arr_(\d+))"),
                                       std::regex(R"(blocks\.(\d+)\.attn\.hook_pattern)")};
  for (const auto& re : schemes) {
    std::map<int, std::string> found;
    for (const auto& [name, t] : c.arrays) {
      std::smatch m;
      if (std::regex_match(name, m, re) && m[1].length() < 6) found[std::stoi(m[1])] = name;
    }
    if (!found.empty()) return found;
  }
  return {};
}

std::vector<std::string> strings_of(const Contents& c, const std::string& name, int64_t batch, int64_t batches,
                                    const std::string& where) {
  const auto it = c.strings.find(name);
  if (it == c.strings.end()) {
    if (c.arrays.count(name))
      throw Error(where + ": \"" + name +
                  "\" holds numbers, not strings (token ids? save tokenizer.convert_ids_to_tokens(ids) as a "
                  "list of strings)");
    return {};
  }
  const auto& [s, shape] = it->second;
  if (static_cast<int64_t>(s.size()) != Tensor::numel_of(shape))
    throw Error(where + ": \"" + name + "\" " + shape_text(shape) + " holds " + std::to_string(s.size()) + " strings");
  if (shape.size() == 1) return s;
  if (shape.size() == 2) {
    if (shape[0] != batches)
      throw Error(where + ": \"" + name + "\" " + shape_text(shape) + " has " + std::to_string(shape[0]) +
                  " rows for " + std::to_string(batches) + " sequences in the batch");
    return {s.begin() + batch * shape[1], s.begin() + (batch + 1) * shape[1]};
  }
  throw Error(where + ": \"" + name + "\" must be [T] or [batch, T], got " + shape_text(shape));
}

AttentionFile assemble(Contents c, const std::string& where, int batch) {
  AttentionFile f;
  // The layers, each [batch?, heads, T, S], and how many sequences the batch holds.
  std::vector<Tensor> raw;
  std::string layout;
  bool batched = false;
  const char* stacked_name = c.arrays.count("attentions") || c.stacks.count("attentions") ? "attentions"
                             : c.arrays.count("attention") || c.stacks.count("attention") ? "attention"
                                                                                          : nullptr;
  const std::map<int, std::string> per_layer = layer_arrays(c);
  if (stacked_name && c.stacks.count(stacked_name)) {  // read as its layers already
    NpySlices& stack = c.stacks.at(stacked_name);
    layout = std::string(stacked_name) + " " + shape_text(stack.shape);
    if (stack.shape.size() != 4 && stack.shape.size() != 5)
      throw Error(where + ": \"" + stacked_name + "\" " + shape_text(stack.shape) +
                  " must be [heads, T, S], [layers, heads, T, S] or [layers, batch, heads, T, S]");
    raw = std::move(stack.slices);
    batched = stack.shape.size() == 5;
  } else if (stacked_name) {
    const Tensor& t = c.arrays.at(stacked_name);
    layout = std::string(stacked_name) + " " + shape_text(t.shape);
    if (t.shape.size() == 3) {
      raw.push_back(std::move(c.arrays.at(stacked_name)));
    } else if (t.shape.size() == 4 || t.shape.size() == 5) {
      for (int64_t l = 0; l < t.shape[0]; ++l) raw.push_back(pick(t, l));
      batched = t.shape.size() == 5;
    } else {
      throw Error(where + ": \"" + stacked_name + "\" " + shape_text(t.shape) +
                  " must be [heads, T, S], [layers, heads, T, S] or [layers, batch, heads, T, S]");
    }
  } else if (!per_layer.empty()) {
    int expected = 0;
    for (const auto& [l, name] : per_layer) {
      if (l != expected)
        throw Error(where + ": layer " + std::to_string(expected) + " is missing (found \"" + name + "\")");
      ++expected;
      const Tensor& t = c.arrays.at(name);
      if (t.shape.size() != 3 && t.shape.size() != 4)
        throw Error(where + ": \"" + name + "\" " + shape_text(t.shape) +
                    " must be [heads, T, S] or [batch, heads, T, S]");
      if (!raw.empty() && t.shape.size() != raw[0].shape.size())
        throw Error(where + ": \"" + name + "\" " + shape_text(t.shape) + " differs in rank from \"" +
                    per_layer.begin()->second + "\"");
      raw.push_back(std::move(c.arrays.at(name)));  // moved: a file's per-layer arrays are not copied
    }
    batched = raw[0].shape.size() == 4;
    layout = per_layer.begin()->second + " .. " + per_layer.rbegin()->second + " " + shape_text(raw[0].shape);
  } else {
    std::string names;
    for (const auto& [name, t] : c.arrays) names += (names.empty() ? "" : ", ") + name + " " + shape_text(t.shape);
    for (const auto& [name, s] : c.strings) names += (names.empty() ? "" : ", ") + name + " (strings)";
    throw Error(where +
                ": no attention found: expected \"attentions\", \"attentions_0\"..., \"arr_0\"... or "
                "TransformerLens's \"blocks.0.attn.hook_pattern\"... (the file holds " +
                (names.empty() ? std::string("nothing") : names) + ")");
  }
  if (raw.empty()) throw Error(where + ": the attention has no layers");

  int64_t batches = 1, b = 0;
  if (batched) {
    batches = raw[0].shape[0];
    if (batches < 1) throw Error(where + ": the batch is empty");
    if (batch >= batches)
      throw Error(where + ": --batch " + std::to_string(batch) + " but the file holds " + std::to_string(batches) +
                  " sequence" + (batches == 1 ? "" : "s"));
    b = std::max(batch, 0);
    if (batch < 0 && batches > 1)
      f.warnings.push_back("the file holds " + std::to_string(batches) +
                           " sequences; showing the first (choose another with --batch)");
  } else if (batch > 0) {
    throw Error(where + ": --batch " + std::to_string(batch) + " but the attention has no batch dimension");
  }
  const std::vector<int64_t> shape0 = raw[0].shape;
  for (size_t l = 0; l < raw.size(); ++l) {
    if (raw[l].shape != shape0)
      throw Error(where + ": layer " + std::to_string(l) + " is " + shape_text(raw[l].shape) + ", layer 0 is " +
                  shape_text(shape0));
    f.layers.push_back(batched ? pick(raw[l], b) : std::move(raw[l]));
  }
  const int64_t H = f.layers[0].shape[0], T = f.layers[0].shape[1], S = f.layers[0].shape[2];
  if (H < 1 || T < 1 || S < 1) throw Error(where + ": the attention " + shape_text(f.layers[0].shape) + " is empty");

  f.tokens = strings_of(c, "tokens", b, batches, where);
  f.tokens_b = strings_of(c, "tokens_b", b, batches, where);
  if (f.tokens.empty()) {
    for (int64_t i = 0; i < T; ++i) f.tokens.push_back(std::to_string(i));
    f.warnings.push_back("the file has no \"tokens\": positions label the axes");
  } else if (static_cast<int64_t>(f.tokens.size()) != T) {
    throw Error(where + ": " + std::to_string(f.tokens.size()) + " tokens for " + std::to_string(T) +
                " query positions (the attention is " + shape_text(f.layers[0].shape) + ", [heads, T, S])");
  }
  if (!f.tokens_b.empty() && static_cast<int64_t>(f.tokens_b.size()) != S)
    throw Error(where + ": " + std::to_string(f.tokens_b.size()) + " tokens_b for " + std::to_string(S) +
                " key positions (the attention is " + shape_text(f.layers[0].shape) + ", [heads, T, S])");
  if (f.tokens_b.empty() && S != T)
    throw Error(where + ": the attention " + shape_text(f.layers[0].shape) + " has " + std::to_string(T) +
                " queries and " + std::to_string(S) + " keys: cross attention needs \"tokens_b\" for the keys");

  const char* mask_name = c.arrays.count("mask")             ? "mask"
                          : c.arrays.count("attention_mask") ? "attention_mask"
                                                             : nullptr;
  if (mask_name) {
    const Tensor& m = c.arrays.at(mask_name);
    Tensor row;
    if (m.shape.size() == 1)
      row = m;
    else if (m.shape.size() == 2 && m.shape[0] == batches)
      row = pick(m, b);
    else
      throw Error(where + ": \"" + mask_name + "\" " + shape_text(m.shape) + " must be [S] or [batch, S]");
    if (row.numel() != S)
      throw Error(where + ": \"" + mask_name + "\" has " + std::to_string(row.numel()) + " entries for " +
                  std::to_string(S) + " keys");
    for (float v : row.data) {
      if (v != 0.0f && v != 1.0f)
        throw Error(where + ": \"" + mask_name + "\" holds " + std::to_string(v) +
                    ": it is Hugging Face's attention_mask, 1 for a kept key and 0 for padding");
      f.key_kept.push_back(v != 0.0f ? 1 : 0);
    }
  }

  // Every value a probability. Rows sum to 1 up to the rounding of the dtype the file was saved
  // in: a 16-bit value is off by at most half its unit in the last place (2^-9 of it for bf16,
  // 2^-11 for fp16), so a row of values summing to 1 is off by at most 2^-9 ~ 2e-3, plus float32
  // sums (S * 2^-24, below 1e-4 at 1,000 keys). 4e-3 leaves twice that.
  const double tol = 4e-3;
  int64_t off_rows = 0, zero_rows = 0;
  double worst = 0;
  std::string worst_at;
  for (int l = 0; l < f.num_layers(); ++l) {
    const Tensor& P = f.layers[static_cast<size_t>(l)];
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const float* row = P.data.data() + (h * T + i) * S;
        double sum = 0;
        for (int64_t j = 0; j < S; ++j) {
          const float v = row[j];
          if (!std::isfinite(v) || v < -1e-6f) {
            const std::string at = where + ": layer " + std::to_string(l) + " head " + std::to_string(h) + " row " +
                                   std::to_string(i) + " column " + std::to_string(j);
            if (!std::isfinite(v)) throw Error(at + " is " + (std::isnan(v) ? "NaN" : "infinite"));
            throw Error(at + " is " + std::to_string(v) +
                        ": probabilities are never negative (scores before the softmax?)");
          }
          sum += v;
        }
        if (std::abs(sum) <= tol) {
          ++zero_rows;
        } else if (std::abs(sum - 1.0) > tol) {
          ++off_rows;
          if (std::abs(sum - 1.0) > worst) {
            worst = std::abs(sum - 1.0);
            worst_at = "layer " + std::to_string(l) + " head " + std::to_string(h) + " row " + std::to_string(i) +
                       " sums to " + std::to_string(sum);
          }
        }
      }
  }
  if (off_rows)
    f.warnings.push_back(std::to_string(off_rows) + " rows do not sum to 1 (" + worst_at +
                         "): not softmax probabilities? They are shown as they are");
  if (zero_rows) f.warnings.push_back(std::to_string(zero_rows) + " rows are all zero (queries that saw no key)");
  f.layout = layout + " (" + c.kind + ")";
  return f;
}

}  // namespace

namespace {

Contents read_contents(const std::string& bytes, const std::string& where) {
  if (bytes.size() >= 2 && bytes.compare(0, 2, "PK") == 0) return read_npz(bytes, where);
  if (bytes.size() >= 9 && bytes[8] == '{') return read_safetensors(bytes, where);
  throw Error(where + ": not an attention file (expected an .npz or a .safetensors file)");
}

}  // namespace

AttentionFile parse_attention_file(const std::string& bytes, const std::string& where, int batch) {
  return assemble(read_contents(bytes, where), where, batch);
}

AttentionFile load_attention_file(const std::string& path, int batch, double available) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) throw Error(path + ": cannot open (" + ec.message() + ")");
  // While it is read: the file's bytes and float32 values of its arrays (twice the bytes of a
  // 16-bit file), then the layers cut from them: an .npz's stack is read layer by layer, so up to
  // about three times the file (plus a deflated member's own bytes: each bounded by deflate's
  // 1032:1 and checked before it is inflated); a .safetensors file up to five times.
  const bool npz = std::filesystem::path(path).extension() == ".npz";
  const double factor = npz ? 3.0 : 5.0;
  if (available > 0 && factor * static_cast<double>(size) > available)
    throw Error(path + ": reading " + std::to_string(size >> 20) + " MB of attention takes about " +
                std::to_string(static_cast<long long>(factor * static_cast<double>(size)) >> 20) + " MB and " +
                std::to_string(static_cast<long long>(available) >> 20) +
                " MB are free: save fewer layers, or one sequence of the batch");
  std::string bytes = read_file_bytes(path);
  Contents c = read_contents(bytes, path);
  std::string().swap(bytes);  // the values are read: the file's bytes go before the layers are cut
  return assemble(std::move(c), path, batch);
}

ForwardResult attention_result(AttentionFile file) {
  ForwardResult r;
  const int T = file.queries(), S = file.keys();
  // One id per distinct token string: what the head patterns' repeated-token (induction) test
  // compares, as the ids of a vocabulary would.
  std::map<std::string, int> id_of;
  auto ids_of = [&](const std::vector<std::string>& tokens) {
    std::vector<int> ids;
    for (const auto& t : tokens) ids.push_back(id_of.emplace(t, static_cast<int>(id_of.size())).first->second);
    return ids;
  };
  r.tokens = file.tokens;
  r.ids = ids_of(file.tokens);
  if (file.is_cross()) {
    r.cross_tokens = file.tokens_b;
    r.cross_ids = ids_of(file.tokens_b);
    r.cross_attention = std::move(file.layers);
  } else {
    r.attention = std::move(file.layers);
  }
  r.mask.T = T;
  r.mask.S = S;
  if (!file.key_kept.empty()) {
    r.mask.blocked.assign(static_cast<size_t>(T) * static_cast<size_t>(S), 0);
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < S; ++j) r.mask.blocked[r.mask.index(0, i, j)] = file.key_kept[static_cast<size_t>(j)] ? 0 : 1;
  }
  r.warnings = std::move(file.warnings);
  return r;
}

Model attention_model(const ForwardResult& result, const std::string& source) {
  const std::vector<Tensor>& layers = result.is_cross() ? result.cross_attention : result.attention;
  if (layers.empty() || layers[0].shape.size() != 3) throw Error(source + ": no attention to show");
  Model m;
  m.probabilities_only = true;
  m.source = source;
  ModelConfig& c = m.config;
  c.num_layers = static_cast<int>(layers.size());
  c.num_heads = static_cast<int>(layers[0].dim(0));
  c.embed_size = c.num_heads;  // no hidden state: one unit a head keeps head_dim() meaningful
  c.max_len = static_cast<int>(std::max(result.ids.size(), result.cross_ids.size()));
  // the vocabulary: token i is the string the ids of attention_result number
  std::vector<std::string> vocab;
  auto add = [&](const std::vector<int>& ids, const std::vector<std::string>& tokens) {
    for (size_t k = 0; k < ids.size() && k < tokens.size(); ++k) {
      const size_t id = static_cast<size_t>(ids[k]);
      if (id >= vocab.size()) vocab.resize(id + 1);
      vocab[id] = tokens[k];
    }
  };
  add(result.ids, result.tokens);
  add(result.cross_ids, result.cross_tokens);
  c.vocab_size = static_cast<int>(vocab.size());
  m.vocab = Vocab(std::move(vocab));
  return m;
}

}  // namespace attnlab
