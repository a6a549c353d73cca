#include "service/triage/log_triage.h"

#include <fstream>
#include <map>
#include <sstream>

#include "gtest/gtest.h"
#include "service/triage/kernel_triage.h"
#include "service/triage/triage_config.h"

namespace mxval::triage {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::unique_ptr<LogClassifier> Defaults() {
  auto c = LogClassifier::Create(DefaultLogRules());
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

// Every fixture (written in the style of real ROCm/CUDA CI failures) gets
// the class and rule an engineer would give it.
TEST(LogTriage, RealisticFixtures) {
  const std::string dir = MXVAL_TRIAGE_DATA;
  auto own = LoadOwnership(dir + "/ownership.yaml");
  ASSERT_TRUE(own.ok()) << own.status();
  auto ownership = Ownership::Create(*own);
  ASSERT_TRUE(ownership.ok()) << ownership.status();
  v1::TriageLogsRequest req;
  req.add_changed_files("kernels/gpu/a16wfp4_gpu.cu");
  req.add_changed_files("kernels/configs/sm_90a.json");
  const std::map<std::string, std::pair<v1::TriageClass, std::string>> want = {
      {"unit-test-amd-graph", {v1::TRIAGE_CLASS_INFRA, "blas-graph-capture"}},
      {"multi-gpu-allreduce", {v1::TRIAGE_CLASS_PRE_EXISTING, "ipc-timeout"}},
      {"accuracy-test-oom", {v1::TRIAGE_CLASS_INFRA, "killed-oom"}},
      {"router-e2e", {v1::TRIAGE_CLASS_INFRA, "connection-refused"}},
      {"cpu-extension", {v1::TRIAGE_CLASS_UNKNOWN, "missing-cpu-op"}},
      {"gpu-kernel-test", {v1::TRIAGE_CLASS_PR_TOUCHED, "gtest-failure"}},
      {"nightly-gpu-missing", {v1::TRIAGE_CLASS_INFRA, "gpu-not-detected"}},
      {"unit-test-backend", {v1::TRIAGE_CLASS_PRE_EXISTING, "pytest-failure"}},
  };
  for (const auto& [name, _] : want) {
    v1::CiJobLog* j = req.add_jobs();
    j->set_name(name);
    j->set_log(Read(dir + "/logs/" + name + ".log"));
    j->set_base_log(Read(dir + "/base/" + name + ".log"));  // empty when the base has none
    ASSERT_FALSE(j->log().empty()) << name;
  }
  auto resp = TriageLogs(req, *Defaults(), **ownership);
  ASSERT_TRUE(resp.ok()) << resp.status();
  ASSERT_EQ(resp->jobs_size(), static_cast<int>(want.size()));
  for (const v1::JobTriage& t : resp->jobs()) {
    SCOPED_TRACE(t.name());
    const auto& [cls, rule] = want.at(t.name());
    EXPECT_EQ(t.rule(), rule) << t.reason();
    EXPECT_EQ(t.triage_class(), cls) << TriageClassName(t.triage_class()) << ": " << t.reason();
    EXPECT_FALSE(t.reason().empty());
    ASSERT_FALSE(t.matched_lines().empty());
  }
  // Captures make the signature: the failing gtest and the OOM exit code.
  for (const v1::JobTriage& t : resp->jobs()) {
    if (t.name() == "gpu-kernel-test") {
      EXPECT_EQ(t.signature(), "gtest-failure: GpuKernels.RaggedKAndEveryConfigAtK192");
      EXPECT_EQ(t.reachability(), v1::REACHABILITY_REACHES);
      EXPECT_EQ(t.reaching_files_size(), 2);
    }
    if (t.name() == "accuracy-test-oom") {
      EXPECT_EQ(t.signature(), "killed-oom: 137");
    }
    if (t.name() == "unit-test-backend") {
      EXPECT_TRUE(t.base_failed_same());
    }
  }
}

// Without the base log the same pytest failure is no longer PRE_EXISTING;
// with a different failure on the base it is new.
TEST(LogTriage, BaseLogDecidesPreExisting) {
  auto ownership = Ownership::Empty();
  v1::TriageLogsRequest req;
  v1::CiJobLog* j = req.add_jobs();
  j->set_name("unit-test-backend");
  j->set_log("FAILED test/a.py::T::test_x - AssertionError\n");
  auto r1 = TriageLogs(req, *Defaults(), *ownership);
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(r1->jobs(0).triage_class(), v1::TRIAGE_CLASS_UNKNOWN);
  j->set_base_log("FAILED test/a.py::T::test_y - AssertionError\n");
  auto r2 = TriageLogs(req, *Defaults(), *ownership);
  EXPECT_EQ(r2->jobs(0).triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED) << r2->jobs(0).reason();
  j->set_base_log("noise\nFAILED test/a.py::T::test_x - AssertionError\n");
  auto r3 = TriageLogs(req, *Defaults(), *ownership);
  EXPECT_EQ(r3->jobs(0).triage_class(), v1::TRIAGE_CLASS_PRE_EXISTING);
}

// Every shipped rule, on a line in the style of what GPU CI prints.
TEST(DefaultRules, EachRuleMatchesItsKindOfLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"RuntimeError: CUBLAS_STATUS_NOT_SUPPORTED when calling cublasGemmEx during CUDA graph capture",
       "blas-graph-capture"},
      {"RuntimeError: CUDA error: operation not permitted when stream is capturing (cudaErrorStreamCaptureUnsupported)",
       "gpu-runtime-graph-capture"},
      {"hipErrorStreamCaptureInvalidated raised while capturing graph bs=8", "gpu-runtime-graph-capture"},
      {"RuntimeError: No CUDA GPUs are available", "gpu-not-detected"},
      {"Error: Process exited with code -9", "killed-oom"},
      {"[rank0]: custom allreduce IPC handle exchange timed out after 300 s", "ipc-timeout"},
      {"urllib3.exceptions.NewConnectionError: Failed to establish a new connection: [Errno 111] Connection refused",
       "connection-refused"},
      {"requests.exceptions.HTTPError: 503 Server Error: Service Unavailable for url: http://127.0.0.1:8000/v1",
       "http-5xx"},
      {"RuntimeError: HIP error: an illegal memory access was encountered", "device-fault"},
      {"NotImplementedError: Could not run 'sgl_kernel::fused_experts_cpu' with arguments from the 'CPU' backend.",
       "missing-cpu-op"},
      {"test file test/srt/test_moe.py timed out after 1800 s", "test-timeout"},
      {"FAILED test/srt/test_mla.py::TestMLA::test_mmlu - AssertionError: 0.61 < 0.62", "pytest-failure"},
      {"[  FAILED  ] A16wfp4Cpu.RaggedK (12 ms)", "gtest-failure"},
      {"ValueError: invalid literal for int() with base 10: 'x'", "python-error"},
      {"##[error]Process completed with exit code 2.", "exit-code"},
  };
  auto c = Defaults();
  for (const auto& [line, rule] : cases) {
    auto m = c->Classify(line);
    ASSERT_TRUE(m.has_value()) << line;
    EXPECT_EQ(m->rule_name, rule) << line << " -> " << m->signature;
  }
}

TEST(LogClassifier, PriorityBeatsPositionAndLastMatchIsReported) {
  v1::LogRules rules;
  auto* a = rules.add_rules();
  a->set_name("high");
  a->set_pattern("fatal: (\\w+)");
  auto* b = rules.add_rules();
  b->set_name("low");
  b->set_pattern("error");
  auto c = LogClassifier::Create(rules);
  ASSERT_TRUE(c.ok());
  auto m = (*c)->Classify("fatal: first\nerror\nfatal: second\nerror at the end\n");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->rule_name, "high");
  EXPECT_EQ(m->signature, "high: second");
  EXPECT_EQ(m->line, 3);
  EXPECT_FALSE((*c)->Classify("all good\n").has_value());
}

TEST(LogClassifier, BadRulesAreClearErrors) {
  auto bad = [](const std::string& name, const std::string& pattern) {
    v1::LogRules r;
    auto* x = r.add_rules();
    x->set_name(name);
    x->set_pattern(pattern);
    return LogClassifier::Create(r).status();
  };
  EXPECT_EQ(bad("ok", "(unclosed").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad("ok", "(unclosed").message().find("rules[0].pattern"), std::string::npos);
  EXPECT_EQ(bad("Bad Name", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad("ok", "").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad("ok", "(a)\\1").code(), absl::StatusCode::kInvalidArgument);  // backreference: RE2 refuses
  EXPECT_EQ(bad("ok", "a(?=b)").code(), absl::StatusCode::kInvalidArgument);  // lookahead: RE2 refuses
  // Pathological size: a counted repetition that would blow up the program
  // is rejected by RE2's memory budget instead of eating the coordinator.
  EXPECT_EQ(bad("ok", "((a{100}){100}){100}").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad("ok", std::string(5000, 'a')).code(), absl::StatusCode::kInvalidArgument);
  v1::LogRules dup;
  for (int i = 0; i < 2; ++i) {
    auto* x = dup.add_rules();
    x->set_name("same");
    x->set_pattern("x");
  }
  EXPECT_NE(LogClassifier::Create(dup).status().message().find("rules[1].name"), std::string::npos);
  // Unknown fields and wrong types in a rule file.
  EXPECT_EQ(ParseLogRules("rules:\n  - name: a\n    pattern: x\n    severity: high\n", true, "f.yaml").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseLogRules("rules: 3\n", true, "f.yaml").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseLogRules("{not json", false, "f.json").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadLogRules("/nonexistent/rules.yaml").status().code(), absl::StatusCode::kNotFound);
}

TEST(LogTriage, HugeAndInvalidUtf8LogsAreBoundedAndSafe) {
  auto ownership = Ownership::Empty();
  v1::TriageLogsRequest req;
  v1::CiJobLog* j = req.add_jobs();
  j->set_name("big");
  std::string log = "FAILED test/old.py::t - early failure\n";
  log += std::string(3 << 20, 'x') + "\n";        // one 3 MiB line
  for (int i = 0; i < 100000; ++i) log += "progress \xff\xfe line\n";  // invalid UTF-8
  log += "Error: Process exited with code -9 \xc3\x28\n";
  j->set_log(log);
  LogTriageOptions o;
  o.max_log_bytes = 1 << 20;
  auto r = TriageLogs(req, *Defaults(), *ownership, o);
  ASSERT_TRUE(r.ok());
  const v1::JobTriage& t = r->jobs(0);
  EXPECT_TRUE(t.truncated());
  EXPECT_EQ(t.rule(), "killed-oom");  // the tail was read; the early failure was cut off
  v1::TriageLogsResponse copy;
  ASSERT_TRUE(copy.ParseFromString(r->SerializeAsString()));  // valid UTF-8 throughout
  for (const auto& l : t.matched_lines()) EXPECT_EQ(ToValidUtf8(l.text()), l.text());
  EXPECT_EQ(ToValidUtf8("a\xff" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(ToValidUtf8("\xc3\xa9"), "\xc3\xa9");
}

TEST(LogTriage, RequestValidation) {
  auto ownership = Ownership::Empty();
  v1::TriageLogsRequest req;
  EXPECT_EQ(TriageLogs(req, *Defaults(), *ownership).status().code(), absl::StatusCode::kInvalidArgument);
  req.add_jobs()->set_log("x");
  auto st = TriageLogs(req, *Defaults(), *ownership).status();
  EXPECT_NE(st.message().find("jobs[0].name"), std::string::npos);
  req.mutable_jobs(0)->set_name("a");
  req.add_jobs()->set_name("a");
  EXPECT_NE(TriageLogs(req, *Defaults(), *ownership).status().message().find("jobs[1].name"), std::string::npos);
}

TEST(Ownership, Globs) {
  v1::OwnershipMap m;
  auto* e = m.add_entries();
  e->add_paths("kernels/gpu/**");
  e->add_paths("*.cu");
  e->add_jobs("gpu-*");
  e->add_kernels("a16wfp4_tc");
  auto o = Ownership::Create(m);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ((*o)->JobReach("gpu-test", {"kernels/gpu/x/y.h"}).reachability, v1::REACHABILITY_REACHES);
  EXPECT_EQ((*o)->JobReach("gpu-test", {"other/deep/k.cu"}).reachability, v1::REACHABILITY_REACHES);
  EXPECT_EQ((*o)->JobReach("gpu-test", {"README.md"}).reachability, v1::REACHABILITY_UNREACHABLE);
  EXPECT_EQ((*o)->JobReach("cpu-test", {"kernels/gpu/a.cu"}).reachability, v1::REACHABILITY_UNKNOWN);
  EXPECT_EQ((*o)->FilesForKernel("a16wfp4_tc", {"kernels/gpu/a.cu", "README.md"}).size(), 1u);
  EXPECT_TRUE((*o)->FilesForKernel("a16wfp4_cpu", {"kernels/gpu/a.cu"}).empty());
  auto glob = CompileGlob("kernels/**/x.h");
  ASSERT_TRUE(glob.ok());
  EXPECT_TRUE(GlobMatch(**glob, false, "kernels/x.h"));
  EXPECT_TRUE(GlobMatch(**glob, false, "kernels/a/b/x.h"));
  EXPECT_FALSE(GlobMatch(**glob, false, "kernelsx.h"));
  v1::OwnershipMap bad;
  bad.add_entries()->add_jobs("x");
  EXPECT_NE(Ownership::Create(bad).status().message().find("entries[0].paths"), std::string::npos);
}

TEST(TriageConfig, BuiltInDefaultsLoad) {
  EXPECT_GE(DefaultLogRules().rules_size(), 10);
  EXPECT_GE(DefaultOwnership().entries_size(), 3);
  EXPECT_TRUE(Ownership::Create(DefaultOwnership()).ok());
}

}  // namespace
}  // namespace mxval::triage
