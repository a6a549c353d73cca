// Log triage on hostile input. Input: a unified diff, a NUL byte, a CI log,
// a NUL byte, the same job's log on the merge base. The diff is parsed as
// `mxval triage --diff` would; the job is triaged with the built-in rules.
// Invariants: a bad diff is an INVALID_ARGUMENT naming it, never a crash; a
// triaged job has a class, a decision rule and a reason; every line number
// it cites lies in its log; its text survives a protobuf round trip (valid
// UTF-8); the evidence and consequence lists stay within their bounds.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "service/triage/diff.h"
#include "service/triage/log_triage.h"
#include "service/triage/triage_config.h"

using namespace mxval;          // NOLINT
using namespace mxval::triage;  // NOLINT

namespace {

absl::string_view Next(const char** p, const char* end) {
  const char* nul = static_cast<const char*>(std::memchr(*p, 0, end - *p));
  const char* stop = nul ? nul : end;
  absl::string_view part(*p, stop - *p);
  *p = nul ? nul + 1 : end;
  return part;
}

int64_t Lines(absl::string_view s) {
  int64_t n = s.empty() ? 0 : 1;
  for (size_t i = 0; i + 1 < s.size(); ++i) n += s[i] == '\n';
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (512 << 10)) return 0;
  const char* p = reinterpret_cast<const char*>(data);
  const char* end = p + size;
  const absl::string_view diff = Next(&p, end);
  const absl::string_view log = Next(&p, end);
  const absl::string_view base = Next(&p, end);
  static const auto* rules = LogClassifier::Create(DefaultLogRules())->release();
  static const auto* none = Ownership::Empty().release();
  v1::TriageLogsRequest req;
  req.set_diff(std::string(diff));
  req.add_changed_files("python/pkg/srt/layers/x.py");
  v1::CiJobLog* j = req.add_jobs();
  j->set_name("fuzz");
  j->set_log(std::string(log));
  j->set_base_log(std::string(base));
  LogTriageOptions o;
  o.max_log_bytes = 64 << 10;  // the tail path too (line numbers count from the tail's first line)
  o.model.max_lines = 2000;
  auto r = TriageLogs(req, *rules, *none, o);
  if (!r.ok()) {
    if (r.status().code() != absl::StatusCode::kInvalidArgument) abort();
    if (r.status().message().find("diff") == absl::string_view::npos) abort();
    if (ParseUnifiedDiff(diff).ok()) abort();  // only the diff can be refused here
    return 0;
  }
  if (r->jobs_size() != 1) abort();
  const v1::JobTriage& t = r->jobs(0);
  if (t.triage_class() == v1::TRIAGE_CLASS_UNSPECIFIED || t.decision().empty() || t.reason().empty()) abort();
  if (t.evidence_size() > o.max_evidence || t.consequences_size() > o.max_consequences) abort();
  const int64_t n = Lines(log);
  for (const auto& l : t.matched_lines())
    if (l.number() < 1 || l.number() > n) abort();
  for (const auto& l : t.consequences())
    if (l.number() < 1 || l.number() > n) abort();
  for (const auto& e : t.evidence())
    for (int64_t l : e.lines())
      if (l < 1 || l > n) abort();
  v1::TriageLogsResponse copy;
  if (!copy.ParseFromString(r->SerializeAsString())) abort();
  return 0;
}
