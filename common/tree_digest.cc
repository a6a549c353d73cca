#include "common/tree_digest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <system_error>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/digest.h"
#include "common/status_macros.h"

namespace mxval {
namespace {

constexpr absl::string_view kTree = "kernel library tree";

// An owned descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }
  int Release() { return std::exchange(fd_, -1); }
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Paths come from the tree's author: escaped so a message stays one printable line.
std::string Quoted(absl::string_view path) { return absl::StrCat("'", absl::CHexEscape(path), "'"); }

absl::Status OsError(absl::string_view what, absl::string_view path, int err) {
  return absl::UnavailableError(absl::StrCat(kTree, ": ", what, " ", Quoted(path), ": ", strerror(err)));
}

absl::Status Changed(absl::string_view rel, absl::string_view how) {
  return absl::AbortedError(absl::StrCat(kTree, ": ", Quoted(rel), " ", how, " while the tree was read"));
}

absl::Status NotAllowed(absl::string_view rel, mode_t mode) {
  if (S_ISLNK(mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kTree, ": ", Quoted(rel), ": symlinks are not allowed in a kernel library tree"));
  }
  const char* kind = S_ISFIFO(mode) ? "a FIFO" : S_ISSOCK(mode) ? "a socket" : "a device";
  return absl::InvalidArgumentError(
      absl::StrCat(kTree, ": ", Quoted(rel), " is ", kind,
                   ": only regular files and directories are allowed in a kernel library tree"));
}

absl::Status CheckPathLength(absl::string_view rel, const TreeLimits& limits) {
  if (static_cast<int64_t>(rel.size()) <= limits.max_path_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(kTree, ": path ", Quoted(rel), " is ", rel.size(),
                                                 " bytes, more than max_path_bytes ", limits.max_path_bytes));
}

absl::Status CheckTotalBytes(int64_t total, int64_t add, const TreeLimits& limits) {
  if (add <= limits.max_total_bytes - total) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat(kTree, ": files total more than max_total_bytes ", limits.max_total_bytes, " bytes"));
}

absl::StatusOr<Fd> OpenRoot(const std::string& dir) {
  Fd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.ok()) return fd;
  const int err = errno;
  if (err == ENOENT || err == ENOTDIR) {
    return absl::NotFoundError(absl::StrCat(kTree, ": no directory ", Quoted(dir), ": ", strerror(err)));
  }
  return OsError("cannot open", dir, err);
}

// Opens the entry `name` of `dir_fd` (whose tree path is `rel`) without
// following a symlink: as a directory if `directory`, else as a file to read.
absl::StatusOr<Fd> OpenEntry(int dir_fd, const std::string& name, absl::string_view rel, bool directory) {
  // O_NONBLOCK: a FIFO swapped in after the listing must not block the open;
  // it is rejected by the fstat that follows. It changes nothing for regular files.
  const int flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | (directory ? O_DIRECTORY : O_NONBLOCK);
  Fd fd(openat(dir_fd, name.c_str(), flags));
  if (!fd.ok()) {
    const int err = errno;
    if (err == ELOOP) return NotAllowed(rel, S_IFLNK);
    if (err == ENOENT) return Changed(rel, "vanished");
    if (err == ENOTDIR) return Changed(rel, "stopped being a directory");
    return OsError("cannot open", rel, err);
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return OsError("cannot stat", rel, errno);
  if (directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) return Changed(rel, "changed type");
    return NotAllowed(rel, st.st_mode);
  }
  return fd;
}

// The names in a directory but "." and "..". They are read up front and the
// stream closed, so a walk holds one descriptor per level (its depth is
// bounded by max_path_bytes / 2).
absl::StatusOr<std::vector<std::string>> ReadNames(int dir_fd, absl::string_view shown) {
  const int dup_fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return OsError("cannot read directory", shown, errno);
  DIR* d = fdopendir(dup_fd);
  if (d == nullptr) {
    const int err = errno;
    close(dup_fd);
    return OsError("cannot read directory", shown, err);
  }
  std::unique_ptr<DIR, int (*)(DIR*)> closer(d, closedir);
  rewinddir(d);  // the duplicate shares dir_fd's offset
  std::vector<std::string> names;
  while (true) {
    errno = 0;
    const dirent* e = readdir(d);
    if (e == nullptr) {
      if (errno != 0) return OsError("cannot read directory", shown, errno);
      break;
    }
    const absl::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  return names;
}

class Walker {
 public:
  Walker(const TreeLimits& limits, TreeListing* out) : limits_(limits), out_(out) {}

  // Appends the files under `dir_fd` (tree path `prefix`, "" for the root).
  absl::Status Walk(int dir_fd, const std::string& prefix) {
    MXVAL_ASSIGN_OR_RETURN(std::vector<std::string> names, ReadNames(dir_fd, prefix.empty() ? "." : prefix));
    for (const std::string& name : names) {
      const std::string rel = prefix.empty() ? name : absl::StrCat(prefix, "/", name);
      struct stat st;
      if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) return Changed(rel, "vanished");
        return OsError("cannot stat", rel, errno);
      }
      if (S_ISDIR(st.st_mode)) {
        if (name == "__pycache__" || name == ".git") continue;
        MXVAL_RETURN_IF_ERROR(CheckPathLength(rel, limits_));
        if (++dirs_ > limits_.max_dirs) {
          return absl::ResourceExhaustedError(
              absl::StrCat(kTree, ": more than max_dirs ", limits_.max_dirs, " directories"));
        }
        MXVAL_ASSIGN_OR_RETURN(Fd sub, OpenEntry(dir_fd, name, rel, /*directory=*/true));
        MXVAL_RETURN_IF_ERROR(Walk(sub.get(), rel));
      } else if (S_ISREG(st.st_mode)) {
        if (absl::EndsWith(name, ".pyc")) continue;
        MXVAL_RETURN_IF_ERROR(CheckPathLength(rel, limits_));
        if (static_cast<int64_t>(out_->files.size()) >= limits_.max_files) {
          return absl::ResourceExhaustedError(
              absl::StrCat(kTree, ": more than max_files ", limits_.max_files, " files"));
        }
        MXVAL_RETURN_IF_ERROR(CheckTotalBytes(out_->total_bytes, st.st_size, limits_));
        out_->total_bytes += st.st_size;
        out_->files.push_back({rel, static_cast<int64_t>(st.st_size)});
      } else {
        return NotAllowed(rel, st.st_mode);
      }
    }
    return absl::OkStatus();
  }

 private:
  const TreeLimits& limits_;
  TreeListing* out_;
  int64_t dirs_ = 0;
};

absl::StatusOr<TreeListing> ListFrom(int root_fd, const TreeLimits& limits) {
  TreeListing listing;
  Walker walker(limits, &listing);
  MXVAL_RETURN_IF_ERROR(walker.Walk(root_fd, ""));
  // std::string compares as unsigned char: bytewise, as the digest defines.
  std::sort(listing.files.begin(), listing.files.end(),
            [](const TreeFile& a, const TreeFile& b) { return a.path < b.path; });
  return listing;
}

// Opens the listed file `rel` under `root_fd`, one component at a time, so no
// symlink anywhere on the way is followed (a directory swapped for a symlink
// after the listing is refused, not read through).
absl::StatusOr<Fd> OpenInTree(int root_fd, const std::string& rel) {
  const std::vector<std::string> parts = absl::StrSplit(rel, '/');
  Fd dir;
  std::string walked;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    walked = walked.empty() ? parts[i] : absl::StrCat(walked, "/", parts[i]);
    MXVAL_ASSIGN_OR_RETURN(dir, OpenEntry(dir.ok() ? dir.get() : root_fd, parts[i], walked, /*directory=*/true));
  }
  return OpenEntry(dir.ok() ? dir.get() : root_fd, parts.back(), rel, /*directory=*/false);
}

// Creates `rel`'s file under `dst_fd` (0644), making its missing directories (0755).
// Modes are set with fchmod so the umask does not change them.
absl::StatusOr<Fd> CreateInCopy(int dst_fd, const std::string& rel) {
  const std::vector<std::string> parts = absl::StrSplit(rel, '/');
  Fd dir;
  std::string walked;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    walked = walked.empty() ? parts[i] : absl::StrCat(walked, "/", parts[i]);
    const int parent = dir.ok() ? dir.get() : dst_fd;
    const char* name = parts[i].c_str();
    const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    Fd sub(openat(parent, name, flags));
    if (!sub.ok() && errno == ENOENT) {
      if (mkdirat(parent, name, 0755) != 0) return OsError("cannot create directory in the copy", walked, errno);
      sub = Fd(openat(parent, name, flags));
      if (!sub.ok() || fchmod(sub.get(), 0755) != 0)
        return OsError("cannot create directory in the copy", walked, errno);
    }
    if (!sub.ok()) return OsError("cannot open directory in the copy", walked, errno);
    dir = std::move(sub);
  }
  Fd out(openat(dir.ok() ? dir.get() : dst_fd, parts.back().c_str(),
                O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!out.ok() || fchmod(out.get(), 0644) != 0) return OsError("cannot create file in the copy", rel, errno);
  return out;
}

absl::Status WriteAll(int fd, const char* data, size_t n, absl::string_view rel) {
  while (n > 0) {
    const ssize_t put = write(fd, data, n);
    if (put < 0) {
      if (errno == EINTR) continue;
      return OsError("cannot write the copy of", rel, errno);
    }
    data += put;
    n -= static_cast<size_t>(put);
  }
  return absl::OkStatus();
}

std::string Hex(const unsigned char* md, unsigned n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (unsigned i = 0; i < n; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

struct CtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

// The digest of the listed files as read now, through one descriptor each;
// with `dst_fd` >= 0 the bytes hashed are also written under it. The size
// hashed is the open file's size, and exactly that many bytes must follow.
absl::StatusOr<std::string> HashTree(int root_fd, const TreeListing& listing, const TreeLimits& limits, int dst_fd) {
  std::unique_ptr<EVP_MD_CTX, CtxFree> ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return absl::InternalError("sha256: cannot initialize the digest");
  }
  std::vector<char> buf(1 << 16);
  int64_t total = 0;
  for (const TreeFile& file : listing.files) {
    MXVAL_ASSIGN_OR_RETURN(Fd in, OpenInTree(root_fd, file.path));
    struct stat st;
    if (fstat(in.get(), &st) != 0) return OsError("cannot stat", file.path, errno);
    const int64_t size = st.st_size;
    MXVAL_RETURN_IF_ERROR(CheckTotalBytes(total, size, limits));
    total += size;
    Fd out;
    if (dst_fd >= 0) {
      MXVAL_ASSIGN_OR_RETURN(out, CreateInCopy(dst_fd, file.path));
    }
    const std::string header = absl::StrCat(file.path, absl::string_view("\0", 1), size, absl::string_view("\0", 1));
    EVP_DigestUpdate(ctx.get(), header.data(), header.size());
    int64_t left = size;
    // One read past the end too: the file must end where its size said.
    while (true) {
      const size_t want = left > 0 ? static_cast<size_t>(std::min<int64_t>(left, buf.size())) : 1;
      const ssize_t got = read(in.get(), buf.data(), want);
      if (got < 0) {
        if (errno == EINTR) continue;
        return OsError("cannot read", file.path, errno);
      }
      if (left == 0) {
        if (got > 0) return Changed(file.path, "grew");
        break;
      }
      if (got == 0) return Changed(file.path, "shrank");
      EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(got));
      if (out.ok()) MXVAL_RETURN_IF_ERROR(WriteAll(out.get(), buf.data(), static_cast<size_t>(got), file.path));
      left -= got;
    }
    // close reports a delayed write error (NFS, quota): checked, not dropped.
    if (out.ok() && close(out.Release()) != 0) return OsError("cannot write the copy of", file.path, errno);
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &n);
  return Hex(md, n);
}

// The copy's root: created 0700, or an existing empty directory made 0700.
absl::StatusOr<Fd> TakeDestination(const std::string& dst) {
  bool created = true;
  if (mkdir(dst.c_str(), 0700) != 0) {
    if (errno != EEXIST) return OsError("cannot create the copy", dst, errno);
    created = false;
    struct stat st;
    if (lstat(dst.c_str(), &st) != 0) return OsError("cannot stat the copy", dst, errno);
    if (!S_ISDIR(st.st_mode)) {
      return absl::AlreadyExistsError(
          absl::StrCat(kTree, ": copy destination ", Quoted(dst), " exists and is not a directory"));
    }
  }
  absl::StatusOr<Fd> fd = [&]() -> absl::StatusOr<Fd> {
    Fd fd(open(dst.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.ok()) return OsError("cannot open the copy", dst, errno);
    MXVAL_ASSIGN_OR_RETURN(std::vector<std::string> names, ReadNames(fd.get(), dst));
    if (!names.empty()) {
      return absl::AlreadyExistsError(
          absl::StrCat(kTree, ": copy destination ", Quoted(dst), " exists and is not empty"));
    }
    if (fchmod(fd.get(), 0700) != 0) return OsError("cannot chmod the copy", dst, errno);
    return fd;
  }();
  if (!fd.ok() && created) rmdir(dst.c_str());
  return fd;
}

}  // namespace

absl::StatusOr<TreeListing> ListTree(const std::string& dir, const TreeLimits& limits) {
  MXVAL_ASSIGN_OR_RETURN(Fd root, OpenRoot(dir));
  return ListFrom(root.get(), limits);
}

absl::StatusOr<std::string> TreeSha256(const std::string& dir, const TreeLimits& limits) {
  MXVAL_ASSIGN_OR_RETURN(Fd root, OpenRoot(dir));
  MXVAL_ASSIGN_OR_RETURN(TreeListing listing, ListFrom(root.get(), limits));
  return HashTree(root.get(), listing, limits, /*dst_fd=*/-1);
}

absl::StatusOr<std::string> CopyVerifiedTree(const std::string& src, const std::string& dst,
                                             const std::string& expected_sha256, const TreeLimits& limits) {
  if (!IsSha256Hex(expected_sha256)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kTree, ": expected digest ", Quoted(expected_sha256), " is not 64 lowercase hex digits"));
  }
  MXVAL_ASSIGN_OR_RETURN(Fd dst_fd, TakeDestination(dst));
  absl::StatusOr<std::string> got = [&]() -> absl::StatusOr<std::string> {
    MXVAL_ASSIGN_OR_RETURN(Fd root, OpenRoot(src));
    MXVAL_ASSIGN_OR_RETURN(TreeListing listing, ListFrom(root.get(), limits));
    return HashTree(root.get(), listing, limits, dst_fd.get());
  }();
  if (got.ok() && *got == expected_sha256) return got;
  dst_fd.Reset();
  std::error_code ec;
  std::filesystem::remove_all(dst, ec);  // never follows symlinks
  if (!got.ok()) return got.status();
  return absl::PermissionDeniedError(absl::StrCat(kTree, " ", Quoted(src), ": the copied files have SHA-256 ", *got,
                                                  ", not the registered ", expected_sha256));
}

}  // namespace mxval
