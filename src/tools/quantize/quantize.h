// Model quantization: choose a type per tensor (a single type, or a mix that
// gives tensor roles more or fewer bits, then the user's rules), quantize each
// 2-D weight with its importance weights, and write a GGUF that llama.cpp reads.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "qlens/gguf.h"
#include "qlens/types.h"
#include "tools/imatrix/imatrix_coverage.h"

namespace qlens::tools {

// A quantization target as users name it: a plain type (Q4_0, Q8_0, F16, ...)
// or a llama.cpp mix (Q3_K_M, Q4_K_S, ...), with its llama_ftype id.
struct QuantMix {
  std::string name;
  DType base;         // the type of tensors no rule mentions
  uint32_t file_type;  // general.file_type (llama_ftype)
};
// By name, or by llama_ftype id ("15": Q4_K_M) as llama-quantize takes it.
std::optional<QuantMix> find_mix(const std::string& name);
std::vector<std::string> mix_names();

struct QuantizeOptions {
  std::string mix = "Q4_K_M";
  std::string imatrix_path;
  bool imatrix_strict = false;
  std::vector<std::pair<std::string, std::string>> tensor_types;  // REGEX, TYPE; the first match wins (llama.cpp)
  std::optional<DType> output_type;
  std::optional<DType> token_embedding_type;
  bool leave_output_tensor = false;  // output.weight keeps its type
  bool pure = false;              // no role rules: every 2-D weight gets the base type
  bool allow_requantize = false;  // quantized inputs may be quantized again
  double clip_sigma = 0;          // > 0: clip weights beyond K standard deviations per block
  int n_threads = 0;
  // A dry run's plan: a type that needs an imatrix is planned without one,
  // and its reason says so (a real run refuses it, as llama-quantize does).
  bool plan_only = false;
  // The output in parts (quantize_output_paths): as the input's parts
  // (--keep-split, llama-quantize's), or each part at most this many bytes
  // of tensors (--split-max-size, gguf-split's; a larger tensor alone).
  // (--split-max-tensors: at most this many tensors per part, gguf-split's.)
  bool keep_split = false;
  uint64_t split_max_bytes = 0;
  int64_t split_max_tensors = 0;
};

// Parses "REGEX=TYPE" lines (blank lines and '#' comments skipped).
std::vector<std::pair<std::string, std::string>> parse_tensor_type_rules(const std::string& text,
                                                                         const std::string& source);

struct TensorPlan {
  std::string name;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  DType from = DType::F32;
  DType to = DType::F32;
  std::string reason;  // why this type: "mix", "role attn_v", "rule ...", "fallback from Q4_K: ..."
  size_t bytes = 0;
};

struct QuantizePlan {
  QuantMix mix;
  bool from_mix = false;  // some matrix took its type from the mix (else general.file_type is the commonest type's)
  std::vector<TensorPlan> tensors;
  size_t total_bytes = 0;
  int64_t total_elements = 0;
  double bits_per_weight() const { return total_elements ? 8.0 * total_bytes / total_elements : 0; }
  std::optional<ImatrixCoverage> imatrix_coverage;  // with --imatrix: what it covers (in the JSON)
  std::vector<std::string> output_paths;  // quantize_model: the files written (the parts, or OUT)
};

// Decides every tensor's type. Throws Error for bad rules or refused inputs.
QuantizePlan plan_quantization(const gguf::File& in, const QuantizeOptions& opt);
void print_plan(const QuantizePlan& plan, std::ostream& out);
// The plan as JSON with qlens's header (docs/JSON.md): one row per tensor
// (tensor, layer, role, shape, source_type, type, n_elements, bytes,
// bits_per_weight, reason) and the totals; output_path empty: a dry run.
std::string quantize_plan_json(const QuantizePlan& plan, const std::string& in_path, const std::string& out_path,
                               const QuantizeOptions& opt);

// The weights of the plan that use importance (quantized, but token_embd),
// against the matrix.
ImatrixCoverage quantize_imatrix_coverage(const gguf::File& in, const QuantizePlan& plan, const Imatrix& imatrix);

// Plans, quantizes and writes `out_path` (atomically). Logs per tensor to `log`,
// first the imatrix's coverage and warnings.
// The part (0-based) each planned tensor is written to, and the part count:
// all 0 without --keep-split, --split-max-size or --split-max-tensors.
struct QuantizeSplits {
  std::vector<int> part;  // per plan.tensors
  int count = 1;
};
QuantizeSplits plan_quantize_splits(const gguf::File& in, const QuantizePlan& plan, const QuantizeOptions& opt);
// The files OUT names for `count` parts: OUT itself for one, else
// PREFIX-00001-of-0000N.gguf ... with PREFIX = OUT without ".gguf", as
// llama-quantize --keep-split and gguf-split name them.
std::vector<std::string> quantize_output_paths(const std::string& out_path, int count);
// --split-max-size: N followed by M or G (megabytes, gigabytes: 10^6, 10^9,
// as gguf-split reads it).
uint64_t parse_split_max_size(const std::string& text);

QuantizePlan quantize_model(const std::string& in_path, const std::string& out_path, const QuantizeOptions& opt,
                            std::ostream& log);

// Clips each block of `block` values to mean +- k standard deviations.
void clip_outliers(float* x, int64_t n, int64_t block, double k);

}  // namespace qlens::tools
