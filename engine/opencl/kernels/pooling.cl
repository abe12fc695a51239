// Pooling for the classifier: pooled[e] = sum_t w[t] * x[t, e], with w from the host
// (mean: 1/T everywhere; masked mean: 1/n on non-[PAD] tokens; cls: 1 at position 0).
__kernel void pool(__global const float* x, __global const float* w, const int T, const int E,
                   __global float* pooled) {
  const int e = get_global_id(0);
  if (e >= E) return;
  float s = 0.0f;
  for (int t = 0; t < T; ++t) s += w[t] * x[(size_t)t * E + e];
  pooled[e] = s;
}
