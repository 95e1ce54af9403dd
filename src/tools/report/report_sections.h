// The sections of `qlens report` (one file each: report_compare.cpp,
// report_sensitivity.cpp, report_plan.cpp, report_curve.cpp, report_imatrix.cpp; perplexity in
// report.cpp) and the JSON helpers they share. Internal to the report.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/json_reader.h"
#include "tools/common/json_header.h"
#include "tools/report/report.h"

namespace qlens::tools::report_detail {

struct Section {
  std::string id;     // the anchor, and data-section (compare, sensitivity, ...)
  std::string title;  // the heading and the navigation's link text
  std::string html;   // the section's body
};

// A parsed input file with the flag it came from.
struct InputDocument {
  std::string flag;  // "--compare"
  std::string path;
  JsonValue doc;
};

// Reads and parses `path`; the document must be an object, and when it has a
// "tool" field, one of `tools` ("compare" and "qlens compare" both count).
InputDocument load_input(const std::string& flag, const std::string& path, std::string_view tool);

// Field access with errors that name the file and the JSON path.
// number(): the key must exist; null gives NaN. optional_*: absent or null
// give NaN / "" / the fallback.
double number(const JsonValue& object, std::string_view key);
double optional_number(const JsonValue& object, std::string_view key);
// (optional_string: tools/common/json_header.h)
// A number, or the "value" of a {value, error} object (either spelling).
double value_of(const JsonValue& object, std::string_view key);
double error_of(const JsonValue& object, std::string_view key, std::string_view flat_error_key = "");
// The first non-empty string found at one of the dotted paths ("meta.ref_path").
std::string first_string(const JsonValue& doc, std::initializer_list<std::string_view> dotted_paths);
// The first number found at one of the dotted paths; NaN when none is.
double first_number(const JsonValue& doc, std::initializer_list<std::string_view> dotted_paths);

// A paragraph of "key: value" facts (values escaped).
std::string facts(const std::vector<std::pair<std::string, std::string>>& items);
// A note paragraph (escaped).
std::string note(const std::string& text);

Section compare_section(const InputDocument& input, const ReportOptions& options);
Section sensitivity_section(const InputDocument& input, const ReportOptions& options);
Section plan_section(const InputDocument& input, const ReportOptions& options);
Section curve_section(const InputDocument& input, const ReportOptions& options);
Section imatrix_section(const InputDocument& input, const ReportOptions& options);
Section perplexity_section(const std::vector<InputDocument>& inputs);

// Sorted layers and roles of a layer x role grid; tensors outside the blocks
// get the row "(no layer)" below the layers.
struct LayerRoleAxes {
  std::vector<int> layers;          // ascending; -1 last when present
  std::vector<std::string> roles;   // in the order first seen
  std::vector<std::string> row_labels() const;
  size_t row_of(int layer) const;
  size_t column_of(const std::string& role) const;
};
LayerRoleAxes layer_role_axes(const std::vector<std::pair<int, std::string>>& layer_and_role);

}  // namespace qlens::tools::report_detail
