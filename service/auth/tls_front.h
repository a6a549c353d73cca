// A TLS front for the plaintext HTTP listeners (Prometheus metrics, the web
// page): accepts TLS 1.2+ on a public address with a certificate and key from
// files and relays each connection to a plaintext backend on 127.0.0.1.
//
// Why not civetweb's own TLS: Debian 12's civetweb 1.15 loads libssl with
// dlopen and looks up SSL_get_peer_certificate, which OpenSSL 3 no longer
// exports, and calls the null pointer on the first HTTPS request. The HTTP
// servers therefore stay on loopback and this front is their only public face.
#ifndef MXVAL_SERVICE_AUTH_TLS_FRONT_H_
#define MXVAL_SERVICE_AUTH_TLS_FRONT_H_

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace mxval {
namespace auth {

struct TlsFrontOptions {
  std::string listen;           // "host:port" (IPv4 or localhost; port 0 picks one)
  std::string cert_file;        // PEM certificate chain
  std::string key_file;         // PEM private key
  int backend_port = 0;         // plaintext server on 127.0.0.1
  int max_connections = 64;     // more are closed at once
  absl::Duration handshake_timeout = absl::Seconds(10);
  absl::Duration idle_timeout = absl::Seconds(60);
};

class TlsFront {
 public:
  // INVALID_ARGUMENT naming the file for a certificate or key that does not
  // load or match; INVALID_ARGUMENT for a bad address; UNAVAILABLE if it
  // cannot bind.
  static absl::StatusOr<std::unique_ptr<TlsFront>> Start(const TlsFrontOptions& options);
  // Stops accepting, closes every relayed connection and waits for them.
  ~TlsFront();
  int port() const { return port_; }

 private:
  explicit TlsFront(TlsFrontOptions o) : options_(std::move(o)) {}
  void AcceptLoop();
  void Relay(int client_fd);

  const TlsFrontOptions options_;
  SSL_CTX* ctx_ = nullptr;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  absl::Mutex mu_;
  std::set<int> open_fds_ ABSL_GUARDED_BY(mu_);  // client and backend sockets of live relays
  int active_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace auth
}  // namespace mxval

#endif  // MXVAL_SERVICE_AUTH_TLS_FRONT_H_
