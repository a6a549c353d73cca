#include "service/auth/undecodable_request.h"

#include <string>

#include "grpcpp/grpcpp.h"

namespace mxval {
namespace auth {
namespace {

using grpc::experimental::InterceptionHookPoints;

class UndecodableRequestInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit UndecodableRequestInterceptor(grpc::experimental::ServerRpcInfo* info)
      : method_(info->method() != nullptr ? info->method() : ""),
        single_request_(info->type() == grpc::experimental::ServerRpcInfo::Type::UNARY ||
                        info->type() == grpc::experimental::ServerRpcInfo::Type::SERVER_STREAMING) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* m) override {
    // Only where the server parses the one request before the handler: in a
    // client stream a missing message is also the stream's normal end.
    if (single_request_ && m->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        m->GetRecvMessage() == nullptr) {
      undecodable_ = true;
    }
    if (undecodable_ && m->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS) &&
        m->GetSendStatus().error_code() == grpc::StatusCode::INTERNAL) {
      m->ModifySendStatus(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                       "request: cannot be parsed as the request message of " + method_));
    }
    m->Proceed();
  }

 private:
  const std::string method_;
  const bool single_request_;
  bool undecodable_ = false;  // one interceptor per call; its hooks run in order
};

class Factory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    return new UndecodableRequestInterceptor(info);
  }
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> UndecodableRequestStatus() {
  return std::make_unique<Factory>();
}

}  // namespace auth
}  // namespace mxval
