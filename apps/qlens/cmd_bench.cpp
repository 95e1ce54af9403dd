#include <cstdio>

#include "args.h"
#include "core/human_bytes.h"
#include "core/output_path.h"
#include "core/text_file.h"
#include "qlens/backend.h"
#include "commands.h"
#include "qlens/error.h"
#include "qlens/model.h"
#include "tools/bench/bandwidth.h"
#include "tools/bench/bench.h"

namespace qlens::cli {

namespace {

void print_markdown(const tools::BenchReport& r, bool bandwidth) {
  std::printf("| model | params | backend | threads | test | tokens/s | weights GB/s |%s\n|---|---|---|---|---|---|---|%s\n",
              bandwidth ? " of read bandwidth |" : "", bandwidth ? "---|" : "");
  auto row = [&](const char* kind, int64_t n, const tools::BenchFigure& f) {
    const bool gen = kind[0] == 't';
    std::printf("| %s | %.1fM | %s | %d | %s%lld | %.2f ± %.2f |", r.model_path.c_str(), r.model_n_params / 1e6,
                r.backends.c_str(), r.n_threads, kind, static_cast<long long>(n), f.mean, f.stddev);
    const double gbs = r.weights_gb_per_token * f.mean;
    if (gen) std::printf(" %.1f |", gbs); else std::printf(" - |");
    if (bandwidth && gen) std::printf(" %.0f%% of %.1f GB/s |", 100 * gbs / r.read_bandwidth_gb_per_s, r.read_bandwidth_gb_per_s);
    else if (bandwidth) std::printf(" - |");
    std::printf("\n");
  };
  if (r.options.n_prompt > 0) row("pp", r.options.n_prompt, r.result.prompt);
  if (r.options.n_gen > 0) row("tg", r.options.n_gen, r.result.generation);
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  std::string model_path, format = "md", json_path;
  tools::BenchOptions opt;
  ArgParser p("bench", "qlens bench -m MODEL [-p N] [-n N] [-b N] [-r N] [-t N] [-o md|json|csv] [--json FILE]",
              "Prompt-processing and generation speed, as llama-bench measures them: pp = a batch of -p\n"
              "tokens from an empty cache, tg = -n tokens generated one at a time.");
  p.add({"-m", "--model"}, &model_path, "FILE", "model GGUF file (required)");
  p.add({"-p", "--n-prompt"}, &opt.n_prompt, "N", "prompt tokens (default 512; 0: skip)");
  p.add({"-n", "--n-gen"}, &opt.n_gen, "N", "generated tokens (default 128; 0: skip)");
  p.add({"-b", "--batch-size"}, &opt.n_batch, "N", "tokens per evaluation (default 512)");
  p.add({"-r", "--repetitions"}, &opt.repetitions, "N", "repetitions (default 3)");
  p.add({"-t", "--threads"}, &opt.n_threads, "N", "threads (default: one per core)");
  p.add({"-o", "--output"}, &format, "md|json|csv",
        "stdout's format (default md; json and csv as llama-bench prints them, one row per test; docs/JSON.md)");
  p.add({"--json"}, &json_path, "FILE",
        "also write the results as a qlens JSON file (header, settings, the rows in \"results\")");
  bool bandwidth = false;
  p.add_switch({"--bandwidth"}, &bandwidth,
               "also measure the machine's read bandwidth and show the share of it generation reaches");
  bool profile = false;
  p.add_switch({"--profile"}, &profile,
               "time the CPU's kernels, barrier waits and dispatch per generated token (stderr)");
  DeviceFlags dev;
  add_device_options(p, &dev);
  if (!p.parse(argc, argv)) return 0;
  if (format != "md" && format != "json" && format != "csv")
    throw Error("qlens bench: -o must be md, json or csv, got '" + format + "'");
  if (model_path.empty()) throw Error("qlens bench: -m MODEL is required");
  check_output_path("qlens bench", {"--json", json_path}, {{"-m", model_path}});
  resolve_device(p, dev);
  opt.device = dev.device;
  opt.n_gpu_layers = dev.n_gpu_layers;
  opt.cpu = dev.cpu;
  opt.vulkan = dev.vulkan;
  opt.cpu.profile = profile;
  auto model = Model::load(model_path);
  tools::BenchReport report;
  report.result = tools::bench(*model, opt);
  report.options = opt;
  report.model_path = model_path;
  report.model_size = model->weight_bytes();
  report.model_n_params = model->n_params();
  report.backends = report.result.backend;
  report.cpu_info = cpu_device_info(dev.cpu).name;
  report.device = opt.device;
  report.n_threads = opt.n_threads > 0 ? opt.n_threads : default_threads();
  // Generation streams the weights once per token: their bytes x tokens/s.
  report.weights_gb_per_token = tools::weight_bytes_per_token(*model) / 1e9;
  if (bandwidth) report.read_bandwidth_gb_per_s = tools::read_bandwidth_gbs(report.n_threads);
  if (report.result.packed_bytes > 0)
    std::fprintf(stderr, "generation: %s of weights packed for the CPU's matrix-vector kernels (QLENS_CPU_PACK=0: none)\n",
                 human_bytes(report.result.packed_bytes).c_str());
  std::fputs(tools::token_time_text(report.result.token_time).c_str(), stderr);
  if (format == "md") print_markdown(report, bandwidth);
  // stdout takes llama-bench's shape, for the scripts written for it; the
  // file keeps the header every qlens --json file has, around the same rows.
  if (format == "json") std::fputs(tools::bench_json_rows(report).c_str(), stdout);
  if (format == "csv") std::fputs(tools::bench_csv(report).c_str(), stdout);
  if (!json_path.empty()) write_file_atomic(json_path, tools::bench_json(report));
  return 0;
}

}  // namespace qlens::cli
