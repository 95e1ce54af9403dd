#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "core/output_path.h"
#include "core/text_file.h"
#include "dist/comm.h"
#include "qlens/error.h"
#include "qlens/model.h"
#include "tools/common/chunks.h"
#include "tools/common/layer_pipeline.h"
#include "tools/imatrix/imatrix_coverage.h"
#include "tools/common/progress.h"
#include "tools/sensitivity/sensitivity.h"
#include "tools/sensitivity/sensitivity_run.h"

namespace qlens::cli {

namespace {

std::vector<DType> parse_types(const std::string& list) {
  std::vector<DType> out;
  std::stringstream s(list);
  for (std::string name; std::getline(s, name, ',');) {
    if (name.empty()) continue;
    auto t = type_from_name(name);
    if (!t) throw Error("--types: unknown type '" + name + "'");
    out.push_back(*t);
  }
  return out;
}

std::vector<double> parse_levels(const std::string& list) {
  std::vector<double> out;
  std::stringstream s(list);
  for (std::string v; std::getline(s, v, ',');) {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end || !(x > 0)) throw Error("--noise-levels: '" + v + "' is not a positive number");
    out.push_back(x);
  }
  if (out.empty() || out.size() > 2) throw Error("--noise-levels: give one or two levels");
  return out;
}

struct SensitivityFlags {
  std::string model_path, text_path, json_path, types = "", mode = "quant", group = "tensor", levels = "0.05";
  int64_t top = 20;
  bool resume = false;
  tools::SensitivityOptions opt;
};

// Parses the flags and settles the device; false when --help was printed.
bool parse_sensitivity_flags(int argc, char** argv, SensitivityFlags& f) {
  tools::SensitivityOptions& opt = f.opt;
  ArgParser p("sensitivity",
              "qlens sensitivity -m MODEL -f TEXT [--imatrix F] [--types LIST] [--mode quant|noise]\n"
              "                         [--chunks N] [--json FILE] [--resume]",
              "Measures how much each weight tensor matters: the mean KL divergence of the model's output\n"
              "from the unquantized reference when only that tensor is quantized to each candidate type\n"
              "(mode quant: one pass per tensor and type), or predicted from the response to Gaussian noise\n"
              "shaped like an imatrix-aware quantizer's error (mode noise: one or two passes per tensor).\n"
              "The JSON is what `qlens plan` reads to choose a type per tensor under a size budget.");
  p.add({"-m", "--model"}, &f.model_path, "FILE", "the unquantized model (F32/F16/BF16; required)");
  p.add({"-f", "--file"}, &f.text_path, "FILE", "calibration text (required)");
  p.add({"--imatrix"}, &opt.imatrix_path, "FILE", "importance matrix for the quantizers and the noise shape");
  p.add({"--types"}, &f.types, "LIST",
        "candidate types, comma-separated (default Q2_K,Q3_K,Q4_K,Q5_K,Q6_K,IQ4_NL,Q4_0,Q5_0,Q8_0,F16; "
        "with --imatrix also Q1_0,IQ1_S,IQ1_M,IQ2_XXS,Q2_0,IQ2_XS,IQ2_S,IQ3_XXS,IQ3_S,IQ4_XS)");
  p.add({"--mode"}, &f.mode, "quant|noise|pooled",
        "how tensors are probed (default quant; pooled: every tensor's noise at once with random signs,\n"
        "each tensor's response fitted from the passes: a quarter of noise's passes)");
  p.add({"--passes"}, &opt.pooled_passes, "N",
        "--mode pooled: passes (default a quarter of the tensors, at least 8)");
  p.add({"--group"}, &f.group, "tensor|layer|role|experts",
        "probe unit (default tensor; layer/role quantize a whole group at once, experts a layer's expert\n"
        "tensors together and the rest alone: for reading, plan needs tensor)");
  p.add({"--noise-levels"}, &f.levels, "A[,B]",
        "noise RMS relative to each tensor's RMS (default 0.05; two levels also fit the exponent)");
  p.add({"--tensors"}, &opt.tensors_regex, "REGEX", "only weights whose name matches");
  p.add({"-c", "--ctx-size"}, &opt.n_ctx, "N", "tokens per chunk (default 512; 0: the model's training context)");
  p.add({"-b", "--batch-size"}, &opt.n_batch, "N", "tokens per evaluation (default 512)");
  p.add({"--chunks"}, &opt.max_chunks, "N", "chunks per evaluation (default 8)");
  p.add({"--top-k"}, &opt.top_k, "K", "reference log-probabilities kept per token (default 256)");
  p.add({"--json"}, &f.json_path, "FILE", "write the result as JSON; also the checkpoint, rewritten after each tensor");
  p.add_switch({"--resume"}, &f.resume, "continue from the --json file of an interrupted run");
  DeviceFlags dev;
  add_device_options(p, &dev);
  bool no_layer_cache = false;
  add_split_layers_option(p, &opt.split_layers);
  p.add_switch({"--no-layer-cache"}, &no_layer_cache,
               "run every probe through the whole model (by default a probe of layer L starts from the\n"
               "cached residual stream entering L: same results, less work)");
  p.add({"--top"}, &f.top, "N", "rows of the ranking shown (default 20; 0: all)");
  p.add({"-t", "--threads"}, &opt.n_threads, "N", "threads (default: one per core)");
  if (!p.parse(argc, argv)) return false;
  opt.layer_cache = !no_layer_cache;
  resolve_device(p, dev);
  opt.device = dev.device;
  opt.n_gpu_layers = dev.n_gpu_layers;
  opt.cpu = dev.cpu;
  opt.vulkan = dev.vulkan;
  return true;
}

// What must be given, the words of --mode and --group, the lists, the output.
void settle_sensitivity_flags(SensitivityFlags& f) {
  tools::SensitivityOptions& opt = f.opt;
  if (f.model_path.empty()) throw Error("qlens sensitivity: -m MODEL is required");
  if (f.text_path.empty()) throw Error("qlens sensitivity: -f TEXT is required");
  if (f.mode != "quant" && f.mode != "noise" && f.mode != "pooled")
    throw Error("qlens sensitivity: --mode must be quant, noise or pooled, got '" + f.mode + "'");
  if (f.group != "tensor" && f.group != "layer" && f.group != "role" && f.group != "experts")
    throw Error("qlens sensitivity: --group must be tensor, layer, role or experts, got '" + f.group + "'");
  opt.group = f.group == "tensor"    ? tools::SensitivityGroup::Tensor
              : f.group == "layer"   ? tools::SensitivityGroup::Layer
              : f.group == "experts" ? tools::SensitivityGroup::Experts
                                     : tools::SensitivityGroup::Role;
  if (f.resume && f.json_path.empty()) throw Error("qlens sensitivity: --resume needs --json FILE");
  check_output_path("qlens sensitivity", {"--json", f.json_path},
                    {{"-m", f.model_path}, {"-f", f.text_path}, {"--imatrix", opt.imatrix_path}});
  opt.mode = f.mode == "quant"   ? tools::SensitivityMode::Quant
             : f.mode == "noise" ? tools::SensitivityMode::Noise
                                 : tools::SensitivityMode::Pooled;
  if (opt.mode == tools::SensitivityMode::Pooled && dist::world().size() > 1)
    throw Error("qlens sensitivity: --mode pooled runs on one process, not under mpirun");
  if (opt.mode == tools::SensitivityMode::Pooled && opt.group != tools::SensitivityGroup::Tensor)
    throw Error("qlens sensitivity: --mode pooled probes tensors (--group tensor)");
  opt.types = parse_types(f.types);
  opt.noise_levels = parse_levels(f.levels);
}

// The probes, with a progress bar (rank 0's) and this rank's checkpoint
// after each tensor.
tools::SensitivityResult measure_with_progress(const Model& model, const std::vector<Token>& tokens,
                                               const SensitivityFlags& f,
                                               const std::optional<tools::SensitivityResult>& previous) {
  std::unique_ptr<tools::Progress> bar;
  const dist::Comm& comm = dist::world();
  const std::string checkpoint = tools::sensitivity_rank_checkpoint(f.json_path, comm.rank());
  auto r = tools::measure_sensitivity(model, tokens, f.opt, previous ? &*previous : nullptr,
                                      [&](const tools::SensitivityResult& partial, int64_t done, int64_t total) {
                                        if (comm.is_root()) {
                                          if (!bar)
                                            bar = std::make_unique<tools::Progress>(
                                                comm.size() > 1 ? "sensitivity, rank 0's share" : "sensitivity", total,
                                                "tensors");
                                          bar->update(done, partial.groups.empty() ? partial.tensors.back().name
                                                                                   : partial.groups.back().name);
                                        }
                                        if (!f.json_path.empty())
                                          tools::write_sensitivity_checkpoint(checkpoint, partial, f.text_path);
                                      });
  if (bar) bar->finish();
  return r;
}

// Rank 0, after the probes: the cost, the table, the JSON.
void report_and_write(const SensitivityFlags& f, tools::SensitivityResult& r) {
  if (r.n_probes > 0 && r.reference_seconds > 0)
    std::fprintf(stderr, "sensitivity: %lld probes, %.2f s each on average, %.0f%% of a full pass (%.2f s)%s\n",
                 static_cast<long long>(r.n_probes), r.probe_seconds / r.n_probes,
                 100.0 * r.probe_seconds / r.n_probes / r.reference_seconds, r.reference_seconds,
                 f.opt.layer_cache ? "" : "; --no-layer-cache");
  r.text_path = f.text_path;
  tools::print_sensitivity(std::cout, r, static_cast<size_t>(f.top));
  if (!f.json_path.empty()) tools::write_sensitivity_checkpoint(f.json_path, r, f.text_path);
}

}  // namespace

int cmd_sensitivity(int argc, char** argv) {
  SensitivityFlags f;
  if (!parse_sensitivity_flags(argc, argv, f)) return 0;
  settle_sensitivity_flags(f);
  const tools::SensitivityOptions& opt = f.opt;

  auto model = Model::load(f.model_path);
  resolve_context_size(f.opt.n_ctx, *model, "sensitivity");
  tools::require_unquantized_model(*model, f.model_path);
  const auto tokens = tools::tokenize_text_file(model->vocab(), f.text_path,
                                                opt.max_chunks > 0 ? opt.max_chunks * opt.n_ctx : -1, "sensitivity");
  if (!opt.imatrix_path.empty())
    tools::print_imatrix_coverage(std::cerr, tools::sensitivity_imatrix_coverage(*model, opt));

  // Under mpirun every rank probes its share; rank 0 prints and writes the
  // result, then the ranks' own checkpoints go.
  dist::Comm& comm = dist::world();
  std::optional<tools::SensitivityResult> previous;
  if (f.resume) previous = tools::sensitivity_resume_point(f.json_path, f.model_path, opt);
  if (previous && comm.is_root())
    std::fprintf(stderr, "resuming: %zu %s already measured\n",
                 previous->groups.empty() ? previous->tensors.size() : previous->groups.size(),
                 previous->groups.empty() ? "tensors" : "groups");
  if (comm.size() > 1 && comm.is_root()) {
    if (opt.split_layers)
      std::fprintf(stderr, "%d processes, the model split by layers; each probes the tensors of its layers:\n%s",
                   comm.size(), tools::describe_layer_split(*model, tools::split_layers_by_bytes(*model, comm.size())).c_str());
    else
      std::fprintf(stderr, "%d processes: each makes the reference and probes its share of the tensors by cost\n",
                   comm.size());
  }

  auto r = measure_with_progress(*model, tokens, f, previous);
  if (comm.is_root()) report_and_write(f, r);
  comm.barrier();
  if (!f.json_path.empty()) tools::remove_sensitivity_rank_checkpoints(f.json_path, comm.rank());
  return 0;
}

}  // namespace qlens::cli
