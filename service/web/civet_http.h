// The civetweb side shared by the HTTP listeners (web page, /metrics): an
// auth::HttpRequest from a civetweb connection, and one response writer that
// always sends the same safety headers.
#ifndef MXVAL_SERVICE_WEB_CIVET_HTTP_H_
#define MXVAL_SERVICE_WEB_CIVET_HTTP_H_

#include <string>
#include <utility>
#include <vector>

#include "service/auth/http_auth.h"

struct mg_connection;

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

}  // namespace web
}  // namespace mxval

#endif  // MXVAL_SERVICE_WEB_CIVET_HTTP_H_
