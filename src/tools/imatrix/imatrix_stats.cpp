#include "tools/imatrix/imatrix_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <optional>
#include <utility>

#include "core/json_writer.h"
#include "tools/common/json_header.h"
#include "tools/common/tensor_names.h"
#include "core/text_table.h"
#include "qlens/error.h"

namespace qlens::tools {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string describe_file(const std::string& path) {
  return path.empty() ? std::string("an in-memory imatrix") : "'" + path + "'";
}

std::string describe_shape(const ImatrixEntry& e) {
  return std::to_string(e.n_cols) + " columns x " + std::to_string(e.n_mat) + (e.n_mat == 1 ? " matrix" : " matrices");
}

// Loaded files are consistent already; entries built in memory may not be, and
// every loop below indexes by the declared shape.
void check_entry_shape(const std::string& name, const ImatrixEntry& e, const std::string& path) {
  const bool shape_ok = e.n_cols > 0 && e.n_mat > 0 && e.counts.size() == static_cast<size_t>(e.n_mat) &&
                        e.sum2.size() == static_cast<size_t>(e.n_cols * e.n_mat);
  if (!shape_ok)
    throw Error(describe_file(path) + ": imatrix entry '" + name + "' declares " + describe_shape(e) + " but holds " +
                std::to_string(e.sum2.size()) + " sums and " + std::to_string(e.counts.size()) + " counts");
}

void check_same_shape(const std::string& name, const ImatrixEntry& a, const std::string& a_path,
                      const ImatrixEntry& b, const std::string& b_path) {
  if (a.n_cols != b.n_cols || a.n_mat != b.n_mat)
    throw Error("cannot combine importance matrices: tensor '" + name + "' has " + describe_shape(a) + " in " +
                describe_file(a_path) + " but " + describe_shape(b) + " in " + describe_file(b_path) +
                " (were they collected on different models?)");
}

void add_entry(ImatrixEntry& into, const ImatrixEntry& other) {
  for (size_t i = 0; i < into.sum2.size(); ++i) into.sum2[i] += other.sum2[i];
  for (size_t i = 0; i < into.counts.size(); ++i) into.counts[i] += other.counts[i];
}

void unite_datasets(std::vector<std::string>& into, const std::vector<std::string>& other) {
  for (const std::string& d : other)
    if (std::find(into.begin(), into.end(), d) == into.end()) into.push_back(d);
}

// A chunk size of 0 means "not recorded" (legacy .dat files do not store it).
int64_t combined_chunk_size(const Imatrix& into, const Imatrix& other) {
  if (into.chunk_size == 0) return other.chunk_size;
  if (other.chunk_size == 0 || other.chunk_size == into.chunk_size) return into.chunk_size;
  throw Error("cannot combine importance matrices collected with different chunk sizes: " +
              std::to_string(into.chunk_size) + " in " + describe_file(into.path) + ", " +
              std::to_string(other.chunk_size) + " in " + describe_file(other.path));
}

// ---- statistics ----

struct BlockName {
  int layer;
  std::string kind;
};

// "blk.12.attn_q.weight" -> {12, "attn_q.weight"}; anything else -> nullopt.
std::optional<BlockName> parse_block_name(const std::string& name) {
  const std::string prefix = "blk.";
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  size_t pos = prefix.size();
  int layer = 0;
  size_t digits = 0;
  constexpr size_t kMaxLayerDigits = 6;  // keeps `layer` far from overflow
  while (pos < name.size() && name[pos] >= '0' && name[pos] <= '9' && digits < kMaxLayerDigits) {
    layer = layer * 10 + (name[pos] - '0');
    ++pos;
    ++digits;
  }
  if (digits == 0 || pos + 1 >= name.size() || name[pos] != '.') return std::nullopt;
  return BlockName{layer, name.substr(pos + 1)};
}

// Per-column mean square, experts pooled (see the header).
std::vector<double> pooled_mean_squares(const ImatrixEntry& e, double total_rows) {
  std::vector<double> v(static_cast<size_t>(e.n_cols), 0.0);
  for (int64_t mat = 0; mat < e.n_mat; ++mat)
    for (int64_t j = 0; j < e.n_cols; ++j) v[j] += e.sum2[mat * e.n_cols + j];
  for (double& x : v) x /= total_rows;
  return v;
}

void describe_distribution(const std::vector<double>& v, ImatrixTensorStats& s) {
  const double n = static_cast<double>(v.size());
  s.sum = 0;
  for (double x : v) s.sum += x;
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  s.mean = s.sum / n;
  double squared_deviations = 0;  // two passes: exact 0 for equal columns
  for (double x : v) squared_deviations += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(squared_deviations / n);

  const double active_threshold = kImatrixActiveRelativeThreshold * s.mean;
  const auto active = std::count_if(v.begin(), v.end(), [&](double x) { return x > active_threshold; });
  s.active_fraction = static_cast<double>(active) / n;

  // With std 0 no column stands apart (and the division would be 0/0).
  const auto far = s.std > 0 ? std::count_if(v.begin(), v.end(), [&](double x) { return std::fabs(x - s.mean) > s.std; })
                             : 0;
  s.zscore_above_1_fraction = static_cast<double>(far) / n;
}

void keep_top_columns(const std::vector<double>& v, ImatrixTensorStats& s) {
  std::vector<int64_t> order(v.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  const size_t kept = std::min(kImatrixTopColumns, order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(kept), order.end(),
                    [&](int64_t a, int64_t b) { return v[a] != v[b] ? v[a] > v[b] : a < b; });
  s.top_columns.clear();
  for (size_t i = 0; i < kept; ++i) s.top_columns.push_back({order[i], v[order[i]]});
}

void describe_concentration(const std::vector<double>& v, ImatrixTensorStats& s) {
  if (!(s.sum > 0)) {  // all columns zero: no distribution to speak of
    s.entropy = kNaN;
    s.normalized_entropy = kNaN;
    return;
  }
  double entropy = 0;
  for (double x : v) {
    const double p = x / s.sum;
    if (p > 0) entropy -= p * std::log2(p);
  }
  s.entropy = entropy;
  s.normalized_entropy = v.size() > 1 ? entropy / std::log2(static_cast<double>(v.size())) : kNaN;
}

double cosine_similarity(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return kNaN;
  double dot = 0, norm_a = 0, norm_b = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    norm_a += a[i] * a[i];
    norm_b += b[i] * b[i];
  }
  if (!(norm_a > 0) || !(norm_b > 0)) return kNaN;
  return dot / std::sqrt(norm_a * norm_b);
}

// Block tensors first, numerically by layer; then the rest; by name within.
bool tensor_order(const ImatrixTensorStats& a, const ImatrixTensorStats& b) {
  const bool a_outside = a.layer < 0, b_outside = b.layer < 0;
  if (a_outside != b_outside) return b_outside;
  if (a.layer != b.layer) return a.layer < b.layer;
  return a.name < b.name;
}

// Mean of the values that are not NaN; NaN when there are none.
class MeanOfDefined {
 public:
  void add(double x) {
    if (std::isnan(x)) return;
    sum_ += x;
    ++n_;
  }
  double mean() const { return n_ > 0 ? sum_ / n_ : kNaN; }

 private:
  double sum_ = 0;
  int n_ = 0;
};

std::vector<ImatrixLayerStats> summarize_layers(const std::vector<ImatrixTensorStats>& tensors) {
  struct Accumulator {
    int n_tensors = 0;
    MeanOfDefined normalized_entropy, zscore, cosine;
    double sum = 0;
  };
  std::map<int, Accumulator> by_layer;
  for (const ImatrixTensorStats& t : tensors) {
    if (t.layer < 0) continue;
    Accumulator& acc = by_layer[t.layer];
    ++acc.n_tensors;
    acc.normalized_entropy.add(t.normalized_entropy);
    acc.zscore.add(t.zscore_above_1_fraction);
    acc.cosine.add(t.cosine_prev_layer);
    acc.sum += t.sum;
  }
  std::vector<ImatrixLayerStats> layers;
  for (const auto& [layer, acc] : by_layer) {
    ImatrixLayerStats l;
    l.layer = layer;
    l.n_tensors = acc.n_tensors;
    l.mean_normalized_entropy = acc.normalized_entropy.mean();
    l.mean_zscore_above_1_fraction = acc.zscore.mean();
    l.mean_cosine_prev_layer = acc.cosine.mean();
    l.sum = acc.sum;
    layers.push_back(l);
  }
  return layers;
}

// ---- text output ----


// Values are printed with fixed decimals or 4 significant digits; NaN as "-".
std::string format_number(double x, const char* format) {
  if (std::isnan(x)) return "-";
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, x);
  return buffer;
}
std::string significant(double x) { return format_number(x, "%.4g"); }
std::string fixed3(double x) { return format_number(x, "%.3f"); }
std::string fixed2(double x) { return format_number(x, "%.2f"); }
std::string percent(double fraction) { return format_number(100 * fraction, "%.1f%%"); }

bool has_experts(const ImatrixStatistics& s) {
  return std::any_of(s.tensors.begin(), s.tensors.end(), [](const ImatrixTensorStats& t) { return t.n_mat > 1; });
}

void print_header(std::ostream& out, const ImatrixStatistics& s) {
  out << "imatrix statistics: " << (s.path.empty() ? std::string("(in memory)") : s.path) << '\n';
  out << "datasets: ";
  if (s.datasets.empty()) out << "(not recorded)";
  for (size_t i = 0; i < s.datasets.size(); ++i) out << (i > 0 ? ", " : "") << s.datasets[i];
  out << "\nchunks: " << s.chunk_count << ", chunk size: ";
  if (s.chunk_size > 0)
    out << s.chunk_size;
  else
    out << "(not recorded)";
  out << "\ntensors: " << s.tensors.size() << ", layers: " << s.layers.size() << "\n\n";
}

void print_tensor_table(std::ostream& out, const ImatrixStatistics& s) {
  const bool experts = has_experts(s);
  std::vector<TextTable::Column> columns = {{"layer"}, {"tensor", true}, {"cols"}};
  if (experts) columns.push_back({"experts used"});
  for (const char* h : {"sum(act^2)", "min", "max", "mean", "std", "active", "entropy", "norm.H", "|z|>1", "cos prev"})
    columns.push_back({h});
  TextTable table(std::move(columns));
  for (const ImatrixTensorStats& t : s.tensors) {
    std::vector<std::string> row = {t.layer >= 0 ? std::to_string(t.layer) : "-", t.kind, std::to_string(t.n_cols)};
    if (experts) row.push_back(std::to_string(t.n_mat - t.unused_experts) + "/" + std::to_string(t.n_mat));
    for (std::string cell : {significant(t.sum), significant(t.min), significant(t.max), significant(t.mean),
                             significant(t.std), percent(t.active_fraction), fixed2(t.entropy),
                             fixed3(t.normalized_entropy), percent(t.zscore_above_1_fraction),
                             fixed3(t.cosine_prev_layer)})
      row.push_back(std::move(cell));
    table.add_row(std::move(row));
  }
  table.print(out);
}

void print_layer_table(std::ostream& out, const ImatrixStatistics& s) {
  TextTable table({{"layer"}, {"tensors"}, {"mean norm.H"}, {"mean |z|>1"}, {"mean cos prev"}, {"sum(act^2)"}});
  for (const ImatrixLayerStats& l : s.layers)
    table.add_row({std::to_string(l.layer), std::to_string(l.n_tensors), fixed3(l.mean_normalized_entropy),
                   percent(l.mean_zscore_above_1_fraction), fixed3(l.mean_cosine_prev_layer), significant(l.sum)});
  table.print(out);
}

std::string id_list(const std::vector<int64_t>& ids) {
  if (ids.empty()) return "-";
  std::string out;
  const size_t shown = std::min<size_t>(ids.size(), 12);
  for (size_t i = 0; i < shown; ++i) {
    if (i) out += ' ';
    out += std::to_string(ids[i]);
  }
  if (shown < ids.size()) out += " ... (" + std::to_string(ids.size()) + ")";
  return out;
}

void print_expert_usage(std::ostream& out, const ImatrixStatistics& s) {
  if (s.expert_usage.empty()) return;
  out << "\nExpert usage (rows the router sent to each expert):\n";
  TextTable table({{"layer"}, {"experts"}, {"used"}, {"rows min"}, {"median"}, {"max"}, {"max/even"}, {"norm.H"},
                   {"unused", true}, {"rare", true}});
  for (const ImatrixExpertUsage& u : s.expert_usage) {
    std::vector<double> sorted = u.rows;
    std::sort(sorted.begin(), sorted.end());
    table.add_row({std::to_string(u.layer), std::to_string(u.n_expert),
                   std::to_string(u.n_expert - static_cast<int64_t>(u.unused.size())), significant(sorted.front()),
                   significant(sorted[sorted.size() / 2]), significant(sorted.back()), fixed2(u.max_over_even),
                   fixed3(u.normalized_entropy), id_list(u.unused), id_list(u.rare)});
  }
  table.print(out);
}

void print_skipped(std::ostream& out, const ImatrixStatistics& s) {
  if (s.skipped.empty()) return;
  out << "\nskipped (no activation rows were counted for them, so they have no importance to describe):\n";
  for (const std::string& name : s.skipped) out << "  " << name << '\n';
}

constexpr const char* kExpertsLegend = R"(  experts used for mixture-of-experts weights: experts that saw at least one row.
               Their rows are pooled: v_j is the mean square over all of them.
)";

constexpr const char* kLegend = R"(How to read these tables
  Each figure describes v_j, the mean square of the activations entering input
  column j of the weight (sum of x^2 over the calibration rows / rows). The
  imatrix tells the quantizer to keep the columns with a large v_j most exact.

  layer        N of blk.N; "-" for tensors outside the blocks (output, ...)
  cols         input columns (the weight's row length)
  sum(act^2)   sum of v_j over the columns: the overall energy of the input.
               Compare it between layers, not between tensors of different widths.
  min max mean std
               of v_j over the columns (std: population standard deviation).
               max far above mean: a few columns carry outlier activations.
  active       share of columns with v_j above 1e-5 x mean. Below 100%: some
               inputs are (almost) never used; their weights matter little.
  entropy      -sum p_j log2 p_j with p_j = v_j / sum(act^2), in bits; at most log2(cols).
  norm.H       entropy / log2(cols), from 0 to 1.
               Near 1: importance is spread evenly over the columns; an imatrix
               changes little for this tensor.
               Low: a few input columns dominate. These tensors benefit most
               from an imatrix (and lose most when quantized without one).
  |z|>1        share of columns whose v_j is more than one std from the mean.
               0%: all columns alike. Roughly 30-40% is ordinary for a smooth
               spread; a few % together with a high max/mean: a handful of
               outlier columns stand far apart from an otherwise flat rest.
  cos prev     cosine similarity of v with the same tensor of the previous layer.
               Near 1: this layer sees inputs like the previous one. Lower: the
               make-up of the input changes at this layer. "-": no previous layer.
)";

constexpr const char* kExpertUsageLegend = R"(  Expert usage: per layer, the rows (a token once for each expert it was routed to)
               each expert received from the calibration text.
  max/even     the busiest expert's rows over an even share (rows / experts); 1 is even.
  norm.H       entropy of the routing, -sum p_e log2 p_e / log2(experts): 1 even, 0 one expert.
  unused       experts no token reached: they have no importance data; quantize gives
               every column of theirs importance 1 (as llama.cpp, whose .dat stores 1s).
  rare         experts with under 10% of an even share: their importance rests on few
               tokens. Many unused or rare experts: use a longer or more varied text.
)";

constexpr const char* kLayerLegend = R"(  Layer table: tensors counted per layer, the means of their norm.H, |z|>1 and
               cos prev, and the layer's total sum(act^2).
)";

// ---- JSON output ----

void write_tensor_json(JsonWriter& w, const ImatrixTensorStats& t) {
  w.begin_object();
  w.key("tensor"); w.value(t.name);
  w.key("layer"); layer_or_null(w, t.layer);
  w.key("role"); w.value(tensor_role(t.name));
  w.key("n_cols"); w.value(t.n_cols);
  w.key("n_mat"); w.value(t.n_mat);
  w.key("unused_experts"); w.value(t.unused_experts);
  w.key("rows"); w.value(t.rows);
  w.key("sum_act2"); w.value(t.sum);
  w.key("min"); w.value(t.min);
  w.key("max"); w.value(t.max);
  w.key("mean"); w.value(t.mean);
  w.key("std"); w.value(t.std);
  w.key("active_fraction"); w.value(t.active_fraction);
  w.key("entropy"); w.value(t.entropy);
  w.key("normalized_entropy"); w.value(t.normalized_entropy);
  w.key("zscore_above_1_fraction"); w.value(t.zscore_above_1_fraction);
  w.key("cosine_prev_layer"); w.value(t.cosine_prev_layer);
  w.key("top_columns");
  w.begin_array();
  for (const ImatrixTensorStats::Column& c : t.top_columns) {
    w.begin_object();
    w.key("column"); w.value(c.index);
    w.key("value"); w.value(c.value);
    w.end_object();
  }
  w.end_array();
  w.end_object();
}

void write_layer_json(JsonWriter& w, const ImatrixLayerStats& l) {
  w.begin_object();
  w.key("layer"); w.value(l.layer);
  w.key("n_tensors"); w.value(l.n_tensors);
  w.key("mean_normalized_entropy"); w.value(l.mean_normalized_entropy);
  w.key("mean_zscore_above_1_fraction"); w.value(l.mean_zscore_above_1_fraction);
  w.key("mean_cosine_prev_layer"); w.value(l.mean_cosine_prev_layer);
  w.key("sum_act2"); w.value(l.sum);
  w.end_object();
}

std::vector<ImatrixExpertUsage> summarize_expert_usage(const Imatrix& m) {
  std::vector<ImatrixExpertUsage> out;
  for (const auto& [name, e] : m.entries) {  // name order: the first expert tensor of each layer
    auto block = parse_block_name(name);
    if (e.n_mat <= 1 || !block) continue;
    if (!out.empty() && out.back().layer == block->layer) continue;
    ImatrixExpertUsage u;
    u.layer = block->layer;
    u.tensor = name;
    u.n_expert = e.n_mat;
    u.rows = e.counts;
    for (double r : u.rows) u.total += r;
    const double even = u.total / static_cast<double>(u.n_expert);
    double top = 0;
    for (int64_t x = 0; x < u.n_expert; ++x) {
      const double r = u.rows[x];
      top = std::max(top, r);
      if (!(r > 0))
        u.unused.push_back(x);
      else if (r < kImatrixRareExpertShare * even)
        u.rare.push_back(x);
      if (r > 0 && u.total > 0) u.entropy -= (r / u.total) * std::log2(r / u.total);
    }
    u.normalized_entropy = u.n_expert > 1 ? u.entropy / std::log2(static_cast<double>(u.n_expert)) : 0.0;
    u.max_over_even = even > 0 ? top / even : 0.0;
    out.push_back(std::move(u));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.layer < b.layer; });
  return out;
}

}  // namespace

void combine_imatrix(Imatrix& into_in, const Imatrix& other_in) {
  // A .dat counts chunks, a GGUF rows: bring both to rows when they differ
  // (on copies, so that a failed combine leaves `into` intact).
  Imatrix into_rows, other_rows;
  Imatrix* into_ptr = &into_in;
  const Imatrix* other_ptr = &other_in;
  if (into_in.counts_in_chunks != other_in.counts_in_chunks) {
    const int64_t rows_chunk = into_in.counts_in_chunks ? other_in.chunk_size : into_in.chunk_size;
    if (rows_chunk <= 0)
      throw Error("cannot combine " + describe_file(into_in.path) + " and " + describe_file(other_in.path) +
                  ": one counts chunks (.dat), the other rows, and neither records the chunk size");
    if (into_in.counts_in_chunks) {
      into_rows = into_in;
      convert_counts_to_rows(into_rows, rows_chunk);
      into_ptr = &into_rows;
    } else {
      other_rows = other_in;
      convert_counts_to_rows(other_rows, rows_chunk);
      other_ptr = &other_rows;
    }
  }
  Imatrix& into = *into_ptr;
  const Imatrix& other = *other_ptr;
  for (const auto& [name, e] : into.entries) check_entry_shape(name, e, into.path);
  for (const auto& [name, e] : other.entries) check_entry_shape(name, e, other.path);
  // Every check before any change, so a failed combine leaves `into` intact.
  for (const auto& [name, e] : other.entries)
    if (auto it = into.entries.find(name); it != into.entries.end())
      check_same_shape(name, it->second, into.path, e, other.path);
  const int64_t chunk_size = combined_chunk_size(into, other);

  for (const auto& [name, e] : other.entries) {
    auto [it, inserted] = into.entries.try_emplace(name, e);
    if (!inserted) add_entry(it->second, e);
  }
  unite_datasets(into.datasets, other.datasets);
  into.chunk_count += other.chunk_count;
  into.chunk_size = chunk_size;
  if (into.model_name.empty()) into.model_name = other.model_name;
  if (into_ptr != &into_in) into_in = std::move(into);
}

Imatrix combine_imatrix_files(const std::vector<std::string>& paths) {
  if (paths.empty()) throw Error("combine_imatrix_files: no imatrix files given");
  Imatrix combined = load_imatrix(paths.front());
  for (size_t i = 1; i < paths.size(); ++i) {
    combine_imatrix(combined, load_imatrix(paths[i]));
    combined.path += " + " + paths[i];
  }
  return combined;
}

ImatrixStatistics compute_imatrix_statistics(const Imatrix& m) {
  ImatrixStatistics s;
  s.path = m.path;
  s.datasets = m.datasets;
  s.chunk_count = m.chunk_count;
  s.chunk_size = m.chunk_size;

  std::map<std::pair<int, std::string>, std::vector<double>> block_importance;  // for the previous-layer cosine
  for (const auto& [name, e] : m.entries) {
    check_entry_shape(name, e, m.path);
    ImatrixTensorStats t;
    t.name = name;
    t.n_cols = e.n_cols;
    t.n_mat = e.n_mat;
    for (double c : e.counts) {
      t.rows += c;
      if (!(c > 0)) ++t.unused_experts;
    }
    if (!(t.rows > 0)) {
      s.skipped.push_back(name);
      continue;
    }
    if (auto block = parse_block_name(name)) {
      t.layer = block->layer;
      t.kind = block->kind;
    } else {
      t.kind = name;
    }
    std::vector<double> v = pooled_mean_squares(e, t.rows);
    describe_distribution(v, t);
    describe_concentration(v, t);
    keep_top_columns(v, t);
    if (t.layer >= 0) block_importance[{t.layer, t.kind}] = std::move(v);
    s.tensors.push_back(std::move(t));
  }

  for (ImatrixTensorStats& t : s.tensors) {
    if (t.layer <= 0) continue;
    auto previous = block_importance.find({t.layer - 1, t.kind});
    if (previous != block_importance.end())
      t.cosine_prev_layer = cosine_similarity(block_importance.at({t.layer, t.kind}), previous->second);
  }
  std::sort(s.tensors.begin(), s.tensors.end(), tensor_order);
  s.layers = summarize_layers(s.tensors);
  s.expert_usage = summarize_expert_usage(m);
  return s;
}

std::vector<std::string> describe_unrouted_experts(const Imatrix& m) {
  std::vector<std::string> lines;
  for (const auto& [name, e] : m.entries) {
    if (e.n_mat <= 1) continue;
    std::vector<int64_t> unused;
    for (int64_t x = 0; x < e.n_mat; ++x)
      if (!(e.counts[x] > 0)) unused.push_back(x);
    if (unused.empty()) continue;
    char head[160];
    std::snprintf(head, sizeof head, "%s: %lld of %lld experts got no tokens (%.2f%% of the data present); experts ",
                  name.c_str(), static_cast<long long>(unused.size()), static_cast<long long>(e.n_mat),
                  100.0 * static_cast<double>(e.n_mat - static_cast<int64_t>(unused.size())) / e.n_mat);
    lines.push_back(head + id_list(unused) + " get importance 1 in every column when quantized (llama.cpp does the same)");
  }
  return lines;
}

void print_imatrix_statistics(std::ostream& out, const ImatrixStatistics& s) {
  print_header(out, s);
  out << "Per tensor" << (has_experts(s) ? " (experts pooled)" : "") << ":\n";
  print_tensor_table(out, s);
  if (!s.layers.empty()) {
    out << "\nPer layer:\n";
    print_layer_table(out, s);
  }
  print_expert_usage(out, s);
  print_skipped(out, s);
  out << '\n' << kLegend;
  if (has_experts(s)) out << kExpertsLegend;
  if (!s.expert_usage.empty()) out << kExpertUsageLegend;
  if (!s.layers.empty()) out << kLayerLegend;
}

void write_imatrix_statistics_json(std::ostream& out, const ImatrixStatistics& s) {
  JsonWriter w(out, /*pretty=*/true);
  write_json_header(w, "qlens imatrix", kImatrixStatisticsJsonSchemaVersion, {{"imatrix", s.path}});
  w.key("settings");
  w.begin_object();
  w.key("statistics"); w.value(true);
  w.end_object();
  w.key("datasets");
  w.array(s.datasets);
  w.key("chunk_count"); w.value(s.chunk_count);
  w.key("chunk_size");  // tokens per chunk; null when the file does not say
  if (s.chunk_size > 0) w.value(s.chunk_size); else w.null();
  w.key("active_threshold_relative_to_mean"); w.value(kImatrixActiveRelativeThreshold);
  w.key("experts"); w.value("pooled");
  w.key("tensors");
  w.begin_array();
  for (const ImatrixTensorStats& t : s.tensors) write_tensor_json(w, t);
  w.end_array();
  w.key("layers");
  w.begin_array();
  for (const ImatrixLayerStats& l : s.layers) write_layer_json(w, l);
  w.end_array();
  w.key("expert_usage");
  w.begin_array();
  for (const ImatrixExpertUsage& u : s.expert_usage) {
    w.begin_object();
    w.key("layer"); w.value(u.layer);
    w.key("tensor"); w.value(u.tensor);
    w.key("n_expert"); w.value(u.n_expert);
    w.key("rows");
    w.array(u.rows);
    w.key("total_rows"); w.value(u.total);
    w.key("unused_experts");
    w.array(u.unused);
    w.key("rare_experts");
    w.array(u.rare);
    w.key("entropy"); w.value(u.entropy);
    w.key("normalized_entropy"); w.value(u.normalized_entropy);
    w.key("max_over_even"); w.value(u.max_over_even);
    w.end_object();
  }
  w.end_array();
  w.key("skipped_tensors");
  w.array(s.skipped);
  w.end_object();
  out << '\n';
}

}  // namespace qlens::tools
