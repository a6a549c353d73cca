// The host "device": the runtime interface over malloc'd memory, so the
// device-buffer adapter and the timing harness run (and are tested) on
// machines without a GPU. Fresh allocations are filled with 0xA5 so a read
// of memory nobody copied in is visible.
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/runtime/device_runtime.h"
#include "mxval/kernel_api.h"

namespace mxval {
namespace {

class HostRuntime : public DeviceRuntime {
 public:
  std::string kind() const override { return "host"; }
  int32_t kernel_device() const override { return MXVAL_DEVICE_CPU; }
  absl::StatusOr<std::vector<DeviceProperties>> Devices() override {
    DeviceProperties p;
    p.arch = "host";
    p.name = "host memory";
    p.l2_bytes = 2 << 20;
    p.multiprocessors = 1;
    return std::vector<DeviceProperties>{p};
  }
  absl::Status SetDevice(int index) override {
    if (index != 0) return absl::InvalidArgumentError(absl::StrCat("host device ", index, " does not exist (1 seen)"));
    return absl::OkStatus();
  }
  absl::StatusOr<void*> Alloc(size_t bytes) override {
    void* p = std::malloc(bytes == 0 ? 1 : bytes);
    if (p == nullptr) return absl::ResourceExhaustedError(absl::StrCat("malloc(", bytes, ") failed"));
    std::memset(p, 0xA5, bytes);
    return p;
  }
  void Free(void* p) override { std::free(p); }
  absl::Status CopyToDevice(void* d, const void* s, size_t n) override {
    Flush();
    return Copy(d, s, n);
  }
  absl::Status CopyToHost(void* d, const void* s, size_t n) override {
    Flush();
    return Copy(d, s, n);
  }
  absl::Status CopyOnDevice(void* d, const void* s, size_t n) override {
    Flush();
    return Copy(d, s, n);
  }
  absl::Status CopyOnDeviceAsync(void* d, const void* s, size_t n) override {
    Flush();
    return Copy(d, s, n);
  }
  absl::Status Memset(void* d, uint8_t v, size_t n) override {
    Flush();
    if (n) std::memset(d, v, n);
    return absl::OkStatus();
  }
  void* stream() override { return nullptr; }
  absl::Status Synchronize() override {
    Flush();
    return absl::OkStatus();
  }
  // Deferred until the next blocking call (see device_runtime.h): a host
  // kernel runs synchronously inside its launch, so it runs entirely before
  // the writer, as a PDL kernel that never waits could on a GPU.
  absl::Status LaunchLateWriter(const LateWrite& w) override {
    Flush();
    pending_.push_back(w);
    return absl::OkStatus();
  }
  absl::StatusOr<void*> CreateEvent() override { return static_cast<void*>(new double(0)); }
  absl::Status Record(void* e) override {
    *static_cast<double*>(e) =
        std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    return absl::OkStatus();
  }
  absl::StatusOr<double> ElapsedSeconds(void* a, void* b) override {
    return *static_cast<double*>(b) - *static_cast<double*>(a);
  }
  void DestroyEvent(void* e) override { delete static_cast<double*>(e); }
  absl::StatusOr<std::unique_ptr<DeviceGraph>> Capture(const std::function<absl::Status()>&) override {
    return absl::UnimplementedError("the host runtime has no graphs");
  }

 private:
  static absl::Status Copy(void* d, const void* s, size_t n) {
    if (n) std::memmove(d, s, n);
    return absl::OkStatus();
  }
  void Flush() {
    for (const LateWrite& w : pending_) {
      Copy(w.first.dst, w.first.src, w.first.bytes).IgnoreError();
      Copy(w.second.dst, w.second.src, w.second.bytes).IgnoreError();
    }
    pending_.clear();
  }
  std::vector<LateWrite> pending_;
};

}  // namespace

std::unique_ptr<DeviceRuntime> NewHostRuntime() { return std::make_unique<HostRuntime>(); }

absl::StatusOr<std::unique_ptr<DeviceRuntime>> OpenRuntime(const std::string& kind) {
  if (kind == "cuda") return OpenCudaRuntime();
  if (kind == "hip") return OpenHipRuntime();
  if (kind == "host") return NewHostRuntime();
  if (kind != "auto") {
    return absl::InvalidArgumentError(absl::StrCat("unknown device runtime '", kind, "' (auto, cuda, hip, host)"));
  }
  std::string why;
  for (const char* k : {"cuda", "hip"}) {
    auto rt = OpenRuntime(k);
    if (rt.ok()) {
      auto devs = (*rt)->Devices();
      if (devs.ok() && !devs->empty()) return rt;
      absl::StrAppend(&why, k, ": ", devs.ok() ? "no devices" : devs.status().message(), "; ");
    } else {
      absl::StrAppend(&why, k, ": ", rt.status().message(), "; ");
    }
  }
  return absl::UnavailableError(absl::StrCat("no GPU runtime with a device: ", why));
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    Reset();
    rt_ = o.rt_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.rt_ = nullptr;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(DeviceRuntime& rt, size_t bytes) {
  auto p = rt.Alloc(bytes);
  if (!p.ok()) return p.status();
  return DeviceBuffer(&rt, *p, bytes);
}

void DeviceBuffer::Reset() {
  if (rt_ && ptr_) rt_->Free(ptr_);
  rt_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

}  // namespace mxval
