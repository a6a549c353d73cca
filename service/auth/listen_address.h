// One parser for every listen-address flag (--listen, --http-listen,
// --metrics-listen of `serve` and `worker`). The loopback decision is made on
// the parsed address, never on the text's prefix: civetweb reads a listen
// string as a comma-separated list with per-port suffixes ("s" for TLS, "r"
// for redirect), and gRPC resolves names, so anything but exactly one
// numeric host (or "localhost") and one port is refused before it reaches
// either of them.
#ifndef MXVAL_SERVICE_AUTH_LISTEN_ADDRESS_H_
#define MXVAL_SERVICE_AUTH_LISTEN_ADDRESS_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace mxval {
namespace auth {

struct ListenAddress {
  std::string host;      // as given: dotted quad, IPv6 without brackets, or "localhost"
  int port = 0;          // 0..65535; 0 lets the kernel pick
  bool ipv6 = false;
  bool is_loopback = false;  // 127.0.0.0/8, ::1, ::ffff:127.0.0.0/104, "localhost"
  // "host:port" / "[v6]:port" with "localhost" spelled 127.0.0.1: the form
  // civetweb and auth::TlsFront bind without a name lookup.
  std::string Numeric() const;
};

// Longest accepted text ("[" + 45-character IPv6 + "]:65535" is 54).
inline constexpr size_t kMaxListenAddressLength = 64;

// Exactly one `host:port`: host is an IPv4 dotted quad (four decimal parts,
// 0..255), a bracketed IPv6 address ([::1]) or "localhost"; port is 1 to 5
// decimal digits in 0..65535. INVALID_ARGUMENT naming `flag` for anything
// else: empty, longer than kMaxListenAddressLength, spaces or control
// characters, a list ("a:1,b:2"), a port suffix ("80s"), a host name, a
// shortened IPv4 form ("127.1").
absl::StatusOr<ListenAddress> ParseListenAddress(std::string_view flag, std::string_view text);

}  // namespace auth
}  // namespace mxval

#endif  // MXVAL_SERVICE_AUTH_LISTEN_ADDRESS_H_
