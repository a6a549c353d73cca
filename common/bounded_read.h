// Bounded reading of the files and streams the CLI is given.
//
// Every read opens the path once and decides on the opened descriptor
// (fstat), never on a separate stat of the path: a symlink to /dev/zero or
// /dev/urandom is seen as the character device it is and refused before a
// byte is read. A regular file is checked against the bound by its size
// before reading and is still read with the bound, in case it grows. A pipe
// or FIFO (`--changed-files <(git diff --name-only)`) is accepted only where
// the caller allows one and is read in chunks up to the bound.
#ifndef MXVAL_COMMON_BOUNDED_READ_H_
#define MXVAL_COMMON_BOUNDED_READ_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace mxval {

// "4 MiB", "512 KiB", "100 bytes": bounds as messages name them.
std::string FormatBytes(int64_t bytes);

// The whole content of `path`, at most `max_bytes` bytes.
// NOT_FOUND if it cannot be opened; INVALID_ARGUMENT if it is not a regular
// file (a pipe or FIFO is accepted when `allow_pipe`), or holds more than
// `max_bytes`. Messages start with the path and name the bound.
absl::StatusOr<std::string> ReadFileBounded(const std::string& path, int64_t max_bytes, bool allow_pipe = false);

// The last `max_bytes` bytes of a regular file (*truncated says whether the
// file was longer). NOT_FOUND if it cannot be opened; INVALID_ARGUMENT if it
// is not a regular file.
absl::StatusOr<std::string> ReadFileTail(const std::string& path, int64_t max_bytes, bool* truncated = nullptr);

// An open regular file, for readers that parse a header before deciding how
// much to read (tensor files). Closes on destruction.
class BoundedFile {
 public:
  // NOT_FOUND if it cannot be opened; INVALID_ARGUMENT if not a regular file.
  static absl::StatusOr<BoundedFile> Open(const std::string& path);
  BoundedFile(BoundedFile&& o) noexcept : fd_(o.fd_), size_(o.size_), path_(std::move(o.path_)) { o.fd_ = -1; }
  BoundedFile& operator=(BoundedFile&&) = delete;
  ~BoundedFile();

  // The file's size when it was opened.
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Exactly `n` bytes at `offset`; INVALID_ARGUMENT if the file ends first
  // (or the range lies past size()), DATA_LOSS on a read error.
  absl::StatusOr<std::string> ReadAt(int64_t offset, int64_t n) const;
  // The same into `dst`, which holds at least `n` bytes.
  absl::Status ReadInto(int64_t offset, int64_t n, void* dst) const;

 private:
  BoundedFile(int fd, int64_t size, std::string path) : fd_(fd), size_(size), path_(std::move(path)) {}
  int fd_;
  int64_t size_;
  std::string path_;
};

}  // namespace mxval

#endif  // MXVAL_COMMON_BOUNDED_READ_H_
