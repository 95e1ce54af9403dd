// GatedDeltaNet's CPU kernel (delta_net.cpp): its scratch, and which of its
// two forms (recurrent, chunked) nodes take.
#pragma once

#include <cstdint>

#include "backend/cpu/ops.h"

namespace qlens::cpu {

// Bytes of private scratch per thread (the larger form's).
size_t delta_net_scratch(const Tensor& node, int nth, const KernelOptions& options);

// The form nodes take: the one measured faster for their shape, or one
// forced (tests of each form, benchmarks comparing them).
enum class DeltaNetForm { Measured, Recurrent, Chunked };
// Sets it and returns the previous setting.
DeltaNetForm delta_net_set_form(DeltaNetForm form);

}  // namespace qlens::cpu
