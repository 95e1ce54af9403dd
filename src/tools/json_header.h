// The header every qlens JSON file starts with (docs/JSON.md):
//   {"tool": "qlens <subcommand>", "schema_version": N, "qlens_version": "...",
//    "inputs": {"model": PATH, ...}, "settings": {...}, ...the tool's own keys}
// Inputs are the files the run read, by role; an input not given is null.
// Settings are written by the caller (write_json_header leaves the writer
// inside the top-level object, after "inputs"; the caller writes "settings"
// next).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "core/json_writer.h"

namespace qlens::tools {

using JsonInputs = std::initializer_list<std::pair<std::string_view, std::string>>;

// Opens the top-level object and writes tool, schema_version, qlens_version
// and inputs (empty paths as null).
void write_json_header(JsonWriter& w, std::string_view tool, int schema_version, JsonInputs inputs);

// A string, or null when it is empty (unknown or not given).
void string_or_null(JsonWriter& w, const std::string& s);

// The build's version string ("0.1.0").
const char* qlens_version();

}  // namespace qlens::tools
