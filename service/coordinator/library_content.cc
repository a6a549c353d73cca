#include "service/coordinator/library_content.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace mxval {
namespace coordinator {

LibraryContent::LibraryContent(Store* store, LibraryContentOptions options) : store_(store), options_(options) {}

LibraryContent::Upload::Upload(LibraryContent* owner, BlobInfo announced, const TreeLimits& limits)
    : owner_(owner), announced_(std::move(announced)), key_(NewUploadKey(absl::Now())) {
  if (announced_.format == v1::LIBRARY_FORMAT_PYTHON) archive_ = std::make_unique<TreeArchiveReader>(limits);
  announced_.chunks = 0;
}

LibraryContent::Upload::~Upload() {
  if (!committed_ && owner_->store_ != nullptr && announced_.chunks > 0) (void)owner_->store_->AbortBlob(key_);
}

absl::Status LibraryContent::Upload::FlushLocked() {
  if (pending_.empty()) return absl::OkStatus();
  if (owner_->store_ != nullptr) {
    if (absl::Status st = owner_->store_->PutBlobChunk(key_, announced_.chunks, pending_); !st.ok()) return st;
  } else {
    memory_chunks_.push_back(pending_);
  }
  ++announced_.chunks;
  pending_.clear();
  return absl::OkStatus();
}

absl::Status LibraryContent::Upload::Add(absl::string_view data) {
  if (!error_.ok()) return error_;
  if (static_cast<int64_t>(data.size()) > announced_.size - received_) {
    error_ = absl::ResourceExhaustedError(
        absl::StrCat("content: more than the announced content_bytes ", announced_.size));
    return error_;
  }
  received_ += static_cast<int64_t>(data.size());
  hash_.Update(data);
  if (archive_ != nullptr) {
    if (absl::Status st = archive_->Feed(data); !st.ok()) {
      error_ = absl::Status(st.code(), absl::StrCat("content: not a library tree archive: ", st.message()));
      return error_;
    }
  }
  while (!data.empty()) {
    const size_t n = std::min<size_t>(data.size(), static_cast<size_t>(kBlobChunkBytes) - pending_.size());
    pending_.append(data.data(), n);
    data.remove_prefix(n);
    if (static_cast<int64_t>(pending_.size()) == kBlobChunkBytes) {
      if (absl::Status st = FlushLocked(); !st.ok()) return error_ = st;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<BlobInfo> LibraryContent::Upload::Commit() {
  if (!error_.ok()) return error_;
  if (received_ != announced_.size) {
    return error_ = absl::InvalidArgumentError(absl::StrCat("content: ", received_, " bytes arrived, content_bytes says ",
                                                            announced_.size, "; nothing stored"));
  }
  if (archive_ != nullptr) {
    if (absl::Status st = archive_->Finish(); !st.ok()) {
      return error_ = absl::InvalidArgumentError(absl::StrCat("content: not a library tree archive: ", st.message()));
    }
  }
  const std::string got = hash_.HexDigest();
  if (got != announced_.sha256) {
    return error_ = absl::InvalidArgumentError(absl::StrCat("content: SHA-256 of the uploaded bytes is ", got,
                                                            ", library.sha256 is ", announced_.sha256,
                                                            "; nothing stored"));
  }
  if (absl::Status st = FlushLocked(); !st.ok()) return error_ = st;
  if (owner_->store_ != nullptr) {
    if (absl::Status st = owner_->store_->CommitBlob(key_, announced_); !st.ok()) return error_ = st;
  } else {
    absl::MutexLock l(&owner_->mu_);
    if (!owner_->memory_.count(announced_.sha256)) {
      owner_->memory_[announced_.sha256] = MemoryBlob{announced_, std::move(memory_chunks_)};
    }
  }
  committed_ = true;
  return announced_;
}

absl::StatusOr<std::unique_ptr<LibraryContent::Upload>> LibraryContent::Begin(const std::string& sha256,
                                                                               v1::LibraryFormat format,
                                                                               int64_t size) {
  if (!IsSha256Hex(sha256)) return absl::InvalidArgumentError("library.sha256: not 64 lowercase hex digits");
  if (size < 1) return absl::InvalidArgumentError("content_bytes: must be at least 1");
  if (size > options_.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("content_bytes: ", size, " bytes is over this coordinator's limit of ",
                                                     options_.max_bytes, " bytes (serve --max-library-mib)"));
  }
  BlobInfo info{sha256, static_cast<int>(format == v1::LIBRARY_FORMAT_PYTHON ? v1::LIBRARY_FORMAT_PYTHON
                                                                             : v1::LIBRARY_FORMAT_SHARED_OBJECT),
                size, 0};
  return std::unique_ptr<Upload>(new Upload(this, std::move(info), options_.tree));
}

absl::StatusOr<std::optional<BlobInfo>> LibraryContent::Find(const std::string& sha256) {
  if (store_ != nullptr) return store_->GetBlob(sha256);
  absl::MutexLock l(&mu_);
  auto it = memory_.find(sha256);
  if (it == memory_.end()) return std::optional<BlobInfo>();
  return std::optional<BlobInfo>(it->second.info);
}

absl::StatusOr<std::string> LibraryContent::ReadChunk(const std::string& sha256, int64_t index) {
  if (store_ != nullptr) return store_->ReadBlobChunk(sha256, index);
  absl::MutexLock l(&mu_);
  auto it = memory_.find(sha256);
  if (it == memory_.end() || index < 0 || index >= static_cast<int64_t>(it->second.chunks.size())) {
    return absl::NotFoundError(absl::StrCat("no chunk ", index, " of content ", sha256));
  }
  return it->second.chunks[static_cast<size_t>(index)];
}

}  // namespace coordinator
}  // namespace mxval
