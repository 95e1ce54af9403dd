// `qlens plan --json FILE`: the plan as a machine-readable file (what
// `qlens report` draws): every tensor's chosen type, the totals, and with
// --validate the measured results of the plan and of the uniform mixes it was
// compared against. Layout: docs/SENSITIVITY.md, "qlens plan --json".
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tools/plan/plan.h"
#include "tools/plan/plan_validate.h"

namespace qlens::tools {

inline constexpr int kPlanJsonSchemaVersion = 2;

// What the plan was made from and with; empty strings and NaN are written
// as null (unknown or not given).
struct PlanJsonContext {
  std::string sensitivity_path;
  std::string model_path;         // the unquantized model (--validate)
  std::string imatrix_path;       // --validate
  std::string held_out_text_path; // --validate
  std::string tensor_type_file;   // -o; empty: printed to stdout
  double target_bits_per_weight = std::numeric_limits<double>::quiet_NaN();
  uint64_t target_size_bytes = 0;  // 0: the budget came from bits per weight
  std::vector<std::string> types;  // --types; empty: every candidate
  int64_t validate_n_ctx = 0;      // 0 when not validated
  int64_t validate_max_chunks = 0;
};

// The JSON document (pretty-printed, ending in a newline). `validation` is
// null when the plan was not validated; its rows are written in order.
std::string plan_json(const SensitivityTable& table, const Plan& plan, const PlanJsonContext& context,
                      const std::vector<ValidationRow>* validation);

}  // namespace qlens::tools
