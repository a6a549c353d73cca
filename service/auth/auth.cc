#include "service/auth/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/bounded_read.h"
#include "common/yaml_json.h"
#include "google/protobuf/util/json_util.h"

namespace mxval {
namespace auth {
namespace {

// Certificates, keys and the auth config are small; this bounds a wrong path.
constexpr int64_t kMaxAuthFileBytes = 1 << 20;
constexpr char kPrincipal[] = "mxval.principal";
constexpr char kRole[] = "mxval.role";

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* flag) {
  auto s = ReadFileBounded(path, kMaxAuthFileBytes);  // a regular file: PEM files are a few KiB
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", s.status().message()));
  if (s->empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": '", path, "' is empty"));
  return s;
}

std::string One(const grpc::AuthContext& c, const char* name, int* count) {
  std::string v;
  *count = 0;
  for (const grpc::string_ref& r : c.FindPropertyValues(name)) {
    v.assign(r.data(), r.size());
    ++*count;
  }
  return v;
}

const char* RoleName(v1::Role r) {
  switch (r) {
    case v1::ROLE_VIEWER: return "viewer";
    case v1::ROLE_SUBMITTER: return "submitter";
    case v1::ROLE_ADMIN: return "admin";
    default: return "none";
  }
}

}  // namespace


absl::Status ValidateConfig(const v1::AuthConfig& c) {
  std::set<std::string> names;
  for (int i = 0; i < c.tokens_size(); ++i) {
    const v1::AuthToken& t = c.tokens(i);
    const std::string f = absl::StrCat("tokens[", i, "]");
    if (t.name().empty()) return absl::InvalidArgumentError(f + ".name: empty");
    if (!names.insert(t.name()).second) return absl::InvalidArgumentError(f + ".name: '" + t.name() + "' used twice");
    if (!IsSha256Hex(t.sha256())) return absl::InvalidArgumentError(f + ".sha256: not 64 lowercase hex digits (printf %s TOKEN | sha256sum)");
    if (t.role() == v1::ROLE_UNSPECIFIED) return absl::InvalidArgumentError(f + ".role: missing");
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::AuthConfig> LoadConfig(const std::string& path) {
  auto text = ReadFileBounded(path, kMaxAuthFileBytes);
  if (!text.ok()) return text.status();
  std::string json = std::move(*text);
  if (absl::EndsWith(path, ".yaml") || absl::EndsWith(path, ".yml")) {
    auto j = YamlToJson(json);
    if (!j.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", j.status().message()));
    json = *j;
  }
  v1::AuthConfig c;
  google::protobuf::util::JsonParseOptions o;
  o.ignore_unknown_fields = false;
  const auto st = google::protobuf::util::JsonStringToMessage(json, &c, o);
  if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", st.message().as_string()));
  if (auto v = ValidateConfig(c); !v.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", v.message()));
  return c;
}

const v1::AuthToken* TokenProcessor::Find(const std::string& token) const {
  const std::string digest = Sha256Hex(token);
  const v1::AuthToken* found = nullptr;
  for (const v1::AuthToken& t : config_.tokens()) {
    if (t.sha256().size() == digest.size() && CRYPTO_memcmp(t.sha256().data(), digest.data(), digest.size()) == 0) {
      found = &t;
    }
  }
  return found;
}

grpc::Status TokenProcessor::Process(const InputMetadata& md, grpc::AuthContext* context, OutputMetadata* consumed,
                                     OutputMetadata*) {
  auto it = md.find("authorization");
  if (it == md.end()) return grpc::Status::OK;  // no token: the method decides (workers use certificates)
  const std::string value(it->second.data(), it->second.size());
  consumed->insert({"authorization", value});  // handlers never see the token
  auto deny = [&](const char* reason) {
    if (!on_denied_) return;
    std::string method = "?";
    if (auto p = md.find(":path"); p != md.end()) method.assign(p->second.data(), std::min<size_t>(p->second.size(), 200));
    int n_cn = 0;
    const std::string who = One(*context, "x509_common_name", &n_cn);
    on_denied_(reason, method, who.empty() ? "unauthenticated peer" : who);
  };
  constexpr char kBearer[] = "Bearer ";
  if (value.rfind(kBearer, 0) != 0) {
    deny("bad_scheme");
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "authorization: expected 'Bearer <token>'");
  }
  const v1::AuthToken* t = Find(value.substr(sizeof(kBearer) - 1));
  if (t == nullptr) {
    deny("unknown_token");
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "authorization: unknown token");
  }
  // Connection-level properties: a second, different token on the same
  // connection makes them ambiguous, and Authorizer then refuses.
  int n = 0;
  const std::string have = One(*context, kPrincipal, &n);
  if (n == 0 || have != t->name()) {
    context->AddProperty(kPrincipal, t->name());
    context->AddProperty(kRole, RoleName(t->role()));
  }
  return grpc::Status::OK;
}

Authorizer::Authorizer(v1::AuthConfig config, DenialHook on_denied)
    : config_(std::move(config)), workers_(config_.workers().begin(), config_.workers().end()),
      on_denied_(std::move(on_denied)) {}

void Authorizer::Deny(const std::string& reason, const char* method, const std::string& who) const {
  if (on_denied_) on_denied_(reason, method, who);
}

absl::StatusOr<Caller> Authorizer::Check(const grpc::ServerContext* ctx, v1::Role needed, const char* method) const {
  if (ctx == nullptr) return Caller{"local", v1::ROLE_ADMIN};
  const std::shared_ptr<const grpc::AuthContext> ac = ctx->auth_context();
  int np = 0, nr = 0;
  const std::string principal = ac ? One(*ac, kPrincipal, &np) : "";
  const std::string role = ac ? One(*ac, kRole, &nr) : "";
  if (np != 1 || nr != 1) {
    Deny(np == 0 ? "missing_token" : "ambiguous_token", method, ctx->peer());
    return absl::UnauthenticatedError(np == 0 ? "this call needs a bearer token (authorization: Bearer ...)"
                                              : "several tokens on one connection; use one channel per token");
  }
  v1::Role have = role == "admin" ? v1::ROLE_ADMIN : role == "submitter" ? v1::ROLE_SUBMITTER
                                                     : role == "viewer"  ? v1::ROLE_VIEWER
                                                                         : v1::ROLE_UNSPECIFIED;
  if (have < needed) {
    Deny("role", method, principal);
    return absl::PermissionDeniedError(absl::StrCat(method, " needs role ", RoleName(needed), "; '", principal,
                                                    "' has ", RoleName(have)));
  }
  return Caller{principal, have};
}

absl::Status Authorizer::CheckWorker(const grpc::ServerContext* ctx, const std::string& worker_id,
                                     const char* method) const {
  if (ctx == nullptr) return absl::OkStatus();
  const std::shared_ptr<const grpc::AuthContext> ac = ctx->auth_context();
  if (!ac || !ac->IsPeerAuthenticated()) {
    Deny("no_client_certificate", method, ctx->peer());
    return absl::UnauthenticatedError("workers must present a client certificate signed by the coordinator's client CA");
  }
  int n = 0;
  const std::string cn = One(*ac, "x509_common_name", &n);
  if (n != 1 || cn.empty()) {
    Deny("no_certificate_name", method, ctx->peer());
    return absl::UnauthenticatedError("the client certificate has no common name");
  }
  if (!workers_.empty() && !workers_.count(cn)) {
    Deny("unknown_worker", method, cn);
    return absl::PermissionDeniedError(absl::StrCat("worker certificate '", cn, "' is not in the auth config's workers"));
  }
  if (worker_id != cn) {
    Deny("worker_id_mismatch", method, cn);
    return absl::PermissionDeniedError(
        absl::StrCat("worker_id: '", worker_id, "' is not the certificate's name '", cn, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const ServerTlsFiles& f,
                                                                           std::shared_ptr<TokenProcessor> processor) {
  auto cert = ReadFile(f.cert, "--tls-cert");
  if (!cert.ok()) return cert.status();
  auto key = ReadFile(f.key, "--tls-key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions o(f.client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                                          : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  if (!f.client_ca.empty()) {
    auto ca = ReadFile(f.client_ca, "--tls-client-ca");
    if (!ca.ok()) return ca.status();
    o.pem_root_certs = *ca;
  }
  o.pem_key_cert_pairs.push_back({*key, *cert});
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::SslServerCredentials(o);
  if (processor) creds->SetAuthMetadataProcessor(processor);
  return creds;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(const ClientTlsFiles& f) {
  if (f.ca.empty()) {
    if (!f.token.empty()) {
      return absl::InvalidArgumentError("a token needs TLS: give the coordinator's CA (--tls-ca / MXVAL_TLS_CA)");
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions o;
  auto ca = ReadFile(f.ca, "--tls-ca");
  if (!ca.ok()) return ca.status();
  o.pem_root_certs = *ca;
  if (!f.cert.empty() || !f.key.empty()) {
    auto cert = ReadFile(f.cert, "--tls-cert");
    if (!cert.ok()) return cert.status();
    auto key = ReadFile(f.key, "--tls-key");
    if (!key.ok()) return key.status();
    o.pem_cert_chain = *cert;
    o.pem_private_key = *key;
  }
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::SslCredentials(o);
  if (!f.token.empty()) {
    creds = grpc::CompositeChannelCredentials(creds, grpc::AccessTokenCredentials(f.token));
  }
  return creds;
}

}  // namespace auth
}  // namespace mxval
