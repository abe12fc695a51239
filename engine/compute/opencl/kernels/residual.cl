// Residual connection: y += x, elementwise over n values.
__kernel void add_inplace(__global float* y, __global const float* x, const int n) {
  const int i = get_global_id(0);
  if (i < n) y[i] += x[i];
}

// Copy n values (layer inputs kept for cross-attention, pre-norm branches).
__kernel void copy_buffer(__global float* dst, __global const float* src, const int n) {
  const int i = get_global_id(0);
  if (i < n) dst[i] = src[i];
}
