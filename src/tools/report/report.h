// `qlens report`: one self-contained HTML page drawn from the JSON files the
// other subcommands write, with a section per file given:
//   compare        (qlens compare --json): the error through the depth per
//                  node kind, the l_out growth, the worst nodes, the KLD
//                  distribution and the same-top rate;
//   sensitivity    (qlens sensitivity --json): ΔKLD heatmaps by layer and
//                  role per probed type, the top tensors;
//   plan           (qlens plan --json): the chosen type per layer and role,
//                  size and predicted against measured KLD, the plan against
//                  the uniform mixes on a KLD-against-size chart;
//   imatrix stats  (qlens imatrix --show-statistics --json): per-layer
//                  importance, the tensors and columns with the most;
//   perplexity     (qlens perplexity --json, any number): a table.
// The charts are inline SVG drawn in C++ (report_html.h); the page has no
// script and loads nothing (a Content-Security-Policy says so to the
// browser), so it opens from a file:// URL offline. docs/REPORT.md says what
// each section shows and how to read it.
#pragma once

#include <string>
#include <vector>

#include "core/output_path.h"
#include "tools/compare/compare_report.h"

namespace qlens::tools {

struct ReportInputs {
  std::string compare;        // --compare
  std::string sensitivity;    // --sensitivity
  std::string plan;           // --plan
  std::string curve;          // --curve
  std::string imatrix_stats;  // --imatrix-stats
  std::vector<std::string> perplexity;  // --perplexity, any number
  bool empty() const {
    return compare.empty() && sensitivity.empty() && plan.empty() && curve.empty() && imatrix_stats.empty() &&
           perplexity.empty();
  }
};

struct ReportOptions {
  std::string title = "qlens report";
  std::string generated_at;         // the header's date; empty: now, in UTC
  Metric metric = Metric::NMSE;     // the compare section's error through the depth
  size_t top = 12;                  // rows of the "largest" tables
};

// The inputs as check_output_path wants them (flag and path).
std::vector<NamedPath> report_input_paths(const ReportInputs& inputs);

// Reads every input and returns the page. Throws Error when no input is
// given, or naming the file and the JSON field that is missing or wrong
// (a file of another tool: its "tool" field).
std::string build_report_html(const ReportInputs& inputs, const ReportOptions& options);

// check_output_path first (never an input, a writable folder), then the
// page, written atomically. `output_flag` is how the caller names the output.
void write_report(const ReportInputs& inputs, const ReportOptions& options, const std::string& output_path,
                  const std::string& output_flag = "-o");

}  // namespace qlens::tools
