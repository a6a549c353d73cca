// MXFP4 (OCP Microscaling, E2M1 elements + one E8M0 scale per 32 elements).
//
// Header-only and usable from host C++, CUDA and HIP device code. This file is
// the *only* code shared between the FP32 reference and the kernels under test
// (the decode table); everything else in reference/ is written independently.
//
// Layout conventions (AITER / SGLang "A16WFP4"):
//   packed weights  uint8 [B, N, K/2]   element 2i in the low nibble of byte i,
//                                        element 2i+1 in the high nibble (along K)
//   scales          uint8 [B, N, K/32]  one E8M0 byte per 32 consecutive K
//
// E2M1 code c (4 bits): sign = c>>3, magnitude index = c&7 ->
//   {0, 0.5, 1, 1.5, 2, 3, 4, 6}. Code 8 is -0.
// E8M0 byte s: 2^(s-127) for s in [0, 254]; s = 0 is 2^-127 (an fp32
//   subnormal, exactly representable); s = 0xFF is NaN.
#ifndef MXVAL_KERNELS_MXFP4_MXFP4_H_
#define MXVAL_KERNELS_MXFP4_MXFP4_H_

#include <stdint.h>
#include <string.h>

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>  // __host__, __device__, __forceinline__
#define MXVAL_HD __host__ __device__ __forceinline__
#elif defined(__CUDACC__)
#define MXVAL_HD __host__ __device__ __forceinline__
#else
#define MXVAL_HD inline
#endif

namespace mxval {
namespace mxfp4 {

inline constexpr int kGroupSize = 32;    // elements per E8M0 scale
inline constexpr float kE2M1Max = 6.0f;  // largest E2M1 magnitude
inline constexpr int kE2M1Emax = 2;      // exponent of the largest E2M1 binade
inline constexpr uint8_t kScaleNaN = 0xFF;
inline constexpr int kScaleBias = 127;

MXVAL_HD uint32_t FloatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}
MXVAL_HD float BitsToFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

// Magnitudes of E2M1 codes 0..7, in fp32.
MXVAL_HD float E2M1MagnitudeOf(uint32_t index) {
  // Branch-free: 0, 0.5, 1, 1.5, 2, 3, 4, 6 as a packed lookup of half-units.
  // half-units: 0,1,2,3,4,6,8,12 -> nibbles of 0xC8643210.
  return 0.5f * static_cast<float>((0xC8643210u >> (4u * (index & 7u))) & 0xFu);
}

// Decodes one E2M1 code (low 4 bits of `code`). Code 8 decodes to -0.0f.
MXVAL_HD float DecodeE2M1(uint32_t code) {
  const float mag = E2M1MagnitudeOf(code & 7u);
  return (code & 8u) ? -mag : mag;
}

// Decodes one E8M0 scale byte: 2^(s-127); 0xFF -> NaN; 0 -> 2^-127.
MXVAL_HD float DecodeE8M0(uint8_t s) {
  if (s == kScaleNaN) return BitsToFloat(0x7FC00000u);
  if (s == 0) return BitsToFloat(0x00400000u);  // 2^-127, subnormal
  return BitsToFloat(static_cast<uint32_t>(s) << 23);
}

// Element k of a packed row (low nibble = even k, high nibble = odd k).
MXVAL_HD uint32_t UnpackCode(const uint8_t* packed_row, int64_t k) {
  const uint8_t byte = packed_row[k >> 1];
  return (k & 1) ? (byte >> 4) : (byte & 0xFu);
}

// Rounds a finite or infinite fp32 value to the nearest E2M1 code, ties to
// even code, saturating at +-6 (satfinite). NaN maps to +0 (callers mark the
// block's scale NaN). The sign of zero is kept: -0.1 encodes as code 8.
MXVAL_HD uint32_t EncodeE2M1(float v) {
  const uint32_t sign = (FloatBits(v) >> 31) ? 8u : 0u;
  float a = v < 0 ? -v : v;
  if (!(a == a)) return 0u;  // NaN
  uint32_t idx;
  // Midpoints between neighbours; at a tie pick the even code index.
  // 0 |0.25| 0.5 |0.75| 1 |1.25| 1.5 |1.75| 2 |2.5| 3 |3.5| 4 |5| 6
  if (a <= 0.25f)      idx = 0;               // tie 0.25 -> 0 (even)
  else if (a < 0.75f)  idx = 1;               // tie 0.75 -> 1.0 (even)
  else if (a <= 1.25f) idx = 2;               // tie 1.25 -> 1.0 (even)
  else if (a < 1.75f)  idx = 3;               // tie 1.75 -> 2.0 (even)
  else if (a <= 2.5f)  idx = 4;               // tie 2.5 -> 2.0 (even)
  else if (a < 3.5f)   idx = 5;               // tie 3.5 -> 4.0 (even)
  else if (a <= 5.0f)  idx = 6;               // tie 5 -> 4.0 (even)
  else                 idx = 7;               // saturate at 6
  return sign | idx;
}

// How the shared E8M0 exponent of a block is chosen from its amax.
enum class ScaleRule : int {
  // OCP MX v1.0 section 6.3: e = floor(log2(amax)) - emax_elem (2).
  kFloor = 0,
  // AITER / torchao "even": amax bits += 0x200000, &= 0xFF800000 (rounds the
  // mantissa to the nearest 1/4 before taking the exponent), then floor - 2.
  kEven = 1,
  // Round the scale up: e = ceil(log2(amax / 6)) (as NVIDIA's
  // cvt.rp.satfinite.ue8m0x2.f32 does), so no element saturates.
  kRceil = 2,
};

// floor(log2(a)) for finite a > 0, exact for subnormals too.
MXVAL_HD int FloorLog2(float a) {
  const uint32_t bits = FloatBits(a) & 0x7FFFFFFFu;
  const int exp_field = static_cast<int>(bits >> 23);
  if (exp_field != 0) return exp_field - 127;
  // Subnormal: value = mant * 2^-149. floor(log2) = msb(mant) - 149.
  uint32_t mant = bits & 0x7FFFFFu;
  int msb = -1;
  while (mant) {
    ++msb;
    mant >>= 1;
  }
  return msb - 149;
}

MXVAL_HD int ClampExp(int e) { return e < -127 ? -127 : (e > 127 ? 127 : e); }

// Chooses the scale byte for a block with absolute maximum `amax` (>= 0).
// amax NaN or Inf -> 0xFF. amax == 0 -> byte 0 (the caller zeroes elements).
MXVAL_HD uint8_t ScaleByteForAmax(float amax, ScaleRule rule) {
  if (!(amax == amax) || amax > 3.4028235e38f) return kScaleNaN;
  if (amax == 0.0f) return 0;
  int e;
  switch (rule) {
    case ScaleRule::kFloor:
      e = FloorLog2(amax) - kE2M1Emax;
      break;
    case ScaleRule::kEven: {
      // Same arithmetic as AITER's torch code: the masked value can be 0 (a
      // subnormal amax without carry: log2 = -inf, clamps to -127) or +inf
      // (carry out of the top binade: log2 = inf, clamps to 127).
      const uint32_t rb = (FloatBits(amax) + 0x200000u) & 0xFF800000u;
      if (rb == 0) e = -127;
      else if (rb >= 0x7F800000u) e = 127;
      else e = FloorLog2(BitsToFloat(rb)) - kE2M1Emax;
      break;
    }
    case ScaleRule::kRceil:
    default: {
      // ceil(log2(amax / 6)). With amax = m * 2^f, m in [1, 2):
      // 6 * 2^(f-2) = 1.5 * 2^f, so e = f - 2, plus one when m > 1.5.
      // Subnormal amax always clamps to -127, so only the normal case counts.
      const uint32_t bits = FloatBits(amax);
      e = FloorLog2(amax) - kE2M1Emax + (((bits >> 23) != 0 && (bits & 0x7FFFFFu) > 0x400000u) ? 1 : 0);
      break;
    }
  }
  return static_cast<uint8_t>(ClampExp(e) + kScaleBias);
}

// Quantizes one block of `n` (<= 32) fp32 values read with `stride` into E2M1
// codes (one code per byte in `codes`) and returns the scale byte.
// NaN/Inf anywhere in the block -> scale 0xFF and codes 0.
MXVAL_HD uint8_t QuantizeBlock(const float* x, int64_t stride, int n, ScaleRule rule,
                               uint8_t* codes) {
  float amax = 0.0f;
  bool nonfinite = false;
  for (int i = 0; i < n; ++i) {
    const float v = x[i * stride];
    const float a = v < 0 ? -v : v;
    if (!(a <= 3.4028235e38f)) nonfinite = true;
    else if (a > amax) amax = a;
  }
  if (nonfinite) {
    for (int i = 0; i < n; ++i) codes[i] = 0;
    return kScaleNaN;
  }
  const uint8_t s = ScaleByteForAmax(amax, rule);
  if (amax == 0.0f) {
    for (int i = 0; i < n; ++i) codes[i] = 0;
    return 0;
  }
  // Multiply by 2^-(s-127). For s = 0 that is 2^127, for s = 254 it is 2^-127:
  // both exact fp32 powers of two, so the product is exact unless it
  // underflows (in which case it rounds toward an E2M1 zero anyway).
  const int e = static_cast<int>(s) - kScaleBias;
  const float inv = (e == 127) ? BitsToFloat(0x00400000u) : BitsToFloat(static_cast<uint32_t>(127 - e) << 23);
  for (int i = 0; i < n; ++i) codes[i] = static_cast<uint8_t>(EncodeE2M1(x[i * stride] * inv));
  return s;
}

// fp32 -> bf16 bits, round to nearest even; NaN stays NaN (quiet).
MXVAL_HD uint16_t FloatToBf16Bits(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  const uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}
MXVAL_HD float Bf16BitsToFloat(uint16_t h) { return BitsToFloat(static_cast<uint32_t>(h) << 16); }
MXVAL_HD float RoundToBf16(float f) { return Bf16BitsToFloat(FloatToBf16Bits(f)); }

}  // namespace mxfp4
}  // namespace mxval

#endif  // MXVAL_KERNELS_MXFP4_MXFP4_H_
