#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "core/output_path.h"
#include "args.h"
#include "commands.h"
#include "core/text_file.h"
#include "qlens/error.h"
#include "qlens/gguf.h"
#include "tools/imatrix/imatrix_file.h"
#include "tools/quantize/quantize.h"

namespace qlens::cli {

namespace {

struct QuantizeFlags {
  std::string in_path, out_path, mix, imatrix, rules_file, output_type, embd_type, threads, json_path, split_max_size;
  std::vector<std::string> rules;
  bool dry_run = false;
  tools::QuantizeOptions opt;
};

// Parses the flags, llama-quantize's positional TYPE and NTHREADS included;
// false when --help was printed.
bool parse_quantize_flags(int argc, char** argv, QuantizeFlags& f) {
  tools::QuantizeOptions& opt = f.opt;
  std::string mixes;
  for (const auto& n : tools::mix_names()) mixes += (mixes.empty() ? "" : ", ") + n;
  ArgParser p("quantize", "qlens quantize IN.gguf OUT.gguf [TYPE] [NTHREADS] [options]   (or IN.gguf TYPE --dry-run)",
              "Quantizes a model into llama.cpp's formats. TYPE is a single type or a mix that gives tensor\n"
              "roles (attn_v, ffn_down, output, ...) more or fewer bits, by name or by llama.cpp's id (15 is\n"
              "Q4_K_M); see docs/QUANTIZATION.md. A type for a tensor is, as in llama.cpp 0c1e570:\n"
              "--token-embedding-type / --output-tensor-type / --leave-output-tensor for those two, else the\n"
              "FIRST --tensor-type rule that matches (command-line rules before the file's), else the mix's\n"
              "rules. Without TYPE the rules must cover every matrix (a plan from qlens plan does).");
  p.add_positional("IN.gguf", &f.in_path, true, "the model to quantize");
  p.add_positional("OUT.gguf", &f.out_path, true, "the file to write (or TYPE with --dry-run)");
  p.add_positional("TYPE", &f.mix, false, "type or mix (or its llama_ftype id): " + mixes);
  p.add_positional("NTHREADS", &f.threads, false, "threads, as llama-quantize takes them (same as -t)");
  p.add({"--imatrix"}, &f.imatrix, "FILE", "importance matrix (GGUF or legacy .dat) weighting each row's error");
  p.add_switch({"--imatrix-strict"}, &opt.imatrix_strict, "a weight missing from the imatrix is an error");
  p.add({"--tensor-type"}, &f.rules, "REGEX=TYPE", "type for tensors whose name matches (repeatable; the first match wins)");
  p.add({"--tensor-type-file"}, &f.rules_file, "FILE", "REGEX=TYPE rules, one per line (after the --tensor-type rules)");
  p.add({"--output-tensor-type"}, &f.output_type, "TYPE", "type of output.weight");
  p.add_switch({"--leave-output-tensor"}, &opt.leave_output_tensor, "keep output.weight as it is");
  p.add({"--token-embedding-type"}, &f.embd_type, "TYPE", "type of token_embd.weight");
  p.add_switch({"--pure"}, &opt.pure, "no role rules: every 2-D weight gets the mix's base type");
  p.add_switch({"--allow-requantize"}, &opt.allow_requantize, "allow quantizing tensors that are already quantized");
  p.add({"--clip-sigma"}, &opt.clip_sigma, "K", "clip weights beyond K standard deviations per block first");
  p.add({"-t", "--threads"}, &opt.n_threads, "N", "threads (default: one per core)");
  p.add_switch({"--keep-split"}, &opt.keep_split,
               "write the output in the input's parts (OUT-00001-of-0000N.gguf ..., as llama-quantize)");
  p.add({"--split-max-size"}, &f.split_max_size, "N(M|G)",
        "write the output in parts of at most N megabytes or gigabytes of tensors (as gguf-split)");
  p.add({"--split-max-tensors"}, &opt.split_max_tensors, "N", "write the output in parts of at most N tensors (as gguf-split)");
  p.add_switch({"--dry-run"}, &f.dry_run, "print the plan (type and bytes per tensor, totals) and write nothing");
  p.add({"--json"}, &f.json_path, "FILE", "also write the plan (type and bytes per tensor, totals) as JSON (docs/JSON.md)");
  if (!p.parse(argc, argv)) return false;
  if (f.dry_run && f.mix.empty()) {  // qlens quantize IN TYPE --dry-run
    f.mix = f.out_path;
    f.out_path.clear();
  }
  if (f.mix.empty() && f.rules.empty() && f.rules_file.empty())
    throw Error("qlens quantize: missing TYPE (usage: qlens quantize IN.gguf OUT.gguf TYPE [NTHREADS])");
  if (!f.threads.empty()) {
    char* end = nullptr;
    const long n = std::strtol(f.threads.c_str(), &end, 10);
    if (*end != '\0' || end == f.threads.c_str() || n < 0 || n > 4096)
      throw Error("qlens quantize: NTHREADS must be a thread count, got '" + f.threads + "'");
    opt.n_threads = static_cast<int>(n);
  }
  return true;
}

// The mix, the imatrix, the rules (command line, then file) and the types
// of the two special tensors, into the tool's options.
void settle_quantize_options(QuantizeFlags& f) {
  tools::QuantizeOptions& opt = f.opt;
  opt.mix = f.mix;
  opt.imatrix_path = f.imatrix;
  for (const auto& r : f.rules) {
    const size_t eq = r.rfind('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == r.size())
      throw Error("qlens quantize: --tensor-type expects REGEX=TYPE, got '" + r + "'");
    opt.tensor_types.emplace_back(r.substr(0, eq), r.substr(eq + 1));
  }
  if (!f.rules_file.empty())
    for (auto& r : tools::parse_tensor_type_rules(read_text_file(f.rules_file), f.rules_file))
      opt.tensor_types.push_back(std::move(r));
  auto parse_type = [](const std::string& flag, const std::string& v) -> std::optional<DType> {
    if (v.empty()) return std::nullopt;
    auto t = type_from_name(v);
    if (!t) throw Error("qlens quantize: " + flag + ": unknown type '" + v + "'");
    return t;
  };
  opt.output_type = parse_type("--output-tensor-type", f.output_type);
  opt.token_embedding_type = parse_type("--token-embedding-type", f.embd_type);
  if (opt.clip_sigma < 0) throw Error("qlens quantize: --clip-sigma must be positive");
  if (!f.split_max_size.empty()) opt.split_max_bytes = tools::parse_split_max_size(f.split_max_size);
  if (opt.split_max_tensors < 0) throw Error("qlens quantize: --split-max-tensors must be positive");
  if (opt.keep_split + (opt.split_max_bytes > 0) + (opt.split_max_tensors > 0) > 1)
    throw Error("qlens quantize: give one of --keep-split, --split-max-size and --split-max-tensors");
}

// --dry-run: the plan (and how the imatrix covers it), nothing written but --json.
int dry_run(const QuantizeFlags& f) {
  auto in = gguf::File::open(f.in_path);
  tools::QuantizeOptions opt = f.opt;
  opt.plan_only = true;
  auto plan = tools::plan_quantization(*in, opt);
  if (!f.opt.imatrix_path.empty()) {
    plan.imatrix_coverage = tools::quantize_imatrix_coverage(*in, plan, tools::load_imatrix(f.opt.imatrix_path));
    tools::print_imatrix_coverage(std::cerr, *plan.imatrix_coverage);
  }
  tools::print_plan(plan, std::cout);
  for (const auto& t : plan.tensors)
    if (t.reason.find("(needs --imatrix)") != std::string::npos) {
      std::cerr << "note: a real run needs --imatrix: tensors marked (needs --imatrix) get types llama-quantize "
                   "writes only with an importance matrix\n";
      break;
    }
  if (!f.json_path.empty()) write_file_atomic(f.json_path, tools::quantize_plan_json(plan, f.in_path, "", f.opt));
  return 0;
}

}  // namespace

int cmd_quantize(int argc, char** argv) {
  QuantizeFlags f;
  if (!parse_quantize_flags(argc, argv, f)) return 0;
  const std::string& in_path = f.in_path;
  const std::string& out_path = f.out_path;
  check_output_path("qlens quantize", {"OUT", out_path},
                    {{"IN", in_path}, {"--imatrix", f.imatrix}, {"--tensor-type-file", f.rules_file}});
  check_output_path("qlens quantize", {"--json", f.json_path},
                    {{"IN", in_path}, {"OUT", out_path}, {"--imatrix", f.imatrix}, {"--tensor-type-file", f.rules_file}});
  settle_quantize_options(f);
  if (f.dry_run) return dry_run(f);
  if (out_path == in_path) throw Error("qlens quantize: OUT.gguf must differ from IN.gguf");
  // (quantize_model checks each part it will write against the input's parts.)
  auto plan = tools::quantize_model(in_path, out_path, f.opt, std::cerr);
  const size_t parts = plan.output_paths.size();
  const std::string written =
      parts > 1 ? plan.output_paths.front() + " (part 1 of " + std::to_string(parts) + ")" : out_path;
  std::printf("wrote %s: %s, %zu bytes of tensors, %.4f bits per weight\n", written.c_str(), plan.mix.name.c_str(),
              plan.total_bytes, plan.bits_per_weight());
  if (!f.json_path.empty())  // the model: the file to open (a split model's first part)
    write_file_atomic(f.json_path, tools::quantize_plan_json(plan, in_path, plan.output_paths.front(), f.opt));
  return 0;
}

}  // namespace qlens::cli
