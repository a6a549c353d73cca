#include "kernels/abi/kernel_library.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/digest.h"

namespace mxval {

absl::StatusOr<std::unique_ptr<KernelLibrary>> KernelLibrary::Open(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    return absl::NotFoundError(absl::StrCat("cannot load kernel library '", path, "': ", e ? e : "unknown error"));
  }
  auto get = reinterpret_cast<mxval_get_kernel_library_fn>(dlsym(h, MXVAL_KERNEL_LIBRARY_SYMBOL));
  if (get == nullptr) {
    dlclose(h);
    return absl::NotFoundError(absl::StrCat("'", path, "' does not export ", MXVAL_KERNEL_LIBRARY_SYMBOL));
  }
  std::unique_ptr<KernelLibrary> lib(new KernelLibrary());
  lib->handle_ = h;
  if (absl::Status st = lib->Adopt(get()); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("'", path, "': ", st.message()));
  }
  return lib;
}

absl::Status CheckExternalLibraryName(const std::string& name) {
  if (name.empty() || name.size() > 64) return absl::InvalidArgumentError("library name: must be 1 to 64 bytes");
  if (name[0] == '.') return absl::InvalidArgumentError("library name: must not start with '.'");
  if (name.rfind("mxval-builtin-", 0) == 0) {
    return absl::InvalidArgumentError("library name: 'mxval-builtin-*' names the built-in libraries");
  }
  for (char ch : name) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                    ch == '-' || ch == '.';
    if (!ok) return absl::InvalidArgumentError(absl::StrCat("library name: '", name, "' has characters outside [A-Za-z0-9_.-]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<KernelLibrary>> KernelLibrary::OpenVerified(const std::string& dir,
                                                                           const std::string& name,
                                                                           const std::string& sha256) {
  if (absl::Status st = CheckExternalLibraryName(name); !st.ok()) return st;
  if (!IsSha256Hex(sha256)) {
    return absl::InvalidArgumentError(absl::StrCat("library '", name, "': the task carries no valid SHA-256 digest ('",
                                                   sha256.substr(0, 80), "'); only registered libraries run"));
  }
  if (dir.empty()) {
    return absl::NotFoundError(absl::StrCat("library '", name, "': this worker has no --kernel-dir"));
  }
  char real_dir[PATH_MAX];
  if (realpath(dir.c_str(), real_dir) == nullptr) {
    return absl::NotFoundError(absl::StrCat("kernel directory '", dir, "': ", strerror(errno)));
  }
  const std::string path = absl::StrCat(real_dir, "/lib", name, ".so");
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open kernel library '", path, "': ", strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::PermissionDeniedError(absl::StrCat("kernel library '", path, "' is not a regular file"));
  }
  const std::string fd_path = absl::StrCat("/proc/self/fd/", fd);
  char target[PATH_MAX];
  const ssize_t n = readlink(fd_path.c_str(), target, sizeof(target) - 1);
  if (n <= 0) return absl::PermissionDeniedError(absl::StrCat("cannot resolve '", path, "': ", strerror(errno)));
  target[n] = '\0';
  const std::string prefix = absl::StrCat(real_dir, real_dir[1] == '\0' ? "" : "/");
  if (std::string(target).rfind(prefix, 0) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("kernel library '", path, "' resolves to '", target,
                                                    "', outside the kernel directory '", real_dir, "'"));
  }
  auto digest = Sha256HexOfFd(fd);
  if (!digest.ok()) return digest.status();
  if (*digest != sha256) {
    return absl::PermissionDeniedError(absl::StrCat("kernel library '", path, "' has SHA-256 ", *digest,
                                                    ", the job registered ", sha256, "; refusing to load it"));
  }
  // The loader matches already-loaded objects by name first, and an earlier
  // library may have been loaded as this same /proc/self/fd/N (that
  // descriptor since closed and the number reused): pick a descriptor number
  // whose name is not taken, holding the taken ones open meanwhile.
  std::vector<int> dups;
  int load_fd = fd;
  for (void* h; (h = dlopen(absl::StrCat("/proc/self/fd/", load_fd).c_str(), RTLD_NOW | RTLD_NOLOAD)) != nullptr;) {
    dlclose(h);
    load_fd = dups.size() < 256 ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (load_fd < 0) break;
    dups.push_back(load_fd);
  }
  auto lib = load_fd < 0 ? absl::StatusOr<std::unique_ptr<KernelLibrary>>(absl::ResourceExhaustedError("out of descriptors"))
                         : Open(absl::StrCat("/proc/self/fd/", load_fd));
  for (int d : dups) close(d);
  if (!lib.ok()) return absl::Status(lib.status().code(), absl::StrCat(path, ": ", lib.status().message()));
  return lib;
}

absl::StatusOr<std::unique_ptr<KernelLibrary>> KernelLibrary::FromTable(const mxval_kernel_library* table) {
  std::unique_ptr<KernelLibrary> lib(new KernelLibrary());
  if (absl::Status st = lib->Adopt(table); !st.ok()) return st;
  return lib;
}

KernelLibrary::~KernelLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

absl::Status KernelLibrary::Adopt(const mxval_kernel_library* t) {
  if (t == nullptr) return absl::InvalidArgumentError("kernel library table is null");
  if (t->abi_version < MXVAL_KERNEL_ABI_MIN_VERSION || t->abi_version > MXVAL_KERNEL_ABI_VERSION) {
    return absl::FailedPreconditionError(absl::StrCat("kernel ABI version ", t->abi_version, ", this mxval speaks ",
                                                      MXVAL_KERNEL_ABI_MIN_VERSION, " to ", MXVAL_KERNEL_ABI_VERSION));
  }
  if (t->library_name == nullptr || t->build_id == nullptr) {
    return absl::InvalidArgumentError("kernel library lacks library_name or build_id");
  }
  if (t->num_kernels < 0 || t->num_kernels > 1024 || (t->num_kernels > 0 && t->kernels == nullptr)) {
    return absl::InvalidArgumentError("kernel library has a bad kernel count or null kernel table");
  }
  name_ = t->library_name;
  build_id_ = t->build_id;
  abi_version_ = t->abi_version;
  // A version-1 table is an array of the shorter version-1 struct (it ends
  // before launch_flags): its entries are copied into full structs whose
  // launch_flags are 0. Version-2 entries are used in place.
  if (t->abi_version == 1) {
    constexpr size_t kV1Size = offsetof(mxval_kernel, launch_flags);
    static_assert(kV1Size % alignof(mxval_kernel) == 0, "the version-1 struct has no tail padding");
    const char* base = reinterpret_cast<const char*>(t->kernels);
    owned_.resize(static_cast<size_t>(t->num_kernels));
    for (int i = 0; i < t->num_kernels; ++i) {
      owned_[i] = mxval_kernel{};
      memcpy(&owned_[i], base + i * kV1Size, kV1Size);
    }
  }
  std::set<std::string> names;
  for (int i = 0; i < t->num_kernels; ++i) {
    const mxval_kernel& k = t->abi_version == 1 ? owned_[i] : t->kernels[i];
    if (k.name == nullptr || k.archs == nullptr || k.run == nullptr || k.can_implement == nullptr ||
        k.workspace_size == nullptr || k.num_configs < 0 || (k.num_configs > 0 && k.configs == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat("kernel #", i, " has a null name, archs, entry point or configs"));
    }
    if (!names.insert(k.name).second) return absl::InvalidArgumentError(absl::StrCat("duplicate kernel name '", k.name, "'"));
    kernels_.push_back(&k);
  }
  return absl::OkStatus();
}

absl::StatusOr<const mxval_kernel*> KernelLibrary::Find(const std::string& kernel_name) const {
  std::vector<std::string> have;
  for (const mxval_kernel* k : kernels_) {
    if (kernel_name == k->name) return k;
    have.push_back(k->name);
  }
  return absl::NotFoundError(absl::StrCat("library '", name_, "' has no kernel '", kernel_name, "' (has: ",
                                          absl::StrJoin(have, ", "), ")"));
}

mxval_tile_config ToAbi(const TileConfig& c) {
  return {c.block_m, c.block_n, c.block_k, c.ksplit, c.num_stages, c.num_warps};
}
TileConfig FromAbi(const mxval_tile_config& c) {
  return TileConfig{c.block_m, c.block_n, c.block_k, c.ksplit, c.num_stages, c.num_warps};
}

mxval_gemm_args WithConfig(const mxval_gemm_args& args, const TileConfig& config) {
  mxval_gemm_args a = args;
  a.config_json = config.json.empty() ? nullptr : config.json.c_str();
  return a;
}

size_t WorkspaceSize(const mxval_kernel& k, const mxval_gemm_args& args, const TileConfig& config) {
  const mxval_gemm_args a = WithConfig(args, config);
  const mxval_tile_config c = ToAbi(config);
  return k.workspace_size(&a, &c);
}

namespace {
using EntryPoint = int32_t (*)(const mxval_gemm_args*, const mxval_tile_config*, char*, size_t);
absl::Status Call(EntryPoint fn, const mxval_kernel& k, const mxval_gemm_args& args, const TileConfig& config) {
  // Room for a Python kernel's exception with the tail of its traceback.
  char err[4096] = {};
  const mxval_tile_config c = ToAbi(config);
  const mxval_gemm_args a = WithConfig(args, config);
  if (fn(&a, &c, err, sizeof(err)) != 0) {
    err[sizeof(err) - 1] = '\0';
    return absl::InvalidArgumentError(absl::StrCat(k.name, " ", config.ToString(), ": ", err));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status CanImplement(const mxval_kernel& k, const mxval_gemm_args& args, const TileConfig& config) {
  return Call(k.can_implement, k, args, config);
}

absl::Status Run(const mxval_kernel& k, const mxval_gemm_args& args, const TileConfig& config) {
  return Call(k.run, k, args, config);
}

}  // namespace mxval
