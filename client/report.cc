#include "client/report.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli.h"
#include "client/verb_util.h"
#include "kernels/dispatch/tile_config.h"
#include "proto/config_label.h"
#include "service/triage/kernel_triage.h"

namespace mxval {
namespace {

std::string OpName(v1::Op op) { return op == v1::OP_KUP ? "kup" : op == v1::OP_VUP ? "vup" : "custom"; }

std::string ShapeName(const v1::Shape& s) {
  return absl::StrCat(OpName(s.op()), " B=", s.b(), " N=", s.n(), " K=", s.k(),
                      s.x_layout() == v1::X_LAYOUT_K_STRIDED ? " x:k-strided"
                      : s.x_layout() == v1::X_LAYOUT_M_MAJOR ? " x:m-major"
                                                             : "");
}

std::string VerdictText(const v1::KernelRun& r) {
  if (r.declined()) return "declined";
  switch (r.accuracy().verdict()) {
    case v1::VERDICT_PASS: return "pass";
    case v1::VERDICT_FAIL_MISMATCH: return "fail: mismatch";
    case v1::VERDICT_FAIL_NON_FINITE: return "fail: non-finite";
    case v1::VERDICT_FAIL_UNWRITTEN: return "fail: unwritten";
    case v1::VERDICT_FAIL_CATASTROPHIC: return "fail: catastrophic";
    case v1::VERDICT_INVALID: return "invalid";
    case v1::VERDICT_ERROR: return "error";
    case v1::VERDICT_FAIL_OUT_OF_BOUNDS: return "fail: out of bounds";
    default: return "-";
  }
}

bool Infra(const v1::TaskResult& r) {
  return !r.has_baseline() && r.attempts_size() > 0 &&
         r.attempts(r.attempts_size() - 1).failure() == v1::FAILURE_CLASS_INFRA;
}

// Markdown cell: the kernel (escaped: an external library names it) and its
// config in a code span.
// " (PDL)" when it was launched with programmatic dependent launch.
std::string RunCell(const v1::KernelRun& r) {
  const std::string extras = ConfigExtras(r.config_json());
  return absl::StrCat(MarkdownEscape(r.kernel().kernel().empty() ? "(table)" : r.kernel().kernel()), " `",
                      ConfigLabel(r.config()), "`",
                      extras.empty() ? "" : absl::StrCat(" ", MarkdownEscape(extras)),
                      r.launch() == v1::LAUNCH_MODE_PDL ? " (PDL)" : "");
}

// Where a job's Python kernels ran, how long their first runs took (imports
// and JIT compilation: Triton compiles there, not in the timed launches),
// and which sides were timed with eager launches because their launches
// could not be captured into a graph (their µs include launch overhead).
std::string PythonMarkdown(const v1::Job& job) {
  std::set<std::string> envs;
  std::vector<double> first;
  std::map<std::string, int> eager;  // reason -> sides
  for (const v1::TaskResult& r : job.results()) {
    if (!r.has_python()) continue;
    const v1::PythonEnvironment& e = r.python();
    envs.insert(absl::StrCat("Python ", e.python_version(), ", PyTorch ", e.torch_version().empty() ? "-" : e.torch_version(),
                             ", Triton ", e.triton_version().empty() ? "-" : e.triton_version(), ", ", e.backend()));
    for (const v1::KernelRun* k : {&r.baseline(), &r.candidate()}) {
      if (k->kernel().format() != v1::LIBRARY_FORMAT_PYTHON) continue;
      first.push_back(k->first_run_seconds());
      if (!k->timing().eager_reason().empty() && k->timing().median_us() > 0) ++eager[k->timing().eager_reason()];
    }
  }
  if (envs.empty()) return "";
  std::string out = absl::StrCat("\nPython kernels ran in ", MarkdownEscape(absl::StrJoin(envs, "; ")), ".");
  if (!first.empty()) {
    std::sort(first.begin(), first.end());
    absl::StrAppend(&out, absl::StrFormat(" Their first runs (the library's imports in a new child, and JIT "
                                          "compilation) took %.2f s to %.2f s (median %.2f s) of %d sides.",
                                          first.front(), first.back(), first[first.size() / 2],
                                          static_cast<int>(first.size())));
  }
  for (const auto& [why, n] : eager) {
    absl::StrAppend(&out, " ", n, n == 1 ? " side was" : " sides were",
                    " timed with eager launches, not a graph (launch overhead included): ",
                    MarkdownEscape(why.substr(0, 300)), ".");
  }
  return out + "\n";
}

// Whether the job asked for PDL on the baseline / candidate side.
struct PdlSides {
  bool baseline, candidate;
  explicit PdlSides(const v1::JobSpec& spec)
      : baseline(spec.launch() == v1::LAUNCH_MODE_PDL),
        candidate(spec.candidate_launch() == v1::LAUNCH_MODE_UNSPECIFIED ? baseline
                                                                         : spec.candidate_launch() == v1::LAUNCH_MODE_PDL) {}
};

// The job's launch modes as JUnit properties when either side asked for PDL.
std::string LaunchProperties(const v1::JobSpec& spec) {
  const PdlSides pdl(spec);
  if (!pdl.baseline && !pdl.candidate) return "";
  return absl::StrCat("    <properties><property name=\"launch\" value=\"", pdl.baseline ? "pdl" : "plain",
                      "\"/><property name=\"candidate_launch\" value=\"", pdl.candidate ? "pdl" : "plain",
                      "\"/></properties>\n");
}

std::string Delta(double base, double cand) {
  if (base <= 0 || cand <= 0) return "-";
  return absl::StrFormat("%+.1f%%", 100.0 * (cand - base) / base);
}

// Whether both sides ran the same code: the whole kernel reference (library,
// kernel, build, library hash) and the whole tile config, compared as
// triage compares them (kernel_triage.cc: kernel_differs, entry_differs).
// A pull request's own kernel library under an unchanged table is a change.
// The launch each side got counts too (a PDL job runs a kernel that does
// not act on PDL plain).
bool SameKernelAndConfig(const v1::TaskResult& r) {
  return r.baseline().kernel().SerializeAsString() == r.candidate().kernel().SerializeAsString() &&
         r.baseline().config().SerializeAsString() == r.candidate().config().SerializeAsString() &&
         r.baseline().config_json() == r.candidate().config_json() &&
         r.baseline().launch() == r.candidate().launch();
}

// The task's timing window if its clock was disturbed (the SM clock moved,
// a power or thermal slowdown was set, or the board never came off its cap
// before the samples), else null. Baseline and candidate timed together share
// one window; either side's counts.
const v1::ClockWindow* DisturbedClock(const v1::TaskResult& r) {
  for (const v1::KernelRun* run : {&r.baseline(), &r.candidate()})
    if (run->timing().clock().disturbed()) return &run->timing().clock();
  return nullptr;
}

// Whether both sides were timed in one window with their samples
// alternating: then both saw the same clocks and their delta holds even
// where the clock moved.
bool Interleaved(const v1::TaskResult& r) {
  return r.baseline().timing().interleaved() && r.candidate().timing().interleaved();
}

// A task whose delta says nothing: timed while the clock moved, with the
// sides timed apart.
bool DeltaUnfair(const v1::TaskResult& r) { return DisturbedClock(r) != nullptr && !Interleaved(r); }

// "clock moved: 1500-1980 MHz, sw_power_cap; sides interleaved".
std::string ClockNote(const v1::TaskResult& r) {
  const v1::ClockWindow& c = *DisturbedClock(r);
  std::string out = absl::StrCat("clock moved: ", c.sm_mhz_min(), "-", c.sm_mhz_max(), " MHz");
  for (const std::string& reason : c.reasons()) absl::StrAppend(&out, ", ", reason);
  if (!c.settled()) absl::StrAppend(&out, ", board still capped after ", absl::StrFormat("%.1f", c.settle_s()), " s");
  absl::StrAppend(&out, Interleaved(r) ? "; sides interleaved" : "; sides timed apart");
  return out;
}

// One line on the clocks of the job's timed windows: their range, how many
// were disturbed, and of those how many timed the sides apart (their deltas
// are not evidence). Empty when no window had its clock read.
std::string ClockSummaryMarkdown(const v1::Job& job) {
  int read = 0, disturbed = 0, unfair = 0, lo = 0, hi = 0;
  for (const v1::TaskResult& r : job.results()) {
    if (Infra(r)) continue;
    const v1::ClockWindow& c = r.baseline().timing().clock().samples() > 0 ? r.baseline().timing().clock()
                                                                           : r.candidate().timing().clock();
    if (c.samples() == 0) continue;
    lo = read == 0 ? c.sm_mhz_min() : std::min(lo, c.sm_mhz_min());
    hi = read == 0 ? c.sm_mhz_max() : std::max(hi, c.sm_mhz_max());
    ++read;
    disturbed += DisturbedClock(r) != nullptr;
    unfair += DeltaUnfair(r);
  }
  if (read == 0) return "";
  std::string out = absl::StrCat("\nSM clock over the ", read, " timed ", read == 1 ? "task" : "tasks", ": ", lo,
                                 lo == hi ? "" : absl::StrCat("-", hi), " MHz");
  if (disturbed > 0) {
    absl::StrAppend(&out, "; ", disturbed, disturbed == 1 ? " task was" : " tasks were",
                    " timed while it moved or the board was power- or heat-limited (marked *clock moved*): their "
                    "µs are not comparable with other runs");
    if (disturbed > unfair) {
      absl::StrAppend(&out, ", but where the two sides were timed interleaved in one window (", disturbed - unfair,
                      ") both saw the same clocks and the delta stands");
    }
    if (unfair > 0) {
      absl::StrAppend(&out, "; ", unfair, unfair == 1 ? " task" : " tasks",
                      " timed the sides apart: those deltas are not evidence either way and are left out below");
    }
  }
  return absl::StrCat(out, ".\n");
}

// Rows that run the same kernel and config on both sides measure the job's
// own run-to-run spread (a worker timing the same kernel twice: up to 7% at
// 3-4 us on the H200, BENCHMARKS.md); a changed row's delta inside that
// spread is not evidence that the change is faster or slower. Empty when the
// job has no such rows or no changed rows.
std::string TimingSpreadMarkdown(const v1::Job& job) {
  double lo = 0, hi = 0;
  int same = 0;
  struct Changed {
    const v1::TaskResult* r;
    double pct;
  };
  std::vector<Changed> changed;
  for (const v1::TaskResult& r : job.results()) {
    if (Infra(r) || DeltaUnfair(r)) continue;  // sides timed apart under a moving clock: neither spread nor change
    const double b = r.baseline().timing().median_us(), c = r.candidate().timing().median_us();
    if (b <= 0 || c <= 0) continue;
    const double pct = 100.0 * (c - b) / b;
    if (SameKernelAndConfig(r)) {
      lo = same == 0 ? pct : std::min(lo, pct);
      hi = same == 0 ? pct : std::max(hi, pct);
      ++same;
    } else {
      changed.push_back({&r, pct});
    }
  }
  if (same == 0 || changed.empty()) return "";
  std::string out = absl::StrFormat(
      "\n%d %s the same kernel and config on both sides; their delta, %+.1f%% to %+.1f%%, is this job's "
      "run-to-run spread.",
      same, same == 1 ? "row runs" : "rows run", lo, hi);
  std::string outside;
  int inside = 0;
  for (const Changed& ch : changed) {
    if (ch.pct >= lo && ch.pct <= hi) {
      ++inside;
      continue;
    }
    absl::StrAppend(&outside, outside.empty() ? "" : ", ", MarkdownEscape(ShapeName(ch.r->shape())), " M=", ch.r->m(),
                    " ", MarkdownEscape(ch.r->arch()), " ", absl::StrFormat("%+.1f%%", ch.pct));
  }
  absl::StrAppend(&out, " Of the ", changed.size(), changed.size() == 1 ? " row" : " rows", " whose config changed, ", changed.size() - inside,
                  " moved outside it", outside.empty() ? "" : absl::StrCat(" (", outside, ")"), " and ", inside,
                  " inside it (not evidence either way).\n");
  return out;
}

// Where the tasks measured their device's roofline: each timed device side
// as a fraction of its floor (max(FLOPs / bf16 GEMM rate, minimal bytes /
// copy bandwidth), validation/roofline.h), and the ceilings per arch.
std::string RooflineMarkdown(const v1::Job& job) {
  struct Range {
    double lo = 0, hi = 0;
    void Add(double v) { lo = lo == 0 ? v : std::min(lo, v), hi = std::max(hi, v); }
    std::string Text(int digits) const {
      const std::string a = absl::StrFormat("%.*f", digits, lo), b = absl::StrFormat("%.*f", digits, hi);
      return a == b ? a : absl::StrCat(a, "-", b);
    }
  };
  std::map<std::string, std::pair<Range, Range>> ceilings;  // arch -> copy TB/s, bf16 TFLOP/s
  std::map<std::string, Range> mhz;                         // arch -> SM clock while measuring them
  std::map<std::string, std::string> notes;                 // arch -> a note, where no GEMM rate was measured
  std::string rows;
  auto cell = [](const v1::KernelRun& k) {
    return k.timing().roofline_fraction() > 0 ? absl::StrFormat("%.0f%%", 100 * k.timing().roofline_fraction())
                                              : std::string("—");
  };
  std::map<std::string, std::vector<std::string>> unmeasured;  // note -> "shape M=m" of the tasks
  for (const v1::TaskResult& r : job.results()) {
    if (Infra(r)) continue;
    if (r.roofline().copy_gbps() <= 0) {
      if (!r.roofline().note().empty()) {
        unmeasured[r.roofline().note()].push_back(absl::StrCat(ShapeName(r.shape()), " M=", r.m()));
      }
      continue;
    }
    auto& [copy, rate] = ceilings[r.arch()];
    copy.Add(r.roofline().copy_gbps() * 1e-3);
    if (const v1::ClockWindow& c = r.roofline().clock(); c.samples() > 0) {
      mhz[r.arch()].Add(c.sm_mhz_min());
      mhz[r.arch()].Add(c.sm_mhz_max());
    }
    if (r.roofline().bf16_tflops() > 0) {
      rate.Add(r.roofline().bf16_tflops());
    } else {
      notes[r.arch()] = r.roofline().note();
    }
    const double floor = std::max(r.baseline().timing().floor_us(), r.candidate().timing().floor_us());
    if (floor <= 0) continue;
    absl::StrAppend(&rows, "| ", MarkdownEscape(ShapeName(r.shape())), " | ", r.m(), " | ", MarkdownEscape(r.arch()),
                    " | ", absl::StrFormat("%.1f", floor), " | ", cell(r.baseline()), " | ", cell(r.candidate()), " |\n");
  }
  if (ceilings.empty() && unmeasured.empty()) return "";
  std::string out = "\n### Roofline\n\n";
  // Tasks with a device side whose roofline was not measured, and why (a
  // copy that failed, a task child that ended while measuring it).
  for (const auto& [note, tasks] : unmeasured) {
    constexpr size_t kNamed = 8;
    const std::vector<std::string> named(tasks.begin(), tasks.begin() + std::min(tasks.size(), kNamed));
    const std::string more = tasks.size() > kNamed ? absl::StrCat(" and ", tasks.size() - kNamed, " more") : "";
    absl::StrAppend(&out, "Not measured on ", tasks.size(), tasks.size() == 1 ? " task" : " tasks", " (",
                    MarkdownEscape(absl::StrJoin(named, ", ")), more, "): ", MarkdownEscape(note), ".\n\n");
  }
  if (ceilings.empty()) return out;
  absl::StrAppend(&out, "Measured on the device each task ran on: ");
  bool first = true;
  for (const auto& [arch, c] : ceilings) {
    absl::StrAppend(&out, first ? "" : "; ", MarkdownEscape(arch), " copy ", c.first.Text(2), " TB/s, bf16 GEMM ",
                    c.second.hi > 0 ? absl::StrCat(c.second.Text(0), " TFLOP/s") : "not measured",
                    notes.count(arch) && c.second.hi <= 0 ? absl::StrCat(" (", MarkdownEscape(notes[arch]), ")") : "",
                    mhz.count(arch) ? absl::StrCat(", SM clock ", mhz[arch].Text(0), " MHz") : "");
    first = false;
  }
  absl::StrAppend(&out, ". The floor is max(FLOPs / bf16 GEMM rate, minimal bytes / copy bandwidth); each side's "
                        "time as a fraction of it (100% = at the roofline).\n");
  if (!rows.empty()) {
    absl::StrAppend(&out, "\n| shape | M | arch | floor µs | baseline | candidate |\n|---|---:|---|---:|---:|---:|\n", rows);
  }
  return out;
}

}  // namespace

std::string MarkdownEscape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : SanitizeForTerminal(s, /*keep_line_breaks=*/true)) {
    switch (c) {
      case '|': o += "\\|"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '`': o += "\\`"; break;
      case '*': o += "\\*"; break;
      case '_': o += "\\_"; break;
      case '[': o += "\\["; break;  // no links or images from caller text
      case ']': o += "\\]"; break;
      case '!': o += "\\!"; break;
      case '#': o += "\\#"; break;
      case '@': o += "&#64;"; break;  // no @-mentions of people or teams
      case '\n': case '\r': o += ' '; break;
      default: o += c;
    }
  }
  return o;
}

bool ParseGatePolicy(const std::string& t, GatePolicy* p) {
  if (t == "pr-touched") *p = {false, false};
  else if (t == "pr-touched,untouched" || t == "untouched,pr-touched") *p = {true, false};
  else if (t == "any") *p = {true, true};
  else return false;
  return true;
}

namespace {
bool Gates(v1::TriageClass c, const GatePolicy& p) {
  if (c == v1::TRIAGE_CLASS_PR_TOUCHED) return true;
  if (c == v1::TRIAGE_CLASS_UNTOUCHED_FAILURE) return p.fail_on_untouched;
  return p.fail_on_any && c != v1::TRIAGE_CLASS_PASS && c != v1::TRIAGE_CLASS_UNSPECIFIED;
}

// Classes in report order: what needs action first.
constexpr v1::TriageClass kOrder[] = {v1::TRIAGE_CLASS_PR_TOUCHED, v1::TRIAGE_CLASS_UNTOUCHED_FAILURE,
                                      v1::TRIAGE_CLASS_UNKNOWN,    v1::TRIAGE_CLASS_FLAKY,
                                      v1::TRIAGE_CLASS_PRE_EXISTING, v1::TRIAGE_CLASS_INFRA};

const char* ClassHeading(v1::TriageClass c) {
  switch (c) {
    case v1::TRIAGE_CLASS_PR_TOUCHED: return "Caused by this change (PR_TOUCHED)";
    case v1::TRIAGE_CLASS_UNTOUCHED_FAILURE: return "Suspicious: fails on a path this change did not touch (UNTOUCHED_FAILURE)";
    case v1::TRIAGE_CLASS_UNKNOWN: return "Not enough evidence (UNKNOWN)";
    case v1::TRIAGE_CLASS_FLAKY: return "Flaky: failed, then passed on the same inputs (FLAKY)";
    case v1::TRIAGE_CLASS_PRE_EXISTING: return "Unrelated: fails without this change too (PRE_EXISTING)";
    case v1::TRIAGE_CLASS_INFRA: return "Unrelated: infrastructure (INFRA)";
    default: return "Other";
  }
}

std::string Headline(const std::map<v1::TriageClass, int>& n) {
  auto get = [&](v1::TriageClass c) { auto it = n.find(c); return it == n.end() ? 0 : it->second; };
  const int fresh = get(v1::TRIAGE_CLASS_PR_TOUCHED);
  const int unrelated = get(v1::TRIAGE_CLASS_PRE_EXISTING) + get(v1::TRIAGE_CLASS_INFRA);
  std::string h = absl::StrCat("**", fresh, " new failure", fresh == 1 ? "" : "s", "**, ", unrelated, " unrelated");
  if (int u = get(v1::TRIAGE_CLASS_UNTOUCHED_FAILURE)) absl::StrAppend(&h, ", ", u, " suspicious (untouched path)");
  if (int f = get(v1::TRIAGE_CLASS_FLAKY)) absl::StrAppend(&h, ", ", f, " flaky");
  if (int k = get(v1::TRIAGE_CLASS_UNKNOWN)) absl::StrAppend(&h, ", ", k, " unknown");
  return h;
}
}  // namespace

namespace {

std::string TaskName(const v1::TaskResult& r) { return absl::StrCat(ShapeName(r.shape()), " M=", r.m(), " ", r.arch()); }

// A side that could not run: an ERROR its kernel did not decline.
bool SideNotRun(const v1::KernelRun& k) { return k.accuracy().verdict() == v1::VERDICT_ERROR && !k.declined(); }

// Why `r` validates nothing, or "" when it does validate.
std::string NotValidatedReason(const v1::TaskResult& r) {
  if (Infra(r)) {
    return absl::StrCat("infrastructure failure after ", r.attempts_size(), r.attempts_size() == 1 ? " attempt: " : " attempts: ",
                        r.attempts(r.attempts_size() - 1).failure_detail());
  }
  std::vector<std::string> why;
  for (const v1::KernelRun* k : {&r.baseline(), &r.candidate()}) {
    if (!SideNotRun(*k)) continue;
    why.push_back(absl::StrCat(k == &r.baseline() ? "baseline" : "candidate", " could not run",
                               k->accuracy().reason().empty() ? "" : ": ", k->accuracy().reason()));
  }
  if (why.empty() && r.triage().triage_class() == v1::TRIAGE_CLASS_INFRA) {
    why.push_back(absl::StrCat("infrastructure", r.triage().reason().empty() ? "" : ": ", r.triage().reason()));
  }
  return absl::StrJoin(why, "; ");
}

// The tasks of a DONE job that have no result.
int MissingResults(const v1::Job& job) {
  return job.state() == v1::JOB_STATE_DONE ? std::max(0, job.progress().tasks_total() - job.results_size()) : 0;
}

}  // namespace

std::vector<NotValidatedTask> NotValidatedTasks(const v1::Job& job) {
  std::vector<NotValidatedTask> out;
  for (const v1::TaskResult& r : job.results()) {
    if (std::string why = NotValidatedReason(r); !why.empty()) out.push_back({TaskName(r), std::move(why)});
  }
  if (const int missing = MissingResults(job); missing > 0) {
    out.push_back({absl::StrCat(missing, missing == 1 ? " task" : " tasks"), "no result", missing});
  }
  return out;
}

int JobExitCode(const v1::Job& job, const GatePolicy& p) {
  if (job.state() != v1::JOB_STATE_DONE) return kExitFailed;
  for (const v1::TaskResult& r : job.results())
    if (Gates(r.triage().triage_class(), p)) return kExitFailed;
  // Without results (or triage) in hand, fall back to the failure count.
  if (job.results_size() == 0 && job.progress().tasks_failed() > 0) return kExitFailed;
  return NotValidatedTasks(job).empty() ? kExitOk : kExitNotValidated;
}

int LogTriageExitCode(const v1::TriageLogsResponse& r, const GatePolicy& p) {
  for (const v1::JobTriage& j : r.jobs())
    if (Gates(j.triage_class(), p)) return 1;
  return 0;
}

std::string TriageMarkdown(const v1::Job& job) {
  std::map<v1::TriageClass, int> n;
  for (const v1::TaskResult& r : job.results()) ++n[r.triage().triage_class()];
  std::string md = absl::StrCat("### Triage\n\n", Headline(n), "\n");
  for (v1::TriageClass c : kOrder) {
    if (!n.count(c)) continue;
    absl::StrAppend(&md, "\n#### ", ClassHeading(c), ": ", n[c], "\n\n");
    for (const v1::TaskResult& r : job.results()) {
      if (r.triage().triage_class() != c) continue;
      absl::StrAppend(&md, "- **", MarkdownEscape(ShapeName(r.shape())), " M=", r.m(), " ", MarkdownEscape(r.arch()),
                      "**: ", MarkdownEscape(r.triage().reason()), "\n");
      for (const std::string& e : r.triage().evidence()) absl::StrAppend(&md, "  - ", MarkdownEscape(e), "\n");
    }
  }
  return md;
}

namespace {

// Inside a code span nothing is interpreted; only a backtick or a newline
// could end it.
std::string CodeSpan(const std::string& text) {
  size_t cut = std::min<size_t>(text.size(), 240);
  while (cut > 0 && cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // whole UTF-8 characters
  std::string code = SanitizeForTerminal(text.substr(0, cut), /*keep_line_breaks=*/true);
  for (char& ch : code)
    if (ch == '`' || ch == '\n' || ch == '\r') ch = '\'';
  return absl::StrCat("`", code, "`");
}

const char* ConfidenceName(v1::TriageConfidence c) {
  switch (c) {
    case v1::TRIAGE_CONFIDENCE_HIGH: return "high";
    case v1::TRIAGE_CONFIDENCE_MEDIUM: return "medium";
    case v1::TRIAGE_CONFIDENCE_LOW: return "low";
    default: return "unrated";
  }
}

std::string Lines(const google::protobuf::RepeatedField<int64_t>& lines) {
  if (lines.empty()) return "";
  std::vector<std::string> s;
  for (int64_t l : lines) s.push_back(absl::StrCat(l));
  return absl::StrCat(lines.size() == 1 ? " (line " : " (lines ", absl::StrJoin(s, ", "), ")");
}

}  // namespace

std::string LogTriageMarkdown(const v1::TriageLogsResponse& r) {
  std::map<v1::TriageClass, int> n;
  for (const v1::JobTriage& j : r.jobs()) ++n[j.triage_class()];
  std::string md = absl::StrCat("## mxval log triage\n\n", Headline(n), " (", r.jobs_size(), " failing jobs)\n");
  for (v1::TriageClass c : kOrder) {
    if (!n.count(c)) continue;
    absl::StrAppend(&md, "\n### ", ClassHeading(c), ": ", n[c], "\n\n");
    for (const v1::JobTriage& j : r.jobs()) {
      if (j.triage_class() != c) continue;
      absl::StrAppend(&md, "- **", MarkdownEscape(j.name()), "** (", ConfidenceName(j.confidence()), " confidence",
                      j.decision().empty() ? "" : absl::StrCat("; rule `", j.decision(), "`"), "): ",
                      MarkdownEscape(j.reason()), "\n");
      if (!j.matched_lines().empty()) absl::StrAppend(&md, "  - root cause:\n");
      for (const v1::LogLine& l : j.matched_lines()) {
        absl::StrAppend(&md, "    - line ", l.number(), ": ", CodeSpan(l.text()), "\n");
      }
      for (const v1::TriageEvidence& e : j.evidence()) {
        absl::StrAppend(&md, "  - evidence (", e.kind(), ", ", ConfidenceName(e.strength()), "): ",
                        MarkdownEscape(e.detail()), Lines(e.lines()), "\n");
      }
      if (!j.consequences().empty()) {
        absl::StrAppend(&md, "  - taken as consequences of the root cause:\n");
        for (const v1::LogLine& l : j.consequences()) {
          absl::StrAppend(&md, "    - line ", l.number(), ": ", CodeSpan(l.text()), "\n");
        }
      }
      if (!j.missing().empty()) absl::StrAppend(&md, "  - missing: ", MarkdownEscape(j.missing()), "\n");
      if (!j.next_step().empty()) absl::StrAppend(&md, "  - next step: ", MarkdownEscape(j.next_step()), "\n");
    }
  }
  return md;
}

bool IsReportFormat(const std::string& f) { return f == "table" || f == "json" || f == "junit" || f == "markdown"; }

std::string XmlEscape(const std::string& s) {
  std::string o;
  for (unsigned char c : SanitizeForTerminal(s, /*keep_line_breaks=*/true)) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default:
        if (c < 0x20 && c != '\n' && c != '\t') o += "?";  // not allowed in XML 1.0 (escaped above already)
        else o += static_cast<char>(c);
    }
  }
  return o;
}

namespace {

int CountTasks(const std::vector<NotValidatedTask>& nv) {
  int n = 0;
  for (const NotValidatedTask& t : nv) n += t.tasks;
  return n;
}

// "NOT VALIDATED: 2 of 6 tasks (a side could not run)" and one line per
// entry, its caller text escaped for Markdown or for a terminal.
std::string NotValidatedText(const v1::Job& job, const std::vector<NotValidatedTask>& nv, bool markdown) {
  if (nv.empty()) return "";
  const int n = CountTasks(nv);
  std::string out = absl::StrCat(markdown ? "**NOT VALIDATED: " : "NOT VALIDATED: ", n, " of ",
                                 job.progress().tasks_total(), job.progress().tasks_total() == 1 ? " task" : " tasks",
                                 markdown ? "**" : "",
                                 " (a side could not run, or no result: nothing was checked there; exit code 4 unless "
                                 "the gate fails the job)\n");
  if (markdown) out += "\n";
  for (const NotValidatedTask& t : nv) {
    absl::StrAppend(&out, markdown ? "- **" : "  ", markdown ? MarkdownEscape(t.task) : SanitizeForTerminal(t.task),
                    markdown ? "**: " : ": ", markdown ? MarkdownEscape(t.reason) : SanitizeForTerminal(t.reason), "\n");
  }
  return out;
}

}  // namespace

std::string FormatReport(const v1::Job& job, const std::string& format) {
  absl::StatusOr<std::string> r = RenderReport(job, format);
  return r.ok() ? *std::move(r) : std::string(r.status().message());
}

absl::StatusOr<std::string> RenderReport(const v1::Job& job, const std::string& format) {
  if (format == "json") {
    absl::StatusOr<std::string> json = ToJson(job);
    if (!json.ok()) return json.status();
    return *json + "\n";
  }
  const auto& p = job.progress();
  const std::vector<NotValidatedTask> not_validated = NotValidatedTasks(job);
  if (format == "junit") {
    int failures = 0, errors = 0, tests = job.results_size();
    std::string cases;
    for (const v1::TaskResult& r : job.results()) {
      const std::string cls = absl::StrCat(OpName(r.shape().op()), ".B", r.shape().b(), ".N", r.shape().n(), ".K", r.shape().k(),
                                           r.shape().x_layout() == v1::X_LAYOUT_K_STRIDED ? ".xKStrided"
                                           : r.shape().x_layout() == v1::X_LAYOUT_M_MAJOR ? ".xMMajor"
                                                                                          : "");
      absl::StrAppend(&cases, "    <testcase classname=\"", XmlEscape(cls), "\" name=\"",
                      XmlEscape(absl::StrCat("M=", r.m(), " ", r.arch())), "\" time=\"",
                      absl::StrFormat("%.6f", r.candidate().timing().median_us() * 1e-6), "\">\n");
      if (Infra(r)) {
        ++errors;
        const v1::Attempt& a = r.attempts(r.attempts_size() - 1);
        absl::StrAppend(&cases, "      <error message=\"infrastructure failure after ", r.attempts_size(),
                        " attempts\">", XmlEscape(a.failure_detail()), "</error>\n");
      } else if (r.baseline().declined() && r.candidate().declined()) {
        absl::StrAppend(&cases, "      <skipped message=\"neither kernel takes this case (both declined)\"/>\n");
      } else {
        if (r.triage().triage_class() == v1::TRIAGE_CLASS_INFRA && !SideNotRun(r.baseline()) && !SideNotRun(r.candidate())) {
          ++errors;
          absl::StrAppend(&cases, "      <error message=\"not validated: infrastructure\">", XmlEscape(r.triage().reason()),
                          "</error>\n");
        }
        for (const auto* side : {&r.baseline(), &r.candidate()}) {
          if (side->accuracy().verdict() == v1::VERDICT_PASS) continue;
          const char* which = side == &r.baseline() ? "baseline" : "candidate";
          if (SideNotRun(*side)) {  // nothing was checked: an error, not a failure of the kernel
            ++errors;
            absl::StrAppend(&cases, "      <error message=\"not validated: ", which, " could not run (",
                            XmlEscape(side->dispatch_entry()), ") [", triage::TriageClassName(r.triage().triage_class()),
                            "]\">", XmlEscape(side->accuracy().reason()), "\n", XmlEscape(r.triage().reason()),
                            "</error>\n");
            continue;
          }
          ++failures;
          absl::StrAppend(&cases, "      <failure message=\"", which, " ", XmlEscape(VerdictText(*side)), " (",
                          XmlEscape(side->dispatch_entry()), ") [",
                          triage::TriageClassName(r.triage().triage_class()), "]\">",
                          XmlEscape(side->accuracy().reason()), "\n", XmlEscape(r.triage().reason()),
                          "</failure>\n");
        }
      }
      if (!Infra(r) && DisturbedClock(r) != nullptr) {  // the time above is at a lower clock
        absl::StrAppend(&cases, "      <system-out>", XmlEscape(ClockNote(r)), "</system-out>\n");
      }
      absl::StrAppend(&cases, "    </testcase>\n");
    }
    if (const int missing = MissingResults(job); missing > 0) {
      ++tests;
      ++errors;
      absl::StrAppend(&cases, "    <testcase classname=\"mxval\" name=\"tasks without a result\">\n      <error message=\"not "
                              "validated: ", missing, missing == 1 ? " task has" : " tasks have", " no result\"/>\n    </testcase>\n");
    }
    return absl::StrCat("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"",
                        XmlEscape(absl::StrCat("mxval ", job.job_id(), " ", job.spec().name())), "\" tests=\"",
                        tests, "\" failures=\"", failures, "\" errors=\"", errors, "\">\n",
                        LaunchProperties(job.spec()), cases,
                        "  </testsuite>\n</testsuites>\n");
  }
  if (format == "markdown") {
    std::string md = absl::StrCat("## mxval ", MarkdownEscape(job.job_id()),
                                  job.spec().name().empty() ? "" : ": " + MarkdownEscape(job.spec().name()), "\n\n",
                                  p.tasks_done(), " of ", p.tasks_total(), " tasks done, **", p.tasks_failed(),
                                  " failed** (", v1::JobState_Name(job.state()), ")\n\n",
                                  NotValidatedText(job, not_validated, /*markdown=*/true),
                                  not_validated.empty() ? "" : "\n");
    if (const PdlSides pdl(job.spec()); pdl.baseline || pdl.candidate) {
      absl::StrAppend(&md, pdl.baseline && pdl.candidate ? "Both sides" : pdl.baseline ? "The baseline side" : "The candidate side",
                      " launched with programmatic dependent launch where the kernel acts on it (marked PDL): "
                      "each correctness run follows a kernel that writes x late, and timed launches overlap.\n\n");
    }
    absl::StrAppend(&md, "| shape | M | arch | baseline config | candidate config | baseline µs | candidate µs | delta | "
                         "baseline | candidate |\n|---|---:|---|---|---|---:|---:|---:|---|---|\n");
    for (const v1::TaskResult& r : job.results()) {
      if (Infra(r)) {
        absl::StrAppend(&md, "| ", MarkdownEscape(ShapeName(r.shape())), " | ", r.m(), " | ", MarkdownEscape(r.arch()),
                        " | | | | | | infrastructure failure | ",
                        MarkdownEscape(r.attempts(r.attempts_size() - 1).failure_detail()), " |\n");
        continue;
      }
      const double b = r.baseline().timing().median_us(), c = r.candidate().timing().median_us();
      absl::StrAppend(&md, "| ", MarkdownEscape(ShapeName(r.shape())), " | ", r.m(), " | ", MarkdownEscape(r.arch()), " | ",
                      RunCell(r.baseline()), " | ", RunCell(r.candidate()), " | ",
                      absl::StrFormat("%.1f", b), " | ", absl::StrFormat("%.1f", c), " | ", Delta(b, c),
                      SameKernelAndConfig(r) ? " (same config)" : "",
                      DisturbedClock(r) ? absl::StrCat(" (", MarkdownEscape(ClockNote(r)), ")") : "", " | ",
                      VerdictText(r.baseline()), " | ", VerdictText(r.candidate()), " |\n");
    }
    absl::StrAppend(&md, ClockSummaryMarkdown(job), TimingSpreadMarkdown(job), RooflineMarkdown(job),
                    PythonMarkdown(job));
    bool any_triage = false;
    for (const v1::TaskResult& r : job.results())
      any_triage |= r.triage().triage_class() != v1::TRIAGE_CLASS_PASS &&
                    r.triage().triage_class() != v1::TRIAGE_CLASS_UNSPECIFIED;
    if (any_triage) absl::StrAppend(&md, "\n", TriageMarkdown(job));
    return md;
  }
  std::string t = absl::StrFormat("%s %s: %d/%d done, %d failed\n%-22s %6s %-6s %-16s %-16s %10s %10s %8s\n",
                                  SanitizeForTerminal(job.job_id()), v1::JobState_Name(job.state()), p.tasks_done(), p.tasks_total(),
                                  p.tasks_failed(), "shape", "M", "arch", "baseline", "candidate", "base_us", "cand_us",
                                  "delta");
  for (const v1::TaskResult& r : job.results()) {
    if (Infra(r)) {
      absl::StrAppend(&t, absl::StrFormat("%-22s %6d %-6s infrastructure failure: %s\n", ShapeName(r.shape()), r.m(),
                                          SanitizeForTerminal(r.arch()),
                                          SanitizeForTerminal(r.attempts(r.attempts_size() - 1).failure_detail())));
      continue;
    }
    const double b = r.baseline().timing().median_us(), c = r.candidate().timing().median_us();
    const v1::TriageClass tc = r.triage().triage_class();
    absl::StrAppend(&t, absl::StrFormat("%-22s %6d %-6s %-16s %-16s %10.1f %10.1f %8s%s%s\n", ShapeName(r.shape()), r.m(),
                                        SanitizeForTerminal(r.arch()), VerdictText(r.baseline()), VerdictText(r.candidate()), b, c,
                                        Delta(b, c),
                                        tc == v1::TRIAGE_CLASS_PASS || tc == v1::TRIAGE_CLASS_UNSPECIFIED
                                            ? ""
                                            : absl::StrCat("  ", triage::TriageClassName(tc)),
                                        DisturbedClock(r) ? absl::StrCat("  (", SanitizeForTerminal(ClockNote(r)), ")") : ""));
  }
  return t + NotValidatedText(job, not_validated, /*markdown=*/false);
}

}  // namespace mxval
