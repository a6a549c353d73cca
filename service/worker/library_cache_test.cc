#include "service/worker/library_cache.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/digest.h"
#include "common/tree_archive.h"
#include "common/tree_digest.h"
#include "gtest/gtest.h"

namespace mxval::worker {
namespace {

namespace fs = std::filesystem;

// A coordinator's content store: digest -> (format, bytes), served in
// pieces of 1000 bytes; `served` counts fetches.
struct FakeCoordinator {
  std::map<std::string, std::pair<v1::LibraryFormat, std::string>> blobs;
  int served = 0;
  ContentFetcher Fetcher() {
    return [this](const std::string& sha, const std::function<absl::Status(int64_t, v1::LibraryFormat)>& begin,
                  const std::function<absl::Status(absl::string_view)>& write) -> absl::Status {
      auto it = blobs.find(sha);
      if (it == blobs.end()) return absl::NotFoundError("no such content");
      ++served;
      const std::string& bytes = it->second.second;
      if (absl::Status st = begin(static_cast<int64_t>(bytes.size()), it->second.first); !st.ok()) return st;
      for (size_t i = 0; i < bytes.size(); i += 1000) {
        if (absl::Status st = write(absl::string_view(bytes).substr(i, 1000)); !st.ok()) return st;
      }
      return absl::OkStatus();
    };
  }
};

v1::KernelRef Ref(const std::string& name, const std::string& sha,
                  v1::LibraryFormat format = v1::LIBRARY_FORMAT_SHARED_OBJECT) {
  v1::KernelRef r;
  r.set_library(name);
  r.set_sha256(sha);
  r.set_format(format);
  return r;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class LibraryCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "/library_cache_XXXXXX";
    ASSERT_NE(mkdtemp(root_.data()), nullptr);
    options_.dir = root_ + "/cache";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  std::string root_;
  LibraryCacheOptions options_;
  FakeCoordinator coord_;
};

TEST_F(LibraryCacheTest, FetchesOnceVerifiesAndKeepsByDigest) {
  const std::string bytes(5000, 's');
  const std::string sha = Sha256Hex(bytes);
  coord_.blobs[sha] = {v1::LIBRARY_FORMAT_SHARED_OBJECT, bytes};
  LibraryCache cache(options_, coord_.Fetcher());
  ASSERT_TRUE(cache.Ensure(Ref("lib_a", sha)).ok());
  EXPECT_EQ(ReadAll(options_.dir + "/" + sha + "/liblib_a.so"), bytes);
  ASSERT_TRUE(cache.Ensure(Ref("lib_a", sha)).ok());
  EXPECT_EQ(coord_.served, 1);  // cached
  // The same bytes under another name share the slot, fetched for that name.
  ASSERT_TRUE(cache.Ensure(Ref("lib_b", sha)).ok());
  EXPECT_EQ(ReadAll(options_.dir + "/" + sha + "/liblib_b.so"), bytes);
  EXPECT_TRUE(fs::exists(options_.dir + "/" + sha + "/liblib_a.so"));
  // Changed on disk after the fetch: fetched again, not trusted.
  std::ofstream(options_.dir + "/" + sha + "/liblib_a.so", std::ios::binary) << "tampered";
  ASSERT_TRUE(cache.Ensure(Ref("lib_a", sha)).ok());
  EXPECT_EQ(ReadAll(options_.dir + "/" + sha + "/liblib_a.so"), bytes);
  EXPECT_EQ(coord_.served, 3);
  EXPECT_EQ(fs::status(options_.dir).permissions() & fs::perms::all, fs::perms::owner_all);
}

TEST_F(LibraryCacheTest, ADigestMismatchIsRefusedAndNothingIsCached) {
  const std::string good(3000, 'g');
  const std::string sha = Sha256Hex(good);
  std::string bad = good;
  bad[1234] ^= 1;  // a flipped bit in the stored content
  coord_.blobs[sha] = {v1::LIBRARY_FORMAT_SHARED_OBJECT, bad};
  LibraryCache cache(options_, coord_.Fetcher());
  const absl::Status st = cache.Ensure(Ref("flipped", sha));
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << st;
  EXPECT_NE(std::string(st.message()).find("library 'flipped'"), std::string::npos) << st;
  EXPECT_NE(std::string(st.message()).find(sha), std::string::npos) << st;
  EXPECT_NE(std::string(st.message()).find(Sha256Hex(bad)), std::string::npos) << st;
  // Nothing was left in the cache: no slot, no partial fetch.
  EXPECT_TRUE(fs::is_empty(options_.dir));
  // Asked again, refused again (fetched again, never served from disk).
  EXPECT_EQ(cache.Ensure(Ref("flipped", sha)).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(coord_.served, 2);
  // Content of another format than the task names: refused too.
  coord_.blobs[sha] = {v1::LIBRARY_FORMAT_PYTHON, good};
  EXPECT_EQ(cache.Ensure(Ref("flipped", sha)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fs::is_empty(options_.dir));
  // Content the coordinator does not store: NOT_FOUND (the child tries --kernel-dir).
  EXPECT_EQ(cache.Ensure(Ref("other", std::string(64, 'e'))).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(cache.Ensure(Ref("../x", sha)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.Ensure(Ref("x", "not-a-digest")).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(LibraryCacheTest, APreSeededKernelDirIsUsedWithoutFetchingOnlyWithTheRightDigest) {
  const std::string bytes(100, 'k');
  const std::string sha = Sha256Hex(bytes);
  options_.kernel_dir = root_ + "/kernels";
  fs::create_directories(options_.kernel_dir);
  std::ofstream(options_.kernel_dir + "/libseeded.so", std::ios::binary) << bytes;
  coord_.blobs[sha] = {v1::LIBRARY_FORMAT_SHARED_OBJECT, bytes};
  LibraryCache cache(options_, coord_.Fetcher());
  ASSERT_TRUE(cache.Ensure(Ref("seeded", sha)).ok());
  EXPECT_EQ(coord_.served, 0);
  // Another build in the kernel dir: a miss, fetched.
  std::ofstream(options_.kernel_dir + "/libseeded.so", std::ios::binary) << "another build";
  ASSERT_TRUE(cache.Ensure(Ref("seeded", sha)).ok());
  EXPECT_EQ(coord_.served, 1);
}

TEST_F(LibraryCacheTest, EvictsTheLeastRecentlyUsedPastTheCap) {
  options_.max_bytes = 2500;
  std::vector<std::string> shas;
  for (char c : std::string("abc")) {
    const std::string bytes(1000, c);
    shas.push_back(Sha256Hex(bytes));
    coord_.blobs[shas.back()] = {v1::LIBRARY_FORMAT_SHARED_OBJECT, bytes};
  }
  LibraryCache cache(options_, coord_.Fetcher());
  ASSERT_TRUE(cache.Ensure(Ref("a", shas[0])).ok());
  ASSERT_TRUE(cache.Ensure(Ref("b", shas[1])).ok());
  // Use a again (a's slot gets a newer time than b's), with times far apart.
  struct timespec old_times[2] = {{1000, 0}, {1000, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, (options_.dir + "/" + shas[1]).c_str(), old_times, 0), 0);
  ASSERT_TRUE(cache.Ensure(Ref("a", shas[0])).ok());
  ASSERT_TRUE(cache.Ensure(Ref("c", shas[2])).ok());  // 3000 bytes > 2500: the least recently used goes
  EXPECT_TRUE(fs::exists(options_.dir + "/" + shas[0]));
  EXPECT_FALSE(fs::exists(options_.dir + "/" + shas[1]));
  EXPECT_TRUE(fs::exists(options_.dir + "/" + shas[2]));
  // Content over the whole cap is refused before a byte is written.
  const std::string big(3000, 'z');
  coord_.blobs[Sha256Hex(big)] = {v1::LIBRARY_FORMAT_SHARED_OBJECT, big};
  EXPECT_EQ(cache.Ensure(Ref("z", Sha256Hex(big))).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(fs::exists(options_.dir + "/" + Sha256Hex(big)));
}

TEST_F(LibraryCacheTest, APythonTreeIsExtractedVerifiedAndRefusedWhenItsArchiveLies) {
  const std::string src = root_ + "/src";
  fs::create_directories(src + "/pkg");
  std::ofstream(src + "/mxval_library.json") << "{}";
  std::ofstream(src + "/pkg/k.py") << "print(1)";
  std::string archive;
  auto sha = WriteTreeArchive(src, [&](absl::string_view b) {
    archive.append(b.data(), b.size());
    return absl::OkStatus();
  });
  ASSERT_TRUE(sha.ok());
  coord_.blobs[*sha] = {v1::LIBRARY_FORMAT_PYTHON, archive};
  LibraryCache cache(options_, coord_.Fetcher());
  ASSERT_TRUE(cache.Ensure(Ref("pylib", *sha, v1::LIBRARY_FORMAT_PYTHON)).ok());
  EXPECT_EQ(*TreeSha256(options_.dir + "/" + *sha + "/pylib"), *sha);
  // A hostile archive stored under a digest: refused, nothing written outside or kept.
  const std::string evil = std::string("../../escape.py") + '\0' + "1" + '\0' + "x";
  const std::string evil_sha = Sha256Hex(evil);
  coord_.blobs[evil_sha] = {v1::LIBRARY_FORMAT_PYTHON, evil};
  EXPECT_EQ(cache.Ensure(Ref("pylib", evil_sha, v1::LIBRARY_FORMAT_PYTHON)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(fs::exists(root_ + "/escape.py"));
  EXPECT_FALSE(fs::exists(options_.dir + "/" + evil_sha));
}

}  // namespace
}  // namespace mxval::worker
