#include "tools/report/report.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <map>

#include "core/text_file.h"
#include "qlens/error.h"
#include "tools/report/report_html.h"
#include "tools/report/report_sections.h"

namespace qlens::tools {

namespace report_detail {

// ---- reading the inputs ----

InputDocument load_input(const std::string& flag, const std::string& path, std::string_view tool) {
  InputDocument input{flag, path, parse_json(read_text_file(path), path)};
  const JsonValue& doc = input.doc;
  if (!doc.is_object())
    throw Error(path + ": expected a JSON object (" + flag + " takes the --json file of qlens " + std::string(tool) +
                "), found " + JsonValue::kind_name(doc.kind()));
  if (const JsonValue* t = doc.find("tool"); t && t->is_string()) {
    const std::string& name = t->as_string();
    if (name != tool && name != "qlens " + std::string(tool))
      throw Error(t->where() + ": \"" + name + "\" is not a " + std::string(tool) + " file (" + flag +
                  " takes the --json file of qlens " + std::string(tool) + ")");
  }
  // Schema 2 moved paths into "inputs" and renamed keys (docs/JSON.md); the
  // sections read both.
  if (const JsonValue* v = doc.find("schema_version"); v && !v->is_null() && (v->as_int() < 1 || v->as_int() > 2))
    throw Error(v->where() + ": unsupported schema_version " + std::to_string(v->as_int()) + " (this qlens reads 1 and 2)");
  return input;
}

double number(const JsonValue& object, std::string_view key) {
  const JsonValue& v = object.at(key);
  return v.is_null() ? html::kNaN : v.as_number();
}

double optional_number(const JsonValue& object, std::string_view key) {
  const JsonValue* v = object.find(key);
  return !v || v->is_null() ? html::kNaN : v->as_number();
}

double value_of(const JsonValue& object, std::string_view key) {
  const JsonValue& v = object.at(key);
  if (v.is_object()) return number(v, "value");
  return v.is_null() ? html::kNaN : v.as_number();
}

double error_of(const JsonValue& object, std::string_view key, std::string_view flat_error_key) {
  const JsonValue* v = object.find(key);
  if (v && v->is_object()) return optional_number(*v, "error");
  return flat_error_key.empty() ? html::kNaN : optional_number(object, flat_error_key);
}

namespace {

const JsonValue* find_dotted(const JsonValue& doc, std::string_view path) {
  const JsonValue* v = &doc;
  while (v && !path.empty()) {
    const size_t dot = path.find('.');
    v = v->find(path.substr(0, dot));
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
  }
  return v;
}

}  // namespace

std::string first_string(const JsonValue& doc, std::initializer_list<std::string_view> dotted_paths) {
  for (std::string_view path : dotted_paths)
    if (const JsonValue* v = find_dotted(doc, path); v && v->is_string() && !v->as_string().empty())
      return v->as_string();
  return "";
}

double first_number(const JsonValue& doc, std::initializer_list<std::string_view> dotted_paths) {
  for (std::string_view path : dotted_paths)
    if (const JsonValue* v = find_dotted(doc, path); v && v->is_number()) return v->as_number();
  return std::numeric_limits<double>::quiet_NaN();
}

std::string facts(const std::vector<std::pair<std::string, std::string>>& items) {
  std::string s = "<dl class=\"facts\">";
  for (const auto& [key, value] : items)
    s += "<div><dt>" + html::escape(key) + "</dt><dd>" + html::escape(value) + "</dd></div>";
  return s + "</dl>";
}

std::string note(const std::string& text) { return "<p class=\"note\">" + html::escape(text) + "</p>"; }

// ---- the layer x role grid ----

namespace {

// Roles of a block's weights in the order a layer computes with them, then
// the tensors outside the blocks; roles not listed keep the order first seen
// between the two.
const std::vector<std::string> kBlockRoleOrder = {
    "attn_q", "attn_k", "attn_v", "attn_qkv", "attn_output", "ffn_gate_inp", "ffn_gate", "ffn_up", "ffn_down",
    "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"};
const std::vector<std::string> kGlobalRoleOrder = {"token_embd", "output"};

size_t role_rank(const std::string& role, size_t first_seen) {
  const auto in = [&](const std::vector<std::string>& list) { return std::find(list.begin(), list.end(), role); };
  if (auto it = in(kBlockRoleOrder); it != kBlockRoleOrder.end()) return static_cast<size_t>(it - kBlockRoleOrder.begin());
  if (auto it = in(kGlobalRoleOrder); it != kGlobalRoleOrder.end())
    return 2000 + static_cast<size_t>(it - kGlobalRoleOrder.begin());
  return 1000 + first_seen;
}

}  // namespace

LayerRoleAxes layer_role_axes(const std::vector<std::pair<int, std::string>>& layer_and_role) {
  LayerRoleAxes axes;
  std::vector<std::string> seen;
  for (const auto& [layer, role] : layer_and_role) {
    if (std::find(axes.layers.begin(), axes.layers.end(), layer) == axes.layers.end()) axes.layers.push_back(layer);
    if (std::find(seen.begin(), seen.end(), role) == seen.end()) seen.push_back(role);
  }
  std::sort(axes.layers.begin(), axes.layers.end(), [](int a, int b) {
    if ((a < 0) != (b < 0)) return b < 0;  // outside the blocks: last
    return a < b;
  });
  std::vector<std::pair<size_t, std::string>> ranked;
  for (size_t i = 0; i < seen.size(); ++i) ranked.push_back({role_rank(seen[i], i), seen[i]});
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& r : ranked) axes.roles.push_back(r.second);
  return axes;
}

std::vector<std::string> LayerRoleAxes::row_labels() const {
  std::vector<std::string> labels;
  for (int layer : layers) labels.push_back(layer < 0 ? "(no layer)" : std::to_string(layer));
  return labels;
}

size_t LayerRoleAxes::row_of(int layer) const {
  return static_cast<size_t>(std::find(layers.begin(), layers.end(), layer) - layers.begin());
}

size_t LayerRoleAxes::column_of(const std::string& role) const {
  return static_cast<size_t>(std::find(roles.begin(), roles.end(), role) - roles.begin());
}

// ---- perplexity ----

Section perplexity_section(const std::vector<InputDocument>& inputs) {
  Section section{"perplexity", "Perplexity", ""};
  html::Table table({{"file", false}, {"model", false}, {"text", false}, {"PPL ± error"}, {"tokens scored"},
                     {"context"}, {"chunks"}});
  for (const InputDocument& input : inputs) {
    const JsonValue& d = input.doc;
    const double ppl = value_of(d, "ppl");
    const double error = error_of(d, "ppl", "ppl_error");
    double scored = optional_number(d, "n_tokens_scored");
    if (std::isnan(scored)) scored = optional_number(d, "n_scored");  // schema 1
    double ctx = optional_number(d, "n_ctx");
    if (std::isnan(ctx))
      if (const JsonValue* settings = d.find("settings"); settings && settings->is_object())
        ctx = optional_number(*settings, "n_ctx");
    table.add_row({input.path, first_string(d, {"model", "inputs.model"}), first_string(d, {"text", "inputs.text"}),
                   html::format_with_error(ppl, error), html::format_integer(scored), html::format_integer(ctx),
                   html::format_integer(optional_number(d, "n_chunks"))});
  }
  section.html = "<p>Perplexity as llama.cpp computes it (the second half of each chunk scored), one row per file. "
                 "Lower is better; figures compare only on the same text, context and tokenizer.</p>" +
                 table.render("perplexity");
  return section;
}

}  // namespace report_detail

// ---- the page ----

namespace {

using report_detail::InputDocument;
using report_detail::Section;

constexpr const char* kStyle = R"CSS(
:root { color-scheme: light; }
body { margin: 0; background: #f5f6f8; color: #1f2328; line-height: 1.45;
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Arial, sans-serif; }
header.page { background: #1f2937; color: #f9fafb; padding: 18px 32px 14px; }
header.page h1 { margin: 0 0 2px; font-size: 24px; font-weight: 650; }
header.page .generated { color: #cbd5e1; font-size: 13px; margin: 0 0 10px; }
header.page table { border-collapse: collapse; font-size: 13px; }
header.page th { text-align: left; color: #cbd5e1; font-weight: 500; padding: 1px 14px 1px 0; }
header.page td { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, monospace; font-size: 12.5px; }
nav.sections { margin-top: 10px; font-size: 14px; }
nav.sections a { color: #93c5fd; margin-right: 18px; text-decoration: none; }
nav.sections a:hover { text-decoration: underline; }
main { max-width: 1200px; margin: 0 auto; padding: 8px 24px 40px; }
section.report-section { background: #fff; border: 1px solid #e3e6ea; border-radius: 8px; margin: 18px 0;
  padding: 16px 24px 20px; box-shadow: 0 1px 2px rgba(0, 0, 0, 0.04); }
section.report-section h2 { margin: 0 0 10px; font-size: 20px; padding-bottom: 6px; border-bottom: 2px solid #e8eaee; }
section.report-section h3 { margin: 18px 0 6px; font-size: 16px; }
section.report-section p { margin: 6px 0; font-size: 14px; max-width: 90ch; }
dl.facts { display: flex; flex-wrap: wrap; gap: 6px 26px; margin: 8px 0 12px; font-size: 14px; }
dl.facts div { display: flex; gap: 6px; }
dl.facts dt { color: #6b7280; }
dl.facts dd { margin: 0; font-weight: 600; overflow-wrap: anywhere; }
p.note { background: #fff8e6; border-left: 3px solid #f0b429; padding: 6px 12px; }
.figures { display: flex; flex-wrap: wrap; gap: 14px; align-items: flex-start; }
figure.chart-figure { margin: 12px 0; padding: 10px 12px; border: 1px solid #eceef1; border-radius: 6px;
  background: #fff; width: fit-content; max-width: 100%; overflow-x: auto; box-sizing: border-box; }
.figures figure.chart-figure { margin: 0; }
.chart-title { font-weight: 600; font-size: 14px; margin-bottom: 4px; }
figure.chart-figure figcaption { font-size: 13px; color: #4b5563; margin-top: 4px; }
/* The chart decides the figure's width; title and caption wrap within it. */
figure.chart-figure figcaption, figure.chart-figure .chart-title { width: 0; min-width: 100%; }
svg.chart { display: block; max-width: 100%; height: auto; }
svg.chart text { font-size: 11px; }
svg.chart .tick, svg.chart .legend-label, svg.chart .point-label { fill: #374151; }
svg.chart .axis-label { font-size: 12px; font-weight: 600; fill: #111827; }
svg.chart .plot-area { fill: #ffffff; }
svg.chart .frame { fill: none; stroke: #9ca3af; }
svg.chart .grid { stroke: #eceef1; }
svg.chart .tick-mark { stroke: #9ca3af; }
svg.chart .line { fill: none; stroke-width: 1.8; }
svg.chart .error-bar { fill: none; stroke-width: 1.2; }
svg.chart .cell rect { stroke: #ffffff; stroke-width: 1; }
svg.chart .cell-text { font-size: 10px; pointer-events: none; }
svg.chart .point:hover, svg.chart .bar:hover, svg.chart .cell:hover rect { stroke: #111827; stroke-width: 2; }
.table-wrap { overflow-x: auto; margin: 6px 0 10px; }
table.data { border-collapse: collapse; font-size: 13px; }
table.data th { background: #f3f4f6; text-align: left; padding: 4px 10px; border-bottom: 1px solid #d1d5db;
  font-weight: 600; white-space: nowrap; }
table.data td { padding: 3px 10px; border-bottom: 1px solid #f0f1f3; }
table.data .num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.data tbody tr:nth-child(even) { background: #fafbfc; }
table.data tbody tr:hover { background: #eef6ff; }
footer { text-align: center; color: #6b7280; font-size: 12px; padding: 0 0 24px; }
)CSS";

// Nothing but the page itself: no network, no external file, so it works
// offline and a browser refuses anything else the page might ask for.
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'unsafe-inline'";

std::string utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

std::string page_header(const ReportInputs& inputs, const ReportOptions& options, const std::vector<Section>& sections) {
  std::string s = "<header class=\"page\"><h1>" + html::escape(options.title) + "</h1><p class=\"generated\">" +
                  "generated " + html::escape(options.generated_at.empty() ? utc_now() : options.generated_at) +
                  " by qlens " + QLENS_VERSION + "</p><table class=\"inputs\">";
  for (const NamedPath& in : report_input_paths(inputs))
    s += "<tr><th>" + html::escape(in.flag) + "</th><td>" + html::escape(in.path) + "</td></tr>";
  s += "</table><nav class=\"sections\">";
  for (const Section& section : sections)
    s += "<a href=\"#" + html::escape(section.id) + "\">" + html::escape(section.title) + "</a>";
  return s + "</nav></header>";
}

std::string render_page(const ReportInputs& inputs, const ReportOptions& options, const std::vector<Section>& sections) {
  std::string s = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                  "<meta http-equiv=\"Content-Security-Policy\" content=\"";
  s += kContentSecurityPolicy;
  s += "\"><meta name=\"generator\" content=\"qlens " QLENS_VERSION "\"><title>" + html::escape(options.title) +
       "</title><style>" + kStyle + "</style></head>\n<body>\n";
  s += page_header(inputs, options, sections);
  s += "\n<main>\n";
  for (const Section& section : sections)
    s += "<section class=\"report-section\" id=\"" + html::escape(section.id) + "\" data-section=\"" +
         html::escape(section.id) + "\"><h2>" + html::escape(section.title) + "</h2>\n" + section.html +
         "\n</section>\n";
  s += "</main>\n<footer>Hover over a point, bar or cell for its exact value. How each figure is computed: "
       "docs/REPORT.md, docs/COMPARE.md and docs/SENSITIVITY.md in the qlens sources.</footer>\n</body></html>\n";
  return s;
}

}  // namespace

std::vector<NamedPath> report_input_paths(const ReportInputs& inputs) {
  std::vector<NamedPath> paths;
  if (!inputs.compare.empty()) paths.push_back({"--compare", inputs.compare});
  if (!inputs.sensitivity.empty()) paths.push_back({"--sensitivity", inputs.sensitivity});
  if (!inputs.plan.empty()) paths.push_back({"--plan", inputs.plan});
  if (!inputs.curve.empty()) paths.push_back({"--curve", inputs.curve});
  if (!inputs.imatrix_stats.empty()) paths.push_back({"--imatrix-stats", inputs.imatrix_stats});
  for (const std::string& p : inputs.perplexity) paths.push_back({"--perplexity", p});
  return paths;
}

namespace {
void require_an_input(const ReportInputs& inputs) {
  if (inputs.empty())
    throw Error("qlens report: no input: give at least one of --compare, --sensitivity, --plan, --curve, --imatrix-stats, "
                "--perplexity (see qlens report --help)");
}
}  // namespace

std::string build_report_html(const ReportInputs& inputs, const ReportOptions& options) {
  using namespace report_detail;
  require_an_input(inputs);
  std::vector<Section> sections;
  if (!inputs.compare.empty())
    sections.push_back(compare_section(load_input("--compare", inputs.compare, "compare"), options));
  if (!inputs.sensitivity.empty())
    sections.push_back(sensitivity_section(load_input("--sensitivity", inputs.sensitivity, "sensitivity"), options));
  if (!inputs.plan.empty()) sections.push_back(plan_section(load_input("--plan", inputs.plan, "plan"), options));
  if (!inputs.curve.empty()) sections.push_back(curve_section(load_input("--curve", inputs.curve, "curve"), options));
  if (!inputs.imatrix_stats.empty())
    sections.push_back(imatrix_section(load_input("--imatrix-stats", inputs.imatrix_stats, "imatrix"), options));
  if (!inputs.perplexity.empty()) {
    std::vector<InputDocument> docs;
    for (const std::string& p : inputs.perplexity) docs.push_back(load_input("--perplexity", p, "perplexity"));
    sections.push_back(perplexity_section(docs));
  }
  return render_page(inputs, options, sections);
}

void write_report(const ReportInputs& inputs, const ReportOptions& options, const std::string& output_path,
                  const std::string& output_flag) {
  require_an_input(inputs);
  if (output_path.empty()) throw Error("qlens report: " + output_flag + " FILE.html is required");
  check_output_path("qlens report", {output_flag, output_path}, report_input_paths(inputs));
  write_file_atomic(output_path, build_report_html(inputs, options));
}

}  // namespace qlens::tools
