#include "tools/plan/plan_json.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "core/json_writer.h"
#include "tools/common/json_header.h"

namespace qlens::tools {

namespace {

void value_with_error(JsonWriter& w, double value, double error) {
  w.begin_object();
  w.key("value"); w.value(value);
  w.key("error"); w.value(error);
  w.end_object();
}

void write_header(JsonWriter& w, const PlanJsonContext& c, const SensitivityTable& table,
                  const std::vector<ValidationRow>* rows) {
  // sensitivity_model: the model the sensitivity file was measured on (as
  // that file names it).
  write_json_header(w, "qlens plan", kPlanJsonSchemaVersion,
                    {{"sensitivity", c.sensitivity_path},
                     {"sensitivity_model", table.model},
                     {"model", c.model_path},
                     {"imatrix", c.imatrix_path},
                     {"held_out_text", c.held_out_text_path}});
  w.key("settings");
  w.begin_object();
  w.key("target_bits_per_weight"); w.value(c.target_bits_per_weight);  // NaN: null
  w.key("target_size_bytes");
  if (c.target_size_bytes > 0) w.value(c.target_size_bytes); else w.null();
  w.key("types");
  if (c.types.empty()) w.null(); else w.array(c.types);
  w.key("validate_n_ctx");
  if (c.validate_n_ctx > 0) w.value(c.validate_n_ctx); else w.null();
  w.key("validate_max_chunks");
  if (c.validate_max_chunks > 0) w.value(c.validate_max_chunks); else w.null();
  w.end_object();
  w.key("outputs");
  w.begin_object();
  w.key("tensor_type_file"); string_or_null(w, c.tensor_type_file);
  w.key("validation_models");  // by the validation row's mix
  if (rows) {
    w.begin_object();
    for (const ValidationRow& r : *rows) {
      w.key(r.name);
      string_or_null(w, r.path);
    }
    w.end_object();
  } else {
    w.null();
  }
  w.end_object();
}

void write_totals(JsonWriter& w, const SensitivityTable& table, const Plan& plan) {
  w.key("totals");
  w.begin_object();
  w.key("bytes"); w.value(plan.total_bytes);
  w.key("budget_bytes"); w.value(plan.budget_bytes);
  w.key("fixed_bytes"); w.value(table.fixed_bytes);
  w.key("bits_per_weight"); w.value(plan.bits_per_weight);
  w.key("predicted_kld"); w.value(plan.predicted_delta_kld);
  w.key("n_tensors"); w.value(table.tensors.size());
  w.key("n_weights_total"); w.value(table.n_weights_total);
  w.end_object();
}

double bits_per_weight(uint64_t bytes, int64_t n_elements) {
  return n_elements > 0 ? 8.0 * static_cast<double>(bytes) / static_cast<double>(n_elements)
                        : std::numeric_limits<double>::quiet_NaN();
}

void write_tensors(JsonWriter& w, const SensitivityTable& table, const Plan& plan) {
  w.key("tensors");
  w.begin_array();
  for (size_t t = 0; t < table.tensors.size(); ++t) {
    const PlanTensor& tensor = table.tensors[t];
    const PlanOption& chosen = tensor.options[plan.choice[t]];
    w.begin_object();
    w.key("tensor"); w.value(tensor.name);
    w.key("layer"); layer_or_null(w, tensor.layer);
    w.key("role"); string_or_null(w, tensor.role);
    w.key("type"); w.value(std::string(type_name(chosen.type)));
    w.key("bytes"); w.value(chosen.bytes);
    w.key("n_elements"); w.value(tensor.n_elements);
    w.key("bits_per_weight"); w.value(bits_per_weight(chosen.bytes, tensor.n_elements));
    w.key("predicted_delta_kld"); w.value(chosen.delta_kld);
    w.end_object();
  }
  w.end_array();
}

// Tensors and bytes per chosen type, the fewest bits per element first.
void write_type_totals(JsonWriter& w, const SensitivityTable& table, const Plan& plan) {
  struct Total {
    DType type;
    size_t tensors = 0;
    uint64_t bytes = 0;
  };
  std::map<uint32_t, Total> by_type;
  for (size_t t = 0; t < table.tensors.size(); ++t) {
    const PlanOption& o = table.tensors[t].options[plan.choice[t]];
    Total& total = by_type.try_emplace(static_cast<uint32_t>(o.type), Total{o.type}).first->second;
    total.tensors += 1;
    total.bytes += o.bytes;
  }
  std::vector<Total> totals;
  for (const auto& [id, total] : by_type) totals.push_back(total);
  const auto bits_per_element = [](DType type) {
    const TypeTraits& tr = type_traits(type);
    return 8.0 * static_cast<double>(tr.block_bytes) / static_cast<double>(tr.block_size);
  };
  std::stable_sort(totals.begin(), totals.end(),
                   [&](const Total& a, const Total& b) { return bits_per_element(a.type) < bits_per_element(b.type); });
  w.key("types");
  w.begin_array();
  for (const Total& total : totals) {
    w.begin_object();
    w.key("type"); w.value(std::string(type_name(total.type)));
    w.key("bits_per_weight"); w.value(bits_per_element(total.type));
    w.key("tensors"); w.value(total.tensors);
    w.key("bytes"); w.value(total.bytes);
    w.end_object();
  }
  w.end_array();
}

void write_validation(JsonWriter& w, const std::vector<ValidationRow>* rows) {
  w.key("validation");
  if (!rows) {
    w.null();
    return;
  }
  w.begin_object();
  w.key("rows");
  w.begin_array();
  for (const ValidationRow& r : *rows) {
    w.begin_object();
    w.key("mix"); w.value(r.name);
    w.key("bytes"); w.value(r.bytes);
    w.key("bits_per_weight"); w.value(r.bpw);
    w.key("predicted_kld"); w.value(r.predicted_kld);  // NaN (a type not probed): null
    w.key("kld"); value_with_error(w, r.measured_kld, r.measured_kld_error);
    w.key("same_top"); value_with_error(w, r.same_top, r.same_top_error);
    w.key("ppl"); value_with_error(w, r.ppl, r.ppl_error);
    w.key("ppl_ratio"); w.value(r.ppl_ratio);
    w.end_object();
  }
  w.end_array();
  w.end_object();
}

}  // namespace

std::string plan_json(const SensitivityTable& table, const Plan& plan, const PlanJsonContext& context,
                      const std::vector<ValidationRow>* validation) {
  std::ostringstream s;
  JsonWriter w(s, /*pretty=*/true);
  write_header(w, context, table, validation);  // opens the document's object
  w.key("complete_sensitivity"); w.value(table.complete);
  write_totals(w, table, plan);
  write_type_totals(w, table, plan);
  write_tensors(w, table, plan);
  w.key("notes");
  w.array(table.notes);
  write_validation(w, validation);
  w.end_object();
  s << "\n";
  return s.str();
}

}  // namespace qlens::tools
