// Dispatch-table loading (kernels/configs/<arch>.json, and a job's
// baseline/candidate tables) and lookups. Input: 16 bytes of (op, M, N, K)
// then the JSON text.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/dispatch/config_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 16 || size > (256 << 10)) return 0;
  uint32_t q[4];
  std::memcpy(q, data, 16);
  const std::string text(reinterpret_cast<const char*>(data) + 16, size - 16);
  auto t = mxval::ConfigTable::FromJsonText(text);
  if (!t.ok()) return 0;
  const char* ops[] = {"kup", "vup", "custom"};
  for (int64_t m : {int64_t{1}, int64_t{q[1] % 70000} + 1, int64_t{16384}}) {
    auto e = t->Lookup(ops[q[0] % 3], m, int64_t{q[2] % 8192} + 1, int64_t{q[3] % 8192} + 1);
    if (e.ok() && e->name.empty()) abort();
  }
  return 0;
}
