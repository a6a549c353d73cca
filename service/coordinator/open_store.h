// The coordinator's store from a --db value: a PostgreSQL URI or conninfo
// (shared by several coordinators), otherwise a SQLite file path.
#ifndef MXVAL_SERVICE_COORDINATOR_OPEN_STORE_H_
#define MXVAL_SERVICE_COORDINATOR_OPEN_STORE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "service/coordinator/store.h"

namespace mxval {
namespace coordinator {

// UNAVAILABLE if the database cannot be opened or reached;
// FAILED_PRECONDITION if its schema is newer than this build.
absl::StatusOr<std::unique_ptr<Store>> OpenStore(const std::string& db);

// What to log about a --db value: the SQLite path, or "PostgreSQL" with the
// host and database but never a password.
std::string DescribeStore(const std::string& db);

}  // namespace coordinator
}  // namespace mxval

#endif  // MXVAL_SERVICE_COORDINATOR_OPEN_STORE_H_
