#include "service/web/civet_http.h"

#include <civetweb.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace mxval {
namespace web {
namespace {

const char* StatusText(int s) {
  switch (s) {
    case 200: return "OK";
    case 303: return "See Other";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    default: return "Internal Server Error";
  }
}

std::string Header(::mg_connection* conn, const char* name) {
  const char* v = mg_get_header(conn, name);
  return v != nullptr ? std::string(v) : std::string();
}

// Header values written here come from this program, never from a request;
// a CR or LF would still end the header, so they are dropped.
std::string HeaderSafe(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c != '\r' && c != '\n') out += c;
  }
  return out;
}

}  // namespace

auth::HttpRequest RequestOf(::mg_connection* conn) {
  const mg_request_info* ri = mg_get_request_info(conn);
  auth::HttpRequest r;
  r.method = ri->request_method ? ri->request_method : "";
  r.path = ri->local_uri ? ri->local_uri : "/";
  r.authorization = Header(conn, "Authorization");
  r.cookie = Header(conn, "Cookie");
  r.origin = Header(conn, "Origin");
  r.referer = Header(conn, "Referer");
  r.host = Header(conn, "Host");
  r.peer = absl::StrCat(ri->remote_addr, ":", ri->remote_port);
  return r;
}

WebResponse Unauthorized(const std::string& why, bool login_hint) {
  WebResponse r;
  r.status = 401;
  r.headers.push_back({"WWW-Authenticate", "Bearer realm=\"mxval\""});
  if (login_hint) {
    r.content_type = "text/html; charset=utf-8";
    r.body =
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>mxval — sign in</title></head>"
        "<body><p>This page needs a token: <a href=\"/login\">sign in</a>.</p></body></html>\n";
  } else {
    r.content_type = "text/plain; charset=utf-8";
    r.body = why + "\n";
  }
  return r;
}

int Respond(::mg_connection* conn, const WebResponse& r) {
  std::string head = absl::StrCat(
      "HTTP/1.1 ", r.status, " ", StatusText(r.status), "\r\nContent-Type: ", HeaderSafe(r.content_type),
      "\r\nContent-Length: ", r.body.size(),
      "\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nReferrer-Policy: same-origin\r\n"
      "Content-Security-Policy: default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
      "form-action 'self'; frame-ancestors 'none'\r\n");
  for (const auto& [k, v] : r.headers) absl::StrAppend(&head, HeaderSafe(k), ": ", HeaderSafe(v), "\r\n");
  absl::StrAppend(&head, "Connection: close\r\n\r\n");
  mg_write(conn, head.data(), head.size());
  const mg_request_info* ri = mg_get_request_info(conn);
  if (std::strcmp(ri->request_method ? ri->request_method : "", "HEAD") != 0) mg_write(conn, r.body.data(), r.body.size());
  return r.status;
}

absl::StatusOr<::mg_context*> StartCivet(const std::string& listen, int threads,
                                         int (*handler)(::mg_connection*, void*), void* self,
                                         const std::string& what, int* port) {
  const std::string thread_count = std::to_string(threads);
  const char* options[] = {"listening_ports", listen.c_str(), "num_threads", thread_count.c_str(),
                           "enable_directory_listing", "no", nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  mg_init_library(0);
  ::mg_context* ctx = mg_start(&callbacks, nullptr, options);
  if (ctx == nullptr) return absl::UnavailableError(absl::StrCat(what, ": cannot listen on ", listen));
  mg_set_request_handler(ctx, "/", handler, self);
  mg_server_port ports[4];
  const int n = mg_get_server_ports(ctx, 4, ports);
  *port = n > 0 ? ports[0].port : 0;
  return ctx;
}

}  // namespace web
}  // namespace mxval
