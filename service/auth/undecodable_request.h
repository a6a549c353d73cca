// INVALID_ARGUMENT for request bytes that are not the method's message.
//
// gRPC's generated synchronous services parse the request before the handler
// runs and, when that fails, answer INTERNAL with protobuf's
// InitializationErrorString() as the message, which is empty for proto3.
// A server interceptor sees that moment: the POST_RECV_MESSAGE hook carries
// no message when parsing failed, and the PRE_SEND_STATUS hook may replace
// the status. Only unary and server-streaming calls whose request did not
// parse are changed; a handler's own INTERNAL stays INTERNAL. In a client
// stream (UploadKernelLibrary) an unparsable message ends the stream for the
// handler like a normal end, and is answered by the handler.
#ifndef MXVAL_SERVICE_AUTH_UNDECODABLE_REQUEST_H_
#define MXVAL_SERVICE_AUTH_UNDECODABLE_REQUEST_H_

#include <memory>

#include "grpcpp/support/server_interceptor.h"

namespace mxval {
namespace auth {

// For grpc::ServerBuilder::experimental().SetInterceptorCreators.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> UndecodableRequestStatus();

}  // namespace auth
}  // namespace mxval

#endif  // MXVAL_SERVICE_AUTH_UNDECODABLE_REQUEST_H_
