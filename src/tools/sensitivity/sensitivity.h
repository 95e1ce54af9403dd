// Which tensors need more bits: qlens sensitivity.
//
// The reference (the unquantized model) is run once over the calibration
// chunks and its output distribution kept compactly: per scored token the
// top-K log-probabilities and the mass of the rest. Then one tensor at a time
// is replaced in the running context (no reload) and the mean KL divergence
// of the output from the reference is measured:
//  - mode quant: the tensor quantized to each candidate type (with the
//    imatrix when given), one pass per tensor and type;
//  - mode noise: zero-mean Gaussian noise added to the tensor, its per-column
//    scale following the imatrix (as an imatrix-aware quantizer shapes its
//    error), at one or two magnitudes; the response ΔKLD = c·E^γ in the
//    injected imatrix-weighted error energy E is fitted, and each type's ΔKLD
//    predicted from that type's measured weighted error on the tensor. One or
//    two passes per tensor instead of one per tensor and type;
//  - mode pooled: the same noise (the first level), but each pass perturbs
//    every tensor of the layers at once, each with a random sign, and each
//    tensor's ΔKLD is fitted from the Gram matrix of the passes' output
//    shifts (pooled_fit.h): a quarter of noise mode's passes by default,
//    ranking the tensors as noise mode does between two halves of a text
//    (docs/SENSITIVITY.md).
// KLD against the top-K reference is exact when K covers the vocabulary and
// a lower bound otherwise (the rest of the mass is merged into one outcome).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "qlens/model.h"
#include "tools/common/tensor_names.h"
#include "qlens/types.h"

namespace qlens::tools {

enum class SensitivityMode { Quant, Noise, Pooled };
// Probe unit: one tensor, or every tensor of a layer or of a role at once, or
// a layer's expert tensors (gate, up, down of all experts) together with the
// other tensors alone (quant mode; group results are for reading: plan needs
// tensors).
enum class SensitivityGroup { Tensor, Layer, Role, Experts };

struct SensitivityOptions {
  int64_t n_ctx = 512;
  int64_t n_batch = 512;
  int64_t max_chunks = 8;
  int n_threads = 0;
  CpuOptions cpu;  // the CPU backend's kernels (see ContextOptions)
  VulkanOptions vulkan;  // a Vulkan device's (see ContextOptions)
  std::string imatrix_path;
  std::vector<DType> types;  // empty: the default candidates
  SensitivityMode mode = SensitivityMode::Quant;
  SensitivityGroup group = SensitivityGroup::Tensor;
  std::vector<double> noise_levels = {0.05};  // noise RMS relative to the tensor's RMS; one or two levels
  int64_t pooled_passes = 0;  // --mode pooled: passes (0: a quarter of the probed tensors, at least 8)
  int64_t top_k = 256;       // reference log-probabilities kept per token
  std::string tensors_regex;  // only these weights (default: every matrix and expert tensor but the router)
  uint64_t seed = 1;
  // Keep the residual stream entering the probed tensor's layer for the
  // chunks, so that a probe recomputes only that layer onwards (results
  // identical to full passes; costs n_chunks x n_ctx x n_embd floats).
  bool layer_cache = true;
  // Under mpirun: the model split by layers over the ranks
  // (tools/common/layer_pipeline.h). A probe's unit belongs to the rank of
  // its first layer, which makes its replacements (and hands them to any
  // other rank that reads its tensors: a tied output, --group role), and
  // each pass flows from there through the later ranks; the last scores it.
  // Not in the JSON: the table is one process's.
  bool split_layers = false;
  std::string device = "cpu";  // see ContextOptions
  int n_gpu_layers = -1;
};

struct SensitivityCandidate {
  DType type = DType::F32;
  uint64_t bytes = 0;
  double bpw = 0;
  double weighted_error = 0;  // Σ_j imp_j Σ_i (w - q(w))^2 / Σ_j imp_j rows: the type's error on this tensor
  double delta_kld = 0;       // measured (quant) or predicted (noise)
  double delta_kld_error = 0; // standard error of the measured mean
  double delta_ppl = 0;       // measured (quant mode only)
  bool measured = false;
};

struct SensitivityTensor {
  std::string name, role;
  int layer = -1;
  int64_t n_elements = 0;
  std::vector<int64_t> shape;
  DType source_type = DType::F32;
  std::vector<SensitivityCandidate> candidates;
  // Noise mode: the fitted response ΔKLD = coefficient · E^exponent.
  double noise_coefficient = 0, noise_exponent = 1;
  std::vector<std::pair<double, double>> noise_points;  // (E, ΔKLD) measured
  std::vector<std::string> members;  // groups: the tensors probed together
};

struct SensitivityResult {
  std::string model_path, text_path, imatrix_path;
  SensitivityMode mode = SensitivityMode::Quant;
  int64_t n_tokens_scored = 0;
  double reference_ppl = 0;
  uint64_t fixed_bytes = 0;       // tensors not probed (kept as they are, e.g. F32 norms)
  int64_t n_weights_total = 0;    // elements of every tensor of the model
  std::vector<SensitivityTensor> tensors;  // --group tensor
  std::vector<SensitivityTensor> groups;   // --group layer|role: name "layer 3" / "attn_v"
  bool complete = false;
  // What the run was asked (the JSON's settings): a resumed run must match.
  SensitivityOptions settings;
  bool settings_recorded = true;  // false when read from a schema-1 file (its mode alone)
  // What the run cost (not in the JSON): the reference's full passes over
  // the chunks, and the probes' passes (each from its tensor's layer).
  double reference_seconds = 0, probe_seconds = 0;
  int64_t n_probes = 0;
  // --mode pooled: its passes and how well the fit explains them (the JSON's "pooled").
  int64_t pooled_passes = 0;
  double pooled_relative_rms = 0;
  std::vector<std::pair<std::string, double>> pooled_alone;  // tensors outside the layers: ΔKLD measured alone
};

// The weights a run probes: matrices and 3-D expert tensors but the router,
// those matching `tensors_regex` when it is not empty.
std::vector<Tensor*> sensitivity_probed_weights(const Model& model, const std::string& tensors_regex);

// The default candidate types (those that fit a tensor's rows are used):
// Q2_K .. Q8_0, IQ4_NL and F16; with an imatrix also the i-quants from IQ1_S
// (1.56 bits per weight) to IQ4_XS, Q1_0 and Q2_0, so that a plan can reach
// the sizes of llama.cpp's 1.5- to 3.5-bit mixes, also on rows that are not
// multiples of 256 (they cost one probe each per tensor in quant mode; none
// in noise mode).
std::vector<DType> default_sensitivity_types(bool with_imatrix);
// The candidates of a run: --types, or the defaults for its imatrix.
std::vector<DType> sensitivity_types(const SensitivityOptions& options);

// Runs the probe. `resume`, when it holds tensors from an interrupted run of
// the same model and settings, is continued. on_tensor is called after each
// tensor with the result so far (to checkpoint) and the progress.
//
// Across the processes of `comm` (mpirun -np N): every rank calls this with
// the same model, text and options (and what it can read of the interrupted
// run's checkpoints: the ranks pool them); each makes the reference, takes
// its share of the remaining tensors by cost (sensitivity_dist.h) and calls
// on_tensor with its own results so far (its checkpoint). Rank 0 returns
// every tensor, in the order one process gives them and with its values;
// the other ranks return their own share, not complete.
SensitivityResult measure_sensitivity(
    const Model& model, const std::vector<Token>& tokens, const SensitivityOptions& opt,
    const SensitivityResult* resume = nullptr,
    const std::function<void(const SensitivityResult&, int64_t done, int64_t total)>& on_tensor = {},
    dist::Comm& comm = dist::world());

// JSON (the schema qlens plan reads; docs/SENSITIVITY.md) and a text report.
// The reader takes schema 1 files too (their settings are mode alone).
constexpr int kSensitivityJsonSchemaVersion = 2;
std::string sensitivity_json(const SensitivityResult& r);
SensitivityResult sensitivity_from_json(const std::string& json_text, const std::string& path);
// Empty when `previous` (a file being resumed) was made with the settings of
// `now` (those that change a probe's result), else what differs
// ("--mode: noise in the file, quant now").
std::string sensitivity_settings_mismatch(const SensitivityOptions& previous, const SensitivityOptions& now);
const char* sensitivity_group_name(SensitivityGroup group);
void print_sensitivity(std::ostream& out, const SensitivityResult& r, size_t top);

}  // namespace qlens::tools
