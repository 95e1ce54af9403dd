#include "core/parallel.h"
#include "tools/quantize/quantize.h"
#include "tools/quantize/mix_rules.h"

#include "core/json_writer.h"
#include "tools/common/json_header.h"
#include "tools/common/tensor_names.h"

#include <map>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <regex>
#include <sstream>

#include "core/human_bytes.h"
#include "core/output_path.h"
#include "qlens/error.h"
#include "tools/imatrix/imatrix_coverage.h"
#include "tools/imatrix/imatrix_file.h"
#include "tools/inspect/inspect.h"
#include "tools/common/user_regex.h"

namespace qlens::tools {

namespace {

// llama.cpp's llama_ftype ids, so general.file_type means the same to both tools.
const std::vector<QuantMix>& mixes() {
  static const std::vector<QuantMix> all = {
      {"F32", DType::F32, 0},       {"F16", DType::F16, 1},       {"BF16", DType::BF16, 32},
      {"Q4_0", DType::Q4_0, 2},     {"Q4_1", DType::Q4_1, 3},     {"Q8_0", DType::Q8_0, 7},
      {"Q5_0", DType::Q5_0, 8},     {"Q5_1", DType::Q5_1, 9},     {"Q2_K", DType::Q2_K, 10},
      {"Q3_K_S", DType::Q3_K, 11},  {"Q3_K_M", DType::Q3_K, 12},  {"Q3_K_L", DType::Q3_K, 13},
      {"Q4_K_S", DType::Q4_K, 14},  {"Q4_K_M", DType::Q4_K, 15},  {"Q5_K_S", DType::Q5_K, 16},
      {"Q5_K_M", DType::Q5_K, 17},  {"Q6_K", DType::Q6_K, 18},    {"IQ4_NL", DType::IQ4_NL, 25},
      {"IQ4_XS", DType::IQ4_XS, 30},
      // The low-bit mixes. Their names are llama-quantize's: the IQ2_S mix is
      // mostly IQ2_XS, IQ2_M mostly IQ2_S, IQ3_XS and IQ3_M mostly IQ3_S.
      {"IQ2_XXS", DType::IQ2_XXS, 19}, {"IQ2_XS", DType::IQ2_XS, 20},   {"Q2_K_S", DType::Q2_K, 21},
      {"IQ3_XS", DType::IQ3_S, 22},    {"IQ3_XXS", DType::IQ3_XXS, 23}, {"IQ1_S", DType::IQ1_S, 24},
      {"IQ3_S", DType::IQ3_S, 26},     {"IQ3_M", DType::IQ3_S, 27},     {"IQ2_S", DType::IQ2_XS, 28},
      {"IQ2_M", DType::IQ2_S, 29},     {"IQ1_M", DType::IQ1_M, 31},     {"TQ1_0", DType::TQ1_0, 36},
      {"TQ2_0", DType::TQ2_0, 37},     {"MXFP4_MOE", DType::MXFP4, 38}, {"Q1_0", DType::Q1_0, 40},
      {"Q2_0", DType::Q2_0, 41},
  };
  return all;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// Aliases users type for the K mixes without a size letter.
std::string canonical_mix_name(const std::string& name) {
  const std::string u = upper(name);
  if (u == "Q3_K") return "Q3_K_M";
  if (u == "Q4_K") return "Q4_K_M";
  if (u == "Q5_K") return "Q5_K_M";
  return u;
}

bool is_weight_target(DType t) {
  const TypeTraits& tt = type_traits(t);
  return tt.quantize != nullptr && t != DType::Q8_1 && t != DType::Q8_K;
}

DType parse_type(const std::string& text, const std::string& where) {
  auto t = type_from_name(text);
  if (!t) throw Error(where + ": unknown type '" + text + "'");
  if (!is_weight_target(*t)) throw Error(where + ": qlens cannot quantize to " + std::string(type_name(*t)));
  return *t;
}

// A --tensor-type rule, its pattern compiled.
struct TypeRule {
  std::regex re;
  std::string text;
  DType type;
};

std::vector<TypeRule> compile_rules(const QuantizeOptions& opt) {
  std::vector<TypeRule> rules;
  for (const auto& [pattern, type] : opt.tensor_types)
    rules.push_back({user_regex(pattern, "--tensor-type"), pattern,
                     parse_type(type, "--tensor-type " + pattern + "=" + type)});
  return rules;
}

// What llama-quantize refuses for a tensor's chosen type: a very-low-bit
// type without an imatrix (a dry run notes it in the reason instead),
// quantizing a quantized tensor again unasked.
void check_target(const gguf::File& in, const gguf::TensorInfo& t, DType want, const QuantMix& mix,
                  const QuantizeOptions& opt, std::string& reason) {
  if (want == t.type) return;
  if (opt.imatrix_path.empty() && requires_imatrix(role_of(t.name).name, want, mix)) {
    if (!opt.plan_only)
      throw Error(in.path() + ": tensor '" + t.name + "' would be " + std::string(type_name(want)) +
                  ", which needs an importance matrix (--imatrix), as llama-quantize requires");
    reason += " (needs --imatrix)";
  }
  if (type_traits(t.type).is_quantized && !opt.allow_requantize)
    throw Error(in.path() + ": tensor '" + t.name + "' is already " + std::string(type_name(t.type)) +
                "; quantizing it again loses quality (use --allow-requantize to do it anyway)");
}

std::string shape_text(const std::array<int64_t, 4>& ne, int n_dims) {
  std::string s = "[";
  for (int i = 0; i < n_dims; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

}  // namespace

std::optional<QuantMix> find_mix(const std::string& name) {
  const std::string n = canonical_mix_name(name);
  // llama-quantize also takes the llama_ftype id: "15" is Q4_K_M.
  const bool numeric = !n.empty() && n.find_first_not_of("0123456789") == std::string::npos && n.size() < 6;
  for (const auto& m : mixes())
    if (m.name == n || (numeric && m.file_type == static_cast<uint32_t>(std::stoul(n)))) return m;
  return std::nullopt;
}

static uint32_t file_type_of(const QuantizePlan& plan) {
  // The plain type holding the most elements among the quantized matrices
  // (llama.cpp's "mostly" types), when no mix rule set the tensors' types.
  std::map<DType, int64_t> elements;
  for (const TensorPlan& t : plan.tensors)
    if (t.ne[1] > 1) elements[t.to] += t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
  DType most = plan.mix.base;
  int64_t best = -1;
  for (const auto& [type, n] : elements)
    if (n > best) most = type, best = n;
  for (const auto& m : mixes())
    if (m.base == most && m.name == type_name(most)) return m.file_type;
  return plan.mix.file_type;
}

std::vector<std::string> mix_names() {
  std::vector<std::string> names;
  for (const auto& m : mixes()) names.push_back(m.name);
  return names;
}

std::vector<std::pair<std::string, std::string>> parse_tensor_type_rules(const std::string& text,
                                                                         const std::string& source) {
  std::vector<std::pair<std::string, std::string>> rules;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    const size_t eq = line.rfind('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == line.size())
      throw Error(source + ":" + std::to_string(line_no) + ": expected REGEX=TYPE, got '" + line + "'");
    rules.emplace_back(line.substr(first, eq - first), line.substr(eq + 1));
  }
  return rules;
}

// The mix TYPE names; no TYPE: "rules", the rules (a plan of qlens plan) must
// give every matrix its type.
static QuantMix resolve_mix(const QuantizeOptions& opt) {
  auto mix = opt.mix.empty() ? std::optional<QuantMix>(QuantMix{"rules", DType::F32, 0}) : find_mix(opt.mix);
  if (!mix) {
    std::string names;
    for (const auto& n : mix_names()) names += (names.empty() ? "" : ", ") + n;
    throw Error("unknown quantization type '" + opt.mix + "' (known: " + names + ")");
  }
  if (!is_weight_target(mix->base))
    throw Error("qlens cannot quantize to " + std::string(type_name(mix->base)) + " yet");
  return *mix;
}

QuantizePlan plan_quantization(const gguf::File& in, const QuantizeOptions& opt) {
  QuantizePlan plan;
  const bool rules_only = opt.mix.empty();
  plan.mix = resolve_mix(opt);
  const QuantMix& mix = plan.mix;

  const std::vector<TypeRule> rules = compile_rules(opt);
  const ModelFacts facts = read_model_facts(in);
  const bool has_imatrix = !opt.imatrix_path.empty();
  MixCounters counters;

  for (const auto& t : in.tensors()) {
    TensorPlan p;
    p.name = t.name;
    p.ne = t.ne;
    p.from = t.type;
    p.to = t.type;
    if (t.n_dims < 2) {
      p.reason = "1-D: kept";
      if (t.type != DType::F32) p.reason = "1-D: kept as " + std::string(type_name(t.type));
    } else if (!t.name.ends_with("weight")) {
      // llama.cpp quantizes only names that end in "weight": gpt-oss's 2-D
      // expert biases stay as they are.
      p.reason = "not a weight: kept";
    } else if (never_quantized(tensor_role(t.name))) {
      const std::string role = tensor_role(t.name);
      p.reason = role == "ffn_gate_inp"           ? "router: kept"
                 : role == "per_layer_model_proj" ? "per-layer embedding projection: kept"
                                                  : "convolution kernels: kept";
    } else if (!type_traits(t.type).to_float) {
      // Its values cannot be read, so whatever a rule or the mix asks, its
      // bytes go to the output as they are (gpt-oss's MXFP4 experts).
      p.reason = std::string(type_name(t.type)) + ": copied as is (qlens cannot compute with it)";
    } else {
      const Role role = role_of(t.name);
      // llama.cpp 0c1e570's precedence: --token-embedding-type and
      // --output-tensor-type (and --leave-output-tensor), then the first
      // --tensor-type rule that matches, then the mix's role rules.
      DType want = mix.base;
      p.reason = "mix " + mix.name;
      const TypeRule* rule = nullptr;
      for (const TypeRule& r : rules)
        if (!rule && std::regex_search(t.name, r.re)) rule = &r;
      if (is_token_embedding(role.name) && opt.token_embedding_type) {
        want = *opt.token_embedding_type;
        p.reason = "--token-embedding-type";
      } else if (role.name == "output" && opt.leave_output_tensor) {
        want = t.type;
        p.reason = "--leave-output-tensor";
      } else if (role.name == "output" && opt.output_type) {
        want = *opt.output_type;
        p.reason = "--output-tensor-type";
      } else if (rule) {
        want = rule->type;
        p.reason = "rule " + rule->text;
      } else if (rules_only) {
        throw Error("no TYPE given, and no --tensor-type rule gives " + t.name +
                    " its type: give TYPE for the tensors the rules leave out");
      } else {
        plan.from_mix = plan.from_mix || type_traits(mix.base).is_quantized;
        // As llama.cpp: the mixes' rules are for quantized types only.
        if (!opt.pure && type_traits(mix.base).is_quantized)
          want = role_type(mix, role, t.ne, facts, has_imatrix, counters, &p.reason);
      }
      if (t.ne[0] % type_traits(want).block_size != 0) {
        const DType fb = fallback_type(want, t.ne[0], t.name);
        p.reason = "fallback from " + std::string(type_name(want)) + ": row length " + std::to_string(t.ne[0]) +
                   " is not a multiple of " + std::to_string(type_traits(want).block_size);
        want = fb;
      }
      if (want == t.type) p.reason += ": kept";
      check_target(in, t, want, mix, opt, p.reason);
      p.to = want;
    }
    p.bytes = static_cast<size_t>(t.nelements() / type_traits(p.to).block_size) * type_traits(p.to).block_bytes;
    plan.total_bytes += p.bytes;
    plan.total_elements += t.nelements();
    plan.tensors.push_back(std::move(p));
  }
  return plan;
}

void print_plan(const QuantizePlan& plan, std::ostream& out) {
  size_t w = 4;
  for (const auto& t : plan.tensors) w = std::max(w, t.name.size());
  char line[512];
  std::snprintf(line, sizeof line, "%-*s  %-16s %-7s %-7s %12s  %s\n", static_cast<int>(w), "NAME", "SHAPE", "FROM",
                "TO", "BYTES", "WHY");
  out << line;
  for (const auto& t : plan.tensors) {
    const int n_dims = t.ne[3] > 1 ? 4 : t.ne[2] > 1 ? 3 : t.ne[1] > 1 ? 2 : 1;
    std::snprintf(line, sizeof line, "%-*s  %-16s %-7s %-7s %12zu  %s\n", static_cast<int>(w), t.name.c_str(),
                  shape_text(t.ne, n_dims).c_str(), std::string(type_name(t.from)).c_str(),
                  std::string(type_name(t.to)).c_str(), t.bytes, t.reason.c_str());
    out << line;
  }
  std::snprintf(line, sizeof line, "total: %zu bytes (%s) for %lld weights, %.4f bits per weight (%s)\n",
                plan.total_bytes, human_bytes(plan.total_bytes).c_str(),
                static_cast<long long>(plan.total_elements), plan.bits_per_weight(), plan.mix.name.c_str());
  out << line;
}

std::string quantize_plan_json(const QuantizePlan& plan, const std::string& in_path, const std::string& out_path,
                               const QuantizeOptions& opt) {
  std::ostringstream s;
  JsonWriter w(s, /*pretty=*/true);
  write_json_header(w, "qlens quantize", 1, {{"model", in_path}, {"imatrix", opt.imatrix_path}});
  w.key("settings");
  w.begin_object();
  w.key("mix"); w.value(plan.mix.name);
  w.key("dry_run"); w.value(out_path.empty());
  w.key("pure"); w.value(opt.pure);
  w.key("leave_output_tensor"); w.value(opt.leave_output_tensor);
  w.key("tensor_types");
  w.begin_array();
  for (const auto& [pattern, type] : opt.tensor_types) {
    w.begin_object();
    w.key("pattern"); w.value(pattern);
    w.key("type"); w.value(type);
    w.end_object();
  }
  w.end_array();
  w.end_object();
  w.key("outputs");
  w.begin_object();
  w.key("model"); string_or_null(w, out_path);
  w.end_object();
  w.key("tensors");
  w.begin_array();
  for (const TensorPlan& t : plan.tensors) {
    const int64_t n = t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
    w.begin_object();
    w.key("tensor"); w.value(t.name);
    w.key("layer"); layer_or_null(w, tensor_layer(t.name));
    w.key("role"); w.value(tensor_role(t.name));
    w.key("shape");
    w.begin_array();
    const int n_dims = t.ne[3] > 1 ? 4 : t.ne[2] > 1 ? 3 : t.ne[1] > 1 ? 2 : 1;
    for (int d = 0; d < n_dims; ++d) w.value(t.ne[d]);
    w.end_array();
    w.key("source_type"); w.value(std::string(type_name(t.from)));
    w.key("type"); w.value(std::string(type_name(t.to)));
    w.key("n_elements"); w.value(n);
    w.key("bytes"); w.value(t.bytes);
    w.key("bits_per_weight"); w.value(n ? 8.0 * static_cast<double>(t.bytes) / static_cast<double>(n) : 0.0);
    w.key("reason"); w.value(t.reason);
    w.end_object();
  }
  w.end_array();
  w.key("imatrix_coverage");
  if (const auto& c = plan.imatrix_coverage) {
    w.begin_object();
    w.key("n_weights"); w.value(c->n_weights);
    w.key("n_covered"); w.value(c->n_covered());
    w.key("missing"); w.array(c->missing);
    w.key("no_data"); w.array(c->no_data);
    w.key("unmatched"); w.array(c->unmatched);
    w.key("collected_on"); string_or_null(w, c->collected_on);
    w.key("chunk_count"); if (c->chunk_count > 0) w.value(c->chunk_count); else w.null();
    w.key("datasets"); w.array(c->datasets);
    w.key("warnings"); w.array(c->warnings());
    w.end_object();
  } else {
    w.null();
  }
  w.key("totals");
  w.begin_object();
  w.key("bytes"); w.value(plan.total_bytes);
  w.key("n_elements"); w.value(plan.total_elements);
  w.key("bits_per_weight"); w.value(plan.bits_per_weight());
  w.key("n_tensors"); w.value(plan.tensors.size());
  w.end_object();
  w.end_object();
  s << "\n";
  return s.str();
}

void clip_outliers(float* x, int64_t n, int64_t block, double k) {
  if (k <= 0 || block <= 1) return;
  for (int64_t b = 0; b + block <= n; b += block) {
    double sum = 0, sum2 = 0;
    for (int64_t j = b; j < b + block; ++j) {
      sum += x[j];
      sum2 += static_cast<double>(x[j]) * x[j];
    }
    const double mean = sum / block;
    const double sd = std::sqrt(std::max(0.0, sum2 / block - mean * mean));
    const float lo = static_cast<float>(mean - k * sd), hi = static_cast<float>(mean + k * sd);
    for (int64_t j = b; j < b + block; ++j) x[j] = std::clamp(x[j], lo, hi);
  }
}

namespace {

std::string non_finite_error(const std::string& tensor, bool nan, int64_t row, int64_t column) {
  return "tensor '" + tensor + "' holds " + (nan ? "NaN" : "an infinity") + " at row " + std::to_string(row) +
         ", column " + std::to_string(column) +
         ": the input model is corrupt (nothing was written; qlens inspect --check-tensors lists every such tensor)";
}

// Quantizes one tensor's rows on n_threads threads: each takes chunks of rows,
// converts them to F32, clips if asked, and quantizes into its slice of out.
// importance: empty, or one vector of n_per_row per matrix (expert) of a
// 3-D tensor; rows of matrix e use its slice, and chunks never straddle two.
void quantize_tensor(const gguf::TensorInfo& t, const uint8_t* src, DType to, const std::vector<float>& importance,
                     double clip_sigma, int n_threads, uint8_t* out) {
  const int64_t n_per_row = t.ne[0];
  const int64_t n_rows = t.nelements() / n_per_row;
  const int64_t rows_per_matrix = t.ne[1];
  const TypeTraits& from = type_traits(t.type);
  const TypeTraits& dst = type_traits(to);
  const size_t src_row = row_bytes(t.type, n_per_row), dst_row = row_bytes(to, n_per_row);
  constexpr int64_t kChunkRows = 16;
  const int64_t chunks_per_matrix = (rows_per_matrix + kChunkRows - 1) / kChunkRows;
  const int64_t n_chunks = chunks_per_matrix * (n_rows / rows_per_matrix);
  // Per-thread scratch rows, as parallel_for hands each worker its index.
  const int threads = static_cast<int>(std::min<int64_t>(n_threads > 0 ? n_threads : default_thread_count(), n_chunks));
  std::vector<std::vector<float>> scratch(std::max(threads, 1), std::vector<float>(kChunkRows * n_per_row));
  parallel_for(n_chunks, threads, [&](int64_t c, int worker) {
    float* buf = scratch[worker].data();
    const int64_t matrix = c / chunks_per_matrix;
    const int64_t r0 = matrix * rows_per_matrix + (c % chunks_per_matrix) * kChunkRows;
    const int64_t nr = std::min(kChunkRows, (matrix + 1) * rows_per_matrix - r0);
    const float* w = importance.empty() ? nullptr
                     : importance.data() + (importance.size() > static_cast<size_t>(n_per_row) ? matrix * n_per_row : 0);
    for (int64_t r = 0; r < nr; ++r) {
      float* row = buf + r * n_per_row;
      from.to_float(src + (r0 + r) * src_row, row, n_per_row);
      // A NaN or an infinity would quantize into garbage blocks that load
      // without complaint: the file is corrupt, say where.
      for (int64_t j = 0; j < n_per_row; ++j)
        if (!std::isfinite(row[j])) throw Error(non_finite_error(t.name, std::isnan(row[j]), r0 + r, j));
      clip_outliers(row, n_per_row, dst.block_size, clip_sigma);
    }
    dst.quantize(buf, out + r0 * dst_row, nr, n_per_row, w);
  });
}

// The input's metadata (but a split input's part keys: the output sets its
// own) and the quantization's.
void set_metadata(gguf::Writer& w, const gguf::File& in, const QuantizePlan& plan) {
  for (const auto& kv : in.metadata())
    // An input aligned below GGUF's 8 (llama.cpp reads them) gets the default layout.
    if ((kv.key != "general.alignment" || kv.value.u >= 8) && kv.key.rfind("split.", 0) != 0) w.set(kv.key, kv.value);
  w.set("general.file_type", gguf::Value::make_u32(plan.from_mix ? plan.mix.file_type : file_type_of(plan)));
  w.set("general.quantization_version", gguf::Value::make_u32(2));
  w.set("quantize.qlens_version", gguf::Value::make_string(QLENS_VERSION));
}

void set_imatrix_metadata(gguf::Writer& w, const std::string& path, const Imatrix& imatrix) {
  w.set("quantize.imatrix.file", gguf::Value::make_string(path));
  w.set("quantize.imatrix.entries_count", gguf::Value::make_i32(static_cast<int32_t>(imatrix.entries.size())));
  w.set("quantize.imatrix.chunks_count", gguf::Value::make_i32(static_cast<int32_t>(imatrix.chunk_count)));
  if (!imatrix.datasets.empty()) w.set("quantize.imatrix.dataset", gguf::Value::make_string(imatrix.datasets.front()));
}

// The importance tensor t quantizes with (each expert of a 3-D expert tensor
// its own slice), empty when the imatrix has no entry for it; what is missing
// goes to the log.
std::vector<float> tensor_importance_logged(const gguf::TensorInfo& t, const Imatrix& imatrix,
                                            const QuantizeOptions& opt, std::ostream& log) {
  std::vector<float> importance = imatrix.tensor_importance(t.name, t.ne[0], t.ne[2]);
  const auto entry = imatrix.entries.find(t.name);
  if (!importance.empty() && t.ne[2] > 1 && entry->second.n_mat == t.ne[2]) {
    std::vector<int64_t> unrouted;
    for (int64_t e = 0; e < t.ne[2]; ++e)
      if (!(entry->second.counts[e] > 0)) unrouted.push_back(e);
    if (!unrouted.empty()) {
      log << "(experts without imatrix data, importance 1 for every column as in llama.cpp:";
      for (int64_t e : unrouted) log << " " << e;
      log << ") ";
    }
  }
  if (importance.empty() && !is_token_embedding(tensor_role(t.name))) {
    if (opt.imatrix_strict) throw Error(opt.imatrix_path + ": no entry for tensor '" + t.name + "'");
    log << "(not in the imatrix) ";
  }
  return importance;
}

void log_tensor_head(std::ostream& log, size_t i, size_t n, const gguf::TensorInfo& t, const TensorPlan& p) {
  char head[256];
  std::snprintf(head, sizeof head, "[%4zu/%4zu] %-32s %-16s %5s -> %-6s ", i + 1, n, t.name.c_str(),
                shape_text(t.ne, t.n_dims).c_str(), std::string(type_name(p.from)).c_str(),
                std::string(type_name(p.to)).c_str());
  log << head << std::flush;
}

std::vector<int64_t> dims_of(const gguf::TensorInfo& t) { return {t.ne.begin(), t.ne.begin() + t.n_dims}; }

// A float tensor copied as it is (norms, --leave-output-tensor) must be finite too.
void add_copied(gguf::Writer& w, const gguf::TensorInfo& t, const uint8_t* src, std::ostream& log) {
  if (const NonFiniteTensor bad = type_traits(t.type).is_quantized ? NonFiniteTensor{} : check_tensor(t, src);
      bad.any())
    throw Error(non_finite_error(t.name, bad.first_is_nan, bad.first / t.ne[0], bad.first % t.ne[0]));
  w.add_tensor(t.name, t.type, dims_of(t), src, t.nbytes);
  log << "copied\n";
}

// Quantizes t into `out` (which must live until the writer writes) and logs
// the sizes and the time it took.
void add_quantized(gguf::Writer& w, const gguf::TensorInfo& t, const uint8_t* src, const TensorPlan& p,
                   const std::vector<float>& importance, const QuantizeOptions& opt, int n_threads, uint8_t* out,
                   std::ostream& log) {
  const auto t0 = std::chrono::steady_clock::now();
  quantize_tensor(t, src, p.to, importance, opt.clip_sigma, n_threads, out);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  w.add_tensor(t.name, p.to, dims_of(t), out, p.bytes);
  const bool fallback = p.reason.rfind("fallback", 0) == 0;
  char tail[160];
  std::snprintf(tail, sizeof tail, "%s -> %s%s, %.2f s%s%s\n", human_bytes(t.nbytes).c_str(),
                human_bytes(p.bytes).c_str(), importance.empty() ? "" : ", imatrix", secs, fallback ? ", " : "",
                fallback ? p.reason.c_str() : "");
  log << tail << std::flush;
}

}  // namespace

ImatrixCoverage quantize_imatrix_coverage(const gguf::File& in, const QuantizePlan& plan, const Imatrix& imatrix) {
  std::vector<std::string> weights, all;
  for (const TensorPlan& p : plan.tensors) {
    all.push_back(p.name);
    if (type_traits(p.to).is_quantized && p.to != p.from && !is_token_embedding(tensor_role(p.name)))
      weights.push_back(p.name);
  }
  return imatrix_coverage(imatrix, weights, all, in.try_string("general.name").value_or(""));
}

QuantizeSplits plan_quantize_splits(const gguf::File& in, const QuantizePlan& plan, const QuantizeOptions& opt) {
  QuantizeSplits s;
  s.part.assign(plan.tensors.size(), 0);
  if (opt.keep_split + (opt.split_max_bytes > 0) + (opt.split_max_tensors > 0) > 1)
    throw Error("qlens quantize: give one of --keep-split, --split-max-size and --split-max-tensors");
  if (opt.keep_split) {
    for (size_t i = 0; i < plan.tensors.size(); ++i) {
      s.part[i] = in.tensors()[i].split;
      if (i > 0 && s.part[i] < s.part[i - 1])
        throw Error(in.path() + ": its parts' tensors are not in order, which --keep-split needs");
    }
    s.count = in.split_count();
    return s;
  }
  if (opt.split_max_bytes == 0 && opt.split_max_tensors <= 0) return s;
  // gguf-split's rules: a new part when the next tensor (padded to 32 bytes)
  // would take this one's tensor bytes over the limit, or every N tensors.
  uint64_t in_part = 0;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const uint64_t bytes = (plan.tensors[i].bytes + 31) / 32 * 32;
    const bool full = opt.split_max_bytes > 0 ? in_part + bytes > opt.split_max_bytes
                                              : static_cast<int64_t>(i) % opt.split_max_tensors == 0;
    if (i > 0 && full) {
      ++s.count;
      in_part = 0;
    }
    in_part += bytes;
    s.part[i] = s.count - 1;
  }
  if (s.count > 65535) throw Error("qlens quantize: --split-max-size makes more than 65535 parts");
  return s;
}

std::vector<std::string> quantize_output_paths(const std::string& out_path, int count) {
  if (count <= 1) return {out_path};
  const std::string prefix = out_path.ends_with(".gguf") ? out_path.substr(0, out_path.size() - 5) : out_path;
  std::vector<std::string> paths;
  for (int k = 0; k < count; ++k) paths.push_back(gguf::split_path(prefix, k, count));
  return paths;
}

uint64_t parse_split_max_size(const std::string& text) {
  const auto bad = [&] {
    return Error("qlens quantize: --split-max-size takes a size such as 500M or 50G (megabytes or gigabytes), got '" +
                 text + "'");
  };
  if (text.size() < 2 || (text.back() != 'M' && text.back() != 'G')) throw bad();
  uint64_t n = 0;
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9' || n > 1000000000ull) throw bad();
    n = n * 10 + static_cast<uint64_t>(text[i] - '0');
  }
  if (n == 0) throw bad();
  return n * (text.back() == 'M' ? 1000000ull : 1000000000ull);
}

QuantizePlan quantize_model(const std::string& in_path, const std::string& out_path, const QuantizeOptions& opt,
                            std::ostream& log) {
  auto in = gguf::File::open(in_path);
  QuantizePlan plan = plan_quantization(*in, opt);
  std::optional<Imatrix> imatrix;
  if (!opt.imatrix_path.empty()) imatrix = load_imatrix(opt.imatrix_path);
  const int n_threads = opt.n_threads > 0 ? opt.n_threads : default_thread_count();

  gguf::Writer w;
  set_metadata(w, *in, plan);
  if (imatrix) {
    plan.imatrix_coverage = quantize_imatrix_coverage(*in, plan, *imatrix);
    print_imatrix_coverage(log, *plan.imatrix_coverage);
    set_imatrix_metadata(w, opt.imatrix_path, *imatrix);
    // As llama-quantize, before any work: the very-low-bit types need each
    // tensor's own importance.
    for (const TensorPlan& p : plan.tensors)
      if (p.to != p.from && requires_imatrix(tensor_role(p.name), p.to, plan.mix) &&
          imatrix->tensor_importance(p.name, p.ne[0], p.ne[2]).empty())
        throw Error(opt.imatrix_path + " has no entry for tensor '" + p.name + "', which " +
                    std::string(type_name(p.to)) + " needs (an importance matrix of this model)");
  }

  // Part by part: each written when its last tensor is in, its buffers
  // freed then (the parts follow the input's order).
  const QuantizeSplits splits = plan_quantize_splits(*in, plan, opt);
  const std::vector<std::string> paths = quantize_output_paths(out_path, splits.count);
  // No part may be an input or one of its parts (before any work).
  std::vector<NamedPath> inputs = {{"--imatrix", opt.imatrix_path}};
  for (int k = 0; k < in->split_count(); ++k) inputs.push_back({"IN", in->part_path(k)});
  for (const std::string& path : paths) check_output_path("qlens quantize", {"OUT", path}, inputs);
  plan.output_paths = paths;
  std::vector<std::unique_ptr<uint8_t[]>> buffers;  // quantized data lives until its part is written
  const size_t n = plan.tensors.size();
  gguf::Writer part_writer;
  for (size_t i = 0; i < n; ++i) {
    const int k = splits.part[i];
    gguf::Writer& out = k == 0 ? w : part_writer;
    const TensorPlan& p = plan.tensors[i];
    const gguf::TensorInfo& t = in->tensors()[i];
    const uint8_t* src = in->tensor_data(t);
    log_tensor_head(log, i, n, t, p);
    if (p.to == p.from) {
      add_copied(out, t, src, log);
    } else {
      const std::vector<float> importance = imatrix && type_traits(p.to).is_quantized
                                                ? tensor_importance_logged(t, *imatrix, opt, log)
                                                : std::vector<float>{};
      auto& data = buffers.emplace_back(new uint8_t[p.bytes]);
      add_quantized(out, t, src, p, importance, opt, n_threads, data.get(), log);
    }
    if (i + 1 == n || splits.part[i + 1] != k) {
      if (splits.count > 1) {
        out.set("split.no", gguf::Value::make_u16(static_cast<uint16_t>(k)));
        out.set("split.count", gguf::Value::make_u16(static_cast<uint16_t>(splits.count)));
        out.set("split.tensors.count", gguf::Value::make_i32(static_cast<int32_t>(n)));
      }
      out.write(paths[k]);
      buffers.clear();
      part_writer = gguf::Writer();
      if (splits.count > 1) log << "wrote part " << k + 1 << " of " << splits.count << ": " << paths[k] << "\n";
    }
  }
  return plan;
}

}  // namespace qlens::tools
