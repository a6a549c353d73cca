// Checks the prmt dequantization's self-test words (DequantSelfTestWords
// in a16wfp4_tile.h, 256 scale bytes x 256 bytes x 4 words, produced on the
// device or on the CPU) against the format library: every bf16 half must be
// bf16(E2M1(code) * 2^(s - 127)) bit for bit, NaN for scale byte 0xFF.
#ifndef MXVAL_KERNELS_GPU_DEQUANT_SELFTEST_CHECK_H_
#define MXVAL_KERNELS_GPU_DEQUANT_SELFTEST_CHECK_H_

#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/mxfp4/mxfp4.h"

namespace mxval::gpu {

// Empty when every word is right, else the first wrong one, described.
inline std::string CheckDequantSelfTestWords(const uint32_t* words) {
  for (uint32_t s = 0; s < 256; ++s) {
    const float scale = mxfp4::DecodeE8M0(static_cast<uint8_t>(s));
    for (uint32_t b = 0; b < 256; ++b) {
      const uint32_t* w = words + (s * 256 + b) * 4;
      for (int i = 0; i < 4; ++i) {
        const uint32_t byte = (b + i) & 0xFFu;
        for (int h = 0; h < 2; ++h) {
          const uint16_t got = static_cast<uint16_t>(w[i] >> (16 * h));
          const float want = mxfp4::DecodeE2M1(static_cast<uint8_t>((byte >> (4 * h)) & 0xFu)) * scale;
          const bool ok = std::isnan(want) ? std::isnan(mxfp4::Bf16BitsToFloat(got))
                                           : got == mxfp4::FloatToBf16Bits(want);
          if (!ok) {
            return "scale byte " + std::to_string(s) + ", byte " + std::to_string(byte) + ", nibble " +
                   std::to_string(h) + ": got bf16 bits " +
                   std::to_string(got) + ", want " + std::to_string(want);
          }
        }
      }
    }
  }
  return "";
}

}  // namespace mxval::gpu

#endif  // MXVAL_KERNELS_GPU_DEQUANT_SELFTEST_CHECK_H_
