#include "service/triage/log_triage.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "re2/re2.h"
#include "service/triage/change_index.h"

namespace mxval {
namespace triage {
namespace {

constexpr v1::TriageConfidence kHigh = v1::TRIAGE_CONFIDENCE_HIGH;
constexpr v1::TriageConfidence kMedium = v1::TRIAGE_CONFIDENCE_MEDIUM;
constexpr v1::TriageConfidence kLow = v1::TRIAGE_CONFIDENCE_LOW;

// Stronger first (HIGH = 1 < MEDIUM = 2 < LOW = 3).
bool Stronger(v1::TriageConfidence a, v1::TriageConfidence b) { return a < b; }

absl::string_view Tail(const std::string& log, size_t cap, bool* truncated) {
  *truncated = log.size() > cap;
  absl::string_view v(log);
  if (!*truncated) return v;
  v.remove_prefix(log.size() - cap);
  const size_t nl = v.find('\n');  // start at a line boundary
  if (nl != absl::string_view::npos) v.remove_prefix(nl + 1);
  return v;
}

// Text from a log or a caller for the response: at most n bytes, valid
// UTF-8, control characters (terminal escapes) replaced.
std::string Clip(absl::string_view s, size_t n = 200) {
  std::string out = ToValidUtf8(s.substr(0, std::min(s.size(), n)));
  for (char& c : out)
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) c = '?';
  if (s.size() > n) out += "...";
  return out;
}

// What stays the same when a failure repeats: addresses, numbers, PIDs,
// timestamps and directory prefixes are masked.
std::string Normalize(absl::string_view s) {
  std::string out;
  out.reserve(std::min<size_t>(s.size(), 256));
  size_t i = 0;
  while (i < s.size() && out.size() < 200) {
    const char c = s[i];
    if (c == '0' && i + 1 < s.size() && (s[i + 1] == 'x' || s[i + 1] == 'X')) {
      i += 2;
      while (i < s.size() && absl::ascii_isxdigit(s[i])) ++i;
      out += "#";
      continue;
    }
    if (absl::ascii_isdigit(c)) {
      while (i < s.size() && (absl::ascii_isdigit(s[i]) || s[i] == '.' || s[i] == ':' || s[i] == ',')) ++i;
      out += "#";
      continue;
    }
    if (c == '/') {  // keep a path's last component only
      const size_t start = out.find_last_of(" '\"(=");
      out.erase(start == std::string::npos ? 0 : start + 1);
      ++i;
      continue;
    }
    if (absl::ascii_isspace(c)) {
      if (!out.empty() && out.back() != ' ') out += ' ';
      ++i;
      continue;
    }
    out += c;
    ++i;
  }
  return out;
}

struct Event {
  int64_t line = 0;             // the line that names it
  int64_t begin = 0, end = 0;   // its lines
  int rule = -1;                // -1: an exception no rule names
  int block = -1;
  std::vector<int64_t> inner;  // lines inside the block that a rule names
  std::string signature, key;
  bool infra = false, runner = false, consequence = false, report = false, survived = false;
  bool runner_late = false;  // a runner fault long after the first real failure
  bool unmatched = false;    // a failed test no rule names: the root cause only when nothing else is
};

struct Analysis {
  LogModel model;
  std::vector<Event> events;  // in log order
  int root = -1;
  // How the root cause was chosen:
  //   0  the runner is unusable (anywhere in the log: it explains the rest)
  //   1  the first fatal event
  //   2  the first infrastructure consequence or test report (nothing said why)
  //   3  a failed test the log reports in words no rule knows
  //   4  the last infrastructure event announced as survived (retried):
  //      the job ended after it with nothing else fatal
  //   5  only a non-infrastructure consequence (the step's exit code)
  int tier = -1;
  std::set<std::string> fatal_keys;
};

// A line of a stack dump (pytest-timeout, faulthandler, py-spy, gdb).
bool IsDumpLine(absl::string_view s) {
  static const RE2 re(
      R"(^(?:\s*File "[^"]+", line \d+|\s*~+ Stack of |\s*Thread 0x[0-9a-f]+|Current thread 0x|\s*\S+\.py:\d+: in \S+|#\d+\s+0x[0-9a-f]+ in ))");
  return RE2::PartialMatch(re2::StringPiece(s.data(), s.size()), re);
}

// A line announcing that what failed just before is tried again.
bool Retries(absl::string_view s) {
  static const RE2 re(
      R"((?i)(retrying|will retry|retry(?:ing)? in \d|\bretry \d|attempt \d+ ?(?:/|of) ?\d+|\[retry)|\bRERUN\b)");
  return RE2::PartialMatch(re2::StringPiece(s.data(), std::min<size_t>(s.size(), 400)), re);
}

Analysis Analyze(absl::string_view log, const LogClassifier& c, const LogTriageOptions& o) {
  Analysis a;
  a.model = ParseLog(log, o.model);
  const LogModel& m = a.model;
  const int64_t n = static_cast<int64_t>(m.lines.size());
  const v1::LogRules& rules = c.rules();
  std::vector<char> covered(n, 0);
  for (int bi = 0; bi < static_cast<int>(m.blocks.size()); ++bi) {
    const Block& b = m.blocks[bi];
    for (int64_t i = b.begin; i <= b.end && i < n; ++i) covered[i] = 1;
    Event e;
    e.block = bi;
    e.begin = b.begin;
    e.end = b.end;
    e.line = b.exception_line >= 0 ? b.exception_line : b.end;
    std::string sig;
    const std::string exception = b.exception.empty() ? "(a traceback without its exception line)" : b.exception;
    int best = c.MatchLine(exception, &sig);
    auto consider = [&](int64_t from, int64_t to) {
      for (int64_t i = from; i <= to && i <= b.end; ++i) {
        std::string s2;
        const int r = c.MatchLine(m.lines[i], &s2);
        if (r >= 0 && (best < 0 || r < best)) best = r, sig = s2;
      }
    };
    consider(e.line + 1, e.line + 4);  // the message's further lines
    if (b.final_exception_line > e.line) consider(b.final_exception_line, b.final_exception_line + 4);
    // Lines inside the block that name a known failure (a refused connection
    // a test printed before its assertion): shown with the root cause.
    for (int64_t i = b.begin + 1; i < e.line && e.inner.size() < 2; ++i) {
      if (c.MatchLine(m.lines[i], nullptr) >= 0) e.inner.push_back(i);
    }
    e.rule = best;
    e.signature = Clip(exception);
    // The same failure: the same exception raised at the same place (the
    // innermost frame's file and function), or in the same test.
    std::string where = b.test;
    if (!b.frames.empty()) {
      const Frame& f = b.frames.back();
      where = absl::StrCat(f.path.substr(f.path.find_last_of('/') + 1), ":", f.function);
    }
    e.key = b.exception.empty() ? absl::StrCat("unfinished traceback at line ", b.begin)  // never "the same"
                                : absl::StrCat(best >= 0 ? rules.rules(best).name() : "exception", "|",
                                               Normalize(exception), "|", where);
    if (best >= 0) {
      const v1::LogRule& r = rules.rules(best);
      e.infra = r.infra();
      e.runner = r.runner();
      e.consequence = r.consequence();
    }
    e.survived = b.survived;  // a block is never a bare report: it says why
    a.events.push_back(std::move(e));
  }
  static const RE2 kSkipped(R"((?:\bSKIPPED\b|\bXFAIL\b|\bxfail\b|^\[  SKIPPED \]|skipped 'requires))");
  for (int64_t i = 0; i < n; ++i) {
    if (covered[i]) continue;
    std::string sig;
    const int r = c.MatchLine(m.lines[i], &sig);
    if (r < 0) continue;
    if (RE2::PartialMatch(m.lines[i], kSkipped)) continue;  // a skip reason ("device_count() == 0") is no failure
    const v1::LogRule& rule = rules.rules(r);
    Event e;
    e.line = i;
    e.begin = std::max<int64_t>(0, i - 2);
    e.end = i;
    e.rule = r;
    e.signature = Clip(sig);
    e.key = Normalize(sig);
    e.infra = rule.infra();
    e.runner = rule.runner();
    e.consequence = rule.consequence();
    e.report = rule.report();
    e.survived = AnnouncesSurvival(m.lines[i]) || (i + 1 < n && Retries(m.lines[i + 1]));
    // A timeout's thread dump right after it is part of it (where the job hung).
    int64_t k = i + 1;
    while (k < n && k <= i + 3 && !IsDumpLine(m.lines[k])) ++k;
    if (k < n && k <= i + 3) {
      while (k < n && k <= i + 400 && (IsDumpLine(m.lines[k]) || m.lines[k].empty() || m.lines[k][0] == ' ')) ++k;
      e.end = k - 1;
    }
    // A failure retried right after its dump (pytest-rerunfailures' RERUN) survived.
    for (int64_t r = e.end + 1; r < n && r <= e.end + 3 && !e.survived; ++r)
      if (Retries(m.lines[r])) e.survived = true;
    // A build step's error: from ninja's "FAILED: <target>" line that ran it.
    if (rule.name() == "compile-error") {
      for (int64_t b = i - 1; b >= 0 && b >= i - 30; --b)
        if (absl::StartsWith(m.lines[b], "FAILED: ")) {
          e.begin = b;
          break;
        }
    }
    a.events.push_back(std::move(e));
  }
  // A test runner that reported a failed test in words no rule knows
  // ("test_x.py failed with exit code 1"): that report.
  if (!m.failing_tests.empty()) {
    std::set<int64_t> event_lines;
    for (const Event& e : a.events) event_lines.insert(e.line);
    for (const FailingTest& t : m.failing_tests) {
      if (event_lines.count(t.line) || covered[t.line]) continue;
      Event e;
      e.line = t.line;
      e.begin = std::max<int64_t>(0, t.line - 2);
      e.end = t.line;
      e.signature = Clip(absl::StrCat("failed test ", t.id));
      e.key = absl::StrCat("failed-test|", Normalize(t.id));
      e.report = true;
      e.unmatched = true;
      a.events.push_back(std::move(e));
    }
  }
  std::stable_sort(a.events.begin(), a.events.end(), [](const Event& x, const Event& y) { return x.line < y.line; });
  // A runner message on a plain line after which tests still pass (an
  // environment probe in a job that needs no GPU) did not make the runner
  // unusable.
  int64_t last_pass = -1;
  for (int64_t i = n - 1; i >= 0 && last_pass < 0; --i)
    if (PassedLine(m.lines[i])) last_pass = i;
  // ... unless the runner complains again later (a GPU test's own error).
  int64_t last_runner = -1;
  for (int64_t i = n - 1; i >= 0 && last_runner < 0; --i) {
    const int r = c.MatchLine(m.lines[i], nullptr);
    if (r >= 0 && rules.rules(r).runner()) last_runner = i;
  }
  for (Event& e : a.events)
    if (e.runner && e.block < 0 && last_pass > e.line && last_runner <= e.line) e.survived = true;
  // A line that announces the failure block right after it ("FAIL: test_x
  // (mod.C.test_x)", "ERROR: Exception in ASGI application:") is that block.
  std::vector<Event> kept;
  for (size_t i = 0; i < a.events.size(); ++i) {
    const Event& e = a.events[i];
    bool header = false;
    const std::string& text = m.lines[e.line];
    const bool announces = e.report || (!text.empty() && text.back() == ':');
    if (e.block < 0 && !e.consequence && !e.runner && announces) {
      auto next = std::upper_bound(m.blocks.begin(), m.blocks.end(), e.line,
                                   [](int64_t line, const Block& b) { return line < b.begin; });
      header = next != m.blocks.end() && next->begin <= e.line + 3;
    }
    if (!header) kept.push_back(e);
  }
  a.events = std::move(kept);
  // A runner fault explains the failures around it: it is the root cause
  // when it shows before the first fatal event or within a few lines after
  // it ("No HIP GPUs are available" right after the assertion that counted
  // them); one long after a real failure is not its cause.
  int64_t first_fatal_end = -1;
  for (const Event& e : a.events)
    if (!e.runner && !e.consequence && !e.report && !e.survived) {
      first_fatal_end = e.end;
      break;
    }
  for (Event& e : a.events)
    if (e.runner && first_fatal_end >= 0 && e.line > first_fatal_end + 10) e.runner_late = true;
  for (int tier = 0; tier < 6 && a.root < 0; ++tier) {
    for (int i = 0; i < static_cast<int>(a.events.size()); ++i) {
      const Event& e = a.events[i];
      bool fits = false;
      switch (tier) {
        case 0: fits = e.runner && !e.survived && !e.runner_late; break;
        case 1: fits = !e.consequence && !e.report && !e.survived; break;
        case 2: fits = !e.survived && !e.unmatched && ((e.consequence && e.infra) || e.report); break;
        case 3: fits = e.unmatched; break;
        case 4: fits = !e.consequence && e.survived && e.infra; break;
        default: fits = !e.survived && e.consequence; break;
      }
      if (fits) {
        a.root = i;
        a.tier = tier;
        if (tier != 4) break;  // of failures that were retried, the last one is what the job ended on
      }
    }
  }
  for (const Event& e : a.events)
    if (!e.survived) a.fatal_keys.insert(e.key);
  return a;
}

// Collects evidence, one entry per (kind, changed file, detail), merging lines.
class EvidenceSet {
 public:
  static constexpr size_t kMaxItems = 1000;
  // Line numbers are reported counting the lines the model dropped.
  explicit EvidenceSet(int64_t offset) : offset_(offset) {}
  void Add(const std::string& kind, const std::string& detail, int64_t line, int file, const ChangeIndex& idx,
           bool at_root, v1::TriageConfidence strength) {
    const std::string key = absl::StrCat(kind, "\n", detail);
    auto it = items_.find(key);
    if (it == items_.end()) {
      if (items_.size() >= kMaxItems) return;  // a log naming thousands of changed things: the first are enough
      v1::TriageEvidence ev;
      ev.set_kind(kind);
      ev.set_detail(Clip(detail, 400));
      if (file >= 0) ev.set_changed_file(Clip(idx.files()[file].path, 400));
      ev.set_at_root(at_root);
      ev.set_strength(strength);
      it = items_.emplace(key, std::move(ev)).first;
    } else {
      v1::TriageEvidence& ev = it->second;
      if (Stronger(strength, ev.strength())) ev.set_strength(strength);
      if (at_root) ev.set_at_root(true);
    }
    if (line >= 0 && it->second.lines_size() < 5) {
      bool dup = false;
      for (int64_t l : it->second.lines()) dup = dup || l == line + 1 + offset_;
      if (!dup) it->second.add_lines(line + 1 + offset_);
    }
  }
  std::vector<v1::TriageEvidence> Sorted() const {
    std::vector<v1::TriageEvidence> v;
    for (const auto& [_, ev] : items_) v.push_back(ev);
    std::stable_sort(v.begin(), v.end(), [](const v1::TriageEvidence& a, const v1::TriageEvidence& b) {
      if (a.strength() != b.strength()) return Stronger(a.strength(), b.strength());
      if (a.at_root() != b.at_root()) return a.at_root();
      return (a.lines_size() ? a.lines(0) : 0) < (b.lines_size() ? b.lines(0) : 0);
    });
    return v;
  }
  bool Any(v1::TriageConfidence at_least, bool root_only) const {
    for (const auto& [_, ev] : items_)
      if (!Stronger(at_least, ev.strength()) && (!root_only || ev.at_root()) && ev.kind() != "ownership-unreachable")
        return true;
    return false;
  }
  bool Has(const std::string& kind) const {
    for (const auto& [_, ev] : items_)
      if (ev.kind() == kind) return true;
    return false;
  }

 private:
  std::map<std::string, v1::TriageEvidence> items_;
  int64_t offset_ = 0;
};

// "path:12: WARNING: ...", "path(12): error ...": a tool's diagnostic
// about the path just before `rest`.
bool Diagnostic(absl::string_view rest) {
  static const RE2 re(R"(^(?:\(\d+\)|:\d+(?::\d+)?):? (?:warning|error|WARNING|ERROR|Error|Warning)\b)");
  return RE2::PartialMatch(re2::StringPiece(rest.data(), std::min<size_t>(rest.size(), 64)), re);
}

// A flag or switch printed switched on ("enable_x=True", "X=1"); a printed
// default ("x='auto'", "x=False") is not use of it.
bool SwitchedOn(absl::string_view rest) {
  rest = absl::StripLeadingAsciiWhitespace(rest);
  if (rest.empty() || (rest[0] != '=' && rest[0] != ':')) return false;
  rest.remove_prefix(1);
  rest = absl::StripLeadingAsciiWhitespace(rest);
  if (!rest.empty() && (rest[0] == '\'' || rest[0] == '"')) rest.remove_prefix(1);
  for (const char* on : {"True", "true", "1", "on", "On", "ON", "yes", "Yes"}) {
    if (absl::StartsWith(rest, on)) {
      const absl::string_view after = rest.substr(strlen(on));
      if (after.empty() || !absl::ascii_isalnum(after[0])) return true;
    }
  }
  return false;
}

bool IsTokenChar(char c) {
  return absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '/' || c == '-' || c == '+';
}

bool HasSourceExtension(absl::string_view t) {
  const size_t dot = t.rfind('.');
  if (dot == absl::string_view::npos) return false;
  static const std::set<std::string> kExt = {"py", "pyx", "pyi", "cc", "cpp", "cxx", "c", "h", "hpp", "cu", "cuh",
                                             "hip", "json", "yaml", "yml", "toml", "sh", "cfg", "ini", "txt", "rs",
                                             "go", "js", "ts", "csv", "cmake", "mlir", "ll", "s", "rst", "md", "in"};
  return kExt.count(std::string(t.substr(dot + 1))) > 0;
}

struct JobContext {
  const Analysis& a;
  const ChangeIndex& idx;
  int64_t root_begin = -1, root_end = -1;
  int detail = -1;  // a later block that reports the same failure as a line root (a timeout's test report)
  std::vector<std::pair<int64_t, int64_t>> later;  // later independent failures' lines
};

void ScanTokens(const JobContext& jc, EvidenceSet* ev, int max_lines) {
  const LogModel& m = jc.a.model;
  const ChangeIndex& idx = jc.idx;
  std::vector<ChangeIndex::SymbolHit> hits;
  absl::flat_hash_map<std::string, ChangeIndex::PathHit> path_cache;
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(m.lines.size()), max_lines);
  std::vector<char> later(n, 0);
  for (const auto& [b, e] : jc.later)
    for (int64_t li = std::max<int64_t>(b, 0); li <= e && li < n; ++li) later[li] = 1;
  for (int64_t li = 0; li < n; ++li) {
    const std::string& s = m.lines[li];
    const Block* detail = jc.detail >= 0 ? &m.blocks[jc.detail] : nullptr;
    const bool at_root = (li >= jc.root_begin && li <= jc.root_end) ||
                         (detail != nullptr && li >= detail->begin && li <= detail->end);
    const bool in_later = later[li];
    size_t i = 0;
    while (i < s.size()) {
      if (!IsTokenChar(s[i])) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < s.size() && IsTokenChar(s[j])) ++j;
      absl::string_view tok(s.data() + i, j - i);
      const absl::string_view rest(s.data() + j, s.size() - j);
      i = j;
      const bool flag_token = absl::StartsWith(tok, "--");
      while (!tok.empty() && (tok.back() == '.' || tok.back() == '-' || tok.back() == '/')) tok.remove_suffix(1);
      if (!flag_token)
        while (!tok.empty() && (tok.front() == '-' || tok.front() == '.')) tok.remove_prefix(1);
      if (tok.size() < 3 || tok.size() > 512) continue;
      if (tok.find('/') != absl::string_view::npos || HasSourceExtension(tok)) {
        // Logs repeat paths: each distinct one is matched once.
        auto cached = path_cache.find(std::string(tok));
        if (cached == path_cache.end()) {
          if (path_cache.size() > 200000) path_cache.clear();
          cached = path_cache.emplace(std::string(tok), idx.MatchPath(tok)).first;
        }
        const ChangeIndex::PathHit h = cached->second;
        if (h.file >= 0) {
          if (at_root) {
            ev->Add("frame-in-changed-file", absl::StrCat("the failure runs through ", idx.files()[h.file].path), li,
                    h.file, idx, true, kHigh);
          } else if (in_later) {
            ev->Add("frame-in-changed-file", absl::StrCat("a later failure runs through ", idx.files()[h.file].path),
                    li, h.file, idx, false, kMedium);
          } else if (Diagnostic(rest)) {
            ev->Add("diagnostic-in-changed-file",
                    absl::StrCat("the job reports a problem in ", idx.files()[h.file].path), li, h.file, idx, false,
                    kMedium);
          } else {
            ev->Add("changed-file-mentioned", absl::StrCat("the log names ", idx.files()[h.file].path), li, h.file,
                    idx, false, kLow);
          }
        }
      } else if (tok.find('.') != absl::string_view::npos) {
        const ChangeIndex::PathHit h = idx.MatchModule(tok);
        if (h.file >= 0) {
          ev->Add("changed-module",
                  absl::StrCat(at_root ? "the failure names module " : "the job loads module ", Clip(tok, 120),
                               " of ", idx.files()[h.file].path),
                  li, h.file, idx, at_root, at_root ? kMedium : kLow);
        }
      }
      hits.clear();
      if (flag_token) idx.MatchWord(tok, &hits);
      size_t w = 0;
      while (w < tok.size()) {
        if (!(absl::ascii_isalnum(tok[w]) || tok[w] == '_')) {
          ++w;
          continue;
        }
        size_t e = w;
        while (e < tok.size() && (absl::ascii_isalnum(tok[e]) || tok[e] == '_')) ++e;
        if (e - w >= 4) idx.MatchWord(tok.substr(w, e - w), &hits);
        w = e;
      }
      idx.MatchTableOps(absl::AsciiStrToLower(tok), &hits);
      for (const ChangeIndex::SymbolHit& h : hits) {
        const std::string& file = idx.files()[h.file].path;
        switch (h.kind) {
          case ChangeIndex::Symbol::kKernel:
            ev->Add("changed-kernel",
                    absl::StrCat(at_root ? "the failure names kernel " : "the job runs kernel ", h.name, ", which ",
                                 file, " changes"),
                    li, h.file, idx, at_root, at_root ? kHigh : kMedium);
            break;
          case ChangeIndex::Symbol::kFunction:
            // A bare name may be another file's function of the same name;
            // RootFrames credits a frame whose file matches too.
            ev->Add("changed-function",
                    absl::StrCat(at_root ? "the failure names " : "the log names ", h.name, "(), changed in ", file), li,
                    h.file, idx, at_root, kLow);
            break;
          case ChangeIndex::Symbol::kFlag:
          case ChangeIndex::Symbol::kEnv: {
            // On: passed on a command line ("--x"), or printed switched on
            // ("x=True", "X=1"). A printed default ("x='auto'") is not use.
            const bool off = !flag_token && !SwitchedOn(rest);
            const char* what = h.kind == ChangeIndex::Symbol::kFlag ? "flag " : "environment switch ";
            ev->Add("changed-flag",
                    absl::StrCat("the job ", off ? "shows, without turning it on, " : "turns on ", what, h.name, ", which ",
                                 file, " introduces"),
                    li, h.file, idx, at_root, off ? kLow : kMedium);
            break;
          }
          case ChangeIndex::Symbol::kTableOp:
            ev->Add("changed-table",
                    absl::StrCat(at_root ? "the failure is in op " : "the job runs op ", h.name, ", whose tuning table ",
                                 file, " changes"),
                    li, h.file, idx, at_root, at_root ? kMedium : kLow);
            break;
        }
      }
    }
  }
}

// Frames of the root cause: a changed function in a changed file.
void RootFrames(const JobContext& jc, const Event& root, EvidenceSet* ev) {
  const int block = root.block >= 0 ? root.block : jc.detail;
  if (block < 0) return;
  const Block& b = jc.a.model.blocks[block];
  for (const Frame& f : b.frames) {
    const ChangeIndex::PathHit h = jc.idx.MatchPath(f.path);
    if (h.file < 0 || f.function.empty()) continue;
    if (jc.idx.ChangesFunction(h.file, f.function)) {
      ev->Add("changed-function",
              absl::StrCat("the failure runs through ", f.function, "() in ", jc.idx.files()[h.file].path,
                           ", which the diff changes"),
              f.line, h.file, jc.idx, true, kHigh);
    }
  }
}

// The names a failing test goes by: its file's stem, its suite and its
// function ("tests/test_quant.py::test_col_major[a-b]" -> test_quant,
// test_col_major; "QuantSuite.Case" -> QuantSuite, Case).
std::vector<std::string> TestNames(const FailingTest& t) {
  std::vector<std::string> out;
  if (!t.file.empty()) {
    std::string stem = t.file.substr(t.file.find_last_of('/') + 1);
    out.push_back(stem.substr(0, stem.find('.')));
  }
  std::string id = t.id.substr(0, t.id.find('['));
  for (absl::string_view part : absl::StrSplit(id, absl::ByAnyChar(":./")))
    if (!part.empty() && !absl::EndsWith(part, "py")) out.emplace_back(part);
  return out;
}

void TestEvidence(const JobContext& jc, EvidenceSet* ev, bool* test_added) {
  for (const FailingTest& t : jc.a.model.failing_tests) {
    for (const std::string& name : TestNames(t)) {
      const int f = jc.idx.MatchTestName(name);
      if (f < 0) continue;
      ev->Add("test-of-changed-code",
              absl::StrCat("the failing test ", Clip(t.id, 160), " is named for ", jc.idx.files()[f].path,
                           ", which the change modifies"),
              t.line, f, jc.idx, false, kMedium);
      break;
    }
    if (t.file.empty()) continue;
    const ChangeIndex::PathHit h = jc.idx.MatchPath(t.file);
    if (h.file < 0) continue;
    const ChangedFile& f = jc.idx.files()[h.file];
    if (f.added) {
      *test_added = true;
      ev->Add("test-added", absl::StrCat("the failing test ", Clip(t.id, 160), " is in ", f.path, ", which the change adds"),
              t.line, h.file, jc.idx, false, kHigh);
    } else {
      ev->Add("test-changed",
              absl::StrCat("the failing test ", Clip(t.id, 160), " is in ", f.path, ", which the change modifies"),
              t.line, h.file, jc.idx, false, kHigh);
    }
  }
}

// The root cause's lines for the report: the block's first line, frames in
// changed files, its last frame and its exception line; or a rule match
// with the lines before it.
std::vector<int64_t> RootLines(const Analysis& a, const Event& root, const ChangeIndex& idx) {
  std::set<int64_t> out;
  if (root.block >= 0) {
    const Block& b = a.model.blocks[root.block];
    out.insert(b.begin);
    int shown = 0;
    for (const Frame& f : b.frames)
      if (shown < 3 && idx.MatchPath(f.path).file >= 0) out.insert(f.line), ++shown;
    if (!b.frames.empty()) out.insert(b.frames.back().line);
    out.insert(root.line);
    if (root.line + 1 <= b.end && out.size() < 8) out.insert(root.line + 1);
  } else {
    for (int64_t l = root.begin; l <= root.end; ++l) out.insert(l);
  }
  for (int64_t l : root.inner) out.insert(l);
  if (root.block >= 0 && a.model.blocks[root.block].final_exception_line > root.line)
    out.insert(a.model.blocks[root.block].final_exception_line);
  // The runner's other complaints, and a failure that was retried before
  // it stuck: its first attempt.
  int more = 0;
  for (const Event& e : a.events)
    if (root.runner && e.runner && !e.survived && e.line > root.line && e.key != root.key && more < 2)
      out.insert(e.line), ++more;
  for (const Event& e : a.events) {
    if (e.line >= root.line) break;
    if (e.rule == root.rule && e.rule >= 0 && e.survived) {
      out.insert(e.line);
      break;
    }
  }
  return std::vector<int64_t>(out.begin(), out.end());
}

// Where a traceback locates its failure, when that is project code the
// change does not modify: the innermost frame that is neither the standard
// library nor a third-party package (an installed package counts as the
// project's when a changed path names it), unless it is a test. "" otherwise.
std::string UnchangedPlace(const Analysis& a, const Event& root, const ChangeIndex& idx) {
  if (root.block < 0) return "";
  const Block& b = a.model.blocks[root.block];
  for (auto it = b.frames.rbegin(); it != b.frames.rend(); ++it) {
    const std::string& p = it->path;
    if (p.empty() || p[0] == '<') continue;  // <string>, <frozen ...>
    size_t pkg_at = p.find("site-packages/");
    if (pkg_at == std::string::npos) pkg_at = p.find("dist-packages/");
    if (pkg_at != std::string::npos) {
      const size_t start = pkg_at + 14;
      const std::string package = p.substr(start, p.find('/', start) - start);
      if (!idx.NamesComponent(package)) continue;  // a third-party package
    } else if (absl::StrContains(p, "/lib/python3") || absl::StartsWith(p, "/usr/lib/")) {
      continue;  // the standard library
    }
    if (idx.MatchPath(p).file >= 0) return "";
    const std::string base = p.substr(p.find_last_of('/') + 1);
    if (absl::StartsWith(base, "test_") || absl::StrContains(base, "_test.") || absl::StrContains(p, "/tests/") ||
        absl::StrContains(p, "/test/") || base == "conftest.py")
      return "";  // a test's own assertion: job-level evidence applies
    return absl::StrCat(Clip(p, 200), it->function.empty() ? "" : absl::StrCat(" (", Clip(it->function, 80), ")"));
  }
  return "";
}

v1::LogLine MakeLine(const LogModel& m, int64_t i) {
  v1::LogLine l;
  l.set_number(i + 1 + m.line_offset);
  l.set_text(Clip(m.lines[i], 600));
  return l;
}

std::string Phrase(const v1::TriageEvidence& e) {
  std::string s = e.detail();
  if (e.lines_size() > 0) absl::StrAppend(&s, " (line ", e.lines(0), ")");
  return s;
}

void Decide(const v1::CiJobLog& job, const Analysis& a, const Analysis* base, const ChangeIndex& idx,
            const Ownership& ownership, const std::vector<std::string>& changed, const v1::LogRules& rules,
            const LogTriageOptions& o, v1::JobTriage* t) {
  const LogModel& m = a.model;
  for (const FailingTest& ft : m.failing_tests) {
    if (t->failing_tests_size() >= o.max_failing_tests) break;
    t->add_failing_tests(Clip(ft.id, 200));
  }
  EvidenceSet ev(m.line_offset);
  JobContext jc{a, idx};
  auto same_on_base = [&](const Event& e) {
    // A consequence (connection refused, a kill) is common noise: it matches
    // only the base's own root cause.
    return e.consequence ? (base->root >= 0 && base->events[base->root].key == e.key) : base->fatal_keys.count(e.key) > 0;
  };
  int root_i = a.root;
  std::string hidden;  // the base's failure that came first, when a new one follows it
  if (base != nullptr && root_i >= 0 && same_on_base(a.events[root_i])) {
    // A failure the base shares does not hide a new one after it.
    for (int i = root_i + 1; i < static_cast<int>(a.events.size()); ++i) {
      const Event& e = a.events[i];
      if (e.consequence || e.survived || (e.block < 0 && !e.report)) continue;
      if (!same_on_base(e)) {
        hidden = absl::StrCat("'", a.events[root_i].signature, "' (line ", a.events[root_i].line + 1 + m.line_offset,
                              ") fails the merge base too");
        root_i = i;
        break;
      }
    }
  }
  const Event* root = root_i >= 0 ? &a.events[root_i] : nullptr;
  if (root != nullptr) {
    jc.root_begin = root->begin;
    jc.root_end = root->end;
    // A rule's line (a timeout) that a later failure block of the same rule
    // reports in detail (pytest's timeout with the hung stack): one failure.
    if (root->block < 0 && root->rule >= 0) {
      for (int i = root_i + 1; i < static_cast<int>(a.events.size()); ++i) {
        const Event& e = a.events[i];
        if (e.block >= 0 && e.rule == root->rule) {
          jc.detail = e.block;
          break;
        }
      }
    }
    for (int i = root_i + 1; i < static_cast<int>(a.events.size()); ++i) {
      const Event& e = a.events[i];
      if (e.block >= 0 && !e.consequence && !e.survived && e.key != root->key) jc.later.emplace_back(e.begin, e.end);
    }
  }
  bool test_added = false;
  if (!idx.empty()) {
    ScanTokens(jc, &ev, static_cast<int>(std::min<size_t>(m.lines.size(), 2000000)));
    if (root != nullptr) RootFrames(jc, *root, &ev);
    TestEvidence(jc, &ev, &test_added);
  }
  const Reach reach = ownership.JobReach(job.name(), changed);
  for (const std::string& f : reach.files) {
    if (t->reaching_files_size() >= 20) break;  // the map may link a job to thousands of files
    t->add_reaching_files(Clip(f, 400));
  }
  if (reach.reachability == v1::REACHABILITY_REACHES) {
    std::vector<std::string> shown(reach.files.begin(), reach.files.begin() + std::min<size_t>(reach.files.size(), 3));
    ev.Add("ownership", absl::StrCat("the ownership map links the job to ", absl::StrJoin(shown, ", ")), -1, -1, idx,
           false, kMedium);
  } else if (reach.reachability == v1::REACHABILITY_UNREACHABLE) {
    ev.Add("ownership-unreachable", "the ownership map covers the job and links it to no changed file", -1, -1, idx,
           false, kLow);
  }

  const bool have_base = base != nullptr;
  bool base_same = false;
  std::string base_phrase;
  if (!hidden.empty()) ev.Add("base-same", absl::StrCat(hidden, "; this failure after it does not"), -1, -1, idx, false, kMedium);
  if (have_base && root != nullptr) {
    base_same = same_on_base(*root);
    if (base_same && !test_added) {
      for (const Event& be : base->events) {
        if (be.key != root->key || be.survived) continue;
        ev.Add("base-same", absl::StrCat("the merge base fails the same way at its line ", be.line + 1 + base->model.line_offset), -1, -1, idx,
               false, kHigh);
        break;
      }
    } else if (base->root >= 0) {
      const Event& br = base->events[base->root];
      base_phrase = absl::StrCat("the merge base failed differently (", Clip(br.signature, 120), " at its line ",
                                 br.line + 1 + base->model.line_offset, ")");
      ev.Add("base-different", base_phrase, -1, -1, idx, false, kMedium);
    } else {
      base_phrase = "the merge base's log shows no such failure";
      ev.Add("base-passed", base_phrase, -1, -1, idx, false, kMedium);
    }
  }

  // The root cause and what followed it.
  if (root != nullptr) {
    t->set_rule(root->rule >= 0 ? rules.rules(root->rule).name() : "exception");
    t->set_signature(root->signature);
    t->set_infra(root->infra);
    std::vector<int64_t> lines = RootLines(a, *root, idx);
    if (jc.detail >= 0) {  // the report that details it: where it shows in changed code
      const Block& d = m.blocks[jc.detail];
      int shown = 0;
      for (const Frame& f : d.frames)
        if (shown < 3 && idx.MatchPath(f.path).file >= 0) lines.push_back(f.line), ++shown;
      if (d.exception_line >= 0) lines.push_back(d.exception_line);
      std::sort(lines.begin(), lines.end());
      lines.erase(std::unique(lines.begin(), lines.end()), lines.end());
    }
    // A summary line ("build finished with problems") stands for the
    // diagnostics before it: those about changed files are part of the root.
    if (root->block < 0) {
      int shown = 0;
      for (const v1::TriageEvidence& e : ev.Sorted())
        if (e.kind() == "diagnostic-in-changed-file" && e.lines_size() > 0 && shown++ < 2) lines.push_back(e.lines(0) - 1 - m.line_offset);
      std::sort(lines.begin(), lines.end());
      lines.erase(std::unique(lines.begin(), lines.end()), lines.end());
    }
    for (int64_t l : lines) *t->add_matched_lines() = MakeLine(m, l);
    for (int i = root_i + 1; i < static_cast<int>(a.events.size()) && t->consequences_size() < o.max_consequences;
         ++i) {
      const Event& e = a.events[i];
      if (e.consequence || (e.rule >= 0 && rules.rules(e.rule).consequence())) *t->add_consequences() = MakeLine(m, e.line);
    }
  }
  t->set_base_failed_same(base_same && !test_added);
  for (const v1::TriageEvidence& e : ev.Sorted()) {
    if (t->evidence_size() >= o.max_evidence) break;
    *t->add_evidence() = e;
  }
  const bool root_strong = ev.Any(kHigh, true);
  const bool root_medium = ev.Any(kMedium, true);
  const bool job_strong = ev.Has("test-added") || ev.Has("test-changed");
  bool job_medium = false;
  for (const char* k : {"changed-kernel", "changed-flag", "ownership", "frame-in-changed-file", "test-of-changed-code",
                        "diagnostic-in-changed-file"}) {
    for (const v1::TriageEvidence& e : ev.Sorted())
      if (e.kind() == k && e.strength() != kLow) job_medium = true;
  }
  const bool any_reach = root_strong || root_medium || job_strong || job_medium;
  t->set_reachability(any_reach ? v1::REACHABILITY_REACHES
                                : reach.reachability == v1::REACHABILITY_UNREACHABLE ? v1::REACHABILITY_UNREACHABLE
                                                                                      : v1::REACHABILITY_UNKNOWN);
  const std::vector<v1::TriageEvidence> sorted = ev.Sorted();
  auto top = [&](std::initializer_list<const char*> kinds) -> std::string {
    for (const v1::TriageEvidence& e : sorted)
      for (const char* k : kinds)
        if (e.kind() == k) return Phrase(e);
    return "";
  };
  const std::string reach_phrase =
      top({"test-added", "changed-function", "frame-in-changed-file", "changed-kernel", "test-changed", "changed-table",
           "test-of-changed-code", "diagnostic-in-changed-file", "changed-flag", "changed-module", "ownership"});

  auto set = [&](v1::TriageClass c, const std::string& decision, v1::TriageConfidence conf, std::string why,
                 std::string next, std::string missing) {
    t->set_triage_class(c);
    t->set_decision(decision);
    t->set_confidence(conf);
    t->set_reason(std::move(why));
    t->set_next_step(std::move(next));
    t->set_missing(std::move(missing));
  };
  const std::string base_missing = "the merge base's log of this job";
  if (root == nullptr || a.tier == 5) {
    const std::string last = m.lines.empty() ? "the log is empty" : absl::StrCat("its last line: '", Clip(m.lines.back(), 120), "'");
    set(v1::TRIAGE_CLASS_UNKNOWN, "no-root-cause", kLow,
        root == nullptr ? absl::StrCat("no failure message in ", m.lines.size(), " lines (", last, ")")
                        : absl::StrCat("only the exit status '", root->signature, "' (line ", root->line + 1 + m.line_offset,
                                       "); no failure message before it"),
        "check that the log is complete (a cut-off or empty log has no cause to read) and re-run the job once",
        "a failure message: no traceback, failed test or known error line");
    return;
  }
  const std::string sig = absl::StrCat("'", root->signature, "' (line ", root->line + 1 + m.line_offset, ")");
  const std::string tier_note = a.tier == 4 ? " [the log's only failure was announced as survived or retried]" : "";
  const bool firm = a.tier <= 1;
  if (t->base_failed_same()) {
    set(v1::TRIAGE_CLASS_PRE_EXISTING, "base-same", firm ? kHigh : kMedium,
        absl::StrCat(sig, " also fails the merge base"), "", "");
    return;
  }
  const std::string base_suffix = have_base ? absl::StrCat("; ", base_phrase) : "";
  if (root->runner) {
    set(v1::TRIAGE_CLASS_INFRA, "runner", firm || a.tier == 0 ? kHigh : kLow,
        absl::StrCat("the runner is unusable: ", sig, base_suffix), "re-run the job on a healthy runner", "");
    return;
  }
  if (root->infra) {
    if (root_strong || test_added) {
      set(v1::TRIAGE_CLASS_PR_TOUCHED, "infra-in-changed-code", kMedium,
          absl::StrCat(sig, " in code the change reaches: ", reach_phrase, base_suffix),
          "re-run this job once: if it fails the same way, the change causes it", "");
    } else {
      const bool thin = root_medium || job_strong || job_medium || !firm;
      set(v1::TRIAGE_CLASS_INFRA, "infra", thin ? kLow : (have_base ? kHigh : kMedium),
          absl::StrCat("infrastructure failure ", sig,
                       !reach_phrase.empty() ? absl::StrCat(", though ", reach_phrase, " (not at the failure)")
                                             : std::string("; nothing links it to the change"),
                       base_suffix, tier_note),
          thin || !have_base ? "re-run this job once" : "", "");
    }
    return;
  }
  // Job-level evidence (a switch turned on, a kernel run) does not outweigh
  // a traceback that locates the failure in code the change leaves alone.
  const std::string elsewhere = root_strong || root_medium || job_strong ? "" : UnchangedPlace(a, *root, idx);
  if (!elsewhere.empty() && job_medium) {
    set(v1::TRIAGE_CLASS_UNTOUCHED_FAILURE, "raised-in-unchanged-code", kLow,
        absl::StrCat(sig, " is raised in ", elsewhere, ", which the change does not modify, though ", reach_phrase,
                     base_suffix),
        have_base ? "re-run this job once; if it fails again, look for how the change reaches " + elsewhere
                  : "run this job on the merge base: if it fails there too, the failure is pre-existing",
        have_base ? "" : base_missing);
    return;
  }
  if (root_strong || root_medium || job_strong || job_medium) {
    const bool strong = root_strong || job_strong;
    const std::string decision = (root_strong || root_medium) ? "root-reachable" : "job-runs-changed-code";
    v1::TriageConfidence conf = strong ? (have_base || test_added ? kHigh : kMedium) : kMedium;
    if (a.tier == 4) conf = kLow;
    if ((a.tier == 2 || a.tier == 3) && conf == kHigh) conf = kMedium;
    set(v1::TRIAGE_CLASS_PR_TOUCHED, decision, conf, absl::StrCat(sig, ": ", reach_phrase, base_suffix, tier_note),
        conf == kHigh ? "" : have_base ? "re-run this job once to confirm" : "compare with this job on the merge base",
        have_base || test_added ? "" : base_missing);
    return;
  }
  const std::string weak = top({"changed-module", "changed-file-mentioned", "changed-function", "changed-flag",
                                "changed-table"});
  set(v1::TRIAGE_CLASS_UNTOUCHED_FAILURE, "not-reachable", have_base ? kMedium : kLow,
      absl::StrCat(sig, ": no frame, failing test, kernel or switch of the change appears in the failure",
                   weak.empty() ? "" : absl::StrCat(" (only: ", weak, ")"), base_suffix, tier_note),
      have_base ? "re-run this job once; if it fails again, the change reaches it by a path the log does not show"
                : "run this job on the merge base: if it fails there too, the failure is pre-existing",
      have_base ? "evidence linking the failure to the change" : base_missing);
}

}  // namespace

absl::StatusOr<v1::TriageLogsResponse> TriageLogs(const v1::TriageLogsRequest& req, const LogClassifier& classifier,
                                                  const Ownership& ownership, const LogTriageOptions& o) {
  if (req.jobs_size() == 0) return absl::InvalidArgumentError("jobs: empty (send each failing CI job's log)");
  if (req.jobs_size() > o.max_jobs) {
    return absl::InvalidArgumentError(absl::StrCat("jobs: ", req.jobs_size(), " jobs (at most ", o.max_jobs, ")"));
  }
  if (req.changed_files_size() > o.max_changed_files) {
    return absl::InvalidArgumentError(
        absl::StrCat("changed_files: ", req.changed_files_size(), " files (at most ", o.max_changed_files, ")"));
  }
  PrDiff diff;
  bool have_diff = false;
  if (!req.diff().empty()) {
    DiffLimits dl = o.diff;
    dl.max_files = std::min(dl.max_files, o.max_changed_files);
    auto d = ParseUnifiedDiff(req.diff(), dl);
    if (!d.ok()) return absl::InvalidArgumentError(d.status().message());
    diff = std::move(*d);
    have_diff = true;
  }
  std::vector<std::string> changed(req.changed_files().begin(), req.changed_files().end());
  for (const DiffFile& f : diff.files) changed.push_back(f.path);
  const ChangeIndex idx(std::vector<std::string>(req.changed_files().begin(), req.changed_files().end()),
                        have_diff ? &diff : nullptr);
  std::set<std::string> names;
  for (int i = 0; i < req.jobs_size(); ++i) {
    const v1::CiJobLog& job = req.jobs(i);
    if (job.name().empty()) return absl::InvalidArgumentError(absl::StrCat("jobs[", i, "].name: empty"));
    if (job.name().size() > 256) return absl::InvalidArgumentError(absl::StrCat("jobs[", i, "].name: longer than 256 bytes"));
    if (!names.insert(job.name()).second) {
      return absl::InvalidArgumentError(absl::StrCat("jobs[", i, "].name: '", Clip(job.name(), 80), "' appears twice"));
    }
  }
  v1::TriageLogsResponse resp;
  for (const v1::CiJobLog& job : req.jobs()) {
    if (o.cancelled && o.cancelled()) return absl::CancelledError("the caller went away");
    v1::JobTriage* t = resp.add_jobs();
    t->set_name(Clip(job.name(), 256));
    bool truncated = false, base_truncated = false;
    const Analysis a = Analyze(Tail(job.log(), o.max_log_bytes, &truncated), classifier, o);
    t->set_truncated(truncated || job.truncated());
    std::optional<Analysis> base;
    if (!job.base_log().empty()) base = Analyze(Tail(job.base_log(), o.max_log_bytes, &base_truncated), classifier, o);
    Decide(job, a, base ? &*base : nullptr, idx, ownership, changed, classifier.rules(), o, t);
    if (truncated) t->set_reason(absl::StrCat(t->reason(), " [log truncated to its last ", o.max_log_bytes, " bytes]"));
    else if (job.truncated()) t->set_reason(absl::StrCat(t->reason(), " [only the log's tail was sent; lines count from it]"));
  }
  return resp;
}

}  // namespace triage
}  // namespace mxval
