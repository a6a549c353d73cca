#include "service/triage/log_model.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "re2/re2.h"

namespace mxval {
namespace triage {
namespace {

re2::StringPiece SP(absl::string_view s) { return re2::StringPiece(s.data(), s.size()); }

const RE2& PyFrame() {
  // `  File "p", line 12, in f` (traceback) and `  File "p", line 12 in f` (faulthandler).
  static const RE2 re(R"re(^\s*File "([^"]+)", line (\d+),? ?(?:in (\S+))?)re");
  return re;
}

bool Indented(absl::string_view s) { return !s.empty() && (s[0] == ' ' || s[0] == '\t'); }


// Words (not a log level) that say the program went on past a failure.
bool AnnouncesGoingOn(absl::string_view s) {
  static const RE2 words(
      R"((?i)(exception ignored|ignored exception|non-?fatal|\bretry\b|retrying|will try again|\btry(?:ing)? to (?:compile|build|rebuild|reload|install)|falling back|fall back|fallback|continuing|skipping|recovered))");
  return RE2::PartialMatch(SP(s), words);
}

// An exception line whose name LooksLikeExceptionLine does not know
// ("triton.runtime.errors.OutOfResources: ...", "RayTaskError(ValueError): ...",
// "_pytest.outcomes.Failed: ..."): a dotted name, optionally called, then ": ".
// Accepted only right after a traceback's frames.
bool RaisedLine(absl::string_view s) {
  static const RE2 re(R"(^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:\([\w.]*\))?: \S)");
  static const RE2 level(R"(^(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL|NOTE|Note|Hint|Error|Warning):)");
  return RE2::PartialMatch(SP(s), re) && !RE2::PartialMatch(SP(s), level);
}


// A line that starts a new log record (not part of an exception message).
bool StartsRecord(absl::string_view s) {
  static const RE2 re(
      R"(^(?:\[|\(|\d{4}-\d\d-\d\d|[IWEF]\d{4} |(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\b|Traceback \(|During handling|The above exception|##\[|=+ |_{3,}|[A-Z][\w.]*(?:Error|Exception)\w*:|[^\s]+\.py::))");
  return RE2::PartialMatch(SP(s), re);
}

class Parser {
 public:
  Parser(LogModel* m, const LogModelLimits& l) : m_(*m), l_(l) {}

  void Run() {
    const int64_t n = static_cast<int64_t>(m_.lines.size());
    for (int64_t i = 0; i < n; ++i) {
      if (static_cast<int>(m_.blocks.size()) >= l_.max_blocks) break;
      const std::string& s = m_.lines[i];
      const size_t tb = s.find("Traceback (most recent call last):");
      if (tb != std::string::npos) {
        i = PythonTraceback(i, s.substr(0, tb));
        continue;
      }
      if (absl::StartsWith(s, "Fatal Python error:")) {
        i = FatalPython(i);
        continue;
      }
      if (IsPytestFailuresHeader(s)) {
        PytestSection(i);  // tracebacks in its captured output are read by this loop too
        continue;
      }
      if (absl::StartsWith(s, "[ RUN      ] ")) {
        Gtest(i);  // lines inside a test (a sanitizer report) are read by this loop too
        continue;
      }
      if (SanitizerStart(s)) i = Sanitizer(i);
    }
    std::stable_sort(m_.blocks.begin(), m_.blocks.end(),
                     [](const Block& a, const Block& b) { return a.begin < b.begin; });
    FailingTests();
  }

 private:
  // Returns the last line of the traceback (chained causes included).
  int64_t PythonTraceback(int64_t i, std::string prefix) {
    const int64_t n = static_cast<int64_t>(m_.lines.size());
    Block b;
    b.kind = BlockKind::kPythonTraceback;
    b.begin = i;
    // Per-line prefixes ("[rank0]: ") repeat on every line; a log record's
    // header ("[... TP0] Scheduler hit an exception: ") only on the first.
    bool repeats = false;
    for (int64_t k = i + 1; !prefix.empty() && k < n && k <= i + 10 && !repeats; ++k)
      repeats = absl::StartsWith(m_.lines[k], prefix);
    if (!repeats) prefix.clear();
    if (absl::StrContains(absl::AsciiStrToLower(prefix), "warn")) b.survived = true;
    int skipped = 0;
    bool chained = false;  // a chain marker was read: the next "Traceback" continues this block
    int64_t j = i + 1;
    int64_t last = i;
    for (; j < n && j - i < l_.max_block_lines; ++j) {
      absl::string_view body = m_.lines[j];
      if (!prefix.empty()) {
        if (!absl::StartsWith(body, prefix)) {
          if (++skipped > 200) break;  // other ranks' lines interleave
          continue;
        }
        body.remove_prefix(prefix.size());
      }
      re2::StringPiece path, func;
      if (RE2::PartialMatch(SP(body), PyFrame(), &path, static_cast<void*>(nullptr), &func)) {
        b.frames.push_back({j, std::string(path), std::string(func)});
        last = j;
        continue;
      }
      // Another traceback starts: this one ended without its exception line
      // (unless a chain marker announced it).
      if (absl::StrContains(body, "Traceback (most recent call last):")) {
        if (!chained) break;
        chained = false;
        continue;
      }
      if (b.frames.empty() && j > i + 5) break;  // the words, not a traceback
      if (Indented(body)) {
        last = j;
        continue;
      }
      if (body.empty()) {
        if (++skipped > 20) break;
        continue;
      }
      if (!LooksLikeExceptionLine(body) && !(b.frames.size() > 0 && RaisedLine(body))) {
        if (++skipped > 20) break;  // another process's line in the middle
        continue;
      }
      // In a chain the first exception is the cause ("During handling of
      // the above exception ..."); the last is what propagated.
      if (b.exception_line < 0) {
        b.exception_line = j;
        b.exception = std::string(body);
        b.exception_type = std::string(body.substr(0, body.find(':')));
      }
      b.final_exception_line = j;
      last = j;
      // The message may go on for a few lines (CUDA's "...might be asynchronously reported").
      int64_t k = j + 1;
      for (; k < n && k <= j + 4; ++k) {
        absl::string_view c = m_.lines[k];
        if (!prefix.empty()) {
          if (!absl::StartsWith(c, prefix)) break;
          c.remove_prefix(prefix.size());
        }
        if (c.empty() || StartsRecord(c) || LooksLikeExceptionLine(c) || absl::StartsWith(c, "  File ")) break;
        last = k;
      }
      // A chained cause: "During handling ..." / "The above exception ...", then the next traceback.
      int64_t c = last + 1;
      while (c < n && c <= last + 3 && Body(c, prefix).empty()) ++c;
      if (c < n && (absl::StartsWith(Body(c, prefix), "During handling of the above exception") ||
                    absl::StartsWith(Body(c, prefix), "The above exception was the direct cause"))) {
        j = c;
        skipped = 0;
        chained = true;
        continue;
      }
      break;
    }
    b.end = std::max(last, b.exception_line);
    if (b.exception_line < 0 && b.frames.empty()) return i;  // a mention of the words, not a traceback
    if (b.exception_type.size() > 7 && absl::EndsWith(b.exception_type, "Warning")) b.survived = true;
    // The line before (not a warning level: another process's record may
    // sit there) or the lines after announce that the program went on.
    if (i > 0 && AnnouncesGoingOn(m_.lines[i - 1]) && !absl::StrContains(m_.lines[i - 1], "Traceback")) b.survived = true;
    for (int64_t k = b.end + 1; k < n && k <= b.end + 3; ++k)
      if (AnnouncesGoingOn(m_.lines[k])) b.survived = true;
    // A server that comes up after the traceback survived it.
    static const RE2 kReady(
        R"((?i)(fired up and ready|application startup complete|uvicorn running on|ready to roll|server is ready|started server process))");
    for (int64_t k = b.end + 1; k < n && k <= b.end + 50 && !b.survived; ++k)
      if (RE2::PartialMatch(SP(m_.lines[k]), kReady)) b.survived = true;
    m_.blocks.push_back(std::move(b));
    return last;
  }

  absl::string_view Body(int64_t j, const std::string& prefix) const {
    absl::string_view s = m_.lines[j];
    if (!prefix.empty() && absl::StartsWith(s, prefix)) s.remove_prefix(prefix.size());
    return s;
  }

  int64_t FatalPython(int64_t i) {
    const int64_t n = static_cast<int64_t>(m_.lines.size());
    Block b;
    b.kind = BlockKind::kFatalPython;
    b.begin = i;
    b.exception_line = i;
    b.exception = m_.lines[i];
    b.exception_type = "Fatal Python error";
    int64_t last = i;
    for (int64_t j = i + 1; j < n && j - i < l_.max_block_lines; ++j) {
      const std::string& s = m_.lines[j];
      re2::StringPiece path, func;
      if (RE2::PartialMatch(SP(s), PyFrame(), &path, static_cast<void*>(nullptr), &func)) {
        b.frames.push_back({j, std::string(path), std::string(func)});
        last = j;
      } else if (s.empty() || absl::StartsWith(s, "Current thread") || absl::StartsWith(s, "Thread 0x") ||
                 absl::StartsWith(s, "Stack (most recent") || absl::StartsWith(s, "Extension modules") ||
                 absl::StartsWith(s, "Python runtime state") || Indented(s)) {
        last = j;
      } else {
        break;
      }
    }
    b.end = last;
    m_.blocks.push_back(std::move(b));
    return last;
  }

  // "_ _ _ _": pytest's separator between the frames of one failure.
  static bool IsSeparator(absl::string_view s) { return s.find_first_not_of("_ ") == absl::string_view::npos; }

  static bool IsPytestFailuresHeader(absl::string_view s) {
    static const RE2 re(R"(^=+ (?:FAILURES|ERRORS) =+$)");
    return RE2::FullMatch(SP(s), re);
  }

  // The FAILURES / ERRORS section: one block per "____ test ____" part.
  void PytestSection(int64_t i) {
    static const RE2 kHeader(R"(^_+ (.+?) _+$)");
    static const RE2 kFrame(R"(^([^\s:]+\.py):(\d+): (?:in (\S+)|(\S+)))");
    static const RE2 kCaptured(R"(^-+ (?:Captured|captured) .* -+$)");
    const int64_t n = static_cast<int64_t>(m_.lines.size());
    int64_t j = i + 1;
    while (j < n) {
      std::string test;
      if (absl::StartsWith(m_.lines[j], "=")) break;  // the section is over
      if (!RE2::FullMatch(SP(m_.lines[j]), kHeader, &test) || IsSeparator(test)) {
        ++j;
        continue;
      }
      Block b;
      b.kind = BlockKind::kPytest;
      b.begin = j;
      b.test = test;
      int64_t k = j + 1;
      bool captured = false;
      for (; k < n && k - j < l_.max_block_lines; ++k) {
        const std::string& s = m_.lines[k];
        std::string next;
        if (absl::StartsWith(s, "=") || (RE2::FullMatch(SP(s), kHeader, &next) && !IsSeparator(next))) break;
        if (RE2::FullMatch(SP(s), kCaptured)) captured = true;
        if (captured) continue;  // captured output is the test's logs, not its failure
        b.end = k;
        re2::StringPiece path, func, exc;
        if (RE2::PartialMatch(SP(s), kFrame, &path, static_cast<void*>(nullptr), &func, &exc)) {
          b.frames.push_back({k, std::string(path), std::string(func)});
          if (!exc.empty() && b.exception_line < 0 && LooksLikeExceptionLine(absl::string_view(exc.data(), exc.size()))) {
            b.exception_line = k;
            b.exception = std::string(exc);
            b.exception_type = b.exception;
          }
        } else if (absl::StartsWith(s, "E ")) {
          const absl::string_view e = absl::StripLeadingAsciiWhitespace(absl::string_view(s).substr(1));
          if (b.exception_line < 0 || (b.kind == BlockKind::kPytest && !LooksLikeExceptionLine(b.exception) &&
                                       LooksLikeExceptionLine(e))) {
            b.exception_line = k;
            b.exception = std::string(e);
            b.exception_type = std::string(e.substr(0, e.find(':')));
          }
        }
      }
      if (b.end < b.begin) b.end = b.begin;
      m_.blocks.push_back(std::move(b));
      j = k;
      if (static_cast<int>(m_.blocks.size()) >= l_.max_blocks) break;
    }
  }

  static bool SanitizerStart(absl::string_view s) {
    static const RE2 re(
        R"((?:^|==\d+==\s*)(?:ERROR|WARNING): (?:Address|Thread|Memory|Leak|UndefinedBehavior|HWAddress)Sanitizer\b|^\S+:\d+:\d+: runtime error: )");
    return RE2::PartialMatch(SP(s), re);
  }

  // A sanitizer report: its first line, the indented frames and notes under
  // it, through its SUMMARY line.
  int64_t Sanitizer(int64_t i) {
    static const RE2 kFrame(R"(#\d+\s+0x[0-9a-fA-F]+ in (\S+?)(?:\(.*\))? (?:\S*/)?(\S+\.(?:cc|cpp|cxx|cu|cuh|h|hpp|hip|c|inl)):\d+)");
    // The report's own lines at column 0 (ASan's access, allocation and shadow sections).
    static const RE2 kReportLine(
        R"(^(?:==|#\d|0x[0-9a-f]|Shadow|READ of|WRITE of|Previous |Location is|Thread T|allocated by|freed by|previously allocated|Address 0x|HINT:|Mutex |Direct leak|Indirect leak|\S*Sanitizer))");
    static const RE2 kUbsanPath(R"(^(\S+\.(?:cc|cpp|cxx|cu|cuh|h|hpp|hip|c|inl)):\d+:\d+: runtime error)");
    const int64_t n = static_cast<int64_t>(m_.lines.size());
    Block b;
    b.kind = BlockKind::kSanitizer;
    b.begin = i;
    b.exception_line = i;
    const std::string& first = m_.lines[i];
    const size_t at = first.find("Sanitizer");
    b.exception = first.substr(first.find_first_not_of("=0123456789 "));
    b.exception_type = at == std::string::npos ? "UndefinedBehaviorSanitizer" : "Sanitizer";
    std::string path;
    if (RE2::PartialMatch(SP(first), kUbsanPath, &path)) b.frames.push_back({i, path, ""});
    int64_t last = i;
    for (int64_t j = i + 1; j < n && j - i < l_.max_block_lines; ++j) {
      const std::string& s = m_.lines[j];
      std::string func, file;
      if (RE2::PartialMatch(SP(s), kFrame, &func, &file)) {
        b.frames.push_back({j, file, func});
        last = j;
      } else if (absl::StartsWith(s, "SUMMARY: ")) {
        last = j;
        break;
      } else if (s.empty() || Indented(s) || RE2::PartialMatch(SP(s), kReportLine)) {
        last = j;
      } else {
        break;
      }
    }
    b.end = last;
    m_.blocks.push_back(std::move(b));
    return last;
  }

  int64_t Gtest(int64_t i) {
    static const RE2 kFailure(R"(^(\S+\.(?:cc|cpp|cxx|cu|cuh|h|hpp|hip|c)):(\d+): (?:Failure|error))");
    static const RE2 kBacktrace(R"(#\d+\s+0x[0-9a-fA-F]+ in (\S+) (?:\S*/)?(\S+\.(?:cc|cpp|cxx|cu|cuh|h|hpp|hip|c)):\d+)");
    const int64_t n = static_cast<int64_t>(m_.lines.size());
    const std::string test = m_.lines[i].substr(13);
    Block b;
    b.kind = BlockKind::kGtest;
    b.begin = i;
    b.test = std::string(absl::StripAsciiWhitespace(test));
    int64_t j = i + 1;
    for (; j < n && j - i < l_.max_block_lines; ++j) {
      const std::string& s = m_.lines[j];
      if (absl::StartsWith(s, "[       OK ]") || absl::StartsWith(s, "[  SKIPPED ]")) return j;
      if (absl::StartsWith(s, "[ RUN      ]")) return j - 1;  // the next test: this one did not report
      if (absl::StartsWith(s, "[  FAILED  ]")) break;
      re2::StringPiece path, func, file;
      if (RE2::PartialMatch(SP(s), kFailure, &path)) {
        b.frames.push_back({j, std::string(path), ""});
        if (b.exception_line < 0) {
          b.exception_line = j;
          b.exception = s;
          b.exception_type = "Failure";
        }
      } else if (RE2::PartialMatch(SP(s), kBacktrace, &func, &file)) {
        b.frames.push_back({j, std::string(file), std::string(func)});
      }
    }
    if (b.exception_line < 0) return j;  // failed without a failure message (a crash): other blocks tell
    b.end = std::min(j, n - 1);
    m_.blocks.push_back(std::move(b));
    return j;
  }

  void AddTest(std::string id, std::string file, int64_t line) {
    if (static_cast<int>(m_.failing_tests.size()) >= l_.max_failing_tests) return;
    if (!seen_.insert(id).second) return;
    m_.failing_tests.push_back({std::move(id), std::move(file), line});
  }

  void FailingTests() {
    static const RE2 kPytestSummary(R"(^(?:FAILED|ERROR) (\S+?\.py)(?:::(\S+))?)");
    static const RE2 kPytestProgress(R"(^(\S+?\.py)::(\S+) (?:FAILED|ERROR)\b)");
    static const RE2 kUnittest(R"(^(?:FAIL|ERROR): (\w+) \(([\w.]+)\))");
    static const RE2 kGtest(R"(^\[  FAILED  \] ([A-Za-z_][\w/]*\.[A-Za-z_][\w/]*))");
    static const RE2 kCtest(R"(^\s*\d+ - (\S+) \((?:Failed|SEGFAULT|Subprocess aborted|Exception|Child aborted|Timeout)\))");
    static const RE2 kSuite(
        R"((?i)(?:\b(?:test file|file)\s+)?([\w./-]*test[\w.-]*\.py)\b[^\n]*?\b(?:failed|timed out|timeout|exit code [1-9]|returned non-zero|return code [1-9]))");
    static const RE2 kSuite2(R"((?i)(?:failed|timed out)[^\n]*?\b([\w./-]*test[\w.-]*\.py)\b)");
    for (int64_t i = 0; i < static_cast<int64_t>(m_.lines.size()); ++i) {
      const re2::StringPiece s = SP(m_.lines[i]);
      std::string a, b;
      if (RE2::PartialMatch(s, kPytestSummary, &a, &b) || RE2::PartialMatch(s, kPytestProgress, &a, &b)) {
        AddTest(b.empty() ? a : absl::StrCat(a, "::", b), a, i);
      } else if (RE2::PartialMatch(s, kUnittest, &a, &b)) {
        // "test_mod.TestC.test_y" / "pkg.test_mod.TestC": the module is the lower-case head.
        std::vector<std::string> parts = absl::StrSplit(b, '.');
        std::vector<std::string> mod;
        for (const std::string& p : parts) {
          if (p.empty() || absl::ascii_isupper(p[0]) || p == a) break;
          mod.push_back(p);
        }
        AddTest(b, mod.empty() ? "" : absl::StrCat(absl::StrJoin(mod, "/"), ".py"), i);
      } else if (RE2::PartialMatch(s, kGtest, &a) || RE2::PartialMatch(s, kCtest, &a)) {
        AddTest(a, "", i);
      } else if (!absl::StartsWith(m_.lines[i], "  File ") &&
                 (RE2::PartialMatch(s, kSuite, &a) || RE2::PartialMatch(s, kSuite2, &a))) {
        AddTest(a, a, i);
      }
    }
  }

  LogModel& m_;
  const LogModelLimits& l_;
  std::set<std::string> seen_;
};

}  // namespace

std::string StripDecoration(absl::string_view in) {
  std::string s;
  s.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '\x1b' && i + 1 < in.size()) {
      const char k = in[i + 1];
      size_t j = i + 2;
      if (k == '[') {  // CSI: parameters, then a final byte in @..~
        while (j < in.size() && !(in[j] >= '@' && in[j] <= '~')) ++j;
        i = j;
        continue;
      }
      if (k == ']' || k == '_') {  // OSC / APC (Buildkite's "_bk;t=..."): up to BEL or ST
        while (j < in.size() && in[j] != '\x07' && !(in[j] == '\x1b' && j + 1 < in.size() && in[j + 1] == '\\')) ++j;
        i = (j < in.size() && in[j] == '\x1b') ? j + 1 : j;
        continue;
      }
    }
    if (c == '\r') continue;
    s.push_back(c);
  }
  static const RE2 kStamp(R"(^\[?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)\]? ?)");
  re2::StringPiece sp(s);
  if (RE2::Consume(&sp, kStamp)) s.erase(0, s.size() - sp.size());
  return s;
}

// A test result line that says a test passed.
bool PassedLine(absl::string_view s) {
  static const RE2 re(R"((?:\bPASSED\b|^\[       OK \]|\.\.\. ok$|^ok \d+ |^\s*\d+/\d+ Test +#\d+: \S+ \.+ +Passed))");
  return RE2::PartialMatch(SP(s), re);
}

bool AnnouncesSurvival(absl::string_view s) {
  // A warning log level or Python warning category (not the word "warning"
  // in a message), or words that announce going on.
  static const RE2 level(R"((?:^|[\s\[(])(?:WARNING|WARN|Warning:|W\d{4} )|\w+Warning\b)");
  static const RE2 words(
      R"((?i)(exception ignored|ignored exception|non-?fatal|\bretry\b|retrying|will try again|\btry(?:ing)? to (?:compile|build|rebuild|reload|install)|falling back|fall back|fallback|continuing|skipping|recovered))");
  return RE2::PartialMatch(SP(s), level) || RE2::PartialMatch(SP(s), words);
}

bool LooksLikeExceptionLine(absl::string_view line) {
  static const RE2 re(
      R"(^(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning|Fault|Failure|Timeout|Iteration|Cancelled|Abort|Error\w+|Exception\w+)|Exception)(?::(?:\s.*)?)?$)");
  return RE2::FullMatch(SP(line), re);
}

int LogModel::BlockAt(int64_t line) const {
  int best = -1;
  for (int i = 0; i < static_cast<int>(blocks.size()); ++i) {
    const Block& b = blocks[i];
    if (b.begin > line) break;
    if (line <= b.end && (best < 0 || b.end - b.begin < blocks[best].end - blocks[best].begin)) best = i;
  }
  return best;
}

LogModel ParseLog(absl::string_view log, const LogModelLimits& l) {
  LogModel m;
  size_t pos = 0;
  // Past max_lines lines only the last max_lines are kept (failures are at the end).
  int64_t total = 0;
  for (size_t i = 0; i < log.size(); ++i) total += log[i] == '\n';
  if (!log.empty() && log.back() != '\n') ++total;
  for (int64_t skip = total - l.max_lines; skip > 0; --skip) {
    const size_t e = log.find('\n', pos);
    pos = e == absl::string_view::npos ? log.size() : e + 1;
    ++m.line_offset;
  }
  m.lines.reserve(static_cast<size_t>(std::min<int64_t>(total, l.max_lines)));
  while (pos < log.size()) {
    size_t e = log.find('\n', pos);
    if (e == absl::string_view::npos) e = log.size();
    absl::string_view raw = log.substr(pos, e - pos);
    if (raw.size() > l.max_line_bytes) raw = raw.substr(0, l.max_line_bytes);
    m.lines.push_back(StripDecoration(raw));
    pos = e + 1;
  }
  Parser(&m, l).Run();
  return m;
}

}  // namespace triage
}  // namespace mxval
