// The scheduler runs graphs on a backend and owns the memory for their
// intermediate results. Today it drives one backend; the multi-backend split
// and the observe callback of later issues hook in here, so that the model
// layer above never changes.
#pragma once

#include <cstddef>
#include <memory>

#include "qlens/backend.h"

namespace qlens {

class Scheduler {
 public:
  explicit Scheduler(Backend& backend) : backend_(backend) {}

  // Plans memory for the graph's intermediates and inputs and binds it; the
  // caller then writes the inputs. The buffer grows as needed and is reused.
  void allocate(const Graph& graph);
  // Computes an allocated graph.
  void compute(const Graph& graph);

  Backend& backend() const { return backend_; }
  size_t buffer_bytes() const { return capacity_; }

 private:
  struct AlignedFree {
    void operator()(void* p) const;
  };
  Backend& backend_;
  std::unique_ptr<void, AlignedFree> buffer_;
  size_t capacity_ = 0;
};

}  // namespace qlens
