// The importance-matrix section of qlens report: from
// `qlens imatrix --in-file F --show-statistics --json FILE`
// (src/tools/imatrix/imatrix_stats.h defines the figures).
#include <algorithm>
#include <cmath>

#include "tools/report/report_html.h"
#include "tools/report/report_sections.h"

namespace qlens::tools::report_detail {

namespace {

using html::format_number;
using html::kNaN;

struct TensorImportance {
  std::string name;
  int layer = -1;
  double n_cols = kNaN, sum = kNaN, mean = kNaN, max = kNaN, active = kNaN, entropy = kNaN;
  struct Column {
    double index, value;
  };
  std::vector<Column> top_columns;
};

std::vector<TensorImportance> read_tensors(const JsonValue& doc, bool* has_columns) {
  std::vector<TensorImportance> tensors;
  *has_columns = false;
  for (const JsonValue& t : doc.at("tensors").as_array()) {
    TensorImportance r;
    r.name = at_either(t, {"tensor", "name"}).as_string();  // "name" in schema 1
    r.layer = read_layer(t);
    r.n_cols = optional_number(t, "n_cols");
    r.sum = number(t, "sum_act2");
    r.mean = optional_number(t, "mean");
    r.max = optional_number(t, "max");
    r.active = optional_number(t, "active_fraction");
    r.entropy = optional_number(t, "normalized_entropy");
    if (const JsonValue* columns = t.find("top_columns"); columns && columns->is_array()) {
      *has_columns = true;
      for (const JsonValue& c : columns->as_array()) r.top_columns.push_back({number(c, "column"), number(c, "value")});
    }
    tensors.push_back(std::move(r));
  }
  return tensors;
}

std::string layer_sum_chart(const JsonValue& layers) {
  html::XYChart chart;
  chart.id = "imatrix-layer-importance";
  chart.x.label = "layer";
  chart.x.integer = true;
  chart.y.label = "Σ act² (activation²)";
  chart.width = 460;  // beside the next chart on a wide screen
  chart.plot_height = 240;
  html::Series bars("Σ act²");
  bars.bars = true;
  bars.connect = false;
  for (const JsonValue& l : layers.as_array()) {
    const double layer = number(l, "layer"), sum = number(l, "sum_act2");
    bars.points.push_back({layer, sum, kNaN, kNaN, "",
                           "layer " + html::format_integer(layer) + ": Σ act² " + format_number(sum) + " over " +
                               html::format_integer(optional_number(l, "n_tensors")) + " tensors"});
  }
  chart.series.push_back(bars);
  return html::figure("Importance per layer", html::xy_chart_svg(chart),
                      "each bar sums the mean squared input activations of the layer's weight columns (what the "
                      "imatrix weighs quantization errors by); a layer whose inputs grow shows a taller bar.");
}

std::string layer_shape_chart(const JsonValue& layers) {
  html::XYChart chart;
  chart.id = "imatrix-layer-shape";
  chart.x.label = "layer";
  chart.x.integer = true;
  chart.y.label = "fraction (0 to 1)";
  chart.width = 560;
  chart.plot_height = 240;
  html::Series entropy("normalized entropy");
  html::Series cosine("cosine with previous layer");
  html::Series spread("columns beyond 1 std");
  for (const JsonValue& l : layers.as_array()) {
    const double layer = number(l, "layer");
    const auto add = [&](html::Series& series, const char* key, const char* what) {
      const double v = optional_number(l, key);
      series.points.push_back({layer, v, kNaN, kNaN, "", "layer " + html::format_integer(layer) + ": " + what + " " + format_number(v)});
    };
    add(entropy, "mean_normalized_entropy", "normalized entropy");
    add(cosine, "mean_cosine_prev_layer", "cosine with the previous layer");
    add(spread, "mean_zscore_above_1_fraction", "share of columns beyond 1 std");
  }
  chart.series = {entropy, cosine, spread};
  return html::figure("How importance is spread over the columns", html::xy_chart_svg(chart),
                      "means over the layer's tensors. Entropy 1: importance spread evenly over a tensor's columns, "
                      "lower: concentrated in a few (which an imatrix-aware quantizer protects); cosine 1: the layer "
                      "weighs its columns like the previous layer; columns beyond 1 std: the share of outlying columns.");
}

// Tensors that read the same input (attn_q, attn_k and attn_v; ffn_gate and
// ffn_up) have identical importance: one row names them all.
struct SharedInput {
  const TensorImportance* first;
  std::vector<std::string> others;  // the other tensors' names after "blk.N."
  std::string label() const {
    if (others.empty()) return first->name;
    std::string s = first->name + " (same input:";
    for (const std::string& o : others) s += " " + o;
    return s + ")";
  }
};

std::string after_block_prefix(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return name;
  const size_t dot = name.find('.', 4);
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

std::vector<SharedInput> by_shared_input(const std::vector<TensorImportance>& tensors) {
  std::vector<SharedInput> groups;
  for (const TensorImportance& t : tensors) {
    auto same = std::find_if(groups.begin(), groups.end(), [&](const SharedInput& g) {
      return g.first->layer == t.layer && g.first->n_cols == t.n_cols && g.first->sum == t.sum &&
             g.first->max == t.max && t.layer >= 0;
    });
    if (same == groups.end())
      groups.push_back({&t, {}});
    else
      same->others.push_back(after_block_prefix(t.name));
  }
  return groups;
}

std::string top_tensors_table(const std::vector<TensorImportance>& tensors, size_t top) {
  std::vector<SharedInput> groups = by_shared_input(tensors);
  std::stable_sort(groups.begin(), groups.end(),
                   [](const SharedInput& a, const SharedInput& b) { return a.first->sum > b.first->sum; });
  html::Table table({{"rank"}, {"tensor", false}, {"layer"}, {"columns"}, {"Σ act²"}, {"mean"}, {"max column"},
                     {"max / mean"}, {"active"}, {"norm. entropy"}});
  for (size_t i = 0; i < groups.size() && i < top; ++i) {
    const TensorImportance& t = *groups[i].first;
    table.add_row({std::to_string(i + 1), groups[i].label(), t.layer < 0 ? "–" : std::to_string(t.layer),
                   html::format_integer(t.n_cols), format_number(t.sum), format_number(t.mean), format_number(t.max),
                   format_number(t.mean > 0 ? t.max / t.mean : kNaN), html::format_percent(t.active, 1),
                   format_number(t.entropy)});
  }
  return "<h3>The tensors with the most importance</h3>" + table.render("imatrix-top-tensors") +
         "<p>Σ act²: the sum over the tensor's input columns of their mean squared activation. max / mean: how far "
         "the largest column stands out; active: the share of columns above 1e-5 of the mean.</p>";
}

std::string top_columns_table(const std::vector<TensorImportance>& tensors, size_t top) {
  struct Row {
    const SharedInput* tensor;
    double column, value;
  };
  const std::vector<SharedInput> groups = by_shared_input(tensors);
  std::vector<Row> rows;
  for (const SharedInput& g : groups)
    for (const TensorImportance::Column& c : g.first->top_columns) rows.push_back({&g, c.index, c.value});
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.value > b.value; });
  html::Table table({{"rank"}, {"tensor", false}, {"column"}, {"mean act²"}, {"× the tensor's mean"}});
  for (size_t i = 0; i < rows.size() && i < top; ++i) {
    const TensorImportance& t = *rows[i].tensor->first;
    table.add_row({std::to_string(i + 1), rows[i].tensor->label(), html::format_integer(rows[i].column),
                   format_number(rows[i].value), format_number(t.mean > 0 ? rows[i].value / t.mean : kNaN)});
  }
  return "<h3>The columns with the most importance</h3>" + table.render("imatrix-top-columns") +
         "<p>Input columns whose activations are largest: their weights are quantized most carefully. A column many "
         "times its tensor's mean is an outlier channel.</p>";
}

std::string expert_usage_table(const JsonValue& doc) {
  const JsonValue* usage = doc.find("expert_usage");
  if (!usage || usage->as_array().empty()) return "";
  html::Table table({{"layer"}, {"experts"}, {"unused"}, {"rare"}, {"normalized entropy"}, {"busiest / even"}});
  for (const JsonValue& u : usage->as_array())
    table.add_row({std::to_string(read_layer(u)), html::format_integer(number(u, "n_expert")),
                   std::to_string(u.at("unused_experts").size()), std::to_string(u.at("rare_experts").size()),
                   format_number(optional_number(u, "normalized_entropy")),
                   format_number(optional_number(u, "max_over_even"))});
  return "<h3>Expert usage</h3>" + table.render("imatrix-expert-usage") +
         "<p>How the router spread the calibration text over each layer's experts: an unused or rare expert gets "
         "little importance, which the imatrix cannot then protect.</p>";
}

}  // namespace

Section imatrix_section(const InputDocument& input, const ReportOptions& options) {
  Section section{"imatrix", "Importance matrix statistics", ""};
  const JsonValue& d = input.doc;
  bool has_columns = false;
  const std::vector<TensorImportance> tensors = read_tensors(d, &has_columns);
  std::string datasets;
  if (const JsonValue* list = d.find("datasets"); list && list->is_array())
    for (const JsonValue& name : list->as_array()) datasets += (datasets.empty() ? "" : ", ") + name.as_string();
  std::string& s = section.html;
  s = facts({{"imatrix", first_string(d, {"inputs.imatrix", "file"})},
             {"calibration text", datasets.empty() ? std::string("–") : datasets},
             {"chunks", html::format_integer(optional_number(d, "chunk_count")) + " × " +
                            html::format_integer(optional_number(d, "chunk_size")) + " tokens"},
             {"tensors", std::to_string(tensors.size())}});
  const JsonValue& layers = d.at("layers");
  if (layers.as_array().empty())
    s += note("No tensor inside the layers has importance data.");
  else
    s += "<div class=\"figures\">" + layer_sum_chart(layers) + layer_shape_chart(layers) + "</div>";
  s += top_tensors_table(tensors, options.top);
  if (has_columns)
    s += top_columns_table(tensors, options.top);
  else
    s += note("This statistics file has no per-column figures (an older qlens wrote it): rerun `qlens imatrix "
              "--in-file F --show-statistics --json FILE` for the columns with the most importance.");
  s += expert_usage_table(d);
  return section;
}

}  // namespace qlens::tools::report_detail
