// GGUF reader: memory-maps the file and validates every field before use.
//
// Layout (all little-endian):
//   "GGUF" | version u32 | tensor_count | kv_count | kv* | tensor_info* | pad | data
// where counts, string lengths, array lengths and dimensions are u64 in v2/v3
// and u32 in the legacy v1. A kv is: key string, value type u32, value; a tensor
// info is: name string, n_dims u32, ne[n_dims], type u32, offset u64 (relative
// to the data section, which starts at the next multiple of general.alignment).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <unordered_set>

#include "gguf/util.h"
#include "qlens/error.h"
#include "qlens/gguf.h"

namespace qlens::gguf {

namespace {

constexpr uint64_t kMaxKeyLength = 65535;              // keys and tensor names (bytes)
constexpr uint64_t kMaxStringLength = 256ull << 20;    // any metadata string (bytes)
constexpr int kMaxArrayDepth = 8;                      // nesting of arrays in arrays
constexpr uint64_t kMaxMetadataElements = 1ull << 23;  // array elements in all metadata
constexpr int kMaxDims = 4;
constexpr uint32_t kDefaultAlignment = 32;

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::F64); }

size_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::Bool:
      return 1;
    case ValueType::U16:
    case ValueType::I16:
      return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32:
      return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64:
      return 8;
    default:
      return 0;
  }
}

std::string quoted(std::string_view s) {
  std::string q(1, '\'');
  q += detail::escape_for_display(s);
  q += '\'';
  return q;
}

}  // namespace

// Parses the mapped bytes of a File. Every read is bounds-checked; every
// failure throws Error("<path>: <what> ...").
class Parser {
 public:
  explicit Parser(File& f) : f_(f), p_(f.map_), size_(f.size_) {}

  void parse() {
    read_header();
    read_metadata();
    resolve_alignment();
    read_tensor_infos();
    check_tensor_data();
  }

 private:
  File& f_;
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  bool v1_ = false;
  uint64_t elements_ = 0;  // array elements read so far (all metadata)
  uint64_t tensor_count_ = 0;
  std::string ctx_;                  // "key 'x'" / "tensor 'y'": what is being read, for messages
  std::vector<uint64_t> elem_path_;  // array indices inside the current value

  [[noreturn]] void fail(const std::string& msg) const { throw Error(f_.path_ + ": " + msg); }

  std::string where() const {
    std::string w = ctx_;
    for (uint64_t k : elem_path_) {
      w += '[';
      w += std::to_string(k);
      w += ']';
    }
    return w;
  }

  uint64_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, const char* what) const {
    if (n > remaining())
      fail("file is truncated: " + where() + (where().empty() ? "" : ": ") + what + " at byte offset " +
           std::to_string(pos_) + " needs " + std::to_string(n) + " bytes but only " + std::to_string(remaining()) +
           " remain (file size " + std::to_string(size_) + ")");
  }

  uint64_t read_le(size_t n, const char* what) {
    need(n, what);
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k) v |= static_cast<uint64_t>(p_[pos_ + k]) << (8 * k);
    pos_ += n;
    return v;
  }
  uint32_t u32(const char* what) { return static_cast<uint32_t>(read_le(4, what)); }
  uint64_t u64(const char* what) { return read_le(8, what); }
  // Counts and lengths: u32 in v1, u64 later.
  uint64_t len(const char* what) { return v1_ ? read_le(4, what) : read_le(8, what); }
  size_t len_size() const { return v1_ ? 4 : 8; }

  std::string read_string(const char* what, uint64_t max_len) {
    const uint64_t at = pos_;
    std::string lw = std::string(what) + " length";
    const uint64_t n = len(lw.c_str());
    const std::string w = where();
    const std::string prefix = w.empty() ? "" : w + ": ";
    if (n > max_len)
      fail(prefix + what + " length " + std::to_string(n) + " at byte offset " + std::to_string(at) +
           " exceeds the limit of " + std::to_string(max_len) + " bytes");
    if (n > remaining())
      fail(prefix + what + " length " + std::to_string(n) + " at byte offset " + std::to_string(at) +
           " runs past the end of the file (" + std::to_string(remaining()) + " bytes left, file size " +
           std::to_string(size_) + ")");
    std::string s(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n;
    return s;
  }

  void read_header() {
    need(4, "magic");
    if (std::memcmp(p_, "GGUF", 4) != 0) {
      std::string got = detail::escape_for_display(std::string_view(reinterpret_cast<const char*>(p_), 4));
      std::string msg = "not a GGUF file: bad magic \"" + got + "\" at byte offset 0 (expected \"GGUF\")";
      if (std::memcmp(p_, "FUGG", 4) == 0) msg += "; the magic is byte-swapped (a big-endian file?)";
      fail(msg);
    }
    pos_ = 4;
    const uint32_t version = u32("version");
    const uint32_t swapped = __builtin_bswap32(version);
    if (version == 0 || version > 3) {
      if (swapped >= 1 && swapped <= 3)
        fail("big-endian GGUF file (version field reads " + hex32(version) + ", which is version " +
             std::to_string(swapped) + " byte-swapped); only little-endian GGUF files are supported");
      fail("unsupported GGUF version " + std::to_string(version) + " (" + hex32(version) +
           ") at byte offset 4; supported versions are 1, 2 and 3");
    }
    f_.version_ = version;
    v1_ = version == 1;
  }

  void read_metadata() {
    const uint64_t tc_at = pos_;
    const uint64_t tensor_count = len("tensor count");
    const uint64_t kv_at = pos_;
    const uint64_t kv_count = len("metadata key-value count");
    // The smallest possible entries: a kv is a key length, a 1-char key, a type
    // and a 1-byte value; a tensor info is a name length, a 1-char name, n_dims,
    // one dimension, a type and an offset.
    const uint64_t min_kv = len_size() + 1 + 4 + 1;
    const uint64_t min_ti = len_size() + 1 + 4 + len_size() + 4 + 8;
    if (kv_count > remaining() / min_kv)
      fail("metadata key-value count " + std::to_string(kv_count) + " at byte offset " + std::to_string(kv_at) +
           " is impossible: the remaining " + std::to_string(remaining()) + " bytes hold at most " +
           std::to_string(remaining() / min_kv) + " entries");
    if (tensor_count > remaining() / min_ti)
      fail("tensor count " + std::to_string(tensor_count) + " at byte offset " + std::to_string(tc_at) +
           " is impossible: the remaining " + std::to_string(remaining()) + " bytes hold at most " +
           std::to_string(remaining() / min_ti) + " tensor infos");
    tensor_count_ = tensor_count;

    f_.kv_.reserve(kv_count);
    std::unordered_set<std::string> seen;
    for (uint64_t k = 0; k < kv_count; ++k) {
      const uint64_t key_at = pos_;
      ctx_ = "metadata entry #" + std::to_string(k) +
             (k ? " (after key " + quoted(f_.kv_.back().key) + ")" : std::string());
      std::string key = read_string("key", kMaxKeyLength);
      if (key.empty()) fail(ctx_ + ": empty key at byte offset " + std::to_string(key_at));
      ctx_ = "key " + quoted(key);
      if (!seen.insert(key).second) fail("duplicate key " + quoted(key) + " at byte offset " + std::to_string(key_at));
      const uint64_t type_at = pos_;
      const uint32_t type = u32("value type");
      if (!valid_value_type(type))
        fail(ctx_ + ": unknown value type id " + std::to_string(type) + " at byte offset " + std::to_string(type_at) +
             " (valid ids are 0..12)");
      KeyValue kv;
      kv.key = std::move(key);
      kv.value = read_value(static_cast<ValueType>(type), 0);
      f_.kv_.push_back(std::move(kv));
    }
    ctx_.clear();
  }

  Value read_value(ValueType type, int depth) {
    Value v;
    v.type = type;
    switch (type) {
      case ValueType::U8:
        v.u = read_le(1, "u8 value");
        break;
      case ValueType::U16:
        v.u = read_le(2, "u16 value");
        break;
      case ValueType::U32:
        v.u = read_le(4, "u32 value");
        break;
      case ValueType::U64:
        v.u = read_le(8, "u64 value");
        break;
      case ValueType::I8:
        v.i = static_cast<int8_t>(read_le(1, "i8 value"));
        break;
      case ValueType::I16:
        v.i = static_cast<int16_t>(read_le(2, "i16 value"));
        break;
      case ValueType::I32:
        v.i = static_cast<int32_t>(read_le(4, "i32 value"));
        break;
      case ValueType::I64:
        v.i = static_cast<int64_t>(read_le(8, "i64 value"));
        break;
      case ValueType::F32:
        v.f = std::bit_cast<float>(static_cast<uint32_t>(read_le(4, "f32 value")));
        break;
      case ValueType::F64:
        v.f = std::bit_cast<double>(read_le(8, "f64 value"));
        break;
      case ValueType::Bool: {
        const uint64_t at = pos_;
        const uint64_t b = read_le(1, "bool value");
        if (b > 1)
          fail(where() + ": bool value " + std::to_string(b) + " at byte offset " + std::to_string(at) +
               " is neither 0 nor 1");
        v.i = static_cast<int64_t>(b);
        break;
      }
      case ValueType::String:
        v.str = read_string("string", kMaxStringLength);
        break;
      case ValueType::Array:
        read_array(v, depth + 1);
        break;
    }
    return v;
  }

  void read_array(Value& v, int depth) {
    const uint64_t at = pos_;
    if (depth > kMaxArrayDepth)
      fail(where() + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels at byte offset " +
           std::to_string(at));
    const uint32_t elem = u32("array element type");
    if (!valid_value_type(elem))
      fail(where() + ": unknown array element type id " + std::to_string(elem) + " at byte offset " +
           std::to_string(at) + " (valid ids are 0..12)");
    v.elem_type = static_cast<ValueType>(elem);
    const uint64_t count_at = pos_;
    const uint64_t count = len("array length");
    uint64_t min_size = scalar_size(v.elem_type);
    if (v.elem_type == ValueType::String) min_size = len_size();
    if (v.elem_type == ValueType::Array) min_size = 4 + len_size();
    if (count > remaining() / min_size)
      fail(where() + ": array length " + std::to_string(count) + " at byte offset " + std::to_string(count_at) +
           " runs past the end of the file (" + std::to_string(remaining()) + " bytes left hold at most " +
           std::to_string(remaining() / min_size) + " " + value_type_name(v.elem_type) + " elements)");
    if (count > kMaxMetadataElements - elements_)
      fail(where() + ": array length " + std::to_string(count) + " at byte offset " + std::to_string(count_at) +
           " exceeds the limit of " + std::to_string(kMaxMetadataElements) + " array elements in all metadata");
    elements_ += count;
    v.arr.reserve(count);
    elem_path_.push_back(0);
    for (uint64_t k = 0; k < count; ++k) {
      elem_path_.back() = k;
      v.arr.push_back(read_value(v.elem_type, depth));
    }
    elem_path_.pop_back();
  }

  void resolve_alignment() {
    f_.alignment_ = kDefaultAlignment;
    const Value* a = f_.find("general.alignment");
    if (!a) return;
    if (a->type != ValueType::U32)
      fail("key 'general.alignment' has type " + std::string(value_type_name(a->type)) + ", expected u32");
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      fail("key 'general.alignment' is " + std::to_string(a->u) + ", which is not a non-zero power of two");
    f_.alignment_ = static_cast<size_t>(a->u);
  }

  void read_tensor_infos() {
    f_.tensors_.reserve(tensor_count_);
    std::unordered_set<std::string> names;
    for (uint64_t k = 0; k < tensor_count_; ++k) {
      const uint64_t name_at = pos_;
      ctx_ = "tensor info #" + std::to_string(k) +
             (k ? " (after tensor " + quoted(f_.tensors_.back().name) + ")" : std::string());
      TensorInfo t;
      t.name = read_string("tensor name", kMaxKeyLength);
      if (t.name.empty()) fail(ctx_ + ": empty tensor name at byte offset " + std::to_string(name_at));
      ctx_ = "tensor " + quoted(t.name);
      if (!names.insert(t.name).second)
        fail("duplicate tensor name " + quoted(t.name) + " at byte offset " + std::to_string(name_at));
      const uint64_t nd_at = pos_;
      const uint32_t n_dims = u32("n_dims");
      if (n_dims == 0 || n_dims > kMaxDims)
        fail(ctx_ + ": n_dims is " + std::to_string(n_dims) + " at byte offset " + std::to_string(nd_at) +
             " (allowed 1.." + std::to_string(kMaxDims) + ")");
      t.n_dims = static_cast<int>(n_dims);
      for (uint32_t d = 0; d < n_dims; ++d) {
        const uint64_t d_at = pos_;
        const uint64_t ne = len("dimension");
        if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          fail(ctx_ + ": dimension " + std::to_string(d) + " is " +
               (ne == 0 ? std::string("0")
                        : std::to_string(static_cast<int64_t>(ne)) + " (" + std::to_string(ne) + " as unsigned)") +
               " at byte offset " + std::to_string(d_at) + "; dimensions must be at least 1");
        t.ne[d] = static_cast<int64_t>(ne);
      }
      const uint64_t type_at = pos_;
      const uint32_t type = u32("tensor type");
      const TypeFormat* tr = find_type_format(type);
      if (!tr)
        fail(ctx_ + ": unknown tensor type id " + std::to_string(type) + " at byte offset " + std::to_string(type_at));
      t.type = static_cast<DType>(type);
      const uint64_t off_at = pos_;
      t.offset = u64("tensor data offset");

      int64_t n = 1;
      for (int d = 0; d < t.n_dims; ++d) {
        if (__builtin_mul_overflow(n, t.ne[d], &n))
          fail(ctx_ + ": shape " + shape_text(t) + " has more elements than fit in a signed 64-bit integer");
      }
      if (t.ne[0] % tr->block_size != 0)
        fail(ctx_ + ": row length " + std::to_string(t.ne[0]) + " is not a multiple of the " + tr->name +
             " block size " + std::to_string(tr->block_size));
      uint64_t nbytes = 0;
      if (__builtin_mul_overflow(static_cast<uint64_t>(n / tr->block_size), static_cast<uint64_t>(tr->block_bytes),
                                 &nbytes))
        fail(ctx_ + ": shape " + shape_text(t) + " of type " + tr->name + " needs more than 2^64 bytes");
      t.nbytes = static_cast<size_t>(nbytes);
      if (t.offset % f_.alignment_ != 0)
        fail(ctx_ + ": data offset " + std::to_string(t.offset) + " at byte offset " + std::to_string(off_at) +
             " is not a multiple of the alignment " + std::to_string(f_.alignment_));
      f_.tensors_.push_back(std::move(t));
    }
    ctx_.clear();
    // The data section starts at the next multiple of the alignment.
    const uint64_t a = f_.alignment_;
    f_.data_offset_ = pos_ + (a - pos_ % a) % a;
  }

  static std::string shape_text(const TensorInfo& t) {
    std::string s = "[";
    for (int d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
    return s + "]";
  }

  void check_tensor_data() {
    if (f_.tensors_.empty()) return;
    const uint64_t data_size = f_.data_offset_ <= size_ ? size_ - f_.data_offset_ : 0;
    for (const TensorInfo& t : f_.tensors_) {
      if (t.offset > data_size || t.nbytes > data_size - t.offset) {
        // Report absolute file positions; saturate on overflow.
        uint64_t begin = 0, end = 0;
        const bool ob = __builtin_add_overflow(f_.data_offset_, t.offset, &begin);
        const bool oe = ob || __builtin_add_overflow(begin, static_cast<uint64_t>(t.nbytes), &end);
        fail("tensor " + quoted(t.name) + ": data (" + std::to_string(t.nbytes) + " bytes at data offset " +
             std::to_string(t.offset) + ", file bytes " + (ob ? std::string("2^64+") : std::to_string(begin)) + ".." +
             (oe ? std::string("2^64+") : std::to_string(end)) + ") lies outside the file (size " +
             std::to_string(size_) + ", data section starts at " + std::to_string(f_.data_offset_) + ")");
      }
      // The mapping starts on a page, so a tensor's address is aligned as its
      // file offset is. GGUF's spec asks general.alignment to be a multiple of
      // 8, llama.cpp accepts any power of two: under 8 a tensor may start where
      // its elements cannot be read in place (a float at an odd address).
      const uint64_t at = f_.data_offset_ + t.offset;
      const uint64_t need = type_traits(t.type).data_alignment;
      if (need > 1 && at % need != 0)
        fail("tensor " + quoted(t.name) + ": " + type_traits(t.type).name + " data starts at file byte " +
             std::to_string(at) + ", not a multiple of the " + std::to_string(need) + " bytes its elements need (" +
             "general.alignment is " + std::to_string(f_.alignment_) + "; rewrite the file with alignment 32)");
    }
    std::vector<size_t> order(f_.tensors_.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return f_.tensors_[a].offset < f_.tensors_[b].offset; });
    for (size_t k = 1; k < order.size(); ++k) {
      const TensorInfo& prev = f_.tensors_[order[k - 1]];
      const TensorInfo& cur = f_.tensors_[order[k]];
      if (prev.offset + prev.nbytes > cur.offset)
        fail("tensors " + quoted(prev.name) + " (data offset " + std::to_string(prev.offset) + ", " +
             std::to_string(prev.nbytes) + " bytes) and " + quoted(cur.name) + " (data offset " +
             std::to_string(cur.offset) + ") overlap");
    }
  }
};

std::string split_path(const std::string& prefix, int split, int count) {
  char suffix[48];
  std::snprintf(suffix, sizeof suffix, "-%05d-of-%05d.gguf", split + 1, count);
  return prefix + suffix;
}

std::unique_ptr<File> File::open(const std::string& path) {
  std::unique_ptr<File> f = open_part(path);
  f->join_parts();
  return f;
}

// A split model's first part opens the others, named as llama.cpp names them
// from the first's, and takes their tensors.
void File::join_parts() {
  const std::optional<int64_t> count = try_int("split.count");
  if (!count || *count <= 1) return;
  const int64_t no = try_int("split.no").value_or(0);
  if (*count > 65535) throw Error(path_ + ": split.count is " + std::to_string(*count) + " (at most 65535)");
  const std::string first_suffix = split_path("", 0, static_cast<int>(*count));
  const std::string own_suffix = split_path("", static_cast<int>(no), static_cast<int>(*count));
  if (no != 0) {
    const std::string first = path_.ends_with(own_suffix)
                                  ? split_path(path_.substr(0, path_.size() - own_suffix.size()), 0, static_cast<int>(*count))
                                  : std::string("its first part");
    throw Error(path_ + ": part " + std::to_string(no + 1) + " of a model split in " + std::to_string(*count) +
                " files; open the first part, " + first);
  }
  if (!path_.ends_with(first_suffix))
    throw Error(path_ + ": the first part of a model split in " + std::to_string(*count) +
                " files, but not named PREFIX" + first_suffix + " (the other parts are found by that name)");
  const std::string prefix = path_.substr(0, path_.size() - first_suffix.size());
  std::unordered_set<std::string> names;
  for (const TensorInfo& t : tensors_) names.insert(t.name);
  for (int i = 1; i < *count; ++i) {
    std::unique_ptr<File> part = open_part(split_path(prefix, i, static_cast<int>(*count)));
    const std::optional<int64_t> part_no = part->try_int("split.no");
    const std::optional<int64_t> part_count = part->try_int("split.count");
    if (part_no != i || part_count != *count)
      throw Error(part->path_ + ": split.no " + (part_no ? std::to_string(*part_no) : std::string("missing")) +
                  " and split.count " + (part_count ? std::to_string(*part_count) : std::string("missing")) +
                  ", expected " + std::to_string(i) + " and " + std::to_string(*count) + " (a part of another model?)");
    for (TensorInfo t : part->tensors_) {
      if (!names.insert(t.name).second)
        throw Error(part->path_ + ": tensor " + quoted(t.name) + " is also in an earlier part of " + path_);
      t.split = static_cast<uint16_t>(i);
      tensors_.push_back(std::move(t));
    }
    parts_.push_back(std::move(part));
  }
  if (const std::optional<int64_t> total = try_int("split.tensors.count");
      total && *total != static_cast<int64_t>(tensors_.size()))
    throw Error(path_ + ": split.tensors.count is " + std::to_string(*total) + " but its " + std::to_string(*count) +
                " parts hold " + std::to_string(tensors_.size()) + " tensors");
}

std::unique_ptr<File> File::open_part(const std::string& path) {
  std::unique_ptr<File> f(new File());
  f->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw Error(path + ": cannot stat: " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  if (st.st_size == 0) {
    ::close(fd);
    throw Error(path + ": file is empty (0 bytes), not a GGUF file");
  }
  f->size_ = static_cast<uint64_t>(st.st_size);
  void* m = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);
  if (m == MAP_FAILED)
    throw Error(path + ": cannot memory-map " + std::to_string(f->size_) + " bytes: " + std::strerror(e));
  f->map_ = static_cast<const uint8_t*>(m);
  Parser(*f).parse();
  return f;
}

File::~File() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), size_);
}

const Value* File::find(std::string_view key) const {
  for (const KeyValue& kv : kv_)
    if (kv.key == key) return &kv.value;
  return nullptr;
}

namespace {

[[noreturn]] void key_error(const File& f, std::string_view key, const std::string& problem) {
  throw Error(f.path() + ": key " + quoted(key) + " " + problem);
}

const Value& require(const File& f, std::string_view key) {
  const Value* v = f.find(key);
  if (!v) key_error(f, key, "is missing");
  return *v;
}

std::string type_text(const Value& v) {
  if (v.type == ValueType::Array) return std::string("array of ") + value_type_name(v.elem_type);
  return value_type_name(v.type);
}

std::string string_of(const File& f, std::string_view key, const Value& v) {
  if (v.type != ValueType::String) key_error(f, key, "has type " + type_text(v) + ", expected a string");
  return v.str;
}

int64_t int_of(const File& f, std::string_view key, const Value& v, const char* expected = "an integer") {
  if (!v.is_integer() && v.type != ValueType::Bool)
    key_error(f, key, "has type " + type_text(v) + ", expected " + expected);
  if (v.type == ValueType::U64 && v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    key_error(f, key, "has u64 value " + std::to_string(v.u) + ", which does not fit a signed 64-bit integer");
  return v.as_int();
}

double float_of(const File& f, std::string_view key, const Value& v, const char* expected = "a number") {
  if (!v.is_integer() && !v.is_float()) key_error(f, key, "has type " + type_text(v) + ", expected " + expected);
  return v.as_float();
}

const Value* array_of(const File& f, std::string_view key) {
  const Value* v = f.find(key);
  if (v && v->type != ValueType::Array) key_error(f, key, "has type " + type_text(*v) + ", expected an array");
  return v;
}

}  // namespace

std::string File::get_string(std::string_view key) const { return string_of(*this, key, require(*this, key)); }
int64_t File::get_int(std::string_view key) const { return int_of(*this, key, require(*this, key)); }
double File::get_float(std::string_view key) const { return float_of(*this, key, require(*this, key)); }

std::optional<std::string> File::try_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  return string_of(*this, key, *v);
}

std::optional<int64_t> File::try_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  return int_of(*this, key, *v);
}

std::optional<double> File::try_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  return float_of(*this, key, *v);
}

// A value of a type and no content: asks Value's type predicates about an
// array's element type.
static Value of_type(ValueType t) {
  Value p;
  p.type = t;
  return p;
}

std::optional<std::vector<std::string>> File::try_string_array(std::string_view key) const {
  const Value* v = array_of(*this, key);
  if (!v) return std::nullopt;
  if (v->elem_type != ValueType::String)
    key_error(*this, key, "has type " + type_text(*v) + ", expected an array of string");
  std::vector<std::string> out;
  out.reserve(v->arr.size());
  for (const Value& e : v->arr) out.push_back(e.str);
  return out;
}

std::optional<std::vector<float>> File::try_float_array(std::string_view key) const {
  const Value* v = array_of(*this, key);
  if (!v) return std::nullopt;
  const Value probe = of_type(v->elem_type);
  if (!probe.is_integer() && !probe.is_float())
    key_error(*this, key, "has type " + type_text(*v) + ", expected an array of numbers");
  std::vector<float> out;
  out.reserve(v->arr.size());
  for (const Value& e : v->arr) out.push_back(static_cast<float>(float_of(*this, key, e, "an array of numbers")));
  return out;
}

std::optional<std::vector<int64_t>> File::try_int_array(std::string_view key) const {
  const Value* v = array_of(*this, key);
  if (!v) return std::nullopt;
  const Value probe = of_type(v->elem_type);
  if (!probe.is_integer() && probe.type != ValueType::Bool)
    key_error(*this, key, "has type " + type_text(*v) + ", expected an array of integers");
  std::vector<int64_t> out;
  out.reserve(v->arr.size());
  for (const Value& e : v->arr) out.push_back(int_of(*this, key, e, "an array of integers"));
  return out;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  for (const TensorInfo& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const uint8_t* File::tensor_data(const TensorInfo& t) const {
  const File* part = this;
  if (t.split > 0) {
    if (t.split > parts_.size())
      throw Error(path_ + ": tensor " + quoted(t.name) + " names part " + std::to_string(t.split + 1) + " of " +
                  std::to_string(split_count()));
    part = parts_[t.split - 1].get();
  }
  const uint64_t data_size = part->data_offset_ <= part->size_ ? part->size_ - part->data_offset_ : 0;
  if (t.offset > data_size || t.nbytes > data_size - t.offset)
    throw Error(part->path_ + ": tensor " + quoted(t.name) + " does not lie inside this file's data section");
  return part->map_ + part->data_offset_ + t.offset;
}

}  // namespace qlens::gguf
