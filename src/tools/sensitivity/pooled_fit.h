// Sensitivity in fewer passes (--mode pooled): each pass perturbs a random
// share of the tensors at once (a quarter by default) with the noise --mode
// noise gives each alone, and the passes' ΔKLD are explained as sums of the
// tensors' contributions, ΔKLD(S) ≈ Σ_{i∈S} c_i · E_i (E_i: the noise's
// weighted error energy on tensor i; small perturbations add up nearly
// linearly): first with c_i = a_role(i) · b_layer(i), about (roles + layers)
// unknowns that a quarter of noise mode's passes determine, then each c_i
// drawn from there toward what the passes say of it alone.
#pragma once

#include <cstdint>
#include <vector>

namespace qlens::tools {

// n_passes subsets of units 0..n_units-1: each unit in each pass with
// probability `share` (seeded), every unit in at least one pass and out of
// at least one.
std::vector<std::vector<int>> pooled_subsets(int n_units, int n_passes, uint64_t seed, double share);

struct PooledUnit {
  int role = 0;    // 0..n_roles-1
  int layer = 0;   // 0..n_layers-1; n_layers: outside the layers (its factor stays 1)
  double energy = 0;  // E_i
};

struct PooledFit {
  std::vector<double> role_factor, layer_factor;  // a, b (b's mean over the layers 1)
  std::vector<double> coefficient;                // per unit: near a_role · b_layer, as the passes allow
  double relative_rms = 0;                        // of the passes' residuals, relative to each pass's ΔKLD
};

// The non-negative factors that best explain `measured` (one ΔKLD per
// pass, weighted relatively: each pass's error over its value), by
// alternating non-negative least squares, and each unit's coefficient from
// them by least squares with the factors' product as its prior.
PooledFit fit_pooled(const std::vector<PooledUnit>& units, int n_roles, int n_layers,
                     const std::vector<std::vector<int>>& passes, const std::vector<double>& measured);

}  // namespace qlens::tools
