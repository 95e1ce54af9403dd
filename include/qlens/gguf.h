// GGUF files: reading (memory-mapped, validated) and writing (v3).
//
// The reader never trusts the file: every length, count, type id, offset and
// shape is checked against the file size before use, and each failure throws
// qlens::Error whose message starts with the file path and names the key,
// tensor or byte offset at fault.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qlens/types.h"

namespace qlens::gguf {

enum class ValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

const char* value_type_name(ValueType t);

// A metadata value. Scalars are held widened (integers in `i`/`u`, floats in
// `f`); arrays hold their elements as Values (nested arrays allowed).
struct Value {
  ValueType type = ValueType::U8;
  ValueType elem_type = ValueType::U8;  // for arrays
  int64_t i = 0;                        // signed integers and bool
  uint64_t u = 0;                       // unsigned integers
  double f = 0;                         // F32 / F64
  std::string str;                      // String
  std::vector<Value> arr;               // Array

  static Value make_u32(uint32_t v);
  static Value make_i32(int32_t v);
  static Value make_u64(uint64_t v);
  static Value make_f32(float v);
  static Value make_bool(bool v);
  static Value make_string(std::string v);
  static Value make_string_array(std::vector<std::string> v);
  static Value make_f32_array(const std::vector<float>& v);
  static Value make_i32_array(const std::vector<int32_t>& v);
  static Value make_u8(uint8_t v);
  static Value make_i8(int8_t v);
  static Value make_u16(uint16_t v);
  static Value make_i16(int16_t v);
  static Value make_i64(int64_t v);
  static Value make_f64(double v);
  // An array of `elem`-typed items (each item's type must be `elem`; nested
  // arrays use elem = Array and may each have their own element type).
  static Value make_array(ValueType elem, std::vector<Value> items);

  bool is_integer() const;
  bool is_float() const { return type == ValueType::F32 || type == ValueType::F64; }
  // The value as an integer / float / string; throws Error when not convertible.
  int64_t as_int() const;
  double as_float() const;  // integers convert too
  const std::string& as_string() const;
  std::string to_string(size_t max_array_items = 8) const;  // for display
};

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  int n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  DType type = DType::F32;
  uint64_t offset = 0;  // relative to the start of its part's data section
  size_t nbytes = 0;
  uint16_t split = 0;   // the part of a split model holding it (0: the first, or the only file)

  int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

class File {
 public:
  // Opens and validates a GGUF v2/v3 file. Tensor data is memory-mapped, not copied.
  //
  // A split model (gguf-split's or llama-quantize --keep-split's parts,
  // PREFIX-00001-of-00003.gguf ...: split.no, split.count and
  // split.tensors.count in each) opens as one file from its first part, as
  // llama.cpp loads it: the metadata is the first part's, the tensors are
  // every part's (TensorInfo::split says which), each part mapped on its
  // own. Opening another part than the first is an Error naming the first.
  static std::unique_ptr<File> open(const std::string& path);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  // A split model's parts (1 for a single file) and each part's path.
  int split_count() const { return 1 + static_cast<int>(parts_.size()); }
  const std::string& part_path(int split) const { return split == 0 ? path_ : parts_.at(split - 1)->path_; }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }

  const std::vector<KeyValue>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  // Typed getters; a missing key or a wrong type throws Error naming file and key.
  std::string get_string(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  std::optional<std::string> try_string(std::string_view key) const;
  std::optional<int64_t> try_int(std::string_view key) const;
  std::optional<double> try_float(std::string_view key) const;
  // Array getters (element type must convert); missing key -> empty optional.
  std::optional<std::vector<std::string>> try_string_array(std::string_view key) const;
  std::optional<std::vector<float>> try_float_array(std::string_view key) const;
  std::optional<std::vector<int64_t>> try_int_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  // Pointer to a tensor's bytes inside the mapping (valid while the File lives).
  const uint8_t* tensor_data(const TensorInfo& t) const;

 private:
  File() = default;
  static std::unique_ptr<File> open_part(const std::string& path);
  void join_parts();
  friend class Parser;
  std::string path_;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  uint64_t size_ = 0;
  uint64_t data_offset_ = 0;
  const uint8_t* map_ = nullptr;
  std::vector<KeyValue> kv_;
  std::vector<TensorInfo> tensors_;
  std::vector<std::unique_ptr<File>> parts_;  // a split model's parts after the first
};

// The path of part `split` (0-based) of `count` of a split model:
// PREFIX-00001-of-00003.gguf, as llama.cpp names them.
std::string split_path(const std::string& prefix, int split, int count);

// Writes GGUF v3. Tensors are laid out in the order added, each aligned.
// The file is written to PATH.tmp and renamed to PATH on success.
class Writer {
 public:
  void set(const std::string& key, Value value);  // replaces an existing key, keeps order
  void remove(const std::string& key);
  // `data` must stay valid until write(); nbytes must equal the tensor's size.
  void add_tensor(const std::string& name, DType type, std::span<const int64_t> ne, const void* data,
                  size_t nbytes);
  void write(const std::string& path) const;
  size_t alignment() const;  // from general.alignment when set, else 32

 private:
  struct PendingTensor {
    TensorInfo info;
    const void* data;
  };
  std::vector<KeyValue> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace qlens::gguf
