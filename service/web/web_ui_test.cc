#include "service/web/web_ui.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

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

// Over real HTTP on loopback: status, headers, body.
TEST_F(WebUiTest, ServesOverHttp) {
  Submit("http job");
  auto server = WebServer::Start(&coord_, "127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>((*server)->port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  const std::string req = "GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  std::string resp;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) resp.append(buf, n);
  close(fd);
  EXPECT_EQ(resp.rfind("HTTP/1.1 200", 0), 0u) << resp;
  EXPECT_NE(resp.find("Content-Security-Policy: default-src 'self'"), std::string::npos);
  EXPECT_NE(resp.find("\"http job\""), std::string::npos);
}

}  // namespace
}  // namespace mxval::web
