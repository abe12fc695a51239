// LayerNorm over the last dimension, in place: one work-group per row, a tree reduction in local
// memory for the mean and the (biased) variance, then (x - mean) * rstd * g + b.
// The local size must be a power of two.
__kernel void layer_norm(__global float* x, __global const float* g, __global const float* b, const int E,
                         const float eps, __local float* scratch) {
  const size_t row = get_group_id(0);
  const int lid = get_local_id(0);
  const int ls = get_local_size(0);
  __global float* p = x + row * E;

  float s = 0.0f;
  for (int e = lid; e < E; e += ls) s += p[e];
  scratch[lid] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int k = ls / 2; k > 0; k >>= 1) {
    if (lid < k) scratch[lid] += scratch[lid + k];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float mean = scratch[0] / E;
  barrier(CLK_LOCAL_MEM_FENCE);

  float v = 0.0f;
  for (int e = lid; e < E; e += ls) {
    const float d = p[e] - mean;
    v += d * d;
  }
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int k = ls / 2; k > 0; k >>= 1) {
    if (lid < k) scratch[lid] += scratch[lid + k];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float rstd = rsqrt(scratch[0] / E + eps);
  for (int e = lid; e < E; e += ls) p[e] = (p[e] - mean) * rstd * g[e] + b[e];
}
