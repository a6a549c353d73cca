#include "service/auth/listen_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace mxval {
namespace auth {
namespace {

absl::Status Bad(std::string_view flag, std::string_view text, std::string_view why) {
  std::string shown;
  for (char c : text.substr(0, kMaxListenAddressLength)) {  // never echo control characters
    shown += absl::ascii_isprint(static_cast<unsigned char>(c)) ? c : '?';
  }
  if (text.size() > kMaxListenAddressLength) shown += "...";
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(flag), ": '", shown, "' ", std::string(why),
                   " (expected exactly one HOST:PORT: an IPv4 address, [IPv6] or localhost, and a port 0-65535)"));
}

// Strict dotted quad: inet_pton(AF_INET) accepts exactly a.b.c.d with each
// part in 0..255; it refuses "127.1", hex and octal forms.
bool ParseIpv4(const std::string& s, in_addr* out) { return inet_pton(AF_INET, s.c_str(), out) == 1; }

}  // namespace

std::string ListenAddress::Numeric() const {
  if (ipv6) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host == "localhost" ? "127.0.0.1" : host, ":", port);
}

absl::StatusOr<ListenAddress> ParseListenAddress(std::string_view flag, std::string_view text) {
  if (text.empty()) return Bad(flag, text, "is empty");
  if (text.size() > kMaxListenAddressLength) {
    return Bad(flag, text, absl::StrCat("is longer than ", kMaxListenAddressLength, " characters"));
  }
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == ',') return Bad(flag, text, "is a list; give one address");
    if (!absl::ascii_isgraph(u)) return Bad(flag, text, "contains a space or control character");
  }
  ListenAddress a;
  std::string_view port_text;
  if (text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return Bad(flag, text, "is not [IPv6]:PORT");
    }
    a.host = std::string(text.substr(1, close - 1));
    a.ipv6 = true;
    port_text = text.substr(close + 2);
    in6_addr v6{};
    if (inet_pton(AF_INET6, a.host.c_str(), &v6) != 1) return Bad(flag, text, "has no valid IPv6 address in [ ]");
    const bool mapped_loopback = IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
    a.is_loopback = IN6_IS_ADDR_LOOPBACK(&v6) || mapped_loopback;
  } else {
    const size_t colon = text.find(':');
    if (colon == std::string_view::npos) return Bad(flag, text, "has no port");
    if (text.find(':', colon + 1) != std::string_view::npos) {
      return Bad(flag, text, "has more than one ':' (write IPv6 addresses in brackets: [::1]:PORT)");
    }
    a.host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
    if (a.host == "localhost") {
      a.is_loopback = true;
    } else {
      in_addr v4{};
      if (!ParseIpv4(a.host, &v4)) {
        return Bad(flag, text, "has a host that is neither a dotted-quad IPv4 address nor localhost");
      }
      a.is_loopback = (ntohl(v4.s_addr) >> 24) == 127;
    }
  }
  if (port_text.empty() || port_text.size() > 5) return Bad(flag, text, "has no port of 1 to 5 digits");
  int port = 0;
  for (char c : port_text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return Bad(flag, text, "has a port that is not only digits (no suffixes such as 's' or 'r')");
    }
    port = port * 10 + (c - '0');
  }
  if (port > 65535) return Bad(flag, text, "has a port above 65535");
  a.port = port;
  return a;
}

}  // namespace auth
}  // namespace mxval
