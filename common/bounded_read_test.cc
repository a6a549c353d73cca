#include "common/bounded_read.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace mxval {
namespace {

std::string Tmp(const std::string& name) {
  return ::testing::TempDir() + "/mxval_bounded_" + std::to_string(getpid()) + "_" + name;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Writes `total` bytes of 'x' into the FIFO at `path` (or, with total < 0,
// until the reader closes it); the write end closes at the end.
std::thread FifoWriter(const std::string& path, int64_t total) {
  return std::thread([path, total] {
    const int fd = ::open(path.c_str(), O_WRONLY);
    if (fd < 0) return;
    const std::string chunk(1 << 16, 'x');
    int64_t sent = 0;
    while (total < 0 || sent < total) {
      const size_t n = total < 0 ? chunk.size() : std::min<int64_t>(chunk.size(), total - sent);
      const ssize_t w = ::write(fd, chunk.data(), n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;  // EPIPE once the reader has stopped
      sent += w;
    }
    ::close(fd);
  });
}

class BoundedReadTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { signal(SIGPIPE, SIG_IGN); }
};

TEST_F(BoundedReadTest, RegularFileUpToTheBound) {
  WriteFile(Tmp("ten"), "0123456789");
  auto s = ReadFileBounded(Tmp("ten"), 10);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, "0123456789");
  auto over = ReadFileBounded(Tmp("ten"), 9);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(over.status().message().find("larger than 9 bytes"), std::string::npos) << over.status();
  EXPECT_NE(over.status().message().find(Tmp("ten")), std::string::npos) << over.status();
  WriteFile(Tmp("empty"), "");
  EXPECT_EQ(*ReadFileBounded(Tmp("empty"), 0), "");
}

TEST_F(BoundedReadTest, MissingFileIsNotFound) {
  EXPECT_EQ(ReadFileBounded(Tmp("nope"), 100).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(BoundedFile::Open(Tmp("nope")).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(BoundedReadTest, DevicesAndDirectoriesAreRefusedEvenThroughSymlinks) {
  for (const char* dev : {"/dev/zero", "/dev/urandom"}) {
    const std::string link = Tmp("link") + std::to_string(dev[5]);
    ::unlink(link.c_str());
    ASSERT_EQ(::symlink(dev, link.c_str()), 0);
    for (bool pipe : {false, true}) {
      auto s = ReadFileBounded(link, int64_t{1} << 30, pipe);
      EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(s.status().message().find("character device"), std::string::npos) << s.status();
    }
    EXPECT_EQ(BoundedFile::Open(link).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ReadFileTail(link, 1024).status().code(), absl::StatusCode::kInvalidArgument);
  }
  auto d = ReadFileBounded(::testing::TempDir(), 1024);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("a directory"), std::string::npos) << d.status();
}

TEST_F(BoundedReadTest, PipeWithinTheBoundIsRead) {
  const std::string fifo = Tmp("fifo_ok");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread w = FifoWriter(fifo, 300000);
  auto s = ReadFileBounded(fifo, 300000, /*allow_pipe=*/true);
  w.join();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->size(), 300000u);
  EXPECT_EQ(s->find_first_not_of('x'), std::string::npos);
}

TEST_F(BoundedReadTest, EndlessPipeIsRefusedAtTheBound) {
  const std::string fifo = Tmp("fifo_big");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread w = FifoWriter(fifo, -1);
  auto s = ReadFileBounded(fifo, 1 << 20, /*allow_pipe=*/true);
  w.join();  // the writer ends on EPIPE once the reader has closed
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("larger than 1 MiB"), std::string::npos) << s.status();
}

TEST_F(BoundedReadTest, PipeWhereNoneIsMeantIsRefusedWithoutWaitingForAWriter) {
  const std::string fifo = Tmp("fifo_no");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto s = ReadFileBounded(fifo, 1024, /*allow_pipe=*/false);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("a pipe"), std::string::npos) << s.status();
}

TEST_F(BoundedReadTest, TailAndRanges) {
  WriteFile(Tmp("tail"), "abcdefghij");
  bool cut = false;
  EXPECT_EQ(*ReadFileTail(Tmp("tail"), 4, &cut), "ghij");
  EXPECT_TRUE(cut);
  EXPECT_EQ(*ReadFileTail(Tmp("tail"), 100, &cut), "abcdefghij");
  EXPECT_FALSE(cut);
  auto f = BoundedFile::Open(Tmp("tail"));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->size(), 10);
  EXPECT_EQ(*f->ReadAt(2, 3), "cde");
  EXPECT_EQ(f->ReadAt(8, 3).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f->ReadAt(-1, 3).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FormatBytes, NamesUnits) {
  EXPECT_EQ(FormatBytes(4 << 20), "4 MiB");
  EXPECT_EQ(FormatBytes(int64_t{4} << 30), "4 GiB");
  EXPECT_EQ(FormatBytes(1024), "1 KiB");
  EXPECT_EQ(FormatBytes(1000), "1000 bytes");
}

}  // namespace
}  // namespace mxval
