// Tile phases of the GPU A16WFP4 batched GEMM, shared by every compute atom
// (NVIDIA mma.sync, AMD MFMA, portable SIMT) and written as host+device
// functions of (thread index, shared memory) so that the SIMT kernel's logic
// also runs on the CPU under a small CTA emulator in unit tests.
//
// A CTA owns one (batch, BLOCK_M rows, BLOCK_N columns, K split) output tile.
// Per BLOCK_K step:
//   x tile   (BM, BK)  bf16 bits in smem, row stride LDX; rows >= M and
//                      columns >= K are zero (masked loads: never read past)
//   w tile   (BN, BK)  dequantized once per CTA step to bf16 in smem (row
//                      stride LDW), from packed bytes and E8M0 scales; scales
//                      are read only for groups < K/32 (guarded)
//   mxfp4-even mode: the x tile is re-quantized in place per 32-K group with
//                    the "even" rule (values stay exact in bf16)
// E2M1 x E8M0 values are exact in bf16 (at most 2 mantissa bits; bf16 has
// fp32's exponent range), so the bf16 operands carry the exact dequantized
// weights and the tensor cores accumulate in fp32.
#ifndef MXVAL_KERNELS_GPU_A16WFP4_TILE_H_
#define MXVAL_KERNELS_GPU_A16WFP4_TILE_H_

#include <stdint.h>

#include "kernels/mxfp4/mxfp4.h"

namespace mxval {
namespace gpu {

// Device-side problem description (plain data, passed by value to kernels).
struct GemmParams {
  int64_t B, M, N, K;
  int act_mxfp4;  // 0: bf16 activations, 1: mxfp4-even
  const uint16_t* x;
  int64_t x_sb, x_sm, x_sk;     // elements
  const uint8_t* wp;
  int64_t wp_sb, wp_sn;         // bytes
  const uint8_t* ws;
  int64_t ws_sb, ws_sn;         // bytes
  uint16_t* y;
  int64_t y_sb, y_sm;           // elements
  float* partial;               // (ksplit, B, M, N) fp32 when ksplit > 1
  int ksplit;
  int ktiles;                   // ceil(K / BK)
  int kgroups;                  // scale groups staged per CTA (tensor-core kernel)
};

struct TileCoord {
  int64_t b, m0, n0;
  int split;
  int kt0, kt1;  // k tiles [kt0, kt1) of this split
};

// Grid: x = N tile, y = M tile, z = batch * ksplit + split.
MXVAL_HD TileCoord CtaCoord(const GemmParams& p, int bx, int by, int bz, int bm, int bn) {
  TileCoord c;
  c.b = bz / p.ksplit;
  c.split = bz % p.ksplit;
  c.m0 = static_cast<int64_t>(by) * bm;
  c.n0 = static_cast<int64_t>(bx) * bn;
  c.kt0 = static_cast<int>(static_cast<int64_t>(c.split) * p.ktiles / p.ksplit);
  c.kt1 = static_cast<int>(static_cast<int64_t>(c.split + 1) * p.ktiles / p.ksplit);
  return c;
}

// x[b, m0:m0+BM, k0:k0+BK] -> xs (generic strides, element loads, masked).
template <int BM, int BK, int LDX>
MXVAL_HD void LoadXTileGeneric(const GemmParams& p, const TileCoord& c, int64_t k0, uint16_t* xs, int tid,
                               int nthreads) {
  for (int i = tid; i < BM * BK; i += nthreads) {
    const int r = i / BK, kk = i % BK;
    const int64_t m = c.m0 + r, k = k0 + kk;
    xs[r * LDX + kk] = (m < p.M && k < p.K) ? p.x[c.b * p.x_sb + m * p.x_sm + k * p.x_sk] : uint16_t{0};
  }
}

// The "even"-rule fake quantization of one 32-element group, in place:
// quantize to E2M1 codes with one E8M0 scale, then decode (exact in bf16).
MXVAL_HD void EvenRequant32(float* v) {
  uint8_t codes[32];
  const float s = mxfp4::DecodeE8M0(mxfp4::QuantizeBlock(v, 1, 32, mxfp4::ScaleRule::kEven, codes));
  for (int i = 0; i < 32; ++i) v[i] = mxfp4::DecodeE2M1(codes[i]) * s;
}

// In-place "even"-rule re-quantization of every 32-element group of xs.
// Zero (masked) groups stay zero; a group holding NaN/Inf becomes NaN.
template <int BM, int BK, int LDX>
MXVAL_HD void FakeQuantXTile(uint16_t* xs, int tid, int nthreads) {
  for (int gi = tid; gi < BM * (BK / 32); gi += nthreads) {
    uint16_t* g = xs + (gi / (BK / 32)) * LDX + (gi % (BK / 32)) * 32;
    float v[32];
    for (int i = 0; i < 32; ++i) v[i] = mxfp4::Bf16BitsToFloat(g[i]);
    EvenRequant32(v);
    for (int i = 0; i < 32; ++i) g[i] = mxfp4::FloatToBf16Bits(v[i]);
  }
}

// Byte -> two bf16 E2M1 magnitudes (low nibble in the low half), a mask of
// the nonzero halves and their sign bits. With it, dequantizing a byte with
// scale byte s in [2, 252] is
//   pair = mag + ((s * 0x00800080) & mask) - (0x3F803F80 & mask) | sign
// i.e. (s - 127) added to each nonzero half's exponent field, done as an add
// then a subtract so neither can carry or borrow across the halves (every
// intermediate stays within [0x0080, 0xBEC0]).
struct DequantLut {
  uint32_t mag[256], mask[256], sign[256];
};
MXVAL_HD uint32_t E2M1MagBf16(uint32_t idx) {
  return idx >= 2 ? (((126u + (idx >> 1)) << 7) | ((idx & 1u) << 6)) : (idx ? 0x3F00u : 0u);
}
MXVAL_HD void BuildDequantLut(DequantLut* lut, int tid, int nthreads) {
  for (int b = tid; b < 256; b += nthreads) {
    const uint32_t lo = b & 7, hi = (b >> 4) & 7;
    lut->mag[b] = E2M1MagBf16(lo) | (E2M1MagBf16(hi) << 16);
    lut->mask[b] = (lo ? 0xFFFFu : 0u) | (hi ? 0xFFFF0000u : 0u);
    lut->sign[b] = ((b & 8) ? 0x8000u : 0u) | ((b & 0x80) ? 0x80000000u : 0u);
  }
}

struct alignas(16) U32x4 {
  uint32_t v[4];
};

// Four packed bytes (8 E2M1 codes, low nibble first) with E8M0 scale byte
// `sbyte` -> 8 bf16 values (low k first) as four bf16x2 words. `lut` may be
// null (the arithmetic path without the table).
MXVAL_HD U32x4 DequantBytes8(uint32_t bytes, uint8_t sbyte, const DequantLut* lut) {
  U32x4 packed;
  if (sbyte >= 2 && sbyte <= 252 && lut != nullptr) {
    const uint32_t add = static_cast<uint32_t>(sbyte) * 0x00800080u;
    for (int j = 0; j < 4; ++j) {
      const uint32_t b8 = (bytes >> (8 * j)) & 0xFFu, m = lut->mask[b8];
      packed.v[j] = (lut->mag[b8] + (add & m) - (0x3F803F80u & m)) | lut->sign[b8];
    }
  } else if (sbyte >= 2 && sbyte <= 252) {
    // Same arithmetic without the table (SIMT kernel, CPU emulation):
    // every nonzero E2M1 magnitude times 2^(s-127) is a normal bf16, so
    // its bits are the magnitude's bf16 bits with (s-127) added to the
    // exponent field.
    const uint32_t ebias = static_cast<uint32_t>(static_cast<int32_t>(sbyte) - 127) << 7;
    for (int j = 0; j < 4; ++j) {
      uint32_t half[2];
      for (int h = 0; h < 2; ++h) {
        const uint32_t code = (bytes >> (8 * j + 4 * h)) & 0xFu, idx = code & 7u;
        half[h] = (idx ? E2M1MagBf16(idx) + ebias : 0u) | ((code & 8u) << 12);
      }
      packed.v[j] = (half[0] & 0xFFFFu) | (half[1] << 16);
    }
  } else {
    // Exact float path for extreme scales (subnormal or overflowing
    // products) and NaN scales.
    const float scale = mxfp4::DecodeE8M0(sbyte);
    for (int j = 0; j < 4; ++j) {
      const uint32_t lo = mxfp4::FloatToBf16Bits(mxfp4::DecodeE2M1((bytes >> (8 * j)) & 0xFu) * scale);
      const uint32_t hi = mxfp4::FloatToBf16Bits(mxfp4::DecodeE2M1((bytes >> (8 * j + 4)) & 0xFu) * scale);
      packed.v[j] = lo | (hi << 16);
    }
  }
  return packed;
}

// ---- Dequantization without a shared-memory table (the NVIDIA wgmma panel
// and decode kernel): byte permutes (PTX prmt) as 8-entry lookup tables held
// in registers, built once per 32-element scale group.
//
// For a scale byte s in [2, 252] every product E2M1 * 2^(s - 127) is a normal
// bf16, and for magnitude index i = code & 7 its bits are
//   i = 0: 0      i = 1: (s - 1) << 7      i >= 2: (i << 6) + ((s - 1) << 7)
// (i >= 2 is 1.m * 2^e with e1 e0 m = i; 0.5 has exponent field s - 1). The
// 8 low bytes and the 8 high bytes of those 16-bit patterns make two 8-byte
// tables; prmt looks up two codes per table per instruction, and the sign
// bits are moved into place with one more prmt. No shared memory (no bank
// conflicts, no dependent loads) and no floating-point multiply. (On
// 2026-12-01 a bf16 multiply of placed codes lost to these tables in the
// wgmma panel, its SASS showing unpack + FMUL + repack. The twenty-eighth
// session's E2M1x8ViaMul below compiles to one HMUL2 per word and replaced
// the tables in the register-sourced and decode kernels: BENCHMARKS.md,
// "Placement and multiply".) The wgmma panel keeps the tables. Other scale
// bytes take DequantBytes8's exact float path.

// PTX prmt.b32 in its default mode, for selectors computed at run time:
// result byte i is byte (sel >> 4i) & 7 of {a, b}, or, when bit 3 of that
// selector nibble is set, that byte's bit 7 copied into all eight bits.
// __byte_perm ignores bit 3, which ptxas pays for with a LOP3 that masks
// every run-time selector (two per output word in the lookups below,
// seen in the sm_90a SASS); the selectors fed to this one have bit 3 clear
// by construction, so both agree on them. The host version is the full
// PTX semantics, so the CPU self-test would catch a selector with bit 3 set.
MXVAL_HD uint32_t Prmt(uint32_t a, uint32_t b, uint32_t sel) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
#else
  const uint64_t ab = static_cast<uint64_t>(a) | (static_cast<uint64_t>(b) << 32);
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t n = (sel >> (4 * i)) & 0xFu;
    uint32_t byte = static_cast<uint32_t>((ab >> (8 * (n & 7u))) & 0xFFu);
    if (n & 8u) byte = (byte & 0x80u) != 0 ? 0xFFu : 0u;
    r |= byte << (8 * i);
  }
  return r;
#endif
}
// Byte selection of two 32-bit words (__byte_perm): result byte i
// is byte (sel >> 4i) & 7 of the 8 bytes {a, b} (a's bytes first).
MXVAL_HD uint32_t BytePerm(uint32_t a, uint32_t b, uint32_t sel) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, sel);
#else
  return Prmt(a, b, sel & 0x7777u);  // __byte_perm: bit 3 of each nibble ignored
#endif
}

// Low bytes {lo0, lo1} and high bytes {hi0, hi1} of the 8 magnitudes' bf16
// bits for one scale byte (entry 0, the zero code, is 0 in both).
struct E2M1Tables {
  uint32_t lo0, lo1, hi0, hi1;
};
MXVAL_HD bool E2M1TablesCover(uint32_t s) { return s >= 2u && s <= 252u; }
// Entry i's bits are c_i + (s - 1) << 7 with c_1 = 0 and c_i = i << 6
// (i >= 2). Writing s = 2u + p (p = s & 1), (s - 1) << 7 is
// (u - 1 + p) << 8 plus (1 - p) << 7: the low bytes depend on p alone, and
// every high byte is u plus a carry that depends on p and i alone. So the
// four table words are two constants picked by p and two byte-wise
// multiples of u plus a p-dependent constant: one shift, one AND and six
// integer multiply-adds, which the FMA pipe can take beside the lookups'
// prmt on the integer pipe (where ptxas put them was not checked in the
// SASS; the A/B measured the change neutral). (Built with prmt from the four
// 16-bit entries, the tables took one multiply-add, four adds or ANDs and
// four prmt, all but the multiply on the integer pipe that bounds the
// register-sourced kernel's prologue.) Exact for s in [2, 252]: no byte
// sum carries (u <= 126), checked for every scale byte and code by
// SimtEmulation.PrmtDequantIsExactForEveryByteAndScale and on the device.
MXVAL_HD E2M1Tables MakeE2M1Tables(uint32_t s) {
  const uint32_t u = s >> 1, p = s & 1u;
  return {0x40008000u + p * 0x807F8000u, 0x4000C080u + p * 0x807F7F80u, u * 0x01010100u + (p * 0x100u - 0x100u),
          u * 0x01010101u + (p * 0x101u + 0x01010000u)};
}
// Four packed bytes (8 codes, low nibble first) -> four bf16x2 words (word j:
// byte j's low nibble in the low half), scaled by the tables' scale.
// The codes' magnitudes (signs cleared, so no selector nibble has bit 3 set)
// are themselves prmt selectors: the low 16 bits of `idx` select the table
// bytes of codes (lo0, hi0, lo1, hi1), four lookups cover all 8 codes in
// low and high bytes, the sign bits are OR-ed into the high bytes (bit 7 of
// each byte of `sgn` is one code's sign), and one prmt per word interleaves
// low and high bytes into two bf16 halves: 15 integer instructions for the
// 8 codes. The first version (one selector per word, masked copies,
// __byte_perm) took about 40 and, at K = 512, kept the register-sourced
// kernel's prologue integer-issue bound (BENCHMARKS.md, "Prologue
// dequantization").
MXVAL_HD U32x4 E2M1x8ViaTables(uint32_t bytes, const E2M1Tables& t) {
  const uint32_t idx = bytes & 0x77777777u, idx_hi = idx >> 16, shifted = bytes << 4;
  const uint32_t lo01 = Prmt(t.lo0, t.lo1, idx), lo23 = Prmt(t.lo0, t.lo1, idx_hi);
  // Byte k of sgn01 / sgn23: bit 7 = the sign of code k in (lo0, hi0, lo1, hi1) / (lo2, hi2, lo3, hi3).
  const uint32_t sgn01 = BytePerm(shifted, bytes, 0x5140u), sgn23 = BytePerm(shifted, bytes, 0x7362u);
  const uint32_t hi01 = Prmt(t.hi0, t.hi1, idx) | (sgn01 & 0x80808080u);
  const uint32_t hi23 = Prmt(t.hi0, t.hi1, idx_hi) | (sgn23 & 0x80808080u);
  U32x4 r;
  r.v[0] = BytePerm(lo01, hi01, 0x5140u);
  r.v[1] = BytePerm(lo01, hi01, 0x7362u);
  r.v[2] = BytePerm(lo23, hi23, 0x5140u);
  r.v[3] = BytePerm(lo23, hi23, 0x7362u);
  return r;
}
// The conversion of the register-sourced and decode kernels (sm_90): bit
// placement and one bf16x2 multiply, so that part of the work runs on the
// FMA pipe beside the integer pipe that bounds the prmt tables.
// A code [s e1 e0 m] placed as bf16 bits s << 15 | e1 e0 m << 6 is the code's
// value times 2^-126 (e > 0: 2^(e - 127) * 1.m; e = 0: the subnormal
// 0.m * 2^-126), so one multiply by 2^(S - 1) gives code * 2^(S - 127)
// exactly, subnormal inputs and results included (bf16 arithmetic keeps
// subnormals on sm_90; the device self-test checks every scale byte and
// byte). 2^(S - 1) is a normal bf16 for S in [0, 128]; other scale bytes
// (2^2 and above, NaN) are left to the caller's exact path.
MXVAL_HD bool E2M1MulCover(uint32_t s) { return s <= 128u; }
// 2^(S - 1) in both bf16 halves.
MXVAL_HD uint32_t E2M1MulScale(uint32_t s) { return (s + 126u) * 0x00800080u; }
// The prmt selector for byte t of a word w and of rotr(w, 4): result byte 0
// is w's byte t (the low code's e1 e0 m in bits 2:0), byte 1 repeats bit 7
// of rotr's byte t - 1 (bit 3 of w's byte t: the low code's sign), byte 2
// is rotr's byte t (the high code's e1 e0 m in bits 2:0), byte 3 repeats
// bit 7 of w's byte t (the high code's sign). Sign-copy selector nibbles
// (bit 3 set) are PTX prmt's default mode: Prmt, never __byte_perm.
MXVAL_HD uint32_t E2M1MulSelector(uint32_t t) {
  return t | (0xCu + ((t + 3u) & 3u)) << 4 | (4u + t) << 8 | (8u + t) << 12;
}
// Round-to-nearest bf16x2 product (mul.rn.bf16x2 on sm_90). Elsewhere it
// multiplies in float and truncates: exact wherever the product is
// a bf16, which is every use here (one factor a power of two, no overflow).
MXVAL_HD uint32_t MulBf16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t r;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
#else
  uint32_t r = 0;
  for (int h = 0; h < 2; ++h) {
    const uint32_t ab = ((a >> (16 * h)) & 0xFFFFu) << 16, bb = ((b >> (16 * h)) & 0xFFFFu) << 16;
    float fa, fb;
    __builtin_memcpy(&fa, &ab, 4);
    __builtin_memcpy(&fb, &bb, 4);
    const float pr = fa * fb;
    uint32_t pb;
    __builtin_memcpy(&pb, &pr, 4);
    r |= (pb >> 16) << (16 * h);
  }
  return r;
#endif
}
// Four packed bytes (8 codes) -> four bf16x2 words as E2M1x8ViaTables (word
// j: byte j), for a covered scale byte, with mult = E2M1MulScale(S): one
// funnel shift for the four words, then per word one prmt, a shift by 6,
// one AND and the multiply (on the FMA pipe): 13 integer instructions for 8
// codes, 9 if ptxas puts the shifts on the FMA pipe as IMAD.SHL (not read in
// the SASS), against 15 in E2M1x8ViaTables, and no tables to build per scale.
MXVAL_HD U32x4 E2M1x8ViaMul(uint32_t bytes, uint32_t mult) {
  const uint32_t rot = (bytes >> 4) | (bytes << 28);
  U32x4 r;
  for (uint32_t j = 0; j < 4; ++j)  // constant selectors once unrolled (forceinline, -O3)
    r.v[j] = MulBf16x2((Prmt(bytes, rot, E2M1MulSelector(j)) * 64u) & 0x81C081C0u, mult);
  return r;
}

// DequantBytes8 without the shared-memory table, same results bit for bit.
MXVAL_HD U32x4 DequantBytes8Prmt(uint32_t bytes, uint32_t sbyte) {
  if (E2M1TablesCover(sbyte)) return E2M1x8ViaTables(bytes, MakeE2M1Tables(sbyte));
  return DequantBytes8(bytes, static_cast<uint8_t>(sbyte), nullptr);
}


// The self-test's four words for scale byte s and byte b: DequantBytes8Prmt
// of bytes (b, b+1, b+2, b+3) (mod 256). Run on the device by
// mxval_dequant_selftest_mode(0, ...) and on the CPU by the emulation test;
// dequant_selftest_check.h checks them against the format library.
// The self-tests' packed word: bytes (b, b+1, b+2, b+3) (mod 256).
MXVAL_HD uint32_t SelfTestBytes(uint32_t b) {
  return b | ((b + 1) & 0xFFu) << 8 | ((b + 2) & 0xFFu) << 16 | ((b + 3) & 0xFFu) << 24;
}
MXVAL_HD void DequantSelfTestWords(uint32_t s, uint32_t b, uint32_t* out) {
  const U32x4 r = DequantBytes8Prmt(SelfTestBytes(b), s);
  for (int j = 0; j < 4; ++j) out[j] = r.v[j];
}
// The same four words through E2M1x8ViaMul where it covers s, else
// DequantBytes8Prmt (as the kernels' exact paths do); run on the device by
// mxval_dequant_selftest_mode(1, ...).
MXVAL_HD void DequantSelfTestWordsMul(uint32_t s, uint32_t b, uint32_t* out) {
  if (!E2M1MulCover(s)) {
    DequantSelfTestWords(s, b, out);
    return;
  }
  const U32x4 r = E2M1x8ViaMul(SelfTestBytes(b), E2M1MulScale(s));
  for (int j = 0; j < 4; ++j) out[j] = r.v[j];
}

// Dequantizes w[b, n0:n0+BN, k0:k0+BK] into wd (bf16, row stride LDW), 8
// elements (4 packed bytes, one scale) per work item. `staged` is the packed
// tile already in smem as (BN, BK/2) bytes, or null to read global memory.
// `slab` holds the CTA's scale bytes in smem as (BN, slab_ld) starting at
// group slab_g0, or null to read them from global memory.
template <int BN, int BK>
MXVAL_HD void DequantWTile(const GemmParams& p, const TileCoord& c, int64_t k0, const uint8_t* staged, uint16_t* wd,
                           int ldw, int tid, int nthreads, const uint8_t* slab = nullptr, int slab_ld = 0,
                           int64_t slab_g0 = 0, const DequantLut* lut = nullptr) {
  for (int i = tid; i < BN * (BK / 8); i += nthreads) {
    const int r = i / (BK / 8), q = i % (BK / 8);
    const int64_t n = c.n0 + r, k = k0 + q * 8;
    // Past N or K the tile's masked tail is zero: code 0 with scale 2^0.
    uint32_t bytes = 0;
    uint8_t sbyte = 127;
    if (n < p.N && k < p.K) {
      const uint8_t* src = staged != nullptr ? staged + r * (BK / 2) + q * 4 : p.wp + c.b * p.wp_sb + n * p.wp_sn + k / 2;
      bytes = static_cast<uint32_t>(src[0]) | (static_cast<uint32_t>(src[1]) << 8) |
              (static_cast<uint32_t>(src[2]) << 16) | (static_cast<uint32_t>(src[3]) << 24);
      sbyte = slab != nullptr ? slab[r * slab_ld + (k / 32 - slab_g0)]
                              : p.ws[c.b * p.ws_sb + n * p.ws_sn + k / 32];  // k < K: the group is < K/32
    }
    const U32x4 packed = DequantBytes8(bytes, sbyte, lut);
    *reinterpret_cast<U32x4*>(wd + r * ldw + q * 8) = packed;  // one 16-byte store

  }
}

// Same with the row stride of wd as a template parameter.
template <int BN, int BK, int LDW>
MXVAL_HD void DequantWTile(const GemmParams& p, const TileCoord& c, int64_t k0, const uint8_t* staged, uint16_t* wd,
                           int tid, int nthreads, const uint8_t* slab = nullptr, int slab_ld = 0,
                           int64_t slab_g0 = 0, const DequantLut* lut = nullptr) {
  DequantWTile<BN, BK>(p, c, k0, staged, wd, LDW, tid, nthreads, slab, slab_ld, slab_g0, lut);
}

// Stores one output element: bf16 into y, or fp32 into the split-K partial.
MXVAL_HD void StoreOutput(const GemmParams& p, const TileCoord& c, int64_t m, int64_t n, float v) {
  if (m >= p.M || n >= p.N) return;
  if (p.ksplit == 1) {
    p.y[c.b * p.y_sb + m * p.y_sm + n] = mxfp4::FloatToBf16Bits(v);
  } else {
    p.partial[((static_cast<int64_t>(c.split) * p.B + c.b) * p.M + m) * p.N + n] = v;
  }
}

// ---- Portable SIMT atom: each thread owns a TM x TN micro-tile. ----------
// Threads form (BM/TM) x (BN/TN); a thread's columns are strided by BN/TN so
// neighbouring threads read neighbouring smem rows of wd.
template <int BM, int BN, int BK, int LDX, int LDW, int TM, int TN>
struct SimtAtom {
  static constexpr int kThreads = (BM / TM) * (BN / TN);
  MXVAL_HD static void Mma(const uint16_t* xs, const uint16_t* wd, float* acc, int tid) {
    const int tr = tid / (BN / TN), tc = tid % (BN / TN);
    for (int kk = 0; kk < BK; ++kk) {
      float a[TM], b[TN];
      for (int i = 0; i < TM; ++i) a[i] = mxfp4::Bf16BitsToFloat(xs[(tr * TM + i) * LDX + kk]);
      for (int j = 0; j < TN; ++j) b[j] = mxfp4::Bf16BitsToFloat(wd[(tc + j * (BN / TN)) * LDW + kk]);
      for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j) acc[i * TN + j] += a[i] * b[j];
    }
  }
  MXVAL_HD static void Store(const GemmParams& p, const TileCoord& c, const float* acc, int tid) {
    const int tr = tid / (BN / TN), tc = tid % (BN / TN);
    for (int i = 0; i < TM; ++i)
      for (int j = 0; j < TN; ++j) StoreOutput(p, c, c.m0 + tr * TM + i, c.n0 + tc + j * (BN / TN), acc[i * TN + j]);
  }
};

// The SIMT fallback kernel's tile configuration (works for any strides).
inline constexpr int kSimtBM = 32, kSimtBN = 64, kSimtBK = 32, kSimtTM = 4, kSimtTN = 4;
inline constexpr int kSimtLDX = kSimtBK + 8, kSimtLDW = kSimtBK + 8;
using SimtDefault = SimtAtom<kSimtBM, kSimtBN, kSimtBK, kSimtLDX, kSimtLDW, kSimtTM, kSimtTN>;

// One k step of the SIMT CTA, phase by phase (barriers between phases).
MXVAL_HD void SimtLoadPhase(const GemmParams& p, const TileCoord& c, int kt, uint16_t* xs, uint16_t* wd, int tid) {
  const int64_t k0 = static_cast<int64_t>(kt) * kSimtBK;
  LoadXTileGeneric<kSimtBM, kSimtBK, kSimtLDX>(p, c, k0, xs, tid, SimtDefault::kThreads);
  DequantWTile<kSimtBN, kSimtBK, kSimtLDW>(p, c, k0, nullptr, wd, tid, SimtDefault::kThreads);
}

}  // namespace gpu
}  // namespace mxval

#endif  // MXVAL_KERNELS_GPU_A16WFP4_TILE_H_
