#include "tools/sensitivity/pooled_fit.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "qlens/error.h"

namespace qlens::tools {

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

std::vector<std::vector<int>> balanced_signs(int n_units, int n_passes, uint64_t seed) {
  if (n_passes < 2 || n_passes % 2 != 0)
    throw Error("sensitivity: --mode pooled needs an even number of signed passes, at least 2 (got " +
                std::to_string(n_passes) + ")");
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int>> sign(n_passes, std::vector<int>(n_units));
  std::vector<int> column(n_passes);
  for (int i = 0; i < n_units; ++i) {
    for (int p = 0; p < n_passes; ++p) column[p] = p < n_passes / 2 ? 1 : -1;
    std::shuffle(column.begin(), column.end(), rng);
    for (int p = 0; p < n_passes; ++p) sign[p][i] = column[p];
  }
  return sign;
}

SignedFit fit_signed(const std::vector<std::vector<int>>& sign, const std::vector<std::vector<double>>& gram,
                     const std::vector<double>& energy, const std::vector<int>& group) {
  const size_t m = sign.size(), n = energy.size();
  SignedFit f;
  f.delta_kld.assign(n, 0.0);
  if (m == 0 || n == 0) return f;
  // The equations, scaled to order 1 (the mean of the diagonal: Σ n_i).
  double scale = 0;
  for (size_t p = 0; p < m; ++p) scale += gram[p][p] / m;
  if (!(scale > 0)) return f;
  std::vector<std::vector<double>> rows;
  std::vector<double> value;
  for (size_t p = 0; p < m; ++p)
    for (size_t q = p; q < m; ++q) {
      std::vector<double> r(n);
      for (size_t i = 0; i < n; ++i) r[i] = sign[p][i] * sign[q][i];
      rows.push_back(std::move(r));
      value.push_back(gram[p][q] / scale);
    }
  const size_t n_eq = rows.size();
  std::vector<double> x(n, 1.0 / n);
  nnls(rows, value, std::vector<double>(n_eq, 1.0), x, std::vector<bool>(n, false));
  double rss = 0, sum_sq = 0;
  for (size_t k = 0; k < n_eq; ++k) {
    double pred = 0;
    for (size_t i = 0; i < n; ++i) pred += rows[k][i] * x[i];
    rss += (value[k] - pred) * (value[k] - pred);
    sum_sq += value[k] * value[k];
  }
  // The prior: per group, the mean of n / E (E > 0), times each unit's E;
  // a group with none measured above zero takes the mean over all units.
  std::vector<double> per_energy_sum, count;
  double all_sum = 0, all_count = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!(energy[i] > 0)) continue;
    const size_t g = static_cast<size_t>(group[i]);
    if (g >= per_energy_sum.size()) {
      per_energy_sum.resize(g + 1, 0.0);
      count.resize(g + 1, 0.0);
    }
    per_energy_sum[g] += x[i] / energy[i];
    count[g] += 1;
    all_sum += x[i] / energy[i];
    all_count += 1;
  }
  const double all_mean = all_count > 0 ? all_sum / all_count : 0;
  std::vector<double> prior(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t g = static_cast<size_t>(group[i]);
    const double mean = g < count.size() && count[g] > 0 && per_energy_sum[g] > 0 ? per_energy_sum[g] / count[g] : all_mean;
    prior[i] = std::max(mean * std::max(energy[i], 0.0), 1e-12 / n);
  }
  // Least squares with the prior: (XᵀX/σ² + 1/τ²) n = Xᵀd/σ² + prior/τ², τ = prior.
  const double sigma_sq = std::max(rss / static_cast<double>(n_eq > n ? n_eq - n : 1), 1e-30);
  std::vector<std::vector<double>> a(n, std::vector<double>(n + 1, 0.0));
  for (size_t k = 0; k < n_eq; ++k)
    for (size_t i = 0; i < n; ++i) {
      a[i][n] += rows[k][i] * value[k] / sigma_sq;
      for (size_t j = 0; j < n; ++j) a[i][j] += rows[k][i] * rows[k][j] / sigma_sq;
    }
  for (size_t i = 0; i < n; ++i) {
    a[i][i] += 1.0 / (prior[i] * prior[i]);
    a[i][n] += 1.0 / prior[i];
  }
  const std::vector<double> drawn = solve_symmetric(std::move(a));
  for (size_t i = 0; i < n; ++i) f.delta_kld[i] = 0.5 * scale * std::max(drawn[i], 1e-3 * prior[i]);
  f.relative_rms = sum_sq > 0 ? std::sqrt(rss / sum_sq) : 0;
  return f;
}

}  // namespace qlens::tools
