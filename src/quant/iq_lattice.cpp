// The lattice search of the i-quants' quantizers (iq_lattice.h).
#include "quant/iq_lattice.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numeric>

#include "quant/iq_grids.h"

namespace qlens::quant::iq {

Lattice::Lattice(const uint16_t* points, int n_points, const int8_t* levels, int n_levels, int coords, int bits)
    : coords_(coords), bits_(bits), n_levels_(n_levels), levels_(levels, levels + n_levels) {
  for (int k = 0; k + 1 < n_levels; ++k) midpoints_.push_back(0.5f * (levels_[k] + levels_[k + 1]));
  midpoints_.resize(7, INFINITY);
  const int mask = (1 << bits) - 1;
  digits_.resize(static_cast<size_t>(n_points) * coords);
  values_.resize(digits_.size());
  for (int p = 0; p < n_points; ++p)
    for (int j = 0; j < coords; ++j) {
      digits_[p * coords + j] = static_cast<uint8_t>((points[p] >> (bits * j)) & mask);
      values_[p * coords + j] = levels_[digits_[p * coords + j]];
    }
  const size_t n_keys = size_t{1} << (bits * coords);
  point_of_key_.assign(n_keys, -1);
  for (int p = 0; p < n_points; ++p) point_of_key_[points[p]] = static_cast<int16_t>(p);
  // Every key whose digits are levels: its kNeighbours nearest points.
  neighbours_.assign(n_keys * kNeighbours, 0);
  std::vector<int> order(n_points);
  std::vector<float> dist(n_points);
  for (size_t key = 0; key < n_keys; ++key) {
    bool valid = true;
    for (int j = 0; j < coords; ++j) valid &= static_cast<int>((key >> (bits * j)) & mask) < n_levels;
    if (!valid) continue;
    for (int p = 0; p < n_points; ++p) {
      float d2 = 0;
      for (int j = 0; j < coords; ++j) {
        const float diff = levels_[(key >> (bits * j)) & mask] - levels_[digits_[p * coords + j]];
        d2 += diff * diff;
      }
      dist[p] = d2;
    }
    std::iota(order.begin(), order.end(), 0);
    const int k = std::min(kNeighbours, n_points);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int a, int b) { return dist[a] < dist[b] || (dist[a] == dist[b] && a < b); });
    for (int i = 0; i < k; ++i) neighbours_[key * kNeighbours + i] = static_cast<uint16_t>(order[i]);
  }
}

int Lattice::digit_of(float v) const {
  // The count of midpoints below v (padded with +inf to 7): branch-free.
  int d = 0;
  for (int k = 0; k < 7; ++k) d += v > midpoints_[k];
  return d;
}

template <int kCoords>
int Lattice::best_point_of(const float* t, const float* w, float s, double* err) const {
  const float inv = 1.0f / s;
  uint32_t key = 0;
  // sum w (t - s c)^2 = sum w t^2 - 2 s sum (w t) c + s^2 sum w c^2: the
  // candidates compare by two short dot products each.
  float wt[kCoords];
  for (int j = 0; j < kCoords; ++j) {
    key |= static_cast<uint32_t>(digit_of(t[j] * inv)) << (bits_ * j);
    wt[j] = w[j] * t[j];
  }
  auto cost = [&](int p) {
    const float* c = values_.data() + static_cast<size_t>(p) * kCoords;
    float a = 0, b = 0;
    for (int j = 0; j < kCoords; ++j) {
      a += wt[j] * c[j];
      b += w[j] * c[j] * c[j];
    }
    return s * (s * b - 2 * a);
  };
  int best = point_of_key_[key];
  if (best < 0) {
    const uint16_t* near = neighbours_.data() + static_cast<size_t>(key) * kNeighbours;
    best = near[0];
    float best_cost = cost(best);
    for (int i = 1; i < kNeighbours; ++i) {
      const float c = cost(near[i]);
      if (c < best_cost) {
        best_cost = c;
        best = near[i];
      }
    }
  }
  // The chosen point's error in double: the runs' sums compare scales by it.
  double e = 0;
  const float* c = values_.data() + static_cast<size_t>(best) * kCoords;
  for (int j = 0; j < kCoords; ++j) {
    const double d = static_cast<double>(t[j]) - static_cast<double>(s) * c[j];
    e += w[j] * d * d;
  }
  *err = e;
  return best;
}

int Lattice::best_point(const float* t, const float* w, float s, double* err) const {
  assert(s > 0 && (coords_ == 4 || coords_ == 8));
  return coords_ == 8 ? best_point_of<8>(t, w, s, err) : best_point_of<4>(t, w, s, err);
}

namespace {

// The points' least-squares scale and its error: sum w t g, sum w g^2 and sum w t^2.
struct Sums {
  double tg = 0, gg = 0, tt = 0;
};

Sums point_sums(const Lattice& lattice, const Lattice* alt, const float* t, const float* w, int n, const PointFit& fit) {
  Sums s;
  const int c = lattice.coords();
  for (int g = 0; g < n / c; ++g) {
    const Lattice& l = fit.on_alt[g] ? *alt : lattice;
    for (int j = 0; j < c; ++j) {
      const int e = g * c + j;
      const double level = l.coordinate(fit.points[g], j);
      s.tg += w[e] * t[e] * level;
      s.gg += w[e] * level * level;
      s.tt += static_cast<double>(w[e]) * t[e] * t[e];
    }
  }
  return s;
}

// The refit: the least-squares scale of fit's points (kept >= 0) and its error.
void refit_scale(const Lattice& lattice, const Lattice* alt, const float* t, const float* w, int n, PointFit& fit) {
  const Sums s = point_sums(lattice, alt, t, w, n, fit);
  const double scale = s.gg > 0 ? std::max(s.tg / s.gg, 0.0) : 0.0;
  fit.scale = static_cast<float>(scale);
  fit.error = s.tt - 2 * scale * s.tg + scale * scale * s.gg;
}

}  // namespace

PointFit points_for_scale(const Lattice& lattice, const float* t, const float* w, int n, float s, const Lattice* alt) {
  PointFit fit;
  fit.scale = s;
  const int c = lattice.coords();
  if (!(s > 0)) {  // every point dequantizes to 0
    for (int e = 0; e < n; ++e) fit.error += static_cast<double>(w[e]) * t[e] * t[e];
    return fit;
  }
  for (int g = 0; g < n / c; ++g) {
    double err;
    fit.points[g] = static_cast<uint16_t>(lattice.best_point(t + g * c, w + g * c, s, &err));
    if (alt) {
      double alt_err;
      const int p = alt->best_point(t + g * c, w + g * c, s, &alt_err);
      if (alt_err < err) {
        fit.points[g] = static_cast<uint16_t>(p);
        fit.on_alt[g] = true;
        err = alt_err;
      }
    }
    fit.error += err;
  }
  return fit;
}

PointFit fit_points(const Lattice& lattice, const float* t, const float* w, int n, const Lattice* alt) {
  float tmax = 0;
  for (int e = 0; e < n; ++e) tmax = std::max(tmax, std::fabs(t[e]));
  PointFit best = points_for_scale(lattice, t, w, n, 0.0f);
  if (!(tmax > 1e-30f)) return best;
  const float s0 = tmax / lattice.top_level();
  for (int k = 0; k <= 8; ++k) {
    PointFit fit = points_for_scale(lattice, t, w, n, s0 * (0.6f + 0.075f * static_cast<float>(k)), alt);
    refit_scale(lattice, alt, t, w, n, fit);
    if (fit.error < best.error) best = fit;
  }
  for (int round = 0; round < 4 && best.scale > 0; ++round) {
    PointFit fit = points_for_scale(lattice, t, w, n, best.scale, alt);
    refit_scale(lattice, alt, t, w, n, fit);
    if (!(fit.error < best.error)) break;
    best = fit;
  }
  return best;
}

const Lattice& iq2xxs_lattice() {
  static const Lattice l(kIq2xxsPoints, 256, kLevels2bit, 3, 8, 2);
  return l;
}
const Lattice& iq2xs_lattice() {
  static const Lattice l(kIq2xsPoints, 512, kLevels2bit, 3, 8, 2);
  return l;
}
const Lattice& iq2s_lattice() {
  static const Lattice l(kIq2sPoints, 1024, kLevels2bit, 3, 8, 2);
  return l;
}
const Lattice& iq3xxs_lattice() {
  static const Lattice l(kIq3xxsPoints, 256, kLevelsIq3xxs, 8, 4, 3);
  return l;
}
const Lattice& iq3s_lattice() {
  static const Lattice l(kIq3sPoints, 512, kLevelsIq3s, 8, 4, 3);
  return l;
}
const Lattice& iq1_plus_lattice() {
  static constexpr int8_t kLevels[3] = {-7, 1, 9};
  static const Lattice l(kIq1sPoints, 2048, kLevels, 3, 8, 2);
  return l;
}
const Lattice& iq1_minus_lattice() {
  static constexpr int8_t kLevels[3] = {-9, -1, 7};
  static const Lattice l(kIq1sPoints, 2048, kLevels, 3, 8, 2);
  return l;
}

}  // namespace qlens::quant::iq
