#include "service/triage/log_triage.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mxval {
namespace triage {
namespace {

absl::string_view Tail(const std::string& log, size_t cap, bool* truncated) {
  *truncated = log.size() > cap;
  absl::string_view v(log);
  if (!*truncated) return v;
  v.remove_prefix(log.size() - cap);
  const size_t nl = v.find('\n');  // start at a line boundary
  if (nl != absl::string_view::npos) v.remove_prefix(nl + 1);
  return v;
}

std::string Files(const std::vector<std::string>& f) {
  constexpr size_t kShow = 3;
  std::vector<std::string> shown(f.begin(), f.begin() + std::min(f.size(), kShow));
  std::string s = absl::StrJoin(shown, ", ");
  if (f.size() > kShow) absl::StrAppend(&s, " and ", f.size() - kShow, " more");
  return s;
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
  const std::vector<std::string> changed(req.changed_files().begin(), req.changed_files().end());
  std::set<std::string> names;
  v1::TriageLogsResponse resp;
  for (int i = 0; i < req.jobs_size(); ++i) {
    const v1::CiJobLog& job = req.jobs(i);
    if (job.name().empty()) return absl::InvalidArgumentError(absl::StrCat("jobs[", i, "].name: empty"));
    if (!names.insert(job.name()).second) {
      return absl::InvalidArgumentError(absl::StrCat("jobs[", i, "].name: '", job.name(), "' appears twice"));
    }
    v1::JobTriage* t = resp.add_jobs();
    t->set_name(job.name());
    bool truncated = false, base_truncated = false;
    const auto m = classifier.Classify(Tail(job.log(), o.max_log_bytes, &truncated));
    t->set_truncated(truncated);
    const Reach reach = ownership.JobReach(job.name(), changed);
    t->set_reachability(reach.reachability);
    for (const std::string& f : reach.files) t->add_reaching_files(f);
    if (!m) {
      t->set_triage_class(v1::TRIAGE_CLASS_UNKNOWN);
      t->set_reason("no rule matched the log");
      continue;
    }
    t->set_rule(m->rule_name);
    t->set_signature(m->signature);
    t->set_infra(m->infra);
    for (const v1::LogLine& l : m->lines) *t->add_matched_lines() = l;
    const bool have_base = !job.base_log().empty();
    if (have_base) {
      const auto bm = classifier.Classify(Tail(job.base_log(), o.max_log_bytes, &base_truncated));
      t->set_base_failed_same(bm && bm->signature == m->signature);
    }
    const std::string sig = absl::StrCat("'", m->signature, "' (line ", m->line, ")");
    v1::TriageClass c;
    std::string why;
    if (t->base_failed_same()) {
      c = v1::TRIAGE_CLASS_PRE_EXISTING;
      why = absl::StrCat(sig, " also failed the merge base");
    } else if (m->infra) {
      if (reach.reachability == v1::REACHABILITY_REACHES) {
        c = v1::TRIAGE_CLASS_UNKNOWN;
        why = absl::StrCat("infrastructure signature ", sig, ", but the job covers changed files (", Files(reach.files),
                           "): re-run to tell");
      } else {
        c = v1::TRIAGE_CLASS_INFRA;
        why = absl::StrCat("infrastructure signature ", sig,
                           reach.reachability == v1::REACHABILITY_UNREACHABLE
                               ? "; the job cannot reach any changed file"
                               : "; no ownership entry covers the job");
      }
    } else if (reach.reachability == v1::REACHABILITY_REACHES) {
      c = v1::TRIAGE_CLASS_PR_TOUCHED;
      why = absl::StrCat(sig, " in a job that covers changed files (", Files(reach.files), ")",
                         have_base ? "; the merge base did not fail this way" : "");
    } else if (reach.reachability == v1::REACHABILITY_UNKNOWN && have_base) {
      c = v1::TRIAGE_CLASS_PR_TOUCHED;
      why = absl::StrCat(sig, " is new: the merge base did not fail this way (no ownership entry covers the job)");
    } else if (reach.reachability == v1::REACHABILITY_UNREACHABLE) {
      c = v1::TRIAGE_CLASS_UNKNOWN;
      why = absl::StrCat(sig, " in a job that cannot reach any changed file; not seen on the base",
                         have_base ? "" : " (no base log)");
    } else {
      c = v1::TRIAGE_CLASS_UNKNOWN;
      why = absl::StrCat(sig, ": no ownership entry covers the job and no base log to compare");
    }
    if (truncated) absl::StrAppend(&why, " [log truncated to its last ", o.max_log_bytes, " bytes]");
    t->set_triage_class(c);
    t->set_reason(why);
  }
  return resp;
}

}  // namespace triage
}  // namespace mxval
