#include "service/worker/library_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/digest.h"
#include "common/tree_archive.h"
#include "kernels/abi/kernel_library.h"

namespace mxval {
namespace worker {
namespace {

namespace fs = std::filesystem;

constexpr char kFetchPrefix[] = ".fetch-";

int64_t SizeOf(const fs::path& p) {
  std::error_code ec;
  if (fs::is_regular_file(fs::symlink_status(p, ec))) return static_cast<int64_t>(fs::file_size(p, ec));
  int64_t total = 0;
  for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file(ec)) total += static_cast<int64_t>(it->file_size(ec));
  }
  return total;
}

// Marks a cache entry as used now (its mtime orders eviction).
void Touch(const std::string& path) { utimensat(AT_FDCWD, path.c_str(), nullptr, 0); }

// Where a fetch's bytes go: a shared object's file or a tree's extraction,
// hashed as they are written.
class FetchSink {
 public:
  FetchSink(std::string target, bool tree, const TreeLimits& limits) : target_(std::move(target)), tree_(tree) {
    if (tree_) {
      dir_sink_ = std::make_unique<DirectoryTreeSink>(target_);
      reader_ = std::make_unique<TreeArchiveReader>(limits, dir_sink_.get());
    }
  }
  ~FetchSink() {
    if (fd_ >= 0) close(fd_);
  }
  absl::Status Open() {
    if (tree_) {
      if (mkdir(target_.c_str(), 0755) != 0) return absl::UnavailableError(absl::StrCat("'", target_, "': ", strerror(errno)));
      return absl::OkStatus();
    }
    fd_ = open(target_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ < 0) return absl::UnavailableError(absl::StrCat("'", target_, "': ", strerror(errno)));
    return absl::OkStatus();
  }
  absl::Status Write(absl::string_view data) {
    received_ += static_cast<int64_t>(data.size());
    hash_.Update(data);
    if (tree_) {
      absl::Status st = reader_->Feed(data);
      if (!st.ok()) return absl::FailedPreconditionError(absl::StrCat("not a library tree archive: ", st.message()));
      return st;
    }
    while (!data.empty()) {
      const ssize_t n = write(fd_, data.data(), data.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return absl::UnavailableError(absl::StrCat("writing '", target_, "': ", strerror(errno)));
      data.remove_prefix(static_cast<size_t>(n));
    }
    return absl::OkStatus();
  }
  absl::Status Finish() {
    if (tree_) {
      if (absl::Status st = reader_->Finish(); !st.ok()) {
        return absl::FailedPreconditionError(absl::StrCat("not a library tree archive: ", st.message()));
      }
      return absl::OkStatus();
    }
    const int rc = fsync(fd_) == 0 ? close(fd_) : -1;
    fd_ = -1;
    return rc == 0 ? absl::OkStatus() : absl::UnavailableError(absl::StrCat("writing '", target_, "': ", strerror(errno)));
  }
  int64_t received() const { return received_; }
  std::string digest() { return hash_.HexDigest(); }

 private:
  std::string target_;
  bool tree_;
  int fd_ = -1;
  int64_t received_ = 0;
  Sha256Stream hash_;
  std::unique_ptr<DirectoryTreeSink> dir_sink_;
  std::unique_ptr<TreeArchiveReader> reader_;
};

}  // namespace

LibraryCache::LibraryCache(LibraryCacheOptions options, ContentFetcher fetch)
    : options_(std::move(options)), fetch_(std::move(fetch)) {}

int64_t LibraryCache::fetches() const {
  absl::MutexLock l(&mu_);
  return fetches_;
}

bool LibraryCache::HasDigestLocked(const std::string& path, bool tree, const std::string& sha256) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return false;
  if (tree) {
    if (!S_ISDIR(st.st_mode)) return false;
    auto d = TreeSha256(path, options_.tree);  // a tree's files can change without its directory's mtime
    return d.ok() && *d == sha256;
  }
  if (!S_ISREG(st.st_mode)) return false;
  const auto key = std::make_tuple(static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                                   static_cast<int64_t>(st.st_size),
                                   static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec);
  auto it = file_digests_.find(key);
  if (it == file_digests_.end()) {
    auto d = Sha256HexOfFile(path);
    if (!d.ok()) return false;
    if (file_digests_.size() > 4096) file_digests_.clear();
    it = file_digests_.emplace(key, *d).first;
  }
  return it->second == sha256;
}

absl::Status LibraryCache::Ensure(const v1::KernelRef& ref) {
  if (absl::Status st = CheckExternalLibraryName(ref.library()); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("library: ", st.message()));
  }
  if (!IsSha256Hex(ref.sha256())) {
    return absl::InvalidArgumentError(absl::StrCat("library '", ref.library(), "': the task carries no valid SHA-256"));
  }
  const bool tree = ref.format() == v1::LIBRARY_FORMAT_PYTHON;
  const std::string entry = tree ? ref.library() : absl::StrCat("lib", ref.library(), ".so");
  absl::MutexLock l(&mu_);
  if (!options_.kernel_dir.empty() && HasDigestLocked(absl::StrCat(options_.kernel_dir, "/", entry), tree, ref.sha256())) {
    return absl::OkStatus();  // pre-seeded
  }
  const std::string slot = absl::StrCat(options_.dir, "/", ref.sha256());
  if (HasDigestLocked(absl::StrCat(slot, "/", entry), tree, ref.sha256())) {
    Touch(slot);
    return absl::OkStatus();
  }
  // Changed on disk since it was fetched: fetched again.
  std::error_code ec;
  fs::remove_all(absl::StrCat(slot, "/", entry), ec);
  return FetchLocked(ref, tree);
}

absl::Status LibraryCache::FetchLocked(const v1::KernelRef& ref, bool tree) {
  const std::string& name = ref.library();
  std::error_code ec;
  fs::create_directories(options_.dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("library cache '", options_.dir, "': ", ec.message()));
  ::chmod(options_.dir.c_str(), 0700);
  std::string tmp = absl::StrCat(options_.dir, "/", kFetchPrefix, "XXXXXX");
  if (mkdtemp(tmp.data()) == nullptr) {
    return absl::UnavailableError(absl::StrCat("library cache '", options_.dir, "': ", strerror(errno)));
  }
  struct RemoveTmp {
    std::string path;
    ~RemoveTmp() {
      std::error_code e;
      fs::remove_all(path, e);
    }
  } remove_tmp{tmp};
  const std::string entry = tree ? name : absl::StrCat("lib", name, ".so");
  FetchSink sink(absl::StrCat(tmp, "/", entry), tree, options_.tree);
  int64_t announced = -1;
  ++fetches_;
  const absl::Status fetched = fetch_(
      ref.sha256(),
      [&](int64_t size, v1::LibraryFormat format) -> absl::Status {
        const bool is_tree = format == v1::LIBRARY_FORMAT_PYTHON;
        if (is_tree != tree) {
          return absl::FailedPreconditionError(absl::StrCat("library '", name, "': the coordinator stores it as ",
                                                            v1::LibraryFormat_Name(format), ", the task names ",
                                                            v1::LibraryFormat_Name(ref.format())));
        }
        if (size < 0 || size > options_.max_bytes) {
          return absl::ResourceExhaustedError(absl::StrCat("library '", name, "': ", size,
                                                           " bytes is over the library cache's limit of ",
                                                           options_.max_bytes, " bytes (--library-cache-mib)"));
        }
        announced = size;
        return sink.Open();
      },
      [&](absl::string_view data) -> absl::Status {
        if (announced < 0) return absl::FailedPreconditionError("content before its size");
        if (sink.received() + static_cast<int64_t>(data.size()) > announced) {
          return absl::PermissionDeniedError(absl::StrCat("library '", name, "': the coordinator sent more than the ",
                                                          announced, " bytes it announced; refused, not cached"));
        }
        return sink.Write(data);
      });
  if (!fetched.ok()) return fetched;
  if (announced < 0) return absl::FailedPreconditionError(absl::StrCat("library '", name, "': the fetch sent nothing"));
  if (absl::Status st = sink.Finish(); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("library '", name, "': ", st.message()));
  }
  const std::string got = sink.digest();
  if (got != ref.sha256() || sink.received() != announced) {
    return absl::PermissionDeniedError(absl::StrCat(
        "library '", name, "': the content fetched from the coordinator has SHA-256 ", got, " (", sink.received(),
        " bytes), the task's registration says ", ref.sha256(), "; refused, not cached"));
  }
  if (tree) {  // what was extracted is the registered tree (the archive's digest says so; checked again)
    auto d = TreeSha256(absl::StrCat(tmp, "/", entry), options_.tree);
    if (!d.ok() || *d != ref.sha256()) {
      return absl::PermissionDeniedError(absl::StrCat("library '", name, "': the extracted tree has SHA-256 ",
                                                      d.ok() ? *d : std::string(d.status().message()),
                                                      ", the task's registration says ", ref.sha256(),
                                                      "; refused, not cached"));
    }
  }
  // Into place: the whole slot if it is new, else this entry into it (the
  // same bytes registered under another name, or a concurrent fetch).
  const std::string slot = absl::StrCat(options_.dir, "/", ref.sha256());
  if (rename(tmp.c_str(), slot.c_str()) != 0) {
    if (errno != EEXIST && errno != ENOTEMPTY) {
      return absl::UnavailableError(absl::StrCat("library cache: renaming into '", slot, "': ", strerror(errno)));
    }
    const std::string dst = absl::StrCat(slot, "/", entry);
    if (rename(absl::StrCat(tmp, "/", entry).c_str(), dst.c_str()) != 0 && errno != EEXIST && errno != ENOTEMPTY) {
      return absl::UnavailableError(absl::StrCat("library cache: renaming into '", dst, "': ", strerror(errno)));
    }
  }
  Touch(slot);
  EvictLocked(ref.sha256());
  return absl::OkStatus();
}

void LibraryCache::EvictLocked(const std::string& keep) {
  struct Entry {
    std::string path;
    int64_t bytes;
    int64_t used_ns;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  std::error_code ec;
  const auto stale_fetch = absl::Now() - absl::Hours(1);
  for (const auto& e : fs::directory_iterator(options_.dir, ec)) {
    const std::string base = e.path().filename().string();
    struct stat st;
    if (lstat(e.path().c_str(), &st) != 0) continue;
    const int64_t used_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    if (absl::StartsWith(base, kFetchPrefix)) {  // another process's fetch, or one that died
      if (absl::FromUnixNanos(used_ns) < stale_fetch) fs::remove_all(e.path(), ec);
      continue;
    }
    if (!IsSha256Hex(base)) continue;  // not ours
    entries.push_back({e.path().string(), SizeOf(e.path()), used_ns});
    total += entries.back().bytes;
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.used_ns < b.used_ns; });
  for (const Entry& e : entries) {
    if (total <= options_.max_bytes) break;
    if (fs::path(e.path).filename() == keep) continue;
    fs::remove_all(e.path, ec);
    total -= e.bytes;
  }
}

}  // namespace worker
}  // namespace mxval
