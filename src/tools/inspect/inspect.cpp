#include "tools/inspect/inspect.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/human_bytes.h"
#include "core/parallel.h"
#include "core/json_writer.h"
#include "tools/common/json_header.h"
#include "gguf/util.h"

namespace qlens::tools {

namespace {

constexpr size_t kTextArrayItems = 8;
constexpr size_t kTextStringBytes = 160;
constexpr size_t kJsonArrayItems = 64;
constexpr size_t kJsonHeadItems = 16;

std::string type_label(const gguf::Value& v) {
  if (v.type != gguf::ValueType::Array) return gguf::value_type_name(v.type);
  if (v.elem_type == gguf::ValueType::Array && !v.arr.empty()) return "array[" + type_label(v.arr[0]) + "]";
  return std::string("array[") + gguf::value_type_name(v.elem_type) + "]";
}

std::string shape_text(const gguf::TensorInfo& t) {
  std::string s = "[";
  for (int d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
  return s + "]";
}

double bits_per_weight(uint64_t bytes, int64_t params) {
  return params > 0 ? static_cast<double>(bytes) * 8.0 / static_cast<double>(params) : 0.0;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

std::string rpad(const std::string& s, size_t width) {
  return s.size() < width ? std::string(width - s.size(), ' ') + s : s;
}

// A string for one line of text: escaped, and cut (at a UTF-8 boundary) when long.
std::string display_string(const std::string& s) {
  std::string out(1, '"');
  if (s.size() <= kTextStringBytes) {
    out += gguf::detail::escape_for_display(s);
    out += '"';
    return out;
  }
  size_t cut = kTextStringBytes;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0u) == 0x80u) --cut;
  out += gguf::detail::escape_for_display(std::string_view(s).substr(0, cut));
  out += "...\" (";
  out += std::to_string(s.size());
  out += " bytes)";
  return out;
}

struct Totals {
  int64_t params = 0;
  uint64_t bytes = 0;
};

Totals totals_of(const gguf::File& f) {
  Totals t;
  for (const auto& ti : f.tensors()) {
    t.params += ti.nelements();
    t.bytes += ti.nbytes;
  }
  return t;
}

void json_value(JsonWriter& w, const gguf::Value& v) {
  using gguf::ValueType;
  switch (v.type) {
    case ValueType::U8:
    case ValueType::U16:
    case ValueType::U32:
    case ValueType::U64:
      w.value(v.u);
      return;
    case ValueType::I8:
    case ValueType::I16:
    case ValueType::I32:
    case ValueType::I64:
      w.value(v.i);
      return;
    case ValueType::Bool:
      w.value(v.i != 0);
      return;
    case ValueType::F32:
      w.value(static_cast<float>(v.f));
      return;
    case ValueType::F64:
      w.value(v.f);
      return;
    case ValueType::String:
      w.value(v.str);
      return;
    case ValueType::Array:
      if (v.arr.size() <= kJsonArrayItems) {
        w.begin_array();
        for (const auto& e : v.arr) json_value(w, e);
        w.end_array();
      } else {
        w.begin_object();
        w.key("type");
        w.value(gguf::value_type_name(v.elem_type));
        w.key("count");
        w.value(static_cast<uint64_t>(v.arr.size()));
        w.key("head");
        w.begin_array();
        for (size_t k = 0; k < kJsonHeadItems; ++k) json_value(w, v.arr[k]);
        w.end_array();
        w.end_object();
      }
      return;
  }
  w.null();
}

}  // namespace

void inspect_text(const gguf::File& f, std::ostream& os) {
  os << "GGUF v" << f.version() << ": " << f.path() << "\n";
  os << "  file size    " << f.file_size() << " bytes (" << human_bytes(f.file_size()) << ")\n";
  os << "  alignment    " << f.alignment() << "\n";
  os << "  data offset  " << f.data_offset() << "\n";
  if (f.split_count() > 1) {
    os << "  parts        " << f.split_count() << " (the first's sizes above; tensors from all of them):\n";
    for (int k = 1; k < f.split_count(); ++k) os << "               " << f.part_path(k) << "\n";
  }
  os << "\n";

  const auto& kv = f.metadata();
  size_t key_w = 3;
  size_t type_w = 4;
  for (const auto& e : kv) {
    key_w = std::max(key_w, std::min<size_t>(e.key.size(), 48));
    type_w = std::max(type_w, type_label(e.value).size());
  }
  os << "Metadata: " << kv.size() << (kv.size() == 1 ? " key\n" : " keys\n");
  if (!kv.empty()) {
    os << "  " << pad("KEY", key_w) << "  " << pad("TYPE", type_w) << "  VALUE\n";
    for (const auto& e : kv) {
      const std::string value =
          e.value.type == gguf::ValueType::String ? display_string(e.value.str) : e.value.to_string(kTextArrayItems);
      os << "  " << pad(gguf::detail::escape_for_display(e.key), key_w) << "  " << pad(type_label(e.value), type_w)
         << "  " << value << "\n";
    }
  }

  const auto& ts = f.tensors();
  os << "\nTensors: " << ts.size() << "\n";
  if (!ts.empty()) {
    size_t name_w = 4, type_w2 = 4, shape_w = 5, bytes_w = 5;
    for (const auto& t : ts) {
      name_w = std::max(name_w, std::min<size_t>(t.name.size(), 48));
      type_w2 = std::max(type_w2, type_name(t.type).size());
      shape_w = std::max(shape_w, shape_text(t).size());
      bytes_w = std::max(bytes_w, std::to_string(t.nbytes).size());
    }
    os << "  " << pad("NAME", name_w) << "  " << pad("TYPE", type_w2) << "  " << pad("SHAPE", shape_w) << "  "
       << rpad("BYTES", bytes_w) << "  " << rpad("BPW", 7) << "\n";
    for (const auto& t : ts) {
      os << "  " << pad(gguf::detail::escape_for_display(t.name), name_w) << "  "
         << pad(std::string(type_name(t.type)), type_w2) << "  " << pad(shape_text(t), shape_w) << "  "
         << rpad(std::to_string(t.nbytes), bytes_w) << "  "
         << rpad(fixed(bits_per_weight(t.nbytes, t.nelements()), 2), 7) << "\n";
    }
  }
  const Totals tot = totals_of(f);
  os << "\nTotals: " << ts.size() << (ts.size() == 1 ? " tensor, " : " tensors, ") << tot.params << " parameters, "
     << tot.bytes << " bytes (" << human_bytes(tot.bytes) << "), "
     << (tot.params > 0 ? fixed(bits_per_weight(tot.bytes, tot.params), 2) : std::string("-")) << " bits per weight\n";
}

void inspect_json(const gguf::File& f, std::ostream& os, bool pretty) {
  JsonWriter w(os, pretty);
  write_json_header(w, "qlens inspect", 1, {{"file", f.path()}});
  w.key("settings");
  w.begin_object();
  w.end_object();
  w.key("version");
  w.value(f.version());
  w.key("alignment");
  w.value(static_cast<uint64_t>(f.alignment()));
  w.key("file_size");
  w.value(f.file_size());
  w.key("data_offset");
  w.value(f.data_offset());
  w.key("parts");  // a split model's files, the first's included
  w.begin_array();
  for (int k = 0; k < f.split_count(); ++k) w.value(f.part_path(k));
  w.end_array();

  w.key("metadata");
  w.begin_object();
  for (const auto& e : f.metadata()) {
    w.key(e.key);
    w.begin_object();
    w.key("type");
    w.value(type_label(e.value));
    w.key("value");
    json_value(w, e.value);
    w.end_object();
  }
  w.end_object();

  w.key("tensors");
  w.begin_array();
  for (const auto& t : f.tensors()) {
    w.begin_object();
    w.key("tensor");
    w.value(t.name);
    w.key("type");
    w.value(type_name(t.type));
    w.key("shape");
    w.begin_array();
    for (int d = 0; d < t.n_dims; ++d) w.value(t.ne[d]);
    w.end_array();
    w.key("offset");
    w.value(t.offset);
    w.key("split");
    w.value(static_cast<int64_t>(t.split));
    w.key("bytes");
    w.value(static_cast<uint64_t>(t.nbytes));
    w.key("bits_per_weight");
    w.value(bits_per_weight(t.nbytes, t.nelements()));
    w.end_object();
  }
  w.end_array();

  const Totals tot = totals_of(f);
  w.key("totals");
  w.begin_object();
  w.key("tensor_count");
  w.value(static_cast<uint64_t>(f.tensors().size()));
  w.key("parameter_count");
  w.value(tot.params);
  w.key("total_bytes");
  w.value(tot.bytes);
  w.key("bits_per_weight");
  if (tot.params > 0)
    w.value(bits_per_weight(tot.bytes, tot.params));
  else
    w.null();
  w.end_object();
  w.end_object();
  os << '\n';
}

NonFiniteTensor check_tensor(const gguf::TensorInfo& t, const uint8_t* data) {
  NonFiniteTensor r;
  r.name = t.name;
  const TypeTraits& tr = type_traits(t.type);
  if (!tr.to_float || t.ne[0] % tr.block_size != 0) return r;  // not a type the engine reads: inspect lists it
  // Rows converted in slices of 64 Ki values.
  const int64_t row = t.ne[0], n_rows = t.nelements() / row;
  const int64_t rows_per_slice = std::max<int64_t>(1, 65536 / row);
  const size_t row_size = row_bytes(t.type, row);
  std::vector<float> values(static_cast<size_t>(rows_per_slice * row));
  for (int64_t r0 = 0; r0 < n_rows; r0 += rows_per_slice) {
    const int64_t nr = std::min(rows_per_slice, n_rows - r0);
    tr.to_float(data + r0 * row_size, values.data(), nr * row);
    for (int64_t k = 0; k < nr * row; ++k) {
      if (std::isfinite(values[k])) continue;
      (std::isnan(values[k]) ? r.n_nan : r.n_inf) += 1;
      if (r.first < 0) {
        r.first = r0 * row + k;
        r.first_is_nan = std::isnan(values[k]);
      }
    }
  }
  return r;
}

std::vector<NonFiniteTensor> check_tensors(const gguf::File& file, int n_threads) {
  const auto& tensors = file.tensors();
  std::vector<NonFiniteTensor> found(tensors.size());
  parallel_for(static_cast<int64_t>(tensors.size()), n_threads,
               [&](int64_t i, int) { found[i] = check_tensor(tensors[i], file.tensor_data(tensors[i])); });
  std::vector<NonFiniteTensor> bad;
  for (NonFiniteTensor& r : found)
    if (r.any()) bad.push_back(std::move(r));
  return bad;
}

}  // namespace qlens::tools
