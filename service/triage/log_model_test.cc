#include "service/triage/log_model.h"

#include "gtest/gtest.h"

namespace mxval::triage {
namespace {

TEST(LogModel, StripsRunnerDecoration) {
  EXPECT_EQ(StripDecoration("2026-11-30T14:02:11.4838291Z \x1b[31mERROR\x1b[0m x"), "ERROR x");
  EXPECT_EQ(StripDecoration("[2026-11-30T14:02:11Z] pytest -v"), "pytest -v");
  EXPECT_EQ(StripDecoration("\x1b_bk;t=1733000000000\x07--- :pytest: run"), "--- :pytest: run");
  EXPECT_EQ(StripDecoration("plain\r"), "plain");
}

TEST(LogModel, ChainedTracebackWithPrefixAndInterleavedLines) {
  const char* log =
      "2026-11-30T14:02:11.0000000Z [2026-11-30 14:05:01 TP0] Scheduler hit an exception: Traceback (most recent "
      "call last):\n"
      "2026-11-30T14:02:11.0000000Z   File \"/opt/venv/lib/python3.12/site-packages/pkg/srt/managers/scheduler.py\", "
      "line 10, in run\n"
      "2026-11-30T14:02:11.0000000Z     self.step()\n"
      "2026-11-30T14:02:11.0000000Z [2026-11-30 14:05:01 TP1] Decode batch. #running-req: 3\n"
      "2026-11-30T14:02:11.0000000Z   File \"/opt/venv/lib/python3.12/site-packages/pkg/srt/layers/mxfp4.py\", line "
      "99, in apply\n"
      "2026-11-30T14:02:11.0000000Z KeyError: 'w13_scale'\n"
      "\n"
      "During handling of the above exception, another exception occurred:\n"
      "\n"
      "Traceback (most recent call last):\n"
      "  File \"/x/runner.py\", line 5, in main\n"
      "RuntimeError: HIP error: an illegal memory access was encountered\n"
      "HIP kernel errors might be asynchronously reported at some other API call\n"
      "[2026-11-30 14:05:02] Server exited\n";
  const LogModel m = ParseLog(log);
  ASSERT_EQ(m.blocks.size(), 1u);
  const Block& b = m.blocks[0];
  EXPECT_EQ(b.begin, 0);
  EXPECT_EQ(b.exception_line, 5) << "a chain's first exception is its cause";
  EXPECT_EQ(b.exception, "KeyError: 'w13_scale'");
  EXPECT_EQ(b.final_exception_line, 11);
  EXPECT_EQ(b.end, 12) << "the message's second line belongs to it; the next record does not";
  ASSERT_EQ(b.frames.size(), 3u);
  EXPECT_EQ(b.frames[1].function, "apply");
  EXPECT_EQ(b.frames[1].line, 4);
  EXPECT_FALSE(b.survived);
  EXPECT_EQ(m.BlockAt(4), 0);
  EXPECT_EQ(m.BlockAt(13), -1);
}

TEST(LogModel, PerLinePrefixesAndSurvivedTracebacks) {
  const char* log =
      "[rank0]: Traceback (most recent call last):\n"
      "[rank1]: Traceback (most recent call last):\n"
      "[rank0]:   File \"/w/model.py\", line 3, in forward\n"
      "[rank0]: torch.OutOfMemoryError: HIP out of memory\n"
      "WARNING: optional import failed, falling back\n"
      "Traceback (most recent call last):\n"
      "  File \"/w/opt.py\", line 1, in <module>\n"
      "ImportError: No module named 'flash_attn'\n";
  const LogModel m = ParseLog(log);
  ASSERT_GE(m.blocks.size(), 2u);
  EXPECT_EQ(m.blocks[0].exception, "torch.OutOfMemoryError: HIP out of memory");
  EXPECT_EQ(m.blocks[0].exception_type, "torch.OutOfMemoryError");
  EXPECT_EQ(m.blocks.back().exception_type, "ImportError");
  EXPECT_TRUE(m.blocks.back().survived) << "announced by the warning before it";
}

TEST(LogModel, PytestGtestUnittestAndSuiteFailures) {
  const char* log =
      "=================================== FAILURES ===================================\n"
      "_____________________________ TestMoE.test_accuracy _____________________________\n"
      "test/srt/test_moe.py:42: in test_accuracy\n"
      "    self.assertGreater(acc, 0.72)\n"
      "E   AssertionError: 0.61 not greater than 0.72\n"
      "----------------------------- Captured stderr call -----------------------------\n"
      "Traceback (most recent call last):\n"
      "  File \"/srv/pkg/server.py\", line 9, in launch\n"
      "ValueError: bad config\n"
      "=========================== short test summary info ============================\n"
      "FAILED test/srt/test_moe.py::TestMoE::test_accuracy - AssertionError: 0.61 not greater than 0.72\n"
      "[ RUN      ] Gemm.Ragged\n"
      "kernels/gemm_test.cc:88: Failure\n"
      "Expected equality of these values:\n"
      "[  FAILED  ] Gemm.Ragged (3 ms)\n"
      "FAIL: test_gsm8k (test_eval.TestEval.test_gsm8k)\n"
      "Test file test/srt/test_slow.py timed out after 1800 seconds\n";
  const LogModel m = ParseLog(log);
  ASSERT_EQ(m.blocks.size(), 3u);
  EXPECT_EQ(m.blocks[0].kind, BlockKind::kPytest);
  EXPECT_EQ(m.blocks[0].test, "TestMoE.test_accuracy");
  EXPECT_EQ(m.blocks[0].exception, "AssertionError: 0.61 not greater than 0.72");
  EXPECT_EQ(m.blocks[0].end, 4) << "captured output is not the test's failure";
  EXPECT_EQ(m.blocks[1].kind, BlockKind::kPythonTraceback) << "a traceback in captured output is read too";
  EXPECT_EQ(m.blocks[2].kind, BlockKind::kGtest);
  ASSERT_EQ(m.blocks[2].frames.size(), 1u);
  EXPECT_EQ(m.blocks[2].frames[0].path, "kernels/gemm_test.cc");
  std::vector<std::string> ids, files;
  for (const FailingTest& t : m.failing_tests) ids.push_back(t.id), files.push_back(t.file);
  EXPECT_EQ(ids, (std::vector<std::string>{"test/srt/test_moe.py::TestMoE::test_accuracy", "Gemm.Ragged",
                                           "test_eval.TestEval.test_gsm8k", "test/srt/test_slow.py"}));
  EXPECT_EQ(files[2], "test_eval.py");
}

TEST(LogModel, SanitizerReportsAndUnknownExceptionNames) {
  const char* log =
      "[ RUN      ] HeaderParser.TruncatedShape\n"
      "=================================================================\n"
      "==4242==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000000051 at pc 0x5f\n"
      "READ of size 1 at 0x602000000051 thread T0\n"
      "    #0 0x55d4c3 in tpack::parse_shape(char const*) /src/header_parser.cc:96:12\n"
      "    #1 0x55d9a1 in HeaderParser_TruncatedShape_Test::TestBody() /src/tests/header_parser_test.cc:40:3\n"
      "SUMMARY: AddressSanitizer: heap-buffer-overflow /src/header_parser.cc:96:12 in tpack::parse_shape\n"
      "==4242==ABORTING\n"
      "src/half.cc:22:15: runtime error: shift exponent 32 is too large for 32-bit type 'unsigned int'\n"
      "Traceback (most recent call last):\n"
      "  File \"/venv/site-packages/kforge/ops/gemm.py\", line 9, in run\n"
      "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 98304\n";
  const LogModel m = ParseLog(log);
  ASSERT_EQ(m.blocks.size(), 3u);
  EXPECT_EQ(m.blocks[0].kind, BlockKind::kSanitizer);
  EXPECT_EQ(m.blocks[0].begin, 2) << "inside a test that crashed without a FAILED line";
  EXPECT_EQ(m.blocks[0].end, 6);
  ASSERT_EQ(m.blocks[0].frames.size(), 2u);
  EXPECT_EQ(m.blocks[0].frames[0].path, "header_parser.cc");
  EXPECT_EQ(m.blocks[0].frames[0].function, "tpack::parse_shape");
  EXPECT_EQ(m.blocks[1].kind, BlockKind::kSanitizer);
  ASSERT_EQ(m.blocks[1].frames.size(), 1u);
  EXPECT_EQ(m.blocks[1].frames[0].path, "src/half.cc");
  EXPECT_EQ(m.blocks[2].exception_type, "triton.runtime.errors.OutOfResources");
}

TEST(LogModel, ExceptionLineShape) {
  EXPECT_TRUE(LooksLikeExceptionLine("RuntimeError: x"));
  EXPECT_TRUE(LooksLikeExceptionLine("triton.compiler.errors.CompilationError: at 12:4:"));
  EXPECT_TRUE(LooksLikeExceptionLine("KeyboardInterrupt"));
  EXPECT_FALSE(LooksLikeExceptionLine("INFO: started"));
  EXPECT_FALSE(LooksLikeExceptionLine("[2026-11-30 14:05:01 TP1] Decode batch"));
  EXPECT_FALSE(LooksLikeExceptionLine("Error: something"));
}

TEST(LogModel, BoundedOnHostileInput) {
  std::string log = "Traceback (most recent call last):\n";
  for (int i = 0; i < 50000; ++i) log += "  File \"x.py\", line 1, in f\n";
  log += std::string(100000, 'y') + "\n";
  LogModelLimits l;
  l.max_block_lines = 1000;
  l.max_line_bytes = 512;
  const LogModel m = ParseLog(log, l);
  ASSERT_FALSE(m.blocks.empty());
  EXPECT_LE(m.blocks[0].end - m.blocks[0].begin, 1000);
  EXPECT_LE(m.lines.back().size(), 512u);
}

}  // namespace
}  // namespace mxval::triage
