#include "kernels/cpu/convert.h"

#include <immintrin.h>

#include "kernels/mxfp4/mxfp4.h"

namespace mxval {
namespace cpu {

__attribute__((target("avx2"))) void Bf16ToFloatAvx2(const uint16_t* src, int64_t n, float* dst) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k));
    _mm256_storeu_ps(dst + k, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
  }
  for (; k < n; ++k) dst[k] = mxfp4::Bf16BitsToFloat(src[k]);
}

// fp32 -> bf16 (round to nearest even, NaN kept quiet), 8 at a time.
__attribute__((target("avx2"))) void FloatToBf16RowAvx2(const float* src, int64_t n, uint16_t* dst) {
  int64_t i = 0;
  const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7FFF), quiet = _mm256_set1_epi32(0x400000);
  for (; i + 16 <= n; i += 16) {
    __m256i out[2];
    for (int h = 0; h < 2; ++h) {
      const __m256 f = _mm256_loadu_ps(src + i + 8 * h);
      const __m256i u = _mm256_castps_si256(f);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
      __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(bias, lsb));
      const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
      r = _mm256_blendv_epi8(r, _mm256_or_si256(u, quiet), nan);
      out[h] = _mm256_srli_epi32(r, 16);
    }
    // packus works per 128-bit lane: fix the order with a 64-bit permute.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(out[0], out[1]), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  for (; i < n; ++i) dst[i] = mxfp4::FloatToBf16Bits(src[i]);
}

}  // namespace cpu
}  // namespace mxval
