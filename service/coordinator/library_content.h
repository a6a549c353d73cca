// The bytes of registered kernel libraries, content-addressed by SHA-256:
// what `register-library` uploads (UploadKernelLibrary) and workers fetch
// (FetchKernelLibrary) when their --kernel-dir does not have the library.
//
// An upload is hashed as it arrives and written to the store in chunks
// (Store::PutBlobChunk) under a private key; only when the whole content has
// arrived, has the declared size and its SHA-256 is the registered one (and
// for a Python library the archive is well formed, common/tree_archive.h)
// is it filed under its digest (CommitBlob). Anything else removes what was
// written: a mismatched upload stores nothing. At most one chunk is held in
// memory per upload or read. Content is never deleted here: a task planned
// against a digest can fetch it after its library is unregistered or
// replaced (see README.md, "Kernel libraries").
#ifndef MXVAL_SERVICE_COORDINATOR_LIBRARY_CONTENT_H_
#define MXVAL_SERVICE_COORDINATOR_LIBRARY_CONTENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/digest.h"
#include "common/tree_archive.h"
#include "mxval/v1/mxval.pb.h"
#include "service/coordinator/store.h"

namespace mxval {
namespace coordinator {

struct LibraryContentOptions {
  // The largest content accepted (serve --max-library-mib).
  int64_t max_bytes = int64_t{256} << 20;
  // Bounds on a Python library's archive (its files, paths and bytes).
  TreeLimits tree;
};

class LibraryContent {
 public:
  // `store` null: content is kept in memory (tests, embedded runs).
  LibraryContent(Store* store, LibraryContentOptions options);

  class Upload {
   public:
    ~Upload();  // removes what an uncommitted upload wrote
    // The next bytes, in order. RESOURCE_EXHAUSTED past the declared size or
    // the limit; INVALID_ARGUMENT for a malformed Python archive; the
    // store's errors (UNAVAILABLE).
    absl::Status Add(absl::string_view data);
    // Files the content under its digest. INVALID_ARGUMENT (naming both
    // digests, or the sizes) if it is not the content announced: nothing is
    // stored then; the store's errors.
    absl::StatusOr<BlobInfo> Commit();

   private:
    friend class LibraryContent;
    Upload(LibraryContent* owner, BlobInfo announced, const TreeLimits& limits);
    absl::Status FlushLocked();
    LibraryContent* owner_;
    BlobInfo announced_;  // sha256, format and size as announced; chunks counted here
    std::string key_;
    std::string pending_;  // at most one chunk
    int64_t received_ = 0;
    std::vector<std::string> memory_chunks_;  // without a store
    Sha256Stream hash_;
    std::unique_ptr<TreeArchiveReader> archive_;  // Python libraries
    absl::Status error_;
    bool committed_ = false;
  };

  // Starts an upload of `size` bytes claimed to hash to `sha256`.
  // RESOURCE_EXHAUSTED over options.max_bytes; INVALID_ARGUMENT for a size
  // below 1 or a malformed digest.
  absl::StatusOr<std::unique_ptr<Upload>> Begin(const std::string& sha256, v1::LibraryFormat format, int64_t size);
  // The stored content with that digest, or nullopt. UNAVAILABLE on store errors.
  absl::StatusOr<std::optional<BlobInfo>> Find(const std::string& sha256);
  // Chunk `index` of stored content. NOT_FOUND if missing.
  absl::StatusOr<std::string> ReadChunk(const std::string& sha256, int64_t index);

  int64_t max_bytes() const { return options_.max_bytes; }

 private:
  Store* const store_;
  const LibraryContentOptions options_;
  absl::Mutex mu_;
  struct MemoryBlob {
    BlobInfo info;
    std::vector<std::string> chunks;
  };
  std::map<std::string, MemoryBlob> memory_ ABSL_GUARDED_BY(mu_);
};

}  // namespace coordinator
}  // namespace mxval

#endif  // MXVAL_SERVICE_COORDINATOR_LIBRARY_CONTENT_H_
