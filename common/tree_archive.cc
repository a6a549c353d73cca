#include "common/tree_archive.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "common/digest.h"

namespace mxval {
namespace {

constexpr int kMaxSizeDigits = 18;  // any 18-digit number fits in int64_t

// Why `path` cannot be a tree's file path (empty: it can).
std::string BadPath(const std::string& path) {
  if (path.empty()) return "empty path";
  if (path.front() == '/') return "absolute path";
  // The digest (common/tree_digest.cc) skips directories named __pycache__
  // or .git and files ending in .pyc; a regular file named .git (a
  // submodule's or worktree's pointer) is part of it.
  const std::vector<absl::string_view> parts = absl::StrSplit(path, '/');
  for (size_t i = 0; i < parts.size(); ++i) {
    const absl::string_view c = parts[i];
    if (c.empty()) return "empty path component";
    if (c == "." || c == "..") return absl::StrCat("'", c, "' component");
    if (i + 1 < parts.size() && (c == "__pycache__" || c == ".git")) {
      return absl::StrCat("'", c, "' directory (not part of a tree's digest)");
    }
  }
  if (absl::EndsWith(path, ".pyc")) return ".pyc file (not part of a tree's digest)";
  return "";
}

}  // namespace

TreeArchiveReader::TreeArchiveReader(TreeLimits limits, TreeArchiveSink* sink) : limits_(limits), sink_(sink) {}

absl::Status TreeArchiveReader::Fail(absl::Status st) {
  error_ = st;
  return st;
}

absl::Status TreeArchiveReader::EndHeader() {
  const std::string where = absl::StrCat("archive entry ", files_, " '", path_.substr(0, 200), "'");
  if (size_text_.empty() || (size_text_.size() > 1 && size_text_[0] == '0')) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(where, ": size '", size_text_, "' is not a decimal number")));
  }
  int64_t size = 0;
  for (char c : size_text_) size = size * 10 + (c - '0');
  if (files_ + 1 > limits_.max_files) {
    return Fail(absl::ResourceExhaustedError(absl::StrCat("archive: more than ", limits_.max_files, " files")));
  }
  if (size > limits_.max_total_bytes - total_bytes_) {
    return Fail(absl::ResourceExhaustedError(
        absl::StrCat(where, ": the files hold more than ", limits_.max_total_bytes, " bytes")));
  }
  if (std::string why = BadPath(path_); !why.empty()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(where, ": ", why)));
  }
  if (!last_path_.empty() && path_ <= last_path_) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat(where, ": not after '", last_path_.substr(0, 200), "' (paths must be sorted, each once)")));
  }
  for (size_t slash = path_.find('/'); slash != std::string::npos; slash = path_.find('/', slash + 1)) {
    if (file_paths_.count(path_.substr(0, slash))) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat(where, ": '", path_.substr(0, slash), "' is a file, not a directory")));
    }
  }
  if (sink_ != nullptr) {
    if (absl::Status st = sink_->BeginFile(path_, size); !st.ok()) return Fail(st);
  }
  file_paths_.insert(path_);
  last_path_ = path_;
  total_bytes_ += size;
  ++files_;
  remaining_ = size;
  state_ = State::kData;
  return remaining_ == 0 ? EndFile() : absl::OkStatus();
}

absl::Status TreeArchiveReader::EndFile() {
  if (sink_ != nullptr) {
    if (absl::Status st = sink_->EndFile(); !st.ok()) return Fail(st);
  }
  state_ = State::kPath;
  path_.clear();
  size_text_.clear();
  return absl::OkStatus();
}

absl::Status TreeArchiveReader::Feed(absl::string_view data) {
  if (!error_.ok()) return error_;
  size_t i = 0;
  while (i < data.size()) {
    switch (state_) {
      case State::kPath: {
        const size_t nul = data.find('\0', i);
        const size_t end = nul == absl::string_view::npos ? data.size() : nul;
        if (path_.size() + (end - i) > static_cast<size_t>(limits_.max_path_bytes)) {
          return Fail(absl::InvalidArgumentError(absl::StrCat("archive entry ", files_, ": path longer than ",
                                                              limits_.max_path_bytes, " bytes")));
        }
        path_.append(data.data() + i, end - i);
        i = end;
        if (nul != absl::string_view::npos) {
          ++i;
          state_ = State::kSize;
        }
        break;
      }
      case State::kSize: {
        const char c = data[i++];
        if (c == '\0') {
          if (absl::Status st = EndHeader(); !st.ok()) return st;
        } else if (c < '0' || c > '9' || size_text_.size() >= kMaxSizeDigits) {
          return Fail(absl::InvalidArgumentError(absl::StrCat("archive entry ", files_, " '", path_.substr(0, 200),
                                                              "': size is not a decimal number")));
        } else {
          size_text_ += c;
        }
        break;
      }
      case State::kData: {
        const size_t n = static_cast<size_t>(std::min<int64_t>(remaining_, static_cast<int64_t>(data.size() - i)));
        if (sink_ != nullptr) {
          if (absl::Status st = sink_->Write(data.substr(i, n)); !st.ok()) return Fail(st);
        }
        i += n;
        remaining_ -= static_cast<int64_t>(n);
        if (remaining_ == 0) {
          if (absl::Status st = EndFile(); !st.ok()) return st;
        }
        break;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status TreeArchiveReader::Finish() {
  if (!error_.ok()) return error_;
  if (state_ != State::kPath || !path_.empty()) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("archive: ends inside entry ", files_, " '", path_.substr(0, 200), "'")));
  }
  if (files_ == 0) return Fail(absl::InvalidArgumentError("archive: holds no file"));
  return absl::OkStatus();
}

absl::StatusOr<std::string> WriteTreeArchive(const std::string& dir,
                                             const std::function<absl::Status(absl::string_view)>& write,
                                             const TreeLimits& limits) {
  auto listing = ListTree(dir, limits);
  if (!listing.ok()) return listing.status();
  Sha256Stream hash;
  auto emit = [&](absl::string_view bytes) {
    hash.Update(bytes);
    return write(bytes);
  };
  std::vector<char> buf(1 << 20);
  for (const TreeFile& f : listing->files) {
    const std::string path = absl::StrCat(dir, "/", f.path);
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return absl::AbortedError(absl::StrCat("'", path, "': ", strerror(errno), " (changed while read)"));
    struct Closer {
      int fd;
      ~Closer() { close(fd); }
    } closer{fd};
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != f.size) {
      return absl::AbortedError(absl::StrCat("'", path, "' changed while the tree was read"));
    }
    std::string header = f.path;
    header.push_back('\0');
    absl::StrAppend(&header, f.size);
    header.push_back('\0');
    if (absl::Status s = emit(header); !s.ok()) return s;
    int64_t left = f.size;
    while (left > 0) {
      const ssize_t got = read(fd, buf.data(), static_cast<size_t>(std::min<int64_t>(left, buf.size())));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return absl::UnavailableError(absl::StrCat("reading '", path, "': ", strerror(errno)));
      if (got == 0) return absl::AbortedError(absl::StrCat("'", path, "' shrank while the tree was read"));
      if (absl::Status s = emit(absl::string_view(buf.data(), static_cast<size_t>(got))); !s.ok()) return s;
      left -= got;
    }
  }
  return hash.HexDigest();
}

DirectoryTreeSink::~DirectoryTreeSink() {
  if (fd_ >= 0) close(fd_);
}

absl::Status DirectoryTreeSink::BeginFile(const std::string& path, int64_t) {
  // Walk from the root by descriptors, creating directories, following no
  // symlink; the reader has already refused "..", absolute and empty parts.
  std::vector<std::string> parts = absl::StrSplit(path, '/');
  int dfd = open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return absl::UnavailableError(absl::StrCat("'", root_, "': ", strerror(errno)));
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (mkdirat(dfd, parts[i].c_str(), 0755) != 0 && errno != EEXIST) {
      absl::Status st = absl::UnavailableError(absl::StrCat("creating '", root_, "/", path, "': ", strerror(errno)));
      close(dfd);
      return st;
    }
    const int next = openat(dfd, parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    close(dfd);
    if (next < 0) return absl::UnavailableError(absl::StrCat("creating '", root_, "/", path, "': ", strerror(errno)));
    dfd = next;
  }
  fd_ = openat(dfd, parts.back().c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  const int err = errno;
  close(dfd);
  if (fd_ < 0) return absl::UnavailableError(absl::StrCat("creating '", root_, "/", path, "': ", strerror(err)));
  return absl::OkStatus();
}

absl::Status DirectoryTreeSink::Write(absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd_, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError(absl::StrCat("writing under '", root_, "': ", strerror(errno)));
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status DirectoryTreeSink::EndFile() {
  const int rc = close(fd_);
  fd_ = -1;
  return rc == 0 ? absl::OkStatus() : absl::UnavailableError(absl::StrCat("writing under '", root_, "': ", strerror(errno)));
}

}  // namespace mxval
