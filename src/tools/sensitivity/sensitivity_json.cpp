// qlens sensitivity's output: the table it prints, its JSON (the file qlens
// plan reads, also the checkpoint) and that JSON read back.
#include "tools/sensitivity/sensitivity.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>

#include "core/json_reader.h"
#include "core/json_writer.h"
#include "qlens/error.h"
#include "tools/common/json_header.h"

namespace qlens::tools {

const char* sensitivity_group_name(SensitivityGroup group) {
  switch (group) {
    case SensitivityGroup::Tensor: return "tensor";
    case SensitivityGroup::Layer: return "layer";
    case SensitivityGroup::Role: return "role";
    case SensitivityGroup::Experts: return "experts";
  }
  return "tensor";
}

namespace {

const char* mode_name(SensitivityMode mode) {
  return mode == SensitivityMode::Quant ? "quant" : mode == SensitivityMode::Noise ? "noise" : "pooled";
}

std::vector<std::string> type_names(const std::vector<DType>& types) {
  std::vector<std::string> names;
  for (DType t : types) names.emplace_back(type_name(t));
  return names;
}

void write_sensitivity_settings(JsonWriter& w, const SensitivityResult& r) {
  const SensitivityOptions& o = r.settings;
  w.key("settings");
  w.begin_object();
  w.key("mode"); w.value(mode_name(r.mode));
  w.key("group"); w.value(sensitivity_group_name(o.group));
  w.key("n_ctx"); w.value(o.n_ctx);
  w.key("n_batch"); w.value(o.n_batch);
  w.key("n_chunks"); if (o.max_chunks > 0) w.value(o.max_chunks); else w.null();  // null: all
  w.key("types"); w.array(type_names(sensitivity_types(o)));
  w.key("noise_levels");
  if (r.mode != SensitivityMode::Quant) w.array(o.noise_levels); else w.null();
  if (r.mode == SensitivityMode::Pooled) {
    w.key("pooled_passes"); w.value(o.pooled_passes);  // asked (0: the default)
  }
  w.key("top_k"); w.value(o.top_k);
  w.key("tensors"); string_or_null(w, o.tensors_regex);
  w.key("seed"); w.value(o.seed);
  w.key("device"); w.value(o.device);
  w.end_object();
}

void write_probe_unit(JsonWriter& w, const SensitivityTensor& t, bool group, SensitivityMode mode) {
  w.begin_object();
  w.key(group ? "group" : "tensor"); w.value(t.name);
  w.key("role"); string_or_null(w, t.role);
  w.key("layer"); layer_or_null(w, t.layer);
  w.key("n_elements"); w.value(t.n_elements);
  w.key("shape");
  w.array(t.shape);
  w.key("source_type"); w.value(std::string(type_name(t.source_type)));
  if (!t.members.empty()) {
    w.key("members");
    w.array(t.members);
  }
  if (mode != SensitivityMode::Quant) {
    w.key("noise_fit");
    w.begin_object();
    w.key("coefficient"); w.value(t.noise_coefficient);
    w.key("exponent"); w.value(t.noise_exponent);
    w.key("points");
    w.begin_array();
    for (auto [e, k] : t.noise_points) {
      w.begin_object();
      w.key("weighted_error"); w.value(e);
      w.key("delta_kld"); w.value(k);
      w.end_object();
    }
    w.end_array();
    w.end_object();
  }
  w.key("candidates");
  w.begin_array();
  for (const SensitivityCandidate& c : t.candidates) {
    w.begin_object();
    w.key("type"); w.value(std::string(type_name(c.type)));
    w.key("bytes"); w.value(c.bytes);
    w.key("bits_per_weight"); w.value(c.bpw);
    w.key("weighted_error"); w.value(c.weighted_error);
    w.key("delta_kld"); w.value(c.delta_kld);
    w.key("delta_kld_error");
    if (c.measured) w.value(c.delta_kld_error); else w.null();
    w.key("delta_ppl");
    if (c.measured) w.value(c.delta_ppl); else w.null();
    w.key("measured"); w.value(c.measured);
    w.end_object();
  }
  w.end_array();
  w.end_object();
}

}  // namespace

std::string sensitivity_json(const SensitivityResult& r) {
  std::ostringstream s;
  JsonWriter w(s, true);
  write_json_header(w, "qlens sensitivity", kSensitivityJsonSchemaVersion,
                    {{"model", r.model_path}, {"text", r.text_path}, {"imatrix", r.imatrix_path}});
  write_sensitivity_settings(w, r);
  w.key("complete"); w.value(r.complete);
  w.key("reference");
  w.begin_object();
  w.key("n_tokens_scored"); w.value(r.n_tokens_scored);
  w.key("ppl"); w.value(r.reference_ppl);
  w.end_object();
  if (r.mode == SensitivityMode::Pooled) {
    w.key("pooled");  // the passes made and how well the fit explains the signed ones
    w.begin_object();
    w.key("passes"); w.value(r.pooled_passes);
    w.key("relative_rms"); w.value(r.pooled_relative_rms);
    w.key("alone");  // the tensors outside the layers, measured a pass each
    w.begin_array();
    for (const auto& [name, kld] : r.pooled_alone) {
      w.begin_object();
      w.key("tensor"); w.value(name);
      w.key("delta_kld"); w.value(kld);
      w.end_object();
    }
    w.end_array();
    w.end_object();
  }
  w.key("fixed_bytes"); w.value(r.fixed_bytes);
  w.key("n_weights_total"); w.value(r.n_weights_total);
  for (const bool groups : {false, true}) {
    if (groups && r.groups.empty()) continue;
    w.key(groups ? "groups" : "tensors");
    w.begin_array();
    for (const SensitivityTensor& t : groups ? r.groups : r.tensors) write_probe_unit(w, t, groups, r.mode);
    w.end_array();
  }
  w.end_object();
  s << "\n";
  return s.str();
}

void print_sensitivity(std::ostream& out, const SensitivityResult& r, size_t top) {
  // Types across tensors, in the order first seen (columns).
  std::vector<DType> columns;
  for (const SensitivityTensor& t : r.groups.empty() ? r.tensors : r.groups)
    for (const SensitivityCandidate& c : t.candidates)
      if (c.type != t.source_type && std::find(columns.begin(), columns.end(), c.type) == columns.end())
        columns.push_back(c.type);
  out << "Sensitivity (" << (r.mode == SensitivityMode::Quant   ? "measured"
                             : r.mode == SensitivityMode::Noise ? "predicted from noise"
                                                                : "predicted from signed noise passes")
      << " mean KLD added when only this " << (r.groups.empty() ? "tensor" : "group") << " is quantized; " << r.n_tokens_scored
      << " tokens; reference PPL " << std::fixed << std::setprecision(4) << r.reference_ppl << ")\n";
  auto cell = [](double v) {
    std::ostringstream s;
    s << std::scientific << std::setprecision(2) << v;
    return s.str();
  };
  // Rank tensors by their ΔKLD at the lowest-bit common type they have.
  std::vector<const SensitivityTensor*> ranked;
  for (const SensitivityTensor& t : r.groups.empty() ? r.tensors : r.groups) ranked.push_back(&t);
  auto worst = [](const SensitivityTensor* t) {
    double m = 0;
    for (const SensitivityCandidate& c : t->candidates) m = std::max(m, c.delta_kld);
    return m;
  };
  std::stable_sort(ranked.begin(), ranked.end(), [&](auto* a, auto* b) { return worst(a) > worst(b); });
  out << std::left << std::setw(28) << "tensor" << std::setw(14) << "role" << std::right << std::setw(6) << "layer";
  for (DType t : columns) out << std::setw(11) << type_name(t);
  out << "\n";
  size_t shown = 0;
  for (const SensitivityTensor* t : ranked) {
    if (top && shown++ >= top) break;
    out << std::left << std::setw(28) << t->name << std::setw(14) << t->role << std::right << std::setw(6)
        << t->layer;
    for (DType type : columns) {
      auto it = std::find_if(t->candidates.begin(), t->candidates.end(), [&](auto& c) { return c.type == type; });
      out << std::setw(11) << (it == t->candidates.end() ? std::string("-") : cell(it->delta_kld));
    }
    out << "\n";
  }
  // Per role and per layer: the sum of ΔKLD at each type (what quantizing the
  // whole group to that type would add, to first order).
  auto summary = [&](const char* title, auto key_of) {
    std::map<std::string, std::map<DType, double>> sums;
    for (const SensitivityTensor& t : r.tensors)
      for (const SensitivityCandidate& c : t.candidates) sums[key_of(t)][c.type] += c.delta_kld;
    out << "\n" << title << " (sum of ΔKLD over its tensors)\n" << std::left << std::setw(16) << "" << std::right;
    for (DType t : columns) out << std::setw(11) << type_name(t);
    out << "\n";
    for (const auto& [k, by_type] : sums) {
      out << std::left << std::setw(16) << k << std::right;
      for (DType t : columns) {
        auto it = by_type.find(t);
        out << std::setw(11) << (it == by_type.end() ? std::string("-") : cell(it->second));
      }
      out << "\n";
    }
  };
  if (!r.groups.empty()) {
    out << "\nEach row: every tensor of the group quantized to the type at once (measured together).\n";
    return;
  }
  summary("Per role", [](const SensitivityTensor& t) { return t.role; });
  summary("Per layer", [](const SensitivityTensor& t) { return t.layer < 0 ? std::string("(none)") : std::to_string(t.layer); });
  out << "\nRead: a larger ΔKLD means the output moves more when this tensor loses bits; the plan\n"
         "gives such tensors more bits. '-': the type does not fit the tensor's rows.\n";
}

}  // namespace qlens::tools

namespace qlens::tools {

namespace {

SensitivityMode read_mode(const JsonValue& v) {
  if (v.as_string() == "quant") return SensitivityMode::Quant;
  if (v.as_string() == "noise") return SensitivityMode::Noise;
  if (v.as_string() == "pooled") return SensitivityMode::Pooled;
  throw Error(v.where() + ": mode '" + v.as_string() + "' is neither quant nor noise");
}

// Schema 2's settings (schema 1 kept only the mode; the rest stays unknown:
// the defaults, which a resume does not check).
void read_settings(const JsonValue& s, SensitivityResult& r, const std::string& path) {
  SensitivityOptions& o = r.settings;
  r.mode = read_mode(s.at("mode"));
  const std::string group = s.at("group").as_string();
  bool known = false;
  for (SensitivityGroup g : {SensitivityGroup::Tensor, SensitivityGroup::Layer, SensitivityGroup::Role,
                             SensitivityGroup::Experts})
    if (group == sensitivity_group_name(g)) o.group = g, known = true;
  if (!known) throw Error(s.at("group").where() + ": unknown group '" + group + "'");
  o.n_ctx = s.at("n_ctx").as_int();
  o.n_batch = s.at("n_batch").as_int();
  o.max_chunks = s.at("n_chunks").is_null() ? -1 : s.at("n_chunks").as_int();
  for (const JsonValue& t : s.at("types").as_array()) {
    const auto type = type_from_name(t.as_string());
    if (!type) throw Error(path + ": " + t.display_path() + ": unknown type '" + t.as_string() + "'");
    o.types.push_back(*type);
  }
  if (!s.at("noise_levels").is_null()) {
    o.noise_levels.clear();
    for (const JsonValue& l : s.at("noise_levels").as_array()) o.noise_levels.push_back(l.as_number());
  }
  o.top_k = s.at("top_k").as_int();
  o.tensors_regex = optional_string(s, "tensors");
  o.seed = static_cast<uint64_t>(s.at("seed").as_int());
  if (const JsonValue* d = s.find("device")) o.device = d->as_string();
}

}  // namespace

SensitivityResult sensitivity_from_json(const std::string& json_text, const std::string& path) {
  const JsonValue doc = parse_json(json_text, path);
  const int version = read_schema_version(doc, kSensitivityJsonSchemaVersion, "a qlens sensitivity file");
  SensitivityResult r;
  if (version == 1) {
    r.model_path = doc.at("model").as_string();
    r.text_path = optional_string(doc, "text");
    r.imatrix_path = optional_string(doc, "imatrix");
    r.mode = read_mode(doc.at("mode"));
    r.settings.mode = r.mode;
    r.settings_recorded = false;
  } else {
    const JsonValue& inputs = doc.at("inputs");
    r.model_path = inputs.at("model").as_string();
    r.text_path = optional_string(inputs, "text");
    r.imatrix_path = optional_string(inputs, "imatrix");
    read_settings(doc.at("settings"), r, path);
    r.settings.mode = r.mode;
    r.settings.imatrix_path = r.imatrix_path;
  }
  r.complete = doc.at("complete").as_bool();
  r.n_tokens_scored = at_either(doc.at("reference"), {"n_tokens_scored", "n_tokens"}).as_int();
  r.reference_ppl = doc.at("reference").at("ppl").as_number();
  r.fixed_bytes = static_cast<uint64_t>(doc.at("fixed_bytes").as_int());
  r.n_weights_total = doc.at("n_weights_total").as_int();
  auto type_of = [&](const JsonValue& v) {
    auto t = type_from_name(v.as_string());
    if (!t) throw Error(v.where() + ": unknown type '" + v.as_string() + "'");
    return *t;
  };
  for (const bool groups : {false, true}) {
    const JsonValue* list = doc.find(groups ? "groups" : "tensors");
    if (!list) continue;
    for (const JsonValue& jt : list->as_array()) {
      SensitivityTensor t;
      t.name = at_either(jt, {groups ? "group" : "tensor", "name"}).as_string();
      t.role = optional_string(jt, "role");
      t.layer = read_layer(jt);
      t.n_elements = jt.at("n_elements").as_int();
      for (const JsonValue& d : jt.at("shape").as_array()) t.shape.push_back(d.as_int());
      t.source_type = type_of(jt.at("source_type"));
      if (const JsonValue* fit = jt.find("noise_fit")) {
        t.noise_coefficient = fit->at("coefficient").as_number();
        t.noise_exponent = fit->at("exponent").as_number();
        for (const JsonValue& pt : fit->at("points").as_array())
          t.noise_points.emplace_back(pt.at("weighted_error").as_number(), pt.at("delta_kld").as_number());
      }
      for (const JsonValue& jc : jt.at("candidates").as_array()) {
        SensitivityCandidate c;
        c.type = type_of(jc.at("type"));
        c.bytes = static_cast<uint64_t>(jc.at("bytes").as_int());
        c.bpw = at_either(jc, {"bits_per_weight", "bpw"}).as_number();
        c.weighted_error = jc.at("weighted_error").as_number();
        c.delta_kld = jc.at("delta_kld").as_number();
        c.measured = jc.at("measured").as_bool();
        if (!jc.at("delta_kld_error").is_null()) c.delta_kld_error = jc.at("delta_kld_error").as_number();
        if (!jc.at("delta_ppl").is_null()) c.delta_ppl = jc.at("delta_ppl").as_number();
        t.candidates.push_back(c);
      }
      if (const JsonValue* members = jt.find("members"))
        for (const JsonValue& m : members->as_array()) t.members.push_back(m.as_string());
      (groups ? r.groups : r.tensors).push_back(std::move(t));
    }
  }
  return r;
}

std::string sensitivity_settings_mismatch(const SensitivityOptions& previous, const SensitivityOptions& now) {
  // --tensors may differ: a tensor probed before is probed as it would be now.
  const auto differs = [](const char* flag, const std::string& then, const std::string& current) {
    return then == current ? std::string()
                           : std::string(flag) + ": " + (then.empty() ? "(none)" : then) + " in the file, " +
                                 (current.empty() ? "(none)" : current) + " now";
  };
  const auto join = [](const std::vector<std::string>& names) {
    std::string s;
    for (const std::string& n : names) s += (s.empty() ? "" : ",") + n;
    return s;
  };
  const auto levels = [](const std::vector<double>& v) {
    std::ostringstream s;
    for (size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
    return s.str();
  };
  const auto types = [&](const SensitivityOptions& o) {
    return join(type_names(sensitivity_types(o)));
  };
  const auto chunks = [](int64_t n) { return n > 0 ? std::to_string(n) : std::string("all"); };
  const std::string checks[] = {
      differs("--mode", mode_name(previous.mode), mode_name(now.mode)),
      differs("--imatrix", previous.imatrix_path, now.imatrix_path),
      differs("--group", sensitivity_group_name(previous.group), sensitivity_group_name(now.group)),
      differs("-c", std::to_string(previous.n_ctx), std::to_string(now.n_ctx)),
      differs("--chunks", chunks(previous.max_chunks), chunks(now.max_chunks)),
      differs("--types", types(previous), types(now)),
      now.mode != SensitivityMode::Quant ? differs("--noise-levels", levels(previous.noise_levels), levels(now.noise_levels))
                                         : std::string(),
      differs("--top-k", std::to_string(previous.top_k), std::to_string(now.top_k)),
      differs("--seed", std::to_string(previous.seed), std::to_string(now.seed)),
  };
  std::string mismatch;
  for (const std::string& c : checks)
    if (!c.empty()) mismatch += (mismatch.empty() ? "" : "; ") + c;
  return mismatch;
}

}  // namespace qlens::tools
