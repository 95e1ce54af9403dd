// Fuzz target "json": the JSON reader (src/core/json_reader.*) on arbitrary
// bytes, then every reader built on it, as the tools run them on a file:
// `qlens plan`'s sensitivity table (parse, then solve at a budget between
// the smallest and the largest plan), `qlens sensitivity`'s reading back of
// its own JSON, and each section of `qlens report` (--compare,
// --sensitivity, --plan, --imatrix-stats, --perplexity), which checks the
// document's tool and schema first (load_input) and then draws it.
#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "core/json_reader.h"
#include "fuzz_util.h"
#include "tools/plan/plan.h"
#include "tools/report/report_sections.h"
#include "tools/sensitivity/sensitivity.h"

using namespace qlens;
using namespace qlens::tools;

namespace {

void walk(const JsonValue& v, int depth) {
  (void)v.display_path();
  switch (v.kind()) {
    case JsonValue::Kind::Number:
      // as_int on integral values only (an error per fractional number
      // would cost more than it explores).
      if (v.is_exact_int() || std::nearbyint(v.as_number()) == v.as_number())
        fuzz::expect_error_or_success([&] { (void)v.as_int(); });
      break;
    case JsonValue::Kind::Array:
      for (const JsonValue& e : v.as_array()) walk(e, depth + 1);
      break;
    case JsonValue::Kind::Object:
      for (const auto& [key, e] : v.as_object()) {
        if (v.find(key) != &e) __builtin_trap();  // keys are unique
        walk(e, depth + 1);
      }
      break;
    default:
      break;
  }
}

void plan_from(std::string_view text) {
  const SensitivityTable table = parse_sensitivity_json(text, "fuzz.json");
  const uint64_t lo = min_plan_bytes(table);
  uint64_t hi = table.fixed_bytes;
  for (const PlanTensor& t : table.tensors) {
    uint64_t most = 0;
    for (const PlanOption& o : t.options) most = std::max(most, o.bytes);
    hi += most;
  }
  for (const uint64_t budget : {lo, lo + (hi > lo ? (hi - lo) / 2 : 0), hi}) (void)solve_plan(table, budget);
}

void report_section(const std::string& path, const char* flag, const char* tool) {
  ReportOptions options;
  options.generated_at = "2026-01-01";
  const report_detail::InputDocument input = report_detail::load_input(flag, path, tool);
  const std::string f = flag;
  if (f == "--compare") (void)report_detail::compare_section(input, options);
  if (f == "--sensitivity") (void)report_detail::sensitivity_section(input, options);
  if (f == "--plan") (void)report_detail::plan_section(input, options);
  if (f == "--imatrix-stats") (void)report_detail::imatrix_section(input, options);
  if (f == "--perplexity") (void)report_detail::perplexity_section({input, input});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  JsonValue doc;
  if (!fuzz::expect_error_or_success([&] { doc = parse_json(text, "fuzz.json"); })) return 0;
  walk(doc, 0);
  fuzz::expect_error_or_success([&] { plan_from(text); });
  fuzz::expect_error_or_success([&] { (void)sensitivity_from_json(std::string(text), "fuzz.json"); });
  const std::string path = fuzz::write_scratch(data, size, ".json");
  fuzz::expect_error_or_success([&] { report_section(path, "--compare", "compare"); });
  fuzz::expect_error_or_success([&] { report_section(path, "--sensitivity", "sensitivity"); });
  fuzz::expect_error_or_success([&] { report_section(path, "--plan", "plan"); });
  fuzz::expect_error_or_success([&] { report_section(path, "--imatrix-stats", "imatrix"); });
  fuzz::expect_error_or_success([&] { report_section(path, "--perplexity", "perplexity"); });
  return 0;
}
