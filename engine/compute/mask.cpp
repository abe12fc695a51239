// Building effective attention masks from a MaskSpec, and parsing --mask arguments.
#include "engine/compute/mask.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace attnlab {

namespace {

int parse_positive(const std::string& arg, const std::string& num) {
  if (num.empty() || num.find_first_not_of("0123456789") != std::string::npos || num.size() > 9)
    throw Error("--mask " + arg + ": expected a positive integer after ':'");
  const int v = std::atoi(num.c_str());
  if (v <= 0) throw Error("--mask " + arg + ": expected a positive integer after ':'");
  return v;
}

}  // namespace

std::string MaskSpec::describe() const {
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : " + ") + part; };
  if (padding) add("padding");
  if (causal) add("causal");
  if (window > 0) add("window:" + std::to_string(window));
  if (stride > 0) add("strided:" + std::to_string(stride));
  if (!global.empty()) {
    std::string g = "global:";
    for (size_t i = 0; i < global.size(); ++i) g += (i ? "," : "") + std::to_string(global[i]);
    add(g);
  }
  if (custom) add("custom:" + custom_source);
  return s.empty() ? "none" : s;
}

void add_mask_arg(MaskSpec& spec, const std::string& arg) {
  const size_t colon = arg.find(':');
  const std::string kind = arg.substr(0, colon);
  const std::string value = colon == std::string::npos ? "" : arg.substr(colon + 1);
  const bool has_value = colon != std::string::npos;
  if (kind == "causal" || kind == "padding") {
    if (has_value) throw Error("--mask " + arg + ": '" + kind + "' takes no value");
    (kind == "causal" ? spec.causal : spec.padding) = true;
  } else if (kind == "window") {
    spec.window = parse_positive(arg, value);
  } else if (kind == "strided") {
    spec.stride = parse_positive(arg, value);
  } else if (kind == "global") {
    if (value.empty()) throw Error("--mask " + arg + ": expected positions, e.g. global:0,7");
    size_t start = 0;
    while (start <= value.size()) {
      size_t end = value.find(',', start);
      if (end == std::string::npos) end = value.size();
      const std::string num = value.substr(start, end - start);
      if (num.empty() || num.find_first_not_of("0123456789") != std::string::npos || num.size() > 9)
        throw Error("--mask " + arg + ": '" + num + "' is not a position");
      spec.global.push_back(std::atoi(num.c_str()));
      start = end + 1;
    }
  } else if (kind == "custom") {
    if (value.empty()) throw Error("--mask " + arg + ": expected a file, e.g. custom:mask.npy");
    spec.custom = load_npy(value);
    spec.custom_source = value;
  } else {
    throw Error("--mask " + arg +
                ": unknown mask (expected causal, padding, window:W, strided:S, global:I,J, custom:FILE.npy)");
  }
}

AttnMask build_mask(const MaskSpec& spec, int T, int S, int num_heads, const std::vector<int>& key_ids, int pad_id) {
  if (num_heads <= 0 || T < 0 || S < 0) throw Error("attention mask: invalid shape (heads must be positive)");
  AttnMask m;
  m.T = T;
  m.S = S;
  const NpyArray* custom = spec.custom ? &*spec.custom : nullptr;
  if (custom) {
    const auto& sh = custom->tensor.shape;
    const bool shared = sh.size() == 2 && sh[0] == T && sh[1] == S;
    const bool per_head = sh.size() == 3 && sh[0] == num_heads && sh[1] == T && sh[2] == S;
    if (!shared && !per_head)
      throw Error("custom mask " + spec.custom_source + " has shape " + shape_str(sh) + ", expected [" +
                  std::to_string(T) + ", " + std::to_string(S) + "] or [" + std::to_string(num_heads) + ", " +
                  std::to_string(T) + ", " + std::to_string(S) + "]");
    m.planes = per_head ? num_heads : 1;
  }
  if (spec.padding && pad_id < 0) throw Error("padding mask: the vocabulary has no [PAD] token");
  for (int g : spec.global)
    if (g >= std::max(T, S))
      throw Error("global token position " + std::to_string(g) + " is outside the sequence (length " +
                  std::to_string(std::max(T, S)) + ")");
  if (spec.empty()) return m;

  std::vector<uint8_t> global_q(static_cast<size_t>(T), 0), global_k(static_cast<size_t>(S), 0);
  for (int g : spec.global) {
    if (g < T) global_q[static_cast<size_t>(g)] = 1;
    if (g < S) global_k[static_cast<size_t>(g)] = 1;
  }
  if (T == 0 || S == 0) return m;  // nothing to block (and no row to point at)
  const size_t plane_size = static_cast<size_t>(T) * static_cast<size_t>(S);
  m.blocked.assign(plane_size * static_cast<size_t>(m.planes), 0);
  bool any_blocked = false;
  // The structural part is the same for every plane: compute it once into plane 0, row by row
  // with range fills (long sequences build their mask at memset speed, not per cell).
  std::vector<int> pad_keys;
  if (spec.padding)
    for (int j = 0; j < S; ++j)
      if (key_ids.at(static_cast<size_t>(j)) == pad_id) pad_keys.push_back(j);
  std::vector<int> global_keys;
  for (int j = 0; j < S; ++j)
    if (global_k[static_cast<size_t>(j)]) global_keys.push_back(j);
  for (int i = 0; i < T; ++i) {
    uint8_t* row = m.blocked.data() + static_cast<size_t>(i) * S;
    if (spec.has_sparse_pattern() && !global_q[static_cast<size_t>(i)]) {
      // blocked unless the window, the stride or a global key makes it visible
      std::memset(row, 1, static_cast<size_t>(S));
      auto open = [&](int lo, int hi) {  // inclusive, clipped
        lo = std::max(lo, 0), hi = std::min(hi, S - 1);
        if (lo <= hi) std::memset(row + lo, 0, static_cast<size_t>(hi - lo + 1));
      };
      if (spec.window > 0) open(i - spec.window / 2, i + spec.window / 2);
      if (spec.stride > 0) {
        open(i - spec.stride + 1, i + spec.stride - 1);
        for (int j = i % spec.stride; j < S; j += spec.stride) row[j] = 0;  // (i - j) mod S == 0
      }
      for (int j : global_keys) row[j] = 0;
    }
    if (spec.causal && i + 1 < S) std::memset(row + i + 1, 1, static_cast<size_t>(S - i - 1));
    for (int j : pad_keys) row[j] = 1;
    any_blocked |= std::memchr(row, 1, static_cast<size_t>(S)) != nullptr;
  }
  for (int p = 1; p < m.planes; ++p)
    std::copy(m.blocked.begin(), m.blocked.begin() + static_cast<std::ptrdiff_t>(plane_size),
              m.blocked.begin() + static_cast<std::ptrdiff_t>(plane_size * static_cast<size_t>(p)));
  if (custom) {
    const auto& v = custom->tensor.data;
    if (custom->kind == NpyKind::Float) {
      m.additive.assign(v.size(), 0.0f);
      for (size_t k = 0; k < v.size(); ++k) {
        if (std::isnan(v[k]) || v[k] == std::numeric_limits<float>::infinity())
          throw Error("custom mask " + spec.custom_source + " contains NaN or +inf at flat index " + std::to_string(k));
        if (std::isinf(v[k])) {
          m.blocked[k] = 1;
          any_blocked = true;
        } else {
          m.additive[k] = v[k];
        }
      }
    } else {
      for (size_t k = 0; k < v.size(); ++k)
        if (v[k] != 0.0f) {
          m.blocked[k] = 1;
          any_blocked = true;
        }
    }
  }
  if (!any_blocked) m.blocked.clear();
  return m;
}

Tensor AttnMask::as_tensor() const {
  Tensor t({planes, T, S});
  const float ninf = -std::numeric_limits<float>::infinity();
  for (size_t k = 0; k < t.data.size(); ++k) {
    if (!blocked.empty() && blocked[k])
      t.data[k] = ninf;
    else if (!additive.empty())
      t.data[k] = additive[k];
  }
  return t;
}

std::vector<std::pair<int, int>> AttnMask::fully_blocked_rows() const {
  std::vector<std::pair<int, int>> rows;
  if (blocked.empty()) return rows;
  for (int p = 0; p < planes; ++p)
    for (int i = 0; i < T; ++i) {
      if (S > 0 && std::memchr(blocked.data() + index(p, i, 0), 0, static_cast<size_t>(S)) == nullptr)
        rows.emplace_back(p, i);
    }
  return rows;
}

std::vector<std::string> mask_warnings(const AttnMask& mask, const std::string& what) {
  std::vector<std::string> out;
  const auto rows = mask.fully_blocked_rows();
  if (rows.empty()) return out;
  std::string list;
  int shown = 0;
  for (const auto& [p, i] : rows) {
    if (shown++ == 20) {
      list += ", ...";
      break;
    }
    list +=
        (list.empty() ? "" : ", ") + std::to_string(i) + (mask.planes > 1 ? " (head " + std::to_string(p) + ")" : "");
  }
  out.push_back(what + ": " + std::to_string(rows.size()) +
                " query row(s) have every key blocked and get all-zero "
                "attention: " +
                list);
  return out;
}

MaskSpec model_mask(const ModelConfig& c, MaskSpec spec) {
  if (c.causal) spec.causal = true;  // a decoder's own mask: always on
  return spec;
}

void block_outside_window(AttnMask& mask, int window) {
  if (mask.blocked.empty()) mask.blocked.assign(static_cast<size_t>(mask.planes) * mask.T * mask.S, 0);
  for (int p = 0; p < mask.planes; ++p)
    for (int i = 0; i < mask.T; ++i)
      for (int j = 0; j + window < i; ++j) mask.blocked[mask.index(p, i, j)] = 1;
}

void apply_model_window(AttnMask& mask, const ModelConfig& c) {
  if (c.sliding_window <= 0) return;
  if (!c.mixed_windows()) return block_outside_window(mask, c.sliding_window);
  auto windowed = std::make_shared<AttnMask>(mask);
  windowed->sliding.reset();
  block_outside_window(*windowed, c.sliding_window);
  mask.sliding = std::move(windowed);
}

const AttnMask& layer_mask(const AttnMask& mask, const ModelConfig& c, int layer) {
  if (!mask.sliding || !c.layer_slides(layer)) return mask;
  return *mask.sliding;
}

AttnMask mask_rows(const AttnMask& mask, int first) {
  AttnMask out;
  if (mask.sliding) out.sliding = std::make_shared<AttnMask>(mask_rows(*mask.sliding, first));
  out.planes = mask.planes, out.T = mask.T - first, out.S = mask.S;
  auto copy = [&](const auto& from, auto& to) {
    if (from.empty()) return;
    to.resize(static_cast<size_t>(out.planes) * out.T * out.S);
    for (int p = 0; p < mask.planes; ++p)
      std::copy_n(from.begin() + static_cast<std::ptrdiff_t>(mask.index(p, first, 0)),
                  static_cast<size_t>(out.T) * out.S, to.begin() + static_cast<std::ptrdiff_t>(out.index(p, 0, 0)));
  };
  copy(mask.blocked, out.blocked);
  copy(mask.additive, out.additive);
  return out;
}

}  // namespace attnlab
