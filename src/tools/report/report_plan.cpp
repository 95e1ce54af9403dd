// The plan section of qlens report: from `qlens plan --json` (with
// --validate, the measured results beside the uniform mixes).
#include <algorithm>
#include <cmath>

#include "tools/report/report_html.h"
#include "tools/report/report_sections.h"

namespace qlens::tools::report_detail {

namespace {

using html::format_bytes;
using html::format_number;
using html::kNaN;

struct PlannedTensor {
  std::string name, role, type;
  int layer = -1;
  double bytes = kNaN, bpw = kNaN, predicted = kNaN;
};

struct TypeTotal {
  std::string type;
  double bpw = kNaN, tensors = kNaN, bytes = kNaN;
};

struct ValidationRow {
  std::string name;
  double bytes = kNaN, bpw = kNaN, predicted = kNaN;
  double kld = kNaN, kld_error = kNaN, same_top = kNaN, same_top_error = kNaN;
  double ppl = kNaN, ppl_error = kNaN, ppl_ratio = kNaN;
};

std::vector<PlannedTensor> read_tensors(const JsonValue& doc) {
  std::vector<PlannedTensor> tensors;
  for (const JsonValue& t : doc.at("tensors").as_array()) {
    PlannedTensor p;
    p.name = at_either(t, {"tensor", "name"}).as_string();  // "name" in the first plan files
    p.role = optional_string(t, "role");
    if (p.role.empty()) p.role = p.name;
    p.layer = read_layer(t);
    p.type = t.at("type").as_string();
    p.bytes = number(t, "bytes");
    p.bpw = optional_number(t, "bits_per_weight");
    p.predicted = optional_number(t, "predicted_delta_kld");
    tensors.push_back(std::move(p));
  }
  return tensors;
}

// The types in the order of their bits per weight (the file's "types", else
// gathered from the tensors).
std::vector<TypeTotal> read_types(const JsonValue& doc, const std::vector<PlannedTensor>& tensors) {
  std::vector<TypeTotal> types;
  if (const JsonValue* list = doc.find("types"); list && list->is_array()) {
    for (const JsonValue& t : list->as_array())
      types.push_back({t.at("type").as_string(), optional_number(t, "bits_per_weight"), optional_number(t, "tensors"),
                       optional_number(t, "bytes")});
  }
  for (const PlannedTensor& t : tensors)
    if (std::none_of(types.begin(), types.end(), [&](const TypeTotal& k) { return k.type == t.type; }))
      types.push_back({t.type, t.bpw, kNaN, kNaN});
  std::stable_sort(types.begin(), types.end(), [](const TypeTotal& a, const TypeTotal& b) { return a.bpw < b.bpw; });
  return types;
}

std::vector<ValidationRow> read_validation(const JsonValue& validation) {
  std::vector<ValidationRow> rows;
  for (const JsonValue& r : validation.at("rows").as_array()) {
    ValidationRow v;
    v.name = at_either(r, {"mix", "name"}).as_string();  // "name" in schema 1
    v.bytes = number(r, "bytes");
    v.bpw = optional_number(r, "bits_per_weight");
    v.predicted = optional_number(r, "predicted_kld");
    v.kld = value_of(r, "kld");
    v.kld_error = error_of(r, "kld");
    v.same_top = value_of(r, "same_top");
    v.same_top_error = error_of(r, "same_top");
    v.ppl = value_of(r, "ppl");
    v.ppl_error = error_of(r, "ppl");
    v.ppl_ratio = optional_number(r, "ppl_ratio");
    rows.push_back(std::move(v));
  }
  return rows;
}

std::string type_grid(const std::vector<PlannedTensor>& tensors, const std::vector<TypeTotal>& types) {
  std::vector<std::pair<int, std::string>> cells;
  for (const PlannedTensor& t : tensors) cells.push_back({t.layer, t.role});
  const LayerRoleAxes axes = layer_role_axes(cells);
  html::CategoryGrid grid;
  grid.id = "plan-type-grid";
  grid.row_axis = "layer";
  grid.column_axis = "tensor role";
  grid.legend_title = "type (bits per weight, tensors, bytes)";
  grid.rows = axes.row_labels();
  grid.columns = axes.roles;
  grid.cells.assign(grid.rows.size(), std::vector<int>(grid.columns.size(), -1));
  grid.hovers.assign(grid.rows.size(), std::vector<std::string>(grid.columns.size()));
  for (size_t k = 0; k < types.size(); ++k) {
    const TypeTotal& t = types[k];
    grid.categories.push_back(t.type);
    grid.colours.push_back(html::ordered_colour(types.size() > 1 ? static_cast<double>(k) / (types.size() - 1) : 0.5));
    grid.legend.push_back(t.type + " · " + format_number(t.bpw) + " bpw" +
                          (std::isnan(t.tensors) ? "" : " · " + html::format_integer(t.tensors) + " tensors") +
                          (std::isnan(t.bytes) ? "" : " · " + format_bytes(t.bytes)));
  }
  for (const PlannedTensor& t : tensors) {
    const size_t r = axes.row_of(t.layer), c = axes.column_of(t.role);
    const auto k = std::find_if(types.begin(), types.end(), [&](const TypeTotal& x) { return x.type == t.type; });
    grid.cells[r][c] = static_cast<int>(k - types.begin());
    grid.hovers[r][c] = t.name + ": " + t.type + ", " + format_bytes(t.bytes) + ", " + format_number(t.bpw) +
                        " bpw, predicted ΔKLD " + format_number(t.predicted);
  }
  return html::figure("The chosen type of every tensor", html::category_grid_svg(grid),
                      "rows are layers, columns tensor roles; each cell is the type the plan gives that tensor, "
                      "coloured from the fewest bits (dark) to the most (light). Hover for bytes and predicted ΔKLD.");
}

std::string summary_html(const JsonValue& doc, const std::vector<ValidationRow>& rows) {
  const JsonValue& totals = doc.at("totals");
  const double bytes = number(totals, "bytes");
  const JsonValue* settings = doc.find("settings");
  const double target_bpw =
      settings && settings->is_object() ? optional_number(*settings, "target_bits_per_weight") : kNaN;
  std::vector<std::pair<std::string, std::string>> items = {
      {"sensitivity", first_string(doc, {"inputs.sensitivity"})},
      {"model", first_string(doc, {"inputs.model", "inputs.sensitivity_model", "sensitivity_model"})},
      {"budget", format_bytes(optional_number(totals, "budget_bytes")) +
                     (std::isnan(target_bpw) ? "" : " (" + format_number(target_bpw) + " bpw)")},
      {"size", format_bytes(bytes) + " (" + html::format_integer(bytes) + " bytes), " +
                   format_number(number(totals, "bits_per_weight")) + " bpw"},
      {"predicted KLD", format_number(number(totals, "predicted_kld"))}};
  const auto plan = std::find_if(rows.begin(), rows.end(), [](const ValidationRow& r) { return r.name == "plan"; });
  if (plan != rows.end()) items.push_back({"measured KLD", html::format_with_error(plan->kld, plan->kld_error)});
  return facts(items);
}

// The binary unit that keeps the chart's sizes between 1 and 1024.
std::pair<double, std::string> size_unit(double max_bytes) {
  if (max_bytes >= 1024.0 * 1024 * 1024) return {1024.0 * 1024 * 1024, "GiB"};
  if (max_bytes >= 1024.0 * 1024) return {1024.0 * 1024, "MiB"};
  return {1024.0, "KiB"};
}

std::string kld_size_chart(std::vector<ValidationRow> rows) {
  std::stable_sort(rows.begin(), rows.end(), [](const ValidationRow& a, const ValidationRow& b) { return a.bytes < b.bytes; });
  double max_bytes = 0;
  for (const ValidationRow& r : rows) max_bytes = std::max(max_bytes, r.bytes);
  const auto [unit, unit_name] = size_unit(max_bytes);
  html::XYChart chart;
  chart.id = "plan-kld-vs-size";
  chart.x.label = "tensor data (" + unit_name + ")";
  chart.y.label = "mean KLD vs the original (nats, log scale)";
  chart.y.log = true;
  chart.plot_height = 280;
  html::Series mixes("uniform mixes (measured)");
  mixes.colour = html::categorical_colour(0);
  html::Series plan("the plan (measured)");
  plan.colour = html::categorical_colour(2);
  plan.connect = false;
  html::Series predicted("predicted (sum of ΔKLD)");
  predicted.colour = "#6b7280";
  predicted.connect = false;
  predicted.hollow = true;
  for (const ValidationRow& r : rows) {
    const double x = r.bytes / unit;
    const std::string hover = r.name + ": " + format_bytes(r.bytes) + ", " + format_number(r.bpw) + " bpw, KLD " +
                              html::format_with_error(r.kld, r.kld_error) + ", same top " +
                              html::format_percent(r.same_top);
    const html::Point measured{x, r.kld, r.kld - r.kld_error, r.kld + r.kld_error, r.name, hover};
    (r.name == "plan" ? plan : mixes).points.push_back(measured);
    if (!std::isnan(r.predicted))
      predicted.points.push_back({x, r.predicted, kNaN, kNaN, "", r.name + ": predicted KLD " + format_number(r.predicted)});
  }
  // The predictions first, so that the measured points are drawn over them.
  if (!predicted.points.empty()) chart.series.push_back(predicted);
  chart.series.push_back(mixes);
  chart.series.push_back(plan);
  return html::figure("The plan against the uniform mixes", html::xy_chart_svg(chart),
                      "each filled point is a model quantized and compared with the original on held-out text: left is "
                      "smaller, lower is closer to the original; a plan below the mixes' line beats them at its size. "
                      "Bars: ± one standard error; hollow points: the sensitivity table's prediction.");
}

std::string validation_table(const std::vector<ValidationRow>& rows) {
  html::Table table({{"model", false}, {"size"}, {"bits per weight"}, {"predicted KLD"}, {"measured KLD"},
                     {"same top"}, {"PPL"}, {"PPL ratio"}});
  for (const ValidationRow& r : rows)
    table.add_row({r.name, format_bytes(r.bytes), format_number(r.bpw), format_number(r.predicted),
                   html::format_with_error(r.kld, r.kld_error),
                   html::format_percent(r.same_top) +
                       (std::isnan(r.same_top_error) ? "" : " ± " + html::format_percent(r.same_top_error)),
                   html::format_with_error(r.ppl, r.ppl_error), format_number(r.ppl_ratio, 4)});
  return table.render("plan-validation");
}

std::string validation_html(const JsonValue& doc, const std::vector<ValidationRow>& rows) {
  std::string s = "<h3>Predicted against measured</h3>";
  const JsonValue* validation = doc.find("validation");
  if (!validation || validation->is_null())
    return s + note("This plan was not validated: `qlens plan ... --validate -f HELD_OUT.txt --json PLAN.json` "
                    "quantizes it and the uniform mixes nearest its size and measures each on held-out text.");
  const std::string text = first_string(doc, {"inputs.held_out_text", "validation.held_out_text"});
  s += "<p>The plan and the uniform mixes nearest its size, each quantized and compared with the original" +
       html::escape(text.empty() ? std::string() : " on " + text) +
       ". Predicted: the sum of the per-tensor ΔKLD, a first-order estimate that treats the tensors' errors as "
       "independent.</p>";
  if (rows.empty()) return s + note("The validation holds no model.");
  return s + kld_size_chart(rows) + validation_table(rows);
}

}  // namespace

Section plan_section(const InputDocument& input, const ReportOptions&) {
  Section section{"plan", "Plan: a type per tensor under a size budget", ""};
  const JsonValue& d = input.doc;
  const std::vector<PlannedTensor> tensors = read_tensors(d);
  const std::vector<TypeTotal> types = read_types(d, tensors);
  std::vector<ValidationRow> rows;
  if (const JsonValue* v = d.find("validation"); v && !v->is_null()) rows = read_validation(*v);
  section.html = summary_html(d, rows);
  if (tensors.empty())
    section.html += note("The plan holds no tensor.");
  else
    section.html += type_grid(tensors, types);
  section.html += validation_html(d, rows);
  return section;
}

}  // namespace qlens::tools::report_detail
