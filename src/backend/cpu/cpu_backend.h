// The CPU backend with a chosen instruction set (internal: tests compare the
// scalar and SIMD kernels through it; benchmarks pick one).
#pragma once

#include <memory>

#include "backend/cpu/isa.h"
#include "qlens/backend.h"

namespace qlens::cpu {

// isa must be supported (isa_supported); n_threads <= 0: one per core.
std::unique_ptr<Backend> make_cpu_backend(int n_threads, Isa isa);

}  // namespace qlens::cpu
