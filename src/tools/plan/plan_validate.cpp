#include "tools/plan/plan_validate.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <map>
#include <sstream>

#include "core/text_file.h"
#include "qlens/error.h"
#include "qlens/gguf.h"
#include "qlens/model.h"
#include "tools/compare/compare.h"
#include "tools/quantize/quantize.h"
#include "tools/common/chunks.h"

namespace qlens::tools {

namespace {

// The prediction for a quantization plan: the sum of the sensitivity ΔKLD of
// each tensor's type; NaN when a tensor's type was not probed.
double predicted_kld(const SensitivityTable& table, const QuantizePlan& q) {
  std::map<std::string, const TensorPlan*> by_name;
  for (const TensorPlan& t : q.tensors) by_name[t.name] = &t;
  double sum = 0;
  for (const PlanTensor& t : table.tensors) {
    auto it = by_name.find(t.name);
    if (it == by_name.end()) return std::numeric_limits<double>::quiet_NaN();
    auto opt = std::find_if(t.options.begin(), t.options.end(),
                            [&](const PlanOption& o) { return o.type == it->second->to; });
    if (opt == t.options.end()) return std::numeric_limits<double>::quiet_NaN();
    sum += opt->delta_kld;
  }
  return sum;
}

}  // namespace

QuantizePlan types_of_file(const gguf::File& file) {
  QuantizePlan p;
  for (const gguf::TensorInfo& t : file.tensors()) {
    TensorPlan tp;
    tp.name = t.name;
    tp.ne = t.ne;
    tp.from = tp.to = t.type;
    tp.bytes = t.nbytes;
    p.tensors.push_back(tp);
    p.total_bytes += t.nbytes;
    p.total_elements += t.nelements();
  }
  return p;
}

ValidationRow measure_quantized(const SensitivityTable& table, const Model& ref, const std::vector<Token>& tokens,
                                const std::string& name, const std::string& path, const QuantizeOptions* q,
                                const ValidateOptions& opt, std::ostream& log) {
  ValidationRow row;
  row.name = name;
  row.path = path;
  if (q) {
    log << "quantizing " << name << " -> " << path << "\n";
    std::ostringstream quiet;
    quantize_model(opt.model_path, path, *q, quiet);
  }
  const QuantizePlan as_is = types_of_file(*gguf::File::open(path));  // also for a file made elsewhere
  row.bytes = as_is.total_bytes;
  row.bpw = as_is.bits_per_weight();
  row.predicted_kld = predicted_kld(table, as_is);
  auto test = Model::load(path);
  CompareOptions copt;
  copt.n_ctx = opt.n_ctx;
  copt.n_batch = opt.n_ctx;
  copt.max_chunks = opt.max_chunks;
  copt.n_threads = opt.n_threads;
  copt.device = copt.device_ref = opt.device;
  copt.cpu = opt.cpu;
  copt.vulkan = opt.vulkan;
  copt.n_gpu_layers = opt.n_gpu_layers;
  copt.logits_only = true;  // the logits are what is validated
  log << "comparing " << name << " with " << opt.model_path << " on " << opt.text_path << "\n";
  const CompareResult r = compare_models(ref, *test, tokens, copt);
  row.measured_kld = r.logits.kld_mean.value;
  row.measured_kld_error = r.logits.kld_mean.error;
  row.same_top = r.logits.same_top.value;
  row.same_top_error = r.logits.same_top.error;
  row.ppl = r.logits.ppl_test.value;
  row.ppl_error = r.logits.ppl_test.error;
  row.ppl_ratio = r.logits.ppl_ratio.value;
  return row;
}

std::vector<ValidationRow> validate_plan(const SensitivityTable& table, const Plan& plan,
                                         const std::string& tensor_type_rules, const ValidateOptions& opt,
                                         std::ostream& log) {
  auto in = gguf::File::open(opt.model_path);
  for (const gguf::TensorInfo& t : in->tensors()) require_computable(*in, t);  // before quantizing candidates
  struct Candidate {
    std::string name;
    QuantizeOptions q;
    QuantizePlan dry;
  };
  std::vector<Candidate> candidates;
  {
    Candidate c;
    c.name = "plan";
    c.q.mix = "F16";  // every tensor has a rule; this only names the file type
    c.q.imatrix_path = opt.imatrix_path;
    c.q.tensor_types = parse_tensor_type_rules(tensor_type_rules, "the plan");
    c.q.pure = true;
    c.q.n_threads = opt.n_threads;
    c.dry = plan_quantization(*in, c.q);
    candidates.push_back(std::move(c));
  }
  // The uniform mixes nearest in size below and above the plan.
  const size_t plan_bytes = candidates[0].dry.total_bytes;
  const Candidate* below = nullptr;
  const Candidate* above = nullptr;
  std::vector<Candidate> mixes;
  for (const std::string& m : opt.mixes) {
    Candidate c;
    c.name = m;
    c.q.mix = m;
    c.q.imatrix_path = opt.imatrix_path;
    c.q.n_threads = opt.n_threads;
    c.dry = plan_quantization(*in, c.q);
    mixes.push_back(std::move(c));
  }
  for (const Candidate& c : mixes) {
    if (c.dry.total_bytes <= plan_bytes && (!below || c.dry.total_bytes > below->dry.total_bytes)) below = &c;
    if (c.dry.total_bytes > plan_bytes && (!above || c.dry.total_bytes < above->dry.total_bytes)) above = &c;
  }
  for (const Candidate* c : {below, above})
    if (c) candidates.push_back(*c);

  auto ref = Model::load(opt.model_path);
  const auto tokens = tokenize_text_file(ref->vocab(), opt.text_path,
                                         opt.max_chunks > 0 ? opt.max_chunks * opt.n_ctx : -1, "plan --validate");
  std::vector<ValidationRow> rows;
  for (const Candidate& c : candidates)
    rows.push_back(measure_quantized(table, *ref, tokens, c.name, opt.work_dir + "/validate-" + c.name + ".gguf", &c.q,
                                     opt, log));
  (void)plan;
  return rows;
}

void print_validation(std::ostream& out, const std::vector<ValidationRow>& rows) {
  out << std::left << std::setw(10) << "model" << std::right << std::setw(12) << "bytes" << std::setw(8) << "bpw"
      << std::setw(16) << "predicted KLD" << std::setw(24) << "measured KLD" << std::setw(11) << "same top"
      << std::setw(12) << "PPL ratio" << "\n";
  for (const ValidationRow& r : rows) {
    std::ostringstream pred, meas;
    if (std::isnan(r.predicted_kld))
      pred << "-";
    else
      pred << std::fixed << std::setprecision(5) << r.predicted_kld;
    meas << std::fixed << std::setprecision(5) << r.measured_kld << " ± " << r.measured_kld_error;
    out << std::left << std::setw(10) << r.name << std::right << std::setw(12) << r.bytes << std::setw(8)
        << std::fixed << std::setprecision(3) << r.bpw << std::setw(16) << pred.str() << std::setw(25)
        << meas.str() << std::setw(10) << std::setprecision(2) << 100 * r.same_top << "%" << std::setw(12)
        << std::setprecision(4) << r.ppl_ratio << "\n";
  }
  out << "predicted: the sum of the per-tensor ΔKLD from the sensitivity table (\"-\": a type it did not probe);\n"
         "measured: mean KL divergence from the original on the held-out text. A good plan has the lowest\n"
         "measured KLD for its size.\n";
}

}  // namespace qlens::tools
