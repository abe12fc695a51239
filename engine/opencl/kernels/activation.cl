// Feed-forward activations, in place. GELU is the exact (erf) form, as nn.GELU().
__kernel void relu_inplace(__global float* x, const int n) {
  const int i = get_global_id(0);
  if (i < n) x[i] = fmax(x[i], 0.0f);
}

__kernel void gelu_inplace(__global float* x, const int n) {
  const int i = get_global_id(0);
  if (i < n) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.0f + erf(v * 0.70710678118654752f));
  }
}
