// Placeholder until the K-quant formats land: no functions yet.
#include "quant/registry.h"

namespace qlens::quant {
const Functions* kquant_functions(DType) { return nullptr; }
}  // namespace qlens::quant
