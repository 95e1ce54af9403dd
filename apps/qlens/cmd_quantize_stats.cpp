#include <iostream>
#include <sstream>

#include "core/output_path.h"
#include "args.h"
#include "commands.h"
#include "core/text_file.h"
#include "qlens/error.h"
#include "tools/quantize/quantize_stats.h"

namespace qlens::cli {

int cmd_quantize_stats(int argc, char** argv) {
  std::string model, json_path, imatrix, filter, against;
  std::vector<std::string> type_names;
  int threads = 0;
  ArgParser p("quantize-stats", "qlens quantize-stats MODEL [--type T ... | --against Q.gguf] [--imatrix F] [--json FILE]",
              "Quantization error of every weight for each type, without writing a model: RMSE, RMSE\n"
              "relative to the weights' RMS, max error, imatrix-weighted RMSE and bits per weight; totals per type.");
  p.add_positional("MODEL", &model, true, "the unquantized model (F32, F16 or BF16 weights)");
  p.add({"--type"}, &type_names, "T", "a type to measure (repeatable; default: every type qlens quantizes to)");
  p.add({"--imatrix"}, &imatrix, "FILE", "importance matrix: quantize with it and report the weighted RMSE");
  p.add({"--include"}, &filter, "REGEX", "only tensors whose name matches");
  p.add({"--against"}, &against, "FILE",
        "a quantized model of the same weights (llama-quantize's, say): measure each of its quantized tensors and "
        "qlens's quantization to the same type beside it, and the ratio of their (weighted) squared errors");
  p.add({"--json"}, &json_path, "FILE", "also write the figures as JSON");
  p.add({"-t", "--threads"}, &threads, "N", "threads (default: one per core)");
  if (!p.parse(argc, argv)) return 0;
  check_output_path("qlens quantize-stats", {"--json", json_path}, {{"MODEL", model}, {"--imatrix", imatrix}, {"--against", against}});
  tools::QuantizeStatsOptions opt;
  for (const auto& n : type_names) {
    auto t = type_from_name(n);
    if (!t) throw Error("qlens quantize-stats: --type: unknown type '" + n + "'");
    opt.types.push_back(*t);
  }
  opt.imatrix_path = imatrix;
  opt.tensor_filter = filter;
  opt.against_path = against;
  if (!against.empty() && !type_names.empty())
    throw Error("qlens quantize-stats: --type and --against: the types are the file's");
  opt.n_threads = threads;
  auto r = tools::quantize_stats(model, opt);
  tools::print_quantize_stats(r, std::cout);
  if (!json_path.empty()) {
    std::ostringstream s;
    tools::write_quantize_stats_json(r, model, opt, s);
    write_file_atomic(json_path, s.str());
  }
  return 0;
}

}  // namespace qlens::cli
