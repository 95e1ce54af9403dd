// The compare section of qlens report: from `qlens compare --json`
// (docs/COMPARE.md gives the fields).
#include <algorithm>
#include <cmath>
#include <limits>

#include "tools/report/report_html.h"
#include "tools/report/report_sections.h"

namespace qlens::tools::report_detail {

namespace {

using html::format_number;
using html::kNaN;

struct NodeRow {
  std::string name, kind;
  int layer = -1;
  double nmse = kNaN, sqnr_db = kNaN, cosine = kNaN, max_abs = kNaN;
  double token_median = kNaN, token_p99 = kNaN;
};

std::vector<NodeRow> read_nodes(const JsonValue& doc) {
  std::vector<NodeRow> rows;
  for (const JsonValue& n : doc.at("nodes").as_array()) {
    NodeRow r;
    r.name = at_either(n, {"node", "name"}).as_string();  // "name" in schema 1
    r.layer = read_layer(n);
    r.kind = optional_string(n, "kind");
    if (r.kind.empty()) r.kind = r.name;
    r.nmse = number(n, "nmse");
    r.sqnr_db = optional_number(n, "sqnr_db");
    // sqnr_db is null both for an exact match (+inf) and when unknown; the NMSE tells which.
    if (std::isnan(r.sqnr_db) && r.nmse >= 0) r.sqnr_db = -10 * std::log10(r.nmse);
    r.cosine = optional_number(n, "cosine");
    r.max_abs = optional_number(n, "max_abs");
    r.token_median = optional_number(n, "token_nmse_median");
    r.token_p99 = optional_number(n, "token_nmse_p99");
    rows.push_back(std::move(r));
  }
  return rows;
}

std::string describe_node(const NodeRow& n) {
  return n.name + ": NMSE " + format_number(n.nmse) + ", SQNR " + format_number(n.sqnr_db) + " dB, cosine " +
         format_number(n.cosine, 6);
}

std::string summary_html(const InputDocument& input) {
  const JsonValue& d = input.doc;
  // Schema 1 kept the paths and sizes under "meta".
  return facts({{"reference", first_string(d, {"inputs.ref", "meta.ref_path"})},
                {"test model", first_string(d, {"inputs.model", "meta.test_path"})},
                {"text", first_string(d, {"inputs.text", "meta.text_path"})},
                {"chunks", html::format_integer(first_number(d, {"settings.n_chunks", "meta.n_chunks"})) + " × " +
                               html::format_integer(first_number(d, {"settings.n_ctx", "meta.n_ctx"})) + " tokens"},
                {"tokens evaluated", html::format_integer(first_number(d, {"n_tokens_evaluated", "meta.n_tokens"}))}});
}

// ---- the output distributions ----

struct Percentile {
  const char* key;
  const char* label;
};
constexpr Percentile kKldPercentiles[] = {{"min", "min"},       {"p0_1", "0.1%"}, {"p1", "1%"},   {"p5", "5%"},
                                          {"p10", "10%"},       {"median", "50%"}, {"p90", "90%"}, {"p95", "95%"},
                                          {"p99", "99%"},       {"p99_9", "99.9%"}, {"max", "max"}};

std::string kld_chart(const JsonValue& kld, double mean) {
  html::XYChart chart;
  chart.id = "compare-kld-percentiles";
  chart.x.label = "percentile of the scored tokens (ascending KLD)";
  chart.y.label = "KLD (nats, log scale)";
  chart.y.log = true;
  chart.plot_height = 240;
  html::Series percentiles("KLD at the percentile");
  for (size_t i = 0; i < std::size(kKldPercentiles); ++i) {
    const double v = number(kld, kKldPercentiles[i].key);
    chart.x.categories.push_back(kKldPercentiles[i].label);
    percentiles.points.push_back(
        {static_cast<double>(i), v, kNaN, kNaN, "", std::string(kKldPercentiles[i].label) + " of tokens: KLD " + format_number(v)});
  }
  chart.series.push_back(percentiles);
  html::Series mean_line("mean KLD");
  mean_line.markers = false;
  mean_line.colour = "#e15759";
  const std::string hover = "mean KLD " + format_number(mean);
  mean_line.points = {{0, mean, kNaN, kNaN, "", hover},
                      {static_cast<double>(std::size(kKldPercentiles) - 1), mean, kNaN, kNaN, "", hover}};
  chart.series.push_back(mean_line);
  return html::figure(
      "Distribution of the per-token KL divergence", html::xy_chart_svg(chart),
      "each point is a percentile of the KL divergence between the two models' next-token distributions over the "
      "scored tokens; a mean (red) far above the median means a few tokens go badly wrong, which the right end shows.");
}

std::string logits_html(const JsonValue& doc) {
  const JsonValue& logits = doc.at("logits");
  const double n_tokens = first_number(logits, {"n_tokens_scored", "n_tokens"});
  if (!(n_tokens > 0))
    return "<h3>Output distributions</h3>" + note("The logits were not compared (no token scored).");
  const JsonValue& kld = logits.at("kld");
  const double mean = value_of(kld, "mean");
  std::string s = "<h3>Output distributions</h3>";
  s += facts({{"tokens scored", html::format_integer(n_tokens)},
              {"mean KLD", html::format_with_error(mean, error_of(kld, "mean", "mean_error"))},
              {"median KLD", format_number(number(kld, "median"))},
              {"99% KLD", format_number(number(kld, "p99"))},
              {"same top token", html::format_percent(value_of(logits, "same_top")) + " ± " +
                                     html::format_percent(error_of(logits, "same_top"))},
              {"PPL reference", html::format_with_error(value_of(logits, "ppl_ref"), error_of(logits, "ppl_ref"))},
              {"PPL test", html::format_with_error(value_of(logits, "ppl_test"), error_of(logits, "ppl_test"))},
              {"PPL ratio", html::format_with_error(value_of(logits, "ppl_ratio"), error_of(logits, "ppl_ratio"))}});
  s += kld_chart(kld, mean);
  // One row: the percentiles read left to right like the chart.
  std::vector<html::Table::Column> columns = {{"KLD (nats) at", false}};
  std::vector<std::string> row = {"value"};
  for (const Percentile& p : kKldPercentiles) {
    columns.push_back({p.label});
    row.push_back(format_number(number(kld, p.key)));
  }
  html::Table table(columns);
  table.add_row(row);
  return s + table.render("compare-kld-percentiles");
}

// ---- inside the network ----

double metric_of(const NodeRow& n, Metric metric) { return metric == Metric::NMSE ? n.nmse : n.sqnr_db; }

std::string depth_chart(const std::vector<NodeRow>& nodes, Metric metric) {
  html::XYChart chart;
  chart.id = "compare-error-depth";
  chart.x.label = "layer";
  chart.x.integer = true;
  chart.y.label = metric == Metric::NMSE ? "NMSE, Σ(ref−test)²/Σref² (log scale)" : "SQNR (dB)";
  chart.y.log = metric == Metric::NMSE;
  chart.width = 900;
  chart.plot_height = 340;
  for (const NodeRow& n : nodes) {
    if (n.layer < 0) continue;
    auto series = std::find_if(chart.series.begin(), chart.series.end(),
                               [&](const html::Series& s) { return s.name == n.kind; });
    if (series == chart.series.end()) {
      chart.series.push_back(html::Series(n.kind));
      series = chart.series.end() - 1;
    }
    series->points.push_back({static_cast<double>(n.layer), metric_of(n, metric), kNaN, kNaN, "", describe_node(n)});
  }
  for (html::Series& s : chart.series)
    std::stable_sort(s.points.begin(), s.points.end(), [](const html::Point& a, const html::Point& b) { return a.x < b.x; });
  return html::figure(
      std::string(metric == Metric::NMSE ? "NMSE" : "SQNR") + " per node kind through the depth",
      html::xy_chart_svg(chart),
      metric == Metric::NMSE
          ? "each line is one kind of node (the same operation in every layer); follow a line to see how that "
            "operation's error grows with depth, compare lines at one layer to see which operation adds most. Lower is "
            "better; every gridline is a factor 10, and an exact match (NMSE 0) cannot be drawn on the log scale."
          : "each line is one kind of node (the same operation in every layer); follow a line to see how that "
            "operation's error grows with depth. Higher is better: every 10 dB is a factor 10 less error.");
}

std::string growth_chart(const JsonValue& growth) {
  html::XYChart chart;
  chart.id = "compare-l-out-growth";
  chart.x.label = "layer";
  chart.x.integer = true;
  chart.y.label = "NMSE of l_out (log scale)";
  chart.y.log = true;
  chart.plot_height = 240;
  html::Series series("l_out");
  for (const JsonValue& l : growth.at("layers").as_array()) {
    const double layer = static_cast<double>(l.at("layer").as_int());
    const double nmse = number(l, "l_out_nmse"), ratio = optional_number(l, "l_out_ratio");
    const std::string label = std::isnan(ratio) ? "" : "×" + format_number(ratio);
    series.points.push_back({layer, nmse, kNaN, kNaN, label,
                             "l_out-" + html::format_integer(layer) + ": NMSE " + format_number(nmse) +
                                 (label.empty() ? "" : ", " + label + " over the previous layer")});
  }
  chart.series.push_back(series);
  return html::figure("Error of the residual stream (l_out) layer by layer", html::xy_chart_svg(chart),
                      "the error of the stream leaving each layer; labels give its growth over the previous layer. "
                      "Steady ratios near 1 mean each layer adds little; a large one marks a layer that hurts.");
}

std::string growth_sentences(const JsonValue& growth) {
  std::string s = "<ul class=\"findings\">";
  if (const JsonValue* crossings = growth.find("first_exceeding"))
    for (const JsonValue& c : crossings->as_array()) {
      const std::string node = optional_string(c, "node");
      const std::string threshold = compact_scientific(number(c, "threshold"), 0);
      s += "<li>" + html::escape(node.empty() ? "the error stays below " + threshold + " at every node"
                                              : "the error first exceeds " + threshold + " at " + node) +
           "</li>";
    }
  const double jump = optional_number(growth, "largest_jump_layer");
  if (!std::isnan(jump))
    for (const JsonValue& l : growth.at("layers").as_array())
      if (static_cast<double>(read_layer(l)) == jump)  // jump is any number the file holds: no cast to int
        s += "<li>" +
             html::escape("the largest rise inside a layer: layer " + html::format_integer(jump) + ", " +
                          optional_string(l, "jump_from") + " → " + optional_string(l, "jump_to") + " (×" +
                          format_number(optional_number(l, "jump_ratio")) + ")") +
             "</li>";
  return s + "</ul>";
}

std::string worst_nodes_table(std::vector<NodeRow> nodes, size_t top) {
  // Unmeasurable (NaN) errors rank first, as in the text report.
  const auto key = [](const NodeRow& n) { return std::isnan(n.nmse) ? std::numeric_limits<double>::infinity() : n.nmse; };
  std::stable_sort(nodes.begin(), nodes.end(), [&](const NodeRow& a, const NodeRow& b) {
    return key(a) != key(b) ? key(a) > key(b) : a.name < b.name;
  });
  html::Table table({{"rank"}, {"node", false}, {"layer"}, {"NMSE"}, {"SQNR dB"}, {"cosine"}, {"max |Δ|"},
                     {"token NMSE p50"}, {"token NMSE p99"}});
  for (size_t i = 0; i < nodes.size() && i < top; ++i) {
    const NodeRow& n = nodes[i];
    table.add_row({std::to_string(i + 1), n.name, n.layer < 0 ? "–" : std::to_string(n.layer), format_number(n.nmse),
                   format_number(n.sqnr_db), format_number(n.cosine, 6), format_number(n.max_abs),
                   format_number(n.token_median), format_number(n.token_p99)});
  }
  return "<h3>The nodes with the highest error</h3>" + table.render("compare-worst-nodes") +
         "<p>Ranked by NMSE. The token p50/p99 columns show whether a node's error is spread evenly over the tokens "
         "(close together) or concentrated in a few (p99 far above p50).</p>";
}

std::string outside_layers_table(const std::vector<NodeRow>& nodes) {
  html::Table table({{"node", false}, {"NMSE"}, {"SQNR dB"}, {"cosine"}});
  for (const NodeRow& n : nodes)
    if (n.layer < 0) table.add_row({n.name, format_number(n.nmse), format_number(n.sqnr_db), format_number(n.cosine, 6)});
  if (table.size() == 0) return "";
  return "<p>Nodes outside the layers (the embedding, the output):</p>" + table.render("compare-outside-layers");
}

std::string routers_table(const JsonValue& doc) {
  const JsonValue* routers = doc.find("routers");
  if (!routers || routers->as_array().empty()) return "";
  html::Table table({{"layer"}, {"experts used"}, {"tokens"}, {"same set"}, {"same first"}, {"same selections"}});
  for (const JsonValue& r : routers->as_array())
    table.add_row({std::to_string(read_layer(r)),
                   html::format_integer(number(r, "n_used")) + " of " + html::format_integer(number(r, "n_expert")),
                   html::format_integer(number(r, "tokens")), html::format_percent(number(r, "set_agreement")),
                   html::format_percent(number(r, "top1_agreement")),
                   html::format_percent(number(r, "selection_agreement"))});
  return "<h3>Expert routing against the reference</h3>" + table.render("compare-routers") +
         "<p>How often the test model's router picks the reference's experts; a layer that agrees less is where a "
         "mixture of experts goes wrong first.</p>";
}

std::string network_html(const JsonValue& doc, const ReportOptions& options) {
  const std::vector<NodeRow> nodes = read_nodes(doc);
  std::string s = "<h3>Inside the network</h3>";
  if (nodes.empty()) return s + note("No node was compared (compare ran with --logits-only).");
  const bool any_in_layers = std::any_of(nodes.begin(), nodes.end(), [](const NodeRow& n) { return n.layer >= 0; });
  if (any_in_layers)
    s += depth_chart(nodes, options.metric);
  else
    s += note("No node inside the layers was compared (see --nodes).");
  s += outside_layers_table(nodes);
  if (const JsonValue* growth = doc.find("growth"); growth && growth->is_object()) {
    s += growth_sentences(*growth);
    if (!growth->at("layers").as_array().empty()) s += growth_chart(*growth);
  }
  s += worst_nodes_table(nodes, options.top);
  return s + routers_table(doc);
}

}  // namespace

Section compare_section(const InputDocument& input, const ReportOptions& options) {
  Section section{"compare", "Compare: where the test model deviates from the reference", ""};
  section.html = summary_html(input) + logits_html(input.doc) + network_html(input.doc, options);
  return section;
}

}  // namespace qlens::tools::report_detail
