// gfx950's native MXFP4 MFMA for the mxfp4-even mode ("a16wfp4_mfma_scale"):
// v_mfma_scale_f32_16x16x128_f8f6f4 with both operands E2M1 (format code 4
// for A and B) and one E8M0 scale per lane and operand.
//
// UNTESTED ON HARDWARE. No gfx950 GPU is reachable from here and Debian's
// hipcc 5.2.3 does not target gfx950, so the one line that issues the
// instruction (MfmaScaleFp4 in a16wfp4_gpu.cu, under __gfx950__) has never
// been compiled. Everything around it is host+device code in this header:
// the lane layout, the in-register "even" re-quantization of x, the weight
// and scale loads with their masks, and the output mapping. The CPU test
// (mfma_scale_fp4_test.cc) runs those functions for all 64 lanes of every
// wave and replaces the instruction by MfmaScaleFp4Model below, which is the
// instruction's arithmetic as we read the CDNA4 ISA; the results are checked
// against the FP32 reference. What the test cannot check is whether the
// hardware agrees with that reading.
//
// The layout (one wave of 64 lanes, one 16 x 16 fp32 tile, 128 K per
// instruction), as AMD's and LLVM's own uses of the builtin have it:
//   A, 16 x 128 (rows = M): lane l holds row l % 16, K elements
//      32 (l / 16) .. 32 (l / 16) + 31 as 32 E2M1 codes in dwords 0-3 of its
//      8-dword operand (element 2j in the low nibble of byte j, the packing of
//      the weights in memory; dwords 4-7 unused for FP4), and the E8M0 scale
//      of exactly those 32 elements in byte 0 of its scale register (opsel 0).
//   B, 128 x 16 (columns = N): the same with column l % 16.
//   D, 16 x 16 fp32: lane l, register i holds row 4 (l / 16) + i, column
//      l % 16 (the layout of every 16 x 16 MFMA).
// So a lane's 32 activations are one scale group of one row: the lane
// re-quantizes them by itself, with no data from other lanes.
#ifndef MXVAL_KERNELS_GPU_MFMA_SCALE_FP4_H_
#define MXVAL_KERNELS_GPU_MFMA_SCALE_FP4_H_

#include <stdint.h>

#include "kernels/gpu/a16wfp4_tile.h"

namespace mxval {
namespace gpu {

constexpr int kMfmaScaleK = 128;       // K per instruction
constexpr uint32_t kE8M0One = 127;     // scale byte of 2^0

// One lane's operand: 32 E2M1 codes and their E8M0 scale byte.
struct Fp4Lane {
  uint32_t codes[4];  // element 2j in the low nibble of byte j
  uint32_t scale;     // E8M0 byte (0xFF = NaN)
};

MXVAL_HD int MfmaScaleRow(int lane) { return lane & 15; }            // A row / B column of the lane
MXVAL_HD int MfmaScaleKOffset(int lane) { return 32 * (lane >> 4); }  // first K element of the lane
MXVAL_HD int MfmaScaleOutRow(int lane, int i) { return 4 * (lane >> 4) + i; }
MXVAL_HD int MfmaScaleOutCol(int lane) { return lane & 15; }

// The lane's A operand: x[b, m, k .. k + 31] re-quantized with the "even"
// rule (mxfp4::QuantizeBlock, the reference's mxfp4-even activations bit for
// bit; a group holding NaN or Inf gets scale 0xFF). Rows past M and groups
// past K (the masked part of a ragged last K step; K is a multiple of 32) are
// zero codes with scale 2^0 and read nothing.
MXVAL_HD Fp4Lane XLaneEven(const GemmParams& p, int64_t b, int64_t m, int64_t k) {
  Fp4Lane r = {{0u, 0u, 0u, 0u}, kE8M0One};
  if (m >= p.M || k >= p.K) return r;
  const uint16_t* src = p.x + b * p.x_sb + m * p.x_sm + k * p.x_sk;
  float v[32];
  for (int i = 0; i < 32; ++i) v[i] = mxfp4::Bf16BitsToFloat(src[i * p.x_sk]);
  uint8_t codes[32];
  r.scale = mxfp4::QuantizeBlock(v, 1, 32, mxfp4::ScaleRule::kEven, codes);
  for (int j = 0; j < 4; ++j) {
    uint32_t w = 0;
    for (int e = 0; e < 8; ++e) w |= static_cast<uint32_t>(codes[8 * j + e]) << (4 * e);
    r.codes[j] = w;
  }
  return r;
}

// The lane's B operand: the 16 packed bytes of w[b, n, k .. k + 31] and
// their scale byte. Rows past N and groups past K are zero codes with scale
// 2^0: scale bytes at or past K / 32 are never read (they may be anything,
// e.g. the 0xFF guard the validation cases put there).
MXVAL_HD Fp4Lane WLane(const GemmParams& p, int64_t b, int64_t n, int64_t k) {
  Fp4Lane r = {{0u, 0u, 0u, 0u}, kE8M0One};
  if (n >= p.N || k >= p.K) return r;
  const uint8_t* row = p.wp + b * p.wp_sb + n * p.wp_sn + k / 2;
  for (int j = 0; j < 4; ++j) {
    r.codes[j] = static_cast<uint32_t>(row[4 * j]) | static_cast<uint32_t>(row[4 * j + 1]) << 8 |
                 static_cast<uint32_t>(row[4 * j + 2]) << 16 | static_cast<uint32_t>(row[4 * j + 3]) << 24;
  }
  r.scale = p.ws[b * p.ws_sb + n * p.ws_sn + k / 32];
  return r;
}

// Grid and waves: x = N tile of 16 WN columns, y = M tile of 16 WM rows,
// z = batch; WM x WN waves per workgroup, wave w owning the 16 x 16 tile at
// (16 (w / WN), 16 (w % WN)) of the block.
MXVAL_HD void MfmaScaleWaveOrigin(int wm, int wn, int bx, int by, int wave, int64_t* m0, int64_t* n0) {
  *m0 = static_cast<int64_t>(by) * 16 * wm + 16 * (wave / wn);
  *n0 = static_cast<int64_t>(bx) * 16 * wn + 16 * (wave % wn);
}

// Lane l's four accumulators into y (bf16, round to nearest even), masked
// at M and N.
MXVAL_HD void MfmaScaleStoreLane(const GemmParams& p, int64_t b, int64_t m0, int64_t n0, int lane, const float* d) {
  const int64_t n = n0 + MfmaScaleOutCol(lane);
  if (n >= p.N) return;
  for (int i = 0; i < 4; ++i) {
    const int64_t m = m0 + MfmaScaleOutRow(lane, i);
    if (m < p.M) p.y[b * p.y_sb + m * p.y_sm + n] = mxfp4::FloatToBf16Bits(d[i]);
  }
}

// Element e (0..31) of a lane operand, decoded with its scale.
inline double Fp4LaneValue(const Fp4Lane& o, int e) {
  const uint32_t code = (o.codes[e / 8] >> (4 * (e % 8))) & 0xFu;
  return static_cast<double>(mxfp4::DecodeE2M1(code)) *
         static_cast<double>(mxfp4::DecodeE8M0(static_cast<uint8_t>(o.scale & 0xFFu)));
}

// Host model of one v_mfma_scale_f32_16x16x128_f8f6f4 on FP4 x FP4 (for
// the CPU test only): D[i][j] = C[i][j] + sum over the four K groups g of
// sum_k A[i][32 g + k] 2^(sa - 127) B[32 g + k][j] 2^(sb - 127), where row i
// group g of A is lane 16 g + i and column j group g of B is lane 16 g + j;
// a 0xFF scale is NaN. The products are exact in double and the sum is
// rounded once to fp32; the hardware's internal accumulation order and
// precision are not specified to that level, which the reference's
// tolerance absorbs.
inline void MfmaScaleFp4Model(const Fp4Lane (&a)[64], const Fp4Lane (&b)[64], float (&d)[64][4]) {
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      double s = 0.0;
      for (int g = 0; g < 4; ++g) {
        for (int e = 0; e < 32; ++e) s += Fp4LaneValue(a[16 * g + i], e) * Fp4LaneValue(b[16 * g + j], e);
      }
      float& out = d[16 * (i / 4) + j][i % 4];
      out = static_cast<float>(static_cast<double>(out) + s);
    }
  }
}

}  // namespace gpu
}  // namespace mxval

#endif  // MXVAL_KERNELS_GPU_MFMA_SCALE_FP4_H_
