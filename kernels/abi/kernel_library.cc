#include "kernels/abi/kernel_library.h"

#include <dlfcn.h>

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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
  if (t->abi_version != MXVAL_KERNEL_ABI_VERSION) {
    return absl::FailedPreconditionError(absl::StrCat("kernel ABI version ", t->abi_version, ", this mxval speaks ",
                                                      MXVAL_KERNEL_ABI_VERSION));
  }
  if (t->library_name == nullptr || t->build_id == nullptr) {
    return absl::InvalidArgumentError("kernel library lacks library_name or build_id");
  }
  if (t->num_kernels < 0 || t->num_kernels > 1024 || (t->num_kernels > 0 && t->kernels == nullptr)) {
    return absl::InvalidArgumentError("kernel library has a bad kernel count or null kernel table");
  }
  name_ = t->library_name;
  build_id_ = t->build_id;
  std::set<std::string> names;
  for (int i = 0; i < t->num_kernels; ++i) {
    const mxval_kernel& k = t->kernels[i];
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

namespace {
using EntryPoint = int32_t (*)(const mxval_gemm_args*, const mxval_tile_config*, char*, size_t);
absl::Status Call(EntryPoint fn, const mxval_kernel& k, const mxval_gemm_args& args, const TileConfig& config) {
  char err[512] = {};
  const mxval_tile_config c = ToAbi(config);
  if (fn(&args, &c, err, sizeof(err)) != 0) {
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
