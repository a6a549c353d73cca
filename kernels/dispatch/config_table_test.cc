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
  // K = 128 is one 256-wide K block: NUM_KSPLIT 2 is lowered to 1 (as
  // AITER's get_splitk does), in the config object too.
  EXPECT_EQ(e->config.ksplit, 1);
  EXPECT_EQ(nlohmann::json::parse(e->config.json)["NUM_KSPLIT"], 1);
  EXPECT_EQ(t->Lookup("kup", 5, 512, 1024)->config.ksplit, 2);
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

TEST(ConfigTable, ReadsAiterFlatFilesAndKeepsEachConfigVerbatim) {
  // AITER's own file: buckets at the top level, for every op and shape,
  // with tuning keys the C kernels do not have.
  const std::string aiter = R"({
    "M_LEQ_16": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 256, "GROUP_SIZE_M": 1, "NUM_KSPLIT": 4,
                 "num_warps": 4, "num_stages": 2, "waves_per_eu": 2, "matrix_instr_nonkdim": 16, "cache_modifier": ".cg"},
    "any": {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "NUM_KSPLIT": 1, "my_own_key": [1, 2]}
  })";
  // A C kernel's table refuses a key it cannot honour; a Python kernel's keeps it.
  auto strict = ConfigTable::FromJsonText(aiter);
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.status().message().find("unknown config key 'my_own_key'"), std::string::npos) << strict.status();
  ConfigTableOptions lenient;
  lenient.allow_unknown_keys = true;
  auto t = ConfigTable::FromJsonText(aiter, lenient);
  ASSERT_TRUE(t.ok()) << t.status();
  auto small = t->Lookup("vup", 7, 256, 512);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->name, "M_LEQ_16");
  EXPECT_EQ(small->config.ksplit, 4);
  const auto j = nlohmann::json::parse(small->config.json);
  EXPECT_EQ(j["waves_per_eu"], 2);
  EXPECT_EQ(j["cache_modifier"], ".cg");
  EXPECT_EQ(j.size(), 10u);  // every key, none added
  auto big = t->Lookup("kup", 4096, 512, 192);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->name, "any");
  EXPECT_EQ(nlohmann::json::parse(big->config.json)["my_own_key"], nlohmann::json({1, 2}));
  EXPECT_EQ(ConfigExtras(big->config.json), "my_own_key=[1,2]");
  // The same six fields with another tuning key are another config.
  TileConfig other = big->config;
  other.json = R"({"BLOCK_SIZE_K":128,"BLOCK_SIZE_M":64,"BLOCK_SIZE_N":128,"NUM_KSPLIT":1,"my_own_key":[1,3]})";
  EXPECT_FALSE(other == big->config);
  // A flat file still checks its buckets.
  EXPECT_FALSE(ConfigTable::FromJsonText(R"({"M_LEQ_0": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 16, "BLOCK_SIZE_K": 32}})",
                                         lenient).ok());
  EXPECT_FALSE(ConfigTable::FromJsonText(R"({"M_LEQ_4": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 16}})", lenient).ok());
}

TEST(ConfigTable, WrappedTablesCarryTheirJsonToo) {
  auto t = ConfigTable::Load(MXVAL_SOURCE_DIR "/kernels/configs/cpu.json");
  ASSERT_TRUE(t.ok()) << t.status();
  auto e = t->Lookup("kup", 1, 512, 192);
  ASSERT_TRUE(e.ok());
  const auto j = nlohmann::json::parse(e->config.json);
  EXPECT_EQ(j["BLOCK_SIZE_K"], e->config.block_k);
  EXPECT_FALSE(j.contains("kernel"));  // which kernel runs is the table's business, not the kernel's
}

}  // namespace
}  // namespace mxval
