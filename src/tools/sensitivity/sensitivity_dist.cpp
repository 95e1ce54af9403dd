#include "tools/sensitivity/sensitivity_dist.h"

#include <algorithm>

#include "dist/bytes.h"

namespace qlens::tools {

double sensitivity_unit_cost(int passes, int first_layer, int n_layer) {
  return static_cast<double>(passes) * (std::max(0, n_layer - first_layer) + 1);
}

std::vector<int> sensitivity_shares(const std::vector<double>& costs, int n_ranks) {
  std::vector<double> load(std::max(1, n_ranks), 0.0);
  std::vector<int> owner;
  owner.reserve(costs.size());
  for (double c : costs) {
    const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    load[r] += c;
    owner.push_back(r);
  }
  return owner;
}

std::string serialize_sensitivity_units(const std::vector<SensitivityTensor>& units) {
  dist::ByteWriter w;
  w.put(static_cast<uint64_t>(units.size()));
  for (const SensitivityTensor& t : units) {
    w.put(t.name);
    w.put(t.role);
    w.put(t.layer);
    w.put(t.n_elements);
    w.put(t.shape);
    w.put(t.source_type);
    w.put(t.candidates);
    w.put(t.noise_coefficient);
    w.put(t.noise_exponent);
    std::vector<double> points;
    for (auto [e, k] : t.noise_points) points.insert(points.end(), {e, k});
    w.put(points);
    w.put(static_cast<uint64_t>(t.members.size()));
    for (const std::string& m : t.members) w.put(m);
  }
  return w.take();
}

std::vector<SensitivityTensor> parse_sensitivity_units(const std::string& bytes) {
  std::vector<SensitivityTensor> units;
  dist::ByteReader in(bytes);
  // Several ranks' lists may follow one another (rank 0 concatenates them).
  while (!in.at_end()) {
    const auto n = in.get<uint64_t>();
    for (uint64_t i = 0; i < n; ++i) {
      SensitivityTensor t;
      t.name = in.get_string();
      t.role = in.get_string();
      t.layer = in.get<int>();
      t.n_elements = in.get<int64_t>();
      t.shape = in.get_vector<int64_t>();
      t.source_type = in.get<DType>();
      t.candidates = in.get_vector<SensitivityCandidate>();
      t.noise_coefficient = in.get<double>();
      t.noise_exponent = in.get<double>();
      const std::vector<double> points = in.get_vector<double>();
      for (size_t k = 0; k + 1 < points.size(); k += 2) t.noise_points.emplace_back(points[k], points[k + 1]);
      const auto n_members = in.get<uint64_t>();
      for (uint64_t m = 0; m < n_members; ++m) t.members.push_back(in.get_string());
      units.push_back(std::move(t));
    }
  }
  return units;
}

}  // namespace qlens::tools
