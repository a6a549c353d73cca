// Shared plumbing of the CLI's verbs: exit codes, flag parsing, gRPC client
// contexts and credentials, output files.
#ifndef MXVAL_CLIENT_VERB_UTIL_H_
#define MXVAL_CLIENT_VERB_UTIL_H_

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/flags.h"
#include "grpcpp/grpcpp.h"

namespace mxval {

// Exit codes of every verb: 0 ok, 1 something the gate fails on, 2 bad
// input, 3 internal or unavailable.
inline constexpr int kOk = 0, kFailed = 1, kUsage = 2, kInternal = 3;

// Prints "mxval VERB: MSG" and a pointer to --help; returns kUsage.
int Usage(std::ostream& err, const std::string& verb, const std::string& msg);
// -1: go on; otherwise the exit code (kOk after --help, kUsage on a bad flag).
int ParseFlags(FlagSet& f, const std::vector<std::string>& args, const std::string& verb, std::ostream& out,
               std::ostream& err);
std::unique_ptr<grpc::ClientContext> Ctx(absl::Duration deadline);
// Prints the status; kUsage for the caller's mistakes (INVALID_ARGUMENT,
// NOT_FOUND, UNAUTHENTICATED, PERMISSION_DENIED), else kInternal.
int GrpcExit(std::ostream& err, const std::string& verb, const grpc::Status& st);
// Client credentials from the environment: MXVAL_TLS_CA (the coordinator's
// CA; enables TLS), MXVAL_TOKEN_FILE or MXVAL_TOKEN (bearer token), and for
// workers MXVAL_TLS_CERT / MXVAL_TLS_KEY (client certificate); a non-empty
// flag overrides its variable. Unset: plaintext.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> EnvCredentials(const std::string& ca_flag = "",
                                                                        const std::string& cert_flag = "",
                                                                        const std::string& key_flag = "");
std::shared_ptr<grpc::Channel> ClientChannel(const std::string& address,
                                             const std::shared_ptr<grpc::ChannelCredentials>& creds,
                                             const grpc::ChannelArguments& args = grpc::ChannelArguments());
// Writes to stdout ("-") or a file; kInternal when the file cannot be written.
int WriteOutput(const std::string& verb, const std::string& out_path, const std::string& text, std::ostream& out,
                std::ostream& err);
// The last `cap` bytes of a file or pipe; *truncated (optional) says
// whether anything before them was dropped. NOT_FOUND if unreadable.
absl::StatusOr<std::string> ReadTail(const std::string& path, int64_t cap, bool* truncated = nullptr);

}  // namespace mxval

#endif  // MXVAL_CLIENT_VERB_UTIL_H_
