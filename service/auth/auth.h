// Authentication and authorization for the coordinator's gRPC services.
//
// Transport: TLS on the listener (certificate and key from files). Workers
// authenticate with client certificates signed by the configured client CA
// (mutual TLS); a worker's identity is its certificate's common name, and a
// WorkerService call must use that name as its worker_id. Clients (CI bots,
// engineers) send `authorization: Bearer <token>`; TokenProcessor, a gRPC
// server-side AuthMetadataProcessor, checks the token against SHA-256
// digests from the auth config, removes it from the call's metadata (no
// handler, log or error ever sees it) and attaches the principal and role
// to the call's auth context. Authorizer::Check enforces a role per method.
// Every denial is counted (metrics) and logged by principal or peer, without
// the token.
#ifndef MXVAL_SERVICE_AUTH_AUTH_H_
#define MXVAL_SERVICE_AUTH_AUTH_H_

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/auth_metadata_processor.h"
#include "common/digest.h"
#include "mxval/v1/mxval.pb.h"

namespace mxval {
namespace auth {

using ::mxval::Sha256Hex;  // common/digest.h

// INVALID_ARGUMENT naming tokens[i].field for a bad digest, an empty or
// duplicate name, or a missing role.
absl::Status ValidateConfig(const v1::AuthConfig& config);
// .yaml/.yml or JSON; NOT_FOUND if unreadable.
absl::StatusOr<v1::AuthConfig> LoadConfig(const std::string& path);

// Called on every denial: (reason, method, principal or peer).
using DenialHook = std::function<void(const std::string& reason, const std::string& method, const std::string& who)>;

// Refuses a call whose authorization is not `Bearer <known token>` (reasons
// "bad_scheme", "unknown_token" to `on_denied`, with the method from the
// call's :path and the caller's certificate name or "unauthenticated peer":
// gRPC gives a metadata processor no peer address). A call without an
// authorization header passes: the method decides (workers use certificates).
class TokenProcessor : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenProcessor(v1::AuthConfig config, DenialHook on_denied = nullptr)
      : config_(std::move(config)), on_denied_(std::move(on_denied)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata, OutputMetadata* response_metadata) override;
  // The entry a token belongs to, or null (constant-time digest compare).
  const v1::AuthToken* Find(const std::string& token) const;

 private:
  v1::AuthConfig config_;
  DenialHook on_denied_;
};

struct Caller {
  std::string principal;  // token name, worker certificate name, or "local"
  v1::Role role = v1::ROLE_UNSPECIFIED;
};


class Authorizer {
 public:
  Authorizer(v1::AuthConfig config, DenialHook on_denied);
  // UNAUTHENTICATED without a valid token; PERMISSION_DENIED below `needed`.
  // A null context (an in-process call) is allowed as admin "local".
  absl::StatusOr<Caller> Check(const grpc::ServerContext* ctx, v1::Role needed, const char* method) const;
  // For WorkerService: the peer must present a verified client certificate
  // (listed in config.workers when that list is non-empty) whose common name
  // equals `worker_id`. UNAUTHENTICATED / PERMISSION_DENIED otherwise.
  absl::Status CheckWorker(const grpc::ServerContext* ctx, const std::string& worker_id, const char* method) const;
  void Deny(const std::string& reason, const char* method, const std::string& who) const;

 private:
  v1::AuthConfig config_;
  std::set<std::string> workers_;
  DenialHook on_denied_;
};

// TLS material for the server, from files. INVALID_ARGUMENT naming the flag.
struct ServerTlsFiles {
  std::string cert, key, client_ca;  // client_ca: enables worker client certificates
};
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const ServerTlsFiles& files,
                                                                           std::shared_ptr<TokenProcessor> processor);

// Client side: TLS with the server CA (and, for workers, a client
// certificate), plus a bearer token when given. Empty ca: insecure.
struct ClientTlsFiles {
  std::string ca, cert, key;
  std::string token;
};
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(const ClientTlsFiles& files);

}  // namespace auth
}  // namespace mxval

#endif  // MXVAL_SERVICE_AUTH_AUTH_H_
