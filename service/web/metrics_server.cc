#include "service/web/metrics_server.h"

#include <civetweb.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"
#include "service/web/civet_http.h"

namespace mxval {
namespace web {

int MetricsServer::Dispatch(::mg_connection* conn, void* self) {
  auto* s = static_cast<MetricsServer*>(self);
  const auth::HttpRequest request = RequestOf(conn);
  if (s->auth_ != nullptr) {
    auto caller = s->auth_->Check(request);
    if (!caller.ok()) return Respond(conn, Unauthorized(std::string(caller.status().message()), false));
  }
  WebResponse r;
  r.content_type = "text/plain; charset=utf-8";
  if (request.method != "GET" && request.method != "HEAD") {
    r.status = 405;
    r.body = "GET /metrics\n";
  } else if (request.path != "/metrics") {
    r.status = 404;
    r.body = "metrics are at /metrics\n";
  } else {
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = prometheus::TextSerializer().Serialize(s->registry_->Collect());
  }
  return Respond(conn, r);
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& listen,
                                                                    std::shared_ptr<prometheus::Registry> registry,
                                                                    auth::HttpAuth* auth) {
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->registry_ = std::move(registry);
  s->auth_ = auth;
  const char* options[] = {"listening_ports", listen.c_str(), "num_threads", "2", "enable_directory_listing", "no",
                           nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  mg_init_library(0);
  s->ctx_ = mg_start(&callbacks, nullptr, options);
  if (s->ctx_ == nullptr) return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", listen));
  mg_set_request_handler(s->ctx_, "/", &MetricsServer::Dispatch, s.get());
  mg_server_port ports[4];
  const int n = mg_get_server_ports(s->ctx_, 4, ports);
  s->port_ = n > 0 ? ports[0].port : 0;
  return s;
}

MetricsServer::~MetricsServer() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

}  // namespace web
}  // namespace mxval
