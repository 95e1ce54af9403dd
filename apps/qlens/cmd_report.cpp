#include <cstdio>
#include <filesystem>

#include "args.h"
#include "commands.h"
#include "qlens/error.h"
#include "tools/report/report.h"

namespace qlens::cli {

int cmd_report(int argc, char** argv) {
  tools::ReportInputs inputs;
  tools::ReportOptions options;
  std::string out_path = "report.html", metric = "nmse";
  int64_t top = static_cast<int64_t>(options.top);
  ArgParser p("report",
              "qlens report [--compare C.json] [--sensitivity S.json] [--plan P.json] [--curve C.json]\n"
              "                    [--imatrix-stats I.json]\n"
              "                    [--perplexity P.json ...] [-o report.html]",
              "Draws the JSON files of the other subcommands as one self-contained HTML page: a section per\n"
              "file, with charts (inline SVG; hover for exact values) and tables. The page loads nothing\n"
              "(no script, font or image from elsewhere) and opens from a file:// URL offline. What each\n"
              "section shows and how to read it: docs/REPORT.md.");
  p.add({"--compare"}, &inputs.compare, "FILE", "qlens compare --json: error through the depth, KLD distribution");
  p.add({"--sensitivity"}, &inputs.sensitivity, "FILE", "qlens sensitivity --json: ΔKLD heatmaps, the top tensors");
  p.add({"--plan"}, &inputs.plan, "FILE", "qlens plan --json (with --validate): types per tensor, plan vs mixes");
  p.add({"--curve"}, &inputs.curve, "FILE", "qlens curve --json: KLD and PPL ratio against bits per weight");
  p.add({"--imatrix-stats"}, &inputs.imatrix_stats, "FILE",
        "qlens imatrix --in-file F --show-statistics --json: importance per layer, top tensors and columns");
  p.add({"--perplexity"}, &inputs.perplexity, "FILE", "qlens perplexity --json (repeat for several models)");
  p.add({"-o", "--output"}, &out_path, "FILE", "the page (default report.html)");
  p.add({"--metric"}, &metric, "nmse|sqnr", "the compare section's error through the depth (default nmse)");
  p.add({"--top"}, &top, "N", "rows of the tables of the largest figures (default 12)");
  p.add({"--title"}, &options.title, "TEXT", "the page's title (default \"qlens report\")");
  if (!p.parse(argc, argv)) return 0;
  if (metric != "nmse" && metric != "sqnr") throw Error("qlens report: --metric must be nmse or sqnr, got '" + metric + "'");
  if (top < 1) throw Error("qlens report: --top " + std::to_string(top) + ": give at least 1 row");
  options.metric = metric == "nmse" ? tools::Metric::NMSE : tools::Metric::SQNR;
  options.top = static_cast<size_t>(top);
  tools::write_report(inputs, options, out_path);
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(out_path, ec);
  std::printf("wrote %s (%.1f KiB)\n", out_path.c_str(), ec ? 0.0 : static_cast<double>(bytes) / 1024);
  return 0;
}

}  // namespace qlens::cli
