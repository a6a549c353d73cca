// The AMD dispatch tables (kernels/configs/gfx942.json, gfx950.json; the
// embedded copies the coordinator plans with) can only be checked here
// without an AMD GPU: every bucket must name a16wfp4_tc on a config the HIP
// build compiles (kernels/gpu/tc_configs.h), with NUM_KSPLIT = 1, whose
// shared memory at the model shapes' K fits the arch's LDS (a16wfp4_tc's
// can_implement would refuse it on the device otherwise), and every model
// shape and M must find a bucket.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/dispatch/config_table.h"
#include "kernels/gpu/tc_configs.h"
#include "mxval/default_tables.h"

namespace mxval::gpu {
namespace {

struct Compiled {
  int bm, bn, bk, warps, stages;
};
#define MXVAL_TC_COMPILED(BM, BN, BK, WMW, WNW, ST) Compiled{BM, BN, BK, WMW * WNW, ST},
const std::vector<Compiled> kCompiled = {MXVAL_TC_CONFIGS(MXVAL_TC_COMPILED)};

bool IsCompiled(const TileConfig& c) {
  for (const Compiled& k : kCompiled) {
    if (k.bm == c.block_m && k.bn == c.block_n && k.bk == c.block_k && k.warps == c.num_warps &&
        k.stages == c.num_stages) {
      return true;
    }
  }
  return false;
}

// Scale groups one CTA stages for K with NUM_KSPLIT = 1 (MakeParams).
int KGroups(int K, int bk) { return (K + bk - 1) / bk * (bk / 32); }

struct Arch {
  const char* name;
  const char* json;
  size_t lds_bytes;
};

class AmdTables : public ::testing::TestWithParam<Arch> {};

TEST_P(AmdTables, EveryBucketIsACompiledTcConfigThatFitsTheLds) {
  const Arch& a = GetParam();
  auto t = ConfigTable::FromJsonText(a.json);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->arch(), a.name);
  const std::vector<DispatchEntry> entries = t->AllEntries();
  ASSERT_GE(entries.size(), 4u);
  for (const DispatchEntry& e : entries) {
    SCOPED_TRACE(e.name + " " + e.config.ToString());
    EXPECT_EQ(e.kernel, "a16wfp4_tc");
    EXPECT_TRUE(IsCompiled(e.config));
    EXPECT_EQ(e.config.ksplit, 1);
    for (int K : {128, 192, 512}) {
      const size_t smem = TcSmemBytes(e.config.block_m, e.config.block_n, e.config.block_k, e.config.num_stages,
                                      KGroups(K, e.config.block_k));
      EXPECT_LE(smem, a.lds_bytes) << "K = " << K;
    }
  }
  // The model shapes (GLM-5 / DeepSeek-V3 K-up and V-up) find a bucket at every M.
  struct Shape {
    const char* op;
    int64_t N, K;
  };
  for (const Shape& s : {Shape{"kup", 512, 192}, Shape{"kup", 512, 128}, Shape{"vup", 256, 512}, Shape{"vup", 128, 512}}) {
    for (int64_t M : {1, 16, 17, 64, 256, 257, 16384}) {
      auto e = t->Lookup(s.op, M, s.N, s.K);
      ASSERT_TRUE(e.ok()) << s.op << " M=" << M << ": " << e.status();
      if (std::string(s.op) == "kup" && s.K == 192) {
        EXPECT_EQ(e->config.block_k, 64) << "K-up with K = 192 uses BLOCK_SIZE_K = 64 (M = " << M << ")";
      }
    }
  }
}

TEST(AmdTables, TheCheckRejectsWhatTheLdsCannotHold) {
  // The seed PR's V-up M > 256 config (BLOCK_SIZE_M 128, BLOCK_SIZE_K 128) is
  // in the gfx950 table; on gfx942's 64 KiB it would not fit.
  EXPECT_GT(TcSmemBytes(128, 64, 128, 2, KGroups(512, 128)), size_t{64} << 10);
  EXPECT_LE(TcSmemBytes(128, 64, 128, 2, KGroups(512, 128)), size_t{160} << 10);
  TileConfig bogus;
  bogus.block_m = 48;
  EXPECT_FALSE(IsCompiled(bogus));
}

INSTANTIATE_TEST_SUITE_P(Archs, AmdTables,
                         ::testing::Values(Arch{"gfx942", kDefaultGfx942TableJson, size_t{64} << 10},
                                           Arch{"gfx950", kDefaultGfx950TableJson, size_t{160} << 10}),
                         [](const ::testing::TestParamInfo<Arch>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace mxval::gpu
