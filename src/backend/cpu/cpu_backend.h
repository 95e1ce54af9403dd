// The CPU backend with a chosen instruction set (internal: tests compare the
// scalar and SIMD kernels through it; benchmarks pick one).
#pragma once

#include <memory>

#include "backend/cpu/isa.h"
#include "qlens/backend.h"

namespace qlens::cpu {

// With exactly `isa` (which must be supported: isa_supported) and the rest
// of `options` (options.isa is not read); n_threads <= 0: one per core.
std::unique_ptr<Backend> make_cpu_backend(int n_threads, Isa isa, const CpuOptions& options = {});
// What a CPU backend's kernels run with (its CpuOptions resolved); null for
// any other backend. For tests and benchmarks that check what reached it.
const KernelOptions* kernel_options_of(const Backend& backend);

}  // namespace qlens::cpu
