// A DeviceRuntime that forwards every call to another one, for tests that
// fake a device by overriding a few calls (its kind, its devices, a copy
// that fails) over the host runtime. A new DeviceRuntime call is added here
// once, not in every fake.
#ifndef MXVAL_KERNELS_RUNTIME_FORWARDING_RUNTIME_H_
#define MXVAL_KERNELS_RUNTIME_FORWARDING_RUNTIME_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/runtime/device_runtime.h"

namespace mxval {

class ForwardingRuntime : public DeviceRuntime {
 public:
  explicit ForwardingRuntime(std::unique_ptr<DeviceRuntime> inner = NewHostRuntime()) : inner_(std::move(inner)) {}
  std::string kind() const override { return inner_->kind(); }
  int32_t kernel_device() const override { return inner_->kernel_device(); }
  absl::StatusOr<std::vector<DeviceProperties>> Devices() override { return inner_->Devices(); }
  absl::Status SetDevice(int i) override { return inner_->SetDevice(i); }
  absl::StatusOr<void*> Alloc(size_t n) override { return inner_->Alloc(n); }
  void Free(void* p) override { inner_->Free(p); }
  absl::Status CopyToDevice(void* d, const void* s, size_t n) override { return inner_->CopyToDevice(d, s, n); }
  absl::Status CopyToHost(void* d, const void* s, size_t n) override { return inner_->CopyToHost(d, s, n); }
  absl::Status CopyOnDevice(void* d, const void* s, size_t n) override { return inner_->CopyOnDevice(d, s, n); }
  absl::Status CopyOnDeviceAsync(void* d, const void* s, size_t n) override {
    return inner_->CopyOnDeviceAsync(d, s, n);
  }
  absl::Status Memset(void* d, uint8_t v, size_t n) override { return inner_->Memset(d, v, n); }
  void* stream() override { return inner_->stream(); }
  absl::Status Synchronize() override { return inner_->Synchronize(); }
  absl::StatusOr<void*> CreateEvent() override { return inner_->CreateEvent(); }
  absl::Status Record(void* e) override { return inner_->Record(e); }
  absl::StatusOr<double> ElapsedSeconds(void* a, void* b) override { return inner_->ElapsedSeconds(a, b); }
  void DestroyEvent(void* e) override { inner_->DestroyEvent(e); }
  absl::Status LaunchLateWriter(const LateWrite& w) override { return inner_->LaunchLateWriter(w); }
  absl::StatusOr<std::unique_ptr<DeviceGraph>> Capture(const std::function<absl::Status()>& body) override {
    return inner_->Capture(body);
  }

 protected:
  DeviceRuntime& inner() { return *inner_; }

 private:
  std::unique_ptr<DeviceRuntime> inner_;
};

}  // namespace mxval

#endif  // MXVAL_KERNELS_RUNTIME_FORWARDING_RUNTIME_H_
