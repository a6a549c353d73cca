// The civetweb side shared by the HTTP listeners (web page, /metrics): an
// auth::HttpRequest from a civetweb connection, and one response writer that
// always sends the same safety headers.
#ifndef MXVAL_SERVICE_WEB_CIVET_HTTP_H_
#define MXVAL_SERVICE_WEB_CIVET_HTTP_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "service/auth/http_auth.h"

struct mg_connection;
struct mg_context;

namespace mxval {
namespace web {

struct WebResponse {
  int status = 200;
  std::string content_type;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra: Set-Cookie, Location, WWW-Authenticate
};

auth::HttpRequest RequestOf(::mg_connection* conn);

// 401 with `WWW-Authenticate: Bearer realm="mxval"` and a body that names
// how to get in and nothing else (`login_hint`: point browsers at /login).
WebResponse Unauthorized(const std::string& why, bool login_hint);

// Writes `r` (no body for HEAD); returns the status for civetweb's handler.
int Respond(::mg_connection* conn, const WebResponse& r);

// Starts civetweb on `listen` (one HOST:PORT, already parsed) with `threads`
// request threads and no directory listing, `handler(conn, self)` for every
// path; *port receives the bound port. UNAVAILABLE ("<what>: cannot listen on
// ...") when it cannot bind. The caller mg_stop()s the context.
absl::StatusOr<::mg_context*> StartCivet(const std::string& listen, int threads,
                                         int (*handler)(::mg_connection*, void*), void* self,
                                         const std::string& what, int* port);

}  // namespace web
}  // namespace mxval

#endif  // MXVAL_SERVICE_WEB_CIVET_HTTP_H_
