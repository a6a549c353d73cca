#include "service/worker/devices.h"

#include <unistd.h>

#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace mxval {
namespace worker {
namespace {


}  // namespace

// The host: its memory (physical pages) and online cores, as a GPU reports
// its own.
v1::DeviceInfo HostCpuDevice() {
  v1::DeviceInfo cpu;
  cpu.set_index(0);
  cpu.set_arch("cpu");
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE), cores = sysconf(_SC_NPROCESSORS_ONLN);
  cpu.set_name(cores > 0 ? absl::StrCat("host CPU, ", cores, " cores") : "host CPU");
  if (pages > 0 && page > 0) cpu.set_memory_bytes(static_cast<int64_t>(pages) * page);
  cpu.set_healthy(true);
  return cpu;
}

absl::StatusOr<DiscoveredDevices> DiscoverDevices(const std::string& spec, const RuntimeOpener& open) {
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  std::set<int> keep;
  if (colon != std::string::npos) {
    for (absl::string_view part : absl::StrSplit(spec.substr(colon + 1), ',')) {
      int i = 0;
      if (!absl::SimpleAtoi(part, &i) || i < 0) {
        return absl::InvalidArgumentError(absl::StrCat("'", part, "' is not a device index in '", spec, "'"));
      }
      keep.insert(i);
    }
  }
  if (kind != "auto" && kind != "cpu" && kind != "cuda" && kind != "hip" && kind != "host") {
    return absl::InvalidArgumentError(absl::StrCat("unknown device kind '", kind, "' (auto, cpu, cuda, hip, host)"));
  }
  DiscoveredDevices out;
  if (kind == "cpu") {
    if (!keep.empty() && (keep.size() != 1 || *keep.begin() != 0)) {
      return absl::InvalidArgumentError("the CPU is device 0 only");
    }
    out.devices.push_back(HostCpuDevice());
    return out;
  }
  auto rt = open(kind);
  if (!rt.ok()) {
    if (kind != "auto") return rt.status();
    if (!keep.empty()) return absl::InvalidArgumentError(absl::StrCat("no GPU found to select ", spec, " from"));
    out.devices.push_back(HostCpuDevice());  // auto on a CPU node
    return out;
  }
  auto devs = (*rt)->Devices();
  if (!devs.ok()) return devs.status();
  if (devs->empty()) return absl::UnavailableError(absl::StrCat("the ", (*rt)->kind(), " runtime sees no device"));
  out.runtime = (*rt)->kind();
  for (int i : keep) {
    if (i >= static_cast<int>(devs->size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("device ", i, " does not exist (", devs->size(), " ", (*rt)->kind(), " devices)"));
    }
  }
  for (const DeviceProperties& p : *devs) {
    if (!keep.empty() && !keep.count(p.index)) continue;
    v1::DeviceInfo d;
    d.set_index(p.index);
    d.set_arch(p.arch);
    d.set_name(p.name);
    d.set_memory_bytes(p.memory_bytes);
    d.set_healthy(true);
    out.devices.push_back(d);
  }
  return out;
}

}  // namespace worker
}  // namespace mxval
