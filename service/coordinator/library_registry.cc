#include "service/coordinator/library_registry.h"

#include "absl/strings/str_cat.h"
#include "common/digest.h"
#include "kernels/abi/kernel_library.h"

namespace mxval {
namespace coordinator {

absl::Status ValidateRegistration(const v1::KernelLibraryRegistration& r, const std::string& field) {
  if (absl::Status st = CheckExternalLibraryName(r.name()); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".name: ", st.message()));
  }
  if (r.build_id().empty() || r.build_id().size() > 128) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".build_id: must be 1 to 128 bytes"));
  }
  if (!IsSha256Hex(r.sha256())) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".sha256: not 64 lowercase hex digits (sha256sum lib", r.name(), ".so)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LibraryRegistry>> LibraryRegistry::Create(Store* store) {
  std::unique_ptr<LibraryRegistry> reg(new LibraryRegistry(store));
  absl::MutexLock l(&reg->mu_);
  if (absl::Status st = reg->LoadLocked(); !st.ok()) return st;
  return reg;
}

absl::Status LibraryRegistry::LoadLocked() {
  if (store_ == nullptr) return absl::OkStatus();
  auto rows = store_->LoadLibraries();
  if (!rows.ok()) return rows.status();
  LibraryMap loaded;
  for (const std::string& row : *rows) {
    v1::KernelLibraryRegistration r;
    if (!r.ParseFromString(row) || !ValidateRegistration(r, "stored").ok()) {
      return absl::InternalError("store: a stored kernel library registration does not parse");
    }
    loaded[r.name()] = r;
  }
  libraries_ = std::move(loaded);
  return absl::OkStatus();
}

void LibraryRegistry::FollowSharedLocked() {
  // Another coordinator on the same database may have (un)registered one.
  // A failed read keeps the last known set (the store error surfaces on writes).
  if (store_ != nullptr && store_->shared()) (void)LoadLocked();
}

absl::StatusOr<v1::KernelLibraryRegistration> LibraryRegistry::Register(v1::KernelLibraryRegistration r,
                                                                         const std::string& by, absl::Time now) {
  if (absl::Status st = ValidateRegistration(r, "library"); !st.ok()) return st;
  r.set_registered_by(by);
  const int64_t us = absl::ToUnixMicros(now);
  r.mutable_registered()->set_seconds(us / 1000000);
  r.mutable_registered()->set_nanos(static_cast<int32_t>((us % 1000000) * 1000));
  absl::MutexLock l(&mu_);
  if (store_ != nullptr) {
    if (absl::Status st = store_->PutLibrary(r.name(), r.SerializeAsString()); !st.ok()) return st;
  }
  libraries_[r.name()] = r;
  return r;
}

absl::Status LibraryRegistry::Unregister(const std::string& name) {
  absl::MutexLock l(&mu_);
  FollowSharedLocked();
  if (!libraries_.count(name)) {
    return absl::NotFoundError(absl::StrCat("name: no kernel library '", name, "' is registered"));
  }
  if (store_ != nullptr) {
    if (absl::Status st = store_->DeleteLibrary(name); !st.ok()) return st;
  }
  libraries_.erase(name);
  return absl::OkStatus();
}

LibraryMap LibraryRegistry::Snapshot() {
  absl::MutexLock l(&mu_);
  FollowSharedLocked();
  return libraries_;
}

}  // namespace coordinator
}  // namespace mxval
