// The decoder steps of the layer plan (engine/compute/plan.h), in place, each as the reference ops
// compute it (engine/compute/ops.h's rms_norm_row and rope_row).

// RMSNorm over rows of E values: x * rsqrt(mean(x^2) + eps) * g, one work-group per row, a tree
// reduction in local memory (Llama's RMSNorm; with E = head_dim over (position, head) rows it is
// Qwen3's q / k norm). The local size must be a power of two.
__kernel void rms_norm(__global float* x, __global const float* g, const int E, const float eps,
                       __local float* scratch) {
  const size_t row = get_group_id(0);
  const int lid = get_local_id(0);
  const int ls = get_local_size(0);
  __global float* p = x + row * E;
  float s = 0.0f;
  for (int e = lid; e < E; e += ls) s += p[e] * p[e];
  scratch[lid] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int k = ls / 2; k > 0; k >>= 1) {
    if (lid < k) scratch[lid] += scratch[lid + k];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float r = rsqrt(scratch[0] / E + eps);
  for (int e = lid; e < E; e += ls) p[e] = g[e] * (p[e] * r);
}

// Rotary positions on rows of `width` values (heads of D side by side): each head's first and
// second halves rotated by the position's angles, cos / sin tables [T, D / 2] (rotate_half, as
// transformers' apply_rotary_pos_emb). Work items: (i < D / 2, head, row).
__kernel void rope(__global float* x, __global const float* cs, __global const float* sn, const int width,
                   const int D) {
  const int i = get_global_id(0), h = get_global_id(1);
  const size_t row = get_global_id(2);
  const int h2 = D / 2;
  __global float* x1 = x + row * width + h * D;
  const float a = x1[i], b = x1[i + h2], c = cs[row * h2 + i], s = sn[row * h2 + i];
  x1[i] = a * c - b * s;
  x1[i + h2] = b * c + a * s;
}

// a *= b elementwise (SwiGLU / GeGLU: the activated gate times the up projection).
__kernel void mul_inplace(__global float* a, __global const float* b, const int n) {
  const int i = get_global_id(0);
  if (i < n) a[i] *= b[i];
}

// x *= s (Gemma's token embedding times sqrt(hidden)).
__kernel void scale_inplace(__global float* x, const float s, const int n) {
  const int i = get_global_id(0);
  if (i < n) x[i] *= s;
}
