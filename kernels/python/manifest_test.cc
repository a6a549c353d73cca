#include "kernels/python/manifest.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace mxval::python {
namespace {

using nlohmann::json;

// Two kernels, so an error in the second shows the index ("kernels[1]").
json Valid() {
  return json::parse(R"({
    "format": "mxval-python-library-v1",
    "name": "pr_triton_kernels",
    "build_id": "a1b2c3d",
    "python_paths": [".", "src"],
    "kernels": [
      {
        "name": "batched_gemm_a16wfp4",
        "entry": "my_kernels.bmm:run",
        "can_implement": "my_kernels.bmm:can_implement",
        "workspace_size": "my_kernels.bmm:workspace_size",
        "archs": ["sm_90a", "gfx942", "gfx950"],
        "activations": ["bf16", "mxfp4-even"],
        "config_table": "configs/batched_gemm_a16wfp4.json"
      },
      {
        "name": "bmm.naive-v2",
        "entry": "naive:Kernel.run",
        "archs": ["cpu"],
        "activations": ["bf16"],
        "configs": [
          {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 256, "num_warps": 4, "cache_modifier": ".cg"},
          {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 128, "my_key": {"nested": [1, 2]}}
        ]
      }
    ]
  })");
}

TEST(Manifest, ValidManifestRoundTrips) {
  const absl::StatusOr<Manifest> m = ParseManifest(Valid().dump());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->name, "pr_triton_kernels");
  EXPECT_EQ(m->build_id, "a1b2c3d");
  EXPECT_EQ(m->python_paths, (std::vector<std::string>{".", "src"}));
  ASSERT_EQ(m->kernels.size(), 2u);
  const KernelEntry& a = m->kernels[0];
  EXPECT_EQ(a.name, "batched_gemm_a16wfp4");
  EXPECT_EQ(a.entry, "my_kernels.bmm:run");
  EXPECT_EQ(a.can_implement, "my_kernels.bmm:can_implement");
  EXPECT_EQ(a.workspace_size, "my_kernels.bmm:workspace_size");
  EXPECT_EQ(a.archs, (std::vector<std::string>{"sm_90a", "gfx942", "gfx950"}));
  EXPECT_EQ(a.activations, (std::vector<std::string>{"bf16", "mxfp4-even"}));
  EXPECT_EQ(a.config_table, "configs/batched_gemm_a16wfp4.json");
  EXPECT_TRUE(a.configs.empty());
  const KernelEntry& b = m->kernels[1];
  EXPECT_EQ(b.name, "bmm.naive-v2");
  EXPECT_EQ(b.entry, "naive:Kernel.run");
  EXPECT_EQ(b.can_implement, "");
  EXPECT_EQ(b.workspace_size, "");
  EXPECT_EQ(b.config_table, "");
  // Configs come back exactly as written, every key kept.
  const json written = Valid()["kernels"][1]["configs"];
  ASSERT_EQ(b.configs.size(), 2u);
  EXPECT_EQ(b.configs[0], written[0]);
  EXPECT_EQ(b.configs[1], written[1]);
  EXPECT_EQ(json(b.configs).dump(), written.dump());
}

TEST(Manifest, PythonPathsDefaultToTheRoot) {
  json j = Valid();
  j.erase("python_paths");
  const absl::StatusOr<Manifest> m = ParseManifest(j.dump());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->python_paths, std::vector<std::string>{"."});
}

TEST(Manifest, BoundaryValuesAreAccepted) {
  json j = Valid();
  j["name"] = std::string(64, 'n');
  j["build_id"] = std::string(128, '~');
  j["kernels"][0]["name"] = std::string(64, 'k');
  j["kernels"][0]["archs"] = {std::string(32, 'a'), "gfx950"};
  j["kernels"][0]["entry"] = "m:f";
  j["kernels"][0]["activations"] = {"mxfp4-even"};
  j["python_paths"] = {"./src/", "a/./b"};
  json k = j["kernels"][0];
  for (int i = 2; i < 64; ++i) {
    k["name"] = absl::StrCat("k", i);
    j["kernels"].push_back(k);
  }
  j["kernels"][1]["configs"] = json::array();
  for (int i = 0; i < 4096; ++i) {
    j["kernels"][1]["configs"].push_back({{"BLOCK_SIZE_M", 1}, {"BLOCK_SIZE_N", 1}, {"BLOCK_SIZE_K", i + 1}});
  }
  const absl::StatusOr<Manifest> m = ParseManifest(j.dump());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->kernels.size(), 64u);
  EXPECT_EQ(m->kernels[1].configs.size(), 4096u);
}

struct Case {
  std::string what;
  std::function<void(json&)> edit;
  std::string field;      // must appear in the message as "mxval_library.json: <field>: "
  std::string also = "";  // and this too
};

void ExpectRejected(const std::string& text, const std::string& field, const std::string& also,
                    const std::string& what) {
  const absl::StatusOr<Manifest> m = ParseManifest(text);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << what << ": " << m.status();
  const std::string msg(m.status().message());
  EXPECT_TRUE(absl::StartsWith(msg, absl::StrCat("mxval_library.json: ", field, ": ")))
      << what << ": '" << msg << "' does not name " << field;
  EXPECT_TRUE(absl::StrContains(msg, also)) << what << ": '" << msg << "' lacks '" << also << "'";
}

void RunCases(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    json j = Valid();
    c.edit(j);
    ExpectRejected(j.dump(), c.field, c.also, c.what);
  }
}

TEST(Manifest, TopLevelRules) {
  RunCases({
      {"no format", [](json& j) { j.erase("format"); }, "format", "missing"},
      {"other format", [](json& j) { j["format"] = "mxval-python-library-v2"; }, "format", "v2"},
      {"format not a string", [](json& j) { j["format"] = 1; }, "format", "string"},
      {"another format's key is no typo",
       [](json& j) {
         j["format"] = "v2";
         j["new_key"] = 1;
       },
       "format"},
      {"unknown key", [](json& j) { j["kernel"] = json::array(); }, "kernel", "unknown key"},
      {"misspelled optional key", [](json& j) { j["python_path"] = {"."}; }, "python_path", "unknown key"},
      {"no name", [](json& j) { j.erase("name"); }, "name", "missing"},
      {"empty name", [](json& j) { j["name"] = ""; }, "name", "1..64"},
      {"long name", [](json& j) { j["name"] = std::string(65, 'n'); }, "name", "1..64"},
      {"name charset", [](json& j) { j["name"] = "my lib"; }, "name", "[A-Za-z0-9_.-]"},
      {"name slash", [](json& j) { j["name"] = "a/b"; }, "name", "[A-Za-z0-9_.-]"},
      {"name non-ascii", [](json& j) { j["name"] = "caf\u00e9"; }, "name", "[A-Za-z0-9_.-]"},
      {"name leading dot", [](json& j) { j["name"] = ".hidden"; }, "name", "'.'"},
      {"name dot-dot", [](json& j) { j["name"] = ".."; }, "name", "'.'"},
      {"builtin name", [](json& j) { j["name"] = "mxval-builtin-cpu"; }, "name", "reserved"},
      {"builtin name any case", [](json& j) { j["name"] = "MXVAL-Builtin-cpu"; }, "name", "reserved"},
      {"name not a string", [](json& j) { j["name"] = 7; }, "name", "number"},
      {"no build_id", [](json& j) { j.erase("build_id"); }, "build_id", "missing"},
      {"empty build_id", [](json& j) { j["build_id"] = ""; }, "build_id", "1..128"},
      {"long build_id", [](json& j) { j["build_id"] = std::string(129, 'b'); }, "build_id", "1..128"},
      {"build_id space", [](json& j) { j["build_id"] = "a b"; }, "build_id", "0x21..0x7e"},
      {"build_id newline", [](json& j) { j["build_id"] = "a\nb"; }, "build_id", "0x21..0x7e"},
      {"build_id non-ascii", [](json& j) { j["build_id"] = "\u00e9"; }, "build_id", "0x21..0x7e"},
      {"build_id not a string", [](json& j) { j["build_id"] = 1234; }, "build_id", "string"},
      {"python_paths empty", [](json& j) { j["python_paths"] = json::array(); }, "python_paths", "empty"},
      {"python_paths a string", [](json& j) { j["python_paths"] = "."; }, "python_paths", "array"},
      {"python_paths absolute",
       [](json& j) {
         j["python_paths"] = {".", "/usr/lib"};
       },
       "python_paths[1]", "absolute"},
      {"python_paths dot-dot", [](json& j) { j["python_paths"] = {"a/../../b"}; }, "python_paths[0]", "'..'"},
      {"python_paths bare dot-dot", [](json& j) { j["python_paths"] = {".."}; }, "python_paths[0]", "'..'"},
      {"python_paths empty string", [](json& j) { j["python_paths"] = {""}; }, "python_paths[0]", "1..1024"},
      {"python_paths not strings",
       [](json& j) {
         j["python_paths"] = {".", 3};
       },
       "python_paths[1]", "string"},
      {"python_paths control char", [](json& j) { j["python_paths"] = {"a\tb"}; }, "python_paths[0]", "control"},
      {"python_paths twice",
       [](json& j) {
         j["python_paths"] = {"src", "src"};
       },
       "python_paths[1]", "twice"},
      {"no kernels", [](json& j) { j.erase("kernels"); }, "kernels", "missing"},
      {"kernels empty", [](json& j) { j["kernels"] = json::array(); }, "kernels", "empty"},
      {"kernels an object", [](json& j) { j["kernels"] = json::object(); }, "kernels", "array"},
      {"kernel not an object", [](json& j) { j["kernels"][1] = "k"; }, "kernels[1]", "object"},
      {"65 kernels",
       [](json& j) {
         json k = j["kernels"][1];
         for (int i = 2; i < 65; ++i) {
           k["name"] = absl::StrCat("k", i);
           j["kernels"].push_back(k);
         }
       },
       "kernels", "65 elements, more than 64"},
  });
}

TEST(Manifest, KernelRules) {
  RunCases({
      {"unknown kernel key", [](json& j) { j["kernels"][1]["config"] = json::array(); }, "kernels[1].config",
       "unknown key"},
      {"misspelled optional", [](json& j) { j["kernels"][1]["can_implment"] = "a:b"; }, "kernels[1].can_implment",
       "unknown key"},
      {"no name", [](json& j) { j["kernels"][1].erase("name"); }, "kernels[1].name", "missing"},
      {"bad name", [](json& j) { j["kernels"][1]["name"] = "a:b"; }, "kernels[1].name", "[A-Za-z0-9_.-]"},
      {"long name", [](json& j) { j["kernels"][1]["name"] = std::string(65, 'k'); }, "kernels[1].name", "1..64"},
      {"dot name", [](json& j) { j["kernels"][1]["name"] = ".k"; }, "kernels[1].name", "'.'"},
      {"duplicate name", [](json& j) { j["kernels"][1]["name"] = "batched_gemm_a16wfp4"; }, "kernels[1].name",
       "kernels[0]"},
      {"no entry", [](json& j) { j["kernels"][1].erase("entry"); }, "kernels[1].entry", "missing"},
      {"entry without colon", [](json& j) { j["kernels"][1]["entry"] = "my_kernels.bmm.run"; }, "kernels[1].entry",
       "package.module:function"},
      {"entry two colons", [](json& j) { j["kernels"][1]["entry"] = "a:b:c"; }, "kernels[1].entry", "'a:b:c'"},
      {"entry empty module", [](json& j) { j["kernels"][1]["entry"] = ":run"; }, "kernels[1].entry"},
      {"entry empty function", [](json& j) { j["kernels"][1]["entry"] = "mod:"; }, "kernels[1].entry"},
      {"entry empty part", [](json& j) { j["kernels"][1]["entry"] = "pkg..mod:run"; }, "kernels[1].entry"},
      {"entry digit first", [](json& j) { j["kernels"][1]["entry"] = "1pkg:run"; }, "kernels[1].entry"},
      {"entry dash", [](json& j) { j["kernels"][1]["entry"] = "my-kernels:run"; }, "kernels[1].entry"},
      {"entry path", [](json& j) { j["kernels"][1]["entry"] = "pkg/mod.py:run"; }, "kernels[1].entry"},
      {"entry space", [](json& j) { j["kernels"][1]["entry"] = "mod :run"; }, "kernels[1].entry"},
      {"entry call", [](json& j) { j["kernels"][1]["entry"] = "mod:run()"; }, "kernels[1].entry"},
      {"entry too long", [](json& j) { j["kernels"][1]["entry"] = "m:" + std::string(255, 'f'); }, "kernels[1].entry",
       "256"},
      {"entry not a string", [](json& j) { j["kernels"][1]["entry"] = json::array(); }, "kernels[1].entry", "string"},
      {"bad can_implement", [](json& j) { j["kernels"][1]["can_implement"] = "can_implement"; },
       "kernels[1].can_implement", "package.module:function"},
      {"empty can_implement", [](json& j) { j["kernels"][1]["can_implement"] = ""; }, "kernels[1].can_implement"},
      {"workspace_size a number", [](json& j) { j["kernels"][1]["workspace_size"] = 0; }, "kernels[1].workspace_size",
       "string"},
      {"bad workspace_size", [](json& j) { j["kernels"][1]["workspace_size"] = "a.b"; }, "kernels[1].workspace_size"},
      {"no archs", [](json& j) { j["kernels"][1].erase("archs"); }, "kernels[1].archs", "missing"},
      {"empty archs", [](json& j) { j["kernels"][1]["archs"] = json::array(); }, "kernels[1].archs", "empty"},
      {"archs a string", [](json& j) { j["kernels"][1]["archs"] = "cpu"; }, "kernels[1].archs", "array"},
      {"arch upper case",
       [](json& j) {
         j["kernels"][1]["archs"] = {"cpu", "SM_90A"};
       },
       "kernels[1].archs[1]", "[a-z0-9_]"},
      {"arch dash", [](json& j) { j["kernels"][1]["archs"] = {"sm-90a"}; }, "kernels[1].archs[0]", "[a-z0-9_]"},
      {"arch empty", [](json& j) { j["kernels"][1]["archs"] = {""}; }, "kernels[1].archs[0]"},
      {"arch long", [](json& j) { j["kernels"][1]["archs"] = {std::string(33, 'a')}; }, "kernels[1].archs[0]", "32"},
      {"arch number", [](json& j) { j["kernels"][1]["archs"] = {90}; }, "kernels[1].archs[0]", "string"},
      {"arch twice",
       [](json& j) {
         j["kernels"][1]["archs"] = {"cpu", "cpu"};
       },
       "kernels[1].archs[1]", "twice"},
      {"no activations", [](json& j) { j["kernels"][1].erase("activations"); }, "kernels[1].activations", "missing"},
      {"empty activations", [](json& j) { j["kernels"][1]["activations"] = json::array(); }, "kernels[1].activations",
       "empty"},
      {"unknown activation",
       [](json& j) {
         j["kernels"][1]["activations"] = {"bf16", "fp8"};
       },
       "kernels[1].activations[1]", "'fp8'"},
      {"activation case", [](json& j) { j["kernels"][1]["activations"] = {"BF16"}; }, "kernels[1].activations[0]"},
      {"activation twice",
       [](json& j) {
         j["kernels"][1]["activations"] = {"bf16", "bf16"};
       },
       "kernels[1].activations[1]", "twice"},
  });
}

TEST(Manifest, ConfigRules) {
  RunCases({
      {"both configs and table", [](json& j) { j["kernels"][1]["config_table"] = "t.json"; }, "kernels[1].configs",
       "config_table"},
      {"neither configs nor table", [](json& j) { j["kernels"][0].erase("config_table"); }, "kernels[0].config_table",
       "configs"},
      {"configs empty", [](json& j) { j["kernels"][1]["configs"] = json::array(); }, "kernels[1].configs", "empty"},
      {"configs an object", [](json& j) { j["kernels"][1]["configs"] = Valid()["kernels"][1]["configs"][0]; },
       "kernels[1].configs", "array"},
      {"config not an object", [](json& j) { j["kernels"][1]["configs"][1] = 16; }, "kernels[1].configs[1]", "object"},
      {"config without BLOCK_SIZE_K", [](json& j) { j["kernels"][1]["configs"][1].erase("BLOCK_SIZE_K"); },
       "kernels[1].configs[1].BLOCK_SIZE_K", "missing"},
      {"BLOCK_SIZE_M zero", [](json& j) { j["kernels"][1]["configs"][0]["BLOCK_SIZE_M"] = 0; },
       "kernels[1].configs[0].BLOCK_SIZE_M", "positive integer"},
      {"BLOCK_SIZE_M negative", [](json& j) { j["kernels"][1]["configs"][0]["BLOCK_SIZE_M"] = -16; },
       "kernels[1].configs[0].BLOCK_SIZE_M", "positive integer"},
      {"BLOCK_SIZE_N float", [](json& j) { j["kernels"][1]["configs"][0]["BLOCK_SIZE_N"] = 64.0; },
       "kernels[1].configs[0].BLOCK_SIZE_N", "positive integer"},
      {"BLOCK_SIZE_N string", [](json& j) { j["kernels"][1]["configs"][0]["BLOCK_SIZE_N"] = "64"; },
       "kernels[1].configs[0].BLOCK_SIZE_N", "positive integer"},
      // Checked as a job's table entry is: the planner could not plan with these.
      {"BLOCK_SIZE_M too large", [](json& j) { j["kernels"][1]["configs"][0]["BLOCK_SIZE_M"] = 8192; },
       "kernels[1].configs[0]", "BLOCK_SIZE_M must be an integer in [1, 4096]"},
      {"num_warps a string", [](json& j) { j["kernels"][1]["configs"][1]["num_warps"] = "4"; },
       "kernels[1].configs[1]", "num_warps must be an integer"},
      {"4097 configs",
       [](json& j) {
         json& c = j["kernels"][1]["configs"];
         while (c.size() < 4097) c.push_back(c[0]);
       },
       "kernels[1].configs", "4097 elements, more than 4096"},
      {"table absolute", [](json& j) { j["kernels"][0]["config_table"] = "/etc/t.json"; }, "kernels[0].config_table",
       "absolute"},
      {"table dot-dot", [](json& j) { j["kernels"][0]["config_table"] = "configs/../../t.json"; },
       "kernels[0].config_table", "'..'"},
      {"table a directory", [](json& j) { j["kernels"][0]["config_table"] = "configs/"; }, "kernels[0].config_table",
       "file"},
      {"table dot", [](json& j) { j["kernels"][0]["config_table"] = "."; }, "kernels[0].config_table", "file"},
      {"table empty", [](json& j) { j["kernels"][0]["config_table"] = ""; }, "kernels[0].config_table", "1..1024"},
      {"table long", [](json& j) { j["kernels"][0]["config_table"] = std::string(1025, 't'); },
       "kernels[0].config_table", "1..1024"},
      {"table NUL", [](json& j) { j["kernels"][0]["config_table"] = std::string("t\0.json", 7); },
       "kernels[0].config_table", "control"},
      {"table a number", [](json& j) { j["kernels"][0]["config_table"] = 1; }, "kernels[0].config_table", "string"},
  });
}

TEST(Manifest, TextRules) {
  ExpectRejected("{\"format\": ", "not valid JSON", "line 1", "truncated");
  ExpectRejected("", "not valid JSON", "", "empty");
  ExpectRejected(Valid().dump() + " x", "not valid JSON", "", "trailing garbage");
  ExpectRejected("[]", "(top level)", "object", "array");
  ExpectRejected("\"mxval\"", "(top level)", "object", "string");
  // A repeated key is refused, not resolved to its last value.
  std::string text = Valid().dump();
  const std::string entry = "\"entry\":\"naive:Kernel.run\"";
  ASSERT_TRUE(absl::StrContains(text, entry));
  text.replace(text.find(entry), entry.size(), entry + ",\"entry\":\"naive:other\"");
  ExpectRejected(text, "kernels[1].entry", "twice", "repeated kernel key");
  text = Valid().dump();
  text.replace(text.find("{"), 1, "{\"name\":\"x\",");
  ExpectRejected(text, "name", "twice", "repeated top-level key");
  // Keys may repeat across objects.
  ASSERT_TRUE(ParseManifest(Valid().dump()).ok());
  // Nesting is bounded (in a config, which is otherwise free-form).
  json j = Valid();
  json deep = 1;
  for (int i = 0; i < 40; ++i) deep = json::array({deep});
  j["kernels"][1]["configs"][0]["deep"] = deep;
  const absl::Status deep_st = ParseManifest(j.dump()).status();
  EXPECT_TRUE(absl::IsInvalidArgument(deep_st)) << deep_st;
  EXPECT_TRUE(absl::StartsWith(deep_st.message(), "mxval_library.json: kernels[1].configs[0].deep[0][0]")) << deep_st;
  EXPECT_TRUE(absl::StrContains(deep_st.message(), "nested deeper than 32 levels")) << deep_st;
  // Size.
  j = Valid();
  j["kernels"][1]["configs"][0]["pad"] = std::string(kMaxManifestBytes, ' ');
  const absl::Status big = ParseManifest(j.dump()).status();
  EXPECT_TRUE(absl::IsInvalidArgument(big)) << big;
  EXPECT_TRUE(absl::StrContains(big.message(), "more than 1048576")) << big;
}

class LoadManifestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/manifest_test_XXXXXX";
    ASSERT_NE(mkdtemp(dir_.data()), nullptr);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void Write(const std::string& text) { std::ofstream(dir_ + "/mxval_library.json", std::ios::binary) << text; }
  std::string dir_;
};

TEST_F(LoadManifestTest, ReadsTheLibrarysManifest) {
  Write(Valid().dump(2));
  const absl::StatusOr<Manifest> m = LoadManifest(dir_);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->name, "pr_triton_kernels");
  EXPECT_EQ(m->kernels.size(), 2u);
  EXPECT_STREQ(kManifestFile, "mxval_library.json");
}

TEST_F(LoadManifestTest, MissingIsNotFound) {
  EXPECT_TRUE(absl::IsNotFound(LoadManifest(dir_).status()));
  EXPECT_TRUE(absl::IsNotFound(LoadManifest(dir_ + "/nowhere").status()));
}

TEST_F(LoadManifestTest, ErrorsNameTheFileAndField) {
  json j = Valid();
  j["kernels"][1]["entry"] = "nope";
  Write(j.dump());
  const absl::Status st = LoadManifest(dir_).status();
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_TRUE(absl::StartsWith(st.message(), dir_ + "/mxval_library.json: kernels[1].entry: ")) << st;
}

TEST_F(LoadManifestTest, RefusesSymlinksNonFilesAndLargeFiles) {
  const std::string real = dir_ + "/real.json";
  std::ofstream(real) << Valid().dump();
  ASSERT_EQ(symlink(real.c_str(), (dir_ + "/mxval_library.json").c_str()), 0);
  EXPECT_TRUE(absl::IsInvalidArgument(LoadManifest(dir_).status())) << LoadManifest(dir_).status();
  ASSERT_EQ(unlink((dir_ + "/mxval_library.json").c_str()), 0);

  ASSERT_EQ(mkdir((dir_ + "/mxval_library.json").c_str(), 0755), 0);
  EXPECT_TRUE(absl::IsInvalidArgument(LoadManifest(dir_).status())) << LoadManifest(dir_).status();
  ASSERT_EQ(rmdir((dir_ + "/mxval_library.json").c_str()), 0);

  ASSERT_EQ(mkfifo((dir_ + "/mxval_library.json").c_str(), 0600), 0);
  EXPECT_TRUE(absl::IsInvalidArgument(LoadManifest(dir_).status())) << LoadManifest(dir_).status();
  ASSERT_EQ(unlink((dir_ + "/mxval_library.json").c_str()), 0);

  Write(std::string(kMaxManifestBytes + 1, ' '));
  const absl::Status st = LoadManifest(dir_).status();
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "1048576")) << st;
}

}  // namespace
}  // namespace mxval::python
