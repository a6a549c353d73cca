#include "kernels/dispatch/config_table.h"

#include "gtest/gtest.h"

namespace mxval {
namespace {

constexpr char kTable[] = R"({
  "arch": "test",
  "kernel": "k_default",
  "ops": {
    "kup": {
      "N=512,K=192": {
        "M_LEQ_16": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64},
        "any": {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "NUM_KSPLIT": 1,
                "GROUP_SIZE_M": 1, "waves_per_eu": 2, "kernel": "k_panel"}
      },
      "default": {
        "M_LEQ_256": {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128},
        "M_LEQ_8": {"BLOCK_SIZE_M": 8, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 256, "NUM_KSPLIT": 2}
      }
    }
  }
})";

TEST(ConfigTable, LooksUpShapeSpecificBucketsInOrder) {
  auto t = ConfigTable::FromJsonText(kTable);
  ASSERT_TRUE(t.ok()) << t.status();
  auto e = t->Lookup("kup", 1, 512, 192);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->name, "kup/N=512,K=192/M_LEQ_16");
  EXPECT_EQ(e->config.block_k, 64);
  e = t->Lookup("kup", 16, 512, 192);
  EXPECT_EQ(e->name, "kup/N=512,K=192/M_LEQ_16");
  e = t->Lookup("kup", 17, 512, 192);
  EXPECT_EQ(e->name, "kup/N=512,K=192/any");
  EXPECT_EQ(e->config.block_m, 128);
  EXPECT_EQ(e->kernel, "k_panel");  // the bucket's own kernel
  EXPECT_EQ(t->Lookup("kup", 1, 512, 192)->kernel, "k_default");
  // Falls back to "default"; buckets sorted regardless of file order.
  e = t->Lookup("kup", 5, 512, 128);
  EXPECT_EQ(e->name, "kup/default/M_LEQ_8");
  EXPECT_EQ(e->config.ksplit, 2);
  e = t->Lookup("kup", 9, 512, 128);
  EXPECT_EQ(e->name, "kup/default/M_LEQ_256");
  // No "any" in default: M beyond every bucket is NOT_FOUND, not a guess.
  EXPECT_EQ(t->Lookup("kup", 257, 512, 128).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t->Lookup("vup", 1, 512, 128).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t->AllEntries().size(), 4u);
}

TEST(ConfigTable, RejectsMalformedTablesNamingThePlace) {
  struct Bad { const char* json; const char* needle; } cases[] = {
      {"[]", "top level"},
      {R"({"ops": {}})", "ops"},
      {R"({"ops": {"kup": {"N=1": {"any": {}}}}})", "shape key"},
      {R"({"ops": {"kup": {"default": {"M_LE_4": {"BLOCK_SIZE_M": 1, "BLOCK_SIZE_N": 16, "BLOCK_SIZE_K": 32}}}}})", "M_LE_4"},
      {R"({"ops": {"kup": {"default": {"any": {"BLOCK_SIZE_M": 1, "BLOCK_SIZE_N": 16}}}}})", "BLOCK_SIZE_K"},
      {R"({"ops": {"kup": {"default": {"any": {"BLOCK_SIZE_M": 1, "BLOCK_SIZE_N": 16, "BLOCK_SIZE_K": 32, "BLOCK_SIZE_Q": 1}}}}})", "BLOCK_SIZE_Q"},
      {R"({"ops": {"kup": {"default": {"any": {"BLOCK_SIZE_M": 0, "BLOCK_SIZE_N": 16, "BLOCK_SIZE_K": 32}}}}})", "BLOCK_SIZE_M"},
      {R"({"ops": {"kup": {"default": {"any": {"BLOCK_SIZE_M": 1.5, "BLOCK_SIZE_N": 16, "BLOCK_SIZE_K": 32}}}}})", "BLOCK_SIZE_M"},
      {R"({"ops": {"kup": {"default": {"M_LEQ_4": {"BLOCK_SIZE_M": 1, "BLOCK_SIZE_N": 16, "BLOCK_SIZE_K": 32}, "M_LEQ_04": {"BLOCK_SIZE_M": 1, "BLOCK_SIZE_N": 16, "BLOCK_SIZE_K": 32}}}}})", "same M"},
      {"{not json", "JSON"},
  };
  for (const Bad& c : cases) {
    auto t = ConfigTable::FromJsonText(c.json);
    ASSERT_FALSE(t.ok()) << c.json;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(c.needle), std::string::npos) << t.status() << " lacks " << c.needle;
  }
}

TEST(TileConfig, CompactFormRoundTrips) {
  TileConfig c{.block_m = 48, .block_n = 128, .block_k = 64, .ksplit = 2, .num_stages = 3, .num_warps = 8};
  auto p = ParseTileConfig(c.ToString());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, c);
  EXPECT_FALSE(ParseTileConfig("BM16_BN64").ok());
  EXPECT_FALSE(ParseTileConfig("BM16_BN64_BK32_XX1").ok());
  EXPECT_FALSE(ParseTileConfig("BM0_BN64_BK32").ok());
}

TEST(ConfigTable, ShippedCpuTableLoads) {
  auto t = ConfigTable::Load(MXVAL_SOURCE_DIR "/kernels/configs/cpu.json");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->arch(), "cpu");
  EXPECT_EQ(t->Lookup("kup", 8192, 512, 192)->config.block_k, 64);  // K=192 uses BLOCK_K=64
  EXPECT_TRUE(t->Lookup("vup", 1, 256, 512).ok());
}

}  // namespace
}  // namespace mxval
