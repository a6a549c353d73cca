// A real PostgreSQL server for tests (Debian's postgresql, loopback only).
//
// MXVAL_TEST_PG set (scripts/test.sh starts one server for the whole run and
// exports its conninfo): that server. Otherwise this process starts its own
// with scripts/pg_test_server.sh on first use and stops it at exit (or, if
// the process is killed, the script's watcher stops it). Every
// caller gets a fresh, empty database on it, so tests running in parallel
// never share state.
#ifndef MXVAL_TESTS_PG_SERVER_H_
#define MXVAL_TESTS_PG_SERVER_H_

#include <libpq-fe.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#ifndef MXVAL_SOURCE_DIR
#error "MXVAL_SOURCE_DIR must name the source tree (scripts/pg_test_server.sh)"
#endif

namespace mxval {
namespace testing_util {

class PgServer {
 public:
  // The conninfo of the server's maintenance database ("postgres").
  static absl::StatusOr<std::string> Admin() {
    static PgServer* server = new PgServer();  // stopped by its atexit hook
    if (server->conninfo_.empty()) return absl::UnavailableError(server->error_);
    return server->conninfo_;
  }

  // A new empty database; returns its conninfo.
  static absl::StatusOr<std::string> FreshDatabase() {
    auto admin = Admin();
    if (!admin.ok()) return admin.status();
    static std::atomic<int> n{0};
    const std::string name = absl::StrCat("mxval_test_", getpid(), "_", n++);
    PGconn* c = PQconnectdb(admin->c_str());
    std::string err;
    if (PQstatus(c) != CONNECTION_OK) {
      err = PQerrorMessage(c);
    } else {
      PQsetNoticeProcessor(c, [](void*, const char*) {}, nullptr);
      PGresult* r = PQexec(c, absl::StrCat("DROP DATABASE IF EXISTS ", name).c_str());
      PQclear(r);
      r = PQexec(c, absl::StrCat("CREATE DATABASE ", name).c_str());
      if (PQresultStatus(r) != PGRES_COMMAND_OK) err = PQresultErrorMessage(r);
      PQclear(r);
    }
    PQfinish(c);
    if (!err.empty()) return absl::UnavailableError(absl::StrCat("test PostgreSQL: ", err));
    return absl::StrCat(*admin, " dbname=", name);  // the last dbname wins
  }

 private:
  PgServer() {
    if (const char* env = getenv("MXVAL_TEST_PG"); env != nullptr && *env != '\0') {
      conninfo_ = env;
      return;
    }
    char tmpl[] = "/tmp/mxval_pg_XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      error_ = "mkdtemp failed";
      return;
    }
    dir_ = tmpl;
    const std::string cmd =
        absl::StrCat("bash ", MXVAL_SOURCE_DIR, "/scripts/pg_test_server.sh start ", dir_, " ", getpid(), " 2>", dir_,
                     "/start.err");
    FILE* p = popen(cmd.c_str(), "r");
    char buf[512] = {};
    std::string out;
    while (p != nullptr && fgets(buf, sizeof buf, p) != nullptr) out += buf;
    const int rc = p ? pclose(p) : -1;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    if (rc != 0 || out.empty()) {
      error_ = absl::StrCat("could not start a test PostgreSQL server (", cmd, ")");
      return;
    }
    conninfo_ = out;
    static std::string* stop = new std::string(
        absl::StrCat("bash ", MXVAL_SOURCE_DIR, "/scripts/pg_test_server.sh stop ", dir_, " >/dev/null 2>&1"));
    atexit([] { (void)!system(stop->c_str()); });
  }
  std::string conninfo_, dir_, error_;
};

}  // namespace testing_util
}  // namespace mxval

#endif  // MXVAL_TESTS_PG_SERVER_H_
