#include "service/triage/log_triage.h"

#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
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
      {"accuracy-test-oom", {v1::TRIAGE_CLASS_INFRA, "killed-signal"}},
      {"router-e2e", {v1::TRIAGE_CLASS_INFRA, "local-connection"}},
      {"cpu-extension", {v1::TRIAGE_CLASS_UNTOUCHED_FAILURE, "missing-cpu-op"}},
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
      EXPECT_EQ(t.signature(), "killed-signal");
      EXPECT_EQ(t.consequences_size(), 2);  // the -9 exit and the step's 137 follow the kill
    }
    if (t.name() == "unit-test-backend") {
      EXPECT_TRUE(t.base_failed_same());
    }
  }
}

// Without the base log an unlinked failure is UNTOUCHED_FAILURE and the next
// step asks for the base; with a different failure on the base it is still
// unlinked; with the same failure on the base it is PRE_EXISTING.
TEST(LogTriage, BaseLogDecidesPreExisting) {
  auto ownership = Ownership::Empty();
  v1::TriageLogsRequest req;
  req.add_changed_files("src/other.py");
  v1::CiJobLog* j = req.add_jobs();
  j->set_name("unit-test-backend");
  j->set_log("FAILED test/a.py::T::test_x - AssertionError\n");
  auto r1 = TriageLogs(req, *Defaults(), *ownership);
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(r1->jobs(0).triage_class(), v1::TRIAGE_CLASS_UNTOUCHED_FAILURE);
  EXPECT_EQ(r1->jobs(0).confidence(), v1::TRIAGE_CONFIDENCE_LOW);
  EXPECT_NE(r1->jobs(0).next_step().find("merge base"), std::string::npos) << r1->jobs(0).next_step();
  EXPECT_NE(r1->jobs(0).missing().find("base"), std::string::npos);
  j->set_base_log("FAILED test/a.py::T::test_y - AssertionError\n");
  auto r2 = TriageLogs(req, *Defaults(), *ownership);
  EXPECT_EQ(r2->jobs(0).triage_class(), v1::TRIAGE_CLASS_UNTOUCHED_FAILURE) << r2->jobs(0).reason();
  EXPECT_EQ(r2->jobs(0).confidence(), v1::TRIAGE_CONFIDENCE_MEDIUM);
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
      {"RuntimeError: No HIP GPUs are available", "gpu-not-detected"},
      {"rocminfo: found 0 GPU(s) on this node", "gpu-not-detected"},
      {"Error: Failed to detect GPUs on the runner", "gpu-not-detected"},
      {"ls: cannot access '/dev/kfd': No such file or directory", "gpu-not-detected"},
      {"RuntimeError: HIP error: no ROCm-capable device is detected", "gpu-not-detected"},
      {"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "gpu-not-detected"},
      {"docker: Error response from daemon: could not select device driver \"\" with capabilities: [[gpu]].",
       "gpu-not-detected"},
      {"NVRM: Xid (PCI:0000:18:00): 79, pid=1234, GPU has fallen off the bus.", "gpu-hardware"},
      {"The runner has received a shutdown signal.", "runner-lost"},
      {"Error response from daemon: Get \"https://registry-1.docker.io/v2/\": net/http: TLS handshake timeout",
       "setup-failed"},
      {"torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB.", "gpu-oom"},
      {"/src/csrc/quant.cu(130): error: identifier \"__nv_cvt_float4_to_fp8x4\" is undefined", "compile-error"},
      {"kernels/gemm.cc:12:5: error: 'foo' was not declared in this scope", "compile-error"},
      {"Timeout after 1200 seconds when running lora/test_lora_eviction.py", "test-timeout"},
      {"AssertionError: expected 8 GPUs, found 0", "gpu-not-detected"},
      {"[12345.678] Out of memory: Killed process 4242 (python3)", "host-oom"},
      {"requests.exceptions.ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=30000): Max retries exceeded",
       "local-connection"},
      {"OSError: We couldn't connect to 'https://huggingface.co' ... Read timed out.", "network"},
      {"##[error]The job running on runner mi300-7 has exceeded the maximum execution time of 360 minutes.",
       "job-timeout"},
      {"Fatal Python error: Segmentation fault", "crash-signal"},
      {"FAIL: test_gsm8k (test_eval_accuracy.TestEval.test_gsm8k)", "unittest-failure"},
      {"Error: Process exited with code -9", "killed-signal"},
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
  EXPECT_EQ(t.rule(), "killed-signal");  // the tail was read; the early failure was cut off
  v1::TriageLogsResponse copy;
  ASSERT_TRUE(copy.ParseFromString(r->SerializeAsString()));  // valid UTF-8 throughout
  for (const auto& l : t.matched_lines()) EXPECT_EQ(ToValidUtf8(l.text()), l.text());
  EXPECT_EQ(ToValidUtf8("a\xff" "b"), "a\xEF\xBF\xBD" "b");
  // Terminal control characters in a caller's job name or log never reach the output.
  v1::TriageLogsRequest hostile;
  hostile.add_changed_files("\x1b\x07dir/pkg/mod.py");
  v1::CiJobLog* h = hostile.add_jobs();
  h->set_name("job\x1b[2J\x07");
  h->set_log("Traceback (most recent call last):\n  File \"/site-packages/pkg/mod.py\", line 1, in f\n"
             "ValueError: \x1b[31mred\x08\x1b\x07\n");
  auto hr = TriageLogs(hostile, *Defaults(), *ownership);
  ASSERT_TRUE(hr.ok()) << hr.status();
  const v1::JobTriage& ht = hr->jobs(0);
  std::vector<std::string> texts = {ht.name(), ht.reason(), ht.signature(), ht.next_step(), ht.missing()};
  for (const auto& l : ht.matched_lines()) texts.push_back(l.text());
  for (const auto& e : ht.evidence()) texts.push_back(e.detail()), texts.push_back(e.changed_file());
  ASSERT_FALSE(ht.evidence().empty()) << "the frame names the changed file";
  for (const std::string& text : texts)
    for (char c : {'\x1b', '\x07', '\x08'}) EXPECT_EQ(text.find(c), std::string::npos) << text;
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

// ---- Decisions from evidence in the log and the diff (no ownership map).

constexpr char kDiff[] = R"(diff --git a/python/pkg/srt/layers/quantization/mxfp4.py b/python/pkg/srt/layers/quantization/mxfp4.py
--- a/python/pkg/srt/layers/quantization/mxfp4.py
+++ b/python/pkg/srt/layers/quantization/mxfp4.py
@@ -40,3 +40,4 @@ class Mxfp4MoEMethod:
     def create_weights(self, layer):
-        layer.w13_scale = alloc()
+        layer.w13_weight_scale = alloc()
+        layer.use_new = True
@@ -90,2 +91,3 @@ def _mxfp4_dequant_kernel(x_ptr, BLOCK: tl.constexpr):
     pid = tl.program_id(0)
+    off = pid * BLOCK
diff --git a/python/pkg/srt/server_args.py b/python/pkg/srt/server_args.py
--- a/python/pkg/srt/server_args.py
+++ b/python/pkg/srt/server_args.py
@@ -10,1 +10,3 @@ def add_cli_args(parser):
     parser.add_argument("--tp-size", type=int)
+    parser.add_argument("--enable-fast-mxfp4", action="store_true")
+    enable_fast_mxfp4: bool = False
diff --git a/test/srt/test_mxfp4_new.py b/test/srt/test_mxfp4_new.py
new file mode 100644
--- /dev/null
+++ b/test/srt/test_mxfp4_new.py
@@ -0,0 +1,2 @@
+def test_new():
+    pass
)";

v1::JobTriage TriageOne(const std::string& log, const std::string& base = "", const std::string& diff = kDiff,
                        const Ownership* ownership = nullptr) {
  auto none = Ownership::Empty();
  v1::TriageLogsRequest req;
  req.set_diff(diff);
  v1::CiJobLog* j = req.add_jobs();
  j->set_name("job");
  j->set_log(log);
  j->set_base_log(base);
  auto r = TriageLogs(req, *Defaults(), ownership ? *ownership : *none);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->jobs(0) : v1::JobTriage();
}

bool HasEvidence(const v1::JobTriage& t, const std::string& kind, int64_t line = -1) {
  for (const auto& e : t.evidence()) {
    if (e.kind() != kind) continue;
    if (line < 0) return true;
    for (int64_t l : e.lines())
      if (l == line) return true;
  }
  return false;
}

std::string Dump(const v1::JobTriage& t) {
  std::string s = absl::StrCat(TriageClassName(t.triage_class()), " [", t.decision(), "] ", t.reason());
  for (const auto& e : t.evidence()) absl::StrAppend(&s, "\n  ", e.kind(), ": ", e.detail());
  return s;
}

// The server's traceback runs through a changed file (by its installed
// path); the connection refused, the kill -9 and the exit code that follow
// are its consequences, not the signature.
TEST(LogEvidence, RootCauseBeforeConsequences) {
  const std::string log =
      "2026-11-30T14:02:11.0000000Z ##[group]Run python3 -m pytest test/srt/test_mla.py\n"
      "2026-11-30T14:02:12.0000000Z [2026-11-30 14:05:01 TP0] Load weight begin\n"
      "2026-11-30T14:02:13.0000000Z [2026-11-30 14:05:02 TP0] Scheduler hit an exception: Traceback (most recent "
      "call last):\n"
      "2026-11-30T14:02:13.0000000Z   File \"/opt/venv/lib/python3.12/site-packages/pkg/srt/model_loader/loader.py\", "
      "line 371, in load_model\n"
      "2026-11-30T14:02:13.0000000Z     self.quant_method.create_weights(layer)\n"
      "2026-11-30T14:02:13.0000000Z   File "
      "\"/opt/venv/lib/python3.12/site-packages/pkg/srt/layers/quantization/mxfp4.py\", line 41, in create_weights\n"
      "2026-11-30T14:02:13.0000000Z     layer.w13_weight_scale = alloc()\n"
      "2026-11-30T14:02:13.0000000Z AttributeError: 'Layer' object has no attribute 'w13_weight_scale'\n"
      "2026-11-30T14:02:20.0000000Z requests.exceptions.ConnectionError: HTTPConnectionPool(host='127.0.0.1', "
      "port=30000): Max retries exceeded (Connection refused)\n"
      "2026-11-30T14:02:21.0000000Z Killing process group with kill -9\n"
      "2026-11-30T14:02:21.0000000Z Error: Process exited with code -9\n"
      "2026-11-30T14:02:21.0000000Z ##[error]Process completed with exit code 1.\n";
  const v1::JobTriage t = TriageOne(log, "##[group]Run python3 -m pytest test/srt/test_mla.py\nConnection refused\n");
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED) << Dump(t);
  EXPECT_EQ(t.decision(), "root-reachable");
  EXPECT_EQ(t.confidence(), v1::TRIAGE_CONFIDENCE_HIGH);
  EXPECT_TRUE(HasEvidence(t, "frame-in-changed-file", 6)) << Dump(t);
  EXPECT_TRUE(HasEvidence(t, "changed-function", 6)) << "create_weights is changed by the diff: " << Dump(t);
  EXPECT_EQ(t.evidence(0).changed_file(), "python/pkg/srt/layers/quantization/mxfp4.py");
  EXPECT_TRUE(t.evidence(0).at_root());
  ASSERT_FALSE(t.matched_lines().empty());
  EXPECT_EQ(t.matched_lines(0).number(), 3);
  EXPECT_NE(t.signature().find("AttributeError"), std::string::npos);
  EXPECT_EQ(t.consequences_size(), 4) << "refused, kill -9, exit -9, exit code 1";
  EXPECT_FALSE(t.base_failed_same()) << "the base's connection refused is not this root cause";
}

// A test the change adds cannot fail on the base, even when the base log
// shows the same noise.
TEST(LogEvidence, FailingTestTheChangeAddsIsNotPreExisting) {
  const std::string log =
      "FAILED test/srt/test_mxfp4_new.py::test_new - requests.exceptions.ConnectionError: Connection refused\n"
      "##[error]Process completed with exit code 1.\n";
  const v1::JobTriage t = TriageOne(log, log);
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED) << Dump(t);
  EXPECT_TRUE(HasEvidence(t, "test-added", 1)) << Dump(t);
  EXPECT_FALSE(t.base_failed_same());
}

// No GPU on the runner is INFRA wherever it shows, even after a traceback
// through changed code (the missing device explains the traceback).
TEST(LogEvidence, RunnerWithoutGpusIsInfra) {
  for (const std::string msg : {"rocminfo: found 0 GPU(s)", "Error: Failed to detect GPUs on the runner",
                                "ls: cannot access '/dev/kfd': No such file or directory",
                                "RuntimeError: No HIP GPUs are available"}) {
    const std::string log = absl::StrCat(
        "Traceback (most recent call last):\n"
        "  File \"/sgl-workspace/pkg/python/pkg/srt/layers/quantization/mxfp4.py\", line 41, in create_weights\n"
        "AssertionError\n",
        msg, "\n##[error]Process completed with exit code 1.\n");
    const v1::JobTriage t = TriageOne(log);
    EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_INFRA) << msg << ": " << Dump(t);
    EXPECT_EQ(t.decision(), "runner") << msg;
    EXPECT_EQ(t.rule(), "gpu-not-detected") << msg;
  }
}

// A flag the diff introduces, turned on in the job, links an accuracy
// failure to the change; printed as off, it does not.
TEST(LogEvidence, FlagTheDiffIntroduces) {
  auto log = [](const std::string& value) {
    return absl::StrCat("server_args=ServerArgs(model_path='m', tp_size=8, enable_fast_mxfp4=", value,
                        ", chunked_prefill_size=8192)\n"
                        "Traceback (most recent call last):\n"
                        "  File \"/w/test/srt/test_eval_accuracy.py\", line 30, in test_gsm8k\n"
                        "    self.assertGreaterEqual(metrics['accuracy'], 0.72)\n"
                        "AssertionError: 0.612 not greater than or equal to 0.72\n");
  };
  v1::JobTriage on = TriageOne(log("True"));
  EXPECT_EQ(on.triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED) << Dump(on);
  EXPECT_EQ(on.decision(), "job-runs-changed-code");
  EXPECT_TRUE(HasEvidence(on, "changed-flag", 1)) << Dump(on);
  EXPECT_EQ(on.confidence(), v1::TRIAGE_CONFIDENCE_MEDIUM);
  EXPECT_FALSE(on.next_step().empty());
  v1::JobTriage off = TriageOne(log("False"));
  EXPECT_EQ(off.triage_class(), v1::TRIAGE_CLASS_UNTOUCHED_FAILURE) << Dump(off);
}

// A changed Triton kernel named at the failure (its compile error) is
// evidence at the root.
TEST(LogEvidence, ChangedKernelNamedAtTheFailure) {
  const std::string log =
      "Traceback (most recent call last):\n"
      "  File \"/usr/local/lib/python3.10/dist-packages/triton/compiler/compiler.py\", line 100, in compile\n"
      "triton.compiler.errors.CompilationError: at 5:10: in _mxfp4_dequant_kernel: unsupported tensor index\n";
  const v1::JobTriage t = TriageOne(log);
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED) << Dump(t);
  EXPECT_TRUE(HasEvidence(t, "changed-kernel", 3)) << Dump(t);
}

// A warning traceback the program survived and a download that recovered
// after a retry come before the real failure; neither is the root cause.
TEST(LogEvidence, SurvivedTracebacksAndRecoveredRetriesAreNotRootCauses) {
  const std::string log =
      "WARNING: flash_attn not available, falling back to the Triton backend\n"
      "Traceback (most recent call last):\n"
      "  File \"/w/pkg/srt/layers/attention/fa.py\", line 1, in <module>\n"
      "ImportError: No module named 'flash_attn'\n"
      "huggingface_hub: 502 Server Error: Bad Gateway for url: https://huggingface.co/x; retrying in 2s\n"
      "Downloaded model.safetensors\n"
      "Traceback (most recent call last):\n"
      "  File \"/w/test/srt/test_other.py\", line 12, in test_decode\n"
      "ValueError: decode produced 0 tokens\n";
  const v1::JobTriage t = TriageOne(log);
  EXPECT_NE(t.signature().find("ValueError"), std::string::npos) << Dump(t);
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_UNTOUCHED_FAILURE) << Dump(t);
  EXPECT_EQ(t.decision(), "not-reachable");
}

// The same failure on the base with other numbers, addresses and PIDs is
// PRE_EXISTING; a different failure on the base is not.
TEST(LogEvidence, SameRootSignatureOnTheBase) {
  const std::string pr =
      "Traceback (most recent call last):\n"
      "  File \"/w/test/srt/test_perf.py\", line 20, in test_throughput\n"
      "AssertionError: throughput 1873.4 tok/s below 2000 (pid 4242, at 0x7f3a2c)\n";
  const std::string base =
      "Traceback (most recent call last):\n"
      "  File \"/w/test/srt/test_perf.py\", line 20, in test_throughput\n"
      "AssertionError: throughput 1911.0 tok/s below 2000 (pid 977, at 0x7f11ff)\n";
  v1::JobTriage t = TriageOne(pr, base);
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_PRE_EXISTING) << Dump(t);
  EXPECT_TRUE(HasEvidence(t, "base-same"));
  t = TriageOne(pr, "Traceback (most recent call last):\n  File \"/w/x.py\", line 1, in f\nKeyError: 'a'\n");
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_UNTOUCHED_FAILURE) << Dump(t);
  EXPECT_TRUE(HasEvidence(t, "base-different"));
}

// Thin evidence says so: no failure message at all is UNKNOWN with what was
// missing and a next step; an infra failure without a base asks for a re-run.
TEST(LogEvidence, ThinEvidenceHasAConfidenceAndANextStep) {
  v1::JobTriage t = TriageOne("setting up\nrunning tests\n##[error]Process completed with exit code 1.\n");
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_UNKNOWN) << Dump(t);
  EXPECT_EQ(t.decision(), "no-root-cause");
  EXPECT_EQ(t.confidence(), v1::TRIAGE_CONFIDENCE_LOW);
  EXPECT_FALSE(t.missing().empty());
  EXPECT_FALSE(t.next_step().empty());
  t = TriageOne("");
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_UNKNOWN);
  t = TriageOne("[rank0]:[E1130 ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout\n");
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_INFRA) << Dump(t);
  EXPECT_EQ(t.confidence(), v1::TRIAGE_CONFIDENCE_MEDIUM);
  EXPECT_NE(t.next_step().find("re-run"), std::string::npos);
}

// An infrastructure-looking failure raised inside changed code is the
// change's, with a re-run to confirm; elsewhere it is INFRA. A GPU
// out-of-memory error is the workload's own budget: the change's when raised
// in changed code, otherwise a failure the change does not reach.
TEST(LogEvidence, InfrastructureLookingFailuresInChangedCode) {
  const std::string frame =
      "  File \"/opt/venv/lib/python3.12/site-packages/pkg/srt/layers/quantization/mxfp4.py\", line 41, in "
      "create_weights\n";
  const std::string nccl =
      "torch.distributed.DistBackendError: [Rank 0] Watchdog caught collective operation timeout after 600000 ms\n";
  v1::JobTriage t = TriageOne("Traceback (most recent call last):\n" + frame + nccl);
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED) << Dump(t);
  EXPECT_EQ(t.decision(), "infra-in-changed-code");
  EXPECT_NE(t.next_step().find("re-run"), std::string::npos);
  t = TriageOne("Traceback (most recent call last):\n  File \"/w/pkg/srt/model_runner.py\", line 9, in init\n" + nccl);
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_INFRA) << Dump(t);
  t = TriageOne("Traceback (most recent call last):\n" + frame +
                "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 40.00 GiB\n");
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED) << Dump(t);
  EXPECT_EQ(t.rule(), "gpu-oom");
  t = TriageOne(
      "Traceback (most recent call last):\n  File \"/w/pkg/srt/model_runner.py\", line 9, in init\n"
      "torch.OutOfMemoryError: HIP out of memory\n");
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_UNTOUCHED_FAILURE) << Dump(t);
}

// Cases a reviewer broke the first version with.
TEST(LogEvidence, ReviewRegressions) {
  const std::string frame =
      "  File \"/opt/venv/lib/python3.12/site-packages/pkg/srt/layers/quantization/mxfp4.py\", line 41, in "
      "create_weights\n";
  const std::string old_failure =
      "Traceback (most recent call last):\n  File \"/w/test/srt/test_old.py\", line 5, in test_old\n"
      "AssertionError: 3 != 4\n";
  // A failure the base shares does not hide a new one after it.
  v1::JobTriage t = TriageOne(old_failure + "Traceback (most recent call last):\n" + frame + "KeyError: 'w13'\n",
                              old_failure);
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED) << Dump(t);
  EXPECT_NE(t.signature().find("KeyError"), std::string::npos);
  // The same message raised somewhere else on the base is another failure.
  t = TriageOne(
      "Traceback (most recent call last):\n  File \"/w/test/test_gemm.py\", line 9, in test_gemm\n"
      "AssertionError: Tensor-likes are not close!\n",
      "Traceback (most recent call last):\n  File \"/w/test/test_moe.py\", line 3, in test_moe\n"
      "AssertionError: Tensor-likes are not close!\n");
  EXPECT_NE(t.triage_class(), v1::TRIAGE_CLASS_PRE_EXISTING) << Dump(t);
  // Another record's WARNING line just before a fatal traceback does not make it survived.
  t = TriageOne("[TP1] WARNING: slow tokenizer\n[TP0] Scheduler hit an exception: Traceback (most recent call last):\n" +
                frame + "KeyError: 'w13'\nKilled\n");
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED) << Dump(t);
  // A pytest skip reason that counts GPUs is no runner fault; a runner
  // message long after a failure in changed code is not its cause.
  std::string late = "Traceback (most recent call last):\n" + frame + "KeyError: 'w13'\n";
  for (int i = 0; i < 20; ++i) late += "cleanup step " + std::to_string(i) + "\n";
  t = TriageOne("SKIPPED [1] test/x.py:3: condition: torch.cuda.device_count() == 0\n" + late +
                "nvidia-smi: command not found\n");
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED) << Dump(t);
  // A string flag printed at its default is no use of the flag; on a command line it is.
  const std::string accuracy =
      "Traceback (most recent call last):\n  File \"/w/test/srt/test_eval.py\", line 30, in test_gsm8k\n"
      "AssertionError: 0.61 not greater than or equal to 0.72\n";
  const std::string string_flag =
      "diff --git a/python/pkg/srt/server_args.py b/python/pkg/srt/server_args.py\n"
      "--- a/python/pkg/srt/server_args.py\n+++ b/python/pkg/srt/server_args.py\n"
      "@@ -10,1 +10,2 @@ def add_cli_args(parser):\n     parser.add_argument(\"--tp-size\", type=int)\n"
      "+    parser.add_argument(\"--moe-runner-backend\", default=\"auto\")\n";
  t = TriageOne("server_args=ServerArgs(tp_size=8, moe_runner_backend='auto')\n" + accuracy, "", string_flag);
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_UNTOUCHED_FAILURE) << Dump(t);
  t = TriageOne("python3 -m pkg.launch_server --moe-runner-backend triton\n" + accuracy, "", string_flag);
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED) << Dump(t);
  // A runner that reports a failed test in its own words: the test the change adds.
  t = TriageOne("Running test/srt/test_mxfp4_new.py\ntest/srt/test_mxfp4_new.py failed with exit code 1\n");
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED) << Dump(t);
  EXPECT_TRUE(HasEvidence(t, "test-added")) << Dump(t);
}

// The ownership map still adds evidence; without a diff the changed files
// alone still match frames.
TEST(LogEvidence, OwnershipAndChangedFilesWithoutADiff) {
  v1::OwnershipMap map;
  auto* e = map.add_entries();
  e->add_paths("kernels/**");
  e->add_jobs("*gpu*");
  auto own = Ownership::Create(map);
  ASSERT_TRUE(own.ok());
  v1::TriageLogsRequest req;
  req.add_changed_files("kernels/gemm.cu");
  req.add_changed_files("python/pkg/srt/x.py");
  auto* j = req.add_jobs();
  j->set_name("gpu-kernels");
  j->set_log("[  FAILED  ] Gemm.Ragged (3 ms)\n");
  auto* k = req.add_jobs();
  k->set_name("unit");
  k->set_log("Traceback (most recent call last):\n  File \"/site-packages/pkg/srt/x.py\", line 3, in f\nKeyError: 1\n");
  auto r = TriageLogs(req, *Defaults(), **own);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->jobs(0).triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED) << Dump(r->jobs(0));
  EXPECT_TRUE(HasEvidence(r->jobs(0), "ownership"));
  EXPECT_EQ(r->jobs(1).triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED) << Dump(r->jobs(1));
  req.set_diff("not a diff");
  EXPECT_NE(TriageLogs(req, *Defaults(), **own).status().message().find("diff:"), std::string::npos);
}

TEST(TriageConfig, BuiltInDefaultsLoad) {
  EXPECT_GE(DefaultLogRules().rules_size(), 10);
  EXPECT_GE(DefaultOwnership().entries_size(), 3);
  EXPECT_TRUE(Ownership::Create(DefaultOwnership()).ok());
}

}  // namespace
}  // namespace mxval::triage
