#include "service/auth/http_auth.h"

#include <openssl/rand.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace mxval {
namespace auth {
namespace {

// Printable and bounded: request paths reach the log.
std::string Printable(const std::string& s, size_t max = 120) {
  std::string out;
  for (char c : s.substr(0, max)) out += absl::ascii_isprint(static_cast<unsigned char>(c)) ? c : '?';
  if (s.size() > max) out += "...";
  return out;
}

std::string RandomHex(int bytes) {
  std::string raw(static_cast<size_t>(bytes), '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), bytes) != 1) return "";
  return absl::BytesToHexString(raw);
}

}  // namespace

HttpAuth::HttpAuth(v1::AuthConfig config, const Clock* clock, HttpAuthOptions options, DenialHook on_denied)
    : tokens_(std::move(config)), clock_(clock), options_(options), on_denied_(std::move(on_denied)) {}

void HttpAuth::Deny(const char* reason, const HttpRequest& r) const {
  if (on_denied_) on_denied_(reason, absl::StrCat(Printable(r.method, 16), " ", Printable(r.path)), r.peer);
}

std::string HttpAuth::SessionId(const HttpRequest& r) const {
  for (absl::string_view part : absl::StrSplit(r.cookie, ';')) {
    part = absl::StripAsciiWhitespace(part);
    const std::string prefix = absl::StrCat(kSessionCookie, "=");
    if (absl::StartsWith(part, prefix)) return std::string(part.substr(prefix.size()));
  }
  return "";
}

absl::StatusOr<Caller> HttpAuth::Check(const HttpRequest& r) {
  if (!r.authorization.empty()) {
    std::string token;
    const absl::string_view a = r.authorization;
    if (absl::StartsWithIgnoreCase(a, "Bearer ")) {
      token = std::string(absl::StripLeadingAsciiWhitespace(a.substr(7)));
    } else if (absl::StartsWithIgnoreCase(a, "Basic ")) {
      // Basic: the password is the token; the user name is not checked.
      std::string decoded;
      if (!absl::Base64Unescape(absl::StripAsciiWhitespace(a.substr(6)), &decoded) ||
          decoded.find(':') == std::string::npos) {
        Deny(kHttpBadScheme, r);
        return absl::UnauthenticatedError("authorization: Basic credentials are not base64(user:token)");
      }
      token = decoded.substr(decoded.find(':') + 1);
    } else {
      Deny(kHttpBadScheme, r);
      return absl::UnauthenticatedError("authorization: expected 'Bearer <token>'");
    }
    const v1::AuthToken* t = tokens_.Find(token);
    if (t == nullptr || t->role() < v1::ROLE_VIEWER) {
      Deny(kHttpUnknownToken, r);
      return absl::UnauthenticatedError("authorization: unknown token");
    }
    return Caller{t->name(), t->role()};
  }
  const std::string id = options_.sessions ? SessionId(r) : "";
  if (!id.empty()) {
    const std::string key = Sha256Hex(id);
    absl::MutexLock l(&mu_);
    auto it = sessions_.find(key);
    if (it != sessions_.end() && clock_->Now() < it->second.expires) return it->second.caller;
    if (it != sessions_.end()) sessions_.erase(it);
  }
  Deny(kHttpUnauthenticated, r);
  return absl::UnauthenticatedError(options_.sessions ? "sign in at /login or send Authorization: Bearer <token>"
                                                      : "send Authorization: Bearer <token>");
}

absl::Status HttpAuth::CheckSameOrigin(const HttpRequest& r) const {
  const std::string self = absl::StrCat(options_.https ? "https://" : "http://", r.host);
  const bool same = !r.host.empty() && (r.origin.empty() ? (r.referer == self || absl::StartsWith(r.referer, self + "/"))
                                                         : r.origin == self);
  if (same) return absl::OkStatus();
  Deny(kHttpCrossOrigin, r);
  return absl::PermissionDeniedError("sign in from this server's own /login page (Origin or Referer does not match)");
}

std::string HttpAuth::CookieAttributes() const {
  return absl::StrCat("; Path=/; HttpOnly; SameSite=Strict", options_.https ? "; Secure" : "");
}

void HttpAuth::DropExpiredLocked(absl::Time now) {
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->second.expires <= now) {
      sessions_.erase(it++);
    } else {
      ++it;
    }
  }
}

absl::StatusOr<std::string> HttpAuth::Login(const HttpRequest& r, const std::string& token) {
  if (!options_.sessions) {
    Deny(kHttpUnauthenticated, r);
    return absl::PermissionDeniedError("this listener has no sign-in; send Authorization: Bearer <token>");
  }
  if (absl::Status st = CheckSameOrigin(r); !st.ok()) return st;
  const v1::AuthToken* t = tokens_.Find(token);
  if (t == nullptr || t->role() < v1::ROLE_VIEWER) {
    Deny(kHttpUnknownToken, r);
    return absl::UnauthenticatedError("unknown token");
  }
  const std::string id = RandomHex(32);
  if (id.empty()) return absl::InternalError("no random bytes for a session id");
  const absl::Time now = clock_->Now();
  absl::MutexLock l(&mu_);
  DropExpiredLocked(now);
  while (static_cast<int>(sessions_.size()) >= options_.max_sessions && !sessions_.empty()) {
    auto oldest = sessions_.begin();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
      if (it->second.created < oldest->second.created) oldest = it;
    }
    sessions_.erase(oldest);
  }
  sessions_[Sha256Hex(id)] = Session{Caller{t->name(), t->role()}, now + options_.session_ttl, now};
  return absl::StrCat(kSessionCookie, "=", id, CookieAttributes(), "; Max-Age=",
                      absl::ToInt64Seconds(options_.session_ttl));
}

absl::StatusOr<std::string> HttpAuth::Logout(const HttpRequest& r) {
  if (absl::Status st = CheckSameOrigin(r); !st.ok()) return st;
  const std::string id = SessionId(r);
  if (!id.empty()) {
    absl::MutexLock l(&mu_);
    sessions_.erase(Sha256Hex(id));
  }
  return absl::StrCat(kSessionCookie, "=", CookieAttributes(), "; Max-Age=0");
}

int HttpAuth::session_count() const {
  absl::MutexLock l(&mu_);
  return static_cast<int>(sessions_.size());
}

}  // namespace auth
}  // namespace mxval
