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
#include <map>
#include <unordered_map>

#include "core/round_up.h"
#include "qlens/backend.h"
#include "qlens/error.h"

namespace qlens {

namespace {

Tensor* owner_of(Tensor* t) { return t->view_src ? t->view_src : t; }

bool needs_memory(const Tensor* t) { return t->data == nullptr && t->view_src == nullptr; }

// First-fit-by-size free list over [0, high_water) with coalescing.
class FreeList {
 public:
  explicit FreeList(size_t alignment) : alignment_(alignment) {}

  size_t allocate(size_t bytes) {
    bytes = round_up(std::max<size_t>(bytes, 1), alignment_);
    auto best = blocks_.end();
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it)
      if (it->second >= bytes && (best == blocks_.end() || it->second < best->second)) best = it;
    if (best == blocks_.end()) {
      // Grow: reuse a free block at the end of the buffer if there is one.
      if (!blocks_.empty()) {
        auto last = std::prev(blocks_.end());
        if (last->first + last->second == high_water_) {
          size_t offset = last->first;
          blocks_.erase(last);
          high_water_ = offset + bytes;
          return offset;
        }
      }
      size_t offset = high_water_;
      high_water_ += bytes;
      return offset;
    }
    size_t offset = best->first;
    size_t remaining = best->second - bytes;
    blocks_.erase(best);
    if (remaining) blocks_[offset + bytes] = remaining;
    return offset;
  }

  void release(size_t offset, size_t bytes) {
    bytes = round_up(std::max<size_t>(bytes, 1), alignment_);
    auto it = blocks_.emplace(offset, bytes).first;
    auto next = std::next(it);
    if (next != blocks_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      blocks_.erase(next);
    }
    if (it != blocks_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        blocks_.erase(it);
      }
    }
  }

  size_t high_water() const { return high_water_; }

 private:
  size_t alignment_;
  size_t high_water_ = 0;
  std::map<size_t, size_t> blocks_;  // offset -> size
};

}  // namespace

MemoryPlan plan_memory(const Graph& graph, size_t alignment, const std::function<bool(const Tensor*)>& include) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) throw Error("plan_memory: alignment must be a power of two");
  const auto& nodes = graph.nodes();
  const int n = static_cast<int>(nodes.size());
  constexpr int kForever = 1 << 30;

  std::unordered_map<const Tensor*, int> last_use;
  for (int j = 0; j < n; ++j) {
    Tensor* node = nodes[j];
    for (Tensor* s : node->src)
      if (s) last_use[owner_of(s)] = j;
    last_use[owner_of(node)] = std::max(last_use[owner_of(node)], j);
  }
  {
    std::unordered_map<const Tensor*, int> index;
    for (int j = 0; j < n; ++j) index[nodes[j]] = j;
    for (const auto& [t, reader] : graph.kept())
      if (auto it = index.find(reader); it != index.end())
        last_use[owner_of(t)] = std::max(last_use[owner_of(t)], it->second);
  }
  for (Tensor* node : nodes)
    if (node->flags & kFlagOutput) last_use[owner_of(node)] = kForever;
  if (n > 0) last_use[owner_of(nodes.back())] = kForever;

  MemoryPlan plan;
  FreeList free_list(alignment);
  std::unordered_map<const Tensor*, size_t> offset_of;
  auto planned = [&](const Tensor* t) { return needs_memory(t) && (!include || include(t)); };
  auto allocate = [&](Tensor* t) {
    size_t off = free_list.allocate(t->nbytes());
    offset_of[t] = off;
    plan.offsets.emplace_back(t, off);
  };

  // Inputs without data first: they are written before compute starts.
  for (Tensor* leaf : graph.leaves())
    if (planned(leaf)) allocate(leaf);

  // Release lists: tensors whose last reader is node j.
  std::vector<std::vector<Tensor*>> release_after(n);
  for (int j = 0; j < n; ++j) {
    Tensor* node = nodes[j];
    if (!planned(node) || op_is_view(node->op)) continue;
    int last = last_use.count(node) ? last_use[node] : j;
    if (last != kForever) release_after[last].push_back(node);
  }

  for (int j = 0; j < n; ++j) {
    Tensor* node = nodes[j];
    if (planned(node) && !op_is_view(node->op)) allocate(node);
    for (Tensor* t : release_after[j]) free_list.release(offset_of[t], t->nbytes());
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
