// Token embedding gather plus the positional term: x[t, e] = table[ids[t], e] (+ pos[t, e]).
// The positional table (learned, or sinusoidal precomputed on the host in double precision) is
// optional: has_pos = 0 for models without absolute positions.
__kernel void embed(__global const int* ids, __global const float* table, __global const float* pos, const int has_pos,
                    const int E, __global float* x) {
  const int e = get_global_id(0);
  const int t = get_global_id(1);
  if (e >= E) return;
  float v = table[(size_t)ids[t] * E + e];
  if (has_pos) v += pos[(size_t)t * E + e];
  x[(size_t)t * E + e] = v;
}
