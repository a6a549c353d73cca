// A dense, C-ordered host tensor with a dtype tag: what .npy / .safetensors
// files hold and what the CLI passes around.
#ifndef MXVAL_COMMON_TENSOR_H_
#define MXVAL_COMMON_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mxval {

enum class DType { kU8, kI8, kU16, kBF16, kF16, kF32, kF64 };

// Bytes per element.
int DTypeSize(DType d);
// Short name: "u8", "i8", "u16", "bf16", "f16", "f32", "f64".
std::string DTypeName(DType d);

struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // numel * DTypeSize(dtype) bytes, C order

  int64_t numel() const;
  std::string ShapeString() const;  // "[16, 128, 512]"

  template <typename T>
  T* as() { return reinterpret_cast<T*>(data.data()); }
  template <typename T>
  const T* as() const { return reinterpret_cast<const T*>(data.data()); }

  static HostTensor Zeros(DType dtype, std::vector<int64_t> shape);
};

// Converts any floating dtype (f32, f64, bf16, f16) to a float32 tensor.
// INVALID_ARGUMENT for integer dtypes.
absl::StatusOr<HostTensor> ToFloat32(const HostTensor& t);

// IEEE half -> float (exact).
float HalfToFloat(uint16_t h);

}  // namespace mxval

#endif  // MXVAL_COMMON_TENSOR_H_
