#include "tools/sensitivity/pooled_fit.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "qlens/error.h"

namespace qlens::tools {

std::vector<std::vector<int>> pooled_subsets(int n_units, int n_passes, uint64_t seed, double share) {
  if (n_passes < 2) throw Error("sensitivity: --mode pooled needs at least 2 passes");
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int>> passes(n_passes);
  std::vector<int> in_count(n_units, 0);
  for (auto& pass : passes)
    for (int i = 0; i < n_units; ++i)
      if (static_cast<double>(rng() >> 11) * 0x1.0p-53 < share) {
        pass.push_back(i);
        ++in_count[i];
      }
  // Every unit in at least one pass and out of one (else it cannot be told apart).
  for (int i = 0; i < n_units; ++i) {
    auto& to = passes[rng() % n_passes];
    if (in_count[i] == 0) to.insert(std::lower_bound(to.begin(), to.end(), i), i);
    if (in_count[i] == n_passes) to.erase(std::lower_bound(to.begin(), to.end(), i));
  }
  return passes;
}

namespace {

// min Σ_k w_k (d_k - Σ_j M_kj x_j)² over x >= 0, by coordinate descent on
// the normal equations (a few dozen unknowns).
void nnls(const std::vector<std::vector<double>>& m, const std::vector<double>& d, const std::vector<double>& w,
          std::vector<double>& x, const std::vector<bool>& fixed) {
  const size_t n = x.size();
  std::vector<std::vector<double>> g(n, std::vector<double>(n, 0.0));
  std::vector<double> h(n, 0.0);
  for (size_t k = 0; k < d.size(); ++k)
    for (size_t i = 0; i < n; ++i) {
      if (m[k][i] == 0) continue;
      h[i] += w[k] * m[k][i] * d[k];
      for (size_t j = 0; j < n; ++j) g[i][j] += w[k] * m[k][i] * m[k][j];
    }
  for (int sweep = 0; sweep < 200; ++sweep)
    for (size_t i = 0; i < n; ++i) {
      if (fixed[i] || g[i][i] <= 0) continue;
      double gx = 0;
      for (size_t j = 0; j < n; ++j) gx += g[i][j] * x[j];
      x[i] = std::max(0.0, x[i] + (h[i] - gx) / g[i][i]);
    }
}

// Solves the symmetric positive definite system [A | b] (rows of n + 1) by
// Gaussian elimination with partial pivoting.
std::vector<double> solve_symmetric(std::vector<std::vector<double>> a) {
  const size_t n = a.size();
  for (size_t c = 0; c < n; ++c) {
    size_t piv = c;
    for (size_t r = c + 1; r < n; ++r)
      if (std::abs(a[r][c]) > std::abs(a[piv][c])) piv = r;
    std::swap(a[c], a[piv]);
    if (a[c][c] == 0) continue;
    for (size_t r = c + 1; r < n; ++r) {
      const double m = a[r][c] / a[c][c];
      if (m == 0) continue;
      for (size_t k = c; k <= n; ++k) a[r][k] -= m * a[c][k];
    }
  }
  std::vector<double> x(n, 0.0);
  for (size_t c = n; c-- > 0;) {
    double v = a[c][n];
    for (size_t k = c + 1; k < n; ++k) v -= a[c][k] * x[k];
    x[c] = a[c][c] != 0 ? v / a[c][c] : 0;
  }
  return x;
}

}  // namespace

PooledFit fit_pooled(const std::vector<PooledUnit>& units, int n_roles, int n_layers,
                     const std::vector<std::vector<int>>& passes, const std::vector<double>& measured) {
  const size_t n_passes = passes.size();
  PooledFit f;
  f.role_factor.assign(n_roles, 1.0);
  f.layer_factor.assign(n_layers + 1, 1.0);
  std::vector<double> w(n_passes);
  double mean_d = 0;
  for (double d : measured) mean_d += std::max(d, 0.0) / n_passes;
  for (size_t k = 0; k < n_passes; ++k) {
    const double d = std::max(measured[k], 1e-3 * mean_d + 1e-30);
    w[k] = 1.0 / (d * d);
  }
  std::vector<bool> no_fixed_role(n_roles, false), fixed_layer(n_layers + 1, false);
  fixed_layer[n_layers] = true;  // outside the layers: the roles' factors carry it
  for (int round = 0; round < 60; ++round) {
    std::vector<std::vector<double>> m(n_passes, std::vector<double>(n_roles, 0.0));
    for (size_t k = 0; k < n_passes; ++k)
      for (int i : passes[k]) m[k][units[i].role] += f.layer_factor[units[i].layer] * units[i].energy;
    nnls(m, measured, w, f.role_factor, no_fixed_role);
    std::vector<std::vector<double>> ml(n_passes, std::vector<double>(n_layers + 1, 0.0));
    for (size_t k = 0; k < n_passes; ++k)
      for (int i : passes[k]) ml[k][units[i].layer] += f.role_factor[units[i].role] * units[i].energy;
    nnls(ml, measured, w, f.layer_factor, fixed_layer);
    // Scale: the layers' factors average 1, the roles' take the rest.
    double mean_b = 0;
    for (int l = 0; l < n_layers; ++l) mean_b += f.layer_factor[l] / std::max(1, n_layers);
    if (mean_b > 0 && n_layers > 0) {
      for (int l = 0; l < n_layers; ++l) f.layer_factor[l] /= mean_b;
      // The outside units' terms must keep their value: their roles are
      // theirs alone, so only the in-layer roles take the scale.
      std::vector<bool> outside_only(n_roles, true);
      for (const PooledUnit& u : units)
        if (u.layer < n_layers) outside_only[u.role] = false;
      for (int r = 0; r < n_roles; ++r)
        if (!outside_only[r]) f.role_factor[r] *= mean_b;
    }
  }
  // Each tensor its own coefficient, drawn toward the structured one as far
  // as the passes say nothing else: least squares with a prior, the passes'
  // relative error weighted against kNonAdditivity (what the passes' sums
  // miss of their parts' one-at-a-time effects, about 5% on Gemma 3) and
  // each tensor's relative deviation against kSpread (how far tensors stray
  // from role x layer, about 0.5 in log on Gemma 3's one-at-a-time table).
  constexpr double kNonAdditivity = 0.05, kSpread = 0.5;
  const size_t n = units.size();
  std::vector<double> prior(n);
  for (size_t i = 0; i < n; ++i) prior[i] = std::max(f.role_factor[units[i].role] * f.layer_factor[units[i].layer], 1e-300);
  std::vector<std::vector<double>> g(n, std::vector<double>(n + 1, 0.0));  // the normal equations, right side last
  for (size_t k = 0; k < n_passes; ++k) {
    const double wk = w[k] / (kNonAdditivity * kNonAdditivity);
    for (int i : passes[k]) {
      g[i][n] += wk * units[i].energy * measured[k];
      for (int j : passes[k]) g[i][j] += wk * units[i].energy * units[j].energy;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const double wi = 1.0 / (kSpread * kSpread * prior[i] * prior[i]);
    g[i][i] += wi;
    g[i][n] += wi * prior[i];
  }
  f.coefficient = solve_symmetric(g);
  for (size_t i = 0; i < n; ++i) f.coefficient[i] = std::max(f.coefficient[i], 0.0);
  double sq = 0;
  for (size_t k = 0; k < n_passes; ++k) {
    double pred = 0;
    for (int i : passes[k]) pred += f.coefficient[i] * units[i].energy;
    const double rel = (pred - measured[k]) / std::max(measured[k], 1e-30);
    sq += rel * rel;
  }
  f.relative_rms = n_passes ? std::sqrt(sq / n_passes) : 0;
  return f;
}

}  // namespace qlens::tools
