#include "service/auth/tls_front.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace mxval {
namespace auth {
namespace {

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  if (e == 0) return "unknown error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

void SetTimeouts(int fd, absl::Duration d) {
  timeval tv = absl::ToTimeval(d);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

bool SendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool SslWriteAll(SSL* ssl, const char* p, size_t n) {
  while (n > 0) {
    const int w = SSL_write(ssl, p, static_cast<int>(n));
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TlsFront>> TlsFront::Start(const TlsFrontOptions& o) {
  const size_t colon = o.listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(o.listen.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", o.listen, "' is not host:port"));
  }
  std::string host = o.listen.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("'", host, "' is not an IPv4 address"));
  }
  // OpenSSL writes to the socket with write(): a client that hangs up must
  // not kill the process with SIGPIPE (gRPC and civetweb ignore it too).
  signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<TlsFront> f(new TlsFront(o));
  f->ctx_ = SSL_CTX_new(TLS_server_method());
  if (f->ctx_ == nullptr) return absl::InternalError(absl::StrCat("TLS: ", OpenSslError()));
  SSL_CTX_set_min_proto_version(f->ctx_, TLS1_2_VERSION);
  SSL_CTX_set_mode(f->ctx_, SSL_MODE_AUTO_RETRY);
  if (SSL_CTX_use_certificate_chain_file(f->ctx_, o.cert_file.c_str()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("certificate '", o.cert_file, "': ", OpenSslError()));
  }
  if (SSL_CTX_use_PrivateKey_file(f->ctx_, o.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("key '", o.key_file, "': ", OpenSslError()));
  }
  if (SSL_CTX_check_private_key(f->ctx_) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("key '", o.key_file, "' does not match '", o.cert_file, "'"));
  }
  f->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(f->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (f->listen_fd_ < 0 || bind(f->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(f->listen_fd_, 64) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", o.listen, ": ", strerror(errno)));
  }
  socklen_t len = sizeof(addr);
  getsockname(f->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  f->port_ = ntohs(addr.sin_port);
  f->acceptor_ = std::thread([p = f.get()] { p->AcceptLoop(); });
  return f;
}

TlsFront::~TlsFront() {
  stop_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  {
    absl::MutexLock l(&mu_);
    for (int fd : open_fds_) shutdown(fd, SHUT_RDWR);  // relays see EOF and end
    auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return active_ == 0; };
    mu_.Await(absl::Condition(&done));
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
}

void TlsFront::AcceptLoop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    {
      absl::MutexLock l(&mu_);
      if (active_ >= options_.max_connections) {
        close(fd);
        continue;
      }
      ++active_;
      open_fds_.insert(fd);
    }
    std::thread([this, fd] { Relay(fd); }).detach();  // counted in active_; the destructor waits
  }
}

void TlsFront::Relay(int client_fd) {
  int backend_fd = -1;
  SSL* ssl = SSL_new(ctx_);
  SetTimeouts(client_fd, options_.handshake_timeout);
  if (ssl != nullptr && SSL_set_fd(ssl, client_fd) == 1 && SSL_accept(ssl) == 1) {
    SetTimeouts(client_fd, options_.idle_timeout);
    backend_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in b{};
    b.sin_family = AF_INET;
    b.sin_port = htons(static_cast<uint16_t>(options_.backend_port));
    b.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    {
      absl::MutexLock l(&mu_);
      open_fds_.insert(backend_fd);
    }
    if (backend_fd >= 0 && connect(backend_fd, reinterpret_cast<sockaddr*>(&b), sizeof(b)) == 0) {
      SetTimeouts(backend_fd, options_.idle_timeout);
      std::vector<char> buf(16 << 10);
      absl::Time last = absl::Now();
      while (!stop_ && absl::Now() - last < options_.idle_timeout) {
        pollfd fds[2] = {{client_fd, POLLIN, 0}, {backend_fd, POLLIN, 0}};
        const int ready = SSL_pending(ssl) > 0 ? 1 : poll(fds, 2, 500);
        if (ready < 0 && errno != EINTR) break;
        if (ready <= 0) continue;
        last = absl::Now();
        if (SSL_pending(ssl) > 0 || (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
          const int n = SSL_read(ssl, buf.data(), static_cast<int>(buf.size()));
          if (n <= 0) {
            const int e = SSL_get_error(ssl, n);
            if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) continue;
            break;  // client closed or failed
          }
          if (!SendAll(backend_fd, buf.data(), static_cast<size_t>(n))) break;
        }
        if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
          const ssize_t n = recv(backend_fd, buf.data(), buf.size(), 0);
          if (n <= 0) break;  // the backend finished its response
          if (!SslWriteAll(ssl, buf.data(), static_cast<size_t>(n))) break;
        }
      }
      SSL_shutdown(ssl);
    }
  }
  if (ssl != nullptr) SSL_free(ssl);
  absl::MutexLock l(&mu_);
  for (int fd : {client_fd, backend_fd}) {
    if (fd < 0) continue;
    open_fds_.erase(fd);
    close(fd);
  }
  --active_;
}

}  // namespace auth
}  // namespace mxval
