// Feed-forward activations, in place. gelu is the exact (erf) form, as nn.GELU(); gelu_tanh the
// tanh approximation, nn.GELU(approximate="tanh"); silu x sigmoid(x), nn.SiLU().
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

__kernel void gelu_tanh_inplace(__global float* x, const int n) {
  const int i = get_global_id(0);
  if (i < n) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.0f + tanh(0.7978845608028654f * (v + 0.044715f * v * v * v)));
  }
}

__kernel void silu_inplace(__global float* x, const int n) {
  const int i = get_global_id(0);
  if (i < n) {
    const float v = x[i];
    x[i] = v / (1.0f + exp(-v));
  }
}
