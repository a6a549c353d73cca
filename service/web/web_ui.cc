#include "service/web/web_ui.h"

#include <civetweb.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "mxval/web_assets.h"

namespace mxval {
namespace web {
namespace {

WebResponse Error(int status, const std::string& message);

// A message proto3 JSON cannot express (a Duration out of range in a stored
// spec) is a 500, never a 200 with cut-off JSON.
WebResponse Json(const google::protobuf::Message& m) {
  WebResponse r;
  r.content_type = "application/json";
  google::protobuf::util::JsonPrintOptions o;
  o.always_print_primitive_fields = false;
  if (!google::protobuf::util::MessageToJsonString(m, &r.body, o).ok()) {
    return Error(500, "the answer cannot be printed as JSON");
  }
  return r;
}

WebResponse Error(int status, const std::string& message) {
  WebResponse r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = message + "\n";
  return r;
}

WebResponse Asset(const char* type, const char* body) {
  WebResponse r;
  r.content_type = type;
  r.body = body;
  return r;
}

// The value of `key` in a query string (percent-decoded), or "".
std::string QueryParam(const std::string& query, const char* key) {
  std::string buf(kMaxFormBytes + 1, '\0');
  const int n = mg_get_var(query.c_str(), query.size(), key, buf.data(), buf.size());
  return n > 0 ? buf.substr(0, static_cast<size_t>(n)) : std::string();
}

constexpr char kLoginPage[] =
    "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>mxval — sign in</title>\n"
    "<link rel=\"stylesheet\" href=\"/static/style.css\">\n</head>\n<body>\n"
    "<header><a href=\"/\">mxval</a> <span class=\"sub\">MXFP4 kernel validation</span></header>\n<main>\n"
    "<h1>Sign in</h1>\n<p>A token from the coordinator's auth config (any role). The browser keeps a session cookie "
    "for 12 hours; the token is not stored.</p>\n"
    "<form method=\"post\" action=\"/login\"><input type=\"password\" name=\"token\" id=\"token\" "
    "autocomplete=\"current-password\" required> <button type=\"submit\">Sign in</button></form>\n"
    "@MESSAGE@</main>\n</body>\n</html>\n";

WebResponse LoginPage(int status, const char* message) {
  WebResponse r;
  r.status = status;
  r.content_type = "text/html; charset=utf-8";
  r.body = kLoginPage;
  r.body.replace(r.body.find("@MESSAGE@"), 9, message);
  return r;
}

WebResponse SeeOther(const char* location, const std::string& set_cookie) {
  WebResponse r;
  r.status = 303;
  r.content_type = "text/plain; charset=utf-8";
  r.headers.push_back({"Location", location});
  r.headers.push_back({"Set-Cookie", set_cookie});
  return r;
}

}  // namespace

WebResponse Handle(const coordinator::Coordinator& c, const std::string& method, const std::string& path,
                   const std::string& query) {
  if (method != "GET" && method != "HEAD") return Error(405, "read-only: GET only");
  if (path == "/" || path == "/index.html") return Asset("text/html; charset=utf-8", kWebIndexHtml);
  if (path == "/job") return Asset("text/html; charset=utf-8", kWebJobHtml);
  if (path == "/static/app.js") return Asset("text/javascript; charset=utf-8", kWebAppJs);
  if (path == "/static/style.css") return Asset("text/css; charset=utf-8", kWebStyleCss);
  if (path == "/api/jobs") {
    v1::ListJobsRequest req;
    req.set_page_size(200);
    v1::ListJobsResponse resp;
    const grpc::Status st = const_cast<coordinator::Coordinator&>(c).ListJobs(nullptr, &req, &resp);
    if (!st.ok()) return Error(500, st.error_message());
    return Json(resp);
  }
  if (path == "/api/job") {
    const std::string id = QueryParam(query, "id");
    if (id.empty()) return Error(400, "id: missing (/api/job?id=job-1)");
    auto job = c.BuildJob(id, true);
    if (!job.ok()) return Error(job.status().code() == absl::StatusCode::kNotFound ? 404 : 500,
                                std::string(job.status().message()));
    return Json(*job);
  }
  return Error(404, absl::StrCat("no page ", path));
}

WebResponse HandleLogin(auth::HttpAuth& auth, const auth::HttpRequest& request, const std::string& body) {
  if (request.path == "/logout") {
    if (request.method != "POST") return Error(405, "POST /logout");
    auto cookie = auth.Logout(request);
    if (!cookie.ok()) return Error(403, std::string(cookie.status().message()));
    return SeeOther("/login", *cookie);
  }
  if (request.method == "GET" || request.method == "HEAD") return LoginPage(200, "");
  if (request.method != "POST") return Error(405, "GET or POST /login");
  const std::string token = QueryParam(body, "token");
  auto cookie = auth.Login(request, token);
  if (cookie.status().code() == absl::StatusCode::kPermissionDenied) {
    return Error(403, std::string(cookie.status().message()));
  }
  if (!cookie.ok()) return LoginPage(401, "<p class=\"fail\">Unknown token.</p>\n");
  return SeeOther("/", *cookie);
}

int WebServer::Dispatch(::mg_connection* conn, void* self) {
  const mg_request_info* ri = mg_get_request_info(conn);
  auto* s = static_cast<WebServer*>(self);
  const auth::HttpRequest request = RequestOf(conn);
  if (s->auth_ != nullptr) {
    if (request.path == "/login" || request.path == "/logout") {
      std::string body;
      if (request.method == "POST") {
        if (ri->content_length < 0 || ri->content_length > static_cast<long long>(kMaxFormBytes)) {
          return Respond(conn, Error(413, "a sign-in form is at most 4096 bytes with a Content-Length"));
        }
        body.resize(static_cast<size_t>(ri->content_length));
        size_t got = 0;
        for (int n; got < body.size() && (n = mg_read(conn, body.data() + got, body.size() - got)) > 0;) got += n;
        body.resize(got);
      }
      return Respond(conn, HandleLogin(*s->auth_, request, body));
    }
    if (request.path != "/static/style.css") {  // the sign-in page's style; no data
      auto caller = s->auth_->Check(request);
      if (!caller.ok()) {
        const bool page = request.path == "/" || request.path == "/index.html" || request.path == "/job";
        return Respond(conn, Unauthorized(std::string(caller.status().message()), page));
      }
    }
  }
  return Respond(conn, Handle(*s->coordinator_, request.method, request.path, ri->query_string ? ri->query_string : ""));
}

absl::StatusOr<std::unique_ptr<WebServer>> WebServer::Start(coordinator::Coordinator* coordinator,
                                                            const std::string& listen, auth::HttpAuth* auth) {
  std::unique_ptr<WebServer> s(new WebServer());
  s->coordinator_ = coordinator;
  s->auth_ = auth;
  auto ctx = StartCivet(listen, 4, &WebServer::Dispatch, s.get(), "web UI", &s->port_);
  if (!ctx.ok()) return ctx.status();
  s->ctx_ = *ctx;
  return s;
}

WebServer::~WebServer() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

}  // namespace web
}  // namespace mxval
