#include "service/web/web_ui.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "prometheus/counter.h"
#include "service/web/metrics_server.h"

namespace mxval::web {
namespace {

using coordinator::Coordinator;
using coordinator::Scheduler;

class WebUiTest : public ::testing::Test {
 protected:
  WebUiTest() : coord_(&clock_, &scheduler_, coordinator::CoordinatorOptions{}) {}
  std::string Submit(const std::string& name) {
    v1::SubmitJobRequest req;
    req.mutable_spec()->set_name(name);
    req.mutable_spec()->add_presets("dsv3-tp8");
    req.mutable_spec()->set_no_layout_probes(true);
    req.mutable_spec()->add_m_values(1);
    v1::SubmitJobResponse resp;
    grpc::ServerContext ctx;
    EXPECT_TRUE(coord_.SubmitJob(&ctx, &req, &resp).ok());
    return resp.job().job_id();
  }
  FakeClock clock_;
  Scheduler scheduler_{&clock_, coordinator::WithFailurePredicate(coordinator::SchedulerOptions{})};
  Coordinator coord_;
};

TEST_F(WebUiTest, PagesAndApi) {
  const std::string id = Submit("decode retune <img src=x onerror=alert(1)>");
  WebResponse r = Handle(coord_, "GET", "/", "");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("/static/app.js"), std::string::npos);
  EXPECT_NE(Handle(coord_, "GET", "/job", "id=" + id).body.find("id=\"results\""), std::string::npos);
  r = Handle(coord_, "GET", "/static/app.js", "");
  EXPECT_EQ(r.content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(r.body.find("innerHTML"), std::string::npos);  // strings only ever go through textContent
  r = Handle(coord_, "GET", "/api/jobs", "");
  ASSERT_EQ(r.status, 200);
  auto jobs = nlohmann::json::parse(r.body);
  ASSERT_EQ(jobs["jobs"].size(), 1u);
  EXPECT_EQ(jobs["jobs"][0]["spec"]["name"], "decode retune <img src=x onerror=alert(1)>");
  r = Handle(coord_, "GET", "/api/job", "id=" + id);
  ASSERT_EQ(r.status, 200);
  auto job = nlohmann::json::parse(r.body);
  EXPECT_EQ(job["jobId"], id);
  EXPECT_EQ(job["progress"]["tasksTotal"], 2);
}

TEST_F(WebUiTest, BadRequests) {
  EXPECT_EQ(Handle(coord_, "POST", "/api/jobs", "").status, 405);
  EXPECT_EQ(Handle(coord_, "GET", "/api/job", "").status, 400);
  EXPECT_EQ(Handle(coord_, "GET", "/api/job", "id=job-404").status, 404);
  EXPECT_EQ(Handle(coord_, "GET", "/etc/passwd", "").status, 404);
  EXPECT_EQ(Handle(coord_, "GET", "/static/../../x", "").status, 404);
}

// One request over loopback TCP; the whole response (the server closes).
std::string HttpRaw(int port, const std::string& req) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string resp;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
    char buf[4096];
    for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) resp.append(buf, n);
  }
  close(fd);
  return resp;
}

std::string Get(int port, const std::string& path, const std::string& extra_headers = "") {
  return HttpRaw(port, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra_headers + "Connection: close\r\n\r\n");
}

// Over real HTTP on loopback: status, headers, body.
TEST_F(WebUiTest, ServesOverHttp) {
  Submit("http job");
  auto server = WebServer::Start(&coord_, "127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  const std::string resp = Get((*server)->port(), "/api/jobs");
  EXPECT_EQ(resp.rfind("HTTP/1.1 200", 0), 0u) << resp;
  EXPECT_NE(resp.find("Content-Security-Policy: default-src 'self'"), std::string::npos);
  EXPECT_NE(resp.find("\"http job\""), std::string::npos);
}

v1::AuthConfig TestAuthConfig() {
  v1::AuthConfig cfg;
  for (auto [name, token, role] : {std::tuple{"dash", "view-secret", v1::ROLE_VIEWER},
                                   std::tuple{"ops", "admin-secret", v1::ROLE_ADMIN}}) {
    v1::AuthToken* t = cfg.add_tokens();
    t->set_name(name);
    t->set_sha256(auth::Sha256Hex(token));
    t->set_role(role);
  }
  return cfg;
}

class HttpAuthTest : public ::testing::Test {
 protected:
  auth::HttpAuth Make(auth::HttpAuthOptions o = {}) {
    return auth::HttpAuth(TestAuthConfig(), &clock_, o, [this](const std::string& reason, const std::string& method,
                                                                const std::string& who) {
      denials_ += reason + " " + method + " " + who + "\n";
    });
  }
  static auth::HttpRequest Req(const std::string& method, const std::string& path) {
    auth::HttpRequest r;
    r.method = method;
    r.path = path;
    r.host = "127.0.0.1:8080";
    r.peer = "127.0.0.1:40000";
    return r;
  }
  static std::string SessionOf(const std::string& set_cookie) {
    return set_cookie.substr(0, set_cookie.find(';'));
  }
  FakeClock clock_;
  std::string denials_;
};

TEST_F(HttpAuthTest, TokensAndDenials) {
  auth::HttpAuth a = Make();
  auth::HttpRequest r = Req("GET", "/api/jobs");
  EXPECT_EQ(a.Check(r).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(denials_, "http_unauthenticated GET /api/jobs 127.0.0.1:40000\n");
  r.authorization = "Bearer view-secret";
  auto c = a.Check(r);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->principal, "dash");
  EXPECT_EQ(c->role, v1::ROLE_VIEWER);
  r.authorization = "Basic " + absl::Base64Escape("prometheus:admin-secret");
  c = a.Check(r);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->principal, "ops");
  denials_.clear();
  for (const char* bad : {"Bearer view-secretx", "Bearer ", "Digest view-secret", "Basic !!!", "view-secret"}) {
    r.authorization = bad;
    EXPECT_EQ(a.Check(r).status().code(), absl::StatusCode::kUnauthenticated) << bad;
  }
  EXPECT_EQ(denials_,
            "http_unknown_token GET /api/jobs 127.0.0.1:40000\nhttp_unknown_token GET /api/jobs 127.0.0.1:40000\n"
            "http_bad_scheme GET /api/jobs 127.0.0.1:40000\nhttp_bad_scheme GET /api/jobs 127.0.0.1:40000\n"
            "http_bad_scheme GET /api/jobs 127.0.0.1:40000\n");
  EXPECT_EQ(denials_.find("secret"), std::string::npos);
  // Logged paths are bounded and printable.
  denials_.clear();
  r = Req("GET", "/\x1b[2J" + std::string(500, 'x'));
  (void)a.Check(r);
  EXPECT_EQ(denials_.find('\x1b'), std::string::npos);
  EXPECT_LT(denials_.size(), 200u);
}

TEST_F(HttpAuthTest, SessionsFromASameOriginLogin) {
  auth::HttpAuth a = Make();
  auth::HttpRequest login = Req("POST", "/login");
  // Cross-origin, or with neither Origin nor Referer: refused, whatever the token.
  login.origin = "http://evil.example";
  EXPECT_EQ(a.Login(login, "view-secret").status().code(), absl::StatusCode::kPermissionDenied);
  login.origin = "";
  EXPECT_EQ(a.Login(login, "view-secret").status().code(), absl::StatusCode::kPermissionDenied);
  login.referer = "http://127.0.0.1:8080.evil.example/login";
  EXPECT_EQ(a.Login(login, "view-secret").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(denials_.find("http_cross_origin POST /login 127.0.0.1:40000\n"), 0u) << denials_;
  login.referer = "http://127.0.0.1:8080/login";
  EXPECT_EQ(a.Login(login, "wrong").status().code(), absl::StatusCode::kUnauthenticated);
  login.referer = "";
  login.origin = "http://127.0.0.1:8080";
  auto cookie = a.Login(login, "view-secret");
  ASSERT_TRUE(cookie.ok()) << cookie.status();
  EXPECT_EQ(cookie->rfind("mxval_session=", 0), 0u);
  EXPECT_EQ(SessionOf(*cookie).size(), std::string("mxval_session=").size() + 64);
  EXPECT_NE(cookie->find("; HttpOnly; SameSite=Strict"), std::string::npos) << *cookie;
  EXPECT_NE(cookie->find("; Max-Age=43200"), std::string::npos) << *cookie;
  EXPECT_EQ(cookie->find("Secure"), std::string::npos) << "plain HTTP";
  EXPECT_EQ(cookie->find("view-secret"), std::string::npos);
  EXPECT_EQ(cookie->find(auth::Sha256Hex("view-secret")), std::string::npos);
  auth::HttpRequest r = Req("GET", "/api/jobs");
  r.cookie = "other=1; " + SessionOf(*cookie);
  auto c = a.Check(r);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->principal, "dash");
  // Another listener did not issue it.
  auth::HttpAuth other = Make();
  EXPECT_FALSE(other.Check(r).ok());
  // A forged or tampered id is not a session.
  auth::HttpRequest forged = r;
  forged.cookie = SessionOf(*cookie).substr(0, SessionOf(*cookie).size() - 1) + "0";
  if (forged.cookie == SessionOf(*cookie)) forged.cookie.back() = '1';
  EXPECT_FALSE(a.Check(forged).ok());
  // Sessions end after 12 hours...
  clock_.Advance(absl::Hours(12) - absl::Seconds(1));
  EXPECT_TRUE(a.Check(r).ok());
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(a.Check(r).status().code(), absl::StatusCode::kUnauthenticated);
  // ...or at logout.
  cookie = a.Login(login, "admin-secret");
  ASSERT_TRUE(cookie.ok());
  r.cookie = SessionOf(*cookie);
  ASSERT_TRUE(a.Check(r).ok());
  auth::HttpRequest logout = Req("POST", "/logout");
  logout.origin = "http://127.0.0.1:8080";
  logout.cookie = r.cookie;
  auto cleared = a.Logout(logout);
  ASSERT_TRUE(cleared.ok());
  EXPECT_NE(cleared->find("Max-Age=0"), std::string::npos);
  EXPECT_FALSE(a.Check(r).ok());
}

TEST_F(HttpAuthTest, HttpsCookiesAreSecureAndSessionsAreBounded) {
  auth::HttpAuthOptions o;
  o.https = true;
  o.max_sessions = 2;
  auth::HttpAuth a = Make(o);
  auth::HttpRequest login = Req("POST", "/login");
  login.origin = "http://127.0.0.1:8080";  // the page was served over https
  EXPECT_EQ(a.Login(login, "view-secret").status().code(), absl::StatusCode::kPermissionDenied);
  login.origin = "https://127.0.0.1:8080";
  std::vector<std::string> cookies;
  for (int i = 0; i < 3; ++i) {
    auto c = a.Login(login, "view-secret");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_NE(c->find("; Secure"), std::string::npos) << *c;
    cookies.push_back(SessionOf(*c));
    clock_.Advance(absl::Seconds(1));
  }
  EXPECT_EQ(a.session_count(), 2);
  auth::HttpRequest r = Req("GET", "/");
  r.cookie = cookies[0];
  EXPECT_FALSE(a.Check(r).ok()) << "the oldest session made room";
  r.cookie = cookies[2];
  EXPECT_TRUE(a.Check(r).ok());
  // Without sessions (the metrics listener) a cookie is no credential.
  auth::HttpAuthOptions no_sessions;
  no_sessions.sessions = false;
  auth::HttpAuth m = Make(no_sessions);
  EXPECT_EQ(m.Login(login, "view-secret").status().code(), absl::StatusCode::kPermissionDenied);
}

// The web page with auth: no data without a token or session; a browser
// signs in on /login and its cookie then works.
TEST_F(WebUiTest, AuthOverHttp) {
  Submit("secret job name");
  FakeClock clock;
  std::string denials;
  auth::HttpAuth a(TestAuthConfig(), &clock, {}, [&](const std::string& reason, const std::string& method,
                                                      const std::string& who) { denials += reason + " " + method + "\n"; });
  auto server = WebServer::Start(&coord_, "127.0.0.1:0", &a);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  for (const char* path : {"/api/jobs", "/", "/job?id=job-1", "/static/app.js", "/api/job?id=job-1"}) {
    const std::string resp = Get(port, path);
    EXPECT_EQ(resp.rfind("HTTP/1.1 401", 0), 0u) << path << "\n" << resp;
    EXPECT_NE(resp.find("WWW-Authenticate: Bearer realm=\"mxval\""), std::string::npos) << resp;
    EXPECT_EQ(resp.find("secret job name"), std::string::npos) << resp;
  }
  EXPECT_NE(Get(port, "/").find("href=\"/login\""), std::string::npos);
  EXPECT_EQ(denials.find("http_unauthenticated GET /api/jobs\n"), 0u) << denials;
  std::string resp = Get(port, "/api/jobs", "Authorization: Bearer wrong\r\n");
  EXPECT_EQ(resp.rfind("HTTP/1.1 401", 0), 0u) << resp;
  resp = Get(port, "/api/jobs", "Authorization: Bearer view-secret\r\n");
  EXPECT_EQ(resp.rfind("HTTP/1.1 200", 0), 0u) << resp;
  EXPECT_NE(resp.find("secret job name"), std::string::npos);
  resp = Get(port, "/login");
  EXPECT_EQ(resp.rfind("HTTP/1.1 200", 0), 0u) << resp;
  EXPECT_NE(resp.find("<form method=\"post\" action=\"/login\">"), std::string::npos);
  EXPECT_EQ(Get(port, "/static/style.css").rfind("HTTP/1.1 200", 0), 0u);
  auto post = [&](const std::string& path, const std::string& body, const std::string& headers) {
    return HttpRaw(port, "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) + "\r\n" + headers +
                             "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: " +
                             std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
  };
  const std::string origin = "Origin: http://127.0.0.1:" + std::to_string(port) + "\r\n";
  resp = post("/login", "token=view-secret", "Origin: http://evil.example\r\n");
  EXPECT_EQ(resp.rfind("HTTP/1.1 403", 0), 0u) << resp;
  EXPECT_EQ(resp.find("Set-Cookie"), std::string::npos);
  resp = post("/login", "token=wrong", origin);
  EXPECT_EQ(resp.rfind("HTTP/1.1 401", 0), 0u) << resp;
  EXPECT_EQ(resp.find("Set-Cookie"), std::string::npos);
  resp = post("/login", "token=" + std::string(5000, 'x'), origin);
  EXPECT_EQ(resp.rfind("HTTP/1.1 413", 0), 0u) << resp;
  resp = post("/login", "token=view-secret", origin);
  ASSERT_EQ(resp.rfind("HTTP/1.1 303", 0), 0u) << resp;
  EXPECT_NE(resp.find("Location: /\r\n"), std::string::npos) << resp;
  const size_t at = resp.find("Set-Cookie: mxval_session=");
  ASSERT_NE(at, std::string::npos) << resp;
  const std::string cookie = resp.substr(at + 12, resp.find(';', at) - at - 12);
  resp = Get(port, "/api/jobs", "Cookie: " + cookie + "\r\n");
  EXPECT_EQ(resp.rfind("HTTP/1.1 200", 0), 0u) << resp;
  EXPECT_NE(resp.find("secret job name"), std::string::npos);
  EXPECT_EQ(Get(port, "/", "Cookie: " + cookie + "\r\n").rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(denials.find("view-secret"), std::string::npos) << denials;
}

TEST(MetricsServer, BearerOrBasicWhenAuthIsConfigured) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter().Name("mxval_test_total").Help("a test counter").Register(*registry).Add({}).Increment();
  auto open = MetricsServer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(open.ok()) << open.status();
  std::string resp = Get((*open)->port(), "/metrics");
  EXPECT_EQ(resp.rfind("HTTP/1.1 200", 0), 0u) << resp;
  EXPECT_NE(resp.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << resp;
  EXPECT_NE(resp.find("mxval_test_total 1"), std::string::npos) << resp;
  EXPECT_EQ(Get((*open)->port(), "/other").rfind("HTTP/1.1 404", 0), 0u);

  FakeClock clock;
  std::string denials;
  auth::HttpAuthOptions o;
  o.sessions = false;
  auth::HttpAuth a(TestAuthConfig(), &clock, o, [&](const std::string& reason, const std::string& method,
                                                     const std::string&) { denials += reason + " " + method + "\n"; });
  auto guarded = MetricsServer::Start("127.0.0.1:0", registry, &a);
  ASSERT_TRUE(guarded.ok()) << guarded.status();
  const int port = (*guarded)->port();
  resp = Get(port, "/metrics");
  EXPECT_EQ(resp.rfind("HTTP/1.1 401", 0), 0u) << resp;
  EXPECT_NE(resp.find("WWW-Authenticate: Bearer"), std::string::npos) << resp;
  EXPECT_EQ(resp.find("mxval_test_total"), std::string::npos) << resp;
  resp = Get(port, "/metrics", "Authorization: Bearer admin-secretx\r\n");
  EXPECT_EQ(resp.rfind("HTTP/1.1 401", 0), 0u) << resp;
  EXPECT_EQ(denials, "http_unauthenticated GET /metrics\nhttp_unknown_token GET /metrics\n");
  resp = Get(port, "/metrics", "Authorization: Bearer view-secret\r\n");
  EXPECT_EQ(resp.rfind("HTTP/1.1 200", 0), 0u) << resp;
  EXPECT_NE(resp.find("mxval_test_total 1"), std::string::npos) << resp;
  resp = Get(port, "/metrics", "Authorization: Basic " + absl::Base64Escape("prometheus:view-secret") + "\r\n");
  EXPECT_EQ(resp.rfind("HTTP/1.1 200", 0), 0u) << resp;
}

}  // namespace
}  // namespace mxval::web
