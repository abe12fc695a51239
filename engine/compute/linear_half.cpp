#include "engine/compute/linear_half.h"

#include <algorithm>

namespace attnlab {

void linear_half(Ops& ops, const Tensor& x, const HalfTensor& W, const Tensor& b, Tensor& y, HalfScratch& st) {
  const int64_t N = x.dim(0), out = W.shape[0], in = W.shape[1];
  const int64_t rows = std::max<int64_t>(16, kHalfBlock / std::max<int64_t>(1, in) / 16 * 16);
  if (rows >= out) {  // one block: straight into y
    st.wide.reshape_for_overwrite({out, in});
    widen_rows(W, 0, out, st.wide.ptr());
    ops.transient_weights(st.wide);
    ops.linear(x, st.wide, b, y);
    return;
  }
  y.reshape_for_overwrite({N, out});
  for (int64_t r0 = 0; r0 < out; r0 += rows) {
    const int64_t r1 = std::min(out, r0 + rows), n = r1 - r0;
    st.wide.reshape_for_overwrite({n, in});
    widen_rows(W, r0, r1, st.wide.ptr());
    if (!b.empty()) {
      st.wide_b.reshape_for_overwrite({n});
      std::copy(b.ptr() + r0, b.ptr() + r1, st.wide_b.ptr());
    }
    ops.transient_weights(st.wide);
    ops.linear(x, st.wide, b.empty() ? b : st.wide_b, st.wide_y);
    for (int64_t t = 0; t < N; ++t)
      std::copy(st.wide_y.ptr() + t * n, st.wide_y.ptr() + (t + 1) * n, y.ptr() + t * out + r0);
  }
}

}  // namespace attnlab
