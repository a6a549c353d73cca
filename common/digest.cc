#include "common/digest.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mxval {
namespace {

std::string Hex(const unsigned char* md, unsigned n) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (unsigned i = 0; i < n; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

struct CtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

}  // namespace

std::string Sha256Hex(absl::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  return Hex(md, n);
}

absl::StatusOr<std::string> Sha256HexOfFd(int fd) {
  std::unique_ptr<EVP_MD_CTX, CtxFree> ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return absl::InternalError("sha256: cannot initialize the digest");
  }
  std::vector<char> buf(1 << 16);
  off_t offset = 0;
  while (true) {
    const ssize_t got = pread(fd, buf.data(), buf.size(), offset);
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("sha256: read failed: ", strerror(errno)));
    }
    if (got == 0) break;
    EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(got));
    offset += got;
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &n);
  return Hex(md, n);
}

absl::StatusOr<std::string> Sha256HexOfFile(const std::string& path) {
  // O_NONBLOCK: a FIFO must not block the open; it is refused below.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open '", path, "': ", strerror(errno)));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {  // a device (/dev/zero) would be hashed for ever
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a regular file"));
  }
  auto out = Sha256HexOfFd(fd);
  close(fd);
  return out;
}

struct Sha256Stream::Ctx {
  std::unique_ptr<EVP_MD_CTX, CtxFree> md{EVP_MD_CTX_new()};
};

Sha256Stream::Sha256Stream() : ctx_(new Ctx) { EVP_DigestInit_ex(ctx_->md.get(), EVP_sha256(), nullptr); }
Sha256Stream::~Sha256Stream() = default;

void Sha256Stream::Update(absl::string_view data) {
  if (!data.empty()) EVP_DigestUpdate(ctx_->md.get(), data.data(), data.size());
}

std::string Sha256Stream::HexDigest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx_->md.get(), md, &n);
  return Hex(md, n);
}

bool IsSha256Hex(absl::string_view s) {
  if (s.size() != 64) return false;
  for (char ch : s)
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return false;
  return true;
}

std::string RandomHex(size_t bytes) {
  std::vector<unsigned char> buf(bytes);
  if (RAND_bytes(buf.data(), static_cast<int>(buf.size())) != 1) std::abort();
  return Hex(buf.data(), static_cast<unsigned>(buf.size()));
}

}  // namespace mxval
