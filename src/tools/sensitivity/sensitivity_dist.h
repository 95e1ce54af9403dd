// Sensitivity across ranks (mpirun): what a probe unit costs, how the units
// are shared among the ranks, and the units' results as bytes between them.
#pragma once

#include <string>
#include <vector>

#include "tools/sensitivity/sensitivity.h"

namespace qlens::tools {

// The cost of a unit, in layer-passes over the chunks: `passes` probes,
// each running from layer `first_layer` (0 without the layer cache) through
// the n_layer layers and the output (counted as one more layer).
double sensitivity_unit_cost(int passes, int first_layer, int n_layer);

// The rank of each unit (costs in the units' order, the cache's): each unit
// to the rank with the least cost so far (the lowest rank on a tie), so that
// a rank's units stay in order and the ranks' totals differ by at most one
// unit's cost.
std::vector<int> sensitivity_shares(const std::vector<double>& costs, int n_ranks);

// Units' results as bytes (all their fields, values exactly), and back.
std::string serialize_sensitivity_units(const std::vector<SensitivityTensor>& units);
std::vector<SensitivityTensor> parse_sensitivity_units(const std::string& bytes);

}  // namespace qlens::tools
