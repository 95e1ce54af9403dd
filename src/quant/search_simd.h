// The quantizers' searches try many candidate scales per block; their inner
// loops (codes for one scale and the least-squares sums) have AVX2 versions
// beside the plain ones. Both sum in the same interleaved lanes with the same
// operations (no fused multiply-add), so they give the same bits: a quantized
// file does not depend on the CPU. The choice is the CPU's (AVX2 or not),
// made without the environment; tests compare both through set_search_simd.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#define QLENS_SEARCH_X86 1
#endif

namespace qlens::quant {

// The AVX2 loops are used: the CPU has AVX2 and set_search_simd has not
// turned them off.
bool use_search_simd();
// Allows or forbids the AVX2 loops; returns the previous setting (tests
// compare both).
bool set_search_simd(bool allowed);

}  // namespace qlens::quant
