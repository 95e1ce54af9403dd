// The node-by-node side of `qlens compare`: error metrics between a reference
// and a quantized model at every named graph node, and the reports built on
// them (a layer × node-kind table, the worst nodes, where the error grows, JSON
// and CSV). Pure functions over what the taps gathered (include/qlens/tap.h);
// docs/COMPARE.md defines every figure and the file formats.
//
// For a node with reference values a and test values b (finite pairs only):
//   rmse    = sqrt(Σ(a-b)² / count)
//   nmse    = Σ(a-b)² / Σa²            (0/0 → 0, x/0 → +inf)
//   sqnr_db = 10·log10(Σa² / Σ(a-b)²) = -10·log10(nmse)   (+inf for zero error)
//   cosine  = Σab / sqrt(Σa²·Σb²)      (1 when both are all zero, 0 when one is)
//   max_abs = max |a-b|
// and the per-token NMSE (Σ(a-b)²/Σa² of each row) through its median and p99.
#pragma once

#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "qlens/tap.h"
#include "tools/compare/compare_logits.h"

namespace qlens::tools {

// "ffn_out-12" → {12, "ffn_out"}; a name without a numeric "-N" suffix
// ("result_output", "Qcur-0 (reshaped)") → {-1, the whole name}.
struct NodeNameParts {
  int layer = -1;
  std::string kind;
};
NodeNameParts split_node_name(std::string_view name);

// Population mean and standard deviation of a model's finite values at a node
// (0 when it had none).
double stats_mean(const NodeStats& s);
double stats_std(const NodeStats& s);

struct NodeComparison {
  std::string name;
  int layer = -1;    // -1 outside layers
  std::string kind;  // name without "-N"
  NodeStats ref, test;
  ErrorStats error;  // a: the reference, b: the test model

  double rmse() const;
  double nmse() const;
  double sqnr_db() const;
  double cosine() const;
  double max_abs() const { return error.max_abs_diff; }
  // NaN when no per-token histogram came back (a backend whose error tap
  // does not keep one; every backend of qlens keeps one).
  double token_nmse_median() const { return token_quantile(0.5); }
  double token_nmse_p99() const { return token_quantile(0.99); }
  double token_quantile(double q) const {
    return error.count > 0 && error.row_nmse.total() == 0 ? std::numeric_limits<double>::quiet_NaN()
                                                           : error.row_nmse.quantile(q);
  }
};

// A NodeComparison with layer and kind filled from the name.
NodeComparison make_node_comparison(std::string name, const NodeStats& ref, const NodeStats& test,
                                    const ErrorStats& error);

// ---- error growth ----

// How much the error grows from one value to the next: cur / prev, 1 when both
// are 0, +inf when error appears from none. NaN when either is NaN.
double growth_ratio(double prev_nmse, double cur_nmse);

struct LayerGrowth {
  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  int layer = 0;
  double l_out_nmse = kNaN;   // NMSE of l_out-<layer>; NaN when not compared
  double l_out_ratio = kNaN;  // l_out_nmse / NMSE of l_out-<layer-1>; NaN for layer 0 or a missing l_out
  // The biggest rise between consecutive nodes of this layer (graph order):
  // jump_to's NMSE / jump_from's NMSE. Empty names and NaN with fewer than two nodes.
  std::string jump_from, jump_to;
  double jump_ratio = kNaN;
};

struct ThresholdCrossing {
  double threshold = 0;
  std::string node;  // the first node in graph order whose NMSE exceeds it; empty: none does
  int layer = -1;
};

struct ErrorGrowth {
  std::vector<LayerGrowth> layers;  // ascending layer
  std::vector<ThresholdCrossing> first_exceeding;  // one per threshold, in the order given
  int largest_jump_index = -1;   // into layers: the highest jump_ratio; -1 when none
  int largest_l_out_index = -1;  // into layers: the highest l_out_ratio; -1 when none
};

inline const std::vector<double> kDefaultGrowthThresholds = {1e-4, 1e-3, 1e-2};

ErrorGrowth analyze_error_growth(const std::vector<NodeComparison>& nodes,
                                 const std::vector<double>& thresholds = kDefaultGrowthThresholds);

// Plain sentences first ("error first exceeds 1e-3 at layer 7 (ffn_out-7)",
// "largest jump: layer 12, ffn_inp → ffn_out (×8.3)"), then a per-layer table.
void print_error_growth(std::ostream& out, const ErrorGrowth& growth);

// ---- tables ----

enum class Metric { NMSE, SQNR };

// Rows: layers; columns: node kinds in the order they first appear; cells the
// metric (NMSE as 1.2e-5, SQNR in dB with one decimal), "-" when absent. Nodes
// outside the layers follow in a one-line list.
void print_layer_table(std::ostream& out, const std::vector<NodeComparison>& nodes, Metric metric);

// The n nodes with the highest NMSE (NaN counts as highest), ties by name.
std::vector<NodeComparison> top_worst(const std::vector<NodeComparison>& nodes, size_t n);
void print_top_worst(std::ostream& out, const std::vector<NodeComparison>& worst);

// ---- files ----

// A mixture of experts' router, reference against test model, per layer:
// how often the test model sends a token to other experts than the
// reference does (an error signal of its own: a changed expert changes the
// whole feed-forward of that token, however small the router's error).
struct RouterAgreement {
  int layer = -1;
  int64_t n_expert = 0, n_used = 0;
  int64_t tokens = 0;
  int64_t set_differs = 0;    // tokens whose set of selected experts differs
  int64_t top1_differs = 0;   // tokens whose first choice differs
  int64_t experts_changed = 0;  // selected experts not in the reference's set, over all tokens
  double set_agreement() const { return tokens ? 1.0 - static_cast<double>(set_differs) / tokens : 1.0; }
  double top1_agreement() const { return tokens ? 1.0 - static_cast<double>(top1_differs) / tokens : 1.0; }
  // Of all selections (tokens x experts used), the share the reference also made.
  double selection_agreement() const {
    return tokens ? 1.0 - static_cast<double>(experts_changed) / (static_cast<double>(tokens) * n_used) : 1.0;
  }
  // Adds one batch: the two routers' choices, [n_used, tokens] each, best first.
  void add(const std::vector<int32_t>& ref, const std::vector<int32_t>& test);
};

// One line per layer: agreement of the sets, of the first choices, of the
// selections; nothing for a dense model.
void print_router_agreement(std::ostream& out, const std::vector<RouterAgreement>& routers);

struct CompareMeta {
  std::string ref_path, test_path, text_path;
  int64_t n_ctx = 0, n_batch = 0, n_chunks = 0, n_tokens = 0;
};

inline constexpr int kCompareJsonSchemaVersion = 2;

// The whole comparison as one JSON object (docs/COMPARE.md gives the schema).
// Non-finite numbers are written as null.
void write_compare_json(std::ostream& out, const CompareMeta& meta, const std::vector<NodeComparison>& nodes,
                        const LogitSummary& logits, const ErrorGrowth& growth,
                        const std::vector<RouterAgreement>& routers = {});

// A header line, then one line per node (graph order); see docs/COMPARE.md.
void write_compare_csv(std::ostream& out, const std::vector<NodeComparison>& nodes);

// Scientific notation without exponent padding: 1.2e-5, 3e-3 (digits=0), 0, inf.
std::string compact_scientific(double v, int digits = 1);

}  // namespace qlens::tools
