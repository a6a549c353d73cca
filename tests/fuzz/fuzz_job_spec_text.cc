// Job-spec files (YAML and proto3 JSON, as `mxval submit --spec` reads them),
// then the planner. The first byte picks the syntax.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "client/spec_file.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > (64 << 10)) return 0;
  const bool yaml = data[0] & 1;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto spec = mxval::ParseJobSpec(text, yaml);
  if (!spec.ok()) {
    if (spec.status().message().empty()) abort();
    return 0;
  }
  (void)mxval::coordinator::PlanJob(*spec, mxval::fuzz::FuzzPlannerOptions(), mxval::fuzz::FuzzLibraries());
  return 0;
}
