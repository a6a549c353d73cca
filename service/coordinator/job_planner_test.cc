#include "service/coordinator/job_planner.h"

#include <functional>
#include <set>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "service/coordinator/request_bounds.h"

namespace mxval::coordinator {
namespace {

v1::JobSpec GoodSpec() {
  v1::JobSpec s;
  s.set_name("glm5 retune");
  s.add_presets("glm5-tp4");
  for (int64_t m : {1, 64, 1024}) s.add_m_values(m);
  s.set_no_layout_probes(true);  // probes: PresetsAddLayoutProbesAndSpecialValues
  return s;
}

void ExpectInvalid(const v1::JobSpec& spec, const std::string& field, const PlannerOptions& o) {
  auto plan = PlanJob(spec, o);
  ASSERT_FALSE(plan.ok()) << "expected an error naming " << field;
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << plan.status();
  EXPECT_EQ(plan.status().message().rfind(field, 0), 0u) << plan.status() << " should start with " << field;
}

TEST(JobPlanner, ExpandsPresetsByMAndResolvesDispatchEntries) {
  const PlannerOptions o = PlannerOptions::WithBuiltinTables();
  auto plan = PlanJob(GoodSpec(), o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->tasks.size(), 6u);  // (kup, vup) x 3 M on cpu
  const v1::TaskSpec& t = plan->tasks[0].spec;
  EXPECT_EQ(t.shape().op(), v1::OP_KUP);
  EXPECT_EQ(t.shape().k(), 192);
  EXPECT_TRUE(t.shape().strided_x());
  EXPECT_EQ(t.shape().layout(), v1::OUTPUT_LAYOUT_HEAD_MAJOR);
  EXPECT_EQ(t.m(), 1);
  EXPECT_EQ(t.arch(), "cpu");
  EXPECT_EQ(t.baseline_kernel().library(), "mxval-builtin-cpu");
  EXPECT_EQ(t.baseline_kernel().kernel(), "a16wfp4_cpu");  // the name the CPU library exports
  EXPECT_EQ(t.baseline_entry(), "kup/N=512,K=192/M_LEQ_16");
  EXPECT_EQ(t.baseline_config().block_k(), 64);
  EXPECT_EQ(t.candidate_entry(), t.baseline_entry());  // no candidate table: same
  EXPECT_EQ(t.repetitions(), 10);
  EXPECT_DOUBLE_EQ(t.tolerance().rtol(), 1.6e-2);
  EXPECT_EQ(t.inputs().x_generator(), "normal");
  EXPECT_EQ(plan->tasks[3].spec.shape().layout(), v1::OUTPUT_LAYOUT_BATCH_MAJOR);  // vup
}

TEST(JobPlanner, CandidateTableAndOverride) {
  const PlannerOptions o = PlannerOptions::WithBuiltinTables();
  v1::JobSpec s = GoodSpec();
  s.mutable_candidate_table()->set_json(R"({"ops": {"kup": {"default": {"any": {"BLOCK_SIZE_M": 32,
      "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128}}}, "vup": {"default": {"any": {"BLOCK_SIZE_M": 32,
      "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "NUM_KSPLIT": 2}}}}})");
  auto plan = PlanJob(s, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->tasks[0].spec.candidate_entry(), "kup/default/any");
  EXPECT_EQ(plan->tasks[0].spec.candidate_config().block_k(), 128);
  EXPECT_NE(plan->tasks[0].dedup_key, PlanJob(GoodSpec(), o)->tasks[0].dedup_key);
  s.mutable_candidate_override()->set_block_m(16);
  s.mutable_candidate_override()->set_block_n(64);
  s.mutable_candidate_override()->set_block_k(64);
  s.mutable_candidate_override()->set_ksplit(1);
  plan = PlanJob(s, o);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->tasks[5].spec.candidate_entry(), "override");
  EXPECT_EQ(plan->tasks[5].spec.candidate_config().block_m(), 16);
}

TEST(JobPlanner, DedupKeysAreStableAndDistinguishWork) {
  const PlannerOptions o = PlannerOptions::WithBuiltinTables();
  auto a = PlanJob(GoodSpec(), o), b = PlanJob(GoodSpec(), o);
  ASSERT_TRUE(a.ok() && b.ok());
  std::set<std::string> keys;
  for (size_t i = 0; i < a->tasks.size(); ++i) {
    EXPECT_EQ(a->tasks[i].dedup_key, b->tasks[i].dedup_key);
    keys.insert(a->tasks[i].dedup_key);
  }
  EXPECT_EQ(keys.size(), a->tasks.size());
  v1::JobSpec s = GoodSpec();
  s.mutable_inputs()->set_seed(2);
  EXPECT_NE(PlanJob(s, o)->tasks[0].dedup_key, a->tasks[0].dedup_key);
  // Defaults spelled out give the same work as defaults left empty.
  s = GoodSpec();
  s.mutable_inputs()->set_seed(1);
  s.mutable_inputs()->set_x_generator("normal");
  EXPECT_EQ(PlanJob(s, o)->tasks[0].dedup_key, a->tasks[0].dedup_key);
  // The launch mode: plain spelled out is the default; PDL is different work.
  EXPECT_EQ(a->tasks[0].spec.launch(), v1::LAUNCH_MODE_PLAIN);
  s = GoodSpec();
  s.set_launch(v1::LAUNCH_MODE_PLAIN);
  EXPECT_EQ(PlanJob(s, o)->tasks[0].dedup_key, a->tasks[0].dedup_key);
  s.set_launch(v1::LAUNCH_MODE_PDL);
  auto pdl = PlanJob(s, o);
  ASSERT_TRUE(pdl.ok()) << pdl.status();
  EXPECT_NE(pdl->tasks[0].dedup_key, a->tasks[0].dedup_key);
  for (const PlannedTask& t : pdl->tasks) {
    EXPECT_EQ(t.spec.launch(), v1::LAUNCH_MODE_PDL);
    EXPECT_EQ(t.spec.candidate_launch(), v1::LAUNCH_MODE_PDL);  // unset: the same as launch
  }
  // Plain against PDL is its own work, and so is PDL against plain.
  s = GoodSpec();
  s.set_candidate_launch(v1::LAUNCH_MODE_PDL);
  auto ab = PlanJob(s, o);
  ASSERT_TRUE(ab.ok()) << ab.status();
  EXPECT_EQ(ab->tasks[0].spec.launch(), v1::LAUNCH_MODE_PLAIN);
  EXPECT_EQ(ab->tasks[0].spec.candidate_launch(), v1::LAUNCH_MODE_PDL);
  s.set_launch(v1::LAUNCH_MODE_PDL);
  s.set_candidate_launch(v1::LAUNCH_MODE_PLAIN);
  auto ba = PlanJob(s, o);
  ASSERT_TRUE(ba.ok()) << ba.status();
  std::set<std::string> distinct{a->tasks[0].dedup_key, pdl->tasks[0].dedup_key, ab->tasks[0].dedup_key,
                                 ba->tasks[0].dedup_key};
  EXPECT_EQ(distinct.size(), 4u);
  // PDL on both sides spelled out is the same work as PDL for the job.
  s.set_candidate_launch(v1::LAUNCH_MODE_PDL);
  EXPECT_EQ(PlanJob(s, o)->tasks[0].dedup_key, pdl->tasks[0].dedup_key);
}

LibraryMap Registered(const std::string& name, const std::string& build, const std::string& sha) {
  v1::KernelLibraryRegistration r;
  r.set_name(name);
  r.set_build_id(build);
  r.set_sha256(sha);
  return {{name, r}};
}

TEST(JobPlanner, MultipleArchsAndExternalLibraries) {
  const PlannerOptions o = PlannerOptions::WithBuiltinTables();
  const std::string sha(64, 'a');
  const LibraryMap libs = Registered("pr-1234-kernels", "abc123", sha);
  v1::JobSpec s = GoodSpec();
  s.add_target_archs("cpu");
  s.add_target_archs("sm_90a");
  s.mutable_candidate_kernel()->set_library("pr-1234-kernels");
  s.mutable_candidate_kernel()->set_build_id("abc123");
  s.mutable_candidate_kernel()->set_sha256(std::string(64, 'f'));  // a client's digest is ignored
  auto plan = PlanJob(s, o, libs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->tasks.size(), 12u);
  EXPECT_EQ(plan->tasks[6].spec.arch(), "sm_90a");
  EXPECT_EQ(plan->tasks[6].spec.baseline_kernel().library(), "mxval-builtin-cuda");
  EXPECT_EQ(plan->tasks[6].spec.baseline_kernel().kernel(), "a16wfp4_decode");  // the table's small-M bucket
  EXPECT_EQ(plan->tasks[6].spec.baseline_kernel().sha256(), "");
  EXPECT_EQ(plan->tasks[6].spec.candidate_kernel().library(), "pr-1234-kernels");
  EXPECT_EQ(plan->tasks[6].spec.candidate_kernel().sha256(), sha);  // the registered digest
  // A re-registered build with another digest is different work (no result reuse across it).
  auto again = PlanJob(s, o, Registered("pr-1234-kernels", "abc123", std::string(64, 'b')));
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->tasks[6].dedup_key, plan->tasks[6].dedup_key);
  // gfx90a has no built-in table: the job must bring one.
  s.add_target_archs("gfx90a");
  auto no_table = PlanJob(s, o, libs);
  EXPECT_TRUE(absl::IsInvalidArgument(no_table.status()));
  EXPECT_NE(no_table.status().message().find("no built-in table for arch 'gfx90a'"), std::string::npos)
      << no_table.status();
}

TEST(JobPlanner, AmdArchsPlanWithTheBuiltinTables) {
  // gfx942 / gfx950 have built-in (untuned) tables naming a16wfp4_tc of the
  // HIP library (kernels/configs/gfx942.json, gfx950.json).
  const PlannerOptions o = PlannerOptions::WithBuiltinTables();
  v1::JobSpec s = GoodSpec();
  s.add_target_archs("gfx942");
  s.add_target_archs("gfx950");
  auto plan = PlanJob(s, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_FALSE(plan->tasks.empty());
  std::set<std::string> archs;
  for (const auto& t : plan->tasks) {
    archs.insert(t.spec.arch());
    EXPECT_EQ(t.spec.baseline_kernel().library(), "mxval-builtin-hip");
    EXPECT_EQ(t.spec.baseline_kernel().kernel(), "a16wfp4_tc");
  }
  EXPECT_EQ(archs, (std::set<std::string>{"gfx942", "gfx950"}));
}

TEST(JobPlanner, TensorElementAndDeviceMemoryCapsNameTheShape) {
  PlannerOptions o = PlannerOptions::WithBuiltinTables();
  v1::JobSpec s;
  s.add_m_values(1);
  s.add_m_values(8192);
  v1::Shape* sh = s.add_shapes();
  sh->set_op(v1::OP_KUP);
  sh->set_b(128);
  sh->set_n(512);
  sh->set_k(192);
  ASSERT_TRUE(PlanJob(s, o).ok());
  o.max_tensor_elements = int64_t{128} * 8192 * 512 - 1;  // y at M=8192 is one element over
  auto big = PlanJob(s, o);
  EXPECT_TRUE(absl::IsInvalidArgument(big.status()));
  EXPECT_EQ(big.status().message().rfind("spec.shapes[0] at m_values[1]", 0), 0u) << big.status();
  EXPECT_NE(big.status().message().find("elements, over the cap"), std::string::npos);
  // Device memory: only GPU archs are checked against it.
  o = PlannerOptions::WithBuiltinTables();
  o.max_device_bytes_per_task = 64 << 20;
  ASSERT_TRUE(PlanJob(s, o).ok());  // cpu
  s.add_target_archs("sm_90a");
  auto dev = PlanJob(s, o);
  EXPECT_TRUE(absl::IsInvalidArgument(dev.status()));
  EXPECT_NE(dev.status().message().find("of device memory per task on sm_90a"), std::string::npos) << dev.status();
}

TEST(JobPlanner, ExternalLibrariesMustBeRegisteredAtTheirBuild) {
  const PlannerOptions o = PlannerOptions::WithBuiltinTables();
  v1::JobSpec s = GoodSpec();
  s.mutable_candidate_kernel()->set_library("pr-1234-kernels");
  s.mutable_candidate_kernel()->set_build_id("abc123");
  auto unregistered = PlanJob(s, o);
  EXPECT_TRUE(absl::IsInvalidArgument(unregistered.status()));
  EXPECT_NE(unregistered.status().message().find("spec.candidate_kernel.library"), std::string::npos);
  EXPECT_NE(unregistered.status().message().find("registered by an admin"), std::string::npos);
  auto other_build = PlanJob(s, o, Registered("pr-1234-kernels", "def456", std::string(64, 'a')));
  EXPECT_TRUE(absl::IsInvalidArgument(other_build.status()));
  EXPECT_NE(other_build.status().message().find("spec.candidate_kernel.build_id"), std::string::npos);
  s.mutable_candidate_kernel()->clear_build_id();
  auto no_build = PlanJob(s, o, Registered("pr-1234-kernels", "abc123", std::string(64, 'a')));
  EXPECT_NE(no_build.status().message().find("spec.candidate_kernel.build_id"), std::string::npos);
  // The baseline is checked too, and names its own field.
  v1::JobSpec b = GoodSpec();
  b.mutable_baseline_kernel()->set_library("../../etc/evil");
  b.mutable_baseline_kernel()->set_build_id("x");
  auto evil = PlanJob(b, o);
  EXPECT_NE(evil.status().message().find("spec.baseline_kernel.library"), std::string::npos);
}

// A shared object registered with its declaration (read by register-library
// in a child): kernels, archs and activation modes it does not declare are
// refused at submit; a library with one kernel fills an empty kernel name.
TEST(JobPlanner, DeclaredKernelsArePlannedAgainst) {
  const PlannerOptions o = PlannerOptions::WithBuiltinTables();
  LibraryMap libs = Registered("pr-1234-kernels", "abc123", std::string(64, 'a'));
  libs["pr-1234-kernels"].set_declared_json(
      R"({"build_id": "abc123", "kernels": [{"name": "my_gemm", "archs": ["cpu"], "activations": ["bf16"]}]})");
  v1::JobSpec s = GoodSpec();
  s.mutable_candidate_kernel()->set_library("pr-1234-kernels");
  s.mutable_candidate_kernel()->set_build_id("abc123");
  auto plan = PlanJob(s, o, libs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->tasks[0].spec.candidate_kernel().kernel(), "my_gemm") << "the library's only kernel";
  s.mutable_candidate_kernel()->set_kernel("a16wfp4_cpu");
  auto missing = PlanJob(s, o, libs);
  EXPECT_TRUE(absl::IsInvalidArgument(missing.status()));
  EXPECT_NE(missing.status().message().find("spec.candidate_kernel.kernel"), std::string::npos) << missing.status();
  EXPECT_NE(missing.status().message().find("my_gemm"), std::string::npos) << "names what it declares";
  s.mutable_candidate_kernel()->set_kernel("my_gemm");
  s.set_activations(v1::ACTIVATIONS_MXFP4_EVEN);
  EXPECT_NE(PlanJob(s, o, libs).status().message().find("spec.activations"), std::string::npos);
  s.set_activations(v1::ACTIVATIONS_BF16);
  s.clear_target_archs();
  s.add_target_archs("sm_90a");
  EXPECT_NE(PlanJob(s, o, libs).status().message().find("spec.target_archs[0]"), std::string::npos);
}

// The default sweeps check the ABI's promises too: each preset shape once
// more at the smallest M with x_stride_k = 2, and special values in every
// task's inputs unless the job opts out.
TEST(JobPlanner, PresetsAddLayoutProbesAndSpecialValues) {
  const PlannerOptions o = PlannerOptions::WithBuiltinTables();
  v1::JobSpec s = GoodSpec();
  s.set_no_layout_probes(false);
  s.clear_m_values();
  for (int64_t m : {64, 4, 1024}) s.add_m_values(m);
  auto plan = PlanJob(s, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->tasks.size(), 8u);  // (kup, vup) x 3 M, then a K-strided probe of each at M = 4
  std::set<std::string> keys;
  for (size_t i = 0; i < plan->tasks.size(); ++i) {
    const v1::TaskSpec& t = plan->tasks[i].spec;
    keys.insert(plan->tasks[i].dedup_key);
    EXPECT_EQ(t.inputs().special_values(), "mixed");
    EXPECT_EQ(t.shape().x_layout(), i < 6 ? v1::X_LAYOUT_UNSPECIFIED : v1::X_LAYOUT_K_STRIDED) << i;
    EXPECT_EQ(t.shape().layout_probe(), i >= 6);
    if (i >= 6) {
      EXPECT_EQ(t.m(), 4);
    }
  }
  EXPECT_EQ(keys.size(), 8u);
  EXPECT_TRUE(plan->tasks[6].spec.shape().strided_x()) << "the kup probe keeps its row pitch";
  EXPECT_EQ(plan->tasks[7].spec.shape().op(), v1::OP_VUP);

  // A probe never makes a job invalid: over the task limit they are left out.
  PlannerOptions tight = o;
  tight.max_tasks_per_job = 6;
  auto capped = PlanJob(s, tight);
  ASSERT_TRUE(capped.ok()) << capped.status();
  EXPECT_EQ(capped->tasks.size(), 6u);

  s.set_no_layout_probes(true);
  s.mutable_inputs()->set_special_values("none");
  auto plain = PlanJob(s, o);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_EQ(plain->tasks.size(), 6u);
  EXPECT_EQ(plain->tasks[0].spec.inputs().special_values(), "none");
  EXPECT_NE(plain->tasks[0].dedup_key, plan->tasks[0].dedup_key);

  // Explicit shapes get no probes; their own x layout is kept and validated.
  v1::JobSpec e;
  e.add_m_values(8);
  v1::Shape* sh = e.add_shapes();
  sh->set_op(v1::OP_VUP), sh->set_b(2), sh->set_n(64), sh->set_k(256);
  sh->set_x_layout(v1::X_LAYOUT_M_MAJOR);
  auto one = PlanJob(e, o);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->tasks.size(), 1u);
  EXPECT_EQ(one->tasks[0].spec.shape().x_layout(), v1::X_LAYOUT_M_MAJOR);
  sh->set_strided_x(true);
  ExpectInvalid(e, "spec.shapes[0].x_layout", o);
  sh->set_strided_x(false);
  sh->set_x_layout(static_cast<v1::XLayout>(9));
  ExpectInvalid(e, "spec.shapes[0].x_layout", o);
  sh->set_x_layout(v1::X_LAYOUT_K_STRIDED);
  e.mutable_inputs()->set_special_values("some");
  ExpectInvalid(e, "spec.inputs.special_values", o);
}

// A library that declares its configs runs with them: a job's table entry
// it does not declare is refused at submit naming the table; a built-in
// table's entry it does not declare is left to the worker, which runs the
// library's own first config that can_implement accepts.
TEST(JobPlanner, DeclaredConfigsAreHonoured) {
  const PlannerOptions o = PlannerOptions::WithBuiltinTables();
  LibraryMap libs = Registered("pr-1234-kernels", "abc123", std::string(64, 'a'));
  libs["pr-1234-kernels"].set_declared_json(R"({"build_id": "abc123", "kernels": [{"name": "my_gemm", "archs": ["cpu"],
      "activations": ["bf16"], "configs": [{"BLOCK_SIZE_M": 12, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64,
      "NUM_KSPLIT": 1, "num_stages": 2, "num_warps": 4}]}]})");
  v1::JobSpec s = GoodSpec();
  s.set_no_layout_probes(true);
  s.mutable_candidate_kernel()->set_library("pr-1234-kernels");
  s.mutable_candidate_kernel()->set_build_id("abc123");
  auto plan = PlanJob(s, o, libs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // kup M=1 uses BM12 BN64 BK64 KS1 in the built-in table: declared, kept.
  const v1::TaskSpec& kup1 = plan->tasks[0].spec;
  EXPECT_EQ(kup1.candidate_config().block_m(), 12);
  EXPECT_EQ(kup1.candidate_entry(), "kup/N=512,K=192/M_LEQ_16");
  // vup M=1 (BM6 BN32 BK256 KS2): not declared, the library's own.
  const v1::TaskSpec& vup1 = plan->tasks[3].spec;
  EXPECT_EQ(vup1.candidate_config().block_m(), 0);
  EXPECT_EQ(vup1.candidate_entry(), "own configs of pr-1234-kernels");
  EXPECT_EQ(vup1.baseline_config().block_m(), 6) << "the built-in side keeps its table";
  // A job's own table or override must stay within what it declares.
  s.mutable_candidate_override()->set_block_m(16);
  s.mutable_candidate_override()->set_block_n(64);
  s.mutable_candidate_override()->set_block_k(64);
  s.mutable_candidate_override()->set_ksplit(1);
  auto bad = PlanJob(s, o, libs);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_EQ(bad.status().message().rfind("spec.candidate_override", 0), 0u) << bad.status();
  s.clear_candidate_override();
  s.mutable_candidate_table()->set_json(R"({"M_LEQ_16": {"BLOCK_SIZE_M": 12, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64,
      "NUM_KSPLIT": 1}, "any": {"BLOCK_SIZE_M": 96, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "NUM_KSPLIT": 1}})");
  bad = PlanJob(s, o, libs);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_EQ(bad.status().message().rfind("spec.candidate_table", 0), 0u) << bad.status();
  EXPECT_NE(bad.status().message().find("entry 'any'"), std::string::npos) << "M=64 falls to 'any': " << bad.status();
}

// A declared split-K config matches the table's entry after split-K is
// fitted to K (the lookup lowers NUM_KSPLIT; the declaration is compared
// the same way).
TEST(JobPlanner, DeclaredConfigsMatchAfterSplitKFitsK) {
  const PlannerOptions o = PlannerOptions::WithBuiltinTables();
  LibraryMap libs = Registered("pr-9-kernels", "b9", std::string(64, 'b'));
  libs["pr-9-kernels"].set_declared_json(R"({"build_id": "b9", "kernels": [{"name": "k", "archs": ["cpu"],
      "activations": ["bf16"], "configs": [{"BLOCK_SIZE_M": 6, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 256,
      "NUM_KSPLIT": 2}]}]})");
  v1::JobSpec e;
  e.add_m_values(2);
  v1::Shape* sh = e.add_shapes();
  sh->set_op(v1::OP_VUP), sh->set_b(2), sh->set_n(64), sh->set_k(256);
  e.mutable_candidate_kernel()->set_library("pr-9-kernels");
  e.mutable_candidate_kernel()->set_build_id("b9");
  auto plan = PlanJob(e, o, libs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->tasks[0].spec.candidate_entry(), "vup/default/M_LEQ_4") << "declared: kept, not replaced";
  EXPECT_EQ(plan->tasks[0].spec.candidate_config().ksplit(), 1);
}

// NUM_KSPLIT past the number of K blocks is lowered at lookup, as AITER's
// get_splitk does, so a default bucket's split-K serves a small K.
TEST(JobPlanner, SplitKFitsSmallK) {
  const PlannerOptions o = PlannerOptions::WithBuiltinTables();
  v1::JobSpec e;
  e.add_m_values(1);
  v1::Shape* sh = e.add_shapes();
  sh->set_op(v1::OP_VUP), sh->set_b(2), sh->set_n(64), sh->set_k(192);
  auto plan = PlanJob(e, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->tasks[0].spec.baseline_entry(), "vup/default/M_LEQ_4");
  EXPECT_EQ(plan->tasks[0].spec.baseline_config().block_k(), 256);
  EXPECT_EQ(plan->tasks[0].spec.baseline_config().ksplit(), 1);
  sh->set_k(512);
  EXPECT_EQ(PlanJob(e, o)->tasks[0].spec.baseline_config().ksplit(), 2);
}

TEST(JobPlanner, RejectsBadSpecsNamingTheField) {
  const PlannerOptions o = PlannerOptions::WithBuiltinTables();
  v1::JobSpec s;
  s.add_m_values(1);
  ExpectInvalid(s, "spec.shapes", o);  // empty shapes
  auto shape = [](int64_t b, int64_t n, int64_t k) {
    v1::JobSpec j;
    j.add_m_values(4);
    v1::Shape* sh = j.add_shapes();
    sh->set_op(v1::OP_KUP);
    sh->set_b(b);
    sh->set_n(n);
    sh->set_k(k);
    return j;
  };
  ExpectInvalid(shape(16, 512, 100), "spec.shapes[0].k", o);  // K not a multiple of 32
  ExpectInvalid(shape(0, 512, 192), "spec.shapes[0].b", o);
  ExpectInvalid(shape(16, 0, 192), "spec.shapes[0].n", o);
  v1::JobSpec huge = shape(65535, 1 << 20, 1 << 20);  // absurd: over the memory cap
  ExpectInvalid(huge, "spec.shapes[0] at m_values[0]", o);
  v1::JobSpec noop = shape(16, 512, 192);
  noop.mutable_shapes(0)->set_op(v1::OP_UNSPECIFIED);
  ExpectInvalid(noop, "spec.shapes[0].op", o);
  s = GoodSpec();
  s.set_launch(static_cast<v1::LaunchMode>(7));
  ExpectInvalid(s, "spec.launch", o);
  s = GoodSpec();
  s.set_candidate_launch(static_cast<v1::LaunchMode>(-1));
  ExpectInvalid(s, "spec.candidate_launch", o);
  s = GoodSpec();
  s.mutable_baseline_kernel()->set_library("no-such-lib");
  ExpectInvalid(s, "spec.baseline_kernel.library", o);  // unknown kernel library
  s = GoodSpec();
  s.add_presets("llama-tp2");
  ExpectInvalid(s, "spec.presets[1]", o);
  s = GoodSpec();
  s.clear_m_values();
  ExpectInvalid(s, "spec.m_values", o);
  s = GoodSpec();
  s.add_m_values(0);
  ExpectInvalid(s, "spec.m_values[3]", o);
  s = GoodSpec();
  s.mutable_inputs()->set_x_generator("cauchy");
  ExpectInvalid(s, "spec.inputs.x_generator", o);
  s = GoodSpec();
  s.mutable_inputs()->set_x_generator("extreme-scales");  // a weight generator
  ExpectInvalid(s, "spec.inputs.x_generator", o);
  s = GoodSpec();
  s.mutable_tolerance()->set_rtol(-1);
  ExpectInvalid(s, "spec.tolerance.rtol", o);
  s = GoodSpec();
  s.set_repetitions(5000);
  ExpectInvalid(s, "spec.repetitions", o);
  s = GoodSpec();
  s.set_priority(101);
  ExpectInvalid(s, "spec.priority", o);
  s = GoodSpec();
  s.add_target_archs("sm_80");
  ExpectInvalid(s, "spec.target_archs[0]", o);
  s = GoodSpec();
  s.mutable_baseline_table()->set_json("{\"ops\": {}}");
  ExpectInvalid(s, "spec.baseline_table", o);
  s = GoodSpec();
  s.mutable_candidate_override()->set_block_m(0);
  ExpectInvalid(s, "spec.candidate_override.block_m", o);
  s = GoodSpec();
  s.mutable_deadline()->set_seconds(-5);
  ExpectInvalid(s, "spec.deadline", o);
}

TEST(JobPlanner, TooManyTasksIsResourceExhausted) {
  PlannerOptions o = PlannerOptions::WithBuiltinTables();
  o.max_tasks_per_job = 5;
  auto plan = PlanJob(GoodSpec(), o);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
}

// A registered Python kernel library (kernels/python/README.md) with one
// kernel and an AITER-format table.
LibraryMap RegisteredPython(const std::string& name, const std::string& build) {
  v1::KernelLibraryRegistration r;
  r.set_name(name);
  r.set_build_id(build);
  r.set_sha256(std::string(64, 'c'));
  r.set_format(v1::LIBRARY_FORMAT_PYTHON);
  r.set_manifest_json(R"({"format": "mxval-python-library-v1", "name": ")" + name + R"(", "build_id": ")" + build +
                      R"(", "kernels": [{"name": "bmm", "entry": "pkg.bmm:run", "archs": ["cpu", "sm_90a"],
                      "activations": ["mxfp4-even"], "config_table": "configs/bmm.json"}]})");
  (*r.mutable_kernel_tables())["bmm"] = R"({
      "M_LEQ_16": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "NUM_KSPLIT": 2, "waves_per_eu": 2},
      "any": {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "cache_modifier": ".cg"}})";
  return {{name, r}};
}

TEST(JobPlanner, PythonLibrariesPlanWithTheirManifestAndTable) {
  const PlannerOptions o = PlannerOptions::WithBuiltinTables();
  LibraryMap libs = RegisteredPython("triton_pr", "pr");
  libs.merge(RegisteredPython("triton_main", "main"));
  v1::JobSpec s = GoodSpec();  // glm5-tp4, M 1, 64, 1024 on cpu
  s.set_activations(v1::ACTIVATIONS_MXFP4_EVEN);
  s.mutable_baseline_kernel()->set_library("triton_main");
  s.mutable_baseline_kernel()->set_build_id("main");
  s.mutable_candidate_kernel()->set_library("triton_pr");
  s.mutable_candidate_kernel()->set_build_id("pr");
  auto plan = PlanJob(s, o, libs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->tasks.size(), 6u);
  const v1::TaskSpec& t = plan->tasks[0].spec;  // kup M=1
  EXPECT_EQ(t.candidate_kernel().format(), v1::LIBRARY_FORMAT_PYTHON);
  EXPECT_EQ(t.candidate_kernel().kernel(), "bmm");  // the library's only kernel
  EXPECT_EQ(t.candidate_kernel().sha256(), std::string(64, 'c'));
  // Each build under its own declared table, its config passed on verbatim.
  EXPECT_EQ(t.candidate_entry(), "M_LEQ_16");
  EXPECT_EQ(t.candidate_config().ksplit(), 2);
  EXPECT_EQ(nlohmann::json::parse(t.candidate_config_json())["waves_per_eu"], 2);
  EXPECT_EQ(plan->tasks[2].spec.candidate_entry(), "any");  // M=1024
  EXPECT_EQ(nlohmann::json::parse(plan->tasks[2].spec.baseline_config_json())["cache_modifier"], ".cg");
  // A retune of a tuning key alone is different work.
  v1::JobSpec retune = s;
  retune.mutable_candidate_kernel()->set_library("triton_main");
  retune.mutable_candidate_kernel()->set_build_id("main");
  std::string table = libs.at("triton_main").kernel_tables().at("bmm");
  retune.mutable_baseline_table()->set_json(table);
  table.replace(table.find("\"waves_per_eu\": 2"), 17, "\"waves_per_eu\": 3");
  retune.mutable_candidate_table()->set_json(table);
  auto rp = PlanJob(retune, o, libs);
  ASSERT_TRUE(rp.ok()) << rp.status();
  EXPECT_NE(rp->tasks[0].spec.baseline_config_json(), rp->tasks[0].spec.candidate_config_json());
  EXPECT_EQ(rp->tasks[0].spec.baseline_config().SerializeAsString(), rp->tasks[0].spec.candidate_config().SerializeAsString());
  auto same = s;
  same.mutable_candidate_kernel()->CopyFrom(s.baseline_kernel());
  auto sp = PlanJob(same, o, libs);
  ASSERT_TRUE(sp.ok());
  EXPECT_NE(rp->tasks[0].dedup_key, sp->tasks[0].dedup_key);
  // Another PyTorch / Triton on the arch's workers is other work; a C
  // kernel's task does not depend on them.
  auto upgraded = PlanJob(same, o, libs, {{"cpu", "python 3.12.3 torch 2.11.0 triton 3.6.0 cpu"}});
  ASSERT_TRUE(upgraded.ok());
  EXPECT_NE(upgraded->tasks[0].dedup_key, sp->tasks[0].dedup_key);
  EXPECT_EQ(PlanJob(same, o, libs, {{"cpu", "python 3.12.3 torch 2.11.0 triton 3.6.0 cpu"}})->tasks[0].dedup_key,
            upgraded->tasks[0].dedup_key);
  auto c_only = PlanJob(GoodSpec(), o, libs);
  ASSERT_TRUE(c_only.ok());
  EXPECT_EQ(PlanJob(GoodSpec(), o, libs, {{"cpu", "python 3.12.3 torch 2.11.0 triton 3.6.0 cpu"}})->tasks[0].dedup_key,
            c_only->tasks[0].dedup_key);
}

TEST(JobPlanner, PythonLibrarySpecMistakesAreRefusedAtSubmit) {
  const PlannerOptions o = PlannerOptions::WithBuiltinTables();
  const LibraryMap libs = RegisteredPython("triton_pr", "pr");
  v1::JobSpec s = GoodSpec();
  s.set_activations(v1::ACTIVATIONS_MXFP4_EVEN);
  s.mutable_candidate_kernel()->set_library("triton_pr");
  s.mutable_candidate_kernel()->set_build_id("pr");
  ASSERT_TRUE(PlanJob(s, o, libs).ok());
  auto expect_bad = [&](const v1::JobSpec& spec, const std::string& field, const std::string& needle) {
    auto p = PlanJob(spec, o, libs);
    ASSERT_FALSE(p.ok()) << field;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << p.status();
    EXPECT_EQ(p.status().message().rfind(field, 0), 0u) << p.status();
    EXPECT_NE(p.status().message().find(needle), std::string::npos) << p.status();
  };
  v1::JobSpec k = s;
  k.mutable_candidate_kernel()->set_kernel("no_such_kernel");
  expect_bad(k, "spec.candidate_kernel.kernel", "has no kernel 'no_such_kernel' (has: bmm)");
  v1::JobSpec a = s;
  a.add_target_archs("gfx942");
  expect_bad(a, "spec.target_archs[0]", "runs on cpu,sm_90a, not on 'gfx942'");
  v1::JobSpec m = s;
  m.set_activations(v1::ACTIVATIONS_BF16);
  expect_bad(m, "spec.activations", "supports mxfp4-even, not bf16");
  // A C kernel's table still refuses a key it cannot honour.
  v1::JobSpec t = s;
  t.mutable_baseline_table()->set_json(R"({"M_LEQ_16": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64,
      "my_key": 1}, "any": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64}})");
  expect_bad(t, "spec.baseline_table", "unknown config key 'my_key'");
}

}  // namespace
}  // namespace mxval::coordinator

namespace mxval::coordinator {
namespace {

// Everything a caller stores is bounded and printable; each refusal names
// the field.
TEST(JobPlannerBounds, StringsListsAndDeadlineAreBounded) {
  const PlannerOptions o = PlannerOptions::WithBuiltinTables();
  const std::vector<std::pair<std::function<void(v1::JobSpec&)>, std::string>> bad = {
      {[](v1::JobSpec& s) { s.set_name(std::string(2000, 'n')); }, "spec.name"},
      {[](v1::JobSpec& s) { s.set_name(std::string(15 << 20, 'n')); }, "spec"},
      {[](v1::JobSpec& s) { s.set_name("ok\x1b[2J"); }, "spec.name"},
      {[](v1::JobSpec& s) { s.mutable_pull_request()->add_changed_files("a\nb"); },
       "spec.pull_request.changed_files[0]"},
      {[](v1::JobSpec& s) {
         for (int i = 0; i < 1025; ++i) s.add_m_values(i + 1);
       },
       "spec.m_values"},
      {[](v1::JobSpec& s) { s.mutable_baseline_kernel()->set_build_id(std::string(257, 'b')); },
       "spec.baseline_kernel.build_id"},
      {[](v1::JobSpec& s) { s.mutable_deadline()->set_seconds(1'000'000'000'000'000LL); }, "spec.deadline"},
      {[](v1::JobSpec& s) { s.mutable_deadline()->set_seconds(-5); }, "spec.deadline"},
      {[](v1::JobSpec& s) { s.mutable_deadline()->set_nanos(-1); }, "spec.deadline.nanos"},
  };
  for (const auto& [edit, field] : bad) {
    v1::JobSpec s = GoodSpec();
    edit(s);
    auto plan = PlanJob(s, o);
    ASSERT_FALSE(plan.ok()) << field;
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_EQ(plan.status().message().substr(0, field.size() + 1), field + ":") << plan.status().message();
  }
  // A dispatch table is a file: newlines and tabs are fine there, and a day's deadline.
  v1::JobSpec s = GoodSpec();
  s.mutable_deadline()->set_seconds(86400);
  EXPECT_TRUE(PlanJob(s, o).ok());
}

TEST(RequestBounds, FindsControlCharacters) {
  EXPECT_EQ(FindControlCharacter("plain text, ünïcode"), absl::string_view::npos);
  EXPECT_EQ(FindControlCharacter("a\tb"), 1u);
  EXPECT_EQ(FindControlCharacter("a\tb", "\t"), absl::string_view::npos);
  EXPECT_EQ(FindControlCharacter("ab\x7f"), 2u);
  EXPECT_EQ(FindControlCharacter("x\xc2\x9b" "2J"), 1u);  // C1 CSI
  EXPECT_EQ(FindControlCharacter("\xc2\xa0"), absl::string_view::npos);  // no-break space is text
}

}  // namespace
}  // namespace mxval::coordinator
