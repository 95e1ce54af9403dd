#include "tools/imatrix/imatrix_file.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <span>
#include <sstream>

#include "core/text_file.h"
#include "qlens/error.h"
#include "qlens/gguf.h"

namespace qlens::tools {

namespace {

constexpr const char* kSum2Suffix = ".in_sum2";
constexpr const char* kCountsSuffix = ".counts";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Bounds-checked reader over the bytes of a legacy .dat file.
class DatReader {
 public:
  DatReader(const std::string& path, std::string bytes) : path_(path), bytes_(std::move(bytes)) {}
  bool at_end() const { return pos_ == bytes_.size(); }
  int32_t i32(const char* what) {
    int32_t v;
    take(&v, sizeof v, what);
    return v;
  }
  void take(void* dst, size_t n, const char* what) {
    if (n > bytes_.size() - pos_)
      throw Error(path_ + ": truncated at byte " + std::to_string(pos_) + " while reading " + what);
    std::memcpy(dst, bytes_.data() + pos_, n);
    pos_ += n;
  }
  std::string str(int32_t len, const char* what) {
    if (len < 0 || static_cast<size_t>(len) > bytes_.size() - pos_)
      throw Error(path_ + ": " + what + " length " + std::to_string(len) + " at byte " + std::to_string(pos_) +
                  " runs past the end of the file");
    std::string s(bytes_.data() + pos_, static_cast<size_t>(len));
    pos_ += len;
    return s;
  }
  size_t pos() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }

 private:
  std::string path_;
  std::string bytes_;
  size_t pos_ = 0;
};

Imatrix load_dat(const std::string& path, std::string bytes) {
  Imatrix m;
  m.path = path;
  m.counts_in_chunks = true;
  DatReader r(path, std::move(bytes));
  const int32_t n_entries = r.i32("the entry count");
  if (n_entries <= 0) throw Error(path + ": entry count " + std::to_string(n_entries) + " is not positive");
  for (int32_t e = 0; e < n_entries; ++e) {
    const std::string name = r.str(r.i32("a name length"), "name");
    const int32_t ncall = r.i32("a call count");
    const int32_t nval = r.i32("a value count");
    if (nval <= 0 || static_cast<size_t>(nval) > r.remaining() / sizeof(float))
      throw Error(path + ": entry '" + name + "' has value count " + std::to_string(nval) +
                  ", more than the file holds");
    std::vector<float> values(nval);
    r.take(values.data(), values.size() * sizeof(float), "values");
    if (m.entries.count(name)) throw Error(path + ": entry '" + name + "' appears twice");
    ImatrixEntry& entry = m.entries[name];
    entry.n_cols = nval;
    entry.n_mat = 1;
    // Stored as mean(x^2) * ncall; with the call count as the row count the
    // importance (sum2 / counts) is mean(x^2) again.
    const double calls = ncall > 0 ? ncall : 1;
    entry.counts = {calls};
    entry.sum2.assign(values.begin(), values.end());
    for (double v : entry.sum2)
      if (!std::isfinite(v) || v < 0) throw Error(path + ": entry '" + name + "' has a negative or non-finite value");
  }
  if (!r.at_end()) {
    m.chunk_count = r.i32("the chunk count");
    if (!r.at_end()) m.datasets.push_back(r.str(r.i32("the dataset name length"), "dataset name"));
  }
  return m;
}

Imatrix load_gguf(const std::string& path) {
  auto f = gguf::File::open(path);
  Imatrix m;
  m.path = path;
  if (auto type = f->try_string("general.type"); type && *type != "imatrix")
    throw Error(path + ": general.type is '" + *type + "', not 'imatrix'");
  if (auto ds = f->try_string_array("imatrix.datasets")) m.datasets = *ds;
  m.chunk_count = f->try_int("imatrix.chunk_count").value_or(0);
  m.chunk_size = f->try_int("imatrix.chunk_size").value_or(0);
  m.model_name = f->try_string("qlens.imatrix.model_name").value_or("");
  m.run.next_chunk = f->try_int("qlens.imatrix.next_chunk").value_or(-1);
  m.run.nll_sum = f->try_float("qlens.imatrix.nll_sum").value_or(0);
  m.run.nll_sq_sum = f->try_float("qlens.imatrix.nll_sq_sum").value_or(0);
  m.run.n_scored = f->try_int("qlens.imatrix.n_scored").value_or(0);
  auto f32_values = [&](const gguf::TensorInfo& t) {
    if (t.type != DType::F32) throw Error(path + ": tensor '" + t.name + "' must be F32");
    std::vector<double> v(t.nelements());
    const auto* p = reinterpret_cast<const float*>(f->tensor_data(t));
    for (int64_t i = 0; i < t.nelements(); ++i) {
      // Sums of squares and row counts: a negative or non-finite value is a corrupt file.
      if (!std::isfinite(p[i]) || p[i] < 0)
        throw Error(path + ": tensor '" + t.name + "' holds " +
                    (std::isnan(p[i]) ? std::string("NaN") : std::isinf(p[i]) ? "an infinity" : "a negative value") +
                    " at element " + std::to_string(i) + ": the importance matrix is corrupt");
      v[i] = p[i];
    }
    return v;
  };
  for (const auto& t : f->tensors()) {
    if (!ends_with(t.name, kSum2Suffix)) continue;
    const std::string name = t.name.substr(0, t.name.size() - std::strlen(kSum2Suffix));
    const gguf::TensorInfo* counts = f->find_tensor(name + kCountsSuffix);
    if (!counts) throw Error(path + ": '" + t.name + "' has no matching '" + name + kCountsSuffix + "'");
    ImatrixEntry& e = m.entries[name];
    // A dense entry's in_sum2 is 1-D [n_cols] in llama-imatrix's files and
    // qlens's, [n_cols, 1] in those of earlier qlens versions: ne[1] reads
    // as 1 in both, so both give the same entry.
    e.n_cols = t.ne[0];
    e.n_mat = t.ne[1];
    if (counts->nelements() != e.n_mat)
      throw Error(path + ": '" + counts->name + "' has " + std::to_string(counts->nelements()) + " values, expected " +
                  std::to_string(e.n_mat));
    e.sum2 = f32_values(t);
    e.counts = f32_values(*counts);
  }
  for (const auto& t : f->tensors())
    if (ends_with(t.name, kCountsSuffix) &&
        !m.entries.count(t.name.substr(0, t.name.size() - std::strlen(kCountsSuffix))))
      throw Error(path + ": '" + t.name + "' has no matching '" + kSum2Suffix + "' tensor");
  if (m.entries.empty()) throw Error(path + ": no '<tensor>.in_sum2' entries: not an importance matrix");
  return m;
}

}  // namespace

std::vector<float> Imatrix::importance(const std::string& tensor, int64_t n_cols, int64_t mat) const {
  auto it = entries.find(tensor);
  if (it == entries.end()) return {};
  const ImatrixEntry& e = it->second;
  // A legacy .dat stores an expert tensor as one row of n_expert * n_cols
  // values with one count.
  const bool flat_experts = e.n_mat == 1 && e.n_cols != n_cols && n_cols > 0 && e.n_cols % n_cols == 0;
  const int64_t n_mat = flat_experts ? e.n_cols / n_cols : e.n_mat;
  if (!flat_experts && e.n_cols != n_cols)
    throw Error(path + ": entry '" + tensor + "' has " + std::to_string(e.n_cols) + " columns, the tensor has " +
                std::to_string(n_cols));
  if (mat < 0 || mat >= n_mat) throw Error(path + ": entry '" + tensor + "' has no matrix " + std::to_string(mat));
  const double count = e.counts[flat_experts ? 0 : mat];
  // An expert no calibration token reached: every column weighs 1, as
  // llama.cpp's quantize loads it.
  if (!(count > 0)) return std::vector<float>(n_cols, 1.0f);
  std::vector<float> w(n_cols);
  for (int64_t j = 0; j < n_cols; ++j) w[j] = static_cast<float>(e.sum2[mat * n_cols + j] / count);
  return w;
}

std::vector<float> Imatrix::tensor_importance(const std::string& tensor, int64_t n_cols, int64_t n_mat) const {
  std::vector<float> all;
  for (int64_t e = 0; e < n_mat; ++e) {
    const std::vector<float> one = importance(tensor, n_cols, n_mat > 1 ? e : 0);
    if (one.empty()) return {};
    all.insert(all.end(), one.begin(), one.end());
  }
  return all;
}

void convert_counts_to_rows(Imatrix& m, int64_t chunk_size) {
  if (!m.counts_in_chunks) return;
  if (chunk_size <= 0) throw Error(m.path + ": a .dat matrix needs a chunk size to be combined with row counts");
  for (auto& [name, e] : m.entries) {
    for (double& v : e.sum2) v *= static_cast<double>(chunk_size);
    for (double& c : e.counts) c *= static_cast<double>(chunk_size);
  }
  m.chunk_size = chunk_size;
  m.counts_in_chunks = false;
}

Imatrix load_imatrix(const std::string& path) {
  std::string bytes = read_text_file(path);
  if (bytes.size() >= 4 && bytes.compare(0, 4, "GGUF") == 0) return load_gguf(path);
  return load_dat(path, std::move(bytes));
}

void save_imatrix_gguf(const Imatrix& m, const std::string& path) {
  gguf::Writer w;
  w.set("general.type", gguf::Value::make_string("imatrix"));
  w.set("imatrix.datasets", gguf::Value::make_string_array(m.datasets));
  w.set("imatrix.chunk_count", gguf::Value::make_u32(static_cast<uint32_t>(m.chunk_count)));
  w.set("imatrix.chunk_size", gguf::Value::make_u32(static_cast<uint32_t>(m.chunk_size)));
  if (!m.model_name.empty()) w.set("qlens.imatrix.model_name", gguf::Value::make_string(m.model_name));
  if (m.run.next_chunk >= 0) {
    w.set("qlens.imatrix.next_chunk", gguf::Value::make_i64(m.run.next_chunk));
    w.set("qlens.imatrix.nll_sum", gguf::Value::make_f64(m.run.nll_sum));
    w.set("qlens.imatrix.nll_sq_sum", gguf::Value::make_f64(m.run.nll_sq_sum));
    w.set("qlens.imatrix.n_scored", gguf::Value::make_i64(m.run.n_scored));
  }
  std::vector<std::vector<float>> keep;  // data must live until write()
  for (const auto& [name, e] : m.entries) {
    // llama-imatrix makes both tensors 2-D, but ggml's GGUF writer stores
    // ggml_n_dims dimensions, dropping trailing 1s: a dense weight's entry is
    // in_sum2 [n_cols] and counts [1] in its files, an expert weight's
    // [n_cols, n_mat] and [1, n_mat], a dense 3-D weight's (one count)
    // [n_cols * n_mat] and [1]. Tools that check shapes against llama.cpp's
    // files (gguf-py, scripts) then see the same ones.
    const bool one_count = e.one_count && e.n_mat > 1;
    const size_t n_dims = e.n_mat > 1 && !one_count ? 2 : 1;
    auto& sum2 = keep.emplace_back(e.sum2.begin(), e.sum2.end());
    const int64_t ne_sum2[2] = {one_count ? e.n_cols * e.n_mat : e.n_cols, e.n_mat};
    w.add_tensor(name + kSum2Suffix, DType::F32, std::span<const int64_t>(ne_sum2, n_dims), sum2.data(),
                 sum2.size() * sizeof(float));
    auto& counts = keep.emplace_back(e.counts.begin(), e.counts.begin() + (one_count ? 1 : e.n_mat));
    const int64_t ne_counts[2] = {1, e.n_mat};
    w.add_tensor(name + kCountsSuffix, DType::F32, std::span<const int64_t>(ne_counts, n_dims), counts.data(),
                 counts.size() * sizeof(float));
  }
  w.write(path);
}

void save_imatrix_dat(const Imatrix& m, const std::string& path) {
  // llama.cpp's save_imatrix_legacy: entries with no data at all are left
  // out; an expert with none is stored as 1s (uniform importance);
  // ncall counts the chunks of the busiest expert.
  std::vector<const std::string*> stored;
  for (const auto& [name, e] : m.entries)
    if (std::any_of(e.counts.begin(), e.counts.end(), [](double c) { return c > 0; })) stored.push_back(&name);
  std::ostringstream out;
  auto put_i32 = [&](int32_t v) { out.write(reinterpret_cast<const char*>(&v), sizeof v); };
  put_i32(static_cast<int32_t>(stored.size()));
  for (const std::string* name : stored) {
    const ImatrixEntry& e = m.entries.at(*name);
    put_i32(static_cast<int32_t>(name->size()));
    out.write(name->data(), static_cast<std::streamsize>(name->size()));
    // ncall: the chunks this tensor saw (llama.cpp's convention), at least 1.
    const double rows = *std::max_element(e.counts.begin(), e.counts.end());
    const int64_t ncall =
        std::max<int64_t>(1, m.chunk_size > 0 ? static_cast<int64_t>(std::ceil(rows / m.chunk_size))
                                              : std::llround(rows));
    put_i32(static_cast<int32_t>(ncall));
    put_i32(static_cast<int32_t>(e.n_cols * e.n_mat));
    for (int64_t x = 0; x < e.n_mat; ++x)
      for (int64_t j = 0; j < e.n_cols; ++j) {
        const double count = e.counts[x];
        const double mean = count > 0 ? e.sum2[x * e.n_cols + j] / count : 1.0;
        const float v = static_cast<float>(mean * static_cast<double>(ncall));  // mean(x^2) * ncall
        out.write(reinterpret_cast<const char*>(&v), sizeof v);
      }
  }
  put_i32(static_cast<int32_t>(m.chunk_count));
  const std::string dataset = m.datasets.empty() ? std::string() : m.datasets.front();
  put_i32(static_cast<int32_t>(dataset.size()));
  out.write(dataset.data(), static_cast<std::streamsize>(dataset.size()));
  write_file_atomic(path, out.str());
}

}  // namespace qlens::tools
