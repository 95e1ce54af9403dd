#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "core/json_writer.h"
#include "core/output_path.h"
#include "core/text_file.h"
#include "qlens/error.h"
#include "qlens/model.h"
#include "tools/chunks.h"
#include "tools/imatrix.h"
#include "tools/imatrix_file.h"
#include "tools/imatrix_stats.h"
#include "tools/json_header.h"
#include "tools/progress.h"
#include "tools/tensor_names.h"

namespace qlens::cli {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void save(const tools::Imatrix& m, const std::string& path, const std::string& format) {
  if (format == "dat")
    tools::save_imatrix_dat(m, path);
  else
    tools::save_imatrix_gguf(m, path);
}

// Fails before hours of work when the output cannot be written.
}  // namespace

int cmd_imatrix(int argc, char** argv) {
  std::string model_path, text_path, out_path = "imatrix.gguf", format, resume_path, json_path, collect = "taps";
  std::vector<std::string> in_files;
  tools::ImatrixOptions opt;
  int64_t output_frequency = 10, save_frequency = 0;
  bool no_ppl = false, parse_special = false, show_statistics = false;
  ArgParser p("imatrix",
              "qlens imatrix -m MODEL -f TEXT [-o OUT] [options]\n"
              "       qlens imatrix --in-file A --in-file B [-o OUT]        (combine)\n"
              "       qlens imatrix --in-file F --show-statistics [--json FILE]",
              "Collects an importance matrix as llama.cpp's imatrix does: for every weight matrix of the\n"
              "model's blocks, the sum of squared activations per input column and the number of rows,\n"
              "over chunks of CTX tokens of the text. Reductions run on the backend (taps), so collecting\n"
              "costs little more than a perplexity run; the perplexity is printed as it goes.");
  p.add({"-m", "--model"}, &model_path, "FILE", "model GGUF file");
  p.add({"-f", "--file"}, &text_path, "FILE", "calibration text");
  p.add({"-o", "--output-file"}, &out_path, "FILE", "output (default imatrix.gguf)");
  p.add({"-c", "--ctx-size"}, &opt.n_ctx, "N", "tokens per chunk (default 512; 0: the model's training context)");
  p.add({"-b", "--batch-size"}, &opt.n_batch, "N", "tokens per evaluation (default 512, at most CTX)");
  p.add({"--chunks"}, &opt.max_chunks, "N", "process at most N chunks (default: all)");
  p.add({"--chunk", "--from-chunk"}, &opt.first_chunk, "N", "start at chunk N of the text (default 0)");
  p.add({"--output-frequency"}, &output_frequency, "N", "save OUT every N chunks (default 10)");
  p.add({"--save-frequency"}, &save_frequency, "N", "also save checkpoints OUT.at_<chunks> every N chunks (default 0: none)");
  p.add({"--in-file"}, &in_files, "FILE",
        "start from this imatrix (repeatable: Σx² and counts add up); without -m and -f, only combine");
  p.add({"--resume"}, &resume_path, "FILE", "continue a stopped run from its checkpoint OUT.at_N (GGUF)");
  p.add_switch({"--process-output"}, &opt.process_output, "also collect output.weight");
  p.add_switch({"--no-ppl"}, &no_ppl, "do not compute perplexity");
  p.add({"--output-format"}, &format, "gguf|dat", "file format (default gguf; dat when OUT ends in .dat)");
  p.add_switch({"--parse-special"}, &parse_special, "tokenize special-token text as special tokens");
  p.add_switch({"--show-statistics"}, &show_statistics, "print statistics of the --in-file matrix and exit");
  p.add({"--json"}, &json_path, "FILE",
        "with --show-statistics: also write them as JSON; when collecting: a summary of the run (docs/JSON.md)");
  p.add({"--collect"}, &collect, "taps|callback",
        "how activations are observed: reductions on the backend (default) or host callback");
  p.add({"-t", "--threads"}, &opt.n_threads, "N", "threads (default: one per core)");
  add_cache_type_option(p, &opt.cache_type);
  DeviceFlags dev;
  add_device_options(p, &dev);
  p.add_note(
      "Memory: the model's weights plus one context of CTX tokens (KV cache, F32 unless -ctk says\n"
      "otherwise, and one batch of activations). A run killed at any point loses at most the chunks\n"
      "since its last checkpoint: use --save-frequency N and --resume OUT.at_N.");
  if (!p.parse(argc, argv)) return 0;

  if (format.empty()) format = ends_with(out_path, ".dat") ? "dat" : "gguf";
  if (format != "gguf" && format != "dat")
    throw Error("qlens imatrix: --output-format must be gguf or dat, got '" + format + "'");
  if (collect != "taps" && collect != "callback")
    throw Error("qlens imatrix: --collect must be taps or callback, got '" + collect + "'");
  opt.collect = collect == "taps" ? tools::ImatrixCollect::Taps : tools::ImatrixCollect::Callback;
  opt.compute_ppl = !no_ppl;
  resolve_device(p, dev);
  opt.device = dev.device;
  opt.n_gpu_layers = dev.n_gpu_layers;
  if (output_frequency < 0 || save_frequency < 0)
    throw Error("qlens imatrix: --output-frequency and --save-frequency must not be negative");
  std::vector<NamedPath> inputs = {{"-m", model_path}, {"-f", text_path}, {"--resume", resume_path}};
  for (const auto& f : in_files) inputs.push_back({"--in-file", f});
  check_output_path("qlens imatrix", {"--json", json_path}, inputs);
  if (!show_statistics) check_output_path("qlens imatrix", {"-o", out_path}, inputs);
  if (!show_statistics && !json_path.empty() && std::filesystem::absolute(json_path) == std::filesystem::absolute(out_path))
    throw Error("qlens imatrix: --json and -o name the same file: " + json_path);

  // Statistics and combining need no model.
  if (show_statistics) {
    if (in_files.empty()) throw Error("qlens imatrix: --show-statistics needs --in-file FILE");
    if (!model_path.empty() || !text_path.empty())
      throw Error("qlens imatrix: --show-statistics reads --in-file only; drop -m and -f");
    const tools::Imatrix m = tools::combine_imatrix_files(in_files);
    const tools::ImatrixStatistics stats = tools::compute_imatrix_statistics(m);
    tools::print_imatrix_statistics(std::cout, stats);
    if (!json_path.empty()) {
      std::ostringstream s;
      tools::write_imatrix_statistics_json(s, stats);
      s << "\n";
      write_file_atomic(json_path, s.str());
    }
    return 0;
  }
  if (model_path.empty() && text_path.empty()) {
    if (in_files.empty()) throw Error("qlens imatrix: -m MODEL and -f TEXT are required (or --in-file to combine)");
    tools::Imatrix m = tools::combine_imatrix_files(in_files);
    save(m, out_path, format);
    std::fprintf(stderr, "combined %zu files: %zu tensors, %lld chunks -> %s\n", in_files.size(), m.entries.size(),
                 static_cast<long long>(m.chunk_count), out_path.c_str());
    return 0;
  }
  if (model_path.empty()) throw Error("qlens imatrix: -m MODEL is required");
  if (text_path.empty()) throw Error("qlens imatrix: -f TEXT is required");
  if (!resume_path.empty() && !in_files.empty())
    throw Error("qlens imatrix: --resume continues a checkpoint, which already holds its --in-file data; "
                "drop --in-file");
  auto model = Model::load(model_path);
  resolve_context_size(opt.n_ctx, *model, "imatrix");
  const auto tokens = tools::tokenize_text_file(
      model->vocab(), text_path, opt.max_chunks >= 0 ? (opt.first_chunk + opt.max_chunks) * opt.n_ctx : -1, "imatrix",
      parse_special);

  tools::Imatrix m;
  m.path = out_path;
  if (!resume_path.empty()) {
    m = tools::load_imatrix(resume_path);
    if (m.run.next_chunk < 0)
      throw Error("qlens imatrix: --resume " + resume_path +
                  " is not a qlens checkpoint (no qlens.imatrix.next_chunk key; checkpoints are GGUF files)");
    if (m.chunk_size != opt.n_ctx)
      throw Error("qlens imatrix: --resume " + resume_path + " was made with -c " + std::to_string(m.chunk_size) +
                  ", this run has -c " + std::to_string(opt.n_ctx));
  } else if (!in_files.empty()) {
    m = tools::combine_imatrix_files(in_files);
    tools::convert_counts_to_rows(m, opt.n_ctx);
    m.run = {};
  }
  opt.dataset = text_path;
  const auto range = tools::imatrix_chunk_range(static_cast<int64_t>(tokens.size()), opt, m);
  tools::check_imatrix_matches_model(m, *model);
  std::fprintf(stderr, "%s: tokenized %s: %zu tokens; chunks %lld..%lld of %lld tokens%s\n", model_path.c_str(),
               text_path.c_str(), tokens.size(), static_cast<long long>(range.first),
               static_cast<long long>(range.end - 1), static_cast<long long>(opt.n_ctx),
               resume_path.empty() ? "" : " (resumed)");

  tools::Progress progress("imatrix", range.end - range.first, "chunks");
  const bool bar = tools::Progress::default_mode() == tools::Progress::Mode::Bar;
  double tokens_per_second = 0;
  int64_t processed = 0;
  try {
    tools::collect_imatrix(*model, tokens, opt, m, [&](const tools::ImatrixChunkReport& r, const tools::Imatrix& cur) {
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
      tokens_per_second = r.tokens_per_second;
      processed = r.done;
      if (output_frequency > 0 && r.done % output_frequency == 0) save(cur, out_path, format);
      if (save_frequency > 0 && r.done % save_frequency == 0)
        tools::save_imatrix_gguf(cur, out_path + ".at_" + std::to_string(cur.chunk_count));
      return true;
    });
  } catch (const Error&) {
    // What was collected before the failure is kept (a checkpoint that
    // --resume continues from the failing chunk).
    if (m.chunk_count > 0) {
      const std::string partial = out_path + ".partial.gguf";
      tools::save_imatrix_gguf(m, partial);
      std::fprintf(stderr, "saved the %lld chunks collected so far to %s\n", static_cast<long long>(m.chunk_count),
                   partial.c_str());
    }
    throw;
  }
  progress.finish();
  if (!bar && opt.compute_ppl) std::printf("\n");
  save(m, out_path, format);
  double ppl = std::numeric_limits<double>::quiet_NaN(), ppl_error = ppl;
  if (opt.compute_ppl && m.run.n_scored > 0) {
    const double nll = m.run.nll_sum / m.run.n_scored;
    const double var = m.run.nll_sq_sum / m.run.n_scored - nll * nll;
    ppl = std::exp(nll);
    ppl_error = var > 0 && m.run.n_scored > 1 ? std::sqrt(var / (m.run.n_scored - 1)) * ppl : 0;
    std::printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, ppl_error);
  }
  std::fprintf(stderr, "%lld chunks in this run, %.0f tokens/s\n", static_cast<long long>(processed),
               tokens_per_second);
  std::fprintf(stderr, "saved %s: %zu tensors, %lld chunks\n", out_path.c_str(), m.entries.size(),
               static_cast<long long>(m.chunk_count));
  const std::vector<std::string> unrouted = tools::describe_unrouted_experts(m);
  if (!unrouted.empty()) {
    std::fprintf(stderr, "warning: the text left experts without data (see --show-statistics):\n");
    for (const std::string& line : unrouted) std::fprintf(stderr, "  %s\n", line.c_str());
  }
  if (!json_path.empty()) {
    std::ostringstream s;
    JsonWriter w(s, /*pretty=*/true);
    tools::write_json_header(w, "qlens imatrix", tools::kImatrixStatisticsJsonSchemaVersion,
                             {{"model", model_path}, {"text", text_path}, {"resume", resume_path}});
    w.key("settings");
    w.begin_object();
    w.key("statistics"); w.value(false);  // a collection run (--show-statistics files say true)
    w.key("n_ctx"); w.value(opt.n_ctx);
    w.key("n_batch"); w.value(opt.n_batch);
    w.key("first_chunk"); w.value(opt.first_chunk);
    w.key("n_chunks"); if (opt.max_chunks >= 0) w.value(opt.max_chunks); else w.null();
    w.key("collect"); w.value(collect);
    w.key("device"); w.value(opt.device);
    w.end_object();
    w.key("outputs");
    w.begin_object();
    w.key("imatrix"); w.value(out_path);
    w.end_object();
    w.key("chunks_this_run"); w.value(processed);
    w.key("chunk_count"); w.value(m.chunk_count);
    w.key("n_tokens_evaluated"); w.value(processed * opt.n_ctx);
    w.key("tokens_per_second"); w.value(tokens_per_second);
    w.key("ppl");
    w.begin_object();
    w.key("value"); w.value(ppl);  // NaN (--no-ppl): null
    w.key("error"); w.value(ppl_error);
    w.end_object();
    w.key("n_tokens_scored"); w.value(m.run.n_scored);
    w.key("tensors");
    w.begin_array();
    for (const auto& [name, e] : m.entries) {
      double rows = 0;
      for (double c : e.counts) rows += c;
      w.begin_object();
      w.key("tensor"); w.value(name);
      w.key("layer"); tools::layer_or_null(w, tools::tensor_layer(name));
      w.key("role"); w.value(tools::tensor_role(name));
      w.key("n_cols"); w.value(e.n_cols);
      w.key("n_mat"); w.value(e.n_mat);
      w.key("rows"); w.value(rows);
      w.end_object();
    }
    w.end_array();
    w.key("unrouted_experts");
    w.array(unrouted);
    w.end_object();
    s << "\n";
    write_file_atomic(json_path, s.str());
  }
  return 0;
}

}  // namespace qlens::cli
