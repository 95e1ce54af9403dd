// Memory planning: one buffer for all intermediate results of a graph.
//
// Each tensor that owns memory (not a view, no data yet) lives from the node
// that computes it to the last node that reads it or a view of it. Walking the
// nodes in order, a tensor gets the best-fitting free block when it is computed
// and its block returns to the free list after its last reader. Inputs, outputs
// and the graph's final node are never freed, so callers can read them after
// compute.
#include <algorithm>
#include <functional>
#include <vector>

#include "core/round_up.h"
#include "qlens/backend.h"
#include "qlens/error.h"
#include "qlens/pointer_map.h"

namespace qlens {

namespace {

const Tensor* owner_of(const Tensor* t) { return t->view_src ? t->view_src : t; }

bool needs_memory(const Tensor* t) { return t->data == nullptr && t->view_src == nullptr; }

// Best-fit free list over [0, high_water) with coalescing: blocks sorted by
// offset in a vector (a graph has a handful free at a time).
class FreeList {
 public:
  explicit FreeList(size_t alignment) : alignment_(alignment) {}

  size_t allocate(size_t bytes) {
    bytes = round_up(std::max<size_t>(bytes, 1), alignment_);
    auto best = blocks_.end();
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it)
      if (it->size >= bytes && (best == blocks_.end() || it->size < best->size)) best = it;
    if (best == blocks_.end()) {
      // Grow: reuse a free block at the end of the buffer if there is one.
      if (!blocks_.empty() && blocks_.back().offset + blocks_.back().size == high_water_) {
        const size_t offset = blocks_.back().offset;
        blocks_.pop_back();
        high_water_ = offset + bytes;
        return offset;
      }
      const size_t offset = high_water_;
      high_water_ += bytes;
      return offset;
    }
    const size_t offset = best->offset;
    if (best->size == bytes) {
      blocks_.erase(best);
    } else {
      best->offset += bytes;
      best->size -= bytes;
    }
    return offset;
  }

  void release(size_t offset, size_t bytes) {
    bytes = round_up(std::max<size_t>(bytes, 1), alignment_);
    auto it = std::lower_bound(blocks_.begin(), blocks_.end(), offset,
                               [](const Block& b, size_t o) { return b.offset < o; });
    it = blocks_.insert(it, Block{offset, bytes});
    if (auto next = std::next(it); next != blocks_.end() && it->offset + it->size == next->offset) {
      it->size += next->size;
      blocks_.erase(next);
    }
    if (it != blocks_.begin()) {
      auto prev = std::prev(it);
      if (prev->offset + prev->size == it->offset) {
        prev->size += it->size;
        blocks_.erase(it);
      }
    }
  }

  size_t high_water() const { return high_water_; }

 private:
  struct Block {
    size_t offset, size;
  };
  size_t alignment_;
  size_t high_water_ = 0;
  std::vector<Block> blocks_;  // free, by offset
};

}  // namespace

MemoryPlan plan_memory(const Graph& graph, size_t alignment, const std::function<bool(const Tensor*)>& include) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) throw Error("plan_memory: alignment must be a power of two");
  const auto& nodes = graph.nodes();
  const int n = static_cast<int>(nodes.size());
  constexpr int kForever = 1 << 30;

  // The last node that reads each owner (or a view of it).
  PointerMap<int> last_use;
  last_use.reserve(nodes.size() + graph.leaves().size());
  auto used_at = [&](const Tensor* owner, int j) {
    int& last = last_use[owner];
    last = std::max(last, j);
  };
  for (int j = 0; j < n; ++j) {
    Tensor* node = nodes[j];
    for (Tensor* s : node->src)
      if (s) used_at(owner_of(s), j);
    used_at(owner_of(node), j);
  }
  if (!graph.kept().empty()) {
    PointerMap<int> index;
    index.reserve(nodes.size());
    for (int j = 0; j < n; ++j) index.insert(nodes[j], j);
    for (const auto& [t, reader] : graph.kept())
      if (const int* j = index.find(reader)) used_at(owner_of(t), *j);
  }
  for (Tensor* node : nodes)
    if (node->flags & kFlagOutput) last_use[owner_of(node)] = kForever;
  if (n > 0) last_use[owner_of(nodes.back())] = kForever;

  MemoryPlan plan;
  FreeList free_list(alignment);
  PointerMap<size_t> offset_of;
  offset_of.reserve(nodes.size() + graph.leaves().size());
  auto planned = [&](const Tensor* t) { return needs_memory(t) && (!include || include(t)); };
  auto allocate = [&](Tensor* t) {
    const size_t off = free_list.allocate(t->nbytes());
    offset_of.insert(t, off);
    plan.offsets.emplace_back(t, off);
  };

  // Inputs without data first: they are written before compute starts.
  for (Tensor* leaf : graph.leaves())
    if (planned(leaf)) allocate(leaf);

  // Each planned node with the node after which it is released, by that node.
  std::vector<std::pair<int, Tensor*>> releases;
  for (int j = 0; j < n; ++j) {
    Tensor* node = nodes[j];
    if (!planned(node) || op_is_view(node->op)) continue;
    const int* last = last_use.find(node);
    const int after = last ? *last : j;
    if (after != kForever) releases.emplace_back(after, node);
  }
  std::stable_sort(releases.begin(), releases.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });

  // A block freed after a node stays taken while the next computed node is
  // placed, unless that node reads the first one's result (a barrier usually
  // parts them anyway): a node that does not depend on the one before it
  // then writes memory that one does not read, and the CPU's threads go on
  // to it without meeting at a barrier. The CPU finds conflicts by address
  // (backend/cpu/barriers.h), so reuse here costs at most a barrier, never a
  // wrong result. A chain still ping-pongs.
  auto reads = [](const Tensor* node, const Tensor* earlier) {
    for (const Tensor* s : node->src)
      if (s && owner_of(s) == owner_of(earlier)) return true;
    return false;
  };
  std::vector<Tensor*> pending;
  auto release_pending = [&] {
    for (Tensor* t : pending) free_list.release(*offset_of.find(t), t->nbytes());
    pending.clear();
  };
  const Tensor* previous = nullptr;  // the last computed node
  auto next_release = releases.begin();
  for (int j = 0; j < n; ++j) {
    Tensor* node = nodes[j];
    if (!op_is_view(node->op)) {
      const bool waits = previous && reads(node, previous);
      if (waits) release_pending();
      if (planned(node)) allocate(node);
      if (!waits) release_pending();
      previous = node;
    }
    for (; next_release != releases.end() && next_release->first == j; ++next_release)
      pending.push_back(next_release->second);
  }
  plan.size = free_list.high_water();
  return plan;
}

void apply_memory_plan(const Graph& graph, const MemoryPlan& plan, void* base) {
  char* b = static_cast<char*>(base);
  for (const auto& [t, off] : plan.offsets) t->data = b + off;
  for (Tensor* node : graph.nodes())
    if (node->view_src) {
      if (!node->view_src->data) throw Error("apply_memory_plan: view '" + node->name + "' of a tensor without data");
      node->data = static_cast<char*>(node->view_src->data) + node->view_offset;
    }
}

}  // namespace qlens
