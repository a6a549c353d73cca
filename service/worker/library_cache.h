// The worker's cache of registered kernel libraries, fetched from the
// coordinator by digest (WorkerService.FetchKernelLibrary), so that
// registering a library once is enough for every worker.
//
// Layout: <dir>/<sha256>/lib<name>.so for a shared object, and
// <dir>/<sha256>/<name>/ for a Python library's tree; the task child looks
// there after its --kernel-dir (KernelResolver) and checks the digest again
// when it loads, so bytes changed on disk after the fetch are refused too.
//
// Ensure() runs before a task that names an external library is handed to
// its child. A library already in --kernel-dir with the task's digest (a
// pre-seeded cache) or already in the cache with it is used as is; otherwise
// it is fetched into a private directory under <dir>, hashed as it arrives,
// and only when the digest is the task's renamed into place (atomically:
// another worker process sharing the cache sees it whole or not at all). A
// mismatch is refused and nothing is kept. The cache is bounded: after a
// fetch, the least recently used entries (by the time Ensure last used them)
// are removed until it is within max_bytes, never the one just ensured.
#ifndef MXVAL_SERVICE_WORKER_LIBRARY_CACHE_H_
#define MXVAL_SERVICE_WORKER_LIBRARY_CACHE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/tree_digest.h"
#include "mxval/v1/mxval.pb.h"

namespace mxval {
namespace worker {

struct LibraryCacheOptions {
  std::string dir;  // created on the first fetch (0700)
  int64_t max_bytes = int64_t{4} << 30;
  // A pre-seeded --kernel-dir: a library there with the task's digest is
  // not fetched. Empty: none.
  std::string kernel_dir;
  TreeLimits tree;  // bounds on a fetched Python library's archive
};

// Streams the content stored under `sha256`: calls `begin` once with the
// announced size and format, then `write` with each piece in order.
// NOT_FOUND when the coordinator stores no such content; UNAVAILABLE when
// it cannot be reached; errors of `begin` / `write` are returned as is.
using ContentFetcher = std::function<absl::Status(
    const std::string& sha256, const std::function<absl::Status(int64_t size, v1::LibraryFormat format)>& begin,
    const std::function<absl::Status(absl::string_view)>& write)>;

class LibraryCache {
 public:
  LibraryCache(LibraryCacheOptions options, ContentFetcher fetch);

  // Makes the external library `ref` names available to a task child: OK
  // once --kernel-dir or the cache holds it with ref.sha256.
  // INVALID_ARGUMENT for a ref without a valid name or digest;
  // PERMISSION_DENIED, naming the library and both digests, when the fetched
  // content's digest is not ref.sha256 (nothing is cached);
  // RESOURCE_EXHAUSTED for content over max_bytes; FAILED_PRECONDITION for
  // content of another format than the ref's, or a malformed archive;
  // the fetcher's errors (NOT_FOUND: registered without content).
  absl::Status Ensure(const v1::KernelRef& ref);

  const std::string& dir() const { return options_.dir; }
  int64_t fetches() const;

 private:
  // Whether `path` (lib<name>.so or a tree) has digest `sha256`; remembers
  // a file's digest by its identity (device, inode, size, mtime).
  bool HasDigestLocked(const std::string& path, bool tree, const std::string& sha256)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status FetchLocked(const v1::KernelRef& ref, bool tree) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictLocked(const std::string& keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const LibraryCacheOptions options_;
  const ContentFetcher fetch_;
  mutable absl::Mutex mu_;
  std::map<std::tuple<uint64_t, uint64_t, int64_t, int64_t>, std::string> file_digests_ ABSL_GUARDED_BY(mu_);
  int64_t fetches_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace worker
}  // namespace mxval

#endif  // MXVAL_SERVICE_WORKER_LIBRARY_CACHE_H_
