// The sensitivity section of qlens report: from `qlens sensitivity --json`
// (docs/SENSITIVITY.md gives the fields).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "tools/common/json_header.h"
#include "tools/report/report_html.h"
#include "tools/report/report_sections.h"

namespace qlens::tools::report_detail {

namespace {

using html::format_number;
using html::kNaN;

struct Candidate {
  std::string type;
  double bytes = kNaN, bpw = kNaN, delta_kld = kNaN, delta_kld_error = kNaN;
  bool measured = false;
};

struct ProbedTensor {
  std::string name, role, source_type;
  int layer = -1;
  std::vector<Candidate> candidates;
  const Candidate* at(const std::string& type) const {
    for (const Candidate& c : candidates)
      if (c.type == type) return &c;
    return nullptr;
  }
};

std::vector<ProbedTensor> read_tensors(const JsonValue& list) {
  std::vector<ProbedTensor> tensors;
  for (const JsonValue& t : list.as_array()) {
    ProbedTensor p;
    p.name = at_either(t, {"tensor", "name"}).as_string();  // "name" in schema 1
    p.role = optional_string(t, "role");
    if (p.role.empty()) p.role = p.name;
    p.layer = read_layer(t);
    p.source_type = optional_string(t, "source_type");
    for (const JsonValue& c : t.at("candidates").as_array()) {
      Candidate k;
      k.type = c.at("type").as_string();
      k.bytes = optional_number(c, "bytes");
      k.bpw = optional_number(c, "bpw");
      if (std::isnan(k.bpw)) k.bpw = optional_number(c, "bits_per_weight");
      k.delta_kld = number(c, "delta_kld");
      k.delta_kld_error = optional_number(c, "delta_kld_error");
      const JsonValue* measured = c.find("measured");
      k.measured = measured && measured->is_bool() && measured->as_bool();
      p.candidates.push_back(std::move(k));
    }
    tensors.push_back(std::move(p));
  }
  return tensors;
}

// The probed types (not a tensor's own source type), fewest bits first.
std::vector<std::string> probed_types(const std::vector<ProbedTensor>& tensors) {
  std::vector<std::pair<double, std::string>> types;
  for (const ProbedTensor& t : tensors)
    for (const Candidate& c : t.candidates) {
      if (c.type == t.source_type) continue;
      auto it = std::find_if(types.begin(), types.end(), [&](const auto& p) { return p.second == c.type; });
      if (it == types.end()) types.push_back({std::isnan(c.bpw) ? 1e9 : c.bpw, c.type});
    }
  std::stable_sort(types.begin(), types.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> names;
  for (const auto& t : types) names.push_back(t.second);
  return names;
}

std::string hover_of(const ProbedTensor& t, const Candidate& c) {
  std::string s = t.name + " (" + t.role + (t.layer >= 0 ? ", layer " + std::to_string(t.layer) : "") + ") at " +
                  c.type + ": ΔKLD " + html::format_with_error(c.delta_kld, c.delta_kld_error) +
                  (c.measured ? " (measured)" : " (predicted)");
  if (!std::isnan(c.bytes)) s += ", " + html::format_bytes(c.bytes);
  if (!std::isnan(c.bpw)) s += ", " + format_number(c.bpw) + " bpw";
  return s;
}

// One colour scale for every type's map, so that maps compare by eye.
std::pair<double, double> delta_kld_range(const std::vector<ProbedTensor>& tensors) {
  double low = std::numeric_limits<double>::infinity(), high = 0;
  for (const ProbedTensor& t : tensors)
    for (const Candidate& c : t.candidates)
      if (c.type != t.source_type && c.delta_kld > 0 && std::isfinite(c.delta_kld)) {
        low = std::min(low, c.delta_kld);
        high = std::max(high, c.delta_kld);
      }
  if (!(high > 0)) return {1e-6, 1e-5};
  return {low, std::max(high, low * 10)};
}

std::string heatmaps_html(const std::vector<ProbedTensor>& tensors, const std::vector<std::string>& types) {
  std::vector<std::pair<int, std::string>> cells;
  for (const ProbedTensor& t : tensors) cells.push_back({t.layer, t.role});
  const LayerRoleAxes axes = layer_role_axes(cells);
  const auto [low, high] = delta_kld_range(tensors);
  std::string s = "<div class=\"figures\">";
  for (const std::string& type : types) {
    html::Heatmap map;
    map.id = "sensitivity-heatmap-" + type;
    map.row_axis = "layer";
    map.column_axis = "tensor role";
    map.value_label = "ΔKLD (nats, log scale)";
    map.rows = axes.row_labels();
    map.columns = axes.roles;
    map.values.assign(map.rows.size(), std::vector<double>(map.columns.size(), kNaN));
    map.hovers.assign(map.rows.size(), std::vector<std::string>(map.columns.size()));
    map.low = low;
    map.high = high;
    for (const ProbedTensor& t : tensors) {
      const size_t r = axes.row_of(t.layer), c = axes.column_of(t.role);
      const Candidate* k = t.at(type);
      map.values[r][c] = k ? k->delta_kld : kNaN;
      map.hovers[r][c] = k ? hover_of(t, *k) : t.name + ": " + type + " not probed (its rows do not fit the type)";
    }
    s += html::figure("ΔKLD when only that tensor is quantized to " + type, html::heatmap_svg(map),
                      "rows are layers, columns tensor roles; a cell's colour is the mean KL divergence the output gains "
                      "when only that tensor is " + type + " (log scale, the same for every type): the darker, the "
                      "more that tensor needs bits.");
  }
  return s + "</div>";
}

double worst_delta_kld(const ProbedTensor& t) {
  double worst = -std::numeric_limits<double>::infinity();
  for (const Candidate& c : t.candidates)
    if (!std::isnan(c.delta_kld)) worst = std::max(worst, c.delta_kld);
  return worst;
}

std::string top_tensors_table(std::vector<ProbedTensor> tensors, const std::vector<std::string>& types, size_t top) {
  std::stable_sort(tensors.begin(), tensors.end(),
                   [](const ProbedTensor& a, const ProbedTensor& b) { return worst_delta_kld(a) > worst_delta_kld(b); });
  std::vector<html::Table::Column> columns = {{"rank"}, {"tensor", false}, {"role", false}, {"layer"}};
  for (const std::string& type : types) columns.push_back({"ΔKLD " + type});
  html::Table table(columns);
  for (size_t i = 0; i < tensors.size() && i < top; ++i) {
    const ProbedTensor& t = tensors[i];
    std::vector<std::string> row = {std::to_string(i + 1), t.name, t.role, t.layer < 0 ? "–" : std::to_string(t.layer)};
    for (const std::string& type : types) {
      const Candidate* c = t.at(type);
      row.push_back(c ? format_number(c->delta_kld) : "–");
    }
    table.add_row(std::move(row));
  }
  return "<h3>The most sensitive tensors</h3>" + table.render("sensitivity-top-tensors") +
         "<p>Ranked by their largest ΔKLD over the probed types (usually the fewest bits). '–': the type does not fit "
         "the tensor's rows.</p>";
}

std::string summary_html(const JsonValue& d, size_t n_tensors) {
  const std::string mode = first_string(d, {"settings.mode", "mode"});
  return facts({{"model", first_string(d, {"model", "inputs.model"})},
                {"text", first_string(d, {"text", "inputs.text"})},
                {"imatrix", first_string(d, {"imatrix", "inputs.imatrix"}).empty()
                                ? std::string("none")
                                : first_string(d, {"imatrix", "inputs.imatrix"})},
                {"mode", mode == "noise" ? "noise (ΔKLD predicted from a fit)" : "quant (ΔKLD measured)"},
                {"tokens scored",
                 html::format_integer(first_number(d, {"reference.n_tokens_scored", "reference.n_tokens"}))},
                {"reference PPL", format_number(first_number(d, {"reference.ppl"}), 5)},
                {"tensors", std::to_string(n_tensors)}});
}

}  // namespace

Section sensitivity_section(const InputDocument& input, const ReportOptions& options) {
  Section section{"sensitivity", "Sensitivity: which tensors need bits", ""};
  const JsonValue& d = input.doc;
  const std::vector<ProbedTensor> tensors = read_tensors(d.at("tensors"));
  std::string& s = section.html;
  s = summary_html(d, tensors.size());
  if (const JsonValue* complete = d.find("complete"); complete && complete->is_bool() && !complete->as_bool())
    s += note("This file is from an interrupted run (a checkpoint): tensors not yet probed are missing.");
  if (tensors.empty()) {
    s += note(d.find("groups") ? "The file holds groups only (sensitivity --group); they are not drawn per tensor."
                               : "The file holds no tensor.");
    return section;
  }
  const std::vector<std::string> types = probed_types(tensors);
  if (types.empty()) {
    s += note("No type other than the tensors' own was probed.");
    return section;
  }
  s += "<p>ΔKLD: the mean KL divergence from the unquantized model's output when only one tensor is quantized to a "
       "type, all others left as they are. A plan gives the tensors with large ΔKLD more bits.</p>";
  s += heatmaps_html(tensors, types);
  s += top_tensors_table(tensors, types, options.top);
  return section;
}

}  // namespace qlens::tools::report_detail
