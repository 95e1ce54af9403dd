// Parameters of both mul_mat paths: result[i, j, i2, i3] = dot(weight row
// (i, i2/r2, i3/r3), activation row (j, i2, i3)).
layout(push_constant) uniform Params {
  uint K, M, N, ne2, ne3;  // row length, weight rows, activation rows, batch dims of the result
  uint r2, r3;             // broadcast ratios of the weights over dims 2 and 3
  uint a_off, a_nb1, a_nb2, a_nb3;         // weights, bytes
  uint b_off, b_nb0, b_nb1, b_nb2, b_nb3;  // activations, floats
  uint d_off, d_nb1, d_nb2, d_nb3;         // result, floats
} p;
