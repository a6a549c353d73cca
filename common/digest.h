// SHA-256 digests (OpenSSL): of bytes in memory, and of a file read through an
// open descriptor, so a caller can hash exactly the file it then uses
// (dlopen("/proc/self/fd/N")) with no window for a swap in between.
#ifndef MXVAL_COMMON_DIGEST_H_
#define MXVAL_COMMON_DIGEST_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mxval {

// Lowercase hex SHA-256 of `data`.
std::string Sha256Hex(absl::string_view data);

// Lowercase hex SHA-256 of everything readable from `fd` from offset 0
// (read with pread; the descriptor's offset is not moved).
// UNAVAILABLE if reading fails.
absl::StatusOr<std::string> Sha256HexOfFd(int fd);

// Of the regular file at `path`. NOT_FOUND if it cannot be opened,
// INVALID_ARGUMENT if it is not a regular file (a device, a FIFO).
absl::StatusOr<std::string> Sha256HexOfFile(const std::string& path);

// `bytes` bytes from the operating system's CSPRNG (OpenSSL RAND_bytes), as
// lowercase hex: secrets that must not be guessable (lease ids, session ids).
// Aborts if no randomness is available: a predictable secret is worse.
std::string RandomHex(size_t bytes);

// SHA-256 of bytes that arrive in pieces (an upload, a download).
class Sha256Stream {
 public:
  Sha256Stream();
  ~Sha256Stream();
  Sha256Stream(const Sha256Stream&) = delete;
  Sha256Stream& operator=(const Sha256Stream&) = delete;
  void Update(absl::string_view data);
  // Lowercase hex of everything Update() saw; the stream is spent after it.
  std::string HexDigest();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

// True for 64 lowercase hex digits.
bool IsSha256Hex(absl::string_view s);

}  // namespace mxval

#endif  // MXVAL_COMMON_DIGEST_H_
