// A map from (non-null) pointers to small values: open addressing with
// linear probing in two flat arrays, no allocation per entry, clear() keeps
// the capacity. The graph code's per-tensor tables (the graph's visited
// set, the scheduler's assignment, the memory plan's lifetimes) are built
// again for every generated token: with std::map and std::unordered_map
// their node allocations and tree walks cost about a millisecond a token
// on Gemma 3 270M (measured, docs/PERFORMANCE.md), more than its attention.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace qlens {

template <class V>
class PointerMap {
  static_assert(!std::is_same_v<V, bool>, "std::vector<bool> holds no addressable values: use char");

 public:
  PointerMap() = default;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  void clear() {
    if (size_ == 0) return;
    std::fill(keys_.begin(), keys_.end(), nullptr);
    size_ = 0;
  }

  // Room for n keys without growing (a graph's tables know their size).
  void reserve(size_t n) {
    size_t capacity = keys_.empty() ? 64 : keys_.size();
    while (capacity < 2 * n) capacity *= 2;
    if (capacity > keys_.size()) rehash(capacity);
  }

  // The value of key, or null where it has none.
  V* find(const void* key) {
    const size_t i = slot(key);
    return keys_.empty() || keys_[i] == nullptr ? nullptr : &values_[i];
  }
  const V* find(const void* key) const { return const_cast<PointerMap*>(this)->find(key); }
  bool contains(const void* key) const { return find(key) != nullptr; }

  // The value of key, made from `value` when the key is new; second: whether
  // it was new.
  std::pair<V*, bool> insert(const void* key, V value) {
    if (keys_.empty() || 2 * (size_ + 1) > keys_.size()) grow();
    const size_t i = slot(key);
    if (keys_[i] != nullptr) return {&values_[i], false};
    keys_[i] = key;
    values_[i] = std::move(value);
    ++size_;
    return {&values_[i], true};
  }
  // The value of key, value-initialized when the key is new.
  V& operator[](const void* key) { return *insert(key, V{}).first; }

 private:
  // Where key is, or the empty slot it would take (the table is never full).
  size_t slot(const void* key) const {
    if (keys_.empty()) return 0;
    const size_t mask = keys_.size() - 1;
    // Fibonacci hashing of the address without its alignment bits.
    size_t i = static_cast<size_t>((reinterpret_cast<uintptr_t>(key) >> 4) * 0x9E3779B97F4A7C15ull >> 20) & mask;
    while (keys_[i] != nullptr && keys_[i] != key) i = (i + 1) & mask;
    return i;
  }

  void grow() { rehash(keys_.empty() ? 64 : 2 * keys_.size()); }

  void rehash(size_t capacity) {
    std::vector<const void*> keys = std::move(keys_);
    std::vector<V> values = std::move(values_);
    keys_.assign(capacity, nullptr);
    values_.assign(capacity, V{});
    size_ = 0;
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] != nullptr) insert(keys[i], std::move(values[i]));
  }

  std::vector<const void*> keys_;  // null: empty
  std::vector<V> values_;
  size_t size_ = 0;
};

}  // namespace qlens
