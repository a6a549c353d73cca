#include "service/web/web_ui.h"

#include <civetweb.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "mxval/web_assets.h"

namespace mxval {
namespace web {
namespace {

WebResponse Json(const google::protobuf::Message& m) {
  WebResponse r;
  r.content_type = "application/json";
  google::protobuf::util::JsonPrintOptions o;
  o.always_print_primitive_fields = false;
  (void)google::protobuf::util::MessageToJsonString(m, &r.body, o);
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
  char buf[512];
  const int n = mg_get_var(query.c_str(), query.size(), key, buf, sizeof(buf));
  return n > 0 ? std::string(buf, n) : std::string();
}

const char* StatusText(int s) {
  switch (s) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    default: return "Internal Server Error";
  }
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

int WebServer::Dispatch(::mg_connection* conn, void* self) {
  const mg_request_info* ri = mg_get_request_info(conn);
  auto* s = static_cast<WebServer*>(self);
  const WebResponse r = Handle(*s->coordinator_, ri->request_method ? ri->request_method : "",
                               ri->local_uri ? ri->local_uri : "/", ri->query_string ? ri->query_string : "");
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n"
            "X-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n"
            "Content-Security-Policy: default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            "frame-ancestors 'none'\r\nConnection: close\r\n\r\n",
            r.status, StatusText(r.status), r.content_type.c_str(), r.body.size());
  if (std::strcmp(ri->request_method ? ri->request_method : "", "HEAD") != 0) mg_write(conn, r.body.data(), r.body.size());
  return r.status;
}

absl::StatusOr<std::unique_ptr<WebServer>> WebServer::Start(coordinator::Coordinator* coordinator,
                                                            const std::string& listen) {
  std::unique_ptr<WebServer> s(new WebServer());
  s->coordinator_ = coordinator;
  const char* options[] = {"listening_ports", listen.c_str(), "num_threads", "4", "enable_directory_listing", "no",
                           nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  mg_init_library(0);
  s->ctx_ = mg_start(&callbacks, nullptr, options);
  if (s->ctx_ == nullptr) return absl::UnavailableError(absl::StrCat("web UI: cannot listen on ", listen));
  mg_set_request_handler(s->ctx_, "/", &WebServer::Dispatch, s.get());
  mg_server_port ports[4];
  const int n = mg_get_server_ports(s->ctx_, 4, ports);
  s->port_ = n > 0 ? ports[0].port : 0;
  return s;
}

WebServer::~WebServer() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

}  // namespace web
}  // namespace mxval
