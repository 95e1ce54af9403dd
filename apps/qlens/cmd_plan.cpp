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
#include "tools/plan/plan.h"
#include "tools/plan/plan_json.h"
#include "tools/plan/plan_validate.h"

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

// --types: each name a type (an empty item, as in "a,,b", is an unknown one).
std::vector<DType> parse_types(const std::string& list) {
  std::vector<DType> types;
  std::stringstream s(list);
  for (std::string name; std::getline(s, name, ',');) {
    auto t = type_from_name(name);
    if (!t) throw Error("--types: unknown type '" + name + "'");
    types.push_back(*t);
  }
  return types;
}

struct PlanFlags {
  std::string sens_path, out_path, json_path, types, target_size, model_path, work_dir;
  double target_bpw = 0;
  bool validate = false;
  tools::ValidateOptions vopt;
};

// Parses and checks the flags (the device only with --validate); false when
// --help was printed.
bool parse_plan_flags(int argc, char** argv, PlanFlags& f) {
  tools::ValidateOptions& vopt = f.vopt;
  ArgParser p("plan",
              "qlens plan --sensitivity S.json (--target-bpw B | --target-size BYTES) [--types LIST] [-o PLAN.txt]\n"
              "                  [--json PLAN.json] [--validate -f HELD_OUT.txt [--imatrix F]]",
              "Chooses one type per tensor to minimize the total predicted ΔKLD (from qlens sensitivity) under\n"
              "a size budget (a knapsack: Lagrangian relaxation and dynamic programming, the better plan kept,\n"
              "then greedy passes that spend what is left). Writes a tensor-type file (one ^exact\\.name$=type rule per tensor) that\n"
              "`qlens quantize --tensor-type-file` and llama.cpp's `llama-quantize --tensor-type-file` apply.\n"
              "With --validate: quantizes with the plan and with the uniform mixes nearest in size, compares\n"
              "each with the original on held-out text, and prints predicted against measured KLD.");
  p.add({"--sensitivity"}, &f.sens_path, "FILE", "the JSON of qlens sensitivity (required)");
  p.add({"--target-bpw"}, &f.target_bpw, "B", "budget in bits per weight (over every tensor of the model)");
  p.add({"--target-size"}, &f.target_size, "SIZE", "budget in bytes of tensor data (K, M, G suffixes)");
  p.add({"--types"}, &f.types, "LIST", "only these candidate types (comma-separated)");
  p.add({"-o", "--output"}, &f.out_path, "FILE", "the tensor-type file (default: printed)");
  p.add({"--json"}, &f.json_path, "FILE",
        "also write the plan (every tensor), its totals and the validation as JSON (for qlens report)");
  p.add_switch({"--validate"}, &f.validate, "quantize and compare the plan and the nearest uniform mixes");
  p.add({"-f", "--file"}, &vopt.text_path, "FILE", "--validate: held-out text");
  p.add({"-m", "--model"}, &f.model_path, "FILE", "--validate: the model (default: the one in the sensitivity file)");
  p.add({"--imatrix"}, &vopt.imatrix_path, "FILE", "--validate: imatrix for quantizing");
  p.add({"-c", "--ctx-size"}, &vopt.n_ctx, "N", "--validate: tokens per chunk (default 512; 0: the model's training context)");
  p.add({"--chunks"}, &vopt.max_chunks, "N", "--validate: chunks compared (default 16)");
  p.add({"--work-dir"}, &f.work_dir, "DIR", "--validate: where the quantized files go (default: next to -o, or .)");
  p.add({"-t", "--threads"}, &vopt.n_threads, "N", "threads (default: one per core)");
  DeviceFlags dev;
  add_device_options(p, &dev);
  if (!p.parse(argc, argv)) return false;
  if (f.validate) resolve_device(p, dev);  // a plan alone runs no model
  vopt.device = dev.device.empty() ? "cpu" : dev.device;
  vopt.n_gpu_layers = dev.n_gpu_layers;
  vopt.cpu = dev.cpu;
  vopt.vulkan = dev.vulkan;
  if (f.sens_path.empty()) throw Error("qlens plan: --sensitivity FILE is required");
  if (p.was_set("--target-bpw") && !(f.target_bpw > 0 && f.target_bpw <= 32))
    throw Error("qlens plan: --target-bpw " + format_number(f.target_bpw) +
                ": the budget must be above 0 and at most 32 bits per weight");
  if ((f.target_bpw > 0) == !f.target_size.empty())
    throw Error("qlens plan: give exactly one of --target-bpw and --target-size");
  if (f.validate && vopt.text_path.empty()) throw Error("qlens plan: --validate needs -f HELD_OUT.txt");
  return true;
}

void check_plan_outputs(const PlanFlags& f) {
  const std::vector<NamedPath> inputs = {
      {"--sensitivity", f.sens_path}, {"-m", f.model_path}, {"-f", f.vopt.text_path}, {"--imatrix", f.vopt.imatrix_path}};
  check_output_path("qlens plan", {"-o", f.out_path}, inputs);
  std::vector<NamedPath> inputs_and_rules = inputs;
  inputs_and_rules.push_back({"-o", f.out_path});
  check_output_path("qlens plan", {"--json", f.json_path}, inputs_and_rules);
}

// Without -o the rules are the output: stdout holds them alone, so that
// `qlens plan ... > plan.txt` is a valid tensor-type file; the table for
// the reader goes to stderr then.
void write_plan(const PlanFlags& f, const tools::SensitivityTable& table, const tools::Plan& plan,
                const std::string& rules) {
  if (f.out_path.empty()) {
    tools::print_plan(std::cerr, table, plan);
    std::cout << rules;
  } else {
    tools::print_plan(std::cout, table, plan);
    write_file_atomic(f.out_path, rules);
  }
}

// --validate: the plan and the uniform mixes quantized and measured on the
// held-out text; what was run goes into the JSON's context.
std::vector<tools::ValidationRow> validate(PlanFlags& f, const tools::SensitivityTable& table, const tools::Plan& plan,
                                           const std::string& rules, tools::PlanJsonContext& json_context) {
  tools::ValidateOptions& vopt = f.vopt;
  vopt.model_path = f.model_path.empty() ? table.model : f.model_path;
  if (vopt.n_ctx == 0) resolve_context_size(vopt.n_ctx, *Model::load(vopt.model_path), "plan --validate");
  std::filesystem::path dir = !f.work_dir.empty() ? std::filesystem::path(f.work_dir)
                              : std::filesystem::path(f.out_path).parent_path();
  if (dir.empty()) dir = std::filesystem::current_path();
  vopt.work_dir = dir.string();
  std::cout << "\n== Validation on " << vopt.text_path << " ==\n";
  std::vector<tools::ValidationRow> validation = tools::validate_plan(table, plan, rules, vopt, std::cerr);
  tools::print_validation(std::cout, validation);
  json_context.model_path = vopt.model_path;
  json_context.imatrix_path = vopt.imatrix_path;
  json_context.held_out_text_path = vopt.text_path;
  json_context.validate_n_ctx = vopt.n_ctx;
  json_context.validate_max_chunks = vopt.max_chunks;
  return validation;
}

}  // namespace

int cmd_plan(int argc, char** argv) {
  PlanFlags f;
  if (!parse_plan_flags(argc, argv, f)) return 0;
  check_plan_outputs(f);
  tools::SensitivityTable table = tools::load_sensitivity_json(f.sens_path);
  if (!table.complete)
    std::fprintf(stderr, "warning: %s is from an interrupted run: only its %zu tensors are planned\n",
                 f.sens_path.c_str(), table.tensors.size());
  if (!f.types.empty()) tools::restrict_plan_types(table, parse_types(f.types));
  const uint64_t budget = f.target_bpw > 0 ? tools::budget_from_bpw(table, f.target_bpw) : parse_size(f.target_size);
  const tools::Plan plan = tools::solve_plan(table, budget);
  const std::string rules = tools::tensor_type_file(table, plan);
  write_plan(f, table, plan, rules);

  tools::PlanJsonContext json_context;
  json_context.sensitivity_path = f.sens_path;
  json_context.tensor_type_file = f.out_path;
  if (f.target_bpw > 0) json_context.target_bits_per_weight = f.target_bpw;
  if (!f.target_size.empty()) json_context.target_size_bytes = budget;
  json_context.types = split_list(f.types);
  json_context.model_path = f.model_path.empty() ? table.model : f.model_path;
  std::vector<tools::ValidationRow> validation;
  if (f.validate) validation = validate(f, table, plan, rules, json_context);
  // Written once the run is complete, validation included: a file that
  // exists describes a finished plan.
  if (!f.json_path.empty())
    write_file_atomic(f.json_path, tools::plan_json(table, plan, json_context, f.validate ? &validation : nullptr));
  return 0;
}

}  // namespace qlens::cli
