// Relative positions (Shaw et al.): P[h, i, j] += G[h, i, idx(i, j) - lo], where G = Q_h R_h^T
// was computed by a batched GEMM over the reachable rows [lo, lo + nrel) of the table and
// idx(i, j) = clamp(i - j, -(max_len - 1), max_len - 1) + max_len - 1.
__kernel void add_relative(__global float* P, __global const float* G, const int T, const int S, const int nrel,
                           const int lo, const int max_len) {
  const int j = get_global_id(0);
  const int i = get_global_id(1);
  const int h = get_global_id(2);
  if (j >= S || i >= T) return;
  int d = i - j;
  d = clamp(d, -(max_len - 1), max_len - 1);
  const int idx = d + max_len - 1 - lo;
  P[((size_t)h * T + i) * S + j] += G[((size_t)h * T + i) * nrel + idx];
}
