// Tensor files: .npy (read + write; u1, i1, u2, f2, f4, f8, little-endian,
// C order, format versions 1-3) and .safetensors (read; U8, I8, U16, BF16,
// F16, F32, F64).
//
// Every parser here treats its input as hostile: sizes are checked against the
// file length before anything is allocated, and a corrupt or truncated file
// is an INVALID_ARGUMENT naming the file and what is wrong, never a crash.
#ifndef MXVAL_COMMON_TENSOR_IO_H_
#define MXVAL_COMMON_TENSOR_IO_H_

#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tensor.h"

namespace mxval {

// Largest tensor file payload we accept (8 GiB): guards allocations driven by
// header fields.
inline constexpr int64_t kMaxTensorBytes = int64_t{8} << 30;

// Parses .npy bytes. INVALID_ARGUMENT on any malformation.
absl::StatusOr<HostTensor> ParseNpy(absl::string_view bytes);
// Serializes to .npy (version 1.0).
std::string SerializeNpy(const HostTensor& t);

// Parses .safetensors bytes and returns the named tensor. NOT_FOUND if the
// file has no tensor of that name (the message lists the names it has);
// INVALID_ARGUMENT for the malformations LoadTensor lists.
absl::StatusOr<HostTensor> ParseSafetensors(absl::string_view bytes, const std::string& name);
// Lists tensor names in a .safetensors file.
absl::StatusOr<std::vector<std::string>> ListSafetensors(absl::string_view bytes);

// Largest .npy header we read (numpy writes a few hundred bytes).
inline constexpr int64_t kMaxNpyHeaderBytes = 1 << 20;

// Loads a tensor from "file.npy" or "file.safetensors#tensor_name" (the name
// may be left out of a file with one tensor). The file must be a regular
// file; its header is read first, and only the named tensor's bytes are read,
// after checking them against the file's size and `max_bytes`. A .safetensors
// file is refused whole if any entry's data_offsets run backwards, past the
// data, disagree with its dtype and shape, or overlap another entry's.
// NOT_FOUND if the file cannot be opened or has no tensor of that name;
// INVALID_ARGUMENT naming the file otherwise.
absl::StatusOr<HostTensor> LoadTensor(const std::string& spec, int64_t max_bytes = kMaxTensorBytes);
// A tensor file's dtype and shape, from its header alone (the checks of
// LoadTensor except the cap), so callers can size what they will allocate
// before reading any data.
struct TensorInfo {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t bytes = 0;  // of the data, as stored
};
absl::StatusOr<TensorInfo> PeekTensor(const std::string& spec);

// Writes a .npy file.
absl::Status SaveNpy(const std::string& path, const HostTensor& t);

// The whole of a regular file or pipe of at most `max_bytes`
// (ReadFileBounded), for small files: config tables, manifests.
inline constexpr int64_t kMaxSmallFileBytes = 64 << 20;
absl::StatusOr<std::string> ReadFileBytes(const std::string& path, int64_t max_bytes = kMaxSmallFileBytes);

}  // namespace mxval

#endif  // MXVAL_COMMON_TENSOR_IO_H_
