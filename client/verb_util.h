// Shared plumbing of the CLI's verbs: exit codes, flag parsing, gRPC client
// contexts and credentials, output files.
#ifndef MXVAL_CLIENT_VERB_UTIL_H_
#define MXVAL_CLIENT_VERB_UTIL_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cli.h"
#include "client/flags.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"

namespace mxval {

// Exit codes of every verb (client/cli.h lists what each means).
inline constexpr int kOk = kExitOk, kFailed = kExitFailed, kUsage = kExitUsage, kInternal = kExitInternal,
                     kNotValidated = kExitNotValidated, kLimited = kExitLimited;

// The largest message a coordinator sends (CoordinatorOptions::
// max_message_bytes and StartServer's default): every CLI channel receives up
// to it, so whatever the server may answer, the CLI can read.
inline constexpr int kMaxMessageBytes = 16 << 20;

// Caller-supplied text (worker ids, job names, triage reasons, server error
// messages) made safe to print on a terminal: C0 controls (ESC, CR, BS, ...),
// DEL, C1 controls (U+0080..U+009F) and bytes that are not valid UTF-8 are
// shown escaped as \xHH, so no text can move the cursor, clear the screen or
// rewrite what was printed before it. With `keep_line_breaks`, '\n' and '\t'
// pass (multi-line messages); otherwise they are escaped too (one table cell).
std::string SanitizeForTerminal(absl::string_view s, bool keep_line_breaks = false);

// Prints "mxval VERB: MSG" (sanitised) and a pointer to --help; returns kUsage.
int Usage(std::ostream& err, const std::string& verb, const std::string& msg);
// -1: go on; otherwise the exit code (kOk after --help, kUsage on a bad flag).
int ParseFlags(FlagSet& f, const std::vector<std::string>& args, const std::string& verb, std::ostream& out,
               std::ostream& err);
std::unique_ptr<grpc::ClientContext> Ctx(absl::Duration deadline);
// Prints the status (its message sanitised: it is the server's text) and
// returns the exit code: kUsage for the caller's mistakes (INVALID_ARGUMENT,
// NOT_FOUND, UNAUTHENTICATED, PERMISSION_DENIED), kLimited for
// RESOURCE_EXHAUSTED (a rate or quota limit: retry later; the wait the
// server suggests in its `retry-after-ms` trailer is printed when `ctx`, the
// call's context, carries one), else kInternal (unavailable, internal, and
// a message over gRPC's size limit).
int GrpcExit(std::ostream& err, const std::string& verb, const grpc::Status& st,
             const grpc::ClientContext* ctx = nullptr);

// A message as proto3 JSON (with whitespace), or INTERNAL when it cannot be
// printed (a Duration or Timestamp outside its range): never partial JSON.
absl::StatusOr<std::string> ToJson(const google::protobuf::Message& m);

// Retries of idempotent calls across a coordinator restart.
struct RetryOptions {
  // Total time spent waiting between attempts; zero: a single attempt.
  absl::Duration budget = absl::Seconds(30);
  // Backoff before retry i (from 0): min(initial * 2^i, max), scaled by a
  // jitter factor in [0.5, 1).
  absl::Duration initial_backoff = absl::Milliseconds(200);
  absl::Duration max_backoff = absl::Seconds(4);
  // DEADLINE_EXCEEDED is retried too (the attempt may not have reached a
  // coordinator); only for calls that are safe to repeat.
  bool retry_deadline_exceeded = true;
  // Injected for tests: the clock, the wait, and a uniform draw in [0, 1).
  std::function<absl::Time()> now;
  std::function<void(absl::Duration)> sleep;
  std::function<double()> uniform;
};
// The wait before retry `attempt` (0-based) for a draw `u` in [0, 1).
absl::Duration RetryBackoff(const RetryOptions& o, int attempt, double u);
// Whether `st` is one a retry may cure: UNAVAILABLE, and DEADLINE_EXCEEDED
// when o.retry_deadline_exceeded.
bool RetryableStatus(const RetryOptions& o, const grpc::Status& st);
// Calls `call` until it returns a status that is not retryable or the
// budget would be exceeded by the next wait; logs each retry on `err`
// ("mxval VERB: coordinator unavailable (...); retry 2 in 0.4 s, 29.2 s
// left"). Returns the last status.
grpc::Status CallWithRetry(const std::string& verb, const RetryOptions& o, std::ostream& err,
                           const std::function<grpc::Status()>& call);

// Client credentials from the environment: MXVAL_TLS_CA (the coordinator's
// CA; enables TLS), MXVAL_TOKEN_FILE or MXVAL_TOKEN (bearer token), and for
// workers MXVAL_TLS_CERT / MXVAL_TLS_KEY (client certificate); a non-empty
// flag overrides its variable. Unset: plaintext.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> EnvCredentials(const std::string& ca_flag = "",
                                                                        const std::string& cert_flag = "",
                                                                        const std::string& key_flag = "");
// A channel to the coordinator. Unless `args` sets them: receives up to
// kMaxMessageBytes, and reconnects within a second of a restarted
// coordinator coming back (gRPC's default backoff grows to two minutes).
std::shared_ptr<grpc::Channel> ClientChannel(const std::string& address,
                                             const std::shared_ptr<grpc::ChannelCredentials>& creds,
                                             const grpc::ChannelArguments& args = grpc::ChannelArguments());
// Writes to stdout ("-") or a file; kInternal when the file cannot be written.
int WriteOutput(const std::string& verb, const std::string& out_path, const std::string& text, std::ostream& out,
                std::ostream& err);

}  // namespace mxval

#endif  // MXVAL_CLIENT_VERB_UTIL_H_
