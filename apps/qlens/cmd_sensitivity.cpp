#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "core/output_path.h"
#include "args.h"
#include "commands.h"
#include "core/text_file.h"
#include "qlens/error.h"
#include "qlens/model.h"
#include "tools/progress.h"
#include "tools/imatrix_coverage.h"
#include "tools/sensitivity.h"
#include "tools/tensor_names.h"
#include "tools/chunks.h"

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

}  // namespace

int cmd_sensitivity(int argc, char** argv) {
  std::string model_path, text_path, json_path, types = "", mode = "quant", group = "tensor", levels = "0.05";
  int64_t top = 20;
  bool resume = false;
  tools::SensitivityOptions opt;
  ArgParser p("sensitivity",
              "qlens sensitivity -m MODEL -f TEXT [--imatrix F] [--types LIST] [--mode quant|noise]\n"
              "                         [--chunks N] [--json FILE] [--resume]",
              "Measures how much each weight tensor matters: the mean KL divergence of the model's output\n"
              "from the unquantized reference when only that tensor is quantized to each candidate type\n"
              "(mode quant: one pass per tensor and type), or predicted from the response to Gaussian noise\n"
              "shaped like an imatrix-aware quantizer's error (mode noise: one or two passes per tensor).\n"
              "The JSON is what `qlens plan` reads to choose a type per tensor under a size budget.");
  p.add({"-m", "--model"}, &model_path, "FILE", "the unquantized model (F32/F16/BF16; required)");
  p.add({"-f", "--file"}, &text_path, "FILE", "calibration text (required)");
  p.add({"--imatrix"}, &opt.imatrix_path, "FILE", "importance matrix for the quantizers and the noise shape");
  p.add({"--types"}, &types, "LIST",
        "candidate types, comma-separated (default Q2_K,Q3_K,Q4_K,Q5_K,Q6_K,IQ4_NL,Q4_0,Q5_0,Q8_0,F16)");
  p.add({"--mode"}, &mode, "quant|noise", "how tensors are probed (default quant)");
  p.add({"--group"}, &group, "tensor|layer|role|experts",
        "probe unit (default tensor; layer/role quantize a whole group at once, experts a layer's expert\n"
        "tensors together and the rest alone: for reading, plan needs tensor)");
  p.add({"--noise-levels"}, &levels, "A[,B]", "noise RMS relative to each tensor's RMS (default 0.05; two levels also fit the exponent)");
  p.add({"--tensors"}, &opt.tensors_regex, "REGEX", "only weights whose name matches");
  p.add({"-c", "--ctx-size"}, &opt.n_ctx, "N", "tokens per chunk (default 512; 0: the model's training context)");
  p.add({"-b", "--batch-size"}, &opt.n_batch, "N", "tokens per evaluation (default 512)");
  p.add({"--chunks"}, &opt.max_chunks, "N", "chunks per evaluation (default 8)");
  p.add({"--top-k"}, &opt.top_k, "K", "reference log-probabilities kept per token (default 256)");
  p.add({"--json"}, &json_path, "FILE", "write the result as JSON; also the checkpoint, rewritten after each tensor");
  p.add_switch({"--resume"}, &resume, "continue from the --json file of an interrupted run");
  DeviceFlags dev;
  add_device_options(p, &dev);
  bool no_layer_cache = false;
  p.add_switch({"--no-layer-cache"}, &no_layer_cache,
               "run every probe through the whole model (by default a probe of layer L starts from the\n"
               "cached residual stream entering L: same results, less work)");
  p.add({"--top"}, &top, "N", "rows of the ranking shown (default 20; 0: all)");
  p.add({"-t", "--threads"}, &opt.n_threads, "N", "threads (default: one per core)");
  if (!p.parse(argc, argv)) return 0;
  opt.layer_cache = !no_layer_cache;
  resolve_device(p, dev);
  opt.device = dev.device;
  opt.n_gpu_layers = dev.n_gpu_layers;
  if (model_path.empty()) throw Error("qlens sensitivity: -m MODEL is required");
  if (text_path.empty()) throw Error("qlens sensitivity: -f TEXT is required");
  if (mode != "quant" && mode != "noise") throw Error("qlens sensitivity: --mode must be quant or noise, got '" + mode + "'");
  if (group != "tensor" && group != "layer" && group != "role" && group != "experts")
    throw Error("qlens sensitivity: --group must be tensor, layer, role or experts, got '" + group + "'");
  opt.group = group == "tensor"    ? tools::SensitivityGroup::Tensor
              : group == "layer"   ? tools::SensitivityGroup::Layer
              : group == "experts" ? tools::SensitivityGroup::Experts
                                   : tools::SensitivityGroup::Role;
  if (resume && json_path.empty()) throw Error("qlens sensitivity: --resume needs --json FILE");
  check_output_path("qlens sensitivity", {"--json", json_path},
                    {{"-m", model_path}, {"-f", text_path}, {"--imatrix", opt.imatrix_path}});
  opt.mode = mode == "quant" ? tools::SensitivityMode::Quant : tools::SensitivityMode::Noise;
  opt.types = parse_types(types);
  opt.noise_levels = parse_levels(levels);

  auto model = Model::load(model_path);
  resolve_context_size(opt.n_ctx, *model, "sensitivity");
  for (const auto& [name, w] : model->weights())
    if (type_traits(w->type).is_quantized)
      throw Error("qlens sensitivity: " + model_path + " is quantized (" + name + " is " +
                  std::string(type_name(w->type)) + "); give the F32/F16/BF16 model");
  const auto tokens = tools::tokenize_text_file(model->vocab(), text_path,
                                                opt.max_chunks > 0 ? opt.max_chunks * opt.n_ctx : -1, "sensitivity");
  if (!opt.imatrix_path.empty()) {
    std::vector<std::string> probed, all;
    for (const Tensor* w : tools::sensitivity_probed_weights(*model, opt.tensors_regex))
      if (tools::tensor_role(w->name) != "token_embd") probed.push_back(w->name);
    for (const auto& [name, w] : model->weights()) all.push_back(name);
    tools::print_imatrix_coverage(
        std::cerr, tools::imatrix_coverage(tools::load_imatrix(opt.imatrix_path), probed, all,
                                           model->file().try_string("general.name").value_or("")));
  }

  std::unique_ptr<tools::SensitivityResult> previous;
  if (resume && std::filesystem::exists(json_path)) {
    previous = std::make_unique<tools::SensitivityResult>(
        tools::sensitivity_from_json(read_text_file(json_path), json_path));
    if (previous->model_path != model_path)
      throw Error("--resume: " + json_path + " was made for " + previous->model_path + ", not " + model_path);
    tools::SensitivityOptions then = previous->settings;
    if (!previous->settings_recorded) {  // schema 1: only the mode was written
      then = opt;
      then.mode = previous->mode;
    }
    if (const std::string mismatch = tools::sensitivity_settings_mismatch(then, opt); !mismatch.empty())
      throw Error("--resume: " + json_path + " was made with other settings (" + mismatch +
                  "); give the same flags, or another --json file to start afresh");
    std::fprintf(stderr, "resuming: %zu tensors already measured\n", previous->tensors.size());
  }

  std::unique_ptr<tools::Progress> bar;
  auto r = tools::measure_sensitivity(*model, tokens, opt, previous.get(),
                                      [&](const tools::SensitivityResult& partial, int64_t done, int64_t total) {
                                        if (!bar) bar = std::make_unique<tools::Progress>("sensitivity", total, "tensors");
                                        bar->update(done, partial.groups.empty() ? partial.tensors.back().name
                                                                                 : partial.groups.back().name);
                                        if (!json_path.empty()) {
                                          tools::SensitivityResult copy = partial;
                                          copy.text_path = text_path;
                                          write_file_atomic(json_path, tools::sensitivity_json(copy));
                                        }
                                      });
  if (bar) bar->finish();
  if (r.n_probes > 0 && r.reference_seconds > 0)
    std::fprintf(stderr, "sensitivity: %lld probes, %.2f s each on average, %.0f%% of a full pass (%.2f s)%s\n",
                 static_cast<long long>(r.n_probes), r.probe_seconds / r.n_probes,
                 100.0 * r.probe_seconds / r.n_probes / r.reference_seconds, r.reference_seconds,
                 opt.layer_cache ? "" : "; --no-layer-cache");
  r.text_path = text_path;
  tools::print_sensitivity(std::cout, r, static_cast<size_t>(top));
  if (!json_path.empty()) write_file_atomic(json_path, tools::sensitivity_json(r));
  return 0;
}

}  // namespace qlens::cli
