// Parameters of both mul_mat paths: result[i, j, i2, i3] = dot(weight row
// (i, i2/r2, i3/r3), activation row (j, i2, i3)).
//
// MUL_MAT_ID (the expert matmul): the result's rows are the N = n_used *
// n_tokens (slot u, token t) pairs, pair r = u + n_used t; pair r's row is
// dot(row i of expert ids[u, t]'s weights (at a_nb2 bytes per expert),
// activation row (u % b_ne1, t)), written to result row (u, t). ne2, ne3,
// r2, r3 and the dim-3 strides are unused.
layout(push_constant) uniform Params {
  uint K, M, N, ne2, ne3;  // row length, weight rows, activation rows, batch dims of the result
  uint r2, r3;             // broadcast ratios of the weights over dims 2 and 3
  uint a_off, a_nb1, a_nb2, a_nb3;         // weights, bytes
  uint b_off, b_nb0, b_nb1, b_nb2, b_nb3;  // activations, floats
  uint d_off, d_nb1, d_nb2, d_nb3;         // result, floats
#if defined(MUL_MAT_ID)
  uint ids_off, ids_nb0, ids_nb1;  // expert ids [n_used, n_tokens], ints
  uint n_used, b_ne1, n_expert;
#endif
} p;

#if defined(MUL_MAT_ID)
layout(binding = 3) readonly buffer Ids { int ids[]; };

// The expert of pair r; as uint, so that a negative id is out of range too.
uint expert_of(uint r) { return uint(ids[p.ids_off + (r % p.n_used) * p.ids_nb0 + (r / p.n_used) * p.ids_nb1]); }
// Where pair r reads its activations and writes its result (floats).
uint pair_b_row(uint r) { return p.b_off + ((r % p.n_used) % p.b_ne1) * p.b_nb1 + (r / p.n_used) * p.b_nb2; }
uint pair_d_row(uint r) { return p.d_off + (r % p.n_used) * p.d_nb1 + (r / p.n_used) * p.d_nb2; }
#endif
