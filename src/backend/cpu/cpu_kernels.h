// The CPU backend's kernel table (cpu_kernels.cpp): one row per op.
#pragma once

#include <string>

#include "backend/cpu/ops.h"

namespace qlens::cpu {

using KernelFn = void (*)(const Tensor& node, const KernelCtx& c);
using ScratchFn = size_t (*)(const Tensor& node, int nth, const KernelOptions& options);

struct Kernel {
  Op op;
  KernelFn run;  // null: the CPU declines the op
  // Why the kernel cannot take a node that keeps the op's rules, or "".
  std::string (*limits)(const Tensor& node);
  ScratchFn scratch;         // bytes of private scratch per thread
  ScratchFn shared_scratch;  // bytes shared by the node's threads
  Split split = Split::Any;  // which thread writes which elements (ops.h)
};

const Kernel& kernel_of(Op op);

// Why the CPU cannot compute the node ("" when it can; views need nothing):
// no kernel, the op's rules (op table), or the kernel's limits.
std::string cannot_compute(const Tensor& node);

}  // namespace qlens::cpu
