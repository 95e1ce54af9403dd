#include "qlens/sched.h"

#include <cstdlib>
#include <new>

namespace qlens {

namespace {
constexpr size_t kBufferAlignment = 64;
}

void Scheduler::AlignedFree::operator()(void* p) const { std::free(p); }

void Scheduler::allocate(const Graph& graph) {
  MemoryPlan plan = plan_memory(graph, kBufferAlignment);
  if (plan.size > capacity_) {
    size_t bytes = (plan.size + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
    void* p = std::aligned_alloc(kBufferAlignment, bytes);
    if (!p) throw std::bad_alloc();
    buffer_.reset(p);
    capacity_ = bytes;
  }
  apply_memory_plan(graph, plan, buffer_.get());
}

void Scheduler::compute(const Graph& graph) { backend_.compute(graph); }

}  // namespace qlens
