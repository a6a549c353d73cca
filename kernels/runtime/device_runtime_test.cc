#include "kernels/runtime/device_runtime.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace mxval {
namespace {

// The host late writer's copies wait for the next blocking call, in order:
// first, then second; what ran in between saw the old contents.
TEST(HostRuntime, LateWriterCopiesAtTheNextBlockingCall) {
  auto rt = NewHostRuntime();
  ASSERT_TRUE(rt->SetDevice(0).ok());
  std::vector<uint8_t> x(40, 1), x_src(40, 2), y(24, 3), y_src(24, 4);
  LateWrite w;
  w.first = {y.data(), y_src.data(), y.size()};
  w.second = {x.data(), x_src.data(), x.size()};
  ASSERT_TRUE(rt->LaunchLateWriter(w).ok());
  EXPECT_EQ(x, std::vector<uint8_t>(40, 1));  // a host kernel launched now sees these
  EXPECT_EQ(y, std::vector<uint8_t>(24, 3));
  ASSERT_TRUE(rt->Synchronize().ok());
  EXPECT_EQ(x, x_src);
  EXPECT_EQ(y, y_src);
  y.assign(24, 9);
  ASSERT_TRUE(rt->LaunchLateWriter(w).ok());
  std::vector<uint8_t> back(24);
  ASSERT_TRUE(rt->CopyToHost(back.data(), y.data(), 24).ok());  // ordered after the writer
  EXPECT_EQ(back, y_src);
}

TEST(HostRuntime, MemoryCopiesAndEvents) {
  auto rt = NewHostRuntime();
  EXPECT_EQ(rt->kind(), "host");
  auto devs = rt->Devices();
  ASSERT_TRUE(devs.ok());
  ASSERT_EQ(devs->size(), 1u);
  ASSERT_TRUE(rt->SetDevice(0).ok());
  EXPECT_EQ(rt->SetDevice(1).code(), absl::StatusCode::kInvalidArgument);

  auto buf = DeviceBuffer::Allocate(*rt, 64);
  ASSERT_TRUE(buf.ok());
  std::vector<uint8_t> host(64);
  ASSERT_TRUE(rt->CopyToHost(host.data(), buf->get(), 64).ok());
  for (uint8_t b : host) EXPECT_EQ(b, 0xA5);  // fresh memory is marked, not zero

  std::vector<uint8_t> src(64);
  for (int i = 0; i < 64; ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  ASSERT_TRUE(rt->CopyToDevice(buf->get(), src.data(), 64).ok());
  auto other = DeviceBuffer::Allocate(*rt, 64);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(rt->CopyOnDevice(other->get(), buf->get(), 64).ok());
  ASSERT_TRUE(rt->Memset(buf->get(), 0x11, 32).ok());
  ASSERT_TRUE(rt->CopyToHost(host.data(), other->get(), 64).ok());
  EXPECT_EQ(host, src);
  ASSERT_TRUE(rt->CopyToHost(host.data(), buf->get(), 64).ok());
  EXPECT_EQ(host[0], 0x11);
  EXPECT_EQ(host[31], 0x11);
  EXPECT_EQ(host[32], src[32]);

  auto a = rt->CreateEvent(), b = rt->CreateEvent();
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(rt->Record(*a).ok());
  ASSERT_TRUE(rt->Record(*b).ok());
  auto dt = rt->ElapsedSeconds(*a, *b);
  ASSERT_TRUE(dt.ok());
  EXPECT_GE(*dt, 0.0);
  rt->DestroyEvent(*a);
  rt->DestroyEvent(*b);
  EXPECT_EQ(rt->Capture([] { return absl::OkStatus(); }).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(DeviceBuffer, MoveTransfersOwnership) {
  auto rt = NewHostRuntime();
  auto a = DeviceBuffer::Allocate(*rt, 16);
  ASSERT_TRUE(a.ok());
  void* p = a->get();
  DeviceBuffer b = std::move(*a);
  EXPECT_EQ(b.get(), p);
  EXPECT_EQ(a->get(), nullptr);
  EXPECT_EQ(b.bytes(), 16u);
  b.Reset();
  EXPECT_EQ(b.get(), nullptr);
}

TEST(OpenRuntime, NamesAndMissingDrivers) {
  EXPECT_EQ(OpenRuntime("tpu").status().code(), absl::StatusCode::kInvalidArgument);
  auto host = OpenRuntime("host");
  ASSERT_TRUE(host.ok());
  EXPECT_EQ((*host)->kind(), "host");
  // On a machine without the vendor driver this must be a clean UNAVAILABLE,
  // not a crash; where a GPU exists it must list at least one device.
  for (const char* kind : {"cuda", "hip", "auto"}) {
    auto rt = OpenRuntime(kind);
    if (rt.ok()) {
      auto devs = (*rt)->Devices();
      ASSERT_TRUE(devs.ok()) << kind << ": " << devs.status();
      for (const auto& d : *devs) EXPECT_FALSE(d.arch.empty());
    } else {
      EXPECT_EQ(rt.status().code(), absl::StatusCode::kUnavailable) << kind << ": " << rt.status();
      EXPECT_FALSE(rt.status().message().empty());
    }
  }
}

TEST(GfxArch, FromKfdTargetVersion) {
  EXPECT_EQ(GfxArchFromTargetVersion(90402), "gfx942");
  EXPECT_EQ(GfxArchFromTargetVersion(90010), "gfx90a");
  EXPECT_EQ(GfxArchFromTargetVersion(90500), "gfx950");
  EXPECT_EQ(GfxArchFromTargetVersion(110000), "gfx1100");
  EXPECT_EQ(GfxArchFromTargetVersion(0), "");
}

}  // namespace
}  // namespace mxval
