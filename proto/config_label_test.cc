#include "proto/config_label.h"

#include "gtest/gtest.h"

namespace mxval {
namespace {

v1::TileConfig Config(int bm, int bn, int bk, int ks, int stages, int warps) {
  v1::TileConfig c;
  c.set_block_m(bm), c.set_block_n(bn), c.set_block_k(bk), c.set_ksplit(ks), c.set_num_stages(stages),
      c.set_num_warps(warps);
  return c;
}

TEST(ConfigLabel, NamesEveryField) {
  EXPECT_EQ(ConfigLabel(Config(128, 128, 64, 1, 4, 9)), "BM128_BN128_BK64_KS1_S4_W9");
  EXPECT_EQ(ConfigLabel(Config(16, 32, 128, 4, 2, 4)), "BM16_BN32_BK128_KS4_S2_W4");
}

TEST(ConfigLabel, DefaultsAndUnsetFields) {
  EXPECT_EQ(ConfigLabel(Config(32, 64, 64, 0, 0, 0)), "BM32_BN64_BK64_KS1");
  EXPECT_EQ(ConfigLabel(Config(32, 64, 64, 2, 3, 0)), "BM32_BN64_BK64_KS2_S3");
}

// The case that motivated it: a retune of stages or warps alone, or of the
// kernel alone, must not print identical labels.
TEST(ConfigLabel, RunsThatDifferOnlyInStagesWarpsOrKernelDiffer) {
  v1::KernelRun a, b;
  *a.mutable_config() = Config(128, 128, 64, 1, 3, 4);
  *b.mutable_config() = Config(128, 128, 64, 1, 4, 9);
  a.mutable_kernel()->set_kernel("a16wfp4_tc");
  b.mutable_kernel()->set_kernel("a16wfp4_tc");
  EXPECT_NE(RunConfigLabel(a), RunConfigLabel(b));
  *b.mutable_config() = a.config();
  b.mutable_kernel()->set_kernel("a16wfp4_wgmma");
  EXPECT_EQ(RunConfigLabel(a), "a16wfp4_tc BM128_BN128_BK64_KS1_S3_W4");
  EXPECT_EQ(RunConfigLabel(b), "a16wfp4_wgmma BM128_BN128_BK64_KS1_S3_W4");
  b.mutable_kernel()->clear_kernel();
  EXPECT_EQ(RunConfigLabel(b), "(table) BM128_BN128_BK64_KS1_S3_W4");
}

}  // namespace
}  // namespace mxval
