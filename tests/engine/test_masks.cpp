// Mask rules: each kind blocks exactly the positions the issue and the articles define, the
// --mask parser accepts the documented forms and rejects the rest with a message.
#include <cmath>

#include <catch2/catch.hpp>

#include "engine/compute/mask.h"

using namespace attnlab;

namespace {
AttnMask build(const MaskSpec& s, int T, int S = -1, const std::vector<int>& ids = {}) {
  if (S < 0) S = T;
  std::vector<int> keys = ids.empty() ? std::vector<int>(static_cast<size_t>(S), 5) : ids;
  return build_mask(s, T, S, 2, keys, 0);
}
}  // namespace

TEST_CASE("causal blocks exactly the keys after the query", "[masks]") {
  MaskSpec s;
  s.causal = true;
  const AttnMask m = build(s, 5, 7);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 7; ++j) CHECK(m.is_blocked(0, i, j) == (j > i));
}

TEST_CASE("sliding window follows the article's SparseAttention rule", "[masks]") {
  for (const int W : {1, 2, 3, 4, 7}) {
    MaskSpec s;
    s.window = W;
    const AttnMask m = build(s, 9);
    for (int i = 0; i < 9; ++i)
      for (int j = 0; j < 9; ++j) {
        // article: start = max(0, i - W//2), end = min(T, i + W//2 + 1), mask[i, start:end] = 0
        const bool visible = j >= std::max(0, i - W / 2) && j < std::min(9, i + W / 2 + 1);
        CHECK(m.is_blocked(1, i, j) == !visible);
      }
  }
}

TEST_CASE("strided and global widen each other", "[masks]") {
  MaskSpec s;
  s.stride = 3;
  AttnMask m = build(s, 10);
  for (int i = 0; i < 10; ++i)
    for (int j = 0; j < 10; ++j) CHECK(m.is_blocked(0, i, j) == !(std::abs(i - j) < 3 || (i - j) % 3 == 0));
  s.global = {4};
  m = build(s, 10);
  for (int i = 0; i < 10; ++i) {
    CHECK_FALSE(m.is_blocked(0, 4, i));
    CHECK_FALSE(m.is_blocked(0, i, 4));
  }
  MaskSpec only_global;
  only_global.global = {1};
  CHECK(build(only_global, 6).blocked.empty());  // nothing to widen: blocks nothing
}

TEST_CASE("padding blocks [PAD] keys only; custom masks combine by union and sum", "[masks]") {
  MaskSpec s;
  s.padding = true;
  const AttnMask m = build(s, 4, 4, {7, 8, 0, 0});
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) CHECK(m.is_blocked(0, i, j) == (j >= 2));

  MaskSpec f;
  f.causal = true;
  f.custom = NpyArray{Tensor({3, 3}), NpyKind::Float};
  f.custom->tensor.data = {0.5f, 0, 0, -INFINITY, 0, 0, 0, 0, -2.0f};
  const AttnMask c = build(f, 3);
  CHECK(c.add(0, 0, 0) == 0.5f);
  CHECK(c.is_blocked(0, 1, 0));  // -inf from the float mask
  CHECK(c.is_blocked(0, 0, 2));  // causal
  CHECK(c.add(1, 2, 2) == -2.0f);
  const Tensor t = c.as_tensor();
  CHECK(std::isinf(t.data[1]));
  CHECK(t.data[8] == -2.0f);

  f.custom->tensor.data[4] = NAN;
  CHECK_THROWS_WITH(build(f, 3), Catch::Contains("NaN"));
}

TEST_CASE("--mask arguments parse or fail with a message", "[masks][cli]") {
  MaskSpec s;
  add_mask_arg(s, "causal");
  add_mask_arg(s, "window:8");
  add_mask_arg(s, "strided:4");
  add_mask_arg(s, "global:0,7");
  add_mask_arg(s, "padding");
  CHECK(s.causal);
  CHECK(s.padding);
  CHECK(s.window == 8);
  CHECK(s.stride == 4);
  CHECK(s.global == std::vector<int>{0, 7});
  CHECK(s.describe() == "padding + causal + window:8 + strided:4 + global:0,7");
  for (const char* bad : {"window", "window:", "window:0", "window:-3", "window:x", "strided:2.5",
                          "global:", "global:1,,2", "casual", "causal:1", "custom:", "custom:/nonexistent/m.npy"}) {
    CAPTURE(bad);
    MaskSpec t;
    CHECK_THROWS_AS(add_mask_arg(t, bad), Error);
  }
  MaskSpec g;
  add_mask_arg(g, "global:9");
  g.window = 2;
  CHECK_THROWS_WITH(build(g, 5), Catch::Contains("global token position 9"));
}
