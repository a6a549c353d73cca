#include "service/auth/listen_address.h"

#include "gtest/gtest.h"

namespace mxval::auth {
namespace {

TEST(ListenAddress, Accepted) {
  struct Case {
    const char* text;
    const char* host;
    int port;
    bool loopback;
    const char* numeric;
  };
  for (const Case& c : {Case{"127.0.0.1:0", "127.0.0.1", 0, true, "127.0.0.1:0"},
                        Case{"127.9.8.7:65535", "127.9.8.7", 65535, true, "127.9.8.7:65535"},
                        Case{"localhost:8080", "localhost", 8080, true, "127.0.0.1:8080"},
                        Case{"[::1]:0", "::1", 0, true, "[::1]:0"},
                        Case{"[::ffff:127.0.0.1]:9", "::ffff:127.0.0.1", 9, true, "[::ffff:127.0.0.1]:9"},
                        Case{"0.0.0.0:48821", "0.0.0.0", 48821, false, "0.0.0.0:48821"},
                        Case{"10.1.2.3:9464", "10.1.2.3", 9464, false, "10.1.2.3:9464"},
                        Case{"128.0.0.1:1", "128.0.0.1", 1, false, "128.0.0.1:1"},
                        Case{"[::]:50051", "::", 50051, false, "[::]:50051"},
                        Case{"[::2]:1", "::2", 1, false, "[::2]:1"},
                        Case{"127.0.0.1:00080", "127.0.0.1", 80, true, "127.0.0.1:80"}}) {
    auto a = ParseListenAddress("--http-listen", c.text);
    ASSERT_TRUE(a.ok()) << c.text << ": " << a.status();
    EXPECT_EQ(a->host, c.host) << c.text;
    EXPECT_EQ(a->port, c.port) << c.text;
    EXPECT_EQ(a->is_loopback, c.loopback) << c.text;
    EXPECT_EQ(a->Numeric(), c.numeric) << c.text;
  }
}

TEST(ListenAddress, Refused) {
  const std::string overlong = "127.0.0.1:" + std::string(60, '0');
  for (const std::string& text :
       {std::string(""), std::string("127.0.0.1:0,0.0.0.0:1"), std::string("127.0.0.1:80s"), std::string("127.0.0.1:80r"),
        std::string("127.0.0.1:0 ,0.0.0.0:1"), std::string(" 127.0.0.1:0"), std::string("127.0.0.1: 0"),
        std::string("127.0.0.1:0\n"), std::string("127.1:0"), std::string("127.0.0.1"), std::string("127.0.0.1:"),
        std::string("127.0.0.1:65536"), std::string("127.0.0.1:99999"), std::string("127.0.0.1:123456"),
        std::string("127.0.0.1:-1"), std::string("127.0.0.1:+1"), std::string("127.0.0.256:1"),
        std::string("0x7f.0.0.1:1"), std::string("example.com:80"), std::string("localhost.evil:1"),
        std::string("127.0.0.1.nip.io:1"), std::string("::1:0"), std::string("[::1]"), std::string("[::1]0"),
        std::string("[::1:0"), std::string("[fe80::1%eth0]:1"), std::string("[127.0.0.1]:1"), std::string(":8080"),
        std::string("8080"), std::string("127.0.0.1:0:1"), overlong, std::string("127.0.0.1\0:1", 12)}) {
    auto a = ParseListenAddress("--metrics-listen", text);
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << "'" << text << "'";
    EXPECT_EQ(a.status().message().rfind("--metrics-listen: ", 0), 0u) << a.status();
    EXPECT_EQ(a.status().message().find('\n'), std::string::npos) << "control characters are not echoed";
  }
}

}  // namespace
}  // namespace mxval::auth
