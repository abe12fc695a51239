// Scale [+ soft cap] + mask + numerically stable softmax, one work-group per score row, in place.
// P is (H, T, S); blocked / additive are (planes, T, S) with planes 1 (shared) or H. softcap > 0:
// the scaled score becomes softcap * tanh(score / softcap) before the mask (Gemma 2).
// Blocked keys end at exactly 0; a row with every key blocked ends all zeros (never NaN).
// The local size must be a power of two.
__kernel void masked_softmax(__global float* P, const int T, const int S, const float scale,
                             __global const uchar* blocked, __global const float* additive, const int planes,
                             const int has_blocked, const int has_additive, const float softcap,
                             __local float* scratch) {
  const size_t row = get_group_id(0);  // h * T + i
  const int lid = get_local_id(0);
  const int ls = get_local_size(0);
  const int h = (int)(row / T), i = (int)(row % T);
  const size_t mrow = ((size_t)(planes == 1 ? 0 : h) * T + i) * S;
  __global float* p = P + row * S;

  float m = -INFINITY;
  for (int j = lid; j < S; j += ls) {
    float v = p[j] * scale;
    if (softcap > 0.0f) v = tanh(v / softcap) * softcap;
    if (has_additive) v += additive[mrow + j];
    if (has_blocked && blocked[mrow + j]) v = -INFINITY;
    p[j] = v;
    m = fmax(m, v);
  }
  scratch[lid] = m;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int k = ls / 2; k > 0; k >>= 1) {
    if (lid < k) scratch[lid] = fmax(scratch[lid], scratch[lid + k]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  m = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (m == -INFINITY) {  // every key blocked
    for (int j = lid; j < S; j += ls) p[j] = 0.0f;
    return;
  }
  float s = 0.0f;
  for (int j = lid; j < S; j += ls) {
    const float e = p[j] == -INFINITY ? 0.0f : exp(p[j] - m);
    p[j] = e;
    s += e;
  }
  scratch[lid] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int k = ls / 2; k > 0; k >>= 1) {
    if (lid < k) scratch[lid] += scratch[lid + k];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float inv = 1.0f / scratch[0];
  for (int j = lid; j < S; j += ls) p[j] *= inv;
}
