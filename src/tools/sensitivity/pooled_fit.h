// Sensitivity in fewer passes (--mode pooled): every pass perturbs every
// tensor at once with the noise --mode noise gives each alone (δ_i), each
// with a sign drawn per pass: +δ_i in half the passes, -δ_i in the other
// half. To first order a pass moves the output log-probabilities by
// Σ_i s_pi v_i (v_i: what δ_i alone does), so the passes' Gram matrix under
// the reference's probabilities is G_pq = Σ_i s_pi s_qi n_i + the cross
// terms <v_i, v_k> (small: independent noise draws), with n_i = |v_i|² =
// 2 ΔKLD_i to second order. M passes give M(M+1)/2 such equations for the
// tensors' n_i, where summing each pass's ΔKLD would give M: a quarter of
// noise mode's passes ranks the tensors as well as noise mode ranks them
// between two halves of a text (docs/SENSITIVITY.md).
#pragma once

#include <cstdint>
#include <vector>

namespace qlens::tools {

// n_passes sign patterns over n_units (sign[p][i] = ±1, seeded), each unit
// + in exactly half of the passes (n_passes even, at least 2), so that the
// passes' mean shift holds none of the first-order terms.
std::vector<std::vector<int>> balanced_signs(int n_units, int n_passes, uint64_t seed);

struct SignedFit {
  std::vector<double> delta_kld;  // per unit: ΔKLD of its noise alone (n_i / 2)
  double relative_rms = 0;        // the equations' residual RMS over their RMS
};

// The n_i from gram[p][q] (every pair p <= q an equation): non-negative
// least squares first; then each unit drawn toward a prior, the mean of
// n / energy over the units of its group (a tensor's role) times its energy
// (the noise's weighted error E_i), with a spread equal to the prior itself
// and the equations' noise estimated from the first fit's residuals: the
// cross terms make small units' plain estimates noisy, down to zero.
SignedFit fit_signed(const std::vector<std::vector<int>>& sign, const std::vector<std::vector<double>>& gram,
                     const std::vector<double>& energy, const std::vector<int>& group);

}  // namespace qlens::tools
