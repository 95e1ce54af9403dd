// Backends compute graphs. This issue has the CPU backend and the plain
// reference backend that every kernel is tested against; the scheduler and
// device back-ends of later issues extend this interface.
#pragma once

#include <memory>
#include <string>

#include "qlens/tensor.h"

namespace qlens {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Computes every node of the graph in order. All tensors must have data
  // (leaves set by the caller, intermediates by apply_memory_plan).
  virtual void compute(const Graph& graph) = 0;
  virtual int n_threads() const { return 1; }
};

// n_threads <= 0: one thread per available core.
std::unique_ptr<Backend> make_cpu_backend(int n_threads = 0);
// Single-threaded, scalar, obviously-correct kernels: the test oracle.
std::unique_ptr<Backend> make_reference_backend();

// Memory for a graph's intermediate results. Tensors whose lifetimes do not
// overlap share bytes; outputs (kFlagOutput) and inputs are never reused.
struct MemoryPlan {
  size_t size = 0;  // bytes needed
  std::vector<std::pair<Tensor*, size_t>> offsets;
};
MemoryPlan plan_memory(const Graph& graph, size_t alignment = 64);
// Sets the data pointers of planned tensors into `base` (size >= plan.size,
// aligned) and of all views from their sources.
void apply_memory_plan(const Graph& graph, const MemoryPlan& plan, void* base);

}  // namespace qlens
