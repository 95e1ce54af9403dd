// Quantization error per tensor and type, without writing a model: each
// weight is quantized and dequantized in memory and compared with itself.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "qlens/types.h"

namespace qlens::tools {

struct QuantErrorStats {
  std::string tensor;
  DType type = DType::F32;
  int64_t n = 0;
  double rmse = 0;
  double max_error = 0;
  double rms = 0;            // of the original values
  double weighted_rmse = -1;  // with the imatrix's column weights; < 0 without one
  double bits_per_weight = 0;
};

struct QuantizeStatsOptions {
  std::vector<DType> types;  // empty: every weight type qlens can quantize to
  std::string imatrix_path;
  std::string tensor_filter;  // regex; empty: every 2-D tensor
  int n_threads = 0;
};

struct QuantizeStatsResult {
  std::vector<QuantErrorStats> tensors;  // one per tensor and type that fits its rows
  std::vector<QuantErrorStats> totals;   // one per type (tensor = "total")
};

QuantizeStatsResult quantize_stats(const std::string& model_path, const QuantizeStatsOptions& opt);
void print_quantize_stats(const QuantizeStatsResult& r, std::ostream& out);
// JSON with qlens's header (docs/JSON.md); opt.types empty: every type.
void write_quantize_stats_json(const QuantizeStatsResult& r, const std::string& model_path,
                               const QuantizeStatsOptions& opt, std::ostream& out);

}  // namespace qlens::tools
