#include "service/coordinator/open_store.h"

#include <libpq-fe.h>

#include "absl/strings/str_cat.h"
#include "service/coordinator/postgres_store.h"
#include "service/coordinator/sqlite_store.h"

namespace mxval {
namespace coordinator {

absl::StatusOr<std::unique_ptr<Store>> OpenStore(const std::string& db) {
  if (IsPostgresUri(db)) {
    auto s = PostgresStore::Open(db);
    if (!s.ok()) return s.status();
    return std::unique_ptr<Store>(std::move(*s));
  }
  auto s = SqliteStore::Open(db);
  if (!s.ok()) return s.status();
  return std::unique_ptr<Store>(std::move(*s));
}

std::string DescribeStore(const std::string& db) {
  if (!IsPostgresUri(db)) return absl::StrCat("SQLite file ", db);
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(db.c_str(), &err);
  if (opts == nullptr) {
    PQfreemem(err);
    return "PostgreSQL (shared)";
  }
  std::string host, port, dbname;
  for (PQconninfoOption* o = opts; o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    const std::string k = o->keyword;
    if (k == "host" || k == "hostaddr") host = o->val;
    if (k == "port") port = o->val;
    if (k == "dbname") dbname = o->val;
  }
  PQconninfoFree(opts);
  return absl::StrCat("PostgreSQL ", host.empty() ? "(default host)" : host, port.empty() ? "" : ":", port, "/",
                      dbname, " (shared)");
}

}  // namespace coordinator
}  // namespace mxval
