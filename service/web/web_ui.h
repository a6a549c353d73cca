// The coordinator's read-only web page: a jobs list and a job page (per-shape
// results, time and error per M for baseline vs candidate, the triage with
// its evidence). Plain HTML/CSS/JS embedded in the binary (assets/), served
// with civetweb next to the gRPC port; the pages read two JSON endpoints:
//   GET /api/jobs          ListJobs (newest first, up to 200)
//   GET /api/job?id=ID     the job with every result and its triage
// GET only; strings reach the page through textContent, and responses carry
// a Content-Security-Policy that allows no inline or foreign script.
//
// With an auth::HttpAuth (serve --auth-config) every path but /login and
// /static/style.css needs a viewer token (Authorization: Bearer) or the
// session cookie of a browser that signed in:
//   GET /login             a form with one password field
//   POST /login            token=...: sets the session cookie, 303 to /
//   POST /logout           ends the session
// and answers 401 with WWW-Authenticate: Bearer and no data otherwise.
#ifndef MXVAL_SERVICE_WEB_WEB_UI_H_
#define MXVAL_SERVICE_WEB_WEB_UI_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "service/auth/http_auth.h"
#include "service/coordinator/coordinator_service.h"
#include "service/web/civet_http.h"

struct mg_context;
struct mg_connection;

namespace mxval {
namespace web {

// The request logic without HTTP (unit-tested directly).
WebResponse Handle(const coordinator::Coordinator& coordinator, const std::string& method, const std::string& path,
                   const std::string& query);

// /login and /logout (sign-in with a token; see above), given the request
// and its form body.
WebResponse HandleLogin(auth::HttpAuth& auth, const auth::HttpRequest& request, const std::string& body);

// Largest POST body read (a login form).
inline constexpr size_t kMaxFormBytes = 4096;

class WebServer {
 public:
  // Listens on "host:port" (port 0 picks one; numeric, see
  // auth::ListenAddress::Numeric). UNAVAILABLE if it cannot bind. `auth`
  // (may be null: no authentication) must outlive the server.
  static absl::StatusOr<std::unique_ptr<WebServer>> Start(coordinator::Coordinator* coordinator,
                                                          const std::string& listen, auth::HttpAuth* auth = nullptr);
  ~WebServer();
  int port() const { return port_; }

 private:
  WebServer() = default;
  static int Dispatch(::mg_connection* conn, void* self);
  coordinator::Coordinator* coordinator_ = nullptr;
  auth::HttpAuth* auth_ = nullptr;
  ::mg_context* ctx_ = nullptr;
  int port_ = 0;
};

}  // namespace web
}  // namespace mxval

#endif  // MXVAL_SERVICE_WEB_WEB_UI_H_
