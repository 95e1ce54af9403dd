// Placeholder until the legacy formats land: no functions yet.
#include "quant/registry.h"

namespace qlens::quant {
const Functions* legacy_functions(DType) { return nullptr; }
}  // namespace qlens::quant
