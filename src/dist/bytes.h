// What ranks send each other: values written one after another into a byte
// string and read back in the same order, by processes of the same build
// (same layout, same byte order). A message shorter than its reader expects
// is an Error, never a read past its end.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "qlens/error.h"

namespace qlens::dist {

class ByteWriter {
 public:
  template <typename T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put(const std::string& s) {
    put(static_cast<uint64_t>(s.size()));
    out_.append(s);
  }
  template <typename T>
  void put(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put(static_cast<uint64_t>(v.size()));
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  const std::string& bytes() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class ByteReader {
 public:
  explicit ByteReader(const std::string& bytes) : bytes_(bytes) {}

  template <typename T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    std::memcpy(&v, take(sizeof v), sizeof v);
    return v;
  }
  std::string get_string() {
    const uint64_t n = get<uint64_t>();
    return std::string(take(n), n);
  }
  template <typename T>
  std::vector<T> get_vector() {
    const uint64_t n = get<uint64_t>();
    if (n > (bytes_.size() - at_) / sizeof(T)) truncated();
    std::vector<T> v(n);
    if (n > 0) std::memcpy(v.data(), take(n * sizeof(T)), n * sizeof(T));
    return v;
  }
  bool at_end() const { return at_ == bytes_.size(); }

 private:
  const char* take(uint64_t n) {
    if (n > bytes_.size() - at_) truncated();
    const char* p = bytes_.data() + at_;
    at_ += n;
    return p;
  }
  [[noreturn]] static void truncated() { throw Error("a message between ranks ended early"); }

  const std::string& bytes_;
  size_t at_ = 0;
};

}  // namespace qlens::dist
