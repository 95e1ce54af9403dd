// The search behind the i-quants' quantizers: points of a lattice grid
// (iq_grids.h) times a scale, fitted to a block's magnitudes under
// per-element weights. Internal to src/quant (iquants.cpp packs the results).
//
// A point's coordinates are levels (bytes of the expanded grid); a digit is a
// level's index. For a target t (magnitudes; a negative one where a sign
// could not follow its element) and a scale s, the point with the least
// sum_j w_j (t_j - s level_j)^2 is looked for among the rounded point (each
// t_j / s on its nearest level, the unconstrained optimum: taken when it is
// on the grid) and the kNeighbours grid points nearest to it (by the levels'
// distance; precomputed once per grid for every rounded point).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace qlens::quant::iq {

inline constexpr int kNeighbours = 16;

class Lattice {
 public:
  // points: the compact points; levels: the digits' values, ascending.
  Lattice(const uint16_t* points, int n_points, const int8_t* levels, int n_levels, int coords, int bits);

  int coords() const { return coords_; }
  float level(int digit) const { return levels_[digit]; }
  float top_level() const { return std::max(std::fabs(levels_.front()), std::fabs(levels_.back())); }
  // Point p's coordinate j as a level value.
  float coordinate(int p, int j) const { return values_[p * coords_ + j]; }

  // The best point for coords_ targets at t with weights w and scale s > 0;
  // its error sum_j w_j (t_j - s level_j)^2 in *err.
  int best_point(const float* t, const float* w, float s, double* err) const;

 private:
  int digit_of(float v) const;  // the nearest level's index (v in level units)
  template <int kCoords>
  int best_point_of(const float* t, const float* w, float s, double* err) const;

  int coords_, bits_, n_levels_;
  std::vector<float> levels_;
  std::vector<float> midpoints_;       // between consecutive levels (then +inf, 7 in all)
  std::vector<uint8_t> digits_;        // per point, its coords_ digits
  std::vector<float> values_;          // per point, its coords_ levels
  std::vector<int16_t> point_of_key_;  // rounded point (digits packed by bits_) -> point, or -1
  std::vector<uint16_t> neighbours_;   // per key, kNeighbours points, nearest first
};

// The lattices of the formats (built on first use, then shared).
const Lattice& iq2xxs_lattice();
const Lattice& iq2xs_lattice();
const Lattice& iq2s_lattice();
const Lattice& iq3xxs_lattice();
const Lattice& iq3s_lattice();
// IQ1_S and IQ1_M's grid, its levels -1, 0, 1 shifted by +1/8 (plus) or -1/8
// (minus), times 8: -7, 1, 9 and -9, -1, 7 (so the scale is d * (2l + 1) / 8).
const Lattice& iq1_plus_lattice();
const Lattice& iq1_minus_lattice();

// A run of elements (a sub-block sharing one scale) fitted by points of a
// lattice: t and w hold n elements (n a multiple of the lattice's coords).
// With a second lattice (alt), each point is the better of the two, and
// on_alt says which.
struct PointFit {
  float scale = 0;   // the least-squares scale for the points (>= 0)
  double error = 0;  // sum w (t - scale * level)^2
  uint16_t points[16] = {};
  bool on_alt[16] = {};
};

// Searches scales around the one putting the largest |target| on the
// largest |level| (9 factors, 0.6 .. 1.2 of it), each with its best points
// and their least-squares scale, then alternates points and scale while the
// error drops. A run whose targets are all ~0 gets scale 0.
PointFit fit_points(const Lattice& lattice, const float* t, const float* w, int n, const Lattice* alt = nullptr);

// The best points for a fixed scale s (the run's error for it).
PointFit points_for_scale(const Lattice& lattice, const float* t, const float* w, int n, float s,
                          const Lattice* alt = nullptr);

}  // namespace qlens::quant::iq
