// The external kernel libraries jobs may name, registered by admins.
//
// A registration binds a name to a build_id and the SHA-256 of the shared
// object; the planner stamps the digest into every task that names the
// library, and workers refuse to load a file whose digest differs
// (KernelLibrary::OpenVerified). Registrations are persisted through the
// store (when it keeps them) before they take effect, so a restarted
// coordinator accepts the same jobs, and coordinators sharing a PostgreSQL
// store see each other's registrations.
#ifndef MXVAL_SERVICE_COORDINATOR_LIBRARY_REGISTRY_H_
#define MXVAL_SERVICE_COORDINATOR_LIBRARY_REGISTRY_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "mxval/v1/mxval.pb.h"
#include "service/coordinator/job_planner.h"
#include "service/coordinator/store.h"

namespace mxval {
namespace coordinator {

// INVALID_ARGUMENT naming `field`.name / .build_id / .sha256.
absl::Status ValidateRegistration(const v1::KernelLibraryRegistration& r, const std::string& field);

class LibraryRegistry {
 public:
  // Loads what `store` holds (null: in memory only). UNAVAILABLE if the store
  // cannot be read; INTERNAL for a stored registration that does not parse.
  static absl::StatusOr<std::unique_ptr<LibraryRegistry>> Create(Store* store);

  // Adds or replaces `r` (registered_by / registered set here).
  // INVALID_ARGUMENT (field named) for a bad registration; UNAVAILABLE if the
  // store write fails (nothing changes then).
  absl::StatusOr<v1::KernelLibraryRegistration> Register(v1::KernelLibraryRegistration r, const std::string& by,
                                                          absl::Time now);
  // NOT_FOUND for an unknown name; UNAVAILABLE if the store write fails.
  absl::Status Unregister(const std::string& name);
  // The registrations in force; with a shared store, read from it each time
  // (a registration made through another coordinator counts at once).
  LibraryMap Snapshot();

 private:
  explicit LibraryRegistry(Store* store) : store_(store) {}
  absl::Status LoadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FollowSharedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Store* const store_;
  mutable absl::Mutex mu_;
  LibraryMap libraries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace coordinator
}  // namespace mxval

#endif  // MXVAL_SERVICE_COORDINATOR_LIBRARY_REGISTRY_H_
