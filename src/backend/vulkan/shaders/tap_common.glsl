// The accumulator type of the taps: double on devices with shaderFloat64
// (variant ACC_F64), else float.
#if defined(ACC_F64)
#define ACC double
#else
#define ACC float
#endif

// Stats and ErrorStats accumulate into TAP_SLOTS slots, one per workgroup
// of a fixed-size dispatch (= kTapSlots on the host): no two workgroups write
// the same slot, and dispatches are ordered by barriers, so no atomics are
// needed; the host merges the slots when the tap is read.
const uint TAP_SLOTS = 64u;
const uint TAP_WG = 256u;
