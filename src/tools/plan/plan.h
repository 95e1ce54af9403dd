// Per-tensor precision under a size budget: qlens plan.
//
// Input: the table `qlens sensitivity` writes (for each weight tensor and
// candidate type, the bytes it would take and the predicted increase of the
// output's mean KL divergence, ΔKLD, were only that tensor quantized to that
// type). Output: one type per tensor minimizing the summed ΔKLD subject to
// fixed_bytes + Σ bytes <= budget, written as a tensor-type file that
// `qlens quantize --tensor-type-file` and llama.cpp's
// `llama-quantize --tensor-type-file` read.
//
// The objective assumes the tensors' ΔKLDs add up (first-order, independent
// errors); the plan is optimal for that model, not measured.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "qlens/types.h"

namespace qlens::tools {

struct PlanOption {
  DType type = DType::F32;
  uint64_t bytes = 0;
  double delta_kld = 0;  // may be slightly negative (measurement noise)
};

struct PlanTensor {
  std::string name;
  std::string role;
  int layer = -1;  // -1: not in a block (token_embd, output)
  int64_t n_elements = 0;
  std::vector<PlanOption> options;  // the candidates this tensor can take
};

struct SensitivityTable {
  std::string model;
  uint64_t fixed_bytes = 0;     // tensors not planned (kept as they are)
  int64_t n_weights_total = 0;  // elements of every tensor (the file's n_weights_total,
                                // else the planned tensors' elements)
  bool complete = true;         // false: the sensitivity run was interrupted
  std::vector<PlanTensor> tensors;
  std::vector<std::string> notes;  // candidates skipped on loading, and why
};

// Reads a sensitivity JSON (schema_version 1). Errors name the file and the
// JSON path (tensors[3].candidates[1].bytes). Candidates whose delta_kld or
// bytes is null are skipped, with a line in `notes`; unknown type names,
// negative bytes, duplicate tensor names and tensors left without candidates
// are errors.
SensitivityTable load_sensitivity_json(const std::string& path);
SensitivityTable parse_sensitivity_json(std::string_view text, const std::string& source);

// --types: keeps only the options of these types (in their order in the
// table); a tensor none of them fits keeps its first option (its source
// type), so that every tensor can still be planned.
void restrict_plan_types(SensitivityTable& table, const std::vector<DType>& keep);

struct Plan {
  std::vector<size_t> choice;  // per tensor, an index into its options
  uint64_t budget_bytes = 0;
  uint64_t total_bytes = 0;  // fixed_bytes + the chosen options' bytes
  double predicted_delta_kld = 0;
  double bits_per_weight = 0;  // total_bytes over n_weights_total
  // The Lagrange multiplier (ΔKLD per byte) of the relaxed solution the
  // greedy pass started from; 0 when every tensor got its best option.
  double lambda = 0;
};

// Minimizes Σ delta_kld subject to fixed_bytes + Σ bytes <= budget_bytes (a
// multiple-choice knapsack), by two solvers, keeping the better plan:
// - the Lagrangian relaxation solved exactly on the tensors' lower convex
//   hulls (the smallest multiplier λ whose plan fits), exact at the hulls'
//   breakpoints;
// - dynamic programming over the budget in up to 65536 buckets (options
//   rounded up to whole buckets), exact when the bytes are multiples of a
//   bucket, and the one that finds a plan taking one large step (a tied
//   embedding kept at Q8_0) instead of many small ones;
// each followed by a greedy pass spending the rest of the budget on the
// single-tensor changes with the best ΔKLD gain per byte, then exchanges (one
// tensor up, another down to pay for it) while they lower the total. Throws
// Error with the smallest achievable size when the budget is below it.
Plan solve_plan(const SensitivityTable& table, uint64_t budget_bytes);
// fixed_bytes + every tensor's smallest option: the least any plan takes.
uint64_t min_plan_bytes(const SensitivityTable& table);

// Bits per weight over n_weights_total <-> bytes (rounded down).
uint64_t budget_from_bpw(const SensitivityTable& table, double bits_per_weight);
double bpw_from_bytes(const SensitivityTable& table, uint64_t bytes);

// `name` escaped for an ECMAScript regex (what std::regex in qlens and
// llama.cpp use), without anchors. Besides the regex metacharacters, ASCII
// upper-case letters, '=', whitespace and control characters are written as
// \xHH, because llama.cpp lower-cases the pattern, splits the file on
// whitespace and takes the first '=' as the separator.
std::string regex_escape_name(const std::string& name);

// One "^NAME$=type" line per tensor (type lower-case, as ggml spells it
// case-insensitively), in table order. No comment lines: llama-quantize reads
// the file as whitespace-separated REGEX=TYPE tokens and rejects anything
// else, so the summary goes to plan_summary() instead.
std::string tensor_type_file(const SensitivityTable& table, const Plan& plan);
// One line: model, budget, size, bits per weight, predicted ΔKLD.
std::string plan_summary(const SensitivityTable& table, const Plan& plan);

// The chosen type per tensor (sorted by layer, then name) and the totals:
// size, bits per weight, predicted ΔKLD, tensors and bytes per type.
void print_plan(std::ostream& out, const SensitivityTable& table, const Plan& plan);

}  // namespace qlens::tools
