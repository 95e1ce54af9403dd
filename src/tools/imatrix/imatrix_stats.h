// Combining importance matrices and describing what they hold.
//
// Combining follows llama.cpp's `imatrix --in-file a --in-file b`: per tensor
// the sums of squared activations and the row counts add up, so the result is
// the matrix one long run over both calibration sets would have collected.
//
// The statistics follow llama.cpp's `imatrix --show-statistics`, with a legend
// that says how to read each figure. Per tensor they describe v_j, the mean
// square of input column j (sum2_j / count):
//  - experts are pooled: for a weight with n_mat > 1 (a mixture-of-experts
//    tensor), v_j = sum over experts of sum2[e][j] / sum over experts of
//    counts[e], the mean square over every activation row routed to any expert.
//    All experts of a layer read the same hidden state, so the pooled vector
//    describes that input; per-expert tables would run to thousands of rows.
//  - a column is "active" when v_j > 1e-5 * mean(v): relative to the tensor's
//    own scale (llama.cpp's fixed 1e-5 counts a whole tensor as dead when its
//    inputs are merely small), and to the mean rather than the max so that one
//    outlier column does not turn ordinary columns inactive.
//  - the z-score share counts |v_j - mean| > std on both sides (llama.cpp counts
//    only the upper side).
//  - tensors whose counts are all zero have no importance to describe; they are
//    listed in `skipped` and nowhere else.
#pragma once

#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "tools/imatrix/imatrix_file.h"

namespace qlens::tools {

// Adds `other` into `into`: per tensor, sums of x^2 and counts add; tensors in
// only one of them are kept as they are; datasets are united (order kept, no
// duplicates); chunk counts add; a chunk size of 0 (unknown) takes the other's.
// Throws Error, naming both files, when a tensor's shape (n_cols, n_mat) or the
// chunk sizes differ, or when an entry's arrays do not match its shape.
// `into.path` is left as it is.
void combine_imatrix(Imatrix& into, const Imatrix& other);

// Loads each file (either format) and combines them in order. The result's
// path is the files' paths joined with " + ", so later errors name them all.
// Throws Error for an empty list.
Imatrix combine_imatrix_files(const std::vector<std::string>& paths);

inline constexpr double kImatrixActiveRelativeThreshold = 1e-5;
inline constexpr size_t kImatrixTopColumns = 8;

struct ImatrixTensorStats {
  std::string name;          // the weight, e.g. "blk.3.attn_q.weight"
  int layer = -1;            // N of "blk.N."; -1 for tensors outside the blocks
  std::string kind;          // the name after "blk.N." ("attn_q.weight"); the whole name outside blocks
  int64_t n_cols = 0;
  int64_t n_mat = 1;         // experts (1 for dense weights); pooled, see above
  int64_t unused_experts = 0;  // experts whose count is 0
  double rows = 0;           // activation rows seen, summed over experts

  double sum = 0;   // sum of v over columns: Σ(Act²)
  double min = 0;
  double max = 0;
  double mean = 0;
  double std = 0;   // population standard deviation of v
  double active_fraction = 0;      // share of columns with v_j > 1e-5 * mean (0..1)
  double entropy = 0;              // bits: -Σ p_j log2 p_j, p_j = v_j / Σv
  double normalized_entropy = 0;   // entropy / log2(n_cols); NaN for one column or Σv = 0
  double zscore_above_1_fraction = 0;  // share of columns with |v_j - mean| > std (0..1)
  double cosine_prev_layer = std::numeric_limits<double>::quiet_NaN();  // vs blk.N-1.<kind>; NaN: none
  // The columns with the largest v_j, largest first (ties by index): where an
  // imatrix-aware quantizer spends its precision within the tensor.
  struct Column {
    int64_t index = 0;
    double value = 0;  // v_j
  };
  std::vector<Column> top_columns;  // at most kImatrixTopColumns
};

struct ImatrixLayerStats {
  int layer = 0;
  int n_tensors = 0;
  double mean_normalized_entropy = 0;          // NaN-valued tensors left out
  double mean_zscore_above_1_fraction = 0;
  double mean_cosine_prev_layer = std::numeric_limits<double>::quiet_NaN();  // over tensors that have one
  double sum = 0;                              // Σ(Act²) over the layer's tensors
};

// How the router spread the calibration text over a layer's experts, from
// the per-expert counts of its expert tensors (gate, up and down see the same
// routing; the first in name order stands for the layer). An expert with few
// or no rows gets little or no importance: the imatrix cannot protect it.
struct ImatrixExpertUsage {
  int layer = -1;
  std::string tensor;            // the expert tensor whose counts these are
  int64_t n_expert = 0;
  std::vector<double> rows;      // per expert: token-slot rows routed to it
  double total = 0;              // sum of rows (tokens x experts used per token)
  std::vector<int64_t> unused;   // experts with no rows
  std::vector<int64_t> rare;     // experts with rows, but under kImatrixRareExpertShare of an even share
  double entropy = 0;            // bits: -sum p_e log2 p_e, p_e = rows_e / total
  double normalized_entropy = 0; // entropy / log2(n_expert): 1 = evenly routed
  double max_over_even = 0;      // the busiest expert's rows over an even share (total / n_expert)
};
inline constexpr double kImatrixRareExpertShare = 0.1;

// One line per expert tensor some of whose experts got no rows (llama.cpp's
// "partial data" warning, naming the experts), for a run's end.
std::vector<std::string> describe_unrouted_experts(const Imatrix& m);

struct ImatrixStatistics {
  std::string path;
  std::vector<std::string> datasets;
  int64_t chunk_count = 0;
  int64_t chunk_size = 0;
  // Block tensors by layer (numerically: blk.2 before blk.10), then by name;
  // tensors outside the blocks (token_embd, output) after them, by name.
  std::vector<ImatrixTensorStats> tensors;
  std::vector<ImatrixLayerStats> layers;  // by layer
  std::vector<std::string> skipped;       // tensors with no activation rows, by name
  std::vector<ImatrixExpertUsage> expert_usage;  // by layer; empty for dense models
};

// Throws Error when an entry's arrays do not match its shape.
ImatrixStatistics compute_imatrix_statistics(const Imatrix& m);

// Aligned tables (tensors, then layers) and a legend saying how to read them.
void print_imatrix_statistics(std::ostream& out, const ImatrixStatistics& s);

// The same figures as JSON (docs/JSON.md; NaN as null).
constexpr int kImatrixStatisticsJsonSchemaVersion = 2;
void write_imatrix_statistics_json(std::ostream& out, const ImatrixStatistics& s);

}  // namespace qlens::tools
