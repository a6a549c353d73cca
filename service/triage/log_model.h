// A CI log read as structure: its lines without runner decoration
// (timestamps, ANSI colours), the failure blocks in it (Python tracebacks
// with their chained causes, faulthandler dumps, pytest failure sections,
// GoogleTest failures) with the frames they name, and the tests it reports
// as failed. Everything is bounded: lines are read on their first
// max_line_bytes, a block on its first max_block_lines lines, and at most
// max_blocks blocks are kept.
#ifndef MXVAL_SERVICE_TRIAGE_LOG_MODEL_H_
#define MXVAL_SERVICE_TRIAGE_LOG_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace mxval {
namespace triage {

struct LogModelLimits {
  size_t max_line_bytes = 8192;
  int64_t max_block_lines = 4000;
  int max_blocks = 2000;
  int max_failing_tests = 500;
  int64_t max_lines = 250000;  // longer logs: their last max_lines lines
};

struct Frame {
  int64_t line = 0;      // 0-based index into LogModel::lines
  std::string path;      // as the log spells it
  std::string function;  // may be empty
};

enum class BlockKind { kPythonTraceback, kFatalPython, kPytest, kGtest, kSanitizer };

// One failure as the log prints it: from its first line to the end of its
// exception message, chained Python causes included.
struct Block {
  BlockKind kind = BlockKind::kPythonTraceback;
  int64_t begin = 0, end = 0;    // inclusive line indices
  int64_t exception_line = -1;   // the line naming the exception / failure (a chain's first: its cause); -1: none
  int64_t final_exception_line = -1;  // a chain's last exception (what propagated); -1: none
  std::string exception;         // that line, without the block's prefix
  std::string exception_type;    // "RuntimeError", "torch.OutOfMemoryError", "Failure"
  std::vector<Frame> frames;
  std::string test;              // the test a pytest/gtest block belongs to
  // Printed and survived: a warning, "Exception ignored", a retry or a
  // fallback announced next to it.
  bool survived = false;
};

struct FailingTest {
  std::string id;    // "test/srt/test_x.py::TestX::test_y", "Suite.Case", "test_mod.TestC.test_y"
  std::string file;  // the test's file as far as the log tells ("test_x.py"); may be empty
  int64_t line = 0;  // 0-based
};

struct LogModel {
  std::vector<std::string> lines;  // decoration removed, capped at max_line_bytes
  int64_t line_offset = 0;         // lines dropped before lines[0] (max_lines)
  std::vector<Block> blocks;       // by first line; a server traceback captured inside a pytest section nests in it
  std::vector<FailingTest> failing_tests;
  // The innermost block that contains a line, or -1.
  int BlockAt(int64_t line) const;
};

// A test result line that says a test passed (pytest, GoogleTest, unittest, TAP, CTest).
bool PassedLine(absl::string_view line);

// Removes a GitHub Actions / Buildkite timestamp prefix and ANSI escapes.
std::string StripDecoration(absl::string_view line);

LogModel ParseLog(absl::string_view log, const LogModelLimits& limits = {});

// Words next to a printed failure that say the program went on: a warning,
// "Exception ignored", a retry, a fallback.
bool AnnouncesSurvival(absl::string_view line);

// Python's exception line shape: "pkg.mod.SomeError: message" or "SomeError".
bool LooksLikeExceptionLine(absl::string_view line);

}  // namespace triage
}  // namespace mxval

#endif  // MXVAL_SERVICE_TRIAGE_LOG_MODEL_H_
