#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string_view>

#include "core/output_path.h"
#include "args.h"
#include "commands.h"
#include "core/text_file.h"
#include "qlens/error.h"
#include "qlens/model.h"
#include "tools/plan.h"
#include "tools/plan_json.h"
#include "tools/plan_validate.h"

namespace qlens::cli {

namespace {
std::string format_number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}
}  // namespace

namespace {

// "123456", "250K", "1.5M", "2G" (powers of 1024; "KiB"/"MiB"/"GiB" and "B" accepted).
uint64_t parse_size(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  std::string_view unit(end);
  if (unit.ends_with("iB"))
    unit.remove_suffix(2);
  else if (unit.ends_with("B"))
    unit.remove_suffix(1);
  double scale = 1;
  if (unit == "K" || unit == "k")
    scale = 1024.0;
  else if (unit == "M")
    scale = 1024.0 * 1024;
  else if (unit == "G")
    scale = 1024.0 * 1024 * 1024;
  else if (!unit.empty())
    throw Error("--target-size: '" + text + "' is not a size (use bytes, or K, M, G)");
  if (end == text.c_str() || !(v > 0)) throw Error("--target-size: '" + text + "' is not a positive size");
  return static_cast<uint64_t>(v * scale);
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> items;
  std::stringstream s(list);
  for (std::string item; std::getline(s, item, ',');)
    if (!item.empty()) items.push_back(item);
  return items;
}

// Keeps only the listed types among each tensor's options (and its source
// type when none of them fits).
void restrict_types(tools::SensitivityTable& table, const std::string& list) {
  std::vector<DType> keep;
  std::stringstream s(list);
  for (std::string name; std::getline(s, name, ',');) {
    auto t = type_from_name(name);
    if (!t) throw Error("--types: unknown type '" + name + "'");
    keep.push_back(*t);
  }
  for (tools::PlanTensor& t : table.tensors) {
    std::vector<tools::PlanOption> kept;
    for (const tools::PlanOption& o : t.options)
      if (std::find(keep.begin(), keep.end(), o.type) != keep.end()) kept.push_back(o);
    if (kept.empty() && !t.options.empty()) kept.push_back(t.options.front());
    t.options = kept;
  }
}

}  // namespace

int cmd_plan(int argc, char** argv) {
  std::string sens_path, out_path, json_path, types, target_size, model_path, work_dir;
  double target_bpw = 0;
  bool validate = false;
  tools::ValidateOptions vopt;
  ArgParser p("plan",
              "qlens plan --sensitivity S.json (--target-bpw B | --target-size BYTES) [--types LIST] [-o PLAN.txt]\n"
              "                  [--json PLAN.json] [--validate -f HELD_OUT.txt [--imatrix F]]",
              "Chooses one type per tensor to minimize the total predicted ΔKLD (from qlens sensitivity) under\n"
              "a size budget: Lagrangian relaxation over each tensor's options, then a greedy pass that spends\n"
              "what is left. Writes a tensor-type file (one ^exact\\.name$=type rule per tensor) that\n"
              "`qlens quantize --tensor-type-file` and llama.cpp's `llama-quantize --tensor-type-file` apply.\n"
              "With --validate: quantizes with the plan and with the uniform mixes nearest in size, compares\n"
              "each with the original on held-out text, and prints predicted against measured KLD.");
  p.add({"--sensitivity"}, &sens_path, "FILE", "the JSON of qlens sensitivity (required)");
  p.add({"--target-bpw"}, &target_bpw, "B", "budget in bits per weight (over every tensor of the model)");
  p.add({"--target-size"}, &target_size, "SIZE", "budget in bytes of tensor data (K, M, G suffixes)");
  p.add({"--types"}, &types, "LIST", "only these candidate types (comma-separated)");
  p.add({"-o", "--output"}, &out_path, "FILE", "the tensor-type file (default: printed)");
  p.add({"--json"}, &json_path, "FILE",
        "also write the plan (every tensor), its totals and the validation as JSON (for qlens report)");
  p.add_switch({"--validate"}, &validate, "quantize and compare the plan and the nearest uniform mixes");
  p.add({"-f", "--file"}, &vopt.text_path, "FILE", "--validate: held-out text");
  p.add({"-m", "--model"}, &model_path, "FILE", "--validate: the model (default: the one in the sensitivity file)");
  p.add({"--imatrix"}, &vopt.imatrix_path, "FILE", "--validate: imatrix for quantizing");
  p.add({"-c", "--ctx-size"}, &vopt.n_ctx, "N", "--validate: tokens per chunk (default 512; 0: the model's training context)");
  p.add({"--chunks"}, &vopt.max_chunks, "N", "--validate: chunks compared (default 16)");
  p.add({"--work-dir"}, &work_dir, "DIR", "--validate: where the quantized files go (default: next to -o, or .)");
  p.add({"-t", "--threads"}, &vopt.n_threads, "N", "threads (default: one per core)");
  DeviceFlags dev;
  add_device_options(p, &dev);
  if (!p.parse(argc, argv)) return 0;
  if (validate) resolve_device(p, dev);  // a plan alone runs no model
  vopt.device = dev.device.empty() ? "cpu" : dev.device;
  vopt.n_gpu_layers = dev.n_gpu_layers;
  if (sens_path.empty()) throw Error("qlens plan: --sensitivity FILE is required");
  if (p.was_set("--target-bpw") && !(target_bpw > 0 && target_bpw <= 32))
    throw Error("qlens plan: --target-bpw " + format_number(target_bpw) +
                ": the budget must be above 0 and at most 32 bits per weight");
  if ((target_bpw > 0) == !target_size.empty())
    throw Error("qlens plan: give exactly one of --target-bpw and --target-size");
  if (validate && vopt.text_path.empty()) throw Error("qlens plan: --validate needs -f HELD_OUT.txt");

  const std::vector<NamedPath> inputs = {
      {"--sensitivity", sens_path}, {"-m", model_path}, {"-f", vopt.text_path}, {"--imatrix", vopt.imatrix_path}};
  check_output_path("qlens plan", {"-o", out_path}, inputs);
  std::vector<NamedPath> inputs_and_rules = inputs;
  inputs_and_rules.push_back({"-o", out_path});
  check_output_path("qlens plan", {"--json", json_path}, inputs_and_rules);
  tools::SensitivityTable table = tools::load_sensitivity_json(sens_path);
  if (!table.complete)
    std::fprintf(stderr, "warning: %s is from an interrupted run: only its %zu tensors are planned\n",
                 sens_path.c_str(), table.tensors.size());
  if (!types.empty()) restrict_types(table, types);
  const uint64_t budget = target_bpw > 0 ? tools::budget_from_bpw(table, target_bpw) : parse_size(target_size);
  const tools::Plan plan = tools::solve_plan(table, budget);
  // Without -o the rules are the output: stdout holds them alone, so that
  // `qlens plan ... > plan.txt` is a valid tensor-type file; the table for
  // the reader goes to stderr then.
  const std::string rules = tools::tensor_type_file(table, plan);
  if (out_path.empty()) {
    tools::print_plan(std::cerr, table, plan);
    std::cout << rules;
  } else {
    tools::print_plan(std::cout, table, plan);
    write_file_atomic(out_path, rules);
  }

  tools::PlanJsonContext json_context;
  json_context.sensitivity_path = sens_path;
  json_context.tensor_type_file = out_path;
  if (target_bpw > 0) json_context.target_bits_per_weight = target_bpw;
  if (!target_size.empty()) json_context.target_size_bytes = budget;
  json_context.types = split_list(types);
  std::vector<tools::ValidationRow> validation;
  if (validate) {
    vopt.model_path = model_path.empty() ? table.model : model_path;
    if (vopt.n_ctx == 0) resolve_context_size(vopt.n_ctx, *Model::load(vopt.model_path), "plan --validate");
    std::filesystem::path dir = !work_dir.empty() ? std::filesystem::path(work_dir)
                                : std::filesystem::path(out_path).parent_path();
    if (dir.empty()) dir = std::filesystem::current_path();
    vopt.work_dir = dir.string();
    std::cout << "\n== Validation on " << vopt.text_path << " ==\n";
    validation = tools::validate_plan(table, plan, rules, vopt, std::cerr);
    tools::print_validation(std::cout, validation);
    json_context.model_path = vopt.model_path;
    json_context.imatrix_path = vopt.imatrix_path;
    json_context.held_out_text_path = vopt.text_path;
    json_context.validate_n_ctx = vopt.n_ctx;
    json_context.validate_max_chunks = vopt.max_chunks;
  } else {
    json_context.model_path = model_path.empty() ? table.model : model_path;
  }
  // Written once the run is complete, validation included: a file that
  // exists describes a finished plan.
  if (!json_path.empty())
    write_file_atomic(json_path, tools::plan_json(table, plan, json_context, validate ? &validation : nullptr));
  return 0;
}

}  // namespace qlens::cli
