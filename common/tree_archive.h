// A Python kernel library's tree as one stream of bytes, for uploading it to
// the coordinator and fetching it on a worker.
//
// The archive is the tree digest's own input (common/tree_digest.h): for
// each file of the tree, in bytewise order of its relative path,
//   path bytes, 0x00, the size as decimal ASCII, 0x00, the file's bytes,
// and nothing else (no header, no directories, no modes). So the archive's
// plain SHA-256 is the tree digest: the coordinator verifies an upload and a
// worker a download the way a shared object is verified, and a tree extracted
// from a valid archive has the archive's digest.
//
// A valid archive's paths are relative and '/'-separated, without empty, "."
// or ".." components, without a `__pycache__` or `.git` component or a
// `.pyc` file name (the digest excludes those, so they could not be part of a
// registered tree), strictly increasing, and no file's path is a directory of
// a later one. Sizes are decimal without leading zeros. The reader checks all
// of it as bytes arrive, with the bounds of TreeLimits, so a hostile archive
// costs bounded memory and can never name a file outside the extraction root.
#ifndef MXVAL_COMMON_TREE_ARCHIVE_H_
#define MXVAL_COMMON_TREE_ARCHIVE_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tree_digest.h"

namespace mxval {

// Where a reader's files go (an extraction); every method may refuse.
class TreeArchiveSink {
 public:
  virtual ~TreeArchiveSink() = default;
  virtual absl::Status BeginFile(const std::string& path, int64_t size) = 0;
  virtual absl::Status Write(absl::string_view data) = 0;
  virtual absl::Status EndFile() = 0;
};

// Reads an archive fed in pieces of any size.
class TreeArchiveReader {
 public:
  // `sink` (optional, not owned) receives the files as they are read.
  explicit TreeArchiveReader(TreeLimits limits = {}, TreeArchiveSink* sink = nullptr);
  // INVALID_ARGUMENT naming the offending entry (by index and path) for a
  // malformed archive; RESOURCE_EXHAUSTED past `limits`; the sink's errors.
  // After an error every later call returns it again.
  absl::Status Feed(absl::string_view data);
  // INVALID_ARGUMENT if the archive ends inside an entry or holds no file.
  absl::Status Finish();
  int64_t files() const { return files_; }
  int64_t total_bytes() const { return total_bytes_; }

 private:
  absl::Status Fail(absl::Status st);
  absl::Status EndHeader();
  absl::Status EndFile();  // the current file's last byte arrived: the next entry's path follows
  enum class State { kPath, kSize, kData };
  TreeLimits limits_;
  TreeArchiveSink* sink_;
  absl::Status error_;
  State state_ = State::kPath;
  std::string path_, size_text_, last_path_;
  std::set<std::string> file_paths_;  // a later path may not run through one of them
  int64_t remaining_ = 0;
  int64_t files_ = 0, total_bytes_ = 0;
};

// Writes the tree at `dir` as an archive to `write`, file by file (at most
// 1 MiB in memory), and returns its digest (the tree digest of what was
// written). Every error of ListTree; ABORTED if a file changes size or type
// while it is read; UNAVAILABLE if reading fails; `write`'s errors.
absl::StatusOr<std::string> WriteTreeArchive(const std::string& dir,
                                             const std::function<absl::Status(absl::string_view)>& write,
                                             const TreeLimits& limits = {});

// A sink that creates the files under `root` (an existing, empty directory
// the caller owns): directories 0755, files 0644, created exclusively and
// never through a symlink. UNAVAILABLE if creating or writing fails.
class DirectoryTreeSink : public TreeArchiveSink {
 public:
  explicit DirectoryTreeSink(std::string root) : root_(std::move(root)) {}
  ~DirectoryTreeSink() override;
  absl::Status BeginFile(const std::string& path, int64_t size) override;
  absl::Status Write(absl::string_view data) override;
  absl::Status EndFile() override;

 private:
  std::string root_;
  int fd_ = -1;
};

}  // namespace mxval

#endif  // MXVAL_COMMON_TREE_ARCHIVE_H_
