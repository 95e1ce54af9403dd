#include "tools/json_header.h"

namespace qlens::tools {

const char* qlens_version() { return QLENS_VERSION; }

void string_or_null(JsonWriter& w, const std::string& s) {
  if (s.empty())
    w.null();
  else
    w.value(s);
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
