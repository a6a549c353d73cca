#include "common/tree_digest.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/digest.h"
#include "gtest/gtest.h"

namespace mxval {
namespace {

namespace fs = std::filesystem;
using Files = std::map<std::string, std::string>;  // relative path -> contents

class TreeDigestTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const std::string& d : made_) {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  }

  // A fresh empty directory.
  std::string NewDir() {
    std::string t = ::testing::TempDir() + "/tree_digest_XXXXXX";
    EXPECT_NE(mkdtemp(t.data()), nullptr);
    made_.push_back(t);
    return t;
  }

  // A fresh path that does not exist yet (inside a fresh directory).
  std::string NewPath() { return NewDir() + "/copy"; }

  static void Write(const std::string& root, const std::string& rel, const std::string& data) {
    const fs::path p = fs::path(root) / rel;
    std::error_code ec;
    fs::create_directories(p.parent_path(), ec);
    ASSERT_FALSE(ec) << ec.message();
    std::ofstream(p, std::ios::binary) << data;
  }

  std::string MakeTree(const Files& files) {
    const std::string root = NewDir();
    for (const auto& [rel, data] : files) Write(root, rel, data);
    return root;
  }

  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  static std::string Digest(const std::string& dir) {
    absl::StatusOr<std::string> d = TreeSha256(dir);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.value_or("");
  }

  static std::string Paths(const std::string& dir) {
    absl::StatusOr<TreeListing> l = ListTree(dir);
    EXPECT_TRUE(l.ok()) << l.status();
    if (!l.ok()) return "";
    std::string out;
    for (const TreeFile& f : l->files) absl::StrAppend(&out, f.path, ":", f.size, " ");
    return out;
  }

  static bool Exists(const std::string& path) {
    struct stat st;
    return lstat(path.c_str(), &st) == 0;
  }

  static mode_t Mode(const std::string& path) {
    struct stat st;
    EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  }

 private:
  std::vector<std::string> made_;
};

std::string Entry(absl::string_view path, absl::string_view data) {
  return absl::StrCat(path, std::string(1, '\0'), data.size(), std::string(1, '\0'), data);
}

TEST_F(TreeDigestTest, MatchesTheDefinitionInBytewisePathOrder) {
  // '.' (0x2e) < '/' (0x2f) < 'B' < 'b': "a.txt" sorts before "a/c", unlike a
  // per-directory walk; "B" before "a".
  const std::string nul(std::string("x\0y", 3));
  const std::string root = MakeTree({{"b", "bee"}, {"a/c", ""}, {"a.txt", nul}, {"B", "1234567890"}});
  EXPECT_EQ(Digest(root), Sha256Hex(absl::StrCat(Entry("B", "1234567890"), Entry("a.txt", nul), Entry("a/c", ""),
                                                 Entry("b", "bee"))));
  EXPECT_EQ(Paths(root), "B:10 a.txt:3 a/c:0 b:3 ");
  EXPECT_EQ(Digest(MakeTree({})), Sha256Hex(""));
}

TEST_F(TreeDigestTest, StableAcrossCreationOrderAndMetadata) {
  const std::string a = NewDir();
  const std::string b = NewDir();
  const std::vector<std::pair<std::string, std::string>> files = {
      {"pkg/__init__.py", ""}, {"pkg/bmm.py", "def run(): pass\n"}, {"configs/t.json", "{}"}, {"z", "zz"}};
  for (const auto& [rel, data] : files) Write(a, rel, data);
  for (auto it = files.rbegin(); it != files.rend(); ++it) Write(b, it->first, it->second);
  ASSERT_EQ(chmod((b + "/pkg/bmm.py").c_str(), 0600), 0);  // modes and times are not part of the digest
  const std::string d = Digest(a);
  EXPECT_TRUE(IsSha256Hex(d)) << d;
  EXPECT_EQ(Digest(b), d);
  EXPECT_EQ(Digest(a), d);
}

TEST_F(TreeDigestTest, ChangesWithAByteANameOrALocation) {
  const Files base = {{"pkg/bmm.py", "K = 32\n"}, {"pkg/util.py", "x = 1\n"}};
  const std::string d = Digest(MakeTree(base));
  const std::vector<Files> variants = {
      {{"pkg/bmm.py", "K = 33\n"}, {"pkg/util.py", "x = 1\n"}},                     // a byte
      {{"pkg/bmm.py", "K = 32\n "}, {"pkg/util.py", "x = 1\n"}},                    // a byte more
      {{"pkg/bmm2.py", "K = 32\n"}, {"pkg/util.py", "x = 1\n"}},                    // a file name
      {{"pkg/sub/bmm.py", "K = 32\n"}, {"pkg/util.py", "x = 1\n"}},                 // a location
      {{"bmm.py", "K = 32\n"}, {"pkg/util.py", "x = 1\n"}},                         // a location
      {{"pkg/bmm.py", "K = 32\n"}, {"pkg/util.py", "x = 1\n"}, {"pkg/empty", ""}},  // an empty file
  };
  std::vector<std::string> seen = {d};
  for (const Files& v : variants) {
    const std::string dv = Digest(MakeTree(v));
    for (const std::string& s : seen) EXPECT_NE(dv, s);
    seen.push_back(dv);
  }
}

TEST_F(TreeDigestTest, NoAmbiguityBetweenNamesSlashesSizesAndContents) {
  EXPECT_NE(Digest(MakeTree({{"a/bc", "x"}})), Digest(MakeTree({{"ab/c", "x"}})));
  EXPECT_NE(Digest(MakeTree({{"a", "bc"}})), Digest(MakeTree({{"ab", "c"}})));
  // One file whose bytes look like a second entry vs two files.
  EXPECT_NE(Digest(MakeTree({{"a", absl::StrCat("x", Entry("b", "y"))}})), Digest(MakeTree({{"a", "x"}, {"b", "y"}})));
  EXPECT_NE(Digest(MakeTree({{"a", "1"}})), Digest(MakeTree({{"a", "11"}})));
}

TEST_F(TreeDigestTest, ExcludedDirectoriesAndPycFilesAreIgnored) {
  const Files base = {{"pkg/bmm.py", "code"}, {".gitignore", "*.pyc"}, {"git/x", "kept"}, {"x.pyc.txt", "kept"}};
  const std::string clean = MakeTree(base);
  const std::string noisy = MakeTree(base);
  Write(noisy, "__pycache__/bmm.cpython-311.pyc", "bytecode");
  Write(noisy, "pkg/__pycache__/notes", "anything");
  Write(noisy, ".git/HEAD", "ref: refs/heads/main");
  Write(noisy, "pkg/.git/objects/ab/cd", "blob");
  Write(noisy, "pkg/bmm.pyc", "bytecode");
  Write(noisy, "top.pyc", std::string(1000, 'p'));
  // Nothing under an excluded directory is looked at, not even a symlink.
  ASSERT_EQ(symlink("/etc/passwd", (noisy + "/pkg/__pycache__/link").c_str()), 0);
  EXPECT_EQ(Digest(noisy), Digest(clean));
  EXPECT_EQ(Paths(noisy), ".gitignore:5 git/x:4 pkg/bmm.py:4 x.pyc.txt:4 ");
  // Excluded files count toward no limit.
  TreeLimits tight;
  tight.max_files = 4;
  tight.max_total_bytes = 17;
  tight.max_dirs = 2;
  EXPECT_TRUE(TreeSha256(noisy, tight).ok()) << TreeSha256(noisy, tight).status();
}

TEST_F(TreeDigestTest, SymlinksAndOtherSpecialFilesAreRejected) {
  struct Case {
    std::string what;
    std::function<void(const std::string&)> make;
    std::string path;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"file symlink", [](const std::string& r) { ASSERT_EQ(symlink("bmm.py", (r + "/pkg/alias.py").c_str()), 0); },
       "pkg/alias.py", "symlinks are not allowed in a kernel library tree"},
      {"dir symlink", [](const std::string& r) { ASSERT_EQ(symlink("/tmp", (r + "/pkg/tmp").c_str()), 0); }, "pkg/tmp",
       "symlinks are not allowed in a kernel library tree"},
      {"dangling symlink", [](const std::string& r) { ASSERT_EQ(symlink("nowhere", (r + "/dangling").c_str()), 0); },
       "dangling", "symlinks are not allowed in a kernel library tree"},
      {"symlink named .pyc", [](const std::string& r) { ASSERT_EQ(symlink("bmm.py", (r + "/pkg/x.pyc").c_str()), 0); },
       "pkg/x.pyc", "symlinks are not allowed in a kernel library tree"},
      {"symlink named __pycache__",
       [](const std::string& r) { ASSERT_EQ(symlink("/tmp", (r + "/pkg/__pycache__").c_str()), 0); }, "pkg/__pycache__",
       "symlinks are not allowed in a kernel library tree"},
      {"fifo", [](const std::string& r) { ASSERT_EQ(mkfifo((r + "/pkg/pipe").c_str(), 0600), 0); }, "pkg/pipe",
       "is a FIFO"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string root = MakeTree({{"pkg/bmm.py", "code"}});
    c.make(root);
    for (const absl::Status& st : {ListTree(root).status(), TreeSha256(root).status()}) {
      EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
      EXPECT_TRUE(absl::StrContains(st.message(), absl::StrCat("'", c.path, "'"))) << st;
      EXPECT_TRUE(absl::StrContains(st.message(), c.message)) << st;
    }
    const std::string dst = NewPath();
    const absl::StatusOr<std::string> copied = CopyVerifiedTree(root, dst, Sha256Hex("x"));
    EXPECT_EQ(copied.status().code(), absl::StatusCode::kInvalidArgument) << copied.status();
    EXPECT_FALSE(Exists(dst));
  }
}

TEST_F(TreeDigestTest, LimitsAreEnforcedWithTheirNumbers) {
  const std::string root = MakeTree({{"abc/defg", "0123456789"}, {"abc/h", "0123456789"}, {"x/y", "0"}});
  TreeLimits l;
  l.max_files = 3;
  l.max_total_bytes = 21;
  l.max_path_bytes = 8;
  l.max_dirs = 2;
  ASSERT_TRUE(TreeSha256(root, l).ok()) << TreeSha256(root, l).status();

  auto expect = [&](TreeLimits limits, absl::StatusCode code, std::vector<std::string> words) {
    for (const absl::Status& st : {ListTree(root, limits).status(), TreeSha256(root, limits).status(),
                                   CopyVerifiedTree(root, NewPath(), Sha256Hex("x"), limits).status()}) {
      EXPECT_EQ(st.code(), code) << st;
      for (const std::string& w : words) EXPECT_TRUE(absl::StrContains(st.message(), w)) << st << " lacks " << w;
    }
  };
  TreeLimits files = l;
  files.max_files = 2;
  expect(files, absl::StatusCode::kResourceExhausted, {"max_files 2"});
  TreeLimits bytes = l;
  bytes.max_total_bytes = 20;
  expect(bytes, absl::StatusCode::kResourceExhausted, {"max_total_bytes 20"});
  TreeLimits path = l;
  path.max_path_bytes = 7;
  expect(path, absl::StatusCode::kInvalidArgument, {"'abc/defg'", "8 bytes", "max_path_bytes 7"});
  TreeLimits dirs = l;
  dirs.max_dirs = 1;
  expect(dirs, absl::StatusCode::kResourceExhausted, {"max_dirs 1"});

  const TreeLimits defaults;
  EXPECT_EQ(defaults.max_files, 20000);
  EXPECT_EQ(defaults.max_total_bytes, 512 << 20);
  EXPECT_EQ(defaults.max_path_bytes, 1024);
}

TEST_F(TreeDigestTest, MissingOrNonDirectoryRootIsNotFound) {
  const std::string dir = NewDir();
  EXPECT_TRUE(absl::IsNotFound(ListTree(dir + "/missing").status()));
  Write(dir, "file", "x");
  EXPECT_TRUE(absl::IsNotFound(TreeSha256(dir + "/file").status()));
  const std::string dst = NewPath();
  EXPECT_TRUE(absl::IsNotFound(CopyVerifiedTree(dir + "/missing", dst, Sha256Hex("x")).status()));
  EXPECT_FALSE(Exists(dst));
}

TEST_F(TreeDigestTest, CopyVerifiedTreeCopiesExactlyTheListedBytes) {
  std::string all_bytes;
  for (int i = 0; i < 256; ++i) all_bytes += static_cast<char>(i);
  std::string big;
  for (int i = 0; i < 200000; ++i) big += static_cast<char>((i * 131 + 7) & 0xff);  // > 3 read buffers
  const std::string src = MakeTree({{"mxval_library.json", "{}"},
                                    {"pkg/__init__.py", ""},
                                    {"pkg/bytes.bin", all_bytes},
                                    {"pkg/deep/er/big.bin", big},
                                    {"configs/t.json", "{\"a\": 1}"}});
  Write(src, "pkg/__pycache__/x.pyc", "bytecode");
  Write(src, "pkg/y.pyc", "bytecode");
  ASSERT_EQ(chmod((src + "/pkg/bytes.bin").c_str(), 0600), 0);
  ASSERT_EQ(chmod((src + "/mxval_library.json").c_str(), 0755), 0);
  const std::string want = Digest(src);

  const mode_t old_umask = umask(077);  // the copy's modes must not depend on it
  const std::string dst = NewPath();
  const absl::StatusOr<std::string> got = CopyVerifiedTree(src, dst, want);
  umask(old_umask);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, want);
  EXPECT_EQ(Digest(dst), want);
  EXPECT_EQ(Paths(dst), Paths(src));
  EXPECT_EQ(Read(dst + "/pkg/bytes.bin"), all_bytes);
  EXPECT_EQ(Read(dst + "/pkg/deep/er/big.bin"), big);
  EXPECT_FALSE(Exists(dst + "/pkg/__pycache__"));
  EXPECT_FALSE(Exists(dst + "/pkg/y.pyc"));
  EXPECT_EQ(Mode(dst), 0700u);
  EXPECT_EQ(Mode(dst + "/pkg"), 0755u);
  EXPECT_EQ(Mode(dst + "/pkg/deep/er"), 0755u);
  EXPECT_EQ(Mode(dst + "/pkg/bytes.bin"), 0644u);
  EXPECT_EQ(Mode(dst + "/mxval_library.json"), 0644u);

  // An existing empty directory is taken over.
  const std::string empty = NewDir();
  ASSERT_EQ(chmod(empty.c_str(), 0755), 0);
  ASSERT_TRUE(CopyVerifiedTree(src, empty, want).ok());
  EXPECT_EQ(Digest(empty), want);
  EXPECT_EQ(Mode(empty), 0700u);
}

TEST_F(TreeDigestTest, CopyVerifiedTreeRefusesAWrongDigestAndLeavesNoCopy) {
  const std::string src = MakeTree({{"pkg/bmm.py", "K = 32\n"}});
  const std::string registered = Digest(MakeTree({{"pkg/bmm.py", "K = 33\n"}}));
  const std::string actual = Digest(src);
  const std::string dst = NewPath();
  const absl::StatusOr<std::string> got = CopyVerifiedTree(src, dst, registered);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kPermissionDenied) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), registered)) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), actual)) << got.status();
  EXPECT_FALSE(Exists(dst));
  // Also when the destination was an existing empty directory.
  const std::string empty = NewDir();
  EXPECT_TRUE(absl::IsPermissionDenied(CopyVerifiedTree(src, empty, registered).status()));
  EXPECT_FALSE(Exists(empty));
}

TEST_F(TreeDigestTest, CopyVerifiedTreeChecksItsArgumentsFirst) {
  const std::string src = MakeTree({{"a", "x"}});
  const std::string want = Digest(src);
  const std::string dst = NewPath();
  for (const std::string& bad : {std::string("ABC"), absl::AsciiStrToUpper(want), want.substr(1)}) {
    EXPECT_TRUE(absl::IsInvalidArgument(CopyVerifiedTree(src, dst, bad).status())) << bad;
    EXPECT_FALSE(Exists(dst));
  }
  const std::string full = MakeTree({{"keep", "mine"}});
  const absl::Status st = CopyVerifiedTree(src, full, want).status();
  EXPECT_TRUE(absl::IsAlreadyExists(st)) << st;
  EXPECT_EQ(Read(full + "/keep"), "mine");
  EXPECT_EQ(Paths(full), "keep:4 ");
  const std::string file = full + "/keep";
  EXPECT_TRUE(absl::IsAlreadyExists(CopyVerifiedTree(src, file, want).status()));
  EXPECT_EQ(Read(file), "mine");
  const std::string link = NewDir() + "/link";
  ASSERT_EQ(symlink(NewDir().c_str(), link.c_str()), 0);  // to an empty directory: still refused
  EXPECT_TRUE(absl::IsAlreadyExists(CopyVerifiedTree(src, link, want).status()));
}

// The Python definition in tree_digest.h, as written there.
std::string PythonFromHeader() {
  std::ifstream in(std::string(MXVAL_SOURCE_DIR) + "/common/tree_digest.h");
  std::string line, code;
  bool on = false;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "//   import hashlib")) on = true;
    if (!on) continue;
    code += std::string(absl::StripPrefix(line, "//   ")) + "\n";
    if (absl::StrContains(line, "return h.hexdigest()")) break;
  }
  return code;
}

TEST_F(TreeDigestTest, AgreesWithThePythonDefinitionInTheHeader) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  const std::string python = PythonFromHeader();
  ASSERT_TRUE(absl::StrContains(python, "def tree_sha256(root):")) << python;
  ASSERT_TRUE(absl::StrContains(python, "return h.hexdigest()")) << python;
  ASSERT_FALSE(absl::StrContains(python, "'")) << "the script is passed in single quotes";

  std::string big;
  for (int i = 0; i < 100000; ++i) big += static_cast<char>((i * 7 + 3) & 0xff);
  const std::string root = MakeTree({{"mxval_library.json", "{\"name\": \"x\"}"},
                                     {"b", "bee"},
                                     {"a.txt", std::string("x\0y", 3)},
                                     {"a/c", ""},
                                     {"B/Z", "upper"},
                                     {"sp ace/f n", "space"},
                                     {"\xc3\xa9t\xc3\xa9.py", "utf-8 name"},
                                     {"raw\xff\x80name", "not utf-8"},
                                     {"d1/d2/d3/d4/deep.py", "deep"},
                                     {"pkg/big.bin", big},
                                     {".gitignore", "*.pyc"}});
  Write(root, "pkg/__pycache__/m.cpython-311.pyc", "bytecode");
  Write(root, ".git/config", "[core]");
  Write(root, "pkg/m.pyc", "bytecode");

  const std::string cmd =
      absl::StrCat("/usr/bin/python3 -c '", python, "import sys\nprint(tree_sha256(sys.argv[1]))\n' ", root, " 2>&1");
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[256];
  while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
  ASSERT_EQ(pclose(p), 0) << out;
  EXPECT_EQ(std::string(absl::StripTrailingAsciiWhitespace(out)), Digest(root));
}

}  // namespace
}  // namespace mxval
