#include "tools/common/json_header.h"

#include <string>

#include "qlens/error.h"

namespace qlens::tools {

const char* qlens_version() { return QLENS_VERSION; }

void string_or_null(JsonWriter& w, const std::string& s) {
  if (s.empty())
    w.null();
  else
    w.value(s);
}

void layer_or_null(JsonWriter& w, int layer) {
  if (layer >= 0)
    w.value(layer);
  else
    w.null();
}

std::string optional_string(const JsonValue& object, std::string_view key) {
  const JsonValue* v = object.find(key);
  return !v || v->is_null() ? std::string() : v->as_string();
}

int read_layer(const JsonValue& row) {
  const JsonValue* v = row.find("layer");
  if (!v || v->is_null()) return -1;
  const int64_t layer = v->as_int();
  if (layer < -1 || layer > (1 << 20)) throw Error(v->where() + ": layer " + std::to_string(layer) + " is out of range");
  return static_cast<int>(layer);
}

const JsonValue& at_either(const JsonValue& object, std::initializer_list<std::string_view> keys) {
  for (std::string_view key : keys)
    if (const JsonValue* v = object.find(key)) return *v;
  return object.at(*keys.begin());
}

int read_schema_version(const JsonValue& doc, int newest, std::string_view what) {
  const JsonValue& v = doc.at("schema_version");
  const int64_t version = v.as_int();
  if (version < 1 || version > newest)
    throw Error(v.where() + ": schema_version " + std::to_string(version) + " of " + std::string(what) +
                " is not one this qlens reads (1 to " + std::to_string(newest) + "; a newer qlens wrote it?)");
  return static_cast<int>(version);
}

void write_json_header(JsonWriter& w, std::string_view tool, int schema_version, JsonInputs inputs) {
  w.begin_object();
  w.key("tool"); w.value(tool);
  w.key("schema_version"); w.value(schema_version);
  w.key("qlens_version"); w.value(qlens_version());
  w.key("inputs");
  w.begin_object();
  for (const auto& [name, path] : inputs) {
    w.key(name);
    string_or_null(w, path);
  }
  w.end_object();
}

}  // namespace qlens::tools
