// Quantization error per tensor and type, without writing a model: each
// weight is quantized and dequantized in memory and compared with itself.
// With a quantized file to measure against (another quantizer's output, say
// llama-quantize's), each of its quantized tensors is compared with the
// model's, and qlens's quantization to the same type with the same imatrix
// beside it.
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
  // With --against: the file's tensor's errors (< 0 otherwise), and the
  // ratio of qlens's error to it: weighted squared errors with an imatrix,
  // plain ones without.
  double against_rmse = -1;
  double against_weighted_rmse = -1;
  double error_ratio = -1;
};

struct QuantizeStatsOptions {
  std::vector<DType> types;  // empty: every weight type qlens can quantize to
  std::string imatrix_path;
  std::string tensor_filter;  // regex; empty: every 2-D tensor
  int n_threads = 0;
  // A quantized model with the same tensors: each of its quantized tensors is
  // measured, with qlens's quantization to its type (types is then unused).
  std::string against_path;
};

struct QuantizeStatsResult {
  std::vector<QuantErrorStats> tensors;  // one per tensor and type that fits its rows
  std::vector<QuantErrorStats> totals;   // one per type (tensor = "total")
  // With --against, per type: tensors where qlens's error is more than 1%
  // above the file's, and the worst ratio's tensor.
  struct AgainstSummary {
    DType type = DType::F32;
    int tensors = 0, above_one_percent = 0;
    std::string worst_tensor;
    double worst_ratio = 0;
  };
  std::vector<AgainstSummary> against;
};

QuantizeStatsResult quantize_stats(const std::string& model_path, const QuantizeStatsOptions& opt);
void print_quantize_stats(const QuantizeStatsResult& r, std::ostream& out);
// JSON with qlens's header (docs/JSON.md); opt.types empty: every type.
void write_quantize_stats_json(const QuantizeStatsResult& r, const std::string& model_path,
                               const QuantizeStatsOptions& opt, std::ostream& out);

}  // namespace qlens::tools
