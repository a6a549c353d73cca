#include "service/worker/devices.h"

#include "gtest/gtest.h"
#include "kernels/runtime/forwarding_runtime.h"
#include "mxval/kernel_api.h"

namespace mxval {
namespace worker {
namespace {

// A runtime opener that has no GPU runtime at all, and one with three host
// "devices", so discovery is tested without hardware.
absl::StatusOr<std::unique_ptr<DeviceRuntime>> NoGpu(const std::string& kind) {
  return absl::UnavailableError(kind + ": driver not found");
}

class ThreeDevices : public ForwardingRuntime {
 public:
  std::string kind() const override { return "cuda"; }
  int32_t kernel_device() const override { return MXVAL_DEVICE_CUDA; }
  absl::StatusOr<std::vector<DeviceProperties>> Devices() override {
    std::vector<DeviceProperties> v;
    for (int i = 0; i < 3; ++i) v.push_back({i, "sm_90a", "NVIDIA H200", int64_t{141} << 30, 50 << 20, 132, ""});
    return v;
  }
  absl::Status SetDevice(int) override { return absl::OkStatus(); }
  void* stream() override { return nullptr; }
  absl::Status Synchronize() override { return absl::OkStatus(); }
};

absl::StatusOr<std::unique_ptr<DeviceRuntime>> Gpus(const std::string& kind) {
  if (kind == "hip") return absl::UnavailableError("hip: driver not found");
  return std::unique_ptr<DeviceRuntime>(new ThreeDevices());
}

TEST(DiscoverDevices, AutoFallsBackToTheCpu) {
  auto d = DiscoverDevices("auto", NoGpu);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->runtime, "");
  ASSERT_EQ(d->devices.size(), 1u);
  EXPECT_EQ(d->devices[0].arch(), "cpu");
  EXPECT_TRUE(d->devices[0].healthy());
  // The host reports its memory and cores like a GPU reports its own (not "0 MiB").
  EXPECT_GT(d->devices[0].memory_bytes(), int64_t{64} << 20);
  EXPECT_NE(d->devices[0].name().find(" cores"), std::string::npos) << d->devices[0].name();
}

TEST(DiscoverDevices, AutoFindsEveryGpu) {
  auto d = DiscoverDevices("auto", Gpus);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->runtime, "cuda");
  ASSERT_EQ(d->devices.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(d->devices[i].index(), i);
    EXPECT_EQ(d->devices[i].arch(), "sm_90a");
    EXPECT_EQ(d->devices[i].memory_bytes(), int64_t{141} << 30);
  }
}

TEST(DiscoverDevices, SelectsIndexes) {
  auto d = DiscoverDevices("cuda:0,2", Gpus);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->devices.size(), 2u);
  EXPECT_EQ(d->devices[0].index(), 0);
  EXPECT_EQ(d->devices[1].index(), 2);
}

TEST(DiscoverDevices, Errors) {
  EXPECT_EQ(DiscoverDevices("cuda:5", Gpus).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DiscoverDevices("cuda:x", Gpus).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DiscoverDevices("tpu", Gpus).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DiscoverDevices("cpu:1", Gpus).status().code(), absl::StatusCode::kInvalidArgument);
  // Asking for a runtime by name that is not there is not silently the CPU.
  EXPECT_EQ(DiscoverDevices("hip", Gpus).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(DiscoverDevices("cuda", NoGpu).status().code(), absl::StatusCode::kUnavailable);
}

TEST(DiscoverDevices, HostRuntimeForTests) {
  auto d = DiscoverDevices("host");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->runtime, "host");
  ASSERT_EQ(d->devices.size(), 1u);
  EXPECT_EQ(d->devices[0].arch(), "host");
}

}  // namespace
}  // namespace worker
}  // namespace mxval
