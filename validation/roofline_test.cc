#include "validation/roofline.h"

#include <cmath>

#include "gtest/gtest.h"
#include "kernels/runtime/forwarding_runtime.h"

namespace mxval {
namespace {

// The host runtime, with its stream-ordered copy failing.
class FailingCopyRuntime : public ForwardingRuntime {
 public:
  absl::Status CopyOnDeviceAsync(void*, const void*, size_t) override {
    return absl::InternalError("copy engine on fire");
  }
};

TEST(Roofline, CopyBandwidthIsReadPlusWriteBytesPerSecond) {
  auto rt = NewHostRuntime();
  auto bw = MeasureCopyBandwidth(*rt, 8 << 20, 1, 5);
  ASSERT_TRUE(bw.ok()) << bw.status();
  // Any machine this runs on moves 16 MB in well under a second, and no
  // memory system moves it in a microsecond.
  EXPECT_GT(*bw, 16e6);
  EXPECT_LT(*bw, 16e12);
  EXPECT_EQ(MeasureCopyBandwidth(*rt, 0, 1, 5).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MeasureCopyBandwidth(*rt, 1024, 1, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Roofline, CopyActuallyCopies) {
  // The timed operation is a real copy: the destination ends up with the source's bytes.
  auto rt = NewHostRuntime();
  std::vector<uint8_t> src(4096), back(4096, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  auto a = DeviceBuffer::Allocate(*rt, src.size());
  auto b = DeviceBuffer::Allocate(*rt, src.size());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(rt->CopyToDevice(a->get(), src.data(), src.size()).ok());
  ASSERT_TRUE(rt->CopyOnDeviceAsync(b->get(), a->get(), src.size()).ok());
  ASSERT_TRUE(rt->Synchronize().ok());
  ASSERT_TRUE(rt->CopyToHost(back.data(), b->get(), back.size()).ok());
  EXPECT_EQ(back, src);
}

// The GEMM probe's operands: a seeded block repeated to the end (an odd
// length, so the last doubling is partial), not constants, not zeros.
TEST(Roofline, RandomOperandsRepeatOneSeededBlockToTheEnd) {
  auto rt = NewHostRuntime();
  const size_t elems = (size_t{1} << 21) + (size_t{1} << 19) + 3;  // 2.5 blocks and 3
  auto buf = DeviceBuffer::Allocate(*rt, elems * 2);
  ASSERT_TRUE(buf.ok());
  ASSERT_TRUE(FillRandomBf16(*rt, buf->get(), elems, 7).ok());
  std::vector<uint16_t> v(elems);
  ASSERT_TRUE(rt->CopyToHost(v.data(), buf->get(), elems * 2).ok());
  const size_t block = size_t{1} << 20;
  for (size_t i = block; i < elems; i += 4093) EXPECT_EQ(v[i], v[i % block]) << i;
  EXPECT_EQ(v[elems - 1], v[(elems - 1) % block]);
  size_t distinct_signs = 0, zeros = 0;
  for (size_t i = 0; i < 4096; ++i) {
    distinct_signs += v[i] >> 15;
    zeros += v[i] == 0;
    const int exp = (v[i] >> 7) & 0xFF;
    EXPECT_LT(exp, 127) << "not in (-1, 1): " << v[i];  // |x| < 1
  }
  EXPECT_GT(distinct_signs, 1500u);  // about half negative
  EXPECT_LT(zeros, 10u);
  // Another seed, other values.
  auto other = DeviceBuffer::Allocate(*rt, 64 * 2);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(FillRandomBf16(*rt, other->get(), 64, 8).ok());
  std::vector<uint16_t> w(64);
  ASSERT_TRUE(rt->CopyToHost(w.data(), other->get(), 128).ok());
  EXPECT_NE(std::vector<uint16_t>(v.begin(), v.begin() + 64), w);
}

TEST(Roofline, NoGemmProbeOffCudaSaysWhy) {
  auto rt = NewHostRuntime();
  auto rate = MeasureBf16GemmRate(*rt, 256, 1, 2);
  EXPECT_EQ(rate.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(rate.status().message().find("host"), std::string::npos) << rate.status();
}

TEST(Roofline, MeasuredOnTheHostRuntimeHasTheMemoryCeilingOnly) {
  auto rt = NewHostRuntime();
  RooflineOptions o;
  o.copy_bytes = 4 << 20;
  o.samples = 3;
  const Roofline r = MeasureRoofline(*rt, o);
  EXPECT_GT(r.copy_bytes_per_s, 0);
  EXPECT_EQ(r.bf16_flops_per_s, 0);
  EXPECT_NE(r.note.find("copy: 4 MiB"), std::string::npos) << r.note;
  EXPECT_NE(r.note.find("memory floor alone"), std::string::npos) << r.note;
  // Without a rate, the floor is the memory term.
  EXPECT_DOUBLE_EQ(FloorSeconds(r, 1e30, 1e6), 1e6 / r.copy_bytes_per_s);
}

TEST(Roofline, AFailedCopyLeavesNoRooflineAndSaysWhy) {
  FailingCopyRuntime rt;
  RooflineOptions o;
  o.copy_bytes = 1 << 20;
  const Roofline r = MeasureRoofline(rt, o);
  EXPECT_EQ(r.copy_bytes_per_s, 0);
  EXPECT_EQ(r.bf16_flops_per_s, 0);
  EXPECT_NE(r.note.find("copy engine on fire"), std::string::npos) << r.note;
  EXPECT_EQ(FloorSeconds(r, 1e12, 1e9), 0);
}

TEST(Roofline, FloorIsTheSlowerCeiling) {
  Roofline r;
  r.copy_bytes_per_s = 4e12;
  r.bf16_flops_per_s = 800e12;
  // GLM-5 K-up, B = 16, M = 16384 (N = 512, K = 192): memory-bound.
  const double flops = 2.0 * 16 * 16384 * 512 * 192;
  const double bytes = 16.0 * 16384 * 192 * 2 + 16.0 * 512 * (96 + 6) + 16.0 * 16384 * 512 * 2;
  EXPECT_DOUBLE_EQ(FloorSeconds(r, flops, bytes), bytes / 4e12);
  // A square bf16 GEMM of 8192: compute-bound.
  EXPECT_DOUBLE_EQ(FloorSeconds(r, 2.0 * 8192 * 8192 * 8192, 3.0 * 8192 * 8192 * 2), 2.0 * 8192 * 8192 * 8192 / 800e12);
  EXPECT_DOUBLE_EQ(RooflineFraction(2e-6, 4e-6), 0.5);
  EXPECT_EQ(RooflineFraction(0, 4e-6), 0);
  EXPECT_EQ(RooflineFraction(2e-6, 0), 0);
}

}  // namespace
}  // namespace mxval
