// Device discovery for the worker daemon: which executors to run and what
// to advertise to the coordinator.
#ifndef MXVAL_SERVICE_WORKER_DEVICES_H_
#define MXVAL_SERVICE_WORKER_DEVICES_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/runtime/device_runtime.h"
#include "mxval/v1/mxval.pb.h"

namespace mxval {
namespace worker {

struct DiscoveredDevices {
  std::string runtime;  // "" for the CPU executor; else the kind the child opens
  std::vector<v1::DeviceInfo> devices;
};

using RuntimeOpener = std::function<absl::StatusOr<std::unique_ptr<DeviceRuntime>>(const std::string&)>;

// `spec`: "auto" (the first of CUDA, HIP with a device; else the CPU),
// "cpu", "cuda", "hip" or "host" (the emulated device, for tests), each
// optionally followed by ":i,j" to keep only those device indexes.
// INVALID_ARGUMENT for a malformed spec or an index that does not exist;
// UNAVAILABLE when an explicitly named runtime has no device.
// The host as a device: index 0, arch "cpu", its physical memory and cores.
v1::DeviceInfo HostCpuDevice();

absl::StatusOr<DiscoveredDevices> DiscoverDevices(const std::string& spec, const RuntimeOpener& open = OpenRuntime);

}  // namespace worker
}  // namespace mxval

#endif  // MXVAL_SERVICE_WORKER_DEVICES_H_
