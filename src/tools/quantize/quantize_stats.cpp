#include "core/parallel.h"
#include "tools/quantize/quantize_stats.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <thread>

#include "core/json_writer.h"
#include "tools/common/json_header.h"
#include "qlens/error.h"
#include "qlens/gguf.h"
#include "qlens/model.h"
#include "tools/imatrix/imatrix_file.h"
#include "tools/common/user_regex.h"

namespace qlens::tools {

namespace {

std::vector<DType> default_types() {
  std::vector<DType> types;
  for (uint32_t id = 0; id < kDTypeCount; ++id) {
    const TypeTraits* t = find_type_traits(id);
    const auto type = static_cast<DType>(id);
    if (t && t->is_quantized && t->quantize && t->to_float && type != DType::Q8_1 && type != DType::Q8_K)
      types.push_back(type);
  }
  return types;
}

// Sums of one tensor and type, accumulated over rows by several threads.
struct Sums {
  double err2 = 0, x2 = 0, max_err = 0, werr2 = 0, wsum = 0;
  void add(const Sums& o) {
    err2 += o.err2;
    x2 += o.x2;
    max_err = std::max(max_err, o.max_err);
    werr2 += o.werr2;
    wsum += o.wsum;
  }
};

// The errors of values already dequantized (a quantized file's tensor).
Sums error_sums(const float* x, const float* back, int64_t n, int64_t n_per_row, const std::vector<float>& importance) {
  Sums s;
  for (int64_t i = 0; i < n; ++i) {
    const double e = static_cast<double>(back[i]) - x[i];
    s.err2 += e * e;
    s.x2 += static_cast<double>(x[i]) * x[i];
    s.max_err = std::max(s.max_err, std::fabs(e));
    if (!importance.empty()) {
      const double w = importance[i % n_per_row];
      s.werr2 += w * e * e;
      s.wsum += w;
    }
  }
  return s;
}

Sums measure(const float* x, int64_t n_rows, int64_t n_per_row, DType type, const std::vector<float>& importance,
             int n_threads) {
  const TypeTraits& tt = type_traits(type);
  const size_t row = row_bytes(type, n_per_row);
  constexpr int64_t kChunk = 16;
  std::atomic<int64_t> next{0};
  std::vector<Sums> partial(n_threads);
  auto work = [&](int ith) {
    std::vector<uint8_t> q(kChunk * row);
    std::vector<float> back(kChunk * n_per_row);
    Sums& s = partial[ith];
    for (;;) {
      const int64_t r0 = next.fetch_add(kChunk);
      if (r0 >= n_rows) return;
      const int64_t nr = std::min(kChunk, n_rows - r0);
      const float* src = x + r0 * n_per_row;
      tt.quantize(src, q.data(), nr, n_per_row, importance.empty() ? nullptr : importance.data());
      tt.to_float(q.data(), back.data(), nr * n_per_row);
      s.add(error_sums(src, back.data(), nr * n_per_row, n_per_row, importance));
    }
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < n_threads; ++i) pool.emplace_back(work, i);
  work(0);
  for (auto& t : pool) t.join();
  Sums total;
  for (const auto& p : partial) total.add(p);
  return total;
}


QuantErrorStats to_stats(const std::string& name, DType type, int64_t n, const Sums& s, bool weighted) {
  QuantErrorStats st;
  st.tensor = name;
  st.type = type;
  st.n = n;
  st.rmse = std::sqrt(s.err2 / std::max<int64_t>(n, 1));
  st.rms = std::sqrt(s.x2 / std::max<int64_t>(n, 1));
  st.max_error = s.max_err;
  st.weighted_rmse = weighted && s.wsum > 0 ? std::sqrt(s.werr2 / s.wsum) : -1;
  const TypeTraits& tt = type_traits(type);
  st.bits_per_weight = 8.0 * static_cast<double>(tt.block_bytes) / static_cast<double>(tt.block_size);
  return st;
}

// The other file's quantized tensor of the same name and shape, or null
// (absent, unquantized or of a type qlens cannot read or write).
const gguf::TensorInfo* against_tensor(const gguf::File* against, const gguf::TensorInfo& t) {
  if (!against) return nullptr;
  const gguf::TensorInfo* a = against->find_tensor(t.name);
  if (!a || a->ne != t.ne || !type_traits(a->type).is_quantized) return nullptr;
  const TypeTraits& tt = type_traits(a->type);
  return tt.to_float && tt.quantize ? a : nullptr;
}

void add_against(QuantizeStatsResult& r, const QuantErrorStats& s, const Sums& ours, const Sums& theirs) {
  const bool weighted = theirs.wsum > 0;
  const double a = weighted ? ours.werr2 : ours.err2, b = weighted ? theirs.werr2 : theirs.err2;
  QuantErrorStats& row = r.tensors.back();
  row.against_rmse = std::sqrt(theirs.err2 / std::max<int64_t>(s.n, 1));
  row.against_weighted_rmse = weighted ? std::sqrt(theirs.werr2 / theirs.wsum) : -1;
  row.error_ratio = b > 0 ? a / b : (a > 0 ? INFINITY : 1.0);
  auto it = std::find_if(r.against.begin(), r.against.end(), [&](const auto& x) { return x.type == s.type; });
  if (it == r.against.end()) {
    QuantizeStatsResult::AgainstSummary first;
    first.type = s.type;
    it = r.against.insert(r.against.end(), first);
  }
  ++it->tensors;
  it->above_one_percent += row.error_ratio > 1.01;
  if (row.error_ratio > it->worst_ratio || it->worst_tensor.empty()) {
    it->worst_ratio = row.error_ratio;
    it->worst_tensor = s.tensor;
  }
}

void add_total_against(QuantErrorStats& total, const Sums& ours, const Sums& theirs) {
  const bool weighted = theirs.wsum > 0;
  const double a = weighted ? ours.werr2 : ours.err2, b = weighted ? theirs.werr2 : theirs.err2;
  total.against_rmse = std::sqrt(theirs.err2 / std::max<int64_t>(total.n, 1));
  total.against_weighted_rmse = weighted ? std::sqrt(theirs.werr2 / theirs.wsum) : -1;
  total.error_ratio = b > 0 ? a / b : (a > 0 ? INFINITY : 1.0);
}

}  // namespace

QuantizeStatsResult quantize_stats(const std::string& model_path, const QuantizeStatsOptions& opt) {
  auto f = gguf::File::open(model_path);
  std::unique_ptr<gguf::File> against;
  if (!opt.against_path.empty()) against = gguf::File::open(opt.against_path);
  const std::vector<DType> types = opt.types.empty() ? default_types() : opt.types;
  for (DType t : types)
    if (!type_traits(t).quantize || !type_traits(t).to_float)
      throw Error("quantize-stats: qlens cannot quantize to " + std::string(type_name(t)));
  const std::regex filter =
      user_regex(opt.tensor_filter.empty() ? std::string(".*") : opt.tensor_filter, "quantize-stats: --include");
  std::vector<const gguf::TensorInfo*> measured;
  for (const auto& t : f->tensors())
    if (t.n_dims >= 2 && std::regex_search(t.name, filter) && (!against || against_tensor(against.get(), t)))
      measured.push_back(&t);
  if (against && measured.empty())
    throw Error("quantize-stats: " + opt.against_path + " has no quantized tensor of " + model_path +
                "'s (same name and shape, a type qlens reads and writes) to measure");
  for (const gguf::TensorInfo* t : measured) require_computable(*f, *t);  // before any long measurement
  std::optional<Imatrix> imatrix;
  if (!opt.imatrix_path.empty()) imatrix = load_imatrix(opt.imatrix_path);
  const int n_threads = opt.n_threads > 0 ? opt.n_threads : default_thread_count();

  QuantizeStatsResult r;
  std::map<DType, std::pair<int64_t, Sums>> totals;
  std::map<DType, Sums> against_totals;
  for (const gguf::TensorInfo* tensor : measured) {
    const gguf::TensorInfo& t = *tensor;
    const TypeTraits& from = type_traits(t.type);
    std::vector<float> x(t.nelements());
    from.to_float(f->tensor_data(t), x.data(), t.nelements());
    std::vector<float> importance;
    if (imatrix) importance = imatrix->importance(t.name, t.ne[0]);
    const gguf::TensorInfo* theirs = against_tensor(against.get(), t);
    for (DType type : theirs ? std::vector<DType>{theirs->type} : types) {
      if (t.ne[0] % type_traits(type).block_size != 0) continue;
      const Sums s = measure(x.data(), t.nelements() / t.ne[0], t.ne[0], type, importance, n_threads);
      r.tensors.push_back(to_stats(t.name, type, t.nelements(), s, !importance.empty()));
      auto& tot = totals[type];
      tot.first += t.nelements();
      tot.second.add(s);
      if (theirs) {
        std::vector<float> back(t.nelements());
        type_traits(type).to_float(against->tensor_data(*theirs), back.data(), t.nelements());
        const Sums o = error_sums(x.data(), back.data(), t.nelements(), t.ne[0], importance);
        add_against(r, r.tensors.back(), s, o);
        against_totals[type].add(o);
      }
    }
  }
  for (const auto& [type, tot] : totals) {
    r.totals.push_back(to_stats("total", type, tot.first, tot.second, tot.second.wsum > 0));
    if (auto it = against_totals.find(type); it != against_totals.end()) add_total_against(r.totals.back(), tot.second, it->second);
  }
  return r;
}

void print_quantize_stats(const QuantizeStatsResult& r, std::ostream& out) {
  size_t w = 6;
  for (const auto& s : r.tensors) w = std::max(w, s.tensor.size());
  const bool against = !r.against.empty();
  char line[512];
  std::snprintf(line, sizeof line, "%-*s %-7s %7s %12s %12s %12s %14s", static_cast<int>(w), "TENSOR", "TYPE", "BPW",
                "RMSE", "RMSE/RMS", "MAX ERR", "WEIGHTED RMSE");
  out << line << (against ? "   AGAINST RMSE  AGAINST WRMSE  ERROR RATIO\n" : "\n");
  auto row = [&](const QuantErrorStats& s) {
    char weighted[32] = "-";
    if (s.weighted_rmse >= 0) std::snprintf(weighted, sizeof weighted, "%.6g", s.weighted_rmse);
    std::snprintf(line, sizeof line, "%-*s %-7s %7.3f %12.6g %12.6g %12.6g %14s", static_cast<int>(w),
                  s.tensor.c_str(), std::string(type_name(s.type)).c_str(), s.bits_per_weight, s.rmse,
                  s.rms > 0 ? s.rmse / s.rms : 0.0, s.max_error, weighted);
    out << line;
    if (against && s.error_ratio >= 0) {
      char theirs[32] = "-";
      if (s.against_weighted_rmse >= 0) std::snprintf(theirs, sizeof theirs, "%.6g", s.against_weighted_rmse);
      std::snprintf(line, sizeof line, " %14.6g %14s %12.4f", s.against_rmse, theirs, s.error_ratio);
      out << line;
    }
    out << "\n";
  };
  for (const auto& s : r.tensors) row(s);
  out << "\n";
  for (const auto& s : r.totals) row(s);
  if (!against) return;
  out << "\nerror ratio: qlens's (weighted) squared error over the file's, same type and importance\n";
  for (const auto& a : r.against) {
    std::snprintf(line, sizeof line, "%-7s %d tensors, %d more than 1%% above the file's; worst %.4f (%s)\n",
                  std::string(type_name(a.type)).c_str(), a.tensors, a.above_one_percent, a.worst_ratio,
                  a.worst_tensor.c_str());
    out << line;
  }
}

void write_quantize_stats_json(const QuantizeStatsResult& r, const std::string& model_path,
                               const QuantizeStatsOptions& opt, std::ostream& out) {
  JsonWriter w(out, true);
  auto item = [&](const QuantErrorStats& s) {
    w.begin_object();
    w.key("tensor"), w.value(s.tensor);
    w.key("type"), w.value(std::string(type_name(s.type)));
    w.key("n_elements"), w.value(s.n);
    w.key("bits_per_weight"), w.value(s.bits_per_weight);
    w.key("rmse"), w.value(s.rmse);
    w.key("rms"), w.value(s.rms);
    w.key("max_error"), w.value(s.max_error);
    w.key("weighted_rmse");
    if (s.weighted_rmse >= 0)
      w.value(s.weighted_rmse);
    else
      w.null();
    if (!opt.against_path.empty()) {
      w.key("against_rmse"), w.value(s.against_rmse);
      w.key("against_weighted_rmse");
      if (s.against_weighted_rmse >= 0)
        w.value(s.against_weighted_rmse);
      else
        w.null();
      w.key("error_ratio"), w.value(s.error_ratio);
    }
    w.end_object();
  };
  write_json_header(w, "qlens quantize-stats", 2,
                    {{"model", model_path}, {"imatrix", opt.imatrix_path}, {"against", opt.against_path}});
  w.key("settings");
  w.begin_object();
  w.key("types");
  w.begin_array();
  for (DType t : opt.types) w.value(std::string(type_name(t)));
  w.end_array();
  w.key("tensor_filter");
  string_or_null(w, opt.tensor_filter);
  w.end_object();
  w.key("tensors");
  w.begin_array();
  for (const auto& s : r.tensors) item(s);
  w.end_array();
  w.key("totals");
  w.begin_array();
  for (const auto& s : r.totals) item(s);
  w.end_array();
  w.end_object();
  out << "\n";
}

}  // namespace qlens::tools
