#include "common/digest.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace mxval {
namespace {

// FIPS 180-2 test vectors.
TEST(Digest, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Digest, FileMatchesMemoryAcrossBufferBoundaries) {
  std::string data;
  for (int i = 0; i < 200000; ++i) data += static_cast<char>((i * 131 + 7) & 0xff);  // > 3 read buffers
  const std::string path = ::testing::TempDir() + "/digest_test_" + std::to_string(getpid());
  std::ofstream(path, std::ios::binary) << data;
  auto got = Sha256HexOfFile(path);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, Sha256Hex(data));
  // The descriptor's offset does not matter (pread from 0).
  const int fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(lseek(fd, 1000, SEEK_SET), 1000);
  EXPECT_EQ(*Sha256HexOfFd(fd), Sha256Hex(data));
  close(fd);
  std::remove(path.c_str());
  EXPECT_TRUE(absl::IsNotFound(Sha256HexOfFile(path).status()));
}

TEST(Digest, IsSha256Hex) {
  EXPECT_TRUE(IsSha256Hex(Sha256Hex("x")));
  EXPECT_FALSE(IsSha256Hex(std::string(63, 'a')));
  EXPECT_FALSE(IsSha256Hex(std::string(64, 'A')));
  EXPECT_FALSE(IsSha256Hex(std::string(64, 'g')));
}

TEST(Digest, OnlyRegularFilesAreHashed) {
  // A device would be read for ever, a FIFO would block the open.
  EXPECT_EQ(Sha256HexOfFile("/dev/zero").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Sha256HexOfFile("/tmp").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Sha256HexOfFile("/nonexistent/file").status().code(), absl::StatusCode::kNotFound);
}

TEST(Digest, RandomHexIsFreshAndHex) {
  const std::string a = RandomHex(16), b = RandomHex(16);
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
  EXPECT_TRUE(IsSha256Hex(RandomHex(32)));
}

}  // namespace
}  // namespace mxval
