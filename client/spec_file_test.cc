#include "client/spec_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <thread>

#include "mxval/example_specs.h"

#include "gtest/gtest.h"
#include "service/coordinator/job_planner.h"

namespace mxval {
namespace {

TEST(SpecFile, YamlAndJsonGiveTheSameSpec) {
  const std::string yaml = R"(
name: "glm5 retune"
presets: [glm5-tp4]
mValues: [1, 64, 1024]
activations: ACTIVATIONS_MXFP4_EVEN
inputs:
  xGenerator: heavy-tail
  seed: 42
tolerance: {atol: 1.0e-5, rtol: 0.016}
candidateTable:
  name: pr-1234
  json: '{"ops": {}}'
pullRequest:
  changedFiles:
    - aiter/configs/gfx950-BATCHED_GEMM-A16WFP4.json
reuseResults: true
)";
  auto y = ParseJobSpec(yaml, true);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->name(), "glm5 retune");
  ASSERT_EQ(y->m_values_size(), 3);
  EXPECT_EQ(y->m_values(2), 1024);
  EXPECT_EQ(y->activations(), v1::ACTIVATIONS_MXFP4_EVEN);
  EXPECT_EQ(y->inputs().seed(), 42u);
  EXPECT_DOUBLE_EQ(y->tolerance().rtol(), 0.016);
  EXPECT_EQ(y->candidate_table().json(), "{\"ops\": {}}");
  EXPECT_EQ(y->pull_request().changed_files(0), "aiter/configs/gfx950-BATCHED_GEMM-A16WFP4.json");
  EXPECT_TRUE(y->reuse_results());
  auto j = ParseJobSpec(R"({"name": "glm5 retune", "presets": ["glm5-tp4"], "mValues": [1, 64, 1024],
      "activations": "ACTIVATIONS_MXFP4_EVEN", "inputs": {"xGenerator": "heavy-tail", "seed": 42},
      "tolerance": {"atol": 1e-5, "rtol": 0.016}, "candidateTable": {"name": "pr-1234", "json": "{\"ops\": {}}"},
      "pullRequest": {"changedFiles": ["aiter/configs/gfx950-BATCHED_GEMM-A16WFP4.json"]}, "reuseResults": true})",
                        false);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(y->SerializeAsString(), j->SerializeAsString());
}

// The library pr_library.yaml names, as an admin would have registered it.
coordinator::LibraryMap ExampleLibraries() {
  v1::KernelLibraryRegistration reg;
  reg.set_name("my-kernels");
  reg.set_build_id("pr-123-8e41b07");
  reg.set_sha256(std::string(64, 'a'));
  return {{"my-kernels", reg}};
}

// The job-spec reference's examples (docs/job_spec.md) parse and plan as
// documented: every one is a job the coordinator accepts.
TEST(SpecFile, DocumentedExamplesParseAndPlan) {
  const coordinator::LibraryMap libraries = ExampleLibraries();
  for (const char* name : {"retune", "pr_library", "custom_shapes", "strided_x"}) {
    SCOPED_TRACE(name);
    auto spec = LoadJobSpec(std::string(MXVAL_SOURCE_DIR) + "/docs/specs/" + name + ".yaml");
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto plan = coordinator::PlanJob(*spec, coordinator::PlannerOptions::WithBuiltinTables(), libraries);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_FALSE(plan->tasks.empty());
  }
}

// `mxval submit --example-spec NAME` prints these: each plans as is.
TEST(SpecFile, EmbeddedExamplesAreTheDocumentedOnes) {
  const coordinator::LibraryMap libraries = ExampleLibraries();
  ASSERT_EQ(std::size(kExampleSpecs), 4u);
  for (const ExampleSpec& e : kExampleSpecs) {
    SCOPED_TRACE(e.name);
    auto spec = ParseJobSpec(e.yaml, true);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_TRUE(coordinator::PlanJob(*spec, coordinator::PlannerOptions::WithBuiltinTables(), libraries).ok());
    EXPECT_NE(std::string(e.yaml).find("# "), std::string::npos) << "commented";
  }
}

TEST(SpecFile, ErrorsAreClear) {
  auto bad = ParseJobSpec("name: [unclosed\n", true);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("line"), std::string::npos) << bad.status();
  auto unknown = ParseJobSpec("nmae: typo\n", true);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("nmae"), std::string::npos) << unknown.status();
  EXPECT_FALSE(ParseJobSpec("mValues: [one]\n", true).ok());
  EXPECT_FALSE(ParseJobSpec("a: 1\na: 2\n", true).ok());  // duplicate key
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += "[";
  EXPECT_FALSE(YamlToJson(deep).ok());  // unterminated and too deep: an error, not a crash
  std::string nested = "x";
  for (int i = 0; i < 80; ++i) nested = "[" + nested + "]";
  auto too_deep = YamlToJson(nested);
  ASSERT_FALSE(too_deep.ok());
  EXPECT_NE(too_deep.status().message().find("deeper"), std::string::npos);
  EXPECT_EQ(LoadJobSpec("/nonexistent.yaml").status().code(), absl::StatusCode::kNotFound);
}

TEST(SpecFile, AliasesExpandWithinTheirBound) {
  auto j = YamlToJson("base: &b {atol: 1.0e-5, tags: [x, y]}\ncopy: *b\n&k key: 1\nother: {*k : 2}\n");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(*j, R"({"base":{"atol":1e-05,"tags":["x","y"]},"copy":{"atol":1e-05,"tags":["x","y"]},"key":1,"other":{"key":2}})");
  auto undefined = YamlToJson("a: *nowhere\n");
  ASSERT_FALSE(undefined.ok());
  EXPECT_NE(undefined.status().message().find("*nowhere"), std::string::npos) << undefined.status();
  EXPECT_FALSE(YamlToJson("a: &s [1, *s]\n").ok());  // an anchor is not visible inside itself
}

// The ten-line "billion laughs": 10^9 nodes once expanded. Refused by the
// alias count after about kMaxYamlAliasNodes nodes of work.
TEST(SpecFile, AliasBombIsRefused) {
  std::string bomb = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (char c = 'b'; c <= 'i'; ++c) {
    const char p = static_cast<char>(c - 1);
    bomb += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 10; ++i) bomb += std::string(i ? ", *" : "*") + p;
    bomb += "]\n";
  }
  auto j = YamlToJson(bomb);
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(j.status().message().find("aliases expand to more than 100000 nodes"), std::string::npos) << j.status();
  auto spec = ParseJobSpec(bomb, true);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
}

// 100k levels in flow and in block style: refused at level kMaxYamlDepth,
// before the parser has looked at the rest.
TEST(SpecFile, DeepNestingIsRefusedAtTheDepthBound) {
  const int n = 100000;
  for (const std::string& deep : {std::string(n, '[') + "x" + std::string(n, ']'),
                                  [&] { std::string s; for (int i = 0; i < n; ++i) s += "- "; return s + "x\n"; }(),
                                  [&] { std::string s; for (int i = 0; i < n; ++i) s += "{a: "; return s + "x" + std::string(n, '}'); }()}) {
    auto j = YamlToJson(deep);
    ASSERT_FALSE(j.ok());
    EXPECT_NE(j.status().message().find("nested deeper than 64 levels"), std::string::npos) << j.status();
  }
  std::string ok = "x";
  for (int i = 0; i < kMaxYamlDepth; ++i) ok = "[" + ok + "]";
  EXPECT_TRUE(YamlToJson(ok).ok());
}

TEST(SpecFile, SyntaxByNameElseByText) {
  EXPECT_TRUE(IsYamlConfig("a.yaml", "{}"));
  EXPECT_TRUE(IsYamlConfig("a.yml", "{}"));
  EXPECT_FALSE(IsYamlConfig("a.json", "name: x"));
  EXPECT_FALSE(IsYamlConfig("/dev/fd/63", "  \n{\"name\": \"x\"}"));
  EXPECT_TRUE(IsYamlConfig("/dev/fd/63", "# a comment\nname: x\n"));
}

std::string Tmp(const std::string& name) {
  return ::testing::TempDir() + "/mxval_spec_" + std::to_string(getpid()) + "_" + name;
}

TEST(SpecFile, SpecThatIsADeviceIsRefusedAndAPipeIsRead) {
  const std::string link = Tmp("zero.yaml");
  ::unlink(link.c_str());
  ASSERT_EQ(::symlink("/dev/zero", link.c_str()), 0);
  auto z = LoadJobSpec(link);
  EXPECT_EQ(z.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(z.status().message().find("character device"), std::string::npos) << z.status();

  std::ofstream(Tmp("big.json")) << std::string(kMaxSpecFileBytes + 1, ' ');
  auto big = LoadJobSpec(Tmp("big.json"));
  EXPECT_NE(big.status().message().find("larger than 4 MiB"), std::string::npos) << big.status();

  const std::string fifo = Tmp("fifo");  // no extension, as /dev/fd/63: YAML by its text
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] {
    const int fd = ::open(fifo.c_str(), O_WRONLY);
    const std::string text = "name: piped\npresets: [glm5-tp4]\n";
    if (fd >= 0) {
      (void)!::write(fd, text.data(), text.size());
      ::close(fd);
    }
  });
  auto piped = LoadJobSpec(fifo);
  writer.join();
  ASSERT_TRUE(piped.ok()) << piped.status();
  EXPECT_EQ(piped->name(), "piped");
}

}  // namespace
}  // namespace mxval
