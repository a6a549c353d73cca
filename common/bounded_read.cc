#include "common/bounded_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace mxval {
namespace {

constexpr size_t kChunk = 1 << 16;

const char* KindOf(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a pipe";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

// Opens `path` read-only and checks the opened descriptor's type. A FIFO the
// caller allows is opened blocking (its writer may connect after us); any
// other path is opened non-blocking, so that a FIFO nobody writes to cannot
// hang the open, and the descriptor's own fstat decides.
absl::StatusOr<int> OpenChecked(const std::string& path, bool allow_pipe, struct stat* st) {
  struct stat pre;
  const bool want_pipe = allow_pipe && ::stat(path.c_str(), &pre) == 0 && S_ISFIFO(pre.st_mode);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (want_pipe ? 0 : O_NONBLOCK));
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  if (::fstat(fd, st) != 0) {
    const int e = errno;
    ::close(fd);
    return absl::NotFoundError(absl::StrCat(path, ": cannot stat: ", std::strerror(e)));
  }
  const bool ok = S_ISREG(st->st_mode) || (want_pipe && S_ISFIFO(st->st_mode));
  if (!ok) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": is ", KindOf(st->st_mode), "; want a regular file",
                                                   allow_pipe ? " or a pipe" : ""));
  }
  if (!want_pipe) {
    // Regular files ignore O_NONBLOCK, but clear it so reads mean the same everywhere.
    const int fl = ::fcntl(fd, F_GETFL);
    if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  }
  return fd;
}

// read() that retries EINTR; -1 on error.
ssize_t ReadSome(int fd, char* buf, size_t n) {
  for (;;) {
    const ssize_t r = ::read(fd, buf, n);
    if (r < 0 && errno == EINTR) continue;
    return r;
  }
}

absl::Status TooLarge(const std::string& path, int64_t max_bytes) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": larger than ", FormatBytes(max_bytes), " (the limit for this file)"));
}

}  // namespace

std::string FormatBytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30) && bytes % (int64_t{1} << 30) == 0) return absl::StrCat(bytes >> 30, " GiB");
  if (bytes >= (int64_t{1} << 20) && bytes % (int64_t{1} << 20) == 0) return absl::StrCat(bytes >> 20, " MiB");
  if (bytes >= (int64_t{1} << 10) && bytes % (int64_t{1} << 10) == 0) return absl::StrCat(bytes >> 10, " KiB");
  return absl::StrCat(bytes, " bytes");
}

absl::StatusOr<std::string> ReadFileBounded(const std::string& path, int64_t max_bytes, bool allow_pipe) {
  struct stat st;
  absl::StatusOr<int> fd = OpenChecked(path, allow_pipe, &st);
  if (!fd.ok()) return fd.status();
  if (S_ISREG(st.st_mode) && st.st_size > max_bytes) {
    ::close(*fd);
    return TooLarge(path, max_bytes);
  }
  std::string out;
  if (S_ISREG(st.st_mode)) out.reserve(static_cast<size_t>(st.st_size));
  // Reads at most max_bytes + 1 bytes: the extra byte tells "exactly at the
  // bound" from "past it" without reading further.
  const size_t limit = static_cast<size_t>(max_bytes) + 1;
  char buf[kChunk];
  for (;;) {
    const size_t want = std::min(kChunk, limit - out.size());
    const ssize_t r = ReadSome(*fd, buf, want);
    if (r < 0) {
      const int e = errno;
      ::close(*fd);
      return absl::DataLossError(absl::StrCat(path, ": read error: ", std::strerror(e)));
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
    if (out.size() > static_cast<size_t>(max_bytes)) {
      ::close(*fd);
      return TooLarge(path, max_bytes);
    }
  }
  ::close(*fd);
  return out;
}

absl::StatusOr<std::string> ReadFileTail(const std::string& path, int64_t max_bytes, bool* truncated) {
  if (truncated != nullptr) *truncated = false;
  absl::StatusOr<BoundedFile> f = BoundedFile::Open(path);
  if (!f.ok()) return f.status();
  const int64_t start = f->size() > max_bytes ? f->size() - max_bytes : 0;
  if (truncated != nullptr) *truncated = start > 0;
  return f->ReadAt(start, f->size() - start);
}

absl::StatusOr<BoundedFile> BoundedFile::Open(const std::string& path) {
  struct stat st;
  absl::StatusOr<int> fd = OpenChecked(path, /*allow_pipe=*/false, &st);
  if (!fd.ok()) return fd.status();
  return BoundedFile(*fd, static_cast<int64_t>(st.st_size), path);
}

BoundedFile::~BoundedFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<std::string> BoundedFile::ReadAt(int64_t offset, int64_t n) const {
  if (n < 0 || n > size_) return ReadInto(offset, n, nullptr);  // the range error
  std::string out(static_cast<size_t>(n), '\0');
  absl::Status st = ReadInto(offset, n, out.data());
  if (!st.ok()) return st;
  return out;
}

absl::Status BoundedFile::ReadInto(int64_t offset, int64_t n, void* dst) const {
  if (offset < 0 || n < 0 || offset > size_ || n > size_ - offset) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": wants bytes [", offset, ", ", offset + n,
                                                   ") but the file has ", size_));
  }
  char* out = static_cast<char*>(dst);
  int64_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd_, out + done, static_cast<size_t>(n - done), static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return absl::DataLossError(absl::StrCat(path_, ": read error: ", std::strerror(errno)));
    if (r == 0) return absl::InvalidArgumentError(absl::StrCat(path_, ": shrank while being read"));
    done += r;
  }
  return absl::OkStatus();
}

}  // namespace mxval
