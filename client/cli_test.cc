#include "client/cli.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <tuple>
#include <sys/wait.h>

#include "client/report.h"
#include "common/tensor_io.h"
#include "gtest/gtest.h"
#include "kernels/mxfp4/mxfp4.h"
#include "kernels/runtime/device_clocks.h"
#include "kernels/runtime/device_clocks.h"
#include "nlohmann/json.hpp"

namespace mxval {
namespace {

struct Result {
  int code;
  std::string out, err;
};

Result Cli(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = RunCli(args, out, err);
  return {code, out.str(), err.str()};
}

std::string Tmp(const std::string& name) { return ::testing::TempDir() + "/mxval_cli_" + std::to_string(getpid()) + "_" + name; }

HostTensor RandomFloat(std::vector<int64_t> shape, uint64_t seed) {
  HostTensor t = HostTensor::Zeros(DType::kF32, shape);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0, 1);
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = n(rng);
  return t;
}

TEST(Cli, HelpForEveryVerbAndUnknownVerb) {
  for (const char* v : {"quantize", "dequantize", "reference", "run"}) {
    Result r = Cli({v, "--help"});
    EXPECT_EQ(r.code, 0) << v;
    EXPECT_NE(r.out.find("usage: mxval"), std::string::npos) << v;
  }
  EXPECT_EQ(Cli({"--help"}).code, 0);
  EXPECT_EQ(Cli({}).code, 2);
  Result r = Cli({"frobnicate"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("frobnicate"), std::string::npos);
}

TEST(Cli, BadArgumentsExitTwoNamingTheArgument) {
  struct Case { std::vector<std::string> args; const char* needle; } cases[] = {
      {{"quantize", "--input", "x.npy"}, "--out-packed"},
      {{"quantize", "--input", "/nonexistent.npy", "--out-packed", "p", "--out-scales", "s"}, "--input"},
      {{"quantize", "--input", "x", "--out-packed", "p", "--out-scales", "s", "--scale-rule", "up"}, "--scale-rule"},
      {{"run", "--m", "0"}, "--m"},
      {{"run", "--m", "1,x"}, "--m"},
      {{"run", "--preset", "llama"}, "--preset"},
      {{"run", "--shapes", "kup:16x512x100"}, "--shapes"},
      {{"run", "--config", "BM16"}, "--config"},
      {{"run", "--activations", "fp8"}, "--activations"},
      {{"run", "--x-gen", "cauchy"}, "--x-gen"},
      {{"run", "--table", "/nonexistent.json"}, "--table"},
      {{"run", "--reps", "-1"}, "--reps"},
      {{"reference", "--x", "a", "--w-packed", "b", "--w-scales", "c", "--out", "d", "--layout", "diag"}, "--layout"},
  };
  for (const Case& c : cases) {
    Result r = Cli(c.args);
    EXPECT_EQ(r.code, 2) << c.args[0] << " " << c.needle << ": " << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << r.err;
  }
}

TEST(Cli, QuantizeDequantizeReferenceRoundTrip) {
  const int64_t B = 2, M = 5, N = 24, K = 192;
  ASSERT_TRUE(SaveNpy(Tmp("w.npy"), RandomFloat({B, N, K}, 1)).ok());
  ASSERT_TRUE(SaveNpy(Tmp("x.npy"), RandomFloat({B, M, K}, 2)).ok());
  Result r = Cli({"quantize", "--input", Tmp("w.npy"), "--scale-rule", "floor", "--out-packed", Tmp("wp.npy"),
                  "--out-scales", Tmp("ws.npy")});
  ASSERT_EQ(r.code, 0) << r.err;
  auto wp = LoadTensor(Tmp("wp.npy"));
  auto ws = LoadTensor(Tmp("ws.npy"));
  ASSERT_TRUE(wp.ok() && ws.ok());
  EXPECT_EQ(wp->shape, (std::vector<int64_t>{B, N, K / 2}));
  EXPECT_EQ(ws->shape, (std::vector<int64_t>{B, N, K / 32}));
  r = Cli({"dequantize", "--packed", Tmp("wp.npy"), "--scales", Tmp("ws.npy"), "--out", Tmp("wd.npy")});
  ASSERT_EQ(r.code, 0) << r.err;
  auto wd = LoadTensor(Tmp("wd.npy"));
  ASSERT_TRUE(wd.ok());
  for (int64_t i = 0; i < wd->numel(); i += 97) {
    const int64_t row = i / K, k = i % K;
    const float want = mxfp4::DecodeE2M1(mxfp4::UnpackCode(wp->as<uint8_t>() + row * K / 2, k)) *
                       mxfp4::DecodeE8M0(ws->as<uint8_t>()[row * K / 32 + k / 32]);
    ASSERT_EQ(wd->as<float>()[i], want);
  }
  for (const char* layout : {"head-major", "batch-major"}) {
    r = Cli({"reference", "--x", Tmp("x.npy"), "--w-packed", Tmp("wp.npy"), "--w-scales", Tmp("ws.npy"), "--out",
             Tmp("y.npy"), "--layout", layout, "--activations", "mxfp4-even"});
    ASSERT_EQ(r.code, 0) << r.err;
    auto y = LoadTensor(Tmp("y.npy"));
    ASSERT_TRUE(y.ok());
    const bool hm = std::string(layout) == "head-major";
    EXPECT_EQ(y->shape, hm ? (std::vector<int64_t>{B, M, N}) : (std::vector<int64_t>{M, B, N}));
  }
  // Mismatched shapes are a usage error, not a crash.
  ASSERT_TRUE(SaveNpy(Tmp("x64.npy"), RandomFloat({B, M, 64}, 3)).ok());
  r = Cli({"reference", "--x", Tmp("x64.npy"), "--w-packed", Tmp("wp.npy"), "--w-scales", Tmp("ws.npy"), "--out", Tmp("y.npy")});
  EXPECT_EQ(r.code, 2);
  r = Cli({"dequantize", "--packed", Tmp("ws.npy"), "--scales", Tmp("ws.npy"), "--out", Tmp("o.npy")});
  EXPECT_EQ(r.code, 2);
  // A truncated file is a clear error.
  std::string bytes = *ReadFileBytes(Tmp("wp.npy"));
  std::ofstream(Tmp("trunc.npy"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  r = Cli({"dequantize", "--packed", Tmp("trunc.npy"), "--scales", Tmp("ws.npy"), "--out", Tmp("o.npy")});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("truncated"), std::string::npos) << r.err;
}

TEST(Cli, NumpyReadsWhatWeWriteAndAgrees) {
  // An independent decoder: numpy, on the files `mxval quantize` writes.
  if (std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0) GTEST_SKIP() << "python3-numpy missing";
  ASSERT_TRUE(SaveNpy(Tmp("nx.npy"), RandomFloat({3, 64}, 5)).ok());
  ASSERT_EQ(Cli({"quantize", "--input", Tmp("nx.npy"), "--out-packed", Tmp("np.npy"), "--out-scales", Tmp("ns.npy")}).code, 0);
  ASSERT_EQ(Cli({"dequantize", "--packed", Tmp("np.npy"), "--scales", Tmp("ns.npy"), "--out", Tmp("nd.npy")}).code, 0);
  const std::string py =
      "import numpy as np, sys\n"
      "p = np.load(sys.argv[1]); s = np.load(sys.argv[2]); d = np.load(sys.argv[3])\n"
      "lut = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], np.float32)\n"
      "codes = np.stack([p & 15, p >> 4], -1).reshape(p.shape[0], -1)\n"
      "scale = np.exp2(s.astype(np.float64) - 127).repeat(32, -1)\n"
      "ref = (lut[codes] * scale).astype(np.float32)\n"
      "sys.exit(0 if p.dtype == np.uint8 and d.dtype == np.float32 and np.array_equal(ref, d) else 1)\n";
  std::ofstream(Tmp("check.py")) << py;
  const std::string cmd = "/usr/bin/python3 " + Tmp("check.py") + " " + Tmp("np.npy") + " " + Tmp("ns.npy") + " " + Tmp("nd.npy");
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}

TEST(Cli, RunSweepPassesAndWritesJson) {
  Result r = Cli({"run", "--preset", "dsv3-tp8", "--m", "1,33", "--reps", "1", "--json", Tmp("run.json"), "--activations",
                  "mxfp4-even", "--x-gen", "heavy-tail"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("4 passed, 0 failed"), std::string::npos) << r.out;
  std::ifstream jf(Tmp("run.json"));
  nlohmann::json j = nlohmann::json::parse(jf);
  ASSERT_EQ(j["cases"].size(), 4u);
  EXPECT_EQ(j["failed"], 0);
  EXPECT_EQ(j["cases"][0]["dispatch_entry"], "kup/default/M_LEQ_16");
  EXPECT_EQ(j["cases"][0]["verdict"], "pass");
  EXPECT_GT(j["cases"][1]["gflops"].get<double>(), 0);
}

TEST(Cli, RunOnWeightsFromFiles) {
  // Weights as a checkpoint would hold them, in a .safetensors file.
  const int64_t B = 2, N = 32, K = 192;
  ASSERT_TRUE(SaveNpy(Tmp("fw.npy"), RandomFloat({B, N, K}, 8)).ok());
  ASSERT_EQ(Cli({"quantize", "--input", Tmp("fw.npy"), "--out-packed", Tmp("fwp.npy"), "--out-scales", Tmp("fws.npy")}).code, 0);
  const HostTensor wp = *LoadTensor(Tmp("fwp.npy")), ws = *LoadTensor(Tmp("fws.npy"));
  nlohmann::json h = {{"w_kc", {{"dtype", "U8"}, {"shape", {B, N, K / 2}}, {"data_offsets", {0, wp.data.size()}}}},
                      {"w_kc_scale", {{"dtype", "U8"}, {"shape", {B, N, K / 32}},
                                      {"data_offsets", {wp.data.size(), wp.data.size() + ws.data.size()}}}}};
  const std::string hs = h.dump();
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((hs.size() >> (8 * i)) & 0xFF);
  file += hs + std::string(wp.data.begin(), wp.data.end()) + std::string(ws.data.begin(), ws.data.end());
  std::ofstream(Tmp("ckpt.safetensors"), std::ios::binary) << file;
  Result r = Cli({"run", "--w-packed", Tmp("ckpt.safetensors") + "#w_kc", "--w-scales",
                  Tmp("ckpt.safetensors") + "#w_kc_scale", "--w-op", "kup", "--m", "1,20", "--reps", "1"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("2 passed, 0 failed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kup       2"), std::string::npos) << r.out;
  // A missing tensor name is a usage error naming what the file has.
  r = Cli({"run", "--w-packed", Tmp("ckpt.safetensors") + "#w_vc", "--w-scales", Tmp("ckpt.safetensors") + "#w_kc_scale"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("w_kc"), std::string::npos) << r.err;
}

TEST(Cli, RunReportsFailuresWithExitOne) {
  // A config the kernel cannot implement (KSPLIT beyond K blocks) fails its
  // cases cleanly: exit 1, a named reason, no crash.
  Result r = Cli({"run", "--shapes", "kup:2x64x192", "--m", "3", "--config", "BM16_BN64_BK128_KS3", "--reps", "1"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("NUM_KSPLIT"), std::string::npos) << r.out;
}

TEST(Cli, BinaryExitCodes) {
  const std::string bin = MXVAL_BIN;
  auto status = [](const std::string& cmd) {
    const int s = std::system((cmd + " >/dev/null 2>&1").c_str());
    return WIFEXITED(s) ? WEXITSTATUS(s) : -1;
  };
  EXPECT_EQ(status(bin + " --help"), 0);
  EXPECT_EQ(status(bin + " run --m nope"), 2);
  EXPECT_EQ(status(bin + " quantize"), 2);
  EXPECT_EQ(status(bin + " run --shapes custom:1x32x64 --m 2 --reps 1"), 0);
}

// `mxval triage` on the realistic fixtures: the Markdown headline, the gate
// (exit 1 only because of the PR_TOUCHED job), and clear errors.
TEST(Cli, TriageLogsGateOnlyOnTheChange) {
  const std::string d = MXVAL_TRIAGE_DATA;
  Result r = Cli({"triage", "--changed-files", d + "/changed_files.txt", "--logs", d + "/logs", "--base-logs",
                  d + "/base", "--ownership", d + "/ownership.yaml"});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.out.find("**1 new failure**, 6 unrelated, 1 suspicious (untouched path)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("### Caused by this change (PR_TOUCHED): 1"), std::string::npos);
  EXPECT_NE(r.out.find("**gpu-kernel-test**"), std::string::npos);
  EXPECT_NE(r.out.find("confidence; rule `"), std::string::npos) << "each decision names its rule";
  EXPECT_NE(r.out.find("next step: "), std::string::npos);
  // A change that touches nothing any job covers: only the failures no
  // evidence explains (UNTOUCHED_FAILURE) gate, and only under the default gate.
  const std::string none = Tmp("changed_none.txt");
  std::ofstream(none) << "docs/README.md\n";
  r = Cli({"triage", "--changed-files", none, "--logs", d + "/logs", "--base-logs", d + "/base", "--ownership",
           d + "/ownership.yaml"});
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("**0 new failures**, 6 unrelated, 2 suspicious (untouched path)"), std::string::npos) << r.out;
  r = Cli({"triage", "--changed-files", none, "--logs", d + "/logs", "--base-logs", d + "/base", "--ownership",
           d + "/ownership.yaml", "--fail-on", "pr-touched"});
  EXPECT_EQ(r.code, 0) << r.out;
  // The change given as a diff alone.
  const std::string diff = Tmp("change.diff");
  std::ofstream(diff) << "diff --git a/docs/README.md b/docs/README.md\n--- a/docs/README.md\n+++ b/docs/README.md\n"
                         "@@ -1 +1 @@\n-a\n+b\n";
  r = Cli({"triage", "--diff", diff, "--logs", d + "/logs", "--fail-on", "pr-touched"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  r = Cli({"triage", "--logs", d + "/logs"});
  EXPECT_EQ(r.code, 2) << "neither --changed-files nor --diff";
  std::ofstream(Tmp("not.diff")) << "no diff here\n";
  r = Cli({"triage", "--diff", Tmp("not.diff"), "--logs", d + "/logs"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("diff"), std::string::npos) << r.err;
  // JSON output parses and carries every job.
  r = Cli({"triage", "--changed-files", none, "--logs", d + "/logs", "--ownership", d + "/ownership.yaml", "--format",
           "json"});
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["jobs"].size(), 8u);
  // Bad input: exit 2 naming the flag.
  const std::string bad_rules = Tmp("bad_rules.yaml");
  std::ofstream(bad_rules) << "rules:\n  - name: x\n    pattern: '(a'\n";
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"triage", "--changed-files", none, "--logs", "/nonexistent"},
           {"triage", "--changed-files", "/nonexistent", "--logs", d + "/logs"},
           {"triage", "--changed-files", none, "--logs", d + "/logs", "--rules", bad_rules},
           {"triage", "--changed-files", none, "--logs", d + "/logs", "--fail-on", "sometimes"}}) {
    r = Cli(args);
    EXPECT_EQ(r.code, 2) << args[3] << ": " << r.err;
    EXPECT_NE(r.err.find("--"), std::string::npos);
  }
}

// The Markdown job report names each side's kernel and its whole config:
// a retune of stages / warps or of the kernel alone must not print two
// identical cells (it did: "BM128_BN128_BK64_KS1" on both sides), and a
// kernel name from an external library cannot break out of its cell.
TEST(Report, MarkdownNamesKernelAndWholeConfig) {
  v1::Job job;
  job.set_job_id("job-7");
  job.set_state(v1::JOB_STATE_DONE);
  v1::TaskResult* r = job.add_results();
  r->set_m(4096);
  r->set_arch("sm_90a");
  auto set = [](v1::KernelRun* run, const char* kernel, int stages, int warps, double us) {
    run->mutable_kernel()->set_kernel(kernel);
    v1::TileConfig* c = run->mutable_config();
    c->set_block_m(128), c->set_block_n(128), c->set_block_k(64), c->set_ksplit(1), c->set_num_stages(stages),
        c->set_num_warps(warps);
    run->mutable_timing()->set_median_us(us);
    run->mutable_accuracy()->set_verdict(v1::VERDICT_PASS);
  };
  set(r->mutable_baseline(), "a16wfp4_tc", 3, 4, 165.5);
  set(r->mutable_candidate(), "a16wfp4_wgmma", 4, 9, 44.4);
  const std::string md = FormatReport(job, "markdown");
  EXPECT_NE(md.find("| a16wfp4\\_tc `BM128_BN128_BK64_KS1_S3_W4` | a16wfp4\\_wgmma `BM128_BN128_BK64_KS1_S4_W9` | 165.5 | 44.4 |"),
            std::string::npos)
      << md;
  set(r->mutable_candidate(), "evil` | <b>x</b>", 4, 9, 44.4);
  const std::string md2 = FormatReport(job, "markdown");
  EXPECT_EQ(md2.find("<b>"), std::string::npos) << md2;
  EXPECT_NE(md2.find("evil\\` \\| &lt;b&gt;x&lt;/b&gt; `BM128"), std::string::npos) << md2;
}

// Rows with the same kernel and config on both sides give the job's own
// timing spread; the Markdown report marks them and says which changed rows
// moved outside that spread.
TEST(Report, MarkdownSeparatesChangedRowsFromTheJobsTimingSpread) {
  v1::Job job;
  job.set_job_id("job-9");
  job.set_state(v1::JOB_STATE_DONE);
  auto add = [&](int64_t m, int base_warps, int cand_warps, double base_us, double cand_us) {
    v1::TaskResult* r = job.add_results();
    r->set_m(m);
    r->set_arch("sm_90a");
    r->mutable_shape()->set_op(v1::OP_VUP);
    r->mutable_shape()->set_b(16), r->mutable_shape()->set_n(256), r->mutable_shape()->set_k(512);
    for (auto [run, warps, us] : {std::tuple{r->mutable_baseline(), base_warps, base_us},
                                  std::tuple{r->mutable_candidate(), cand_warps, cand_us}}) {
      run->mutable_kernel()->set_kernel("a16wfp4_wgmma_rs");
      v1::TileConfig* c = run->mutable_config();
      c->set_block_m(64), c->set_block_n(64), c->set_block_k(64), c->set_ksplit(1), c->set_num_stages(10),
          c->set_num_warps(warps);
      run->mutable_timing()->set_median_us(us);
      run->mutable_accuracy()->set_verdict(v1::VERDICT_PASS);
    }
  };
  add(1, 5, 5, 3.0, 3.21);    // same config: +7.0%
  add(4, 5, 5, 3.0, 2.85);    // same config: -5.0%
  add(64, 5, 12, 5.2, 4.6);   // changed: -11.5%, outside the spread
  add(256, 5, 12, 6.0, 6.06); // changed: +1.0%, inside it
  const std::string md = FormatReport(job, "markdown");
  EXPECT_NE(md.find("| +7.0% (same config) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| -11.5% |"), std::string::npos) << md;
  EXPECT_NE(md.find("2 rows run the same kernel and config on both sides; their delta, -5.0% to +7.0%, is this job's "
                    "run-to-run spread."),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("Of the 2 rows whose config changed, 1 moved outside it (vup B=16 N=256 K=512 M=64 sm\\_90a -11.5%) "
                    "and 1 inside it"),
            std::string::npos)
      << md;
  // The same table config built from a pull request's own kernel library is
  // a change, not a measure of noise.
  v1::Job rebuilt = job;
  rebuilt.mutable_results(0)->mutable_candidate()->mutable_kernel()->set_build_id("pr-123");
  const std::string md3 = FormatReport(rebuilt, "markdown");
  EXPECT_EQ(md3.find("| +7.0% (same config) |"), std::string::npos) << md3;
  EXPECT_NE(md3.find("1 row runs the same kernel and config on both sides; their delta, -5.0% to -5.0%"), std::string::npos)
      << md3;
  EXPECT_NE(md3.find("Of the 3 rows whose config changed, 3 moved outside it"), std::string::npos) << md3;
  // No same-config row: no spread to report.
  v1::Job changed_only;
  *changed_only.add_results() = job.results(2);
  EXPECT_EQ(FormatReport(changed_only, "markdown").find("run-to-run spread"), std::string::npos);
}

// Device tasks that measured their roofline get a Roofline section: the
// ceilings per arch (a range over the tasks) and each side's fraction of the
// floor; a side without a fraction shows a dash; CPU-only jobs have none.
TEST(Report, RooflineSectionShowsCeilingsAndFractions) {
  v1::Job job;
  job.set_job_id("job-12");
  job.set_state(v1::JOB_STATE_DONE);
  auto add = [&](int64_t m, double copy_gbps, double tflops, double floor_us, double bf, double cf) {
    v1::TaskResult* r = job.add_results();
    r->set_m(m);
    r->set_arch("sm_90a");
    r->mutable_shape()->set_op(v1::OP_VUP);
    r->mutable_shape()->set_b(16), r->mutable_shape()->set_n(128), r->mutable_shape()->set_k(512);
    r->mutable_roofline()->set_copy_gbps(copy_gbps);
    r->mutable_roofline()->set_bf16_tflops(tflops);
    for (auto [run, f] : {std::pair{r->mutable_baseline(), bf}, std::pair{r->mutable_candidate(), cf}}) {
      run->mutable_kernel()->set_kernel("a16wfp4_wgmma_rs");
      run->mutable_timing()->set_median_us(floor_us / (f > 0 ? f : 0.5));
      run->mutable_timing()->set_floor_us(f > 0 ? floor_us : 0);
      run->mutable_timing()->set_roofline_fraction(f);
      run->mutable_accuracy()->set_verdict(v1::VERDICT_PASS);
    }
  };
  add(4096, 4120, 782, 20.5, 0.84, 0.86);
  add(16384, 4190, 790, 81.7, 0.99, 0);
  for (int i = 0; i < 2; ++i) {  // the SM clock while each task measured its ceilings
    v1::ClockWindow* c = job.mutable_results(i)->mutable_roofline()->mutable_clock();
    c->set_samples(3), c->set_sm_mhz_min(i == 0 ? 1980 : 1755), c->set_sm_mhz_max(1980);
  }
  const std::string md = FormatReport(job, "markdown");
  EXPECT_NE(md.find("### Roofline"), std::string::npos) << md;
  EXPECT_NE(md.find("sm\\_90a copy 4.12-4.19 TB/s, bf16 GEMM 782-790 TFLOP/s, SM clock 1755-1980 MHz"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| vup B=16 N=128 K=512 | 4096 | sm\\_90a | 20.5 | 84% | 86% |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 16384 | sm\\_90a | 81.7 | 99% | — |"), std::string::npos) << md;
  // A hip device without a GEMM probe: the memory ceiling and the reason.
  job.mutable_results(1)->set_arch("gfx942");
  job.mutable_results(1)->mutable_roofline()->set_bf16_tflops(0);
  job.mutable_results(1)->mutable_roofline()->set_note("no bf16 GEMM probe for hip devices");
  job.mutable_results(1)->mutable_roofline()->clear_clock();  // no clock reader on AMD
  const std::string md2 = FormatReport(job, "markdown");
  EXPECT_NE(md2.find("gfx942 copy 4.19 TB/s, bf16 GEMM not measured (no bf16 GEMM probe for hip devices); "
                     "sm\\_90a copy 4.12 TB/s, bf16 GEMM 782 TFLOP/s, SM clock 1980 MHz."),
            std::string::npos)
      << md2;
  // A task whose child ended while measuring the roofline (the worker kept
  // its checkpoint): no ceilings from it, and the section says why.
  job.mutable_results(1)->mutable_roofline()->Clear();
  job.mutable_results(1)->mutable_roofline()->set_note(
      "not measured: the task's child process ended while measuring the device's roofline (killed by signal 11)");
  const std::string md3 = FormatReport(job, "markdown");
  EXPECT_NE(md3.find("Not measured on 1 task (vup B=16 N=128 K=512 M=16384): not measured: the task's child process "
                     "ended while measuring the device's roofline (killed by signal 11).\n\nMeasured on the device "
                     "each task ran on: sm\\_90a copy 4.12 TB/s"),
            std::string::npos)
      << md3;
  // Only unmeasured tasks: the section holds just that line.
  job.mutable_results(0)->mutable_roofline()->Clear();
  job.mutable_results(0)->mutable_roofline()->set_note("copy bandwidth: out of memory");
  const std::string md4 = FormatReport(job, "markdown");
  EXPECT_NE(md4.find("Not measured on 1 task (vup B=16 N=128 K=512 M=4096): copy bandwidth: out of memory."),
            std::string::npos)
      << md4;
  EXPECT_EQ(md4.find("Measured on the device"), std::string::npos) << md4;
  // Without any roofline there is no section.
  for (v1::TaskResult& r : *job.mutable_results()) r.clear_roofline();
  EXPECT_EQ(FormatReport(job, "markdown").find("Roofline"), std::string::npos);
}

// Rows whose timing window saw the SM clock move (or a power / thermal
// slowdown) are marked in the table and counted in a clock line. Where the
// sides were timed interleaved in one window both saw the same clocks and
// the delta stands; where they were timed apart the row is left out of the
// spread and of the changed rows (its delta measures the clock).
TEST(Report, RowsTimedWhileTheClockMovedAreMarked) {
  v1::Job job;
  job.set_job_id("job-11");
  job.set_state(v1::JOB_STATE_DONE);
  auto add = [&](int64_t m, int cand_warps, double base_us, double cand_us, int lo, int hi, uint64_t reasons,
                 bool interleaved) {
    v1::TaskResult* r = job.add_results();
    r->set_m(m);
    r->set_arch("sm_90a");
    r->mutable_shape()->set_op(v1::OP_KUP);
    r->mutable_shape()->set_b(16), r->mutable_shape()->set_n(512), r->mutable_shape()->set_k(128);
    for (auto [run, warps, us] : {std::tuple{r->mutable_baseline(), 5, base_us},
                                  std::tuple{r->mutable_candidate(), cand_warps, cand_us}}) {
      run->mutable_kernel()->set_kernel("a16wfp4_wgmma_rs");
      run->mutable_config()->set_block_m(128), run->mutable_config()->set_num_warps(warps);
      run->mutable_timing()->set_median_us(us);
      run->mutable_timing()->set_interleaved(interleaved);
      run->mutable_accuracy()->set_verdict(v1::VERDICT_PASS);
      v1::ClockWindow* c = run->mutable_timing()->mutable_clock();
      c->set_source("nvml"), c->set_samples(4), c->set_sm_mhz_min(lo), c->set_sm_mhz_max(hi),
          c->set_sm_mhz_median(hi), c->set_settled(true);
      ClockSummary cs;
      cs.samples = 4, cs.sm_mhz_min = lo, cs.sm_mhz_max = hi, cs.reasons = reasons;
      c->set_disturbed(cs.Disturbed());
      c->set_event_reasons(reasons);
      for (const std::string& n : ClockReasonNames(reasons)) c->add_reasons(n);
    }
  };
  add(64, 5, 3.0, 3.03, 1980, 1980, 0, true);            // same config, steady: +1.0%
  add(2048, 5, 20.0, 19.9, 1600, 1980, 0x4, true);       // same config, capped, interleaved: -0.5% (counts)
  add(4096, 5, 28.0, 33.6, 1500, 1980, 0x4, false);      // same config, capped, apart: +20% (left out)
  add(8192, 12, 52.0, 49.4, 1980, 1980, 0, true);        // changed, steady: -5.0%
  add(16384, 12, 100.0, 90.0, 1515, 1965, 0x4, false);   // changed, capped, apart: -10% (left out)
  const std::string md = FormatReport(job, "markdown");
  EXPECT_NE(md.find("| +20.0% (same config) (clock moved: 1500-1980 MHz, sw\\_power\\_cap; sides timed apart) |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| -0.5% (same config) (clock moved: 1600-1980 MHz, sw\\_power\\_cap; sides interleaved) |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| -5.0% |"), std::string::npos) << md;
  EXPECT_NE(md.find("SM clock over the 5 timed tasks: 1500-1980 MHz; 3 tasks were timed while it moved"), std::string::npos)
      << md;
  EXPECT_NE(md.find("interleaved in one window (1) both saw the same clocks and the delta stands; 2 tasks timed the "
                    "sides apart: those deltas are not evidence either way"),
            std::string::npos)
      << md;
  // The spread: the steady row and the interleaved capped one.
  EXPECT_NE(md.find("2 rows run the same kernel and config on both sides; their delta, -0.5% to +1.0%"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("Of the 1 row whose config changed, 1 moved outside it (kup B=16 N=512 K=128 M=8192 sm\\_90a -5.0%)"),
            std::string::npos)
      << md;
  const std::string text = FormatReport(job, "table");
  EXPECT_NE(text.find("(clock moved: 1515-1965 MHz, sw_power_cap; sides timed apart)"), std::string::npos) << text;
  const std::string junit = FormatReport(job, "junit");
  EXPECT_NE(junit.find("<system-out>clock moved: 1600-1980 MHz, sw_power_cap; sides interleaved</system-out>"),
            std::string::npos)
      << junit;
  EXPECT_EQ(junit.find("M=64 sm_90a\" time=\"0.000003\">\n      <system-out>"), std::string::npos) << junit;  // steady row
  // No clock read anywhere: no clock line.
  for (v1::TaskResult& r : *job.mutable_results()) {
    r.mutable_baseline()->mutable_timing()->clear_clock();
    r.mutable_candidate()->mutable_timing()->clear_clock();
  }
  EXPECT_EQ(FormatReport(job, "markdown").find("SM clock"), std::string::npos);
}

// A launch=pdl job: the header says so, cells mark the sides that ran with
// PDL, a side that ran plain under it is a change, and JUnit carries the
// launch as a property.
TEST(Report, PdlJobsAreMarked) {
  v1::Job job;
  job.set_job_id("job-10");
  job.set_state(v1::JOB_STATE_DONE);
  job.mutable_spec()->set_launch(v1::LAUNCH_MODE_PDL);
  v1::TaskResult* r = job.add_results();
  r->set_m(64);
  r->set_arch("sm_90a");
  r->mutable_shape()->set_op(v1::OP_VUP);
  for (v1::KernelRun* run : {r->mutable_baseline(), r->mutable_candidate()}) {
    run->mutable_kernel()->set_kernel("a16wfp4_wgmma_rs");
    run->mutable_config()->set_block_m(64);
    run->mutable_timing()->set_median_us(3.0);
    run->mutable_accuracy()->set_verdict(v1::VERDICT_PASS);
    run->set_launch(v1::LAUNCH_MODE_PDL);
  }
  std::string md = FormatReport(job, "markdown");
  EXPECT_NE(md.find("launched with programmatic dependent launch"), std::string::npos) << md;
  EXPECT_NE(md.find("` (PDL) | a16wfp4\\_wgmma\\_rs `"), std::string::npos) << md;
  EXPECT_NE(md.find("(same config)"), std::string::npos) << md;
  r->mutable_baseline()->set_launch(v1::LAUNCH_MODE_PLAIN);
  md = FormatReport(job, "markdown");
  EXPECT_EQ(md.find("(same config)"), std::string::npos) << md;
  EXPECT_NE(FormatReport(job, "junit").find("<property name=\"launch\" value=\"pdl\"/>"), std::string::npos);
  EXPECT_NE(md.find("Both sides launched with programmatic dependent launch"), std::string::npos) << md;
  // Plain against PDL: an A/B of the launch itself.
  job.mutable_spec()->set_launch(v1::LAUNCH_MODE_PLAIN);
  job.mutable_spec()->set_candidate_launch(v1::LAUNCH_MODE_PDL);
  md = FormatReport(job, "markdown");
  EXPECT_NE(md.find("The candidate side launched with programmatic dependent launch"), std::string::npos) << md;
  const std::string junit = FormatReport(job, "junit");
  EXPECT_NE(junit.find("<property name=\"launch\" value=\"plain\"/><property name=\"candidate_launch\" value=\"pdl\"/>"),
            std::string::npos)
      << junit;
  job.mutable_spec()->clear_candidate_launch();
  EXPECT_EQ(FormatReport(job, "junit").find("<property"), std::string::npos);
  EXPECT_EQ(FormatReport(job, "markdown").find("launched with"), std::string::npos);
}

TEST(Cli, SubmitPrintsExampleSpecs) {
  Result r = Cli({"submit", "--example-spec", "strided-x"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("xLayout: X_LAYOUT_K_STRIDED"), std::string::npos) << r.out;
  r = Cli({"submit", "--example-spec", "retune"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("candidateTable"), std::string::npos) << r.out;
  r = Cli({"submit", "--example-spec", "nope\x1b[2J"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("pr-library"), std::string::npos) << "lists the examples: " << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << "no raw escape from the caller";
}

TEST(Cli, SubmitRejectsAnUnknownLaunchMode) {
  Result r = Cli({"submit", "--preset", "glm5-tp4", "--launch", "eager"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--launch must be plain or pdl"), std::string::npos) << r.err;
  r = Cli({"submit", "--preset", "glm5-tp4", "--candidate-launch", "PDL"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--candidate-launch must be plain or pdl"), std::string::npos) << r.err;
}

// Hostile inputs (issue #48): every file the CLI reads is bounded and typed
// before it is read, and no input reaches std::terminate.

std::string Symlink(const std::string& name, const char* target) {
  const std::string link = Tmp(name);
  ::unlink(link.c_str());
  EXPECT_EQ(::symlink(target, link.c_str()), 0);
  return link;
}

// Writes `text` into a new FIFO at Tmp(name) from a thread once a reader opens it.
struct FifoWriter {
  FifoWriter(const std::string& name, std::string text) : path(Tmp(name)) {
    ::unlink(path.c_str());
    EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0);
    writer = std::thread([p = path, t = std::move(text)] {
      const int fd = ::open(p.c_str(), O_WRONLY);
      if (fd < 0) return;
      (void)!::write(fd, t.data(), t.size());
      ::close(fd);
    });
  }
  ~FifoWriter() { writer.join(); }
  std::string path;
  std::thread writer;
};

std::string AliasBombYaml() {
  std::string bomb = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (char c = 'b'; c <= 'i'; ++c) {
    bomb += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 10; ++i) bomb += std::string(i ? ", *" : "*") + static_cast<char>(c - 1);
    bomb += "]\n";
  }
  return bomb;
}

TEST(Cli, DevicesAsInputFilesExitTwo) {
  const std::string zero_npy = Symlink("zero.npy", "/dev/zero"), urandom_yaml = Symlink("urandom.yaml", "/dev/urandom");
  ASSERT_TRUE(SaveNpy(Tmp("dv_w.npy"), RandomFloat({1, 32, 64}, 4)).ok());
  ASSERT_EQ(Cli({"quantize", "--input", Tmp("dv_w.npy"), "--out-packed", Tmp("dv_wp.npy"), "--out-scales", Tmp("dv_ws.npy")}).code, 0);
  const std::string changed = Tmp("dv_changed.txt");
  std::ofstream(changed) << "kernels/foo.cc\n";
  const std::string d = MXVAL_TRIAGE_DATA;
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"reference", "--x", zero_npy, "--w-packed", Tmp("dv_wp.npy"), "--w-scales", Tmp("dv_ws.npy"), "--out", Tmp("o.npy")},
           {"quantize", "--input", Symlink("zero.safetensors", "/dev/zero") + "#w", "--out-packed", Tmp("o1.npy"),
            "--out-scales", Tmp("o2.npy")},
           {"submit", "--coordinator", "127.0.0.1:1", "--spec", urandom_yaml},
           {"triage", "--changed-files", changed, "--logs", d + "/logs", "--rules", urandom_yaml},
           {"triage", "--changed-files", Symlink("zero.txt", "/dev/zero"), "--logs", d + "/logs"},
           {"run", "--table", zero_npy, "--m", "1"}}) {
    const Result r = Cli(args);
    EXPECT_EQ(r.code, 2) << args[0] << " " << args[1] << ": " << r.err;
    EXPECT_NE(r.err.find("is a character device"), std::string::npos) << r.err;
  }
}

TEST(Cli, TokenFileThatIsADeviceExitsTwo) {
  ::setenv("MXVAL_TOKEN_FILE", Symlink("token_zero", "/dev/zero").c_str(), 1);
  const Result r = Cli({"jobs", "--coordinator", "127.0.0.1:1"});
  ::unsetenv("MXVAL_TOKEN_FILE");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("MXVAL_TOKEN_FILE: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is a character device"), std::string::npos) << r.err;
}

TEST(Cli, YamlBombsExitTwo) {
  std::ofstream(Tmp("bomb.yaml")) << AliasBombYaml();
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "- ";
  std::ofstream(Tmp("deep.yaml")) << deep << "x\n";
  const std::string d = MXVAL_TRIAGE_DATA;
  const std::string changed = Tmp("yb_changed.txt");
  std::ofstream(changed) << "kernels/foo.cc\n";
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"submit", "--coordinator", "127.0.0.1:1", "--spec", Tmp("bomb.yaml")},
           {"submit", "--coordinator", "127.0.0.1:1", "--spec", Tmp("deep.yaml")},
           {"triage", "--changed-files", changed, "--logs", d + "/logs", "--rules", Tmp("bomb.yaml")},
           {"triage", "--changed-files", changed, "--logs", d + "/logs", "--ownership", Tmp("deep.yaml")}}) {
    const Result r = Cli(args);
    EXPECT_EQ(r.code, 2) << args.back() << ": " << r.err;
    const bool named = r.err.find("aliases expand to more than 100000 nodes") != std::string::npos ||
                       r.err.find("nested deeper than 64 levels") != std::string::npos;
    EXPECT_TRUE(named) << r.err;
  }
}

TEST(Cli, TriageReadsPipesWithinTheirBounds) {
  const std::string d = MXVAL_TRIAGE_DATA;
  std::ifstream rules_in(d + "/../../../service/triage/rules/default_rules.yaml");
  const std::string rules((std::istreambuf_iterator<char>(rules_in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(rules.empty());
  std::ifstream changed_in(d + "/changed_files.txt");
  const std::string changed((std::istreambuf_iterator<char>(changed_in)), std::istreambuf_iterator<char>());
  const Result by_file = Cli({"triage", "--changed-files", d + "/changed_files.txt", "--logs", d + "/logs"});
  Result by_pipe;
  {
    FifoWriter c("changed.fifo", changed);
    FifoWriter r("rules.fifo.yaml", rules);
    by_pipe = Cli({"triage", "--changed-files", c.path, "--logs", d + "/logs", "--rules", r.path});
  }
  EXPECT_EQ(by_pipe.code, by_file.code) << by_pipe.err;
  EXPECT_EQ(by_pipe.out, by_file.out);
  EXPECT_NE(by_pipe.out.find("(8 failing jobs)"), std::string::npos) << by_pipe.out;
  // A rule file past its bound (1 MiB), through a pipe: refused at the bound.
  signal(SIGPIPE, SIG_IGN);
  Result big;
  {
    FifoWriter r("big_rules.fifo.yaml", std::string((1 << 20) + 4096, '#'));
    big = Cli({"triage", "--changed-files", d + "/changed_files.txt", "--logs", d + "/logs", "--rules", r.path});
  }
  EXPECT_EQ(big.code, 2) << big.err;
  EXPECT_NE(big.err.find("larger than 1 MiB"), std::string::npos) << big.err;
}

// A log directory's devices, pipes and subdirectories are not jobs: skipped,
// never opened (a FIFO with no writer would block an open).
TEST(Cli, TriageSkipsLogEntriesThatAreNotRegularFiles) {
  const std::string d = MXVAL_TRIAGE_DATA, logs = Tmp("odd_logs");
  ASSERT_EQ(std::system(("rm -rf " + logs + " && mkdir -p " + logs + "/subdir").c_str()), 0);
  std::ifstream in(d + "/logs/cpu-extension.log");
  std::ofstream(logs + "/cpu-extension.log") << in.rdbuf();
  ASSERT_EQ(::symlink("/dev/zero", (logs + "/zero.log").c_str()), 0);
  ASSERT_EQ(::mkfifo((logs + "/fifo.log").c_str(), 0600), 0);
  const Result r = Cli({"triage", "--changed-files", d + "/changed_files.txt", "--logs", logs, "--base-logs", logs,
                        "--format", "json"});
  ASSERT_NE(r.code, 2) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_EQ(j["jobs"].size(), 1u) << r.out;
  EXPECT_EQ(j["jobs"][0]["name"], "cpu-extension");
}

TEST(Cli, HugeOutputsAreRefusedBeforeAllocating) {
  // 1 x 65536 x 32 activations and 65536 x 16 weights (12 MiB of files): the
  // [1, 65536, 65536] fp32 output would be 16 GiB.
  const int64_t M = 65536, N = 65536, K = 32;
  ASSERT_TRUE(SaveNpy(Tmp("hx.npy"), HostTensor::Zeros(DType::kF32, {1, M, K})).ok());
  ASSERT_TRUE(SaveNpy(Tmp("hwp.npy"), HostTensor::Zeros(DType::kU8, {1, N, K / 2})).ok());
  ASSERT_TRUE(SaveNpy(Tmp("hws.npy"), HostTensor::Zeros(DType::kU8, {1, N, K / 32})).ok());
  Result r = Cli({"reference", "--x", Tmp("hx.npy"), "--w-packed", Tmp("hwp.npy"), "--w-scales", Tmp("hws.npy"), "--out",
                  Tmp("hy.npy")});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--x [1, 65536, 32], --w-packed [1, 65536, 16], --w-scales [1, 65536, 1]: the output "
                       "[1, 65536, 65536] would need"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("over the cap of 4 GiB"), std::string::npos) << r.err;
  // dequantize: 1 GiB of packed bytes (a sparse file) would make 8 GiB of fp32.
  std::string header = "{'descr': '|u1', 'fortran_order': False, 'shape': (65536, 16384), }\n";
  std::string lie("\x93NUMPY\x01\x00", 8);
  lie += static_cast<char>(header.size() & 0xFF);
  lie += static_cast<char>(header.size() >> 8);
  std::ofstream(Tmp("sparse.npy"), std::ios::binary) << lie << header;
  ASSERT_EQ(::truncate(Tmp("sparse.npy").c_str(), static_cast<off_t>(lie.size() + header.size()) + (off_t{1} << 30)), 0);
  r = Cli({"dequantize", "--packed", Tmp("sparse.npy"), "--scales", Tmp("hws.npy"), "--out", Tmp("o.npy")});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--packed [65536, 16384], --scales [1, 65536, 1]: the float32 output would need"), std::string::npos)
      << r.err;
  ::unlink(Tmp("sparse.npy").c_str());
}

TEST(Cli, OverlappingSafetensorsExitTwo) {
  const std::string data(64, '\x7f');
  nlohmann::json h = {{"w_kc", {{"dtype", "U8"}, {"shape", {1, 2, 16}}, {"data_offsets", {0, 32}}}},
                      {"w_kc_scale", {{"dtype", "U8"}, {"shape", {1, 2, 1}}, {"data_offsets", {30, 32}}}}};
  const std::string hs = h.dump();
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((hs.size() >> (8 * i)) & 0xFF);
  std::ofstream(Tmp("overlap.safetensors"), std::ios::binary) << file << hs << data;
  const Result r = Cli({"run", "--w-packed", Tmp("overlap.safetensors") + "#w_kc", "--w-scales",
                        Tmp("overlap.safetensors") + "#w_kc_scale", "--m", "1", "--reps", "1"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("entries 'w_kc' and 'w_kc_scale' overlap"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace mxval
