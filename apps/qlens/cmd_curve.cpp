// qlens curve: the size-quality curve of a model (tools/plan/plan_curve.h).
#include <filesystem>
#include <iostream>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "core/output_path.h"
#include "core/text_file.h"
#include "qlens/error.h"
#include "qlens/model.h"
#include "tools/plan/plan.h"
#include "tools/plan/plan_curve.h"

namespace qlens::cli {

namespace {

std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> items;
  std::stringstream s(list);
  for (std::string item; std::getline(s, item, ',');) items.push_back(item);
  return items;
}

struct CurveFlags {
  std::string sens_path, model_path, json_path, points, types, work_dir;
  bool resume = false;
  tools::CurveOptions opt;
};

bool parse_curve_flags(int argc, char** argv, CurveFlags& f) {
  tools::ValidateOptions& run = f.opt.run;
  run.max_chunks = 10;
  ArgParser p("curve",
              "qlens curve --sensitivity S.json -f HELD_OUT.txt [--imatrix F] [--points LIST] [--json CURVE.json]\n"
              "                   [--mix-dir DIR] [--work-dir DIR] [--resume]",
              "The size-quality curve: at each point (by default the size of each of llama.cpp's mixes from IQ1_S\n"
              "to Q4_K_M on this model) plans a type per tensor from the sensitivity table under that size,\n"
              "quantizes the plan and the mix with the same imatrix, and measures both against the reference\n"
              "(the table's model) on held-out text: KLD, same top token, perplexity. Prints a table; --json\n"
              "writes it after every model measured, and --resume continues from that file. `qlens report\n"
              "--curve CURVE.json` draws KLD and the PPL ratio against bits per weight.");
  p.add({"--sensitivity"}, &f.sens_path, "FILE", "the JSON of qlens sensitivity (required)");
  p.add({"-f", "--file"}, &run.text_path, "FILE", "held-out text (required)");
  p.add({"--imatrix"}, &run.imatrix_path, "FILE", "imatrix for quantizing the plans and the mixes");
  p.add({"-m", "--model"}, &f.model_path, "FILE", "the reference model (default: the one in the sensitivity file)");
  p.add({"--points"}, &f.points, "LIST",
        "comma-separated mixes (IQ2_M, ...) and sizes (3.5bpw, 250M); default: llama.cpp's mixes IQ1_S .. Q4_K_M");
  p.add({"--types"}, &f.types, "LIST", "only these candidate types in the plans (comma-separated)");
  p.add({"--json"}, &f.json_path, "FILE", "write the curve as JSON (for qlens report --curve and pandas)");
  p.add({"--mix-dir"}, &f.opt.mix_dir, "DIR",
        "measure DIR/MIX.gguf as the mix where it exists (made by llama-quantize, say) instead of quantizing it");
  p.add({"--work-dir"}, &f.work_dir, "DIR", "where the quantized files go (default: next to --json, or .)");
  p.add_switch({"--resume"}, &f.resume, "reuse the rows of the existing --json file (same points and sizes)");
  p.add({"-c", "--ctx-size"}, &run.n_ctx, "N", "tokens per chunk (default 512; 0: the model's training context)");
  p.add({"--chunks"}, &run.max_chunks, "N", "chunks compared (default 10)");
  p.add({"-t", "--threads"}, &run.n_threads, "N", "threads (default: one per core)");
  DeviceFlags dev;
  add_device_options(p, &dev);
  if (!p.parse(argc, argv)) return false;
  resolve_device(p, dev);
  run.device = dev.device.empty() ? "cpu" : dev.device;
  run.n_gpu_layers = dev.n_gpu_layers;
  run.cpu = dev.cpu;
  run.vulkan = dev.vulkan;
  if (f.sens_path.empty()) throw Error("qlens curve: --sensitivity FILE is required");
  if (run.text_path.empty()) throw Error("qlens curve: -f HELD_OUT.txt is required");
  if (f.resume && f.json_path.empty()) throw Error("qlens curve: --resume continues a --json file: give --json");
  if (!std::filesystem::is_regular_file(run.text_path))
    throw Error("qlens curve: -f " + run.text_path + ": no such file");
  for (const std::string& point : f.points.empty() ? tools::default_curve_mixes() : split_commas(f.points))
    f.opt.points.push_back(tools::parse_curve_point(point));
  return true;
}

std::vector<tools::CurveRow> rows_to_resume(const CurveFlags& f) {
  if (!f.resume || !std::filesystem::exists(f.json_path)) return {};
  return tools::parse_curve_json(read_text_file(f.json_path), f.json_path);
}

}  // namespace

int cmd_curve(int argc, char** argv) {
  CurveFlags f;
  if (!parse_curve_flags(argc, argv, f)) return 0;
  tools::ValidateOptions& run = f.opt.run;
  check_output_path("qlens curve", {"--json", f.json_path},
                    {{"--sensitivity", f.sens_path}, {"-m", f.model_path}, {"-f", run.text_path},
                     {"--imatrix", run.imatrix_path}});
  tools::SensitivityTable table = tools::load_sensitivity_json(f.sens_path);
  if (!table.complete)
    std::cerr << "warning: " << f.sens_path << " is from an interrupted run: only its " << table.tensors.size()
              << " tensors are planned\n";
  std::vector<std::string> types = split_commas(f.types);
  if (!types.empty()) {
    std::vector<DType> keep;
    for (const std::string& name : types) {
      const auto t = type_from_name(name);
      if (!t) throw Error("--types: unknown type '" + name + "'");
      keep.push_back(*t);
    }
    tools::restrict_plan_types(table, keep);
  }
  run.model_path = f.model_path.empty() ? table.model : f.model_path;
  if (run.n_ctx == 0) resolve_context_size(run.n_ctx, *Model::load(run.model_path), "curve");
  std::filesystem::path dir = !f.work_dir.empty() ? std::filesystem::path(f.work_dir)
                              : std::filesystem::path(f.json_path).parent_path();
  if (dir.empty()) dir = std::filesystem::current_path();
  run.work_dir = dir.string();
  const std::vector<tools::CurveRow> done = rows_to_resume(f);

  tools::CurveJsonContext context;
  context.sensitivity_path = f.sens_path;
  context.model_path = run.model_path;
  context.imatrix_path = run.imatrix_path;
  context.held_out_text_path = run.text_path;
  context.mix_dir = f.opt.mix_dir;
  context.n_ctx = run.n_ctx;
  context.max_chunks = run.max_chunks;
  context.types = types;
  auto checkpoint = [&](const std::vector<tools::CurveRow>& rows) {
    if (!f.json_path.empty()) write_file_atomic(f.json_path, tools::curve_json(rows, context));
  };
  const std::vector<tools::CurveRow> rows = tools::run_curve(table, f.opt, done, checkpoint, std::cerr);
  context.complete = true;
  checkpoint(rows);
  tools::print_curve(std::cout, rows);
  return 0;
}

}  // namespace qlens::cli
