#include "client/spec_file.h"

#include <iterator>

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

}  // namespace
}  // namespace mxval
