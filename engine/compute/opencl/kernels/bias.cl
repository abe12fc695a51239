// Bias add after a GEMM: y[r, c] += b[c] for a row-major (rows, cols) matrix.
__kernel void add_bias(__global float* y, __global const float* b, const int cols) {
  const int c = get_global_id(0);
  const size_t r = get_global_id(1);
  if (c >= cols) return;
  y[r * cols + c] += b[c];
}
