#include "service/auth/tls_front.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace mxval::auth {
namespace {

// A plaintext backend that answers one canned HTTP response per connection.
class Backend {
 public:
  Backend() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    listen(fd_, 8);
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (true) {
        const int c = accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        char buf[4096];
        std::string req;
        while (req.find("\r\n\r\n") == std::string::npos) {
          const ssize_t n = read(c, buf, sizeof(buf));
          if (n <= 0) break;
          req.append(buf, n);
        }
        const std::string body = "seen: " + req.substr(0, req.find("\r\n"));
        const std::string resp = absl::StrCat("HTTP/1.0 200 OK\r\nContent-Length: ", body.size(), "\r\n\r\n", body);
        (void)!write(c, resp.data(), resp.size());
        close(c);
      }
    });
  }
  ~Backend() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  int port() const { return port_; }

 private:
  int fd_ = -1, port_ = 0;
  std::thread thread_;
};

std::string Shell(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

class TlsFrontTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/mxval_tls_front_" + std::to_string(getpid());
    ASSERT_EQ(std::system(("bash " MXVAL_SOURCE_DIR "/scripts/gen_test_certs.sh " + dir_ + " >/dev/null").c_str()), 0);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string dir_;
};

TEST_F(TlsFrontTest, RelaysHttpsToThePlaintextBackend) {
  Backend backend;
  auto front = TlsFront::Start({"127.0.0.1:0", dir_ + "/server.crt", dir_ + "/server.key", backend.port()});
  ASSERT_TRUE(front.ok()) << front.status();
  for (int i = 0; i < 3; ++i) {  // several connections, one after another
    const std::string out =
        Shell(absl::StrCat("printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' | openssl s_client -quiet -ign_eof -verify_return_error "
                         "-CAfile ", dir_, "/ca.crt -connect 127.0.0.1:", (*front)->port()));
    EXPECT_NE(out.find("seen: GET /metrics HTTP/1.0"), std::string::npos) << out;
  }
  // TLS 1.1 is refused.
  const std::string old = Shell(absl::StrCat("echo | openssl s_client -tls1_1 -connect 127.0.0.1:", (*front)->port()));
  EXPECT_EQ(old.find("seen:"), std::string::npos) << old;
  // A client that never finishes the handshake does not block others, and
  // the front shuts down with it still connected.
  const int idle = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>((*front)->port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(idle, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  const std::string out = Shell(absl::StrCat("printf 'GET /x HTTP/1.0\\r\\n\\r\\n' | openssl s_client -quiet -ign_eof "
                                           "-CAfile ", dir_, "/ca.crt -connect 127.0.0.1:", (*front)->port()));
  EXPECT_NE(out.find("seen: GET /x"), std::string::npos) << out;
  front->reset();
  close(idle);
}

TEST_F(TlsFrontTest, BadCertificatesKeysAndAddressesAreClearErrors) {
  auto missing = TlsFront::Start({"127.0.0.1:0", dir_ + "/nope.crt", dir_ + "/server.key", 1});
  EXPECT_TRUE(absl::IsInvalidArgument(missing.status()));
  EXPECT_NE(missing.status().message().find("nope.crt"), std::string::npos);
  auto mismatch = TlsFront::Start({"127.0.0.1:0", dir_ + "/server.crt", dir_ + "/ca.key", 1});
  EXPECT_TRUE(absl::IsInvalidArgument(mismatch.status())) << mismatch.status();
  auto bad_addr = TlsFront::Start({"example.com:443", dir_ + "/server.crt", dir_ + "/server.key", 1});
  EXPECT_TRUE(absl::IsInvalidArgument(bad_addr.status()));
  auto bad_port = TlsFront::Start({"127.0.0.1:99999", dir_ + "/server.crt", dir_ + "/server.key", 1});
  EXPECT_TRUE(absl::IsInvalidArgument(bad_port.status()));
}

}  // namespace
}  // namespace mxval::auth
