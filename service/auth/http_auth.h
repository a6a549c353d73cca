// Authentication for the HTTP listeners (the web page, /metrics) with the
// gRPC listener's auth config: a request carries `Authorization: Bearer
// <token>` (or `Basic base64(any-user:<token>)`, for scrapers that only speak
// Basic) of a token with at least the viewer role, checked against the same
// SHA-256 digests with the same constant-time compare as TokenProcessor; or,
// where sessions are allowed (the web page), the session cookie of a browser
// that signed in with a token on POST /login.
//
// Sessions: a random 256-bit id in an HttpOnly, SameSite=Strict cookie
// (Secure when the listener's public face is HTTPS), mapped here to the
// token's principal and role; never the token. They expire after
// session_ttl, live only in this object (so a cookie works only on the
// listener that issued it, and not after a restart) and are bounded in
// number. Login is refused unless the request's Origin (or, without one, its
// Referer) is this listener's own origin, so another site cannot sign a
// browser in.
//
// Every refusal calls the DenialHook with (reason, "METHOD /path", peer);
// the token never reaches the hook.
#ifndef MXVAL_SERVICE_AUTH_HTTP_AUTH_H_
#define MXVAL_SERVICE_AUTH_HTTP_AUTH_H_

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "service/auth/auth.h"

namespace mxval {
namespace auth {

// What the check reads from one HTTP request (no HTTP library types).
struct HttpRequest {
  std::string method;         // "GET", "POST", ...
  std::string path;           // without the query
  std::string authorization;  // the Authorization header, or ""
  std::string cookie;         // the Cookie header, or ""
  std::string origin;         // the Origin header, or ""
  std::string referer;        // the Referer header, or ""
  std::string host;           // the Host header, or ""
  std::string peer;           // "address:port" of the TCP peer
};

struct HttpAuthOptions {
  bool https = false;          // the public face is HTTPS (auth::TlsFront): Secure cookies, https:// origin
  bool sessions = true;        // accept session cookies and /login (the web page); false for /metrics
  absl::Duration session_ttl = absl::Hours(12);
  int max_sessions = 10000;    // a login beyond this drops the oldest session
};

inline constexpr char kSessionCookie[] = "mxval_session";

// Denial reasons (the label of mxval_coordinator_auth_denied_total).
inline constexpr char kHttpUnauthenticated[] = "http_unauthenticated";  // no credentials, unknown or expired session
inline constexpr char kHttpBadScheme[] = "http_bad_scheme";             // Authorization neither Bearer nor Basic
inline constexpr char kHttpUnknownToken[] = "http_unknown_token";
inline constexpr char kHttpCrossOrigin[] = "http_cross_origin";         // a login not from this listener's page

class HttpAuth {
 public:
  HttpAuth(v1::AuthConfig config, const Clock* clock, HttpAuthOptions options, DenialHook on_denied);

  // The caller of `r`. UNAUTHENTICATED (and a denial) without a valid token
  // or session.
  absl::StatusOr<Caller> Check(const HttpRequest& r);

  // POST /login with `token` from the form: the Set-Cookie value of a new
  // session. PERMISSION_DENIED for a cross-origin request (or sessions off),
  // UNAUTHENTICATED for an unknown token; each a denial.
  absl::StatusOr<std::string> Login(const HttpRequest& r, const std::string& token);

  // Ends the request's session (if any); the Set-Cookie value that clears it.
  // PERMISSION_DENIED for a cross-origin request.
  absl::StatusOr<std::string> Logout(const HttpRequest& r);

  bool https() const { return options_.https; }
  int session_count() const;

 private:
  struct Session {
    Caller caller;
    absl::Time expires;
    absl::Time created;
  };
  absl::Status CheckSameOrigin(const HttpRequest& r) const;
  std::string SessionId(const HttpRequest& r) const;  // the cookie's value, or ""
  std::string CookieAttributes() const;
  void Deny(const char* reason, const HttpRequest& r) const;
  void DropExpiredLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  TokenProcessor tokens_;
  const Clock* clock_;
  const HttpAuthOptions options_;
  DenialHook on_denied_;
  mutable absl::Mutex mu_;
  // Keyed by SHA-256 of the session id: this map never holds a usable id.
  absl::flat_hash_map<std::string, Session> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace auth
}  // namespace mxval

#endif  // MXVAL_SERVICE_AUTH_HTTP_AUTH_H_
