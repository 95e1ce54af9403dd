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

// LogHistogram of qlens/tap.h (the per-row error of ErrorStats): LOG_BUCKETS
// buckets, 8 per octave from 2^-40 to 2^24; bucket 0 holds zero, values below
// 2^-40 and negatives, the last one values from 2^24 up and NaN.
const uint LOG_BUCKETS = 514u;  // LogHistogram::kBuckets

// LogHistogram::bucket(v): the binary exponent from the bits, then the eighth
// of an octave by comparing the mantissa in [1, 2) with 2^(k/8) (the host's
// doubles; in float the smallest float not below each, so that a float
// mantissa compares as it would against the double).
uint log_bucket(ACC v) {
  if (isnan(v)) return LOG_BUCKETS - 1u;
  if (!(v > ACC(0))) return 0u;
#if defined(ACC_F64)
  const uvec2 bits = unpackDouble2x32(v);
  const int e = int((bits.y >> 20) & 0x7ffu) - 1023;  // subnormals: -1023
  const double m = packDouble2x32(uvec2(bits.x, (bits.y & 0x000fffffu) | 0x3ff00000u));
  const double steps[8] = double[8](1.0lf, 1.0905077326652577lf, 1.1892071150027210lf, 1.2968395546510096lf,
                                    1.4142135623730951lf, 1.5422108254079407lf, 1.6817928305074290lf,
                                    1.8340080864093424lf);
#else
  const uint bits = floatBitsToUint(v);
  const int e = int((bits >> 23) & 0xffu) - 127;  // subnormals: -127
  const float m = uintBitsToFloat((bits & 0x007fffffu) | 0x3f800000u);
  const float steps[8] = float[8](1.0, 1.0905077, 1.1892072, 1.2968396, 1.4142137, 1.5422109, 1.6817929, 1.8340081);
#endif
  if (e < -40) return 0u;                  // below 2^-40 (kMinExp)
  if (e >= 24) return LOG_BUCKETS - 1u;    // from 2^24 (kMaxExp) up, Inf
  uint sub = 0u;
  while (sub + 1u < 8u && m >= steps[sub + 1u]) ++sub;
  return min(1u + uint(e + 40) * 8u + sub, LOG_BUCKETS - 2u);
}
