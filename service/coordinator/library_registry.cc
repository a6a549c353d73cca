#include "service/coordinator/library_registry.h"

#include "nlohmann/json.hpp"

#include "absl/strings/str_cat.h"
#include "common/digest.h"
#include "kernels/abi/kernel_library.h"
#include "kernels/dispatch/config_table.h"
#include "kernels/python/manifest.h"

namespace mxval {
namespace coordinator {

namespace {

// A shared object's declaration (declared_json): its build id, and kernels
// with a name, archs and activation modes.
absl::Status CheckDeclaration(const v1::KernelLibraryRegistration& r, const std::string& field) {
  if (r.declared_json().empty()) return absl::OkStatus();
  const std::string f = field + ".declared_json";
  if (r.declared_json().size() > (1 << 20)) return absl::InvalidArgumentError(f + ": over 1 MiB");
  const nlohmann::json d = nlohmann::json::parse(r.declared_json(), nullptr, false);
  if (!d.is_object() || !d.contains("kernels") || !d["kernels"].is_array() || d["kernels"].empty()) {
    return absl::InvalidArgumentError(f + ": not an object with a non-empty \"kernels\" list");
  }
  if (d.value("build_id", "") != r.build_id()) {
    return absl::InvalidArgumentError(absl::StrCat(f, ": declares build '", d.value("build_id", ""),
                                                   "', the registration '", r.build_id(), "'"));
  }
  for (const auto& k : d["kernels"]) {
    if (!k.is_object() || !k.contains("name") || !k["name"].is_string() || k["name"].get<std::string>().empty() ||
        !k.contains("archs") || !k["archs"].is_array() || !k.contains("activations") || !k["activations"].is_array()) {
      return absl::InvalidArgumentError(f + ": every kernel needs a name, archs and activations");
    }
  }
  return absl::OkStatus();
}

}  // namespace

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
  if (!v1::LibraryFormat_IsValid(r.format())) return absl::InvalidArgumentError(absl::StrCat(field, ".format: unknown"));
  if (r.format() != v1::LIBRARY_FORMAT_PYTHON) {
    if (!r.manifest_json().empty() || !r.kernel_tables().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".manifest_json: only a Python library (format LIBRARY_FORMAT_PYTHON) has a manifest"));
    }
    return CheckDeclaration(r, field);
  }
  if (!r.declared_json().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".declared_json: only a shared object has a declaration"));
  }
  // A Python library: the manifest as the workers will import it, and each
  // kernel's config table, so jobs are planned (and refused) at submit.
  if (r.manifest_json().size() > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".manifest_json: over 1 MiB"));
  }
  auto m = python::ParseManifest(r.manifest_json());
  if (!m.ok()) return absl::InvalidArgumentError(absl::StrCat(field, ".manifest_json: ", m.status().message()));
  if (m->name != r.name() || m->build_id != r.build_id()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".manifest_json: names '", m->name, "' build '", m->build_id,
                                                   "', the registration '", r.name(), "' build '", r.build_id(), "'"));
  }
  for (const python::KernelEntry& k : m->kernels) {
    if (k.config_table.empty()) continue;
    auto t = r.kernel_tables().find(k.name);
    if (t == r.kernel_tables().end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".kernel_tables: no table for kernel '", k.name, "' (its config_table ", k.config_table, ")"));
    }
  }
  for (const auto& [kernel, text] : r.kernel_tables()) {
    const std::string f = absl::StrCat(field, ".kernel_tables[", kernel.substr(0, 64), "]");
    bool declared = false;
    for (const python::KernelEntry& k : m->kernels) declared |= k.name == kernel && !k.config_table.empty();
    if (!declared) return absl::InvalidArgumentError(absl::StrCat(f, ": the manifest declares no table for it"));
    if (text.size() > (1 << 20)) return absl::InvalidArgumentError(absl::StrCat(f, ": over 1 MiB"));
    ConfigTableOptions to;
    to.allow_unknown_keys = true;
    if (auto ct = ConfigTable::FromJsonText(text, to); !ct.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(f, ": ", ct.status().message()));
    }
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
