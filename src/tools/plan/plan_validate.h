// Checking a plan against what it predicts: quantize the model with the plan
// and with the uniform mixes nearest in size, compare each with the original
// on held-out text, and set measured KL divergence beside the prediction.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "qlens/backend.h"
#include "qlens/gguf.h"
#include "qlens/model.h"
#include "tools/quantize/quantize.h"
#include "tools/plan/plan.h"

namespace qlens::tools {

struct ValidateOptions {
  std::string model_path;   // the unquantized model the sensitivity was measured on
  std::string imatrix_path;
  std::string text_path;    // held-out text
  int64_t n_ctx = 512;
  int64_t max_chunks = 16;
  int n_threads = 0;
  CpuOptions cpu;  // the CPU backend's kernels (see ContextOptions)
  VulkanOptions vulkan;  // a Vulkan device's (see ContextOptions)
  std::string device = "cpu";  // both models run there (see ContextOptions)
  int n_gpu_layers = -1;
  std::string work_dir;     // where the quantized files go (kept)
  // Uniform mixes to consider; the nearest below and above the plan's size are run.
  std::vector<std::string> mixes = {"Q2_K", "Q3_K_S", "Q3_K_M", "Q4_0", "IQ4_NL", "Q4_K_S",
                                    "Q4_K_M", "Q5_0", "Q5_K_M", "Q6_K", "Q8_0"};
};

struct ValidationRow {
  std::string name;       // "plan" or the mix
  std::string path;
  uint64_t bytes = 0;     // tensor bytes of the file
  double bpw = 0;
  double predicted_kld = 0;  // sum of the sensitivity ΔKLD of the types chosen; NaN when unknown
  double measured_kld = 0, measured_kld_error = 0;
  double same_top = 0, same_top_error = 0;  // fraction 0..1
  double ppl = 0, ppl_error = 0;            // of this model on the held-out text
  double ppl_ratio = 0;                     // PPL / the original's PPL
};

// Every tensor of a file with its type and bytes (as a plan that keeps them).
QuantizePlan types_of_file(const gguf::File& file);

// One row: quantizes the model (opt.model_path) with `q` into `path` (q null:
// `path` exists, made elsewhere, e.g. by llama-quantize) and compares it with
// `ref` on `tokens`; predicted_kld from `table` for the file's types.
ValidationRow measure_quantized(const SensitivityTable& table, const Model& ref, const std::vector<Token>& tokens,
                                const std::string& name, const std::string& path, const QuantizeOptions* q,
                                const ValidateOptions& opt, std::ostream& log);

std::vector<ValidationRow> validate_plan(const SensitivityTable& table, const Plan& plan,
                                         const std::string& tensor_type_rules, const ValidateOptions& opt,
                                         std::ostream& log);
void print_validation(std::ostream& out, const std::vector<ValidationRow>& rows);

}  // namespace qlens::tools
