// Prometheus metrics over HTTP (GET /metrics, text format 0.0.4) with
// civetweb, for `serve` and `worker` --metrics-listen. Not prometheus-cpp's
// Exposer: its only auth hook (RegisterAuth) sees Basic credentials, and a
// scrape must be checked like every other request on the listener: with an
// auth::HttpAuth (no sessions) a scrape needs `Authorization: Bearer <token>`
// (Prometheus: authorization.credentials_file) or Basic with the token as
// the password (basic_auth.password_file), of a viewer token or better;
// 401 with WWW-Authenticate: Bearer and no metrics otherwise.
#ifndef MXVAL_SERVICE_WEB_METRICS_SERVER_H_
#define MXVAL_SERVICE_WEB_METRICS_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/registry.h"
#include "service/auth/http_auth.h"

struct mg_context;
struct mg_connection;

namespace mxval {
namespace web {

class MetricsServer {
 public:
  // Listens on "host:port" (numeric; port 0 picks one). UNAVAILABLE if it
  // cannot bind. `auth` (null: no authentication) must outlive the server.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& listen,
                                                              std::shared_ptr<prometheus::Registry> registry,
                                                              auth::HttpAuth* auth = nullptr);
  ~MetricsServer();
  int port() const { return port_; }

 private:
  MetricsServer() = default;
  static int Dispatch(::mg_connection* conn, void* self);
  std::shared_ptr<prometheus::Registry> registry_;
  auth::HttpAuth* auth_ = nullptr;
  ::mg_context* ctx_ = nullptr;
  int port_ = 0;
};

}  // namespace web
}  // namespace mxval

#endif  // MXVAL_SERVICE_WEB_METRICS_SERVER_H_
