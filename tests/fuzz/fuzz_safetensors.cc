// .safetensors parsing: the header listing and every tensor it names.
#include <cstdint>
#include <cstdlib>

#include "common/tensor_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto names = mxval::ListSafetensors(bytes);
  if (!names.ok()) return 0;
  int n = 0;
  for (const std::string& name : *names) {
    if (++n > 16) break;
    auto t = mxval::ParseSafetensors(bytes, name);
    if (t.ok() && t->data.size() > size) abort();  // a tensor cannot hold more than the file
  }
  (void)mxval::ParseSafetensors(bytes, "no such tensor");
  return 0;
}
