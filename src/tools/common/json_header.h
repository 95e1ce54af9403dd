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

#include "core/json_reader.h"
#include "core/json_writer.h"

namespace qlens::tools {

using JsonInputs = std::initializer_list<std::pair<std::string_view, std::string>>;

// Opens the top-level object and writes tool, schema_version, qlens_version
// and inputs (empty paths as null).
void write_json_header(JsonWriter& w, std::string_view tool, int schema_version, JsonInputs inputs);

// A string, or null when it is empty (unknown or not given).
void string_or_null(JsonWriter& w, const std::string& s);

// A layer index, or null outside the blocks (layer < 0).
void layer_or_null(JsonWriter& w, int layer);

// The build's version string ("0.1.0").
const char* qlens_version();

// ---- reading files of either schema (schema 1 used other names) ----

// A string member; "" when absent or null (unknown, not given).
std::string optional_string(const JsonValue& object, std::string_view key);
// "layer": the index; null, -1 or absent (outside the blocks) give -1.
int read_layer(const JsonValue& row);
// The member under the first of `keys` present ({"tensor", "name"}: schema 2's
// name, then schema 1's); an Error naming the first key when none is.
const JsonValue& at_either(const JsonValue& object, std::initializer_list<std::string_view> keys);
// The document's schema_version, checked to lie in [1, newest]; `what` names
// the kind of file in the error ("a qlens sensitivity file").
int read_schema_version(const JsonValue& doc, int newest, std::string_view what);

}  // namespace qlens::tools
