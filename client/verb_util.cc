#include "client/verb_util.h"

#include <chrono>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "service/auth/auth.h"

namespace mxval {

int Usage(std::ostream& err, const std::string& verb, const std::string& msg) {
  err << "mxval " << verb << ": " << msg << "\n(see mxval " << verb << " --help)\n";
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

int GrpcExit(std::ostream& err, const std::string& verb, const grpc::Status& st) {
  err << "mxval " << verb << ": " << st.error_message() << " (" << st.error_code() << ")\n";
  switch (st.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::UNAUTHENTICATED:    // missing or unknown token, no client certificate
    case grpc::StatusCode::PERMISSION_DENIED:  // the token's role does not allow the call
      return kUsage;
    default:
      return kInternal;
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
    std::ifstream in(tf);
    if (!in) return absl::InvalidArgumentError("MXVAL_TOKEN_FILE: cannot read '" + tf + "'");
    std::getline(in, f.token);
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
  return grpc::CreateCustomChannel(address, creds, args);
}

absl::StatusOr<std::string> ReadTail(const std::string& path, int64_t cap, bool* truncated) {
  if (truncated != nullptr) *truncated = false;
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) {
    // Not seekable (a pipe, process substitution): read it through, keeping the tail.
    in.clear();
    std::string s, chunk(1 << 16, '\0');
    while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0) {
      s.append(chunk.data(), static_cast<size_t>(in.gcount()));
      if (static_cast<int64_t>(s.size()) > 2 * cap) {
        s.erase(0, s.size() - static_cast<size_t>(cap));
        if (truncated != nullptr) *truncated = true;
      }
    }
    if (static_cast<int64_t>(s.size()) > cap) {
      s.erase(0, s.size() - static_cast<size_t>(cap));
      if (truncated != nullptr) *truncated = true;
    }
    return s;
  }
  const int64_t start = size > cap ? size - cap : 0;
  if (truncated != nullptr) *truncated = start > 0;
  in.seekg(start);
  std::string s(static_cast<size_t>(size - start), '\0');
  in.read(s.data(), static_cast<std::streamsize>(s.size()));
  return s;
}

}  // namespace mxval
