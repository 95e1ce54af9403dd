#include "tools/plan/plan_curve.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <sstream>

#include "core/json_reader.h"
#include "core/json_writer.h"
#include "qlens/error.h"
#include "qlens/gguf.h"
#include "qlens/model.h"
#include "tools/common/chunks.h"
#include "tools/common/json_header.h"
#include "tools/quantize/quantize.h"

namespace qlens::tools {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool is_mix_name(const std::string& s) {
  const std::vector<std::string> mixes = mix_names();
  return std::find(mixes.begin(), mixes.end(), s) != mixes.end();
}

// A point with its budget in bytes of tensor data.
struct Budgeted {
  CurvePoint point;
  uint64_t bytes = 0;
  std::string mix_file;  // an existing file for the mix (--mix-dir), or ""
};

QuantizeOptions mix_options(const std::string& mix, const CurveOptions& opt) {
  QuantizeOptions q;
  q.mix = mix;
  q.imatrix_path = opt.run.imatrix_path;
  q.n_threads = opt.run.n_threads;
  return q;
}

// Every point's budget, checked before any work: a mix that qlens quantize
// would refuse on this model (an i-quant without an imatrix, Q1_0 on rows it
// cannot hold) is refused here, naming the tensor; sorted by size.
std::vector<Budgeted> budgets(const SensitivityTable& table, const CurveOptions& opt) {
  auto in = gguf::File::open(opt.run.model_path);
  std::vector<Budgeted> out;
  for (const CurvePoint& p : opt.points) {
    Budgeted b;
    b.point = p;
    if (p.is_mix) {
      const std::filesystem::path file = std::filesystem::path(opt.mix_dir) / (p.label + ".gguf");
      if (!opt.mix_dir.empty() && std::filesystem::exists(file)) {
        b.mix_file = file.string();
        b.bytes = types_of_file(*gguf::File::open(b.mix_file)).total_bytes;
      } else {
        try {
          b.bytes = plan_quantization(*in, mix_options(p.label, opt)).total_bytes;
        } catch (const Error& e) {
          throw Error("qlens curve: point " + p.label + ": " + e.what());
        }
      }
    } else {
      b.bytes = p.target_bytes > 0 ? p.target_bytes : budget_from_bpw(table, p.target_bpw);
    }
    out.push_back(std::move(b));
  }
  std::stable_sort(out.begin(), out.end(), [](const Budgeted& a, const Budgeted& b) { return a.bytes < b.bytes; });
  return out;
}

const CurveRow* find_row(const std::vector<CurveRow>& rows, const std::string& point, const std::string& kind,
                         uint64_t budget) {
  for (const CurveRow& r : rows)
    if (r.point == point && r.kind == kind && r.budget_bytes == budget) return &r;
  return nullptr;
}

std::string file_label(const std::string& label) {
  std::string s;
  for (char c : label) s += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ? c : '-';
  return s;
}

void value_with_error(JsonWriter& w, double value, double error) {
  w.begin_object();
  w.key("value"); w.value(value);
  w.key("error"); w.value(error);
  w.end_object();
}

double number_or_nan(const JsonValue& v) { return v.is_null() ? kNaN : v.as_number(); }

}  // namespace

std::vector<std::string> default_curve_mixes() {
  return {"IQ1_S",  "IQ1_M",  "IQ2_XXS", "IQ2_XS", "IQ2_S",  "IQ2_M",  "Q2_K_S", "Q2_K",   "IQ3_XXS",
          "IQ3_XS", "Q3_K_S", "IQ3_S",   "IQ3_M",  "Q3_K_M", "Q3_K_L", "IQ4_XS", "Q4_K_S", "Q4_K_M"};
}

CurvePoint parse_curve_point(const std::string& text) {
  CurvePoint p;
  p.label = text;
  if (is_mix_name(text)) {
    p.is_mix = true;
    return p;
  }
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const std::string unit(end);
  if (end != text.c_str() && v > 0 && unit == "bpw" && v <= 32) {
    p.target_bpw = v;
    return p;
  }
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  if (unit == "K" || unit == "KiB") scale = 1024.0;
  if (unit == "M" || unit == "MiB") scale = 1024.0 * 1024;
  if (unit == "G" || unit == "GiB") scale = 1024.0 * 1024 * 1024;
  if (end == text.c_str() || !(v > 0) || scale == 0)
    throw Error("qlens curve: point '" + text +
                "' is neither a mix qlens quantize knows (IQ2_M, Q4_K_M, ...) nor a size (3.5bpw, 250M, 1.5G, bytes)");
  p.target_bytes = static_cast<uint64_t>(v * scale);
  return p;
}

std::vector<CurveRow> run_curve(const SensitivityTable& table, const CurveOptions& opt, const std::vector<CurveRow>& done,
                                const std::function<void(const std::vector<CurveRow>&)>& on_row, std::ostream& log) {
  const std::vector<Budgeted> points = budgets(table, opt);
  auto ref = Model::load(opt.run.model_path);
  const auto tokens = tokenize_text_file(ref->vocab(), opt.run.text_path,
                                         opt.run.max_chunks > 0 ? opt.run.max_chunks * opt.run.n_ctx : -1, "curve");
  std::vector<CurveRow> rows;
  auto finish = [&](CurveRow row) {
    rows.push_back(std::move(row));
    if (on_row) on_row(rows);
  };
  const uint64_t least = min_plan_bytes(table);
  for (size_t i = 0; i < points.size(); ++i) {
    const Budgeted& b = points[i];
    log << "[" << i + 1 << "/" << points.size() << "] " << b.point.label << ": " << b.bytes << " bytes\n";
    // The plan at this size.
    if (const CurveRow* r = find_row(done, b.point.label, "plan", b.bytes)) {
      log << "  plan: measured before (resumed)\n";
      finish(*r);
    } else {
      CurveRow row;
      row.point = b.point.label;
      row.kind = "plan";
      row.budget_bytes = b.bytes;
      row.result.name = "plan";
      if (b.bytes < least) {
        row.note = "below the smallest plan the sensitivity table allows (" + std::to_string(least) +
                   " bytes): add smaller candidate types (--types of qlens sensitivity)";
        row.result.bytes = 0;
        row.result.bpw = row.result.predicted_kld = row.result.measured_kld = row.result.measured_kld_error = kNaN;
        row.result.same_top = row.result.same_top_error = row.result.ppl = row.result.ppl_error = kNaN;
        row.result.ppl_ratio = kNaN;
        log << "  plan: " << row.note << "\n";
      } else {
        const Plan plan = solve_plan(table, b.bytes);
        QuantizeOptions q;
        q.mix = "F16";  // every tensor has a rule; this only names the file type
        q.imatrix_path = opt.run.imatrix_path;
        q.tensor_types = parse_tensor_type_rules(tensor_type_file(table, plan), "the plan");
        q.pure = true;
        q.n_threads = opt.run.n_threads;
        const std::string path = opt.run.work_dir + "/curve-plan-" + file_label(b.point.label) + ".gguf";
        row.result = measure_quantized(table, *ref, tokens, "plan", path, &q, opt.run, log);
        row.measured = true;
      }
      finish(std::move(row));
    }
    if (!b.point.is_mix) continue;
    // The mix itself.
    if (const CurveRow* r = find_row(done, b.point.label, "mix", b.bytes)) {
      log << "  " << b.point.label << ": measured before (resumed)\n";
      finish(*r);
      continue;
    }
    CurveRow row;
    row.point = b.point.label;
    row.kind = "mix";
    row.budget_bytes = b.bytes;
    if (!b.mix_file.empty()) {
      row.result = measure_quantized(table, *ref, tokens, b.point.label, b.mix_file, nullptr, opt.run, log);
      row.note = "measured as found in --mix-dir";
    } else {
      const QuantizeOptions q = mix_options(b.point.label, opt);
      const std::string path = opt.run.work_dir + "/curve-" + file_label(b.point.label) + ".gguf";
      row.result = measure_quantized(table, *ref, tokens, b.point.label, path, &q, opt.run, log);
    }
    row.measured = true;
    finish(std::move(row));
  }
  return rows;
}

void print_curve(std::ostream& out, const std::vector<CurveRow>& rows) {
  out << std::left << std::setw(9) << "point" << std::right << std::setw(14) << "budget" << std::setw(9) << "mix bpw"
      << std::setw(22) << "mix KLD" << std::setw(10) << "plan bpw" << std::setw(22) << "plan KLD" << std::setw(11)
      << "plan/mix" << std::setw(15) << "PPL ratio" << "\n";
  auto kld = [](const ValidationRow& r) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(5) << r.measured_kld << " ± " << std::setprecision(5) << r.measured_kld_error;
    return s.str();
  };
  std::vector<std::string> order;
  for (const CurveRow& r : rows)
    if (std::find(order.begin(), order.end(), r.point) == order.end()) order.push_back(r.point);
  for (const std::string& point : order) {
    const CurveRow* plan = nullptr;
    const CurveRow* mix = nullptr;
    for (const CurveRow& r : rows)
      if (r.point == point) (r.kind == "plan" ? plan : mix) = &r;
    const uint64_t budget = plan ? plan->budget_bytes : mix->budget_bytes;
    out << std::left << std::setw(9) << point << std::right << std::setw(14) << budget;
    std::ostringstream ppl;
    ppl << std::fixed << std::setprecision(4);
    if (mix) {
      out << std::setw(9) << std::fixed << std::setprecision(3) << mix->result.bpw << std::setw(23) << kld(mix->result);
      ppl << mix->result.ppl_ratio;
    } else {
      out << std::setw(9) << "-" << std::setw(22) << "-";
      ppl << "-";
    }
    ppl << " / ";
    if (plan && plan->measured) {
      out << std::setw(10) << std::fixed << std::setprecision(3) << plan->result.bpw << std::setw(23)
          << kld(plan->result);
      ppl << plan->result.ppl_ratio;
      if (mix)
        out << std::setw(10) << std::setprecision(3) << plan->result.measured_kld / mix->result.measured_kld;
      else
        out << std::setw(10) << "-";
    } else {
      out << std::setw(10) << "-" << std::setw(22) << "(no plan)" << std::setw(11) << "-";
      ppl << "-";
    }
    out << std::setw(16) << ppl.str() << "\n";
  }
  out << "budget: bytes of tensor data (the mix's, or the size asked for); KLD: mean KL divergence from the reference\n"
         "on the held-out text (± standard error); plan/mix below 1: the plan is closer to the reference at no more\n"
         "bytes; PPL ratio: the mix's / the plan's perplexity over the reference's.\n";
}

std::string curve_json(const std::vector<CurveRow>& rows, const CurveJsonContext& c) {
  std::ostringstream s;
  JsonWriter w(s, /*pretty=*/true);
  write_json_header(w, "qlens curve", kCurveJsonSchemaVersion,
                    {{"sensitivity", c.sensitivity_path},
                     {"model", c.model_path},
                     {"imatrix", c.imatrix_path},
                     {"held_out_text", c.held_out_text_path},
                     {"mix_dir", c.mix_dir}});
  w.key("settings");
  w.begin_object();
  w.key("n_ctx"); w.value(c.n_ctx);
  w.key("max_chunks"); w.value(c.max_chunks);
  w.key("types");
  if (c.types.empty()) w.null(); else w.array(c.types);
  w.end_object();
  w.key("complete"); w.value(c.complete);
  w.key("rows");
  w.begin_array();
  for (const CurveRow& r : rows) {
    w.begin_object();
    w.key("point"); w.value(r.point);
    w.key("kind"); w.value(r.kind);
    w.key("budget_bytes"); w.value(r.budget_bytes);
    w.key("measured"); w.value(r.measured);
    w.key("note"); string_or_null(w, r.note);
    w.key("model"); string_or_null(w, r.result.path);
    w.key("bytes");
    if (r.measured) w.value(static_cast<uint64_t>(r.result.bytes)); else w.null();
    w.key("bits_per_weight"); w.value(r.measured ? r.result.bpw : kNaN);
    w.key("predicted_kld"); w.value(r.measured ? r.result.predicted_kld : kNaN);
    w.key("kld"); value_with_error(w, r.result.measured_kld, r.result.measured_kld_error);
    w.key("same_top"); value_with_error(w, r.result.same_top, r.result.same_top_error);
    w.key("ppl"); value_with_error(w, r.result.ppl, r.result.ppl_error);
    w.key("ppl_ratio"); w.value(r.result.ppl_ratio);
    w.end_object();
  }
  w.end_array();
  w.end_object();
  s << "\n";
  return s.str();
}

std::vector<CurveRow> parse_curve_json(std::string_view text, const std::string& source) {
  const JsonValue doc = parse_json(text, source);
  read_schema_version(doc, kCurveJsonSchemaVersion, "a qlens curve file");
  std::vector<CurveRow> rows;
  for (const JsonValue& r : doc.at("rows").as_array()) {
    CurveRow row;
    row.point = r.at("point").as_string();
    row.kind = r.at("kind").as_string();
    if (row.kind != "plan" && row.kind != "mix")
      throw Error(source + ": " + r.at("kind").where() + ": kind must be \"plan\" or \"mix\"");
    row.budget_bytes = static_cast<uint64_t>(r.at("budget_bytes").as_int());
    row.measured = r.at("measured").as_bool();
    row.note = optional_string(r, "note");
    row.result.name = row.kind == "plan" ? "plan" : row.point;
    row.result.path = optional_string(r, "model");
    row.result.bytes = r.at("bytes").is_null() ? 0 : static_cast<size_t>(r.at("bytes").as_int());
    row.result.bpw = number_or_nan(r.at("bits_per_weight"));
    row.result.predicted_kld = number_or_nan(r.at("predicted_kld"));
    row.result.measured_kld = number_or_nan(r.at("kld").at("value"));
    row.result.measured_kld_error = number_or_nan(r.at("kld").at("error"));
    row.result.same_top = number_or_nan(r.at("same_top").at("value"));
    row.result.same_top_error = number_or_nan(r.at("same_top").at("error"));
    row.result.ppl = number_or_nan(r.at("ppl").at("value"));
    row.result.ppl_error = number_or_nan(r.at("ppl").at("error"));
    row.result.ppl_ratio = number_or_nan(r.at("ppl_ratio"));
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace qlens::tools
