#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "core/output_path.h"
#include "core/text_file.h"
#include "dist/comm.h"
#include "qlens/error.h"
#include "qlens/model.h"
#include "tools/common/chunks.h"
#include "tools/compare/compare.h"
#include "tools/compare/llama_logits.h"
#include "tools/common/progress.h"

namespace qlens::cli {

namespace {

struct CompareFlags {
  std::string ref_path, test_path, text_path, json_path, csv_path, metric = "nmse", device_ref, kld_base;
  int64_t top = 10;
  tools::CompareOptions opt;
  DeviceFlags dev;
};

constexpr const char* kUsage =
    "qlens compare --ref REF.gguf -m TEST.gguf -f TEXT [-c CTX] [-b BATCH] [--chunks N] [--nodes REGEX]\n"
    "                     [--top N] [--json FILE] [--csv FILE] [--device-ref D] [--device D]\n"
    "                     [--kl-divergence-base FILE]\n"
    "       qlens compare -m TEST.gguf --kl-divergence-base FILE [--chunks N] [--json FILE]";
constexpr const char* kSummary =
    "Runs a reference model and a test model (a quantization of it, or the same file on another\n"
    "device) on the same chunks of text and shows where their intermediate results deviate: per\n"
    "named node (Qcur-3, ffn_out-3, l_out-3, ...) each model's statistics and the error between\n"
    "them (NMSE, SQNR, RMSE, max |a-b|, cosine, per-token error median and p99), a table by layer,\n"
    "where the error grows, the worst nodes; and on the logits llama.cpp's KL-divergence figures,\n"
    "from one run of both models (no base-logits file). Reductions run on the backends.";

void add_compare_options(ArgParser& p, CompareFlags& f) {
  tools::CompareOptions& opt = f.opt;
  p.add({"--ref"}, &f.ref_path, "FILE", "the reference model (required unless --kl-divergence-base reads one)");
  p.add({"-m", "--model"}, &f.test_path, "FILE", "the model to compare with it (required)");
  p.add({"-f", "--file"}, &f.text_path, "FILE", "text (required)");
  p.add({"-c", "--ctx-size"}, &opt.n_ctx, "N", "tokens per chunk (default 512; 0: the model's training context)");
  p.add({"-b", "--batch-size"}, &opt.n_batch, "N", "tokens per evaluation (default 512, at most CTX)");
  p.add({"--chunks"}, &opt.max_chunks, "N", "at most N chunks (default: all)");
  p.add({"--nodes"}, &opt.nodes_regex, "REGEX", "only nodes whose name matches (e.g. 'l_out|ffn_out'; one must)");
  p.add_switch({"--logits-only"}, &opt.logits_only, "compare the output distributions only (KLD, top tokens), no node");
  p.add({"--top"}, &f.top, "N", "list the N worst nodes (default 10)");
  p.add({"--metric"}, &f.metric, "nmse|sqnr", "the layer table's cells (default nmse)");
  p.add({"--json"}, &f.json_path, "FILE", "write everything as JSON (schema: docs/COMPARE.md)");
  p.add({"--csv"}, &f.csv_path, "FILE", "write one row per node as CSV");
  p.add({"--kl-divergence-base"}, &f.kld_base, "FILE",
        "llama.cpp's log-probability file (llama-perplexity --kl-divergence-base): with --ref, write the\n"
        "reference's; without, read it as the reference and compare -m's logits with it (its tokens; no -f)");
  p.add({"--device-ref"}, &f.device_ref, "ID", "device for the reference (default cpu)");
  add_device_options(p, &f.dev);
  p.add({"-t", "--threads"}, &opt.n_threads, "N", "threads (default: one per core)");
  add_cache_type_option(p, &opt.cache_type);
  add_split_layers_option(p, &opt.split_layers);
  p.add_switch({"--host-reductions"}, &opt.host_reductions,
               "reduce on the host from copies of every node (slow; the oracle for the taps)");
  p.add_note(
      "Memory: both models' weights (the sum of the two files), a KV cache of CTX tokens for each,\n"
      "and the activations of one batch for each model plus about one layer more for the reference\n"
      "(each reference node is kept until its partner is computed). Both models must have the same\n"
      "architecture, layers, shapes and vocabulary; the first difference is named otherwise.");
}

// compare -m TEST --kl-divergence-base FILE: the logits of TEST against
// llama.cpp's (or qlens's) log-probability file, on the file's tokens.
int compare_with_logits_file(const CompareFlags& f, const ArgParser& p) {
  const std::string& base_path = f.kld_base;
  if (f.test_path.empty()) throw Error("qlens compare: -m TEST.gguf is required");
  if (!f.csv_path.empty())
    throw Error("qlens compare: --csv holds one row per node; a log-probability file has logits only (give --ref)");
  if (!f.text_path.empty())
    std::fprintf(stderr, "note: -f %s is not read: the tokens are those of %s\n", f.text_path.c_str(),
                 base_path.c_str());
  const std::vector<NamedPath> inputs = {{"-m", f.test_path}, {"--kl-divergence-base", base_path}};
  check_output_path("qlens compare", {"--json", f.json_path}, inputs);
  DeviceFlags dev = f.dev;
  resolve_device(p, dev);
  auto test = Model::load(f.test_path);
  const auto base = tools::LlamaLogitsFile::load(base_path);
  tools::KldOptions ko;
  ko.max_chunks = f.opt.max_chunks;
  ko.n_threads = f.opt.n_threads;
  ko.device = dev.device;
  ko.n_gpu_layers = dev.n_gpu_layers;
  ko.cpu = dev.cpu;
  ko.vulkan = dev.vulkan;
  ko.cache_type = f.opt.cache_type;
  const int64_t planned = tools::chunks_to_run(base.n_chunk(), ko.max_chunks);
  std::fprintf(stderr, "%s: %lld chunks of %lld tokens, the reference's log-probabilities; test on %s\n",
               base_path.c_str(), static_cast<long long>(planned), static_cast<long long>(base.n_ctx()),
               ko.device.c_str());
  const auto r = kld_with_progress(*test, base, ko, "compare");
  std::cout << "\n== Logits (" << r.n_scored << " tokens scored against " << base_path << ") ==\n";
  tools::print_logit_summary(std::cout, r.summary);
  std::cout.flush();
  if (!f.json_path.empty())
    write_file_atomic(f.json_path,
                      tools::compare_logits_file_json(base_path, f.test_path, base.n_ctx(), planned, r.summary));
  return 0;
}

// --ref REF -m TEST -f TEXT: what must be given, and outputs that can be written.
void check_compare_flags(const CompareFlags& f) {
  if (f.ref_path.empty())
    throw Error("qlens compare: --ref REF.gguf is required (or --kl-divergence-base FILE to compare with llama.cpp's logits)");
  if (f.test_path.empty()) throw Error("qlens compare: -m TEST.gguf is required");
  if (f.text_path.empty()) throw Error("qlens compare: -f TEXT is required");
  if (f.metric != "nmse" && f.metric != "sqnr")
    throw Error("qlens compare: --metric must be nmse or sqnr, got '" + f.metric + "'");
  const std::vector<NamedPath> inputs = {{"--ref", f.ref_path}, {"-m", f.test_path}, {"-f", f.text_path}};
  check_output_path("qlens compare", {"--json", f.json_path}, inputs);
  check_output_path("qlens compare", {"--csv", f.csv_path}, inputs);
  check_output_path("qlens compare", {"--kl-divergence-base", f.kld_base}, inputs);
}

// The test model's device from --device/-ngl, the reference's from --device-ref.
void resolve_compare_devices(const ArgParser& p, CompareFlags& f) {
  DeviceFlags& dev = f.dev;
  tools::CompareOptions& opt = f.opt;
  resolve_device(p, dev);
  opt.device = dev.device;
  opt.n_gpu_layers = dev.n_gpu_layers;
  opt.cpu = dev.cpu;
  opt.vulkan = dev.vulkan;
  if (!f.device_ref.empty()) {
    DeviceFlags ref_dev{f.device_ref, dev.n_gpu_layers};
    resolve_device(p, ref_dev);
    opt.device_ref = ref_dev.device;
  }
}

// Both models over the text, the report on stdout and the files asked for.
int compare_and_report(CompareFlags& f) {
  tools::CompareOptions& opt = f.opt;
  auto ref = Model::load(f.ref_path);
  auto test = Model::load(f.test_path);
  resolve_context_size(opt.n_ctx, *ref, "compare");
  const auto tokens = tools::tokenize_text_file(ref->vocab(), f.text_path,
                                                opt.max_chunks >= 0 ? opt.max_chunks * opt.n_ctx : -1, "compare");
  const int64_t planned = tools::chunks_in_text(static_cast<int64_t>(tokens.size()), opt.n_ctx, opt.max_chunks);
  dist::Comm& comm = dist::world();
  if (comm.is_root())
    std::fprintf(stderr, "%s: %zu tokens; %lld chunks of %lld; reference on %s, test on %s\n", f.text_path.c_str(),
                 tokens.size(), static_cast<long long>(planned), static_cast<long long>(opt.n_ctx),
                 opt.device_ref.c_str(), opt.device.c_str());
  cli::check_layer_split_run("qlens compare", *ref, opt.split_layers);
  if (!comm.is_root()) {
    tools::compare_models(*ref, *test, tokens, opt);
    return 0;
  }

  std::unique_ptr<tools::LlamaLogitsWriter> writer;
  if (!f.kld_base.empty()) {
    writer = std::make_unique<tools::LlamaLogitsWriter>(opt.n_ctx, ref->hparams().n_vocab);
    opt.on_chunk_tokens = [&](std::span<const Token> t) { writer->add_chunk(t); };
    opt.on_ref_scored_logits = [&](std::span<const float> l) { writer->add_position(l); };
  }
  tools::Progress progress("compare", planned, "chunks");
  auto r = tools::compare_models(*ref, *test, tokens, opt, [&](int64_t done, int64_t, double kld) {
    char status[64];
    std::snprintf(status, sizeof status, "mean KLD %.6f", kld);
    progress.update(done, status);
  });
  progress.finish();
  r.meta.text_path = f.text_path;

  tools::print_compare(std::cout, r, f.metric == "nmse" ? tools::Metric::NMSE : tools::Metric::SQNR, f.top);
  std::cout.flush();
  std::fprintf(stderr, "%lld chunks, %.2f s, %.0f tokens/s through both models\n",
               static_cast<long long>(r.meta.n_chunks), r.seconds, r.tokens_per_second);
  if (!f.json_path.empty()) write_file_atomic(f.json_path, tools::compare_json(r));
  if (!f.csv_path.empty()) {
    std::ostringstream s;
    tools::write_compare_csv(s, r.nodes);
    write_file_atomic(f.csv_path, s.str());
  }
  if (writer) {
    writer->write(f.kld_base);
    std::fprintf(stderr, "wrote %s: the reference's log-probabilities (llama.cpp's --kl-divergence-base format)\n",
                 f.kld_base.c_str());
  }
  return 0;
}

}  // namespace

int cmd_compare(int argc, char** argv) {
  CompareFlags f;
  ArgParser p("compare", kUsage, kSummary);
  add_compare_options(p, f);
  if (!p.parse(argc, argv)) return 0;
  if (f.ref_path.empty() && !f.kld_base.empty()) {
    if (dist::world().size() > 1)
      throw Error("qlens compare: against a log-probability file (--kl-divergence-base without --ref) it runs as "
                  "one process");
    return compare_with_logits_file(f, p);
  }
  check_compare_flags(f);
  resolve_compare_devices(p, f);
  return compare_and_report(f);
}

}  // namespace qlens::cli
