// .npy parsing. Invariant: what parses serializes and parses back to the same
// dtype, shape and bytes.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/tensor_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto t = mxval::ParseNpy(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!t.ok()) return 0;
  const std::string again = mxval::SerializeNpy(*t);
  auto u = mxval::ParseNpy(again);
  if (!u.ok()) abort();
  if (u->dtype != t->dtype || u->shape != t->shape || u->data != t->data) abort();
  if (static_cast<int64_t>(t->data.size()) != t->numel() * mxval::DTypeSize(t->dtype)) abort();
  return 0;
}
