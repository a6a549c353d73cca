#include "client/report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"

namespace mxval {
namespace {

std::string OpName(v1::Op op) { return op == v1::OP_KUP ? "kup" : op == v1::OP_VUP ? "vup" : "custom"; }

std::string ShapeName(const v1::Shape& s) {
  return absl::StrCat(OpName(s.op()), " B=", s.b(), " N=", s.n(), " K=", s.k());
}

std::string VerdictText(const v1::KernelRun& r) {
  switch (r.accuracy().verdict()) {
    case v1::VERDICT_PASS: return "pass";
    case v1::VERDICT_FAIL_MISMATCH: return "fail: mismatch";
    case v1::VERDICT_FAIL_NON_FINITE: return "fail: non-finite";
    case v1::VERDICT_FAIL_UNWRITTEN: return "fail: unwritten";
    case v1::VERDICT_FAIL_CATASTROPHIC: return "fail: catastrophic";
    case v1::VERDICT_INVALID: return "invalid";
    case v1::VERDICT_ERROR: return "error";
    default: return "-";
  }
}

bool Infra(const v1::TaskResult& r) {
  return !r.has_baseline() && r.attempts_size() > 0 &&
         r.attempts(r.attempts_size() - 1).failure() == v1::FAILURE_CLASS_INFRA;
}

std::string ConfigText(const v1::TileConfig& c) {
  return absl::StrCat("BM", c.block_m(), "_BN", c.block_n(), "_BK", c.block_k(), "_KS", c.ksplit());
}

std::string Delta(double base, double cand) {
  if (base <= 0 || cand <= 0) return "-";
  return absl::StrFormat("%+.1f%%", 100.0 * (cand - base) / base);
}

}  // namespace

bool IsReportFormat(const std::string& f) { return f == "table" || f == "json" || f == "junit" || f == "markdown"; }

std::string XmlEscape(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default:
        if (c < 0x20 && c != '\n' && c != '\t') o += "?";  // not allowed in XML 1.0
        else o += static_cast<char>(c);
    }
  }
  return o;
}

std::string FormatReport(const v1::Job& job, const std::string& format) {
  if (format == "json") {
    std::string json;
    google::protobuf::util::JsonPrintOptions opt;
    opt.add_whitespace = true;
    (void)google::protobuf::util::MessageToJsonString(job, &json, opt);
    return json + "\n";
  }
  const auto& p = job.progress();
  if (format == "junit") {
    int failures = 0, errors = 0;
    std::string cases;
    for (const v1::TaskResult& r : job.results()) {
      const std::string cls = absl::StrCat(OpName(r.shape().op()), ".B", r.shape().b(), ".N", r.shape().n(), ".K", r.shape().k());
      absl::StrAppend(&cases, "    <testcase classname=\"", XmlEscape(cls), "\" name=\"",
                      XmlEscape(absl::StrCat("M=", r.m(), " ", r.arch())), "\" time=\"",
                      absl::StrFormat("%.6f", r.candidate().timing().median_us() * 1e-6), "\">\n");
      if (Infra(r)) {
        ++errors;
        const v1::Attempt& a = r.attempts(r.attempts_size() - 1);
        absl::StrAppend(&cases, "      <error message=\"infrastructure failure after ", r.attempts_size(),
                        " attempts\">", XmlEscape(a.failure_detail()), "</error>\n");
      } else {
        for (const auto* side : {&r.baseline(), &r.candidate()}) {
          if (side->accuracy().verdict() == v1::VERDICT_PASS) continue;
          ++failures;
          const char* which = side == &r.baseline() ? "baseline" : "candidate";
          absl::StrAppend(&cases, "      <failure message=\"", which, " ", XmlEscape(VerdictText(*side)), " (",
                          XmlEscape(side->dispatch_entry()), ")\">", XmlEscape(side->accuracy().reason()),
                          "</failure>\n");
        }
      }
      absl::StrAppend(&cases, "    </testcase>\n");
    }
    return absl::StrCat("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"",
                        XmlEscape(absl::StrCat("mxval ", job.job_id(), " ", job.spec().name())), "\" tests=\"",
                        job.results_size(), "\" failures=\"", failures, "\" errors=\"", errors, "\">\n", cases,
                        "  </testsuite>\n</testsuites>\n");
  }
  if (format == "markdown") {
    std::string md = absl::StrCat("## mxval ", job.job_id(), job.spec().name().empty() ? "" : ": " + job.spec().name(),
                                  "\n\n", p.tasks_done(), " of ", p.tasks_total(), " tasks done, **", p.tasks_failed(),
                                  " failed** (", v1::JobState_Name(job.state()), ")\n\n");
    absl::StrAppend(&md, "| shape | M | arch | baseline config | candidate config | baseline µs | candidate µs | delta | "
                         "baseline | candidate |\n|---|---:|---|---|---|---:|---:|---:|---|---|\n");
    for (const v1::TaskResult& r : job.results()) {
      if (Infra(r)) {
        absl::StrAppend(&md, "| ", ShapeName(r.shape()), " | ", r.m(), " | ", r.arch(),
                        " | | | | | | infrastructure failure | ", r.attempts(r.attempts_size() - 1).failure_detail(),
                        " |\n");
        continue;
      }
      const double b = r.baseline().timing().median_us(), c = r.candidate().timing().median_us();
      absl::StrAppend(&md, "| ", ShapeName(r.shape()), " | ", r.m(), " | ", r.arch(), " | `",
                      ConfigText(r.baseline().config()), "` | `", ConfigText(r.candidate().config()), "` | ",
                      absl::StrFormat("%.1f", b), " | ", absl::StrFormat("%.1f", c), " | ", Delta(b, c), " | ",
                      VerdictText(r.baseline()), " | ", VerdictText(r.candidate()), " |\n");
    }
    return md;
  }
  std::string t = absl::StrFormat("%s %s: %d/%d done, %d failed\n%-22s %6s %-6s %-16s %-16s %10s %10s %8s\n",
                                  job.job_id(), v1::JobState_Name(job.state()), p.tasks_done(), p.tasks_total(),
                                  p.tasks_failed(), "shape", "M", "arch", "baseline", "candidate", "base_us", "cand_us",
                                  "delta");
  for (const v1::TaskResult& r : job.results()) {
    if (Infra(r)) {
      absl::StrAppend(&t, absl::StrFormat("%-22s %6d %-6s infrastructure failure: %s\n", ShapeName(r.shape()), r.m(),
                                          r.arch(), r.attempts(r.attempts_size() - 1).failure_detail()));
      continue;
    }
    const double b = r.baseline().timing().median_us(), c = r.candidate().timing().median_us();
    absl::StrAppend(&t, absl::StrFormat("%-22s %6d %-6s %-16s %-16s %10.1f %10.1f %8s\n", ShapeName(r.shape()), r.m(),
                                        r.arch(), VerdictText(r.baseline()), VerdictText(r.candidate()), b, c,
                                        Delta(b, c)));
  }
  return t;
}

}  // namespace mxval
