#include "client/verb_util.h"

#include <chrono>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <fstream>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/bounded_read.h"
#include "google/protobuf/util/json_util.h"
#include "service/auth/auth.h"

namespace mxval {

namespace {

// Length of the well-formed UTF-8 sequence at s[i] (shortest form, no
// surrogates, at most U+10FFFF), or 0 if the bytes there are not one.
size_t Utf8SequenceLength(absl::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // bounds of the second byte
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size() || b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  return n;
}

void AppendHexEscape(std::string* o, unsigned char c) { absl::StrAppend(o, absl::StrFormat("\\x%02x", c)); }

}  // namespace

std::string SanitizeForTerminal(absl::string_view s, bool keep_line_breaks) {
  std::string o;
  o.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = Utf8SequenceLength(s, i);
    if (n == 0) {  // not UTF-8: the byte, escaped
      AppendHexEscape(&o, c);
      ++i;
    } else if (n == 1) {
      if ((c < 0x20 || c == 0x7F) && !(keep_line_breaks && (c == '\n' || c == '\t'))) AppendHexEscape(&o, c);
      else o += static_cast<char>(c);
      ++i;
    } else if (c == 0xC2 && static_cast<unsigned char>(s[i + 1]) <= 0x9F) {  // C1 control U+0080..U+009F
      AppendHexEscape(&o, c);
      AppendHexEscape(&o, static_cast<unsigned char>(s[i + 1]));
      i += 2;
    } else {
      o.append(s.data() + i, n);
      i += n;
    }
  }
  return o;
}

int Usage(std::ostream& err, const std::string& verb, const std::string& msg) {
  err << "mxval " << verb << ": " << SanitizeForTerminal(msg, /*keep_line_breaks=*/true) << "\n(see mxval " << verb
      << " --help)\n";
  return kUsage;
}

int ParseFlags(FlagSet& f, const std::vector<std::string>& args, const std::string& verb, std::ostream& out,
               std::ostream& err) {
  absl::Status st = f.Parse(args);
  if (!st.ok()) return Usage(err, verb, std::string(st.message()));
  if (f.help_requested()) {
    out << f.Usage();
    return kOk;
  }
  return -1;
}

std::unique_ptr<grpc::ClientContext> Ctx(absl::Duration d) {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d));
  return c;
}

int GrpcExit(std::ostream& err, const std::string& verb, const grpc::Status& st, const grpc::ClientContext* ctx) {
  err << "mxval " << verb << ": " << SanitizeForTerminal(st.error_message(), /*keep_line_breaks=*/true) << " ("
      << st.error_code() << ")\n";
  switch (st.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::UNAUTHENTICATED:    // missing or unknown token, no client certificate
    case grpc::StatusCode::PERMISSION_DENIED:  // the token's role does not allow the call
      return kUsage;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: {
      // gRPC's own message size limits: not a limit that waiting lifts.
      if (st.error_message().find("larger than max") != std::string::npos) return kInternal;
      int64_t ms = -1;
      if (ctx != nullptr) {
        const auto& trailers = ctx->GetServerTrailingMetadata();
        if (auto it = trailers.find("retry-after-ms"); it != trailers.end()) {
          if (!absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &ms)) ms = -1;
        }
      }
      err << "mxval " << verb << ": refused for a limit; retry later"
          << (ms >= 0 ? absl::StrCat(" (the coordinator suggests after ", ms, " ms)") : std::string()) << "\n";
      return kLimited;
    }
    default:
      return kInternal;
  }
}

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions jo;
  jo.add_whitespace = true;
  std::string s;
  if (auto st = google::protobuf::util::MessageToJsonString(m, &s, jo); !st.ok()) {
    return absl::InternalError(absl::StrCat("cannot print the answer as JSON: ", st.ToString()));
  }
  return s;
}

absl::Duration RetryBackoff(const RetryOptions& o, int attempt, double u) {
  absl::Duration d = o.initial_backoff;
  for (int i = 0; i < attempt && d < o.max_backoff; ++i) d *= 2;
  d = std::min(d, o.max_backoff);
  return d * (0.5 + 0.5 * std::clamp(u, 0.0, 1.0));
}

bool RetryableStatus(const RetryOptions& o, const grpc::Status& st) {
  return st.error_code() == grpc::StatusCode::UNAVAILABLE ||
         (o.retry_deadline_exceeded && st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
}

grpc::Status CallWithRetry(const std::string& verb, const RetryOptions& o, std::ostream& err,
                           const std::function<grpc::Status()>& call) {
  absl::BitGen gen;
  const auto now = o.now ? o.now : [] { return absl::Now(); };
  const auto sleep = o.sleep ? o.sleep : [](absl::Duration d) { absl::SleepFor(d); };
  const auto uniform = o.uniform ? o.uniform : [&gen] { return absl::Uniform(gen, 0.0, 1.0); };
  const absl::Time end = now() + o.budget;
  for (int attempt = 0;; ++attempt) {
    const grpc::Status st = call();
    if (st.ok() || !RetryableStatus(o, st)) return st;
    const absl::Duration wait = RetryBackoff(o, attempt, uniform());
    const absl::Duration left = end - now();
    if (wait > left) return st;
    err << "mxval " << verb << ": coordinator unavailable ("
        << SanitizeForTerminal(st.error_message()).substr(0, 200) << ", " << st.error_code() << "); retry "
        << attempt + 1 << " in " << absl::StrFormat("%.1f", absl::ToDoubleSeconds(wait)) << " s, "
        << absl::StrFormat("%.1f", absl::ToDoubleSeconds(left - wait)) << " s of retries left\n";
    err.flush();
    sleep(wait);
  }
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> EnvCredentials(const std::string& ca_flag,
                                                                        const std::string& cert_flag,
                                                                        const std::string& key_flag) {
  auto env = [](const char* k) { const char* v = std::getenv(k); return std::string(v ? v : ""); };
  auth::ClientTlsFiles f;
  f.ca = ca_flag.empty() ? env("MXVAL_TLS_CA") : ca_flag;
  f.cert = cert_flag.empty() ? env("MXVAL_TLS_CERT") : cert_flag;
  f.key = key_flag.empty() ? env("MXVAL_TLS_KEY") : key_flag;
  f.token = env("MXVAL_TOKEN");
  if (const std::string tf = env("MXVAL_TOKEN_FILE"); !tf.empty()) {
    auto text = ReadFileBounded(tf, 64 << 10);  // a token is one short line; a device is refused
    if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat("MXVAL_TOKEN_FILE: ", text.status().message()));
    f.token = text->substr(0, text->find('\n'));
    while (!f.token.empty() && (f.token.back() == '\r' || f.token.back() == ' ')) f.token.pop_back();
  }
  return auth::ChannelCredentials(f);
}

int WriteOutput(const std::string& verb, const std::string& out_path, const std::string& text, std::ostream& out,
                std::ostream& err) {
  if (out_path == "-") {
    out << text;
    return kOk;
  }
  std::ofstream f(out_path);
  f << text;
  if (!f) {
    err << "mxval " << verb << ": cannot write '" << out_path << "'\n";
    return kInternal;
  }
  return kOk;
}

std::shared_ptr<grpc::Channel> ClientChannel(const std::string& address,
                                             const std::shared_ptr<grpc::ChannelCredentials>& creds,
                                             const grpc::ChannelArguments& args) {
  grpc::ChannelArguments a = args;
  const grpc_channel_args c = a.c_channel_args();
  auto has = [&c](const char* key) {
    for (size_t i = 0; i < c.num_args; ++i)
      if (std::strcmp(c.args[i].key, key) == 0) return true;
    return false;
  };
  const bool receive = has(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH), backoff = has(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS);
  if (!receive) a.SetMaxReceiveMessageSize(kMaxMessageBytes);
  if (!backoff) {
    a.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    a.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  }
  return grpc::CreateCustomChannel(address, creds, a);
}

}  // namespace mxval
