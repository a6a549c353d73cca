#include "common/tensor.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/mxfp4/mxfp4.h"

namespace mxval {

int DTypeSize(DType d) {
  switch (d) {
    case DType::kU8:
    case DType::kI8: return 1;
    case DType::kU16:
    case DType::kBF16:
    case DType::kF16: return 2;
    case DType::kF32: return 4;
    case DType::kF64: return 8;
  }
  return 1;
}

std::string DTypeName(DType d) {
  switch (d) {
    case DType::kU8: return "u8";
    case DType::kI8: return "i8";
    case DType::kU16: return "u16";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
  }
  return "?";
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string HostTensor::ShapeString() const { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

HostTensor HostTensor::Zeros(DType dtype, std::vector<int64_t> shape) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.assign(static_cast<size_t>(t.numel()) * DTypeSize(dtype), 0);
  return t;
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  float mag;
  if (exp == 0) mag = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31) mag = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else mag = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  return sign ? -mag : mag;
}

absl::StatusOr<HostTensor> ToFloat32(const HostTensor& t) {
  HostTensor out = HostTensor::Zeros(DType::kF32, t.shape);
  float* o = out.as<float>();
  const int64_t n = t.numel();
  switch (t.dtype) {
    case DType::kF32: std::memcpy(o, t.data.data(), n * 4); break;
    case DType::kF64: for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(t.as<double>()[i]); break;
    case DType::kBF16: for (int64_t i = 0; i < n; ++i) o[i] = mxfp4::Bf16BitsToFloat(t.as<uint16_t>()[i]); break;
    case DType::kF16: for (int64_t i = 0; i < n; ++i) o[i] = HalfToFloat(t.as<uint16_t>()[i]); break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("expected a floating-point tensor, got dtype ", DTypeName(t.dtype)));
  }
  return out;
}

}  // namespace mxval
