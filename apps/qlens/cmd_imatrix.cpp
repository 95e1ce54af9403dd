#include <cstdio>
#include <filesystem>
#include <iostream>
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
#include "tools/imatrix/imatrix.h"
#include "tools/imatrix/imatrix_file.h"
#include "tools/imatrix/imatrix_run.h"
#include "tools/imatrix/imatrix_stats.h"
#include "tools/common/progress.h"

namespace qlens::cli {

namespace {

struct ImatrixFlags {
  std::string model_path, text_path, resume_path, json_path;
  std::vector<std::string> in_files;
  tools::ImatrixOptions opt;
  tools::ImatrixSaving saving;  // -o, its format, --output-frequency, --save-frequency
  bool parse_special = false, show_statistics = false;
};

// Parses the flags and settles format, collection and device; false when
// --help was printed.
bool parse_imatrix_flags(int argc, char** argv, ImatrixFlags& f) {
  std::string format, collect = "taps";
  bool no_ppl = false;
  f.saving.out_path = "imatrix.gguf";
  tools::ImatrixOptions& opt = f.opt;
  ArgParser p("imatrix",
              "qlens imatrix -m MODEL -f TEXT [-o OUT] [options]\n"
              "       qlens imatrix --in-file A --in-file B [-o OUT]        (combine)\n"
              "       qlens imatrix --in-file F --show-statistics [--json FILE]",
              "Collects an importance matrix as llama.cpp's imatrix does: for every weight matrix of the\n"
              "model's blocks, the sum of squared activations per input column and the number of rows,\n"
              "over chunks of CTX tokens of the text. Reductions run on the backend (taps), so collecting\n"
              "costs little more than a perplexity run; the perplexity is printed as it goes.");
  p.add({"-m", "--model"}, &f.model_path, "FILE", "model GGUF file");
  p.add({"-f", "--file"}, &f.text_path, "FILE", "calibration text");
  p.add({"-o", "--output-file"}, &f.saving.out_path, "FILE", "output (default imatrix.gguf)");
  p.add({"-c", "--ctx-size"}, &opt.n_ctx, "N", "tokens per chunk (default 512; 0: the model's training context)");
  p.add({"-b", "--batch-size"}, &opt.n_batch, "N", "tokens per evaluation (default 512, at most CTX)");
  p.add({"--chunks"}, &opt.max_chunks, "N", "process at most N chunks (default: all)");
  p.add({"--chunk", "--from-chunk"}, &opt.first_chunk, "N", "start at chunk N of the text (default 0)");
  p.add({"--output-frequency"}, &f.saving.output_frequency, "N", "save OUT every N chunks (default 10)");
  p.add({"--save-frequency"}, &f.saving.save_frequency, "N",
        "also save checkpoints OUT.at_<chunks> every N chunks (default 0: none)");
  p.add({"--in-file"}, &f.in_files, "FILE",
        "start from this imatrix (repeatable: Σx² and counts add up); without -m and -f, only combine");
  p.add({"--resume"}, &f.resume_path, "FILE", "continue a stopped run from its checkpoint OUT.at_N (GGUF)");
  p.add_switch({"--process-output"}, &opt.process_output, "also collect output.weight");
  p.add_switch({"--no-ppl"}, &no_ppl, "do not compute perplexity");
  p.add({"--output-format"}, &format, "gguf|dat", "file format (default gguf; dat when OUT ends in .dat)");
  p.add_switch({"--parse-special"}, &f.parse_special, "tokenize special-token text as special tokens");
  p.add_switch({"--show-statistics"}, &f.show_statistics, "print statistics of the --in-file matrix and exit");
  p.add({"--json"}, &f.json_path, "FILE",
        "with --show-statistics: also write them as JSON; when collecting: a summary of the run (docs/JSON.md)");
  p.add({"--collect"}, &collect, "taps|callback",
        "how activations are observed: reductions on the backend (default) or host callback");
  p.add({"-t", "--threads"}, &opt.n_threads, "N", "threads (default: one per core)");
  add_split_layers_option(p, &opt.split_layers);
  add_cache_type_option(p, &opt.cache_type);
  DeviceFlags dev;
  add_device_options(p, &dev);
  p.add_note(
      "Memory: the model's weights plus one context of CTX tokens (KV cache, F32 unless -ctk says\n"
      "otherwise, and one batch of activations). A run killed at any point loses at most the chunks\n"
      "since its last checkpoint: use --save-frequency N and --resume OUT.at_N.");
  if (!p.parse(argc, argv)) return false;

  f.saving.format = tools::imatrix_output_format(format, f.saving.out_path);
  if (collect != "taps" && collect != "callback")
    throw Error("qlens imatrix: --collect must be taps or callback, got '" + collect + "'");
  opt.collect = collect == "taps" ? tools::ImatrixCollect::Taps : tools::ImatrixCollect::Callback;
  opt.compute_ppl = !no_ppl;
  resolve_device(p, dev);
  opt.device = dev.device;
  opt.n_gpu_layers = dev.n_gpu_layers;
  opt.cpu = dev.cpu;
  opt.vulkan = dev.vulkan;
  return true;
}

// Fails before hours of work when the outputs cannot be written.
void check_imatrix_outputs(const ImatrixFlags& f) {
  if (f.saving.output_frequency < 0 || f.saving.save_frequency < 0)
    throw Error("qlens imatrix: --output-frequency and --save-frequency must not be negative");
  std::vector<NamedPath> inputs = {{"-m", f.model_path}, {"-f", f.text_path}, {"--resume", f.resume_path}};
  for (const auto& file : f.in_files) inputs.push_back({"--in-file", file});
  check_output_path("qlens imatrix", {"--json", f.json_path}, inputs);
  if (f.show_statistics) return;
  check_output_path("qlens imatrix", {"-o", f.saving.out_path}, inputs);
  if (!f.json_path.empty() &&
      std::filesystem::absolute(f.json_path) == std::filesystem::absolute(f.saving.out_path))
    throw Error("qlens imatrix: --json and -o name the same file: " + f.json_path);
}

// --show-statistics: the figures of the --in-file matrices, no model.
int show_statistics(const ImatrixFlags& f) {
  if (f.in_files.empty()) throw Error("qlens imatrix: --show-statistics needs --in-file FILE");
  if (!f.model_path.empty() || !f.text_path.empty())
    throw Error("qlens imatrix: --show-statistics reads --in-file only; drop -m and -f");
  const tools::Imatrix m = tools::combine_imatrix_files(f.in_files);
  const tools::ImatrixStatistics stats = tools::compute_imatrix_statistics(m);
  tools::print_imatrix_statistics(std::cout, stats);
  if (!f.json_path.empty()) {
    std::ostringstream s;
    tools::write_imatrix_statistics_json(s, stats);
    s << "\n";
    write_file_atomic(f.json_path, s.str());
  }
  return 0;
}

// --in-file A --in-file B without -m and -f: the matrices added up.
int combine(const ImatrixFlags& f) {
  if (f.in_files.empty()) throw Error("qlens imatrix: -m MODEL and -f TEXT are required (or --in-file to combine)");
  const tools::Imatrix m = tools::combine_imatrix_files(f.in_files);
  tools::save_imatrix(m, f.saving.out_path, f.saving.format);
  std::fprintf(stderr, "combined %zu files: %zu tensors, %lld chunks -> %s\n", f.in_files.size(), m.entries.size(),
               static_cast<long long>(m.chunk_count), f.saving.out_path.c_str());
  return 0;
}

// The chunks [first, end) collected into m, with a progress bar (or lines)
// and llama.cpp's running perplexity estimates on stdout.
tools::ImatrixRunStats collect_with_progress(const Model& model, const std::vector<Token>& tokens,
                                             const tools::ImatrixOptions& opt, tools::Imatrix& m,
                                             const tools::ImatrixSaving& saving, tools::ImatrixChunkRange range) {
  tools::Progress progress("imatrix", range.end - range.first, "chunks");
  const bool bar = tools::Progress::default_mode() == tools::Progress::Mode::Bar;
  const tools::ImatrixRunStats stats =
      tools::collect_imatrix_saving(model, tokens, opt, m, saving, std::cerr, [&](const tools::ImatrixChunkReport& r) {
        char status[96];
        if (opt.compute_ppl)
          std::snprintf(status, sizeof status, "PPL %.4f, %.0f tok/s", r.ppl, r.tokens_per_second);
        else
          std::snprintf(status, sizeof status, "%.0f tok/s", r.tokens_per_second);
        progress.update(r.done, status);
        if (!bar && opt.compute_ppl) {  // llama.cpp's running estimates too
          std::printf("[%lld]%.4f,", static_cast<long long>(r.chunk + 1), r.ppl);
          std::fflush(stdout);
        }
      });
  progress.finish();
  if (!bar && opt.compute_ppl) std::printf("\n");
  return stats;
}

// What the run did, after it: perplexity on stdout, the rest on stderr.
void report_run(const tools::Imatrix& m, const tools::ImatrixRunSummary& run) {
  if (run.ppl) std::printf("Final estimate: PPL = %.4f +/- %.5f\n", run.ppl->ppl, run.ppl->ppl_error);
  std::fprintf(stderr, "%lld chunks in this run, %.0f tokens/s\n", static_cast<long long>(run.stats.chunks_this_run),
               run.stats.tokens_per_second);
  std::fprintf(stderr, "saved %s: %zu tensors, %lld chunks\n", run.out_path.c_str(), m.entries.size(),
               static_cast<long long>(m.chunk_count));
  if (!run.unrouted_experts.empty()) {
    std::fprintf(stderr, "warning: the text left experts without data (see --show-statistics):\n");
    for (const std::string& line : run.unrouted_experts) std::fprintf(stderr, "  %s\n", line.c_str());
  }
}

// -m MODEL -f TEXT: collects (from --in-file or a --resume checkpoint on),
// saving as it goes, then writes OUT and, with --json, the run's summary.
int collect(const ImatrixFlags& f) {
  if (f.model_path.empty()) throw Error("qlens imatrix: -m MODEL is required");
  if (f.text_path.empty()) throw Error("qlens imatrix: -f TEXT is required");
  if (!f.resume_path.empty() && !f.in_files.empty())
    throw Error("qlens imatrix: --resume continues a checkpoint, which already holds its --in-file data; "
                "drop --in-file");
  tools::ImatrixOptions opt = f.opt;
  auto model = Model::load(f.model_path);
  resolve_context_size(opt.n_ctx, *model, "imatrix");
  const auto tokens = tools::tokenize_text_file(
      model->vocab(), f.text_path, opt.max_chunks >= 0 ? (opt.first_chunk + opt.max_chunks) * opt.n_ctx : -1,
      "imatrix", f.parse_special);

  opt.dataset = f.text_path;
  // Under mpirun every rank runs the chunks it is given; rank 0 alone holds
  // the matrix, prints and writes.
  dist::Comm& comm = dist::world();
  tools::Imatrix m;
  if (!comm.is_root()) {
    tools::imatrix_chunk_range(static_cast<int64_t>(tokens.size()), opt, m);  // the same errors, before any work
    // (It saves nothing: rank 0 calls the saves; with --split-layers the
    // ranks hand it their entries when one is due.)
    tools::collect_imatrix_saving(*model, tokens, opt, m, f.saving, std::cerr);
    return 0;
  }
  m = tools::imatrix_run_start(f.resume_path, f.in_files, opt.n_ctx, f.saving.out_path);
  const auto range = tools::imatrix_chunk_range(static_cast<int64_t>(tokens.size()), opt, m);
  tools::check_imatrix_matches_model(m, *model);
  std::fprintf(stderr, "%s: tokenized %s: %zu tokens; chunks %lld..%lld of %lld tokens%s\n", f.model_path.c_str(),
               f.text_path.c_str(), tokens.size(), static_cast<long long>(range.first),
               static_cast<long long>(range.end - 1), static_cast<long long>(opt.n_ctx),
               f.resume_path.empty() ? "" : " (resumed)");
  if (comm.size() > 1 && opt.split_layers)
    std::fprintf(stderr, "%d processes, the model split by layers:\n%s", comm.size(),
                 tools::describe_layer_split(*model, tools::split_layers_by_bytes(*model, comm.size())).c_str());
  else if (comm.size() > 1)
    std::fprintf(stderr, "%d processes: chunks go round-robin, rank 0 adds them in order\n", comm.size());

  tools::ImatrixRunSummary run;
  run.model_path = f.model_path;
  run.text_path = f.text_path;
  run.resume_path = f.resume_path;
  run.out_path = f.saving.out_path;
  run.options = opt;
  run.stats = collect_with_progress(*model, tokens, opt, m, f.saving, range);
  tools::save_imatrix(m, f.saving.out_path, f.saving.format);
  run.ppl = tools::imatrix_run_perplexity(m, opt.compute_ppl);
  run.unrouted_experts = tools::describe_unrouted_experts(m);
  report_run(m, run);
  if (!f.json_path.empty()) write_file_atomic(f.json_path, tools::imatrix_run_json(run, m));
  return 0;
}

}  // namespace

int cmd_imatrix(int argc, char** argv) {
  ImatrixFlags f;
  if (!parse_imatrix_flags(argc, argv, f)) return 0;
  check_imatrix_outputs(f);
  // Statistics and combining need no model, and one process.
  if ((f.show_statistics || (f.model_path.empty() && f.text_path.empty())) && dist::world().size() > 1)
    throw Error("qlens imatrix: --show-statistics and combining run as one process, not under mpirun");
  if (f.show_statistics) return show_statistics(f);
  if (f.model_path.empty() && f.text_path.empty()) return combine(f);
  return collect(f);
}

}  // namespace qlens::cli
