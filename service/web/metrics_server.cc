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
  auto ctx = StartCivet(listen, 2, &MetricsServer::Dispatch, s.get(), "metrics", &s->port_);
  if (!ctx.ok()) return ctx.status();
  s->ctx_ = *ctx;
  return s;
}

MetricsServer::~MetricsServer() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

}  // namespace web
}  // namespace mxval
