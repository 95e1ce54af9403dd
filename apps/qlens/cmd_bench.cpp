#include <cstdio>

#include "args.h"
#include "commands.h"
#include "qlens/error.h"
#include "qlens/model.h"
#include "tools/bandwidth.h"
#include "tools/bench.h"

namespace qlens::cli {

int cmd_bench(int argc, char** argv) {
  std::string model_path;
  tools::BenchOptions opt;
  ArgParser p("bench", "qlens bench -m MODEL [-p N] [-n N] [-b N] [-r N] [-t N]",
              "Prompt-processing and generation speed, as llama-bench measures them: pp = a batch of -p\n"
              "tokens from an empty cache, tg = -n tokens generated one at a time.");
  p.add({"-m", "--model"}, &model_path, "FILE", "model GGUF file (required)");
  p.add({"-p", "--n-prompt"}, &opt.n_prompt, "N", "prompt tokens (default 512; 0: skip)");
  p.add({"-n", "--n-gen"}, &opt.n_gen, "N", "generated tokens (default 128; 0: skip)");
  p.add({"-b", "--batch-size"}, &opt.n_batch, "N", "tokens per evaluation (default 512)");
  p.add({"-r", "--repetitions"}, &opt.repetitions, "N", "repetitions (default 3)");
  p.add({"-t", "--threads"}, &opt.n_threads, "N", "threads (default: one per core)");
  bool bandwidth = false;
  p.add_switch({"--bandwidth"}, &bandwidth,
               "also measure the machine's read bandwidth and show the share of it generation reaches");
  DeviceFlags dev;
  add_device_options(p, &dev);
  if (!p.parse(argc, argv)) return 0;
  resolve_device(p, dev);
  opt.device = dev.device;
  opt.n_gpu_layers = dev.n_gpu_layers;
  if (model_path.empty()) throw Error("qlens bench: -m MODEL is required");
  auto model = Model::load(model_path);
  auto r = tools::bench(*model, opt);
  const int threads = opt.n_threads > 0 ? opt.n_threads : default_threads();
  // Generation streams the weights once per token: their bytes x tokens/s.
  const double gb_per_token = tools::weight_bytes_per_token(*model) / 1e9;
  const double read_gbs = bandwidth ? tools::read_bandwidth_gbs(threads) : 0;
  std::printf("| model | params | backend | threads | test | tokens/s | weights GB/s |%s\n|---|---|---|---|---|---|---|%s\n",
              bandwidth ? " of read bandwidth |" : "", bandwidth ? "---|" : "");
  auto row = [&](const char* kind, int64_t n, const tools::BenchFigure& f) {
    const bool gen = kind[0] == 't';
    std::printf("| %s | %.1fM | %s | %d | %s%lld | %.2f ± %.2f |", model_path.c_str(), model->n_params() / 1e6,
                r.backend.c_str(), threads, kind, static_cast<long long>(n), f.mean, f.stddev);
    if (gen) std::printf(" %.1f |", gb_per_token * f.mean); else std::printf(" - |");
    if (bandwidth && gen) std::printf(" %.0f%% of %.1f GB/s |", 100 * gb_per_token * f.mean / read_gbs, read_gbs);
    else if (bandwidth) std::printf(" - |");
    std::printf("\n");
  };
  if (opt.n_prompt > 0) row("pp", opt.n_prompt, r.prompt);
  if (opt.n_gen > 0) row("tg", opt.n_gen, r.generation);
  return 0;
}

}  // namespace qlens::cli
