#include "tools/plan/plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>

#include "core/json_reader.h"
#include "core/text_file.h"
#include "qlens/error.h"
#include "tools/common/json_header.h"
#include "tools/sensitivity/sensitivity.h"

namespace qlens::tools {

// ---- loading ----

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string lower_type_name(DType type) {
  std::string name(type_name(type));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

uint64_t non_negative_int(const JsonValue& v, const char* what) {
  const int64_t n = v.as_int();
  if (n < 0) throw Error(v.where() + ": " + what + " must be >= 0, found " + std::to_string(n));
  return static_cast<uint64_t>(n);
}

// Adds the candidate to `tensor`, or a note saying why it cannot be planned.
void read_candidate(const JsonValue& c, PlanTensor& tensor, std::vector<std::string>& notes) {
  const JsonValue& type_value = c.at("type");
  const std::optional<DType> type = type_from_name(type_value.as_string());
  if (!type) throw Error(type_value.where() + ": unknown type '" + type_value.as_string() + "'");
  const JsonValue& bytes = c.at("bytes");
  const JsonValue& delta_kld = c.at("delta_kld");
  const std::string skipped = tensor.name + ": " + std::string(type_name(*type)) + " skipped: ";
  if (bytes.is_null()) {
    notes.push_back(skipped + "bytes is null (" + bytes.path() + ")");
    return;
  }
  const uint64_t n_bytes = non_negative_int(bytes, "bytes");
  if (delta_kld.is_null()) {
    notes.push_back(skipped + "delta_kld is null, not measured (" + delta_kld.path() + ")");
    return;
  }
  tensor.options.push_back({*type, n_bytes, delta_kld.as_number()});
}

PlanTensor read_tensor(const JsonValue& t, std::vector<std::string>& notes) {
  PlanTensor tensor;
  const JsonValue& name = at_either(t, {"tensor", "name"});  // "name" in schema 1
  tensor.name = name.as_string();
  if (tensor.name.empty()) throw Error(name.where() + ": empty tensor name");
  tensor.role = optional_string(t, "role");
  tensor.layer = read_layer(t);
  const JsonValue& n_elements = t.at("n_elements");
  tensor.n_elements = static_cast<int64_t>(non_negative_int(n_elements, "n_elements"));
  const JsonValue& candidates = t.at("candidates");
  if (candidates.as_array().empty()) throw Error(candidates.where() + ": tensor " + tensor.name + " has no candidates");
  for (const JsonValue& c : candidates.as_array()) read_candidate(c, tensor, notes);
  if (tensor.options.empty())
    throw Error(candidates.where() + ": tensor " + tensor.name +
                " has no usable candidate (every one lacks bytes or delta_kld)");
  return tensor;
}

}  // namespace

SensitivityTable parse_sensitivity_json(std::string_view text, const std::string& source) {
  const JsonValue doc = parse_json(text, source);
  if (!doc.is_object()) throw Error(source + ": expected a JSON object (a qlens sensitivity table)");
  const int version = read_schema_version(doc, kSensitivityJsonSchemaVersion, "a qlens sensitivity table");

  SensitivityTable table;
  table.model = version == 1 ? optional_string(doc, "model") : optional_string(doc.at("inputs"), "model");
  table.fixed_bytes = non_negative_int(doc.at("fixed_bytes"), "fixed_bytes");
  if (const JsonValue* complete = doc.find("complete"); complete && !complete->is_null())
    table.complete = complete->as_bool();
  if (!table.complete) table.notes.push_back("the sensitivity run was interrupted: tensors not probed are missing");

  const JsonValue& tensors = doc.at("tensors");
  if (tensors.as_array().empty()) throw Error(tensors.where() + ": no tensors to plan");
  std::set<std::string> names;
  int64_t planned_elements = 0;
  for (const JsonValue& t : tensors.as_array()) {
    PlanTensor tensor = read_tensor(t, table.notes);
    if (!names.insert(tensor.name).second) throw Error(t.where() + ": tensor " + tensor.name + " appears twice");
    if (tensor.n_elements > std::numeric_limits<int64_t>::max() - planned_elements)
      throw Error(t.at("n_elements").where() + ": " + std::to_string(tensor.n_elements) +
                  " elements make the tensors' total exceed 2^63 - 1");
    planned_elements += tensor.n_elements;
    table.tensors.push_back(std::move(tensor));
  }

  table.n_weights_total = planned_elements;
  if (const JsonValue* total = doc.find("n_weights_total"); total && !total->is_null()) {
    table.n_weights_total = static_cast<int64_t>(non_negative_int(*total, "n_weights_total"));
    if (table.n_weights_total < planned_elements)
      throw Error(total->where() + ": " + std::to_string(table.n_weights_total) +
                  " is less than the planned tensors' elements (" + std::to_string(planned_elements) + ")");
  }
  return table;
}

SensitivityTable load_sensitivity_json(const std::string& path) {
  return parse_sensitivity_json(read_text_file(path), path);
}

// ---- solving ----

namespace {

// Indices of the options on the lower convex hull of (bytes, delta_kld), by
// increasing bytes: the only options a Lagrangian relaxation ever picks.
// Duplicates and dominated options (no fewer bytes and no lower ΔKLD than
// another) drop out first, so ΔKLD strictly decreases along the hull and the
// gain per byte of successive steps strictly decreases.
std::vector<size_t> lower_hull(const std::vector<PlanOption>& options) {
  std::vector<size_t> order(options.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (options[a].bytes != options[b].bytes) return options[a].bytes < options[b].bytes;
    return options[a].delta_kld < options[b].delta_kld;
  });
  std::vector<size_t> hull;
  for (size_t i : order) {
    if (!hull.empty() && options[i].delta_kld >= options[hull.back()].delta_kld) continue;  // dominated
    // Drop the last vertex while it lies on or above the chord to the new one.
    while (hull.size() >= 2) {
      const PlanOption& a = options[hull[hull.size() - 2]];
      const PlanOption& b = options[hull.back()];
      const PlanOption& c = options[i];
      const long double gain_ab = static_cast<long double>(a.delta_kld) - b.delta_kld;
      const long double gain_bc = static_cast<long double>(b.delta_kld) - c.delta_kld;
      const long double bytes_ab = static_cast<long double>(b.bytes - a.bytes);
      const long double bytes_bc = static_cast<long double>(c.bytes - b.bytes);
      if (gain_ab * bytes_bc > gain_bc * bytes_ab) break;  // b is a strict corner: keep it
      hull.pop_back();
    }
    hull.push_back(i);
  }
  return hull;
}

// One step along a tensor's hull, worth gain_per_byte.
struct HullStep {
  size_t tensor;
  size_t to_option;
  uint64_t extra_bytes;
  double gain_per_byte;
};

size_t smallest_option(const std::vector<PlanOption>& options) {
  size_t best = 0;
  for (size_t j = 1; j < options.size(); ++j) {
    const bool fewer = options[j].bytes < options[best].bytes;
    const bool same_but_better = options[j].bytes == options[best].bytes && options[j].delta_kld < options[best].delta_kld;
    if (fewer || same_but_better) best = j;
  }
  return best;
}

struct Solution {
  std::vector<size_t> choice;
  uint64_t used_bytes = 0;  // of the planned tensors
  double lambda = 0;
};

double total_delta_kld(const SensitivityTable& table, const std::vector<size_t>& choice) {
  double total = 0;
  for (size_t t = 0; t < table.tensors.size(); ++t) total += table.tensors[t].options[choice[t]].delta_kld;
  return total;
}

// The Lagrangian relaxation, solved exactly by walking the hulls' breakpoints:
// for a multiplier λ each tensor picks argmin(ΔKLD + λ·bytes), i.e. takes
// every hull step whose gain per byte exceeds λ. Lowering λ from +∞ takes
// the steps of all tensors in decreasing gain per byte; the relaxed plan for
// the smallest λ that fits is the prefix of that order that fits.
Solution relaxed_solution(const SensitivityTable& table, uint64_t available_bytes) {
  Solution s;
  std::vector<HullStep> steps;
  for (size_t t = 0; t < table.tensors.size(); ++t) {
    const std::vector<PlanOption>& options = table.tensors[t].options;
    const std::vector<size_t> hull = lower_hull(options);
    s.choice.push_back(hull.front());
    s.used_bytes += options[hull.front()].bytes;
    for (size_t k = 0; k + 1 < hull.size(); ++k) {
      const PlanOption& from = options[hull[k]];
      const PlanOption& to = options[hull[k + 1]];
      const uint64_t extra = to.bytes - from.bytes;
      steps.push_back({t, hull[k + 1], extra, (from.delta_kld - to.delta_kld) / static_cast<double>(extra)});
    }
  }
  // Stable: equal gains keep tensor order, and within a tensor the hull order
  // (its gains strictly decrease, so a step never precedes its predecessor).
  std::stable_sort(steps.begin(), steps.end(),
                   [](const HullStep& a, const HullStep& b) { return a.gain_per_byte > b.gain_per_byte; });
  for (const HullStep& step : steps) {
    if (step.extra_bytes > available_bytes - s.used_bytes) {
      s.lambda = step.gain_per_byte;
      break;
    }
    s.choice[step.tensor] = step.to_option;
    s.used_bytes += step.extra_bytes;
  }
  return s;
}

// The relaxed plan leaves budget unspent (the step it stopped at did not
// fit). Spend it: repeatedly apply the single-tensor change, to any option
// (hull or not), with the best ΔKLD reduction per extra byte that still fits;
// a change that reduces ΔKLD without costing bytes comes first. Every change
// strictly lowers the total, so this ends.
void spend_remaining_budget(const SensitivityTable& table, uint64_t available_bytes, Solution& s) {
  for (;;) {
    const uint64_t remaining = available_bytes - s.used_bytes;
    size_t best_tensor = 0, best_option = 0;
    double best_ratio = -1, best_gain = 0;
    bool found = false;
    for (size_t t = 0; t < table.tensors.size(); ++t) {
      const std::vector<PlanOption>& options = table.tensors[t].options;
      const PlanOption& current = options[s.choice[t]];
      for (size_t j = 0; j < options.size(); ++j) {
        const double gain = current.delta_kld - options[j].delta_kld;
        if (!(gain > 0)) continue;
        const bool free = options[j].bytes <= current.bytes;
        if (!free && options[j].bytes - current.bytes > remaining) continue;
        const double ratio = free ? std::numeric_limits<double>::infinity()
                                  : gain / static_cast<double>(options[j].bytes - current.bytes);
        if (!found || ratio > best_ratio || (ratio == best_ratio && gain > best_gain)) {
          found = true;
          best_ratio = ratio;
          best_gain = gain;
          best_tensor = t;
          best_option = j;
        }
      }
    }
    if (!found) return;
    s.used_bytes = s.used_bytes - table.tensors[best_tensor].options[s.choice[best_tensor]].bytes +
                   table.tensors[best_tensor].options[best_option].bytes;
    s.choice[best_tensor] = best_option;
  }
}

// A change of one tensor's option.
struct Move {
  size_t tensor = 0;
  size_t option = 0;
  uint64_t bytes_delta = 0;  // bytes freed (downgrade) or added (upgrade)
  double kld_delta = 0;      // ΔKLD added (downgrade) or removed (upgrade)
};

// The two cheapest downgrades (in ΔKLD added) on distinct tensors among a
// set, so a query can exclude the tensor being upgraded.
struct CheapestTwo {
  Move first, second;
  bool has_first = false, has_second = false;
  void offer(const Move& m) {
    if (!has_first || m.kld_delta < first.kld_delta) {
      if (has_first && first.tensor != m.tensor) {
        second = first;
        has_second = true;
      }
      first = m;
      has_first = true;
    } else if (m.tensor != first.tensor && (!has_second || m.kld_delta < second.kld_delta)) {
      second = m;
      has_second = true;
    }
  }
  const Move* excluding(size_t tensor) const {
    if (has_first && first.tensor != tensor) return &first;
    if (has_second && second.tensor != tensor) return &second;
    return nullptr;
  }
};

// Greedy upgrades stop when no single upgrade fits, which can strand budget
// near a breakpoint (e.g. the optimum takes one tensor down a step to pay
// for another's bigger step). Finds the best exchange: one tensor upgraded,
// another downgraded to free the bytes it lacks, with the largest net ΔKLD
// reduction. O(options · log options) per call. False when none improves.
bool apply_best_exchange(const SensitivityTable& table, uint64_t available_bytes, Solution& s) {
  const uint64_t remaining = available_bytes - s.used_bytes;
  // Every downgrade, by bytes freed (largest first), with the running
  // cheapest two: cheapest[i] covers downgrades[0..i], all freeing >= downgrades[i].
  std::vector<Move> downgrades;
  for (size_t t = 0; t < table.tensors.size(); ++t) {
    const std::vector<PlanOption>& options = table.tensors[t].options;
    const PlanOption& current = options[s.choice[t]];
    for (size_t j = 0; j < options.size(); ++j)
      if (options[j].bytes < current.bytes)
        downgrades.push_back({t, j, current.bytes - options[j].bytes, options[j].delta_kld - current.delta_kld});
  }
  if (downgrades.empty()) return false;
  std::sort(downgrades.begin(), downgrades.end(),
            [](const Move& a, const Move& b) { return a.bytes_delta > b.bytes_delta; });
  std::vector<CheapestTwo> cheapest(downgrades.size());
  for (size_t i = 0; i < downgrades.size(); ++i) {
    if (i > 0) cheapest[i] = cheapest[i - 1];
    cheapest[i].offer(downgrades[i]);
  }

  const double current_total = total_delta_kld(table, s.choice);
  // Rounding must not pass for an improvement (it could cycle).
  const double min_improvement = 1e-12 * (1 + std::fabs(current_total));
  Move best_up, best_down;
  double best_net = min_improvement;
  bool found = false;
  for (size_t t = 0; t < table.tensors.size(); ++t) {
    const std::vector<PlanOption>& options = table.tensors[t].options;
    const PlanOption& current = options[s.choice[t]];
    for (size_t j = 0; j < options.size(); ++j) {
      const double gain = current.delta_kld - options[j].delta_kld;
      if (!(gain > best_net) || options[j].bytes <= current.bytes) continue;
      const uint64_t extra = options[j].bytes - current.bytes;
      if (extra <= remaining) continue;  // fits alone: the greedy pass's business
      const uint64_t needed = extra - remaining;
      // The last downgrade freeing at least `needed` bytes.
      const auto end = std::partition_point(downgrades.begin(), downgrades.end(),
                                            [&](const Move& m) { return m.bytes_delta >= needed; });
      if (end == downgrades.begin()) continue;
      const Move* down = cheapest[static_cast<size_t>(end - downgrades.begin()) - 1].excluding(t);
      if (!down || gain - down->kld_delta <= best_net) continue;
      best_net = gain - down->kld_delta;
      best_up = {t, j, extra, gain};
      best_down = *down;
      found = true;
    }
  }
  if (!found) return false;
  s.choice[best_up.tensor] = best_up.option;
  s.choice[best_down.tensor] = best_down.option;
  s.used_bytes = s.used_bytes + best_up.bytes_delta - best_down.bytes_delta;
  return true;
}

// The plan as a multiple-choice knapsack, solved by dynamic programming over
// the budget in buckets. Unlike the relaxation it can take one large step in
// place of many small ones that gain more per byte: a big tied embedding kept
// at Q8_0 rather than dropped to Q5_0 for a dozen cheap upgrades, which no
// single exchange undoes. Options are rounded to the nearest bucket, so a
// plan that fills the budget exactly is among the table's (rounding up would
// lose it); the table reaches half a bucket per tensor past the budget, and
// the best entry whose real bytes fit is taken. Exact when every option's
// bytes are multiples of the bucket. Empty when no entry tried fits.
std::optional<Solution> bucketed_solution(const SensitivityTable& table, uint64_t available_bytes) {
  const size_t n = table.tensors.size();
  constexpr size_t kNone = 255;  // a choice is a byte: tables with more options per tensor go unsolved
  size_t n_options = 0;
  for (const PlanTensor& t : table.tensors) {
    if (t.options.size() >= kNone) return std::nullopt;
    n_options += t.options.size();
  }
  // At most 2·10^7 steps (0.02 s; 0.1 s under ASan) and 65536 buckets. With so many
  // tensors that fewer than 4096 buckets remain, each is a small part of the
  // budget and the relaxation is close to the optimum anyway.
  const uint64_t n_buckets = std::min<uint64_t>(20'000'000 / std::max<size_t>(n_options, 1), 65536);
  if (n_buckets < 4096) return std::nullopt;
  const uint64_t bucket = std::max<uint64_t>(1, (available_bytes + n_buckets - 1) / n_buckets);
  const size_t capacity = static_cast<size_t>(available_bytes / bucket) + (bucket > 1 ? n / 2 + 1 : 0);
  auto buckets_of = [&](uint64_t bytes) { return static_cast<size_t>((bytes + bucket / 2) / bucket); };

  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> best(capacity + 1, 0.0), next(capacity + 1);  // best[b]: least ΔKLD in <= b buckets
  std::vector<uint8_t> choice(n * (capacity + 1), static_cast<uint8_t>(kNone));
  for (size_t t = 0; t < n; ++t) {
    std::fill(next.begin(), next.end(), kInf);
    uint8_t* chosen = choice.data() + t * (capacity + 1);
    const std::vector<PlanOption>& options = table.tensors[t].options;
    for (size_t j = 0; j < options.size(); ++j) {
      const size_t w = buckets_of(options[j].bytes);
      if (w > capacity) continue;
      const double v = options[j].delta_kld;
      for (size_t b = w; b <= capacity; ++b)
        if (best[b - w] + v < next[b]) {
          next[b] = best[b - w] + v;
          chosen[b] = static_cast<uint8_t>(j);
        }
    }
    best.swap(next);
  }
  // best[] falls with b, so the first entry from the top that fits is the
  // best of those tried.
  const size_t n_tries = std::min(capacity + 1, 2 * n + 64);
  for (size_t top = capacity, tried = 0; tried < n_tries && best[top] != kInf; --top, ++tried) {
    Solution s;
    s.choice.assign(n, 0);
    size_t b = top;
    for (size_t t = n; t-- > 0;) {
      const size_t j = choice[t * (capacity + 1) + b];
      s.choice[t] = j;
      s.used_bytes += table.tensors[t].options[j].bytes;
      b -= buckets_of(table.tensors[t].options[j].bytes);
    }
    if (s.used_bytes <= available_bytes) return s;
  }
  return std::nullopt;
}

// Spends what a solution left of the budget, single changes first, then
// exchanges. Each exchange strictly lowers the total; the cap only guards
// against pathological inputs taking many small steps.
void spend_and_exchange(const SensitivityTable& table, uint64_t available_bytes, Solution& s) {
  spend_remaining_budget(table, available_bytes, s);
  for (size_t round = 0; round < 4 * table.tensors.size() + 16; ++round) {
    if (!apply_best_exchange(table, available_bytes, s)) break;
    spend_remaining_budget(table, available_bytes, s);
  }
}

std::string describe_size(const SensitivityTable& table, uint64_t bytes) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%llu bytes (%.2f MiB, %.4f bpw)", static_cast<unsigned long long>(bytes),
                static_cast<double>(bytes) / kMiB, bpw_from_bytes(table, bytes));
  return buf;
}

}  // namespace

uint64_t min_plan_bytes(const SensitivityTable& table) {
  uint64_t total = table.fixed_bytes;
  for (const PlanTensor& t : table.tensors) {
    if (t.options.empty()) throw Error("tensor " + t.name + " has no options to plan with");
    total += t.options[smallest_option(t.options)].bytes;
  }
  return total;
}

Plan solve_plan(const SensitivityTable& table, uint64_t budget_bytes) {
  const uint64_t minimum = min_plan_bytes(table);
  if (budget_bytes < minimum)
    throw Error("the budget of " + describe_size(table, budget_bytes) + " is below the smallest plan possible: " +
                describe_size(table, minimum) + ", every tensor at its smallest candidate plus " +
                std::to_string(table.fixed_bytes) + " fixed bytes");
  const uint64_t available = budget_bytes - table.fixed_bytes;
  Solution s = relaxed_solution(table, available);
  spend_and_exchange(table, available, s);
  // Both solvers; the knapsack's plan where it is better (λ stays the
  // relaxation's: the dual bound).
  if (std::optional<Solution> knapsack = bucketed_solution(table, available)) {
    spend_and_exchange(table, available, *knapsack);
    const double relaxed_total = total_delta_kld(table, s.choice);
    if (total_delta_kld(table, knapsack->choice) < relaxed_total - 1e-12 * (1 + std::fabs(relaxed_total))) {
      knapsack->lambda = s.lambda;
      s = std::move(*knapsack);
    }
  }

  Plan plan;
  plan.choice = std::move(s.choice);
  plan.budget_bytes = budget_bytes;
  plan.total_bytes = table.fixed_bytes + s.used_bytes;
  plan.lambda = s.lambda;
  for (size_t t = 0; t < table.tensors.size(); ++t)
    plan.predicted_delta_kld += table.tensors[t].options[plan.choice[t]].delta_kld;
  plan.bits_per_weight = bpw_from_bytes(table, plan.total_bytes);
  return plan;
}

uint64_t budget_from_bpw(const SensitivityTable& table, double bits_per_weight) {
  if (!(bits_per_weight > 0) || !std::isfinite(bits_per_weight))
    throw Error("bits per weight must be a positive number");
  if (table.n_weights_total <= 0) throw Error("the sensitivity table counts no weights");
  const long double bytes = static_cast<long double>(bits_per_weight) * table.n_weights_total / 8;
  if (bytes >= static_cast<long double>(std::numeric_limits<uint64_t>::max())) throw Error("budget too large");
  return static_cast<uint64_t>(bytes);
}

double bpw_from_bytes(const SensitivityTable& table, uint64_t bytes) {
  return table.n_weights_total > 0 ? 8.0 * static_cast<double>(bytes) / static_cast<double>(table.n_weights_total)
                                   : 0.0;
}

// ---- output ----

std::string regex_escape_name(const std::string& name) {
  static const std::string kMetacharacters = "^$\\.*+?()[]{}|";
  std::string out;
  for (const char ch : name) {
    const unsigned char c = static_cast<unsigned char>(ch);
    const bool upper = c >= 'A' && c <= 'Z';
    const bool separator_or_control = c <= 0x20 || c == 0x7F || c == '=';
    if (upper || separator_or_control) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      if (kMetacharacters.find(ch) != std::string::npos) out += '\\';
      out += ch;
    }
  }
  return out;
}

std::string tensor_type_file(const SensitivityTable& table, const Plan& plan) {
  std::string out;
  for (size_t t = 0; t < table.tensors.size(); ++t) {
    const PlanTensor& tensor = table.tensors[t];
    // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "^" + std::string.
    out += '^';
    out += regex_escape_name(tensor.name);
    out += "$=";
    out += lower_type_name(tensor.options[plan.choice[t]].type);
    out += '\n';
  }
  return out;
}

std::string plan_summary(const SensitivityTable& table, const Plan& plan) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.6g", plan.predicted_delta_kld);
  return "plan for " + (table.model.empty() ? std::string("(unnamed model)") : table.model) + ": budget " +
         describe_size(table, plan.budget_bytes) + ", plan " + describe_size(table, plan.total_bytes) +
         ", predicted ΔKLD " + buf;
}

namespace {
bool is_expert_role(const std::string& role) {
  return role.size() > 5 && role.compare(role.size() - 5, 5, "_exps") == 0;
}
}  // namespace

void print_plan(std::ostream& out, const SensitivityTable& table, const Plan& plan) {
  std::vector<size_t> order(table.tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const PlanTensor& x = table.tensors[a];
    const PlanTensor& y = table.tensors[b];
    return x.layer != y.layer ? x.layer < y.layer : x.name < y.name;
  });
  size_t name_width = 6;
  for (const PlanTensor& t : table.tensors) name_width = std::max(name_width, t.name.size());

  char line[512];
  std::snprintf(line, sizeof line, "%-*s  %-12s %-8s %14s %13s\n", static_cast<int>(name_width), "tensor", "role",
                "type", "bytes", "ΔKLD");  // 13: 'Δ' takes two bytes, one column
  out << line;
  struct TypeTotal {
    size_t tensors = 0;
    uint64_t bytes = 0;
  };
  std::map<uint32_t, TypeTotal> per_type;
  TypeTotal experts;  // the 3-D expert tensors of a mixture of experts
  for (size_t t : order) {
    const PlanTensor& tensor = table.tensors[t];
    const PlanOption& o = tensor.options[plan.choice[t]];
    std::snprintf(line, sizeof line, "%-*s  %-12s %-8s %14llu %12.5g\n", static_cast<int>(name_width),
                  tensor.name.c_str(), tensor.role.c_str(), std::string(type_name(o.type)).c_str(),
                  static_cast<unsigned long long>(o.bytes), o.delta_kld);
    out << line;
    per_type[static_cast<uint32_t>(o.type)].tensors += 1;
    per_type[static_cast<uint32_t>(o.type)].bytes += o.bytes;
    if (is_expert_role(tensor.role)) {
      ++experts.tensors;
      experts.bytes += o.bytes;
    }
  }

  std::snprintf(line, sizeof line,
                "\nsize: %llu bytes (%.2f MiB; %llu of them fixed), budget %llu bytes\n"
                "bits per weight: %.4f\npredicted ΔKLD: %.6g (sum over tensors)\n",
                static_cast<unsigned long long>(plan.total_bytes), static_cast<double>(plan.total_bytes) / kMiB,
                static_cast<unsigned long long>(table.fixed_bytes), static_cast<unsigned long long>(plan.budget_bytes),
                plan.bits_per_weight, plan.predicted_delta_kld);
  out << line << "types:";
  // Types by size per element, the smallest first.
  std::vector<std::pair<uint32_t, TypeTotal>> types(per_type.begin(), per_type.end());
  auto bits_per_element = [](uint32_t id) {
    const TypeTraits& tr = type_traits(static_cast<DType>(id));
    return 8.0 * static_cast<double>(tr.block_bytes) / static_cast<double>(tr.block_size);
  };
  std::stable_sort(types.begin(), types.end(),
                   [&](const auto& a, const auto& b) { return bits_per_element(a.first) < bits_per_element(b.first); });
  for (const auto& [id, total] : types) {
    std::snprintf(line, sizeof line, " %s x%zu (%.2f MiB)", std::string(type_name(static_cast<DType>(id))).c_str(),
                  total.tensors, static_cast<double>(total.bytes) / kMiB);
    out << line;
  }
  out << "\n";
  if (experts.tensors > 0) {
    // Where a mixture of experts' bytes go: the experts take most of them,
    // so their types decide the size.
    std::snprintf(line, sizeof line, "expert tensors: %zu of %zu, %.2f MiB, %.1f%% of the planned bytes\n",
                  experts.tensors, table.tensors.size(), static_cast<double>(experts.bytes) / kMiB,
                  100.0 * static_cast<double>(experts.bytes) /
                      static_cast<double>(std::max<uint64_t>(1, plan.total_bytes - table.fixed_bytes)));
    out << line;
  }
}

void restrict_plan_types(SensitivityTable& table, const std::vector<DType>& keep) {
  for (PlanTensor& t : table.tensors) {
    std::vector<PlanOption> kept;
    for (const PlanOption& o : t.options)
      if (std::find(keep.begin(), keep.end(), o.type) != keep.end()) kept.push_back(o);
    if (kept.empty() && !t.options.empty()) kept.push_back(t.options.front());
    t.options = kept;
  }
}

}  // namespace qlens::tools
