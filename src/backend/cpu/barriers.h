// Where the CPU backend's threads must meet. Every thread runs a call's work
// items (nodes, and taps after their node) in the same order, each thread its
// share of each; a barrier before an item is needed only when the item
// touches memory that an item since the last barrier writes, or writes memory
// such an item reads. The memory plan reuses buffers, so conflicts are found
// by address ranges, not by the graph's edges. Two exceptions make a
// generated token's chains cheap: where two nodes' threads take the same
// pieces of results of one shape (ops.h's Split), an element-wise node that
// reads the other's result element for element, or writes over what the
// other read so, touches only what its own thread wrote or read; and a node
// whose threads share scratch or wait for each other inside it runs alone
// between two barriers.
//
// With the memory plan's delayed reuse (core/memory_plan.cpp), a generated
// token's product of k runs beside the copy of v into the cache, the product
// of q beside the copy of k, and ffn_up beside the activation of ffn_gate; a
// norm's scaling runs right after the norm, and the product of the halves
// right after the activation.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/ops.h"
#include "qlens/backend.h"
#include "qlens/tensor.h"

namespace qlens::cpu {

// Bytes [lo, hi); empty when lo == hi.
struct ByteRange {
  uintptr_t lo = 0, hi = 0;
  bool overlaps(const ByteRange& o) const { return lo < o.hi && o.lo < hi; }
};

ByteRange byte_range(const Tensor& t);

// What one work item reads and writes.
class MemoryAccess {
 public:
  // A node's kernel: reads its sources, writes the node; `alone`: its
  // threads share scratch or wait for each other inside it.
  static MemoryAccess node(const Tensor& node, Split split, bool alone);
  // A tap: reads what its kind reads, writes its state (its partial sums).
  static MemoryAccess tap(const TapWork& tap, const Tensor& node);

  // Whether `later` must wait until this item is done on every thread.
  bool conflicts(const MemoryAccess& later) const;

 private:
  void read(const Tensor* t);
  // Both kernels' threads take the same pieces of results of one shape.
  bool same_pieces(const MemoryAccess& other) const;

  // Reads other than weights: an op with more (GatedDeltaNet's six) runs
  // alone. Kept small: the lists are made for every node of every call.
  static constexpr int kMaxReads = 3;
  const Tensor* written_ = nullptr;  // null for a tap
  ByteRange write_;
  std::array<const Tensor*, kMaxReads> read_tensors_{};
  std::array<ByteRange, kMaxReads> reads_{};
  uint8_t n_reads_ = 0;
  Split split_ = Split::Any;
  bool alone_ = false;
};

// For each item, whether the threads meet before it (never before the first).
std::vector<uint8_t> barriers_before(std::span<const MemoryAccess> items);

}  // namespace qlens::cpu
