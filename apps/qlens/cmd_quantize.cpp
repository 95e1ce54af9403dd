#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "core/output_path.h"
#include "args.h"
#include "commands.h"
#include "core/text_file.h"
#include "qlens/error.h"
#include "qlens/gguf.h"
#include "tools/imatrix_file.h"
#include "tools/quantize.h"

namespace qlens::cli {

int cmd_quantize(int argc, char** argv) {
  std::string in_path, out_path, mix, imatrix, rules_file, output_type, embd_type, threads;
  std::vector<std::string> rules;
  tools::QuantizeOptions opt;
  bool dry_run = false;
  std::string mixes;
  for (const auto& n : tools::mix_names()) mixes += (mixes.empty() ? "" : ", ") + n;
  ArgParser p("quantize", "qlens quantize IN.gguf OUT.gguf [TYPE] [NTHREADS] [options]   (or IN.gguf TYPE --dry-run)",
              "Quantizes a model into llama.cpp's formats. TYPE is a single type or a mix that gives tensor\n"
              "roles (attn_v, ffn_down, output, ...) more or fewer bits, by name or by llama.cpp's id (15 is\n"
              "Q4_K_M); see docs/QUANTIZATION.md. A type for a tensor is, as in llama.cpp 0c1e570:\n"
              "--token-embedding-type / --output-tensor-type / --leave-output-tensor for those two, else the\n"
              "FIRST --tensor-type rule that matches (command-line rules before the file's), else the mix's\n"
              "rules. Without TYPE the rules must cover every matrix (a plan from qlens plan does).");
  p.add_positional("IN.gguf", &in_path, true, "the model to quantize");
  p.add_positional("OUT.gguf", &out_path, true, "the file to write (or TYPE with --dry-run)");
  p.add_positional("TYPE", &mix, false, "type or mix (or its llama_ftype id): " + mixes);
  p.add_positional("NTHREADS", &threads, false, "threads, as llama-quantize takes them (same as -t)");
  p.add({"--imatrix"}, &imatrix, "FILE", "importance matrix (GGUF or legacy .dat) weighting each row's error");
  p.add_switch({"--imatrix-strict"}, &opt.imatrix_strict, "a weight missing from the imatrix is an error");
  p.add({"--tensor-type"}, &rules, "REGEX=TYPE", "type for tensors whose name matches (repeatable; the first match wins)");
  p.add({"--tensor-type-file"}, &rules_file, "FILE", "REGEX=TYPE rules, one per line (after the --tensor-type rules)");
  p.add({"--output-tensor-type"}, &output_type, "TYPE", "type of output.weight");
  p.add_switch({"--leave-output-tensor"}, &opt.leave_output_tensor, "keep output.weight as it is");
  p.add({"--token-embedding-type"}, &embd_type, "TYPE", "type of token_embd.weight");
  p.add_switch({"--pure"}, &opt.pure, "no role rules: every 2-D weight gets the mix's base type");
  p.add_switch({"--allow-requantize"}, &opt.allow_requantize, "allow quantizing tensors that are already quantized");
  p.add({"--clip-sigma"}, &opt.clip_sigma, "K", "clip weights beyond K standard deviations per block first");
  p.add({"-t", "--threads"}, &opt.n_threads, "N", "threads (default: one per core)");
  p.add_switch({"--dry-run"}, &dry_run, "print the plan (type and bytes per tensor, totals) and write nothing");
  std::string json_path;
  p.add({"--json"}, &json_path, "FILE", "also write the plan (type and bytes per tensor, totals) as JSON (docs/JSON.md)");
  if (!p.parse(argc, argv)) return 0;
  if (dry_run && mix.empty()) {  // qlens quantize IN TYPE --dry-run
    mix = out_path;
    out_path.clear();
  }
  if (mix.empty() && rules.empty() && rules_file.empty())
    throw Error("qlens quantize: missing TYPE (usage: qlens quantize IN.gguf OUT.gguf TYPE [NTHREADS])");
  if (!threads.empty()) {
    char* end = nullptr;
    const long n = std::strtol(threads.c_str(), &end, 10);
    if (*end != '\0' || end == threads.c_str() || n < 0 || n > 4096)
      throw Error("qlens quantize: NTHREADS must be a thread count, got '" + threads + "'");
    opt.n_threads = static_cast<int>(n);
  }
  check_output_path("qlens quantize", {"OUT", out_path},
                    {{"IN", in_path}, {"--imatrix", imatrix}, {"--tensor-type-file", rules_file}});
  check_output_path("qlens quantize", {"--json", json_path},
                    {{"IN", in_path}, {"OUT", out_path}, {"--imatrix", imatrix}, {"--tensor-type-file", rules_file}});
  opt.mix = mix;
  opt.imatrix_path = imatrix;
  for (const auto& r : rules) {
    const size_t eq = r.rfind('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == r.size())
      throw Error("qlens quantize: --tensor-type expects REGEX=TYPE, got '" + r + "'");
    opt.tensor_types.emplace_back(r.substr(0, eq), r.substr(eq + 1));
  }
  if (!rules_file.empty())
    for (auto& r : tools::parse_tensor_type_rules(read_text_file(rules_file), rules_file))
      opt.tensor_types.push_back(std::move(r));
  auto parse_type = [](const std::string& flag, const std::string& v) -> std::optional<DType> {
    if (v.empty()) return std::nullopt;
    auto t = type_from_name(v);
    if (!t) throw Error("qlens quantize: " + flag + ": unknown type '" + v + "'");
    return t;
  };
  opt.output_type = parse_type("--output-tensor-type", output_type);
  opt.token_embedding_type = parse_type("--token-embedding-type", embd_type);
  if (opt.clip_sigma < 0) throw Error("qlens quantize: --clip-sigma must be positive");

  if (dry_run) {
    auto in = gguf::File::open(in_path);
    auto plan = tools::plan_quantization(*in, opt);
    if (!opt.imatrix_path.empty()) {
      plan.imatrix_coverage = tools::quantize_imatrix_coverage(*in, plan, tools::load_imatrix(opt.imatrix_path));
      tools::print_imatrix_coverage(std::cerr, *plan.imatrix_coverage);
    }
    tools::print_plan(plan, std::cout);
    if (!json_path.empty()) write_file_atomic(json_path, tools::quantize_plan_json(plan, in_path, "", opt));
    return 0;
  }
  if (out_path == in_path) throw Error("qlens quantize: OUT.gguf must differ from IN.gguf");
  auto plan = tools::quantize_model(in_path, out_path, opt, std::cerr);
  std::printf("wrote %s: %s, %zu bytes of tensors, %.4f bits per weight\n", out_path.c_str(), plan.mix.name.c_str(),
              plan.total_bytes, plan.bits_per_weight());
  if (!json_path.empty()) write_file_atomic(json_path, tools::quantize_plan_json(plan, in_path, out_path, opt));
  return 0;
}

}  // namespace qlens::cli
