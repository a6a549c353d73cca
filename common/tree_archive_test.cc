#include "common/tree_archive.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/digest.h"
#include "gtest/gtest.h"

namespace mxval {
namespace {

namespace fs = std::filesystem;

std::string Entry(const std::string& path, const std::string& data) {
  return absl::StrCat(path, std::string(1, '\0'), data.size(), std::string(1, '\0'), data);
}

// An entry with a raw size field.
std::string Raw(const std::string& path, const std::string& size, const std::string& data) {
  return path + std::string(1, '\0') + size + std::string(1, '\0') + data;
}

absl::Status Read(const std::string& archive, TreeLimits limits = {}, TreeArchiveSink* sink = nullptr) {
  TreeArchiveReader r(limits, sink);
  if (absl::Status st = r.Feed(archive); !st.ok()) return st;
  return r.Finish();
}

class TreeArchiveTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const std::string& d : made_) {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  }
  std::string NewDir() {
    std::string t = ::testing::TempDir() + "/tree_archive_XXXXXX";
    EXPECT_NE(mkdtemp(t.data()), nullptr);
    made_.push_back(t);
    return t;
  }
  static void Write(const std::string& root, const std::string& rel, const std::string& data) {
    const fs::path p = fs::path(root) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << data;
  }
  std::vector<std::string> made_;
};

TEST_F(TreeArchiveTest, ArchiveDigestIsTheTreeDigestAndExtractsToTheSameTree) {
  const std::string src = NewDir();
  Write(src, "mxval_library.json", "{\"name\": \"x\"}");
  Write(src, "pkg/kernel.py", std::string(3 << 20, 'k'));  // spans several 1 MiB reads
  Write(src, "pkg/a.b", "");
  Write(src, "pkg/__pycache__/kernel.cpython-311.pyc", "ignored");
  Write(src, "z.pyc", "ignored");
  Write(src, "sub/.git", "gitdir: ../.git/modules/sub");  // a submodule's pointer file: part of the digest
  Write(src, ".git/HEAD", "ignored");
  std::string archive;
  auto digest = WriteTreeArchive(src, [&](absl::string_view b) {
    archive.append(b.data(), b.size());
    return absl::OkStatus();
  });
  ASSERT_TRUE(digest.ok()) << digest.status();
  EXPECT_EQ(*digest, *TreeSha256(src));
  EXPECT_EQ(Sha256Hex(archive), *digest);

  // Fed one odd-sized piece at a time into a directory: the same tree.
  const std::string dst = NewDir();
  DirectoryTreeSink sink(dst);
  TreeArchiveReader r({}, &sink);
  for (size_t i = 0; i < archive.size(); i += 7777) ASSERT_TRUE(r.Feed(archive.substr(i, 7777)).ok());
  ASSERT_TRUE(r.Finish().ok());
  EXPECT_EQ(r.files(), 4);
  EXPECT_EQ(*TreeSha256(dst), *digest);
  EXPECT_FALSE(fs::exists(dst + "/pkg/__pycache__"));
  EXPECT_TRUE(fs::exists(dst + "/sub/.git"));
  EXPECT_FALSE(fs::exists(dst + "/.git"));
}

TEST_F(TreeArchiveTest, HostileArchivesAreRefusedNamingTheEntry) {
  const std::string ok = Entry("a", "1");
  struct Case {
    std::string archive, want;
  } cases[] = {
      {Entry("/etc/passwd", "x"), "absolute path"},
      {Entry("../escape", "x"), "'..' component"},
      {Entry("a/../../escape", "x"), "'..' component"},
      {Entry("./a", "x"), "'.' component"},
      {Entry("a//b", "x"), "empty path component"},
      {Entry("a/", "x"), "empty path component"},
      {Entry("", "x"), "empty path"},
      {Entry("__pycache__/m.pyc", "x"), "__pycache__"},
      {Entry(".git/config", "x"), ".git"},
      {Entry("m.pyc", "x"), ".pyc file"},
      {Entry("b", "1") + Entry("a", "1"), "paths must be sorted"},
      {ok + ok, "paths must be sorted"},
      {Entry("a", "1") + Entry("a/b", "1"), "'a' is a file, not a directory"},
      {Entry("a", "1") + Entry("a.x", "1") + Entry("a/b", "1"), "'a' is a file, not a directory"},
      {Raw("a", "1x", ""), "not a decimal number"},
      {Raw("a", "01", "x"), "not a decimal number"},
      {Raw("a", "", ""), "not a decimal number"},
      {Raw("a", "-1", ""), "not a decimal number"},
      {Raw("a", std::string(25, '9'), ""), "not a decimal number"},
      {Raw("a", "5", "abc"), "ends inside entry"},
      {std::string("abc"), "ends inside entry"},
      {"", "holds no file"},
  };
  for (const Case& c : cases) {
    const absl::Status st = Read(c.archive);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.want << ": " << st;
    EXPECT_NE(std::string(st.message()).find(c.want), std::string::npos) << st;
  }
  EXPECT_TRUE(Read(ok).ok());
}

TEST_F(TreeArchiveTest, BoundsAreCheckedBeforeAnythingIsAllocatedOrWritten) {
  TreeLimits small;
  small.max_files = 2;
  small.max_total_bytes = 10;
  small.max_path_bytes = 8;
  EXPECT_EQ(Read(Entry("a", "1") + Entry("b", "1") + Entry("c", "1"), small).code(),
            absl::StatusCode::kResourceExhausted);
  // A huge declared size is refused at its header, before any byte of it.
  EXPECT_EQ(Read(Raw("a", "999999999999999999", ""), small).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Read(Entry("a", "123456") + Entry("b", "123456"), small).code(), absl::StatusCode::kResourceExhausted);
  // A path without its terminator is cut off at the bound, however long the stream.
  TreeArchiveReader r(small);
  EXPECT_TRUE(r.Feed("12345678").ok());
  EXPECT_EQ(r.Feed("9").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Feed(Entry("b", "1")).code(), absl::StatusCode::kInvalidArgument);  // stays failed
}

TEST_F(TreeArchiveTest, ExtractionNeverLeavesTheRoot) {
  // A symlink planted where a directory will be created is not followed.
  const std::string outside = NewDir();
  const std::string dst = NewDir();
  ASSERT_EQ(symlink(outside.c_str(), (dst + "/pkg").c_str()), 0);
  DirectoryTreeSink sink(dst);
  const absl::Status st = Read(Entry("pkg/evil.py", "x"), {}, &sink);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_FALSE(fs::exists(outside + "/evil.py"));
}

TEST_F(TreeArchiveTest, WritingRefusesATreeWithASymlink) {
  const std::string src = NewDir();
  Write(src, "a.py", "x");
  ASSERT_EQ(symlink("/etc/passwd", (src + "/link").c_str()), 0);
  auto digest = WriteTreeArchive(src, [](absl::string_view) { return absl::OkStatus(); });
  EXPECT_EQ(digest.status().code(), absl::StatusCode::kInvalidArgument) << digest.status();
}

}  // namespace
}  // namespace mxval
