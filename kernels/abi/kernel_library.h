// Loading and calling kernel libraries through the mxval kernel ABI
// (kernels/include/mxval/kernel_api.h).
#ifndef MXVAL_KERNELS_ABI_KERNEL_LIBRARY_H_
#define MXVAL_KERNELS_ABI_KERNEL_LIBRARY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/dispatch/tile_config.h"
#include "mxval/kernel_api.h"

namespace mxval {

class KernelLibrary {
 public:
  // dlopen()s `path` and reads its table. NOT_FOUND if the file or the
  // mxval_get_kernel_library symbol is missing; FAILED_PRECONDITION if its
  // ABI version is outside [MIN_VERSION, VERSION]; INVALID_ARGUMENT if the table is malformed.
  static absl::StatusOr<std::unique_ptr<KernelLibrary>> Open(const std::string& path);
  // Loads the external library `name` the way a worker must: only
  // <dir>/lib<name>.so (after symlinks, still inside `dir`), and only if the
  // file's SHA-256 equals `sha256`. The file is opened once, hashed through
  // that descriptor and loaded from it (/proc/self/fd/N), so the bytes
  // checked are the bytes loaded. INVALID_ARGUMENT for a bad name or digest;
  // NOT_FOUND if the file is missing; PERMISSION_DENIED if it resolves outside
  // `dir` or its digest differs (both digests in the message); plus Open()'s codes.
  static absl::StatusOr<std::unique_ptr<KernelLibrary>> OpenVerified(const std::string& dir, const std::string& name,
                                                                     const std::string& sha256);
  // Wraps a table linked into this binary (built-in kernels). Same checks.
  static absl::StatusOr<std::unique_ptr<KernelLibrary>> FromTable(const mxval_kernel_library* table);
  ~KernelLibrary();

  const std::string& name() const { return name_; }
  const std::string& build_id() const { return build_id_; }
  // The table's abi_version (1 or 2); kernels() always have the version-2
  // layout (a version-1 kernel's launch_flags are 0).
  uint32_t abi_version() const { return abi_version_; }
  const std::vector<const mxval_kernel*>& kernels() const { return kernels_; }
  // NOT_FOUND listing the names it has.
  absl::StatusOr<const mxval_kernel*> Find(const std::string& kernel_name) const;

 private:
  KernelLibrary() = default;
  absl::Status Adopt(const mxval_kernel_library* table);
  void* handle_ = nullptr;
  std::string name_, build_id_;
  uint32_t abi_version_ = 0;
  std::vector<mxval_kernel> owned_;  // version-1 kernels, widened
  std::vector<const mxval_kernel*> kernels_;
};

// External library names: [A-Za-z0-9_.-], 1..64 bytes, not starting with
// '.', not "mxval-builtin-*". INVALID_ARGUMENT saying which rule failed.
absl::Status CheckExternalLibraryName(const std::string& name);

mxval_tile_config ToAbi(const TileConfig& c);
TileConfig FromAbi(const mxval_tile_config& c);

// `args` with config_json pointing at config.json (NULL when empty); the
// pointer is valid while `config` is.
mxval_gemm_args WithConfig(const mxval_gemm_args& args, const TileConfig& config);
// workspace_size() with the config's JSON in the args.
size_t WorkspaceSize(const mxval_kernel& k, const mxval_gemm_args& args, const TileConfig& config);

// can_implement() as a Status: INVALID_ARGUMENT with the kernel's reason.
absl::Status CanImplement(const mxval_kernel& k, const mxval_gemm_args& args, const TileConfig& config);
// run() as a Status: INVALID_ARGUMENT with the kernel's reason.
absl::Status Run(const mxval_kernel& k, const mxval_gemm_args& args, const TileConfig& config);

}  // namespace mxval

#endif  // MXVAL_KERNELS_ABI_KERNEL_LIBRARY_H_
