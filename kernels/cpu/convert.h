// Row conversions between bf16 and fp32 for the CPU kernel (AVX2 with
// scalar tails). Bit-exact with kernels/mxfp4/mxfp4.h's scalar functions:
// round to nearest even, NaN kept (quieted).
#ifndef MXVAL_KERNELS_CPU_CONVERT_H_
#define MXVAL_KERNELS_CPU_CONVERT_H_

#include <cstdint>

namespace mxval {
namespace cpu {

// Callers must check the CPU has AVX2 first.
void Bf16ToFloatAvx2(const uint16_t* src, int64_t n, float* dst);
void FloatToBf16RowAvx2(const float* src, int64_t n, uint16_t* dst);

}  // namespace cpu
}  // namespace mxval

#endif  // MXVAL_KERNELS_CPU_CONVERT_H_
