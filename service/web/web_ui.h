// The coordinator's read-only web page: a jobs list and a job page (per-shape
// results, time and error per M for baseline vs candidate, the triage with
// its evidence). Plain HTML/CSS/JS embedded in the binary (assets/), served
// with civetweb next to the gRPC port; the pages read two JSON endpoints:
//   GET /api/jobs          ListJobs (newest first, up to 200)
//   GET /api/job?id=ID     the job with every result and its triage
// GET only; strings reach the page through textContent, and responses carry
// a Content-Security-Policy that allows no inline or foreign script.
#ifndef MXVAL_SERVICE_WEB_WEB_UI_H_
#define MXVAL_SERVICE_WEB_WEB_UI_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "service/coordinator/coordinator_service.h"

struct mg_context;
struct mg_connection;

namespace mxval {
namespace web {

struct WebResponse {
  int status = 200;
  std::string content_type;
  std::string body;
};

// The request logic without HTTP (unit-tested directly).
WebResponse Handle(const coordinator::Coordinator& coordinator, const std::string& method, const std::string& path,
                   const std::string& query);

class WebServer {
 public:
  // Listens on "host:port" (port 0 picks one). UNAVAILABLE if it cannot bind.
  static absl::StatusOr<std::unique_ptr<WebServer>> Start(coordinator::Coordinator* coordinator,
                                                          const std::string& listen);
  ~WebServer();
  int port() const { return port_; }

 private:
  WebServer() = default;
  static int Dispatch(::mg_connection* conn, void* self);
  coordinator::Coordinator* coordinator_ = nullptr;
  ::mg_context* ctx_ = nullptr;
  int port_ = 0;
};

}  // namespace web
}  // namespace mxval

#endif  // MXVAL_SERVICE_WEB_WEB_UI_H_
