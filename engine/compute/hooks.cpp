// Hook points (see hooks.h).
#include "engine/compute/hooks.h"

#include <algorithm>

namespace attnlab {

bool glob_match(const std::string& pattern, const std::string& s) {
  // iterative matcher with one backtrack point for the last '*'
  size_t p = 0, i = 0, star = std::string::npos, mark = 0;
  while (i < s.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = i;
    } else if (p < pattern.size() && pattern[p] == s[i]) {
      ++p, ++i;
    } else if (star != std::string::npos) {
      p = star + 1;
      i = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool HookRun::kept(const std::string& name) const {
  return std::any_of(spec_.cache.begin(), spec_.cache.end(), [&](const std::string& g) { return glob_match(g, name); });
}

std::vector<const HookEdit*> HookRun::edits_of(const std::string& name) const {
  std::vector<const HookEdit*> out;
  for (const HookEdit& e : spec_.edits)
    if (e.name == name) out.push_back(&e);
  return out;
}

bool HookRun::wanted(const std::string& name) const {
  return kept(name) ||
         std::any_of(spec_.edits.begin(), spec_.edits.end(), [&](const HookEdit& e) { return e.name == name; });
}

void HookRun::visit(const std::string& name, Tensor& value, const std::vector<int64_t>& shape) {
  met.insert(name);
  const int64_t rows = value.dim(0), full = rows > 0 ? static_cast<int64_t>(value.data.size()) / rows : 0;
  for (const HookEdit& e : spec_.edits) {
    if (e.name != name) continue;
    if (e.kind == HookEdit::Kind::Apply) {
      const std::vector<int64_t> kept_shape = value.shape;
      value.shape = {rows, full};
      e.apply(value);
      if (static_cast<int64_t>(value.data.size()) != rows * full)
        throw Error(name + ": an applied function changed the activation's size");
      value.shape = kept_shape;
      continue;
    }
    // one head's columns of a per-head value, or the whole row
    int64_t first = 0, width = full;
    if (e.head >= 0) {
      if (shape.size() != 3 || e.head >= shape[1])
        throw Error(
            name + ": no head " + std::to_string(e.head) +
            (shape.size() == 3 ? " (it has " + std::to_string(shape[1]) + ")" : " (it is not a per-head value)"));
      width = shape[2];
      first = e.head * width;
    }
    std::vector<int> pos = e.positions;
    if (pos.empty())
      for (int t = 0; t < rows; ++t) pos.push_back(t);
    for (int t : pos)
      if (t < 0 || t >= rows)
        throw Error(name + ": no position " + std::to_string(t) + " (the input has " + std::to_string(rows) + ")");
    const int64_t n = static_cast<int64_t>(e.value.data.size());
    const bool one_row = e.kind == HookEdit::Kind::Add && n == width;
    // a whole cached activation (every position) with positions listed: the listed rows of it
    const bool all_rows = !e.positions.empty() && n == rows * width && static_cast<int64_t>(pos.size()) != rows;
    if (!one_row && !all_rows && n != static_cast<int64_t>(pos.size()) * width)
      throw Error(name + ": the " + (e.kind == HookEdit::Kind::Add ? "added" : "patched") + " value has " +
                  std::to_string(n) + " numbers; " + std::to_string(pos.size()) + " position(s) of width " +
                  std::to_string(width) + " need " + std::to_string(static_cast<int64_t>(pos.size()) * width) +
                  " (or the whole activation, " + std::to_string(rows * width) + ", whose listed rows are taken)" +
                  (e.kind == HookEdit::Kind::Add ? " (or one row of " + std::to_string(width) + ")" : std::string()));
    for (size_t r = 0; r < pos.size(); ++r) {
      float* dst = value.ptr() + static_cast<int64_t>(pos[r]) * full + first;
      const int64_t from = one_row ? 0 : all_rows ? pos[r] : static_cast<int64_t>(r);
      const float* src = e.value.ptr() + from * width;
      if (e.kind == HookEdit::Kind::Replace)
        std::copy_n(src, width, dst);
      else
        for (int64_t j = 0; j < width; ++j) dst[j] += e.alpha * src[j];
    }
  }
  if (kept(name)) {
    Tensor copy = value;
    copy.shape = shape;
    cache[name] = std::move(copy);
  }
}

HookEdit mean_ablation(int layer, int head, int d_head) {
  HookEdit e;
  e.kind = HookEdit::Kind::Apply;
  e.name = "blocks." + std::to_string(layer) + ".attn.hook_z";
  e.apply = [head, d_head](Tensor& z) {  // z: [T, heads * d_head]
    const int64_t T = z.dim(0), width = z.dim(1), first = static_cast<int64_t>(head) * d_head;
    if (first + d_head > width)
      throw Error("mean ablation: no head " + std::to_string(head) + " (" + std::to_string(width / d_head) + " heads)");
    for (int64_t d = first; d < first + d_head; ++d) {
      double sum = 0;
      for (int64_t t = 0; t < T; ++t) sum += z.ptr()[t * width + d];
      const float mean = static_cast<float>(sum / static_cast<double>(T));
      for (int64_t t = 0; t < T; ++t) z.ptr()[t * width + d] = mean;
    }
  };
  return e;
}

void HookRun::check_all_met() const {
  for (const HookEdit& e : spec_.edits)
    if (!met.count(e.name))
      throw Error("no activation \"" + e.name +
                  "\" in this model's pass (attnlab-cli forward --list-hooks names them)");
}

}  // namespace attnlab
