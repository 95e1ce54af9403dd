#include "tools/compare/compare_report.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <utility>

#include "core/json_writer.h"
#include "tools/common/json_header.h"
#include "core/text_table.h"
#include "qlens/error.h"
#include "tools/compare/compare.h"

namespace qlens::tools {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string pad_left(const std::string& s, size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

std::string pad_right(const std::string& s, size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

// Shortest text that reads back to the same double ("inf", "nan" included).
std::string shortest(double v) {
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, result.ptr);
}

std::string format_ratio(double ratio) {
  if (std::isnan(ratio)) return "-";
  if (std::isinf(ratio)) return "×inf";
  return "×" + format(ratio >= 1000 ? "%.0f" : "%.1f", ratio);
}

std::string metric_cell(const NodeComparison& node, Metric metric) {
  if (metric == Metric::NMSE) return compact_scientific(node.nmse());
  const double db = node.sqnr_db();
  if (std::isinf(db)) return db > 0 ? "inf" : "-inf";
  return format("%.1f", db);
}

// The layers in ascending order, each with its nodes in graph order.
std::map<int, std::vector<const NodeComparison*>> nodes_by_layer(const std::vector<NodeComparison>& nodes) {
  std::map<int, std::vector<const NodeComparison*>> layers;
  for (const auto& node : nodes)
    if (node.layer >= 0) layers[node.layer].push_back(&node);
  return layers;
}

// Kinds of the layer nodes, in the order they first appear.
std::vector<std::string> layer_kinds_in_order(const std::vector<NodeComparison>& nodes) {
  std::vector<std::string> kinds;
  for (const auto& node : nodes)
    if (node.layer >= 0 && std::find(kinds.begin(), kinds.end(), node.kind) == kinds.end())
      kinds.push_back(node.kind);
  return kinds;
}

const NodeComparison* find_kind(const std::vector<const NodeComparison*>& layer_nodes, const std::string& kind) {
  for (const NodeComparison* node : layer_nodes)
    if (node->kind == kind) return node;
  return nullptr;
}

// The consecutive pair of a layer's nodes across which NMSE rises the most.
void find_largest_jump(const std::vector<const NodeComparison*>& layer_nodes, LayerGrowth& g) {
  for (size_t k = 1; k < layer_nodes.size(); ++k) {
    const double ratio = growth_ratio(layer_nodes[k - 1]->nmse(), layer_nodes[k]->nmse());
    if (std::isnan(ratio)) continue;
    if (std::isnan(g.jump_ratio) || ratio > g.jump_ratio) {
      g.jump_ratio = ratio;
      g.jump_from = layer_nodes[k - 1]->name;
      g.jump_to = layer_nodes[k]->name;
    }
  }
}

// Index of the entry with the highest finite-or-infinite value of `field`; -1 when all are NaN.
template <typename Field>
int index_of_highest(const std::vector<LayerGrowth>& layers, Field field) {
  int best = -1;
  for (size_t i = 0; i < layers.size(); ++i) {
    const double v = layers[i].*field;
    if (!std::isnan(v) && (best < 0 || v > layers[best].*field)) best = static_cast<int>(i);
  }
  return best;
}

std::string kind_of(const std::string& name) { return split_node_name(name).kind; }

std::string describe_crossing(const ThresholdCrossing& c) {
  const std::string threshold = compact_scientific(c.threshold, 0);
  if (c.node.empty()) return "error stays below " + threshold + " at every node";
  const std::string where = c.layer >= 0 ? "layer " + std::to_string(c.layer) + " (" + c.node + ")"
                                         : c.node + " (outside the layers)";
  return "error first exceeds " + threshold + " at " + where;
}

void print_growth_sentences(std::ostream& out, const ErrorGrowth& growth) {
  for (const auto& crossing : growth.first_exceeding) out << "  " << describe_crossing(crossing) << "\n";
  if (growth.largest_jump_index >= 0) {
    const LayerGrowth& g = growth.layers[growth.largest_jump_index];
    out << "  largest jump: layer " << g.layer << ", " << kind_of(g.jump_from) << " → " << kind_of(g.jump_to)
        << " (" << format_ratio(g.jump_ratio) << ")\n";
  }
  if (growth.largest_l_out_index >= 0) {
    const LayerGrowth& g = growth.layers[growth.largest_l_out_index];
    out << "  residual stream (l_out) grows most at layer " << g.layer << " (" << format_ratio(g.l_out_ratio)
        << " over layer " << g.layer - 1 << ")\n";
  }
}

void print_growth_table(std::ostream& out, const ErrorGrowth& growth) {
  out << "\nlayer  l_out NMSE  × prev layer  largest rise inside the layer\n";
  for (const auto& g : growth.layers) {
    std::string jump = "-";
    if (!g.jump_to.empty()) jump = kind_of(g.jump_from) + " → " + kind_of(g.jump_to) + " " + format_ratio(g.jump_ratio);
    const std::string l_out = std::isnan(g.l_out_nmse) ? "-" : compact_scientific(g.l_out_nmse);
    // "×" is two bytes and one column: pad its column by one byte more.
    const std::string ratio = format_ratio(g.l_out_ratio);
    const size_t ratio_width = ratio.rfind("×", 0) == 0 ? 13 : 12;
    out << pad_left(std::to_string(g.layer), 5) << "  " << pad_left(l_out, 10) << "  " << pad_left(ratio, ratio_width)
        << "  " << jump << "\n";
  }
}

void write_node_stats_json(JsonWriter& w, const NodeStats& s) {
  w.begin_object();
  w.key("count"); w.value(s.count);
  w.key("min"); w.value(s.min);
  w.key("max"); w.value(s.max);
  w.key("mean"); w.value(stats_mean(s));
  w.key("std"); w.value(stats_std(s));
  w.key("nan"); w.value(s.nan);
  w.key("inf"); w.value(s.inf);
  w.end_object();
}

void write_node_json(JsonWriter& w, const NodeComparison& n) {
  w.begin_object();
  w.key("node"); w.value(n.name);
  w.key("layer"); layer_or_null(w, n.layer);
  w.key("kind"); w.value(n.kind);
  w.key("count"); w.value(n.error.count);
  w.key("non_finite"); w.value(n.error.non_finite);
  w.key("rmse"); w.value(n.rmse());
  w.key("nmse"); w.value(n.nmse());
  w.key("sqnr_db"); w.value(n.sqnr_db());
  w.key("cosine"); w.value(n.cosine());
  w.key("max_abs"); w.value(n.max_abs());
  w.key("token_nmse_median"); w.value(n.token_nmse_median());
  w.key("token_nmse_p99"); w.value(n.token_nmse_p99());
  w.key("ref"); write_node_stats_json(w, n.ref);
  w.key("test"); write_node_stats_json(w, n.test);
  w.end_object();
}

void write_value_with_error(JsonWriter& w, const char* key, const ValueWithError& v) {
  w.key(key);
  w.begin_object();
  w.key("value"); w.value(v.value);
  w.key("error"); w.value(v.error);
  w.end_object();
}

void write_logits_json(JsonWriter& w, const LogitSummary& s) {
  w.begin_object();
  w.key("n_tokens_scored"); w.value(s.n_tokens);
  w.key("kld");
  w.begin_object();
  write_value_with_error(w, "mean", s.kld_mean);
  const std::pair<const char*, double> percentiles[] = {
      {"max", s.kld_max}, {"p99_9", s.kld_p99_9}, {"p99", s.kld_p99}, {"p95", s.kld_p95},
      {"p90", s.kld_p90}, {"median", s.kld_median}, {"p10", s.kld_p10}, {"p5", s.kld_p5},
      {"p1", s.kld_p1},   {"p0_1", s.kld_p0_1},   {"min", s.kld_min}};
  for (const auto& [key, value] : percentiles) {
    w.key(key);
    w.value(value);
  }
  w.end_object();
  write_value_with_error(w, "same_top", s.same_top);
  write_value_with_error(w, "delta_p_mean", s.delta_p_mean);
  write_value_with_error(w, "delta_p_rms", s.delta_p_rms);
  w.key("delta_p_min"); w.value(s.delta_p_min);
  w.key("delta_p_max"); w.value(s.delta_p_max);
  write_value_with_error(w, "ppl_ref", s.ppl_ref);
  write_value_with_error(w, "ppl_test", s.ppl_test);
  write_value_with_error(w, "ln_ppl_ratio", s.ln_ppl_ratio);
  write_value_with_error(w, "ppl_ratio", s.ppl_ratio);
  write_value_with_error(w, "ppl_diff", s.ppl_diff);
  w.key("ln_ppl_correlation"); w.value(s.ln_ppl_correlation);
  w.end_object();
}

void write_growth_json(JsonWriter& w, const ErrorGrowth& growth) {
  w.begin_object();
  w.key("first_exceeding");
  w.begin_array();
  for (const auto& c : growth.first_exceeding) {
    w.begin_object();
    w.key("threshold"); w.value(c.threshold);
    w.key("node"); string_or_null(w, c.node);
    w.key("layer"); layer_or_null(w, c.layer);
    w.end_object();
  }
  w.end_array();
  w.key("largest_jump_layer");
  if (growth.largest_jump_index >= 0) w.value(growth.layers[growth.largest_jump_index].layer); else w.null();
  w.key("largest_l_out_growth_layer");
  if (growth.largest_l_out_index >= 0) w.value(growth.layers[growth.largest_l_out_index].layer); else w.null();
  w.key("layers");
  w.begin_array();
  for (const auto& g : growth.layers) {
    w.begin_object();
    w.key("layer"); layer_or_null(w, g.layer);
    w.key("l_out_nmse"); w.value(g.l_out_nmse);
    w.key("l_out_ratio"); w.value(g.l_out_ratio);
    w.key("jump_from"); if (g.jump_from.empty()) w.null(); else w.value(g.jump_from);
    w.key("jump_to"); if (g.jump_to.empty()) w.null(); else w.value(g.jump_to);
    w.key("jump_ratio"); w.value(g.jump_ratio);
    w.end_object();
  }
  w.end_array();
  w.end_object();
}

// RFC 4180: quote a field holding a comma, quote or line break; double its quotes.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string quoted = "\"";
  for (char c : s) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

void write_stats_csv(std::ostream& out, const NodeStats& s) {
  out << ',' << s.count << ',' << shortest(s.min) << ',' << shortest(s.max) << ',' << shortest(stats_mean(s))
      << ',' << shortest(stats_std(s)) << ',' << s.nan << ',' << s.inf;
}

}  // namespace

NodeNameParts split_node_name(std::string_view full) {
  // "Qcur-0#2" (the second node named Qcur-0): layer 0, kind "Qcur#2".
  std::string_view name = full, occurrence;
  if (const size_t hash = full.rfind('#'); hash != std::string_view::npos) {
    name = full.substr(0, hash);
    occurrence = full.substr(hash);
  }
  const size_t dash = name.rfind('-');
  const bool has_layer = dash != std::string_view::npos && dash > 0 && dash + 1 < name.size() &&
                         std::all_of(name.begin() + dash + 1, name.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!has_layer) return {-1, std::string(full)};
  int layer = -1;
  const auto [ptr, ec] = std::from_chars(name.data() + dash + 1, name.data() + name.size(), layer);
  if (ec != std::errc() || ptr != name.data() + name.size()) return {-1, std::string(full)};
  return {layer, std::string(name.substr(0, dash)) + std::string(occurrence)};
}

double stats_mean(const NodeStats& s) { return s.count ? s.sum / s.count : 0.0; }

double stats_std(const NodeStats& s) {
  if (s.count == 0) return 0.0;
  const double mean = s.sum / s.count;
  // Rounding can make the difference slightly negative for constant values.
  return std::sqrt(std::max(0.0, s.sum_sq / s.count - mean * mean));
}

double NodeComparison::rmse() const { return error.count ? std::sqrt(error.sum_sq_diff / error.count) : 0.0; }

double NodeComparison::nmse() const {
  if (error.sum_sq_diff == 0) return 0.0;
  if (error.sum_sq_a == 0) return kInf;
  return error.sum_sq_diff / error.sum_sq_a;
}

double NodeComparison::sqnr_db() const { return -10.0 * std::log10(nmse()); }

double NodeComparison::cosine() const {
  if (error.sum_sq_a == 0 && error.sum_sq_b == 0) return 1.0;
  const double norms = std::sqrt(error.sum_sq_a * error.sum_sq_b);
  if (norms == 0) return 0.0;
  // Rounding in the sums can carry the quotient a hair past ±1.
  return std::clamp(error.sum_ab / norms, -1.0, 1.0);
}

NodeComparison make_node_comparison(std::string name, const NodeStats& ref, const NodeStats& test,
                                    const ErrorStats& error) {
  NodeNameParts parts = split_node_name(name);
  NodeComparison c;
  c.name = std::move(name);
  c.layer = parts.layer;
  c.kind = std::move(parts.kind);
  c.ref = ref;
  c.test = test;
  c.error = error;
  return c;
}

double growth_ratio(double prev_nmse, double cur_nmse) {
  if (std::isnan(prev_nmse) || std::isnan(cur_nmse)) return std::numeric_limits<double>::quiet_NaN();
  if (prev_nmse == 0) return cur_nmse == 0 ? 1.0 : kInf;
  return cur_nmse / prev_nmse;
}

ErrorGrowth analyze_error_growth(const std::vector<NodeComparison>& nodes, const std::vector<double>& thresholds) {
  ErrorGrowth growth;
  const auto layers = nodes_by_layer(nodes);
  const NodeComparison* prev_l_out = nullptr;
  int prev_layer = -2;
  for (const auto& [layer, layer_nodes] : layers) {
    LayerGrowth g;
    g.layer = layer;
    const NodeComparison* l_out = find_kind(layer_nodes, "l_out");
    if (l_out) g.l_out_nmse = l_out->nmse();
    if (l_out && prev_l_out && prev_layer == layer - 1) g.l_out_ratio = growth_ratio(prev_l_out->nmse(), g.l_out_nmse);
    find_largest_jump(layer_nodes, g);
    growth.layers.push_back(std::move(g));
    prev_l_out = l_out;
    prev_layer = layer;
  }
  growth.largest_jump_index = index_of_highest(growth.layers, &LayerGrowth::jump_ratio);
  growth.largest_l_out_index = index_of_highest(growth.layers, &LayerGrowth::l_out_ratio);

  for (double threshold : thresholds) {
    ThresholdCrossing crossing;
    crossing.threshold = threshold;
    for (const auto& node : nodes) {
      if (node.nmse() > threshold) {
        crossing.node = node.name;
        crossing.layer = node.layer;
        break;
      }
    }
    growth.first_exceeding.push_back(std::move(crossing));
  }
  return growth;
}

void print_error_growth(std::ostream& out, const ErrorGrowth& growth) {
  out << "Where the error grows (NMSE = Σ(ref-test)²/Σref²):\n";
  print_growth_sentences(out, growth);
  if (!growth.layers.empty()) print_growth_table(out, growth);
}

void print_layer_table(std::ostream& out, const std::vector<NodeComparison>& nodes, Metric metric) {
  out << (metric == Metric::NMSE ? "NMSE per node (lower is better)" : "SQNR per node in dB (higher is better)")
      << "; rows: layers, columns: node kinds, -: not compared\n";
  const auto layers = nodes_by_layer(nodes);
  const std::vector<std::string> kinds = layer_kinds_in_order(nodes);

  // Cells first, so each column can be as wide as its widest entry.
  std::vector<std::vector<std::string>> cells;
  std::vector<size_t> widths;
  for (const auto& kind : kinds) widths.push_back(kind.size());
  for (const auto& [layer, layer_nodes] : layers) {
    std::vector<std::string> row;
    for (size_t k = 0; k < kinds.size(); ++k) {
      const NodeComparison* node = find_kind(layer_nodes, kinds[k]);
      row.push_back(node ? metric_cell(*node, metric) : "-");
      widths[k] = std::max(widths[k], row.back().size());
    }
    cells.push_back(std::move(row));
  }

  if (!layers.empty()) {
    out << "layer";
    for (size_t k = 0; k < kinds.size(); ++k) out << "  " << pad_left(kinds[k], widths[k]);
    out << "\n";
    size_t r = 0;
    for (const auto& entry : layers) {
      out << pad_left(std::to_string(entry.first), 5);
      for (size_t k = 0; k < kinds.size(); ++k) out << "  " << pad_left(cells[r][k], widths[k]);
      out << "\n";
      ++r;
    }
  }

  std::string outside;
  for (const auto& node : nodes) {
    if (node.layer >= 0) continue;
    outside += (outside.empty() ? "" : ", ") + node.name + " " + metric_cell(node, metric);
  }
  if (!outside.empty()) out << "outside the layers: " << outside << "\n";
}

std::vector<NodeComparison> top_worst(const std::vector<NodeComparison>& nodes, size_t n) {
  // NaN is ranked as the worst: it means the error could not be measured.
  const auto rank_key = [](const NodeComparison& c) {
    const double v = c.nmse();
    return std::isnan(v) ? kInf : v;
  };
  std::vector<NodeComparison> sorted = nodes;
  std::stable_sort(sorted.begin(), sorted.end(), [&](const NodeComparison& a, const NodeComparison& b) {
    const double ka = rank_key(a), kb = rank_key(b);
    if (ka != kb) return ka > kb;
    return a.name < b.name;
  });
  if (sorted.size() > n) sorted.resize(n);
  return sorted;
}

void print_top_worst(std::ostream& out, const std::vector<NodeComparison>& worst) {
  size_t name_width = 4;
  for (const auto& node : worst) name_width = std::max(name_width, node.name.size());
  out << "Nodes with the highest error (by NMSE)\n";
  out << "rank  " << pad_right("node", name_width)
      << "     NMSE  SQNR dB    cosine    max|Δ|  token NMSE p50  token NMSE p99\n";
  for (size_t i = 0; i < worst.size(); ++i) {
    const NodeComparison& n = worst[i];
    out << pad_left(std::to_string(i + 1), 4) << "  " << pad_right(n.name, name_width) << "  "
        << pad_left(compact_scientific(n.nmse()), 7) << "  " << pad_left(metric_cell(n, Metric::SQNR), 7) << "  "
        << pad_left(format("%.6f", n.cosine()), 8) << "  " << pad_left(compact_scientific(n.max_abs(), 2), 8) << "  "
        << pad_left(compact_scientific(n.token_nmse_median()), 14) << "  "
        << pad_left(compact_scientific(n.token_nmse_p99()), 14) << "\n";
  }
}

void RouterAgreement::add(const std::vector<int32_t>& ref, const std::vector<int32_t>& test) {
  if (ref.size() != test.size() || n_used <= 0 || ref.size() % n_used != 0)
    throw Error("router agreement: the routers chose " + std::to_string(ref.size()) + " and " +
                std::to_string(test.size()) + " experts, not a multiple of " + std::to_string(n_used));
  for (size_t t = 0; t < ref.size() / n_used; ++t) {
    const int32_t* r = ref.data() + t * n_used;
    const int32_t* q = test.data() + t * n_used;
    int64_t changed = 0;
    for (int64_t u = 0; u < n_used; ++u) changed += std::find(r, r + n_used, q[u]) == r + n_used;
    ++tokens;
    experts_changed += changed;
    set_differs += changed > 0;
    top1_differs += r[0] != q[0];
  }
}

void print_router_agreement(std::ostream& out, const std::vector<RouterAgreement>& routers) {
  if (routers.empty()) return;
  TextTable table({{"layer"}, {"experts"}, {"tokens"}, {"same set"}, {"same first"}, {"same selections"}});
  for (const RouterAgreement& r : routers) {
    char set[32], top[32], sel[32];
    std::snprintf(set, sizeof set, "%.3f%%", 100 * r.set_agreement());
    std::snprintf(top, sizeof top, "%.3f%%", 100 * r.top1_agreement());
    std::snprintf(sel, sizeof sel, "%.3f%%", 100 * r.selection_agreement());
    table.add_row({std::to_string(r.layer), std::to_string(r.n_used) + " of " + std::to_string(r.n_expert),
                   std::to_string(r.tokens), set, top, sel});
  }
  table.print(out);
  out << "same set: tokens routed to the same experts as by the reference; same first: the same top\n"
         "expert; same selections: of all (token, expert) choices, those the reference made too.\n";
}

void write_compare_json(std::ostream& out, const CompareMeta& meta, const std::vector<NodeComparison>& nodes,
                        const LogitSummary& logits, const ErrorGrowth& growth,
                        const std::vector<RouterAgreement>& routers) {
  JsonWriter w(out, /*pretty=*/true);
  write_json_header(w, "qlens compare", kCompareJsonSchemaVersion,
                    {{"ref", meta.ref_path}, {"model", meta.test_path}, {"text", meta.text_path}});
  w.key("settings");
  w.begin_object();
  w.key("n_ctx"); w.value(meta.n_ctx);
  w.key("n_batch"); w.value(meta.n_batch);
  w.key("n_chunks"); w.value(meta.n_chunks);
  w.end_object();
  w.key("n_tokens_evaluated"); w.value(meta.n_tokens);
  w.key("logits"); write_logits_json(w, logits);
  w.key("nodes");
  w.begin_array();
  for (const auto& node : nodes) write_node_json(w, node);
  w.end_array();
  w.key("growth"); write_growth_json(w, growth);
  w.key("routers");
  w.begin_array();
  for (const RouterAgreement& r : routers) {
    w.begin_object();
    w.key("layer"); w.value(r.layer);
    w.key("n_expert"); w.value(r.n_expert);
    w.key("n_used"); w.value(r.n_used);
    w.key("tokens"); w.value(r.tokens);
    w.key("set_agreement"); w.value(r.set_agreement());
    w.key("top1_agreement"); w.value(r.top1_agreement());
    w.key("selection_agreement"); w.value(r.selection_agreement());
    w.end_object();
  }
  w.end_array();
  w.end_object();
  out << "\n";
}

void write_compare_csv(std::ostream& out, const std::vector<NodeComparison>& nodes) {
  out << "node,layer,kind,count,non_finite,rmse,nmse,sqnr_db,cosine,max_abs,token_nmse_median,token_nmse_p99,"
         "ref_count,ref_min,ref_max,ref_mean,ref_std,ref_nan,ref_inf,"
         "test_count,test_min,test_max,test_mean,test_std,test_nan,test_inf\n";
  for (const auto& n : nodes) {
    out << csv_field(n.name) << ',' << (n.layer >= 0 ? std::to_string(n.layer) : std::string()) << ',' << csv_field(n.kind) << ',' << n.error.count << ','
        << n.error.non_finite << ',' << shortest(n.rmse()) << ',' << shortest(n.nmse()) << ','
        << shortest(n.sqnr_db()) << ',' << shortest(n.cosine()) << ',' << shortest(n.max_abs()) << ','
        << shortest(n.token_nmse_median()) << ',' << shortest(n.token_nmse_p99());
    write_stats_csv(out, n.ref);
    write_stats_csv(out, n.test);
    out << "\n";
  }
}

std::string compact_scientific(double v, int digits) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return "0";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*e", digits, v);
  // "1.2e-05" → "1.2e-5", "3.0e+02" → "3.0e2": the padding only widens columns.
  std::string text = buf;
  const size_t e = text.find('e');
  const std::string mantissa = text.substr(0, e);
  const int exponent = std::stoi(text.substr(e + 1));
  return mantissa + "e" + std::to_string(exponent);
}

void print_compare(std::ostream& out, const CompareResult& r, Metric metric, int64_t top) {
  out << "\n== Logits (" << r.logits.n_tokens << " tokens scored) ==\n";
  print_logit_summary(out, r.logits);
  out << "\n== " << (metric == Metric::NMSE ? "NMSE" : "SQNR (dB)") << " by layer and node ==\n";
  print_layer_table(out, r.nodes, metric);
  out << "\n== Where the error grows ==\n";
  print_error_growth(out, r.growth);
  if (!r.routers.empty()) {
    out << "\n== Expert routing against the reference ==\n";
    print_router_agreement(out, r.routers);
  }
  if (top > 0) {
    out << "\n== The " << top << " worst nodes ==\n";
    print_top_worst(out, top_worst(r.nodes, static_cast<size_t>(top)));
  }
}

std::string compare_json(const CompareResult& r) {
  std::ostringstream s;
  write_compare_json(s, r.meta, r.nodes, r.logits, r.growth, r.routers);
  s << "\n";
  return s.str();
}

std::string compare_logits_file_json(const std::string& base_path, const std::string& test_path, int64_t n_ctx,
                                     int64_t n_chunks, const LogitSummary& logits) {
  CompareMeta meta;
  meta.ref_path = base_path;
  meta.test_path = test_path;
  meta.n_ctx = meta.n_batch = n_ctx;
  meta.n_chunks = n_chunks;
  meta.n_tokens = n_chunks * n_ctx;
  std::ostringstream s;
  write_compare_json(s, meta, {}, logits, analyze_error_growth({}));
  s << "\n";
  return s.str();
}

}  // namespace qlens::tools
