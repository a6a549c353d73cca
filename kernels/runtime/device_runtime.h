// A small device-runtime interface for the worker and the timing harness:
// discovery, memory, copies, a stream, events and (where the vendor runtime
// has it) stream capture into a replayable graph.
//
// The vendor runtimes are reached with dlopen at run time, never linked, so
// one worker binary runs on an NVIDIA node (libcuda.so.1, the driver API),
// an AMD node (libamdhip64.so, the HIP runtime) or a CPU-only node. Device
// pointers are opaque `void*`; kernels reached through the kernel ABI get
// them together with `stream()`.
//
// Implementations:
//   cuda  driver API on the device's primary context (the context the CUDA
//         runtime inside a kernel library also uses), legacy default stream
//         for copies, a dedicated stream for timed launches. Run on the H200.
//   hip   HIP runtime API; the arch (gfx942, gfx950...) is read from the KFD
//         topology in sysfs. Compile-checked only: no AMD GPU is reachable
//         from where this was written (see kernels/gpu/README.md).
//   host  "device" memory is host memory filled with 0xA5 on allocation;
//         synchronous (but for the late writer, see LaunchLateWriter);
//         events are host timestamps. Lets the device-buffer
//         and timing code run in CI with host kernels.
#ifndef MXVAL_KERNELS_RUNTIME_DEVICE_RUNTIME_H_
#define MXVAL_KERNELS_RUNTIME_DEVICE_RUNTIME_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mxval {

struct DeviceProperties {
  int index = 0;
  std::string arch;  // "sm_90a", "gfx942", "host"
  std::string name;  // "NVIDIA H200"
  int64_t memory_bytes = 0;
  int64_t l2_bytes = 0;
  int multiprocessors = 0;
  std::string pci_bus_id;  // "0000:18:00.0" where the runtime tells (cuda); finds the device in NVML
};

// The kernel run before a kernel under test that may start early (launch
// flag MXVAL_LAUNCH_PDL; late_writer.cu): it lets the next kernel on the
// stream begin at once, waits delay_ns, then copies first.src -> first.dst
// and second.src -> second.dst (mxval: the poisoned y over y, then the real
// x over a poisoned x). Pointers are device pointers; stamps (device, two
// uint64_t, optional) receive the writer's start and end on the global
// timer (ns). pdl: the writer itself is launched with programmatic
// dependent launch (tests chain two writers to observe the overlap).
struct LateWrite {
  struct Copy {
    void* dst = nullptr;
    const void* src = nullptr;
    size_t bytes = 0;
  };
  Copy first, second;
  int64_t delay_ns = 20000;
  void* stamps = nullptr;
  bool pdl = false;
};

// A captured sequence of launches, replayed with Launch() on the stream.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  virtual absl::Status Launch() = 0;
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  // "cuda", "hip" or "host"; kernel_device() is the matching MXVAL_DEVICE_*.
  virtual std::string kind() const = 0;
  virtual int32_t kernel_device() const = 0;

  // Every device the runtime sees (may be empty).
  virtual absl::StatusOr<std::vector<DeviceProperties>> Devices() = 0;
  // Makes `index` current for this thread. INVALID_ARGUMENT if out of range.
  virtual absl::Status SetDevice(int index) = 0;

  // RESOURCE_EXHAUSTED when the device is out of memory.
  virtual absl::StatusOr<void*> Alloc(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
  // Blocking copies and memset (ordered after all prior work on stream()).
  virtual absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual absl::Status CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual absl::Status CopyOnDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual absl::Status Memset(void* dst, uint8_t value, size_t bytes) = 0;
  // A device-to-device copy queued on stream() without waiting for it, so
  // that events recorded around it time the copy alone (the roofline's copy
  // bandwidth, validation/roofline.h). host: a plain memcpy.
  virtual absl::Status CopyOnDeviceAsync(void* dst, const void* src, size_t bytes) = 0;

  // The stream kernels are launched on (the ABI's `stream` argument).
  virtual void* stream() = 0;
  // Waits for everything on the device; reports asynchronous faults
  // (INTERNAL, with the runtime's error string).
  virtual absl::Status Synchronize() = 0;

  // Events on stream(): Record() then ElapsedSeconds(a, b) after b completed.
  virtual absl::StatusOr<void*> CreateEvent() = 0;
  virtual absl::Status Record(void* event) = 0;
  virtual absl::StatusOr<double> ElapsedSeconds(void* start, void* end) = 0;
  virtual void DestroyEvent(void* event) = 0;

  // Launches the late writer on stream() (asynchronous). cuda: the PTX
  // kernel in late_writer_ptx.h. host: the copies are deferred to the next
  // blocking call, so a host kernel run in between sees the poisoned x and
  // y is probed after it ran, which is what a PDL kernel that never waits
  // would do. hip: UNIMPLEMENTED (no programmatic dependent launch).
  virtual absl::Status LaunchLateWriter(const LateWrite& w) = 0;

  // Captures the launches `body` makes on stream() into a graph.
  // UNIMPLEMENTED where the runtime cannot (host); callers fall back to
  // eager launches.
  virtual absl::StatusOr<std::unique_ptr<DeviceGraph>> Capture(const std::function<absl::Status()>& body) = 0;
};

// UNAVAILABLE (with the dlopen/dlsym or init error) when the vendor runtime
// is not installed or has no usable driver.
absl::StatusOr<std::unique_ptr<DeviceRuntime>> OpenCudaRuntime();
absl::StatusOr<std::unique_ptr<DeviceRuntime>> OpenHipRuntime();
std::unique_ptr<DeviceRuntime> NewHostRuntime();

// KFD's gfx_target_version to the arch name: 90402 -> "gfx942",
// 90010 -> "gfx90a", 90500 -> "gfx950"; "" for 0.
std::string GfxArchFromTargetVersion(int64_t target_version);

// "cuda", "hip", "host"; "auto" tries cuda then hip and returns UNAVAILABLE
// naming both reasons when neither has a device. INVALID_ARGUMENT otherwise.
absl::StatusOr<std::unique_ptr<DeviceRuntime>> OpenRuntime(const std::string& kind);

// Owns one allocation; frees it through the runtime.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceRuntime* rt, void* p, size_t n) : rt_(rt), ptr_(p), bytes_(n) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }
  static absl::StatusOr<DeviceBuffer> Allocate(DeviceRuntime& rt, size_t bytes);
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  void Reset();

 private:
  DeviceRuntime* rt_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace mxval

#endif  // MXVAL_KERNELS_RUNTIME_DEVICE_RUNTIME_H_
