// Tests of the GGUF reader and writer, the JSON writer and `inspect`.
//
// Hostile files are built byte by byte with a tiny raw writer (Raw) and the
// real model is walked with an independent field walker (walk_v3), so that the
// tests do not depend on the reader they test.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/json_writer.h"
#include "qlens/error.h"
#include "qlens/gguf.h"
#include "qlens/types.h"
#include "test_util.h"
#include "tools/inspect/inspect.h"

namespace {

using qlens::DType;
using qlens::Error;
using qlens::gguf::File;
using qlens::gguf::TensorInfo;
using qlens::gguf::Value;
using qlens::gguf::ValueType;
using qlens::gguf::Writer;

// ---------------------------------------------------------------- raw bytes

// Appends little-endian fields; each call returns the offset it wrote at.
class Raw {
 public:
  explicit Raw(bool v1 = false) : v1_(v1) {}
  std::vector<uint8_t> b;

  size_t put(uint64_t v, int n) {
    const size_t at = b.size();
    for (int k = 0; k < n; ++k) b.push_back(static_cast<uint8_t>(v >> (8 * k)));
    return at;
  }
  size_t u8(uint8_t v) { return put(v, 1); }
  size_t u32(uint32_t v) { return put(v, 4); }
  size_t u64(uint64_t v) { return put(v, 8); }
  size_t len(uint64_t v) { return put(v, v1_ ? 4 : 8); }  // counts, lengths, dims
  size_t bytes(std::string_view s) {
    const size_t at = b.size();
    b.resize(at + s.size());
    if (!s.empty()) std::memcpy(b.data() + at, s.data(), s.size());
    return at;
  }
  size_t str(std::string_view s) {
    const size_t at = len(s.size());
    bytes(s);
    return at;
  }
  void pad_to(size_t a) {
    while (b.size() % a) b.push_back(0);
  }
  void zeros(size_t n) { b.insert(b.end(), n, 0); }

  void header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    bytes("GGUF");
    u32(version);
    len(n_tensors);
    len(n_kv);
  }
  void kv_u32(std::string_view key, uint32_t v) {
    str(key);
    u32(4);
    u32(v);
  }
  void kv_str(std::string_view key, std::string_view v) {
    str(key);
    u32(8);
    str(v);
  }
  void tensor(std::string_view name, const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset) {
    str(name);
    u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) len(d);
    u32(type);
    u64(offset);
  }

 private:
  bool v1_;
};

void patch(std::vector<uint8_t>& b, size_t off, uint64_t v, int width) {
  for (int k = 0; k < width; ++k) b[off + k] = static_cast<uint8_t>(v >> (8 * k));
}

uint64_t load_le(const std::vector<uint8_t>& b, size_t off, int width) {
  uint64_t v = 0;
  for (int k = 0; k < width; ++k) v |= static_cast<uint64_t>(b[off + k]) << (8 * k);
  return v;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const uint8_t* p, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n));
  ASSERT_TRUE(out.good()) << path;
}

std::string temp_file(const std::vector<uint8_t>& bytes, const std::string& name = "f.gguf") {
  const std::string path = qlens::test::temp_dir() + "/" + name;
  write_bytes(path, bytes.data(), bytes.size());
  return path;
}

// The message of the Error that opening `path` throws ("" and a failure if none).
std::string open_error(const std::string& path) {
  try {
    auto f = File::open(path);
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "opening " << path << " threw a non-qlens exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "opening " << path << " succeeded but should have failed";
  return "";
}

bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

// Writes `bytes`, opens it, expects an Error whose message starts with the path
// and contains every needle.
void expect_error(const std::vector<uint8_t>& bytes, const std::vector<std::string>& needles) {
  const std::string path = temp_file(bytes);
  const std::string msg = open_error(path);
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << "message does not start with the path: " << msg;
  for (const auto& n : needles) EXPECT_TRUE(contains(msg, n)) << "message: " << msg << "\nmissing: " << n;
}

// A small valid file: one kv, given tensor infos, data of `data_bytes` bytes.
struct TI {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type;
  uint64_t offset;
};

std::vector<uint8_t> craft(const std::vector<TI>& ts, size_t data_bytes,
                           const std::function<void(Raw&)>& extra_kvs = nullptr, uint64_t n_extra = 0,
                           size_t align = 32) {
  Raw r;
  r.header(ts.size(), 1 + n_extra);
  r.kv_str("general.architecture", "llama");
  if (extra_kvs) extra_kvs(r);
  for (const auto& t : ts) r.tensor(t.name, t.ne, t.type, t.offset);
  r.pad_to(align);
  for (size_t k = 0; k < data_bytes; ++k) r.u8(static_cast<uint8_t>(k * 7 + 1));
  return std::move(r.b);
}

constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_K = 12, kQ8_K = 15;

// ---------------------------------------------------------------- Value

TEST(GgufValue, AsIntConvertsEveryIntegerTypeAndBool) {
  EXPECT_EQ(Value::make_u8(255).as_int(), 255);
  EXPECT_EQ(Value::make_i8(-128).as_int(), -128);
  EXPECT_EQ(Value::make_u16(65535).as_int(), 65535);
  EXPECT_EQ(Value::make_i16(-32768).as_int(), -32768);
  EXPECT_EQ(Value::make_u32(4294967295u).as_int(), 4294967295ll);
  EXPECT_EQ(Value::make_i32(-5).as_int(), -5);
  EXPECT_EQ(Value::make_i64(std::numeric_limits<int64_t>::min()).as_int(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(Value::make_u64(uint64_t{1} << 62).as_int(), int64_t{1} << 62);
  EXPECT_EQ(Value::make_bool(true).as_int(), 1);
  EXPECT_EQ(Value::make_bool(false).as_int(), 0);
  EXPECT_THROW(Value::make_u64(uint64_t{1} << 63).as_int(), Error);
  EXPECT_THROW(Value::make_u64(std::numeric_limits<uint64_t>::max()).as_int(), Error);
  EXPECT_THROW(Value::make_f32(1.0f).as_int(), Error);
  EXPECT_THROW(Value::make_string("1").as_int(), Error);
  EXPECT_THROW(Value::make_i32_array({1}).as_int(), Error);
  EXPECT_TRUE(Value::make_u8(1).is_integer());
  EXPECT_FALSE(Value::make_bool(true).is_integer());
  EXPECT_FALSE(Value::make_f64(1).is_integer());
}

TEST(GgufValue, AsFloatAndAsString) {
  EXPECT_EQ(Value::make_f32(0.5f).as_float(), 0.5);
  EXPECT_EQ(Value::make_f64(1e300).as_float(), 1e300);
  EXPECT_EQ(Value::make_i32(-3).as_float(), -3.0);
  EXPECT_EQ(Value::make_u64(std::numeric_limits<uint64_t>::max()).as_float(), 18446744073709551615.0);
  EXPECT_THROW(Value::make_string("x").as_float(), Error);
  EXPECT_THROW(Value::make_bool(true).as_float(), Error);
  EXPECT_EQ(Value::make_string("abc").as_string(), "abc");
  EXPECT_THROW(Value::make_u32(1).as_string(), Error);
}

TEST(GgufValue, ToStringSummarizesAndEscapes) {
  std::vector<int32_t> ten(10);
  for (int k = 0; k < 10; ++k) ten[k] = k;
  EXPECT_EQ(Value::make_i32_array(ten).to_string(8), "[0, 1, 2, 3, 4, 5, 6, 7, ...] (10 items)");
  EXPECT_EQ(Value::make_i32_array(ten).to_string(10), "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]");
  EXPECT_EQ(Value::make_i32_array({}).to_string(), "[]");
  EXPECT_EQ(Value::make_string_array({"a", "b\"c"}).to_string(), "[\"a\", \"b\\\"c\"]");
  EXPECT_EQ(Value::make_string(std::string("x\n\x01\xff", 4)).to_string(), "\"x\\n\\x01\\xff\"");
  EXPECT_EQ(Value::make_string("caf\xc3\xa9").to_string(), "\"caf\xc3\xa9\"");
  EXPECT_EQ(Value::make_f32(1e-5f).to_string(), "1e-05");
  EXPECT_EQ(Value::make_f64(0.1).to_string(), "0.1");
  EXPECT_EQ(Value::make_bool(true).to_string(), "true");
  EXPECT_EQ(Value::make_i64(-7).to_string(), "-7");
  EXPECT_EQ(Value::make_u64(std::numeric_limits<uint64_t>::max()).to_string(), "18446744073709551615");
  Value nested = Value::make_array(ValueType::Array, {Value::make_i32_array({1, 2}), Value::make_i32_array({})});
  EXPECT_EQ(nested.to_string(), "[[1, 2], []]");
  EXPECT_STREQ(qlens::gguf::value_type_name(ValueType::F64), "f64");
}

// ---------------------------------------------------------------- round trip

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = static_cast<uint8_t>(rng());
  return v;
}

uint64_t float_bits(const Value& v) {
  return v.type == ValueType::F32 ? std::bit_cast<uint32_t>(static_cast<float>(v.f)) : std::bit_cast<uint64_t>(v.f);
}

// Bit-exact comparison of two values, with a path for messages.
void expect_same_value(const Value& a, const Value& b, const std::string& where) {
  ASSERT_EQ(a.type, b.type) << where;
  switch (a.type) {
    case ValueType::U8:
    case ValueType::U16:
    case ValueType::U32:
    case ValueType::U64:
      EXPECT_EQ(a.u, b.u) << where;
      break;
    case ValueType::I8:
    case ValueType::I16:
    case ValueType::I32:
    case ValueType::I64:
    case ValueType::Bool:
      EXPECT_EQ(a.i, b.i) << where;
      break;
    case ValueType::F32:
    case ValueType::F64:
      EXPECT_EQ(float_bits(a), float_bits(b)) << where;
      break;
    case ValueType::String:
      EXPECT_EQ(a.str, b.str) << where;
      break;
    case ValueType::Array:
      ASSERT_EQ(a.elem_type, b.elem_type) << where;
      ASSERT_EQ(a.arr.size(), b.arr.size()) << where;
      for (size_t k = 0; k < a.arr.size(); ++k)
        expect_same_value(a.arr[k], b.arr[k], where + "[" + std::to_string(k) + "]");
      break;
  }
}

struct RoundTripTensor {
  std::string name;
  DType type;
  std::vector<int64_t> ne;
  std::vector<uint8_t> data;
};

std::vector<RoundTripTensor> sample_tensors() {
  std::vector<RoundTripTensor> ts = {
      {"f32.matrix", DType::F32, {5, 3}, {}},    {"f16.vector", DType::F16, {7}, {}},
      {"q4_0.rows", DType::Q4_0, {64, 2}, {}},   {"q8_0.3d", DType::Q8_0, {32, 1, 2}, {}},
      {"i32.4d", DType::I32, {3, 2, 2, 2}, {}},  {"bf16.one", DType::BF16, {1}, {}},
      {"q4_k.block", DType::Q4_K, {256, 1}, {}},
  };
  uint32_t seed = 1;
  for (auto& t : ts) {
    int64_t n = 1;
    for (int64_t d : t.ne) n *= d;
    t.data = random_bytes(qlens::row_bytes(t.type, n), seed++);
  }
  return ts;
}

std::vector<qlens::gguf::KeyValue> every_value_type() {
  auto nested = [](std::vector<Value> v) { return Value::make_array(ValueType::Array, std::move(v)); };
  Value deep = Value::make_i32_array({42});
  for (int k = 0; k < 7; ++k) deep = nested({deep});  // 8 levels of arrays: the most allowed
  std::vector<Value> u8s, bools, u64s, i64s, f64s, i8s, u16s, i16s;
  for (int k = 0; k < 20; ++k) u8s.push_back(Value::make_u8(static_cast<uint8_t>(k * 13)));
  for (int k = 0; k < 3; ++k) bools.push_back(Value::make_bool(k != 1));
  u64s = {Value::make_u64(0), Value::make_u64(std::numeric_limits<uint64_t>::max())};
  i64s = {Value::make_i64(std::numeric_limits<int64_t>::min()), Value::make_i64(-1)};
  f64s = {Value::make_f64(-0.0), Value::make_f64(5e-324), Value::make_f64(-INFINITY)};
  i8s = {Value::make_i8(-128), Value::make_i8(127)};
  u16s = {Value::make_u16(65535)};
  i16s = {Value::make_i16(-32768), Value::make_i16(1)};
  return {
      {"general.architecture", Value::make_string("llama")},
      {"t.u8", Value::make_u8(255)},
      {"t.i8", Value::make_i8(-128)},
      {"t.u16", Value::make_u16(65535)},
      {"t.i16", Value::make_i16(-32768)},
      {"t.u32", Value::make_u32(4294967295u)},
      {"t.i32", Value::make_i32(std::numeric_limits<int32_t>::min())},
      {"t.f32", Value::make_f32(0.1f)},
      {"t.f32.neg_zero", Value::make_f32(-0.0f)},
      {"t.f32.denormal", Value::make_f32(1e-45f)},
      {"t.f32.inf", Value::make_f32(INFINITY)},
      {"t.bool.true", Value::make_bool(true)},
      {"t.bool.false", Value::make_bool(false)},
      {"t.string", Value::make_string("hello \xe4\xb8\x96\xe7\x95\x8c")},
      {"t.string.empty", Value::make_string("")},
      {"t.string.nul", Value::make_string(std::string("a\0b", 3))},
      {"t.u64", Value::make_u64(std::numeric_limits<uint64_t>::max())},
      {"t.i64", Value::make_i64(std::numeric_limits<int64_t>::min())},
      {"t.f64", Value::make_f64(3.141592653589793)},
      {"t.arr.u8", Value::make_array(ValueType::U8, u8s)},
      {"t.arr.i8", Value::make_array(ValueType::I8, i8s)},
      {"t.arr.u16", Value::make_array(ValueType::U16, u16s)},
      {"t.arr.i16", Value::make_array(ValueType::I16, i16s)},
      {"t.arr.u32", Value::make_array(ValueType::U32, {Value::make_u32(7), Value::make_u32(0)})},
      {"t.arr.i32", Value::make_i32_array({-1, 0, 1, 2147483647})},
      {"t.arr.f32", Value::make_f32_array({1.5f, -2.25f, 1e-30f})},
      {"t.arr.bool", Value::make_array(ValueType::Bool, bools)},
      {"t.arr.u64", Value::make_array(ValueType::U64, u64s)},
      {"t.arr.i64", Value::make_array(ValueType::I64, i64s)},
      {"t.arr.f64", Value::make_array(ValueType::F64, f64s)},
      {"t.arr.string", Value::make_string_array({"a", "", "\xf0\x9f\x98\x80", std::string(300, 'x')})},
      {"t.arr.empty.string", Value::make_string_array({})},
      {"t.arr.empty.f32", Value::make_f32_array({})},
      {"t.arr.empty.array", Value::make_array(ValueType::Array, {})},
      {"t.arr.nested.i32",
       nested({Value::make_i32_array({1, 2, 3}), Value::make_i32_array({}), Value::make_i32_array({4})})},
      {"t.arr.nested.string", nested({Value::make_string_array({"x", ""}), Value::make_string_array({"y"})})},
      {"t.arr.nested.mixed", nested({Value::make_string_array({"s"}), Value::make_f32_array({2.0f})})},
      {"t.arr.deep", deep},
  };
}

TEST(GgufRoundTrip, EveryValueTypeAndSeveralTensorTypes) {
  for (uint32_t align : {0u, 64u, 8u}) {  // 0: general.alignment unset (default 32)
    SCOPED_TRACE("alignment " + std::to_string(align));
    const auto kvs = every_value_type();
    const auto ts = sample_tensors();
    Writer w;
    for (const auto& kv : kvs) w.set(kv.key, kv.value);
    if (align) w.set("general.alignment", Value::make_u32(align));
    for (const auto& t : ts) w.add_tensor(t.name, t.type, t.ne, t.data.data(), t.data.size());
    const size_t a = align ? align : 32;
    EXPECT_EQ(w.alignment(), a);
    const std::string path = qlens::test::temp_dir() + "/rt.gguf";
    w.write(path);
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

    auto f = File::open(path);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), a);
    EXPECT_EQ(f->data_offset() % a, 0u);
    ASSERT_EQ(f->metadata().size(), kvs.size() + (align ? 1 : 0));
    for (size_t k = 0; k < kvs.size(); ++k) {
      EXPECT_EQ(f->metadata()[k].key, kvs[k].key);
      expect_same_value(f->metadata()[k].value, kvs[k].value, kvs[k].key);
    }
    ASSERT_EQ(f->tensors().size(), ts.size());
    const auto raw = read_bytes(path);
    ASSERT_EQ(raw.size(), f->file_size());
    uint64_t expected_offset = 0;
    for (size_t k = 0; k < ts.size(); ++k) {
      const TensorInfo& t = f->tensors()[k];
      SCOPED_TRACE(t.name);
      EXPECT_EQ(t.name, ts[k].name);
      EXPECT_EQ(t.type, ts[k].type);
      ASSERT_EQ(t.n_dims, static_cast<int>(ts[k].ne.size()));
      for (int d = 0; d < 4; ++d) EXPECT_EQ(t.ne[d], d < t.n_dims ? ts[k].ne[d] : 1);
      EXPECT_EQ(t.nbytes, ts[k].data.size());
      EXPECT_EQ(t.offset, expected_offset);  // packed in order, each aligned
      EXPECT_EQ(t.offset % a, 0u);
      EXPECT_EQ(std::memcmp(f->tensor_data(t), ts[k].data.data(), t.nbytes), 0);
      EXPECT_EQ(f->tensor_data(t), f->tensor_data(*f->find_tensor(t.name)));
      // Padding after each tensor is zeros.
      const uint64_t end = f->data_offset() + t.offset + t.nbytes;
      const uint64_t padded = (t.offset + t.nbytes + a - 1) / a * a + f->data_offset();
      for (uint64_t p = end; p < padded; ++p) ASSERT_EQ(raw[p], 0) << "padding byte " << p;
      expected_offset = padded - f->data_offset();
    }
    EXPECT_EQ(f->data_offset() + expected_offset, f->file_size());
    // Independent look at the header bytes.
    EXPECT_EQ(std::string(raw.begin(), raw.begin() + 4), "GGUF");
    EXPECT_EQ(load_le(raw, 4, 4), 3u);
    EXPECT_EQ(load_le(raw, 8, 8), ts.size());
    EXPECT_EQ(load_le(raw, 16, 8), f->metadata().size());
  }
}

TEST(GgufRoundTrip, VocabOnlyFileWithoutTensors) {
  Writer w;
  w.set("general.architecture", Value::make_string("llama"));
  w.set("tokenizer.ggml.tokens", Value::make_string_array({"<unk>", "a"}));
  const std::string path = qlens::test::temp_dir() + "/vocab.gguf";
  w.write(path);
  auto f = File::open(path);
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->try_string_array("tokenizer.ggml.tokens")->size(), 2u);

  // Also a raw file that ends right after the metadata, without padding.
  Raw r;
  r.header(0, 1);
  r.kv_str("general.architecture", "x");
  const auto f2 = File::open(temp_file(r.b));
  EXPECT_EQ(f2->get_string("general.architecture"), "x");
  EXPECT_TRUE(f2->tensors().empty());
}

// ---------------------------------------------------------------- writer

TEST(GgufWriter, SetReplacesInPlaceAndRemoveDeletes) {
  Writer w;
  w.set("a", Value::make_u32(1));
  w.set("b", Value::make_u32(2));
  w.set("c", Value::make_u32(3));
  w.set("a", Value::make_string("one"));
  w.remove("b");
  w.remove("not-there");
  const std::string path = qlens::test::temp_dir() + "/set.gguf";
  w.write(path);
  auto f = File::open(path);
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata()[0].key, "a");
  EXPECT_EQ(f->metadata()[0].value.str, "one");
  EXPECT_EQ(f->metadata()[1].key, "c");
}

std::string writer_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an Error";
  return "";
}

TEST(GgufWriter, ValidatesTensors) {
  std::vector<uint8_t> buf(4096);
  Writer w;
  const int64_t q33[] = {33, 1};
  EXPECT_TRUE(contains(writer_error([&] { w.add_tensor("q", DType::Q4_0, q33, buf.data(), 18); }),
                       "row length 33 is not a multiple of the Q4_0 block size 32"));
  const int64_t ne8[] = {8};
  EXPECT_TRUE(contains(writer_error([&] { w.add_tensor("a", DType::F32, ne8, buf.data(), 31); }), "31 bytes given"));
  w.add_tensor("a", DType::F32, ne8, buf.data(), 32);
  EXPECT_TRUE(contains(writer_error([&] { w.add_tensor("a", DType::F32, ne8, buf.data(), 32); }), "'a'"));
  const int64_t ne0[] = {8, 0};
  EXPECT_TRUE(contains(writer_error([&] { w.add_tensor("z", DType::F32, ne0, buf.data(), 0); }), "dimension 1 is 0"));
  const int64_t ne5[] = {1, 1, 1, 1, 1};
  EXPECT_TRUE(contains(writer_error([&] { w.add_tensor("five", DType::F32, ne5, buf.data(), 4); }), "5 dimensions"));
  EXPECT_TRUE(contains(writer_error([&] { w.add_tensor("e", DType::F32, {}, buf.data(), 4); }), "0 dimensions"));
  EXPECT_TRUE(contains(writer_error([&] { w.add_tensor(std::string(64, 'n'), DType::F32, ne8, buf.data(), 32); }),
                       "at most 63"));
  EXPECT_TRUE(contains(writer_error([&] { w.add_tensor("t", static_cast<DType>(4), ne8, buf.data(), 32); }),
                       "unknown type id 4"));
  const int64_t huge[] = {int64_t{1} << 62, 4};
  EXPECT_TRUE(contains(writer_error([&] { w.add_tensor("h", DType::F32, huge, buf.data(), 0); }), "overflow"));
}

TEST(GgufWriter, ValidatesMetadata) {
  const std::string dir = qlens::test::temp_dir();
  auto fails_with = [&](const std::string& key, Value v, const std::string& needle) {
    Writer w;
    w.set(key, std::move(v));
    const std::string msg = writer_error([&] { w.write(dir + "/m.gguf"); });
    EXPECT_EQ(msg.rfind(dir + "/m.gguf: ", 0), 0u) << msg;
    EXPECT_TRUE(contains(msg, needle)) << msg;
    EXPECT_FALSE(std::filesystem::exists(dir + "/m.gguf"));
  };
  Value big = Value::make_u8(0);
  big.u = 300;
  fails_with("x.u8", big, "value 300 does not fit type u8");
  Value neg = Value::make_i16(0);
  neg.i = -40000;
  fails_with("x.i16", neg, "does not fit type i16");
  Value mixed = Value::make_i32_array({1});
  mixed.arr.push_back(Value::make_string("s"));
  fails_with("x.mixed", mixed, "array element 1 has type string");
  Value deep = Value::make_i32_array({1});
  for (int k = 0; k < 8; ++k) deep = Value::make_array(ValueType::Array, {deep});  // 9 levels
  fails_with("x.deep", deep, "nested deeper than 8");
  fails_with("general.alignment", Value::make_u64(32), "must be u32");
  fails_with("general.alignment", Value::make_u32(48), "not a non-zero power of two");
  fails_with("general.alignment", Value::make_u32(4), "below the 8 GGUF requires");
  fails_with("", Value::make_u32(1), "empty metadata key");
  Writer w;
  w.set("general.alignment", Value::make_u32(0));
  EXPECT_THROW(w.alignment(), Error);
}

TEST(GgufWriter, IoFailuresNameThePathAndLeaveNoTempFile) {
  const std::string dir = qlens::test::temp_dir();
  Writer w;
  w.set("a", Value::make_u32(1));
  const std::string missing = dir + "/no/such/dir/x.gguf";
  std::string msg = writer_error([&] { w.write(missing); });
  EXPECT_EQ(msg.rfind(missing + ": ", 0), 0u) << msg;
  EXPECT_TRUE(contains(msg, std::strerror(ENOENT))) << msg;
  // The target is a non-empty directory: the rename fails after the temp file was written.
  const std::string target = dir + "/target";
  std::filesystem::create_directories(target + "/inner");
  msg = writer_error([&] { w.write(target); });
  EXPECT_EQ(msg.rfind(target + ": ", 0), 0u) << msg;
  EXPECT_TRUE(contains(msg, "renaming")) << msg;
  EXPECT_FALSE(std::filesystem::exists(target + ".tmp"));
  // Overwriting an existing file replaces it.
  const std::string file = dir + "/exists.gguf";
  write_bytes(file, reinterpret_cast<const uint8_t*>("junk"), 4);
  w.write(file);
  EXPECT_EQ(File::open(file)->get_int("a"), 1);
}

// ---------------------------------------------------------------- real model

TEST(GgufRealFile, Stories260K) {
  QLENS_REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto f = File::open(path);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->data_offset() % 32, 0u);
  ASSERT_EQ(f->tensors().size(), 48u);
  for (const auto& t : f->tensors()) EXPECT_EQ(t.type, DType::F32) << t.name;
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_int("llama.embedding_length"), 64);
  EXPECT_EQ(f->get_int("llama.block_count"), 5);
  EXPECT_EQ(f->get_int("llama.attention.head_count_kv"), 4);
  EXPECT_NEAR(f->get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-12);
  EXPECT_EQ(f->get_float("llama.embedding_length"), 64.0);  // integers convert
  EXPECT_EQ(f->get_int("tokenizer.ggml.padding_token_id"), 4294967295ll);
  const auto tokens = f->try_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens);
  ASSERT_EQ(tokens->size(), 512u);
  EXPECT_EQ((*tokens)[0], "<unk>");
  EXPECT_EQ((*tokens)[1], "<s>");
  EXPECT_EQ((*tokens)[3], "<0x00>");
  EXPECT_EQ(f->try_float_array("tokenizer.ggml.scores")->size(), 512u);
  EXPECT_EQ(f->try_int_array("tokenizer.ggml.token_type")->at(0), 2);
  EXPECT_FALSE(f->try_string("no.such.key"));
  EXPECT_FALSE(f->try_int_array("no.such.key"));

  struct Shape {
    const char* name;
    std::vector<int64_t> ne;
  };
  for (const Shape& s : std::vector<Shape>{{"token_embd.weight", {64, 512}},
                                           {"output.weight", {64, 512}},
                                           {"output_norm.weight", {64}},
                                           {"blk.0.attn_k.weight", {64, 32}},
                                           {"blk.4.ffn_down.weight", {172, 64}},
                                           {"blk.2.ffn_gate.weight", {64, 172}}}) {
    const TensorInfo* t = f->find_tensor(s.name);
    ASSERT_TRUE(t) << s.name;
    ASSERT_EQ(t->n_dims, static_cast<int>(s.ne.size())) << s.name;
    for (size_t d = 0; d < s.ne.size(); ++d) EXPECT_EQ(t->ne[d], s.ne[d]) << s.name;
    EXPECT_EQ(t->nbytes, static_cast<size_t>(t->nelements()) * 4);
  }
  EXPECT_EQ(f->find_tensor("nope"), nullptr);

  // tensor_data points at the right bytes of the file.
  const auto raw = read_bytes(path);
  for (const auto& t : f->tensors())
    ASSERT_EQ(std::memcmp(f->tensor_data(t), raw.data() + f->data_offset() + t.offset, t.nbytes), 0) << t.name;
}

TEST(GgufRealFile, GettersNameFileAndKey) {
  QLENS_REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto f = File::open(path);
  auto msg_of = [](const std::function<void()>& fn) { return writer_error(fn); };
  std::string m = msg_of([&] { f->get_string("no.such.key"); });
  EXPECT_EQ(m.rfind(path + ": ", 0), 0u);
  EXPECT_TRUE(contains(m, "'no.such.key'") && contains(m, "missing")) << m;
  m = msg_of([&] { f->get_int("general.architecture"); });
  EXPECT_TRUE(contains(m, "'general.architecture'") && contains(m, "string")) << m;
  m = msg_of([&] { f->get_string("llama.block_count"); });
  EXPECT_TRUE(contains(m, "'llama.block_count'") && contains(m, "u32")) << m;
  m = msg_of([&] { f->get_float("tokenizer.ggml.tokens"); });
  EXPECT_TRUE(contains(m, "'tokenizer.ggml.tokens'") && contains(m, "array of string")) << m;
  m = msg_of([&] { f->try_int("general.name"); });
  EXPECT_TRUE(contains(m, "'general.name'")) << m;
  m = msg_of([&] { f->try_float_array("tokenizer.ggml.tokens"); });
  EXPECT_TRUE(contains(m, "'tokenizer.ggml.tokens'")) << m;
  m = msg_of([&] { f->try_string_array("tokenizer.ggml.scores"); });
  EXPECT_TRUE(contains(m, "'tokenizer.ggml.scores'")) << m;
  m = msg_of([&] { f->try_int_array("llama.block_count"); });
  EXPECT_TRUE(contains(m, "'llama.block_count'") && contains(m, "expected an array")) << m;
}

TEST(GgufGetters, U64OutOfRangeAndBool) {
  Raw r;
  r.header(0, 3);
  r.str("big");
  r.u32(10);
  r.u64(std::numeric_limits<uint64_t>::max());
  r.str("flag");
  r.u32(7);
  r.u8(1);
  r.str("bigs");
  r.u32(9);
  r.u32(10);
  r.len(2);
  r.u64(1);
  r.u64(uint64_t{1} << 63);
  const std::string path = temp_file(r.b);
  auto f = File::open(path);
  const std::string m = writer_error([&] { f->get_int("big"); });
  EXPECT_EQ(m.rfind(path + ": ", 0), 0u);
  EXPECT_TRUE(contains(m, "'big'") && contains(m, "18446744073709551615")) << m;
  EXPECT_EQ(f->get_float("big"), 18446744073709551615.0);
  EXPECT_EQ(f->get_int("flag"), 1);
  EXPECT_TRUE(contains(writer_error([&] { f->try_int_array("bigs"); }), "'bigs'"));
  EXPECT_EQ(f->try_float_array("bigs")->size(), 2u);
}

// ---------------------------------------------------------------- independent walker

struct Field {
  size_t off;
  int width;          // 4 or 8
  std::string kind;   // tensor_count kv_count key_len value_type str_len arr_type arr_len elem_str_len
                      // name_len n_dims dim tensor_type tensor_offset
  std::string label;  // key or tensor name (or entry index for key_len / name_len)
  size_t index = 0;   // array element / dimension / entry index
};

struct Walk {
  std::vector<Field> fields;
  size_t infos_end = 0;
  size_t data_offset = 0;
  size_t data_end = 0;                                           // end of the last tensor's bytes
  std::map<std::string, std::pair<uint64_t, uint64_t>> tensors;  // name -> (offset, nbytes) (F32 only)
  std::map<std::string, std::vector<uint64_t>> shapes;
};

// Walks a GGUF v3 file with only F32 tensors, recording every length, count,
// type id and offset field.
Walk walk_v3(const std::vector<uint8_t>& b) {
  Walk w;
  size_t p = 8;
  auto rd = [&](int n) {
    const uint64_t v = load_le(b, p, n);
    p += n;
    return v;
  };
  w.fields.push_back({p, 8, "tensor_count", "", 0});
  const uint64_t nt = rd(8);
  w.fields.push_back({p, 8, "kv_count", "", 0});
  const uint64_t nkv = rd(8);
  std::function<void(uint32_t, const std::string&, int)> value = [&](uint32_t type, const std::string& key,
                                                                     int in_array) {
    static const int sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == 8) {
      w.fields.push_back({p, 8, in_array >= 0 ? "elem_str_len" : "str_len", key, static_cast<size_t>(in_array)});
      p += rd(8);
    } else if (type == 9) {
      w.fields.push_back({p, 4, "arr_type", key, 0});
      const uint32_t et = static_cast<uint32_t>(rd(4));
      w.fields.push_back({p, 8, "arr_len", key, et});
      const uint64_t n = rd(8);
      for (uint64_t k = 0; k < n; ++k) value(et, key, static_cast<int>(k));
    } else {
      p += sizes[type];
    }
  };
  for (uint64_t k = 0; k < nkv; ++k) {
    w.fields.push_back({p, 8, "key_len", "metadata entry #" + std::to_string(k), 0});
    const uint64_t kl = rd(8);
    const std::string key(b.begin() + p, b.begin() + p + kl);
    p += kl;
    w.fields.push_back({p, 4, "value_type", key, 0});
    value(static_cast<uint32_t>(rd(4)), key, -1);
  }
  std::vector<std::pair<std::string, uint64_t>> order;
  for (uint64_t k = 0; k < nt; ++k) {
    w.fields.push_back({p, 8, "name_len", "tensor info #" + std::to_string(k), 0});
    const uint64_t nl = rd(8);
    const std::string name(b.begin() + p, b.begin() + p + nl);
    p += nl;
    w.fields.push_back({p, 4, "n_dims", name, 0});
    const uint32_t nd = static_cast<uint32_t>(rd(4));
    uint64_t n = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      w.fields.push_back({p, 8, "dim", name, d});
      const uint64_t ne = rd(8);
      w.shapes[name].push_back(ne);
      n *= ne;
    }
    w.fields.push_back({p, 4, "tensor_type", name, 0});
    EXPECT_EQ(rd(4), 0u) << "walker handles F32 only";
    w.fields.push_back({p, 8, "tensor_offset", name, 0});
    const uint64_t off = rd(8);
    w.tensors[name] = {off, n * 4};
  }
  w.infos_end = p;
  w.data_offset = (p + 31) / 32 * 32;
  for (const auto& [name, t] : w.tensors) w.data_end = std::max<size_t>(w.data_end, w.data_offset + t.first + t.second);
  return w;
}

TEST(GgufHostile, TruncationAtEveryHeaderByteAndSampledDataBytes) {
  QLENS_REQUIRE_SHARED(path, "models/stories260K.gguf");
  const auto bytes = read_bytes(path);
  const Walk w = walk_v3(bytes);
  ASSERT_EQ(w.tensors.size(), 48u);
  ASSERT_LE(w.data_end, bytes.size());
  const std::string cut_path = qlens::test::temp_dir() + "/cut.gguf";
  std::vector<size_t> cuts;
  for (size_t n = 0; n <= w.data_offset; ++n) cuts.push_back(n);
  for (size_t k = 1; k <= 96; ++k) cuts.push_back(w.data_offset + (w.data_end - w.data_offset) * k / 97);
  cuts.push_back(w.data_end - 1);
  // Write the file once and shrink it cut by cut, longest first.
  std::sort(cuts.rbegin(), cuts.rend());
  write_bytes(cut_path, bytes.data(), bytes.size());
  size_t failures = 0;
  for (size_t n : cuts) {
    ASSERT_EQ(::truncate(cut_path.c_str(), static_cast<off_t>(n)), 0);
    try {
      auto f = File::open(cut_path);
      ADD_FAILURE() << "a file truncated to " << n << " bytes was accepted";
      if (++failures > 5) break;
    } catch (const Error& e) {
      const std::string m = e.what();
      if (m.rfind(cut_path + ": ", 0) != 0) {
        ADD_FAILURE() << "message does not start with the path: " << m;
        if (++failures > 5) break;
      }
    }
  }
  // Every cut in the tensor-info region names what was being read.
  write_bytes(cut_path, bytes.data(), w.infos_end - 3);
  EXPECT_TRUE(contains(open_error(cut_path), "truncated"));
  write_bytes(cut_path, bytes.data(), w.data_end - 1);
  EXPECT_TRUE(contains(open_error(cut_path), "outside the file"));
  // The full file still opens.
  write_bytes(cut_path, bytes.data(), bytes.size());
  EXPECT_NO_THROW(File::open(cut_path));
}

TEST(GgufHostile, CorruptEveryLengthCountTypeAndOffsetField) {
  QLENS_REQUIRE_SHARED(path, "models/stories260K.gguf");
  const auto orig = read_bytes(path);
  const Walk w = walk_v3(orig);
  const std::string bad_path = qlens::test::temp_dir() + "/bad.gguf";
  write_bytes(bad_path, orig.data(), orig.size());
  const int fd = ::open(bad_path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  const uint64_t data_size = orig.size() - w.data_offset;
  size_t checked = 0;
  for (const Field& f : w.fields) {
    // Thin out the 512 token strings: every 50th and the last.
    if (f.kind == "elem_str_len" && f.index % 50 != 0 && f.index != 511) continue;
    const uint64_t left = orig.size() - (f.off + f.width);  // bytes after the field
    std::vector<std::pair<uint64_t, bool>> hostile;         // value, expect the field's label in the message
    if (f.width == 8) {
      for (uint64_t v : {~uint64_t{0}, uint64_t{1} << 31, uint64_t{1} << 62}) hostile.push_back({v, true});
    } else {
      for (uint64_t v : {uint64_t{0xffffffff}, uint64_t{1} << 31}) hostile.push_back({v, true});
    }
    const auto& kind = f.kind;
    if (kind == "key_len" || kind == "str_len" || kind == "elem_str_len" || kind == "name_len") {
      hostile.push_back({left + 1, true});
    } else if (kind == "arr_len") {
      const uint64_t elem = f.index == 8 ? 8 : 4;  // strings: a length each; f32 / i32: 4 bytes
      hostile.push_back({left / elem + 1, true});
    } else if (kind == "tensor_count" || kind == "kv_count") {
      hostile.push_back({load_le(orig, f.off, 8) + 1, false});  // then the parse goes astray somewhere
    } else if (kind == "value_type" || kind == "arr_type") {
      hostile.push_back({13, true});
    } else if (kind == "n_dims") {
      hostile.push_back({0, true});
      hostile.push_back({5, true});
    } else if (kind == "tensor_type") {
      hostile.push_back({4, true});   // Q4_2, removed from the format
      hostile.push_back({36, true});  // past the last type
    } else if (kind == "dim") {
      const auto& shape = w.shapes.at(f.label);
      uint64_t others = 1;
      for (size_t d = 0; d < shape.size(); ++d)
        if (d != f.index) others *= shape[d];
      const uint64_t off = w.tensors.at(f.label).first;
      hostile.push_back({(data_size - off) / (others * 4) + 1, true});  // data just past the end
      hostile.push_back({0, true});
      hostile.push_back({uint64_t{1} << 63, true});
    } else if (kind == "tensor_offset") {
      const uint64_t nbytes = w.tensors.at(f.label).second;
      hostile.push_back({(data_size - nbytes + 1 + 31) / 32 * 32, true});  // aligned, just past the end
      hostile.push_back({~uint64_t{0} - 31, true});                        // aligned, offset + size overflows
      hostile.push_back({16, true});                                       // misaligned
    }
    for (const auto& [v, labelled] : hostile) {
      // Patch the field in place, open, and put the original bytes back.
      uint8_t field[8];
      for (int k = 0; k < f.width; ++k) field[k] = static_cast<uint8_t>(v >> (8 * k));
      ASSERT_EQ(::pwrite(fd, field, f.width, static_cast<off_t>(f.off)), f.width);
      const std::string m = open_error(bad_path);
      ASSERT_EQ(::pwrite(fd, orig.data() + f.off, f.width, static_cast<off_t>(f.off)), f.width);
      SCOPED_TRACE(kind + " " + f.label + " at " + std::to_string(f.off) + " = " + std::to_string(v));
      EXPECT_EQ(m.rfind(bad_path + ": ", 0), 0u) << m;
      std::string needle = f.label;
      if (kind == "tensor_count") needle = "tensor count";
      if (kind == "kv_count") needle = "key-value count";
      if (labelled) {
        EXPECT_TRUE(contains(m, needle)) << m;
        if (kind == "elem_str_len") {
          EXPECT_TRUE(contains(m, "[" + std::to_string(f.index) + "]")) << m;
        }
      }
      ++checked;
      if (HasFailure()) return;
    }
  }
  EXPECT_GT(checked, 500u);
}

// ---------------------------------------------------------------- crafted hostile files

TEST(GgufHostile, BadMagicVersionAndEndianness) {
  Raw r;
  r.header(0, 0);
  auto b = r.b;
  b[0] = 'X';
  expect_error(b, {"bad magic", "\"XGUF\"", "byte offset 0"});
  b = r.b;
  std::memcpy(b.data(), "FUGG", 4);
  expect_error(b, {"bad magic", "byte-swapped"});
  for (uint32_t v : {0u, 4u, 5u, 0x7fffffffu, 0xffffffffu}) {
    b = r.b;
    patch(b, 4, v, 4);
    expect_error(b, {"unsupported GGUF version " + std::to_string(v)});
  }
  for (uint32_t v : {1u, 2u, 3u}) {  // a big-endian file's version field
    b = r.b;
    patch(b, 4, __builtin_bswap32(v), 4);
    expect_error(b, {"big-endian", "version " + std::to_string(v)});
  }
  expect_error({}, {"empty"});
  expect_error({'G', 'G'}, {"truncated", "magic"});
  expect_error({'G', 'G', 'U', 'F', 3, 0}, {"truncated", "version"});
}

TEST(GgufHostile, StringLengthsPastTheEndOrOverTheLimit) {
  for (uint64_t len : {uint64_t{7}, uint64_t{1} << 31, uint64_t{1} << 60, ~uint64_t{0}}) {
    Raw r;
    r.header(0, 1);
    r.str("general.name");
    r.u32(8);
    r.u64(len);
    r.bytes("short");
    expect_error(r.b, {"'general.name'", "string length " + std::to_string(len)});
  }
  // A key longer than 64 KiB is refused even though the file holds it.
  Raw k;
  k.header(0, 1);
  k.str(std::string(65536, 'k'));
  k.u32(4);
  k.u32(1);
  expect_error(k.b, {"metadata entry #0", "key length 65536", "exceeds the limit of 65535"});
  Raw e;
  e.header(0, 1);
  e.str("");
  e.u32(4);
  e.u32(1);
  expect_error(e.b, {"metadata entry #0", "empty key"});
  // A 300 MiB string in a (sparse) 300 MiB file is over the string limit; nothing is read.
  Raw s;
  s.header(0, 1);
  s.str("chat.template");
  s.u32(8);
  s.u64(300ull << 20);
  const std::string path = temp_file(s.b);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(s.b.size() + (300ull << 20))), 0);
  const std::string m = open_error(path);
  EXPECT_TRUE(contains(m, "'chat.template'") && contains(m, "exceeds the limit")) << m;
}

TEST(GgufHostile, ArrayLengthsAreCheckedBeforeAllocating) {
  const std::pair<uint32_t, const char*> elems[] = {{0, "u8"}, {8, "string"}, {9, "array"}, {12, "f64"}};
  for (const auto& [et, name] : elems) {
    for (uint64_t n : {uint64_t{1} << 60, ~uint64_t{0}, uint64_t{1} << 31}) {
      Raw r;
      r.header(0, 1);
      r.str("tokenizer.ggml.tokens");
      r.u32(9);
      r.u32(et);
      r.u64(n);
      r.zeros(16);
      expect_error(r.b, {"'tokenizer.ggml.tokens'", "array length " + std::to_string(n), name});
    }
  }
  // The total number of array elements in the metadata is limited.
  Raw r;
  r.header(0, 1);
  r.str("many");
  r.u32(9);
  r.u32(0);
  r.u64((1u << 23) + 1);
  r.zeros((1u << 23) + 1);
  expect_error(r.b, {"'many'", "exceeds the limit of 8388608 array elements"});
}

TEST(GgufHostile, UnknownValueTypesAndBadBools) {
  for (uint32_t t : {13u, 255u, 0x80000000u, 0xffffffffu}) {
    Raw r;
    r.header(0, 2);
    r.kv_u32("ok.key", 1);
    r.str("x.bad");
    r.u32(t);
    r.u64(0);
    expect_error(r.b, {"'x.bad'", "unknown value type id " + std::to_string(t)});
    Raw a;
    a.header(0, 1);
    a.str("x.arr");
    a.u32(9);
    a.u32(t);
    a.u64(1);
    a.u64(0);
    expect_error(a.b, {"'x.arr'", "unknown array element type id " + std::to_string(t)});
  }
  Raw b;
  b.header(0, 1);
  b.str("x.flag");
  b.u32(7);
  b.u8(2);
  expect_error(b.b, {"'x.flag'", "bool value 2"});
}

TEST(GgufHostile, ArrayNestingDepthIsLimited) {
  auto nested = [](int levels) {
    Raw r;
    r.header(0, 1);
    r.str("deep");
    r.u32(9);
    for (int k = 1; k < levels; ++k) {
      r.u32(9);
      r.u64(1);
    }
    r.u32(5);
    r.u64(1);
    r.u32(42);
    return r.b;
  };
  const std::string ok = temp_file(nested(8));
  auto f = File::open(ok);
  const Value* v = f->find("deep");
  for (int k = 0; k < 7; ++k) v = &v->arr.at(0);
  EXPECT_EQ(v->arr.at(0).i, 42);
  expect_error(nested(9), {"'deep'", "nested deeper than 8"});
  expect_error(nested(100000), {"'deep'", "nested deeper than 8"});
}

TEST(GgufHostile, DuplicateKeysAndTensorNames) {
  Raw r;
  r.header(0, 3);
  r.kv_str("general.name", "a");
  r.kv_u32("x", 1);
  r.kv_str("general.name", "b");
  expect_error(r.b, {"duplicate key 'general.name'"});
  expect_error(craft({{"w", {8}, kF32, 0}, {"w", {8}, kF32, 32}}, 64), {"duplicate tensor name 'w'"});
}

TEST(GgufHostile, CountsThatCannotFit) {
  Raw r;
  r.header(uint64_t{1} << 62, 0);
  expect_error(r.b, {"tensor count 4611686018427387904"});
  Raw k;
  k.header(0, ~uint64_t{0});
  expect_error(k.b, {"key-value count 18446744073709551615"});
}

TEST(GgufHostile, TensorInfoFields) {
  expect_error(craft({{"w", {}, kF32, 0}}, 64), {"'w'", "n_dims is 0"});
  expect_error(craft({{"w", {1, 1, 1, 1, 1}, kF32, 0}}, 64), {"'w'", "n_dims is 5"});
  expect_error(craft({{"w", {8, 0}, kF32, 0}}, 64), {"'w'", "dimension 1 is 0"});
  expect_error(craft({{"w", {~uint64_t{0}}, kF32, 0}}, 64), {"'w'", "dimension 0 is -1"});
  expect_error(craft({{"w", {uint64_t{1} << 32, uint64_t{1} << 32}, kF32, 0}}, 64), {"'w'", "signed 64-bit"});
  expect_error(craft({{"w", {uint64_t{1} << 31, uint64_t{1} << 31}, kF32, 0}}, 64), {"'w'", "2^64 bytes"});
  expect_error(craft({{"w", {uint64_t{1} << 40, uint64_t{1} << 20}, kF32, 0}}, 64), {"'w'", "outside the file"});
  expect_error(craft({{"w", {8}, 4, 0}}, 64), {"'w'", "unknown tensor type id 4"});
  // Ids ggml removed stay unknown between the known ones (31-33, 36-38), as
  // does the first id past ggml 0c1e570's GGML_TYPE_COUNT.
  expect_error(craft({{"w", {8}, 31, 0}}, 64), {"'w'", "unknown tensor type id 31"});
  expect_error(craft({{"w", {8}, 38, 0}}, 64), {"'w'", "unknown tensor type id 38"});
  expect_error(craft({{"w", {8}, 43, 0}}, 64), {"'w'", "unknown tensor type id 43"});
  expect_error(craft({{"w", {8}, 99, 0}}, 64), {"'w'", "unknown tensor type id 99"});
  expect_error(craft({{"w", {8}, 0xffffffff, 0}}, 64), {"'w'", "unknown tensor type id 4294967295"});
  expect_error(craft({{"q", {33, 2}, kQ4_0, 0}}, 128), {"'q'", "row length 33", "Q4_0 block size 32"});
  expect_error(craft({{"a", {8}, kF32, 0}, {"w", {8}, kF32, 16}}, 64), {"'w'", "not a multiple of the alignment 32"});
  expect_error(craft({{"w", {8}, kF32, 1024}}, 64), {"'w'", "outside the file"});
  expect_error(craft({{"w", {8}, kF32, 32}}, 63), {"'w'", "outside the file"});
  expect_error(craft({{"w", {8}, kF32, ~uint64_t{0} - 31}}, 64), {"'w'", "outside the file"});
  expect_error(craft({{"a", {16}, kF32, 0}, {"b", {8}, kF32, 32}}, 128), {"'a'", "'b'", "overlap"});
  expect_error(craft({{"b", {8}, kF32, 0}, {"a", {8}, kF32, 0}}, 128), {"'a'", "'b'", "overlap"});
  expect_error(craft({{std::string(65536, 't'), {8}, kF32, 0}}, 64), {"tensor info #0", "exceeds the limit"});
  expect_error(craft({{"", {8}, kF32, 0}}, 64), {"tensor info #0", "empty tensor name"});
  // A valid file of the same shape opens, with F16 and Q4_0 sizes right.
  auto f = File::open(temp_file(craft({{"a", {16}, kF32, 0}, {"h", {8}, kF16, 64}, {"q", {64, 2}, kQ4_0, 96}}, 168)));
  EXPECT_EQ(f->find_tensor("h")->nbytes, 16u);
  EXPECT_EQ(f->find_tensor("q")->nbytes, 72u);
}

TEST(GgufHostile, GeneralAlignment) {
  auto with_alignment = [](const std::function<void(Raw&)>& kv, size_t align = 32) {
    return craft({{"w", {8}, kF32, 0}}, 64, kv, 1, align);
  };
  expect_error(with_alignment([](Raw& r) {
                 r.str("general.alignment");
                 r.u32(10);
                 r.u64(32);
               }),
               {"'general.alignment'", "type u64, expected u32"});
  expect_error(with_alignment([](Raw& r) { r.kv_str("general.alignment", "32"); }),
               {"'general.alignment'", "type string"});
  expect_error(with_alignment([](Raw& r) { r.kv_u32("general.alignment", 48); }),
               {"'general.alignment'", "48", "power of two"});
  expect_error(with_alignment([](Raw& r) { r.kv_u32("general.alignment", 0); }),
               {"'general.alignment'", "power of two"});
  // A valid non-default alignment moves the data section.
  const std::string path = temp_file(with_alignment([](Raw& r) { r.kv_u32("general.alignment", 256); }, 256));
  auto f = File::open(path);
  EXPECT_EQ(f->alignment(), 256u);
  EXPECT_EQ(f->data_offset(), 256u);
}

// llama.cpp reads any power-of-two alignment, GGUF's spec asks a multiple of
// 8: under it a tensor may start where its elements cannot be read in place.
// Such a file opens when every tensor happens to sit right, else it names the
// tensor (a fuzz finding: an imatrix read a float at an odd address).
TEST(GgufHostile, TensorDataAlignedForItsType) {
  const auto aligned_1 = [](uint32_t type, uint64_t offset) {
    return craft({{"w", {8}, type, offset}}, 64, [](Raw& r) { r.kv_u32("general.alignment", 1); }, 1, 1);
  };
  const size_t data_offset = aligned_1(kF32, 0).size() - 64;
  const uint64_t odd = (4 - data_offset % 4) % 4 + 2;  // data_offset + odd == 2 (mod 4)
  expect_error(aligned_1(kF32, odd), {"'w'", "F32 data starts at file byte " + std::to_string(data_offset + odd),
                                      "not a multiple of the 4 bytes", "general.alignment is 1"});
  expect_error(aligned_1(kF16, odd + 1), {"'w'", "F16", "2 bytes"});
  EXPECT_EQ(File::open(temp_file(aligned_1(kF16, odd)))->find_tensor("w")->nbytes, 16u);
  EXPECT_EQ(File::open(temp_file(aligned_1(kF32, odd + 2)))->alignment(), 1u);
  // A quantized block is read as its struct, whose fp16 scale needs 2 (Q8_K's
  // float 4), whatever the block's size: Q4_K (144 bytes) opens 2 past a
  // multiple of 8, Q8_K not.
  const auto one_block = [](uint32_t type, uint64_t offset, size_t bytes) {
    return craft({{"w", {256}, type, offset}}, bytes, [](Raw& r) { r.kv_u32("general.alignment", 1); }, 1, 1);
  };
  const uint64_t two_past_8 = (8 - data_offset % 8) % 8 + 2;
  EXPECT_EQ(File::open(temp_file(one_block(kQ4_K, two_past_8, 160)))->find_tensor("w")->nbytes, 144u);
  expect_error(one_block(kQ4_K, two_past_8 + 1, 160), {"'w'", "Q4_K", "2 bytes"});
  expect_error(one_block(kQ8_K, two_past_8, 300), {"'w'", "Q8_K", "4 bytes"});
}

// ---------------------------------------------------------------- GGUF v1

TEST(GgufV1, CraftedLegacyFileReadsWithU32Lengths) {
  Raw r(/*v1=*/true);
  r.header(1, 3, /*version=*/1);
  r.kv_str("general.architecture", "llama");
  r.str("tokenizer.ggml.tokens");
  r.u32(9);
  r.u32(8);
  r.len(3);
  r.str("a");
  r.str("");
  r.str("ccc");
  r.kv_u32("llama.embedding_length", 8);
  r.tensor("w", {8, 2}, kF32, 0);
  r.pad_to(32);
  for (int k = 0; k < 64; ++k) r.u8(static_cast<uint8_t>(k));
  auto f = File::open(temp_file(r.b));
  EXPECT_EQ(f->version(), 1u);
  EXPECT_EQ(f->get_int("llama.embedding_length"), 8);
  EXPECT_EQ(*f->try_string_array("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "", "ccc"}));
  const TensorInfo* t = f->find_tensor("w");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->ne[1], 2);
  EXPECT_EQ(f->tensor_data(*t)[63], 63);
  // A v1 file's string length is a u32: 2^32 - 1 runs past the end.
  auto b = r.b;
  patch(b, 16, 0xffffffffu, 4);  // after magic, version, tensor count, kv count: 4 bytes each
  expect_error(b, {"metadata entry #0", "4294967295"});
}

TEST(GgufV1, SharedLegacyFileMatchesTheV3File) {
  QLENS_REQUIRE_SHARED(v1_path, "models/tinyllamas-stories-260k-f32.gguf");
  QLENS_REQUIRE_SHARED(v3_path, "models/stories260K.gguf");
  auto v1 = File::open(v1_path);
  auto v3 = File::open(v3_path);
  EXPECT_EQ(v1->version(), 1u);
  EXPECT_EQ(v1->get_string("general.architecture"), "llama");
  EXPECT_EQ(v1->get_int("llama.embedding_length"), 64);
  EXPECT_EQ(v1->try_string_array("tokenizer.ggml.tokens"), v3->try_string_array("tokenizer.ggml.tokens"));
  EXPECT_EQ(v1->try_float_array("tokenizer.ggml.scores"), v3->try_float_array("tokenizer.ggml.scores"));
  ASSERT_EQ(v1->tensors().size(), 48u);
  ASSERT_EQ(v3->tensors().size(), 48u);
  for (const TensorInfo& a : v1->tensors()) {
    const TensorInfo* b = v3->find_tensor(a.name);
    ASSERT_TRUE(b) << a.name;
    EXPECT_EQ(a.type, b->type) << a.name;
    EXPECT_EQ(a.n_dims, b->n_dims) << a.name;
    EXPECT_EQ(a.ne, b->ne) << a.name;
    ASSERT_EQ(a.nbytes, b->nbytes) << a.name;
    EXPECT_EQ(std::memcmp(v1->tensor_data(a), v3->tensor_data(*b), a.nbytes), 0) << a.name << " differs";
  }
}

TEST(GgufV1, TruncatedLegacyFileAlwaysThrows) {
  QLENS_REQUIRE_SHARED(path, "models/tinyllamas-stories-260k-f32.gguf");
  const auto bytes = read_bytes(path);
  size_t data_offset = 0;
  {
    auto f = File::open(path);
    data_offset = f->data_offset();
  }
  const std::string cut_path = qlens::test::temp_dir() + "/cut1.gguf";
  write_bytes(cut_path, bytes.data(), bytes.size());
  for (size_t n = data_offset + 1; n-- > 0;) {  // shrink the one file, longest cut first
    ASSERT_EQ(::truncate(cut_path.c_str(), static_cast<off_t>(n)), 0);
    try {
      auto f = File::open(cut_path);
      FAIL() << "a v1 file truncated to " << n << " bytes was accepted";
    } catch (const Error&) {
    }
  }
}

// ---------------------------------------------------------------- JSON writer

std::string json(bool pretty, const std::function<void(qlens::JsonWriter&)>& fn) {
  std::ostringstream os;
  qlens::JsonWriter w(os, pretty);
  fn(w);
  EXPECT_TRUE(w.done());
  return os.str();
}

TEST(JsonWriter, CompactAndPretty) {
  auto doc = [](qlens::JsonWriter& w) {
    w.begin_object();
    w.key("x");
    w.value(1.5);
    w.key("list");
    w.begin_array();
    w.value(1);
    w.value("two");
    w.null();
    w.value(true);
    w.begin_object();
    w.end_object();
    w.begin_array();
    w.end_array();
    w.end_array();
    w.key("n");
    w.value(std::numeric_limits<int64_t>::min());
    w.key("u");
    w.value(std::numeric_limits<uint64_t>::max());
    w.end_object();
  };
  EXPECT_EQ(json(false, doc),
            "{\"x\":1.5,\"list\":[1,\"two\",null,true,{},[]],\"n\":-9223372036854775808,"
            "\"u\":18446744073709551615}");
  EXPECT_EQ(json(true, doc),
            "{\n  \"x\": 1.5,\n  \"list\": [\n    1,\n    \"two\",\n    null,\n    true,\n    {},\n    []\n  ],\n"
            "  \"n\": -9223372036854775808,\n  \"u\": 18446744073709551615\n}");
}

TEST(JsonWriter, EscapesControlCharactersAndInvalidUtf8) {
  const std::string in = std::string("q\" b\\ \n\r\t\b\f \x01\x1f\x7f end");
  EXPECT_EQ(qlens::JsonWriter::escape(in), "q\\\" b\\\\ \\n\\r\\t\\b\\f \\u0001\\u001f\\u007f end");
  EXPECT_EQ(qlens::JsonWriter::escape(std::string("a\0b", 3)), "a\\u0000b");
  const std::string fffd = "\xef\xbf\xbd";
  EXPECT_EQ(qlens::JsonWriter::escape("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");  // valid 2, 3, 4-byte sequences kept
  EXPECT_EQ(qlens::JsonWriter::escape("a\xff"
                                      "b"),
            "a" + fffd + "b");                                                          // invalid byte
  EXPECT_EQ(qlens::JsonWriter::escape("\xe2\x82"), fffd + fffd);                        // cut sequence
  EXPECT_EQ(qlens::JsonWriter::escape("\xc0\xaf"), fffd + fffd);                        // overlong
  EXPECT_EQ(qlens::JsonWriter::escape("\xed\xa0\x80"), fffd + fffd + fffd);             // surrogate
  EXPECT_EQ(qlens::JsonWriter::escape("\xf4\x90\x80\x80"), fffd + fffd + fffd + fffd);  // > U+10FFFF
  EXPECT_EQ(json(false, [](qlens::JsonWriter& w) { w.value(std::string_view("\x80", 1)); }), "\"" + fffd + "\"");
  EXPECT_EQ(json(false,
                 [](qlens::JsonWriter& w) {
                   w.begin_object();
                   w.key("k\n");
                   w.value(0);
                   w.end_object();
                 }),
            "{\"k\\n\":0}");
}

TEST(JsonWriter, NumbersRoundTripAndNonFiniteIsNull) {
  for (double d : {0.1, 1.0 / 3.0, 1e-300, 5e-324, DBL_MAX, -0.0, 123456789012345678.0, -2.5e-7, 1e21}) {
    const std::string s = json(false, [&](qlens::JsonWriter& w) { w.value(d); });
    EXPECT_EQ(std::bit_cast<uint64_t>(std::strtod(s.c_str(), nullptr)), std::bit_cast<uint64_t>(d)) << s;
  }
  EXPECT_EQ(json(false, [](qlens::JsonWriter& w) { w.value(1e-5f); }), "1e-05");
  EXPECT_EQ(json(false, [](qlens::JsonWriter& w) { w.value(0.1f); }), "0.1");
  const std::string arr = json(false, [](qlens::JsonWriter& w) {
    w.begin_array();
    w.value(std::nan(""));
    w.value(INFINITY);
    w.value(-INFINITY);
    w.value(std::nanf(""));
    w.end_array();
  });
  EXPECT_EQ(arr, "[null,null,null,null]");
  EXPECT_EQ(json(false, [](qlens::JsonWriter& w) { w.value(uint8_t{200}); }), "200");
  EXPECT_EQ(json(false, [](qlens::JsonWriter& w) { w.value(int8_t{-5}); }), "-5");
  EXPECT_EQ(json(false, [](qlens::JsonWriter& w) { w.value(false); }), "false");
}

TEST(JsonWriter, MisuseThrows) {
  std::ostringstream os;
  qlens::JsonWriter w(os);
  w.begin_object();
  EXPECT_THROW(w.value(1), std::logic_error);  // no key
  EXPECT_THROW(w.end_array(), std::logic_error);
  w.key("a");
  EXPECT_THROW(w.key("b"), std::logic_error);
  EXPECT_THROW(w.end_object(), std::logic_error);
  w.value(1);
  w.end_object();
  EXPECT_THROW(w.value(2), std::logic_error);  // second top-level value
  qlens::JsonWriter a(os);
  a.begin_array();
  EXPECT_THROW(a.key("x"), std::logic_error);
}

// ---------------------------------------------------------------- inspect

bool have_python() { return qlens::test::run_command("python3 -c 'import json'", nullptr) == 0; }

// Runs python3 on `script` with the given file as argv[1]; returns exit status and output.
int python(const std::string& script, const std::string& arg, std::string* out) {
  const std::string py = qlens::test::temp_dir() + "/check.py";
  std::ofstream(py) << script;
  return qlens::test::run_command("python3 '" + py + "' '" + arg + "'", out);
}

TEST(Inspect, TextOfTheRealModel) {
  QLENS_REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto f = File::open(path);
  std::ostringstream os;
  qlens::tools::inspect_text(*f, os);
  const std::string s = os.str();
  for (const char* needle :
       {"GGUF v3", "alignment    32", "Metadata: 19 keys", "general.architecture", "\"llama\"", "array[string]",
        "[\"<unk>\", \"<s>\", \"</s>\", \"<0x00>\"", "(512 items)", "llama.attention.layer_norm_rms_epsilon", "1e-05",
        "Tensors: 48", "token_embd.weight", "[64, 512]", "131072", "32.00", "Totals: 48 tensors"})
    EXPECT_TRUE(contains(s, needle)) << "missing " << needle << " in\n" << s;
  int64_t params = 0;
  for (const auto& t : f->tensors()) params += t.nelements();
  EXPECT_TRUE(contains(s, std::to_string(params) + " parameters")) << s;
  // Columns line up: every tensor row has its type at the same column.
  std::istringstream lines(s);
  std::string line;
  size_t type_col = std::string::npos;
  while (std::getline(lines, line)) {
    if (line.rfind("  blk.", 0) != 0 && line.rfind("  token_embd", 0) != 0) continue;
    const size_t c = line.find("F32");
    if (type_col == std::string::npos) type_col = c;
    EXPECT_EQ(c, type_col) << line;
  }
}

TEST(Inspect, TextEscapesAndCutsHostileStrings) {
  Writer w;
  w.set("s.control", Value::make_string("a\x1b[31mred\x07\xff"));
  w.set("s.long", Value::make_string(std::string(1000, 'z')));
  const std::string path = qlens::test::temp_dir() + "/esc.gguf";
  w.write(path);
  std::ostringstream os;
  qlens::tools::inspect_text(*File::open(path), os);
  const std::string s = os.str();
  EXPECT_FALSE(contains(s, "\x1b")) << s;
  EXPECT_TRUE(contains(s, "\\x1b[31mred\\x07\\xff")) << s;
  EXPECT_TRUE(contains(s, "(1000 bytes)")) << s;
  EXPECT_TRUE(contains(s, "Tensors: 0")) << s;
  EXPECT_TRUE(contains(s, "0 parameters")) << s;
}

TEST(Inspect, JsonIsValidAndSummarizesLongArrays) {
  QLENS_REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto f = File::open(path);
  std::ostringstream os;
  qlens::tools::inspect_json(*f, os);
  const std::string s = os.str();
  EXPECT_TRUE(contains(s, "\"count\": 512")) << s.substr(0, 2000);
  if (!have_python()) GTEST_SKIP() << "python3 not available to parse the JSON";
  const std::string jpath = qlens::test::temp_dir() + "/inspect.json";
  std::ofstream(jpath) << s;
  const char* script = R"PY(
import json, sys
d = json.load(open(sys.argv[1]))
assert d["tool"] == "qlens inspect" and d["schema_version"] == 1 and d["inputs"]["file"].endswith(".gguf"), d["inputs"]
assert d["version"] == 3 and d["alignment"] == 32, d["version"]
m = d["metadata"]
assert len(m) == 19, len(m)
assert m["general.architecture"] == {"type": "string", "value": "llama"}, m["general.architecture"]
assert m["llama.embedding_length"] == {"type": "u32", "value": 64}
assert m["llama.attention.layer_norm_rms_epsilon"]["value"] == 1e-05
tok = m["tokenizer.ggml.tokens"]
assert tok["type"] == "array[string]", tok
assert tok["value"]["type"] == "string" and tok["value"]["count"] == 512, tok
assert tok["value"]["head"][:3] == ["<unk>", "<s>", "</s>"], tok
assert len(d["tensors"]) == 48
t = [x for x in d["tensors"] if x["tensor"] == "token_embd.weight"][0]
assert t["shape"] == [64, 512] and t["type"] == "F32" and t["bytes"] == 131072 and t["bits_per_weight"] == 32, t
tot = d["totals"]
assert tot["tensor_count"] == 48 and tot["bits_per_weight"] == 32
assert tot["parameter_count"] == sum(x["bytes"] for x in d["tensors"]) // 4
print("ok")
)PY";
  std::string out;
  EXPECT_EQ(python(script, jpath, &out), 0) << out;
}

// ---------------------------------------------------------------- Python gguf cross-check

// The expectation for gguf_reference_check.py: for each kv its key, the type
// chain gguf-py reports (type, then the element type of the first element, ...),
// and its leaves flattened (floats as bit patterns); for each tensor its name,
// type id, shape and bytes in hex.
void expected_leaves(qlens::JsonWriter& w, const Value& v) {
  switch (v.type) {
    case ValueType::Array:
      for (const auto& e : v.arr) expected_leaves(w, e);
      return;
    case ValueType::F32:
    case ValueType::F64:
      w.begin_object();
      w.key("bits");
      w.value(float_bits(v));
      w.end_object();
      return;
    case ValueType::String:
      w.value(v.str);
      return;
    case ValueType::Bool:
      w.value(v.i != 0);
      return;
    case ValueType::U8:
    case ValueType::U16:
    case ValueType::U32:
    case ValueType::U64:
      w.value(v.u);
      return;
    default:
      w.value(v.i);
  }
}

TEST(GgufReference, PythonGgufPackageReadsOurFiles) {
  if (qlens::test::run_command("python3 -c 'import gguf, numpy'", nullptr) != 0)
    GTEST_SKIP() << "the Python gguf package is not installed (pip install gguf numpy) - cross-check skipped";
  for (uint32_t align : {0u, 64u}) {
    SCOPED_TRACE("alignment " + std::to_string(align));
    // gguf-py flattens nested arrays by the first element's types, so nested
    // arrays here have a uniform, non-empty first element.
    std::vector<qlens::gguf::KeyValue> kvs;
    for (auto& kv : every_value_type())
      if (kv.key != "t.arr.nested.mixed") kvs.push_back(std::move(kv));
    const auto ts = sample_tensors();
    Writer w;
    for (const auto& kv : kvs) w.set(kv.key, kv.value);
    if (align) w.set("general.alignment", Value::make_u32(align));
    for (const auto& t : ts) w.add_tensor(t.name, t.type, t.ne, t.data.data(), t.data.size());
    const std::string dir = qlens::test::temp_dir();
    w.write(dir + "/ref.gguf");

    std::ofstream ex(dir + "/expected.json");
    qlens::JsonWriter j(ex, false);
    j.begin_object();
    j.key("alignment");
    j.value(align ? align : 32u);
    j.key("kv");
    j.begin_array();
    auto emit = [&](const std::string& key, const Value& v) {
      j.begin_object();
      j.key("key");
      j.value(key);
      j.key("types");
      j.begin_array();
      for (const Value* p = &v;;) {
        j.value(static_cast<uint32_t>(p->type));
        if (p->type != ValueType::Array || p->arr.empty()) break;
        p = &p->arr[0];
      }
      j.end_array();
      j.key("leaves");
      j.begin_array();
      expected_leaves(j, v);
      j.end_array();
      j.end_object();
    };
    for (const auto& kv : kvs) emit(kv.key, kv.value);
    if (align) emit("general.alignment", Value::make_u32(align));
    j.end_array();
    j.key("tensors");
    j.begin_array();
    for (const auto& t : ts) {
      j.begin_object();
      j.key("name");
      j.value(t.name);
      j.key("type");
      j.value(static_cast<uint32_t>(t.type));
      j.key("shape");
      j.begin_array();
      for (int64_t d : t.ne) j.value(d);
      j.end_array();
      j.key("hex");
      static const char* hex = "0123456789abcdef";
      std::string h;
      for (uint8_t b : t.data) {
        h += hex[b >> 4];
        h += hex[b & 15];
      }
      j.value(h);
      j.end_object();
    }
    j.end_array();
    j.end_object();
    ex.close();

    std::string out;
    const int rc =
        qlens::test::run_command("python3 '" + std::string(QLENS_SOURCE_DIR) + "/tests/gguf_reference_check.py' '" +
                                     dir + "/ref.gguf' '" + dir + "/expected.json'",
                                 &out);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_TRUE(contains(out, "OK")) << out;
  }
}


// ---- split models (gguf-split's parts of a tiny Q8_0 model: tests/data/split) ----

std::string split_part(int k) {
  return std::string(QLENS_SOURCE_DIR) + "/tests/data/split/tiny-q8-split-0000" + std::to_string(k) + "-of-00003.gguf";
}

TEST(GgufSplit, PartsOpenAsOneFileFromTheFirst) {
  auto f = qlens::gguf::File::open(split_part(1));
  EXPECT_EQ(f->split_count(), 3);
  EXPECT_EQ(f->part_path(2), split_part(3));
  ASSERT_EQ(f->tensors().size(), 20u) << "split.tensors.count";
  std::map<int, int> per_part;
  for (const auto& t : f->tensors()) {
    ++per_part[t.split];
    EXPECT_NE(f->tensor_data(t), nullptr) << t.name;  // the bytes: QuantizeSplits compares them
  }
  EXPECT_EQ(per_part[0], 8);
  EXPECT_EQ(per_part[1], 8);
  EXPECT_EQ(per_part[2], 4);
  EXPECT_TRUE(f->find("general.architecture")) << "the metadata is the first part's";
}

TEST(GgufSplit, AnotherPartThanTheFirstIsRefusedNamingTheFirst) {
  const std::string err = qlens::test::error_of([] { qlens::gguf::File::open(split_part(2)); });
  EXPECT_TRUE(qlens::test::contains(err, "part 2 of a model split in 3 files")) << err;
  EXPECT_TRUE(qlens::test::contains(err, "tiny-q8-split-00001-of-00003.gguf")) << err;
}

TEST(GgufSplit, MissingOrForeignPartsAreErrorsNamingTheFile) {
  const std::string dir = qlens::test::temp_dir() + "/split";
  std::filesystem::create_directories(dir);
  const auto copy = [&](int from, const std::string& name) {
    std::filesystem::copy_file(split_part(from), dir + "/" + name, std::filesystem::copy_options::overwrite_existing);
  };
  copy(1, "m-00001-of-00003.gguf");
  copy(3, "m-00003-of-00003.gguf");
  std::string err = qlens::test::error_of([&] { qlens::gguf::File::open(dir + "/m-00001-of-00003.gguf"); });
  EXPECT_TRUE(qlens::test::contains(err, "m-00002-of-00003.gguf: cannot open")) << err;
  copy(3, "m-00002-of-00003.gguf");  // the third part where the second should be
  err = qlens::test::error_of([&] { qlens::gguf::File::open(dir + "/m-00001-of-00003.gguf"); });
  EXPECT_TRUE(qlens::test::contains(err, "m-00002-of-00003.gguf: split.no 2 and split.count 3, expected 1 and 3")) << err;
  copy(1, "renamed.gguf");
  err = qlens::test::error_of([&] { qlens::gguf::File::open(dir + "/renamed.gguf"); });
  EXPECT_TRUE(qlens::test::contains(err, "not named PREFIX-00001-of-00003.gguf")) << err;
}

}  // namespace
