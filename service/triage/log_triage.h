// Log triage for CI jobs that are not kernel tasks. Per failing job:
//
// 1. The root cause: the job's first fatal event in log order. Events are
//    failure blocks (Python tracebacks with chained causes, faulthandler
//    dumps, pytest and GoogleTest failures) and lines that a rule of the
//    ordered rule file matches. Events announced as survived (a warning, a
//    retry, a fallback next to them) and events of `consequence` rules
//    (connection refused after a server died, kill -9 in teardown, the
//    final exit code) are the root cause only when nothing else is; later
//    ones are listed as consequences.
// 2. Evidence that the change reaches it, each with the log lines it rests
//    on: a frame of the root cause in a changed file (matched by path
//    suffix), a changed function in such a frame, the failing test file
//    added or changed by the change, a changed kernel or tuning-table op
//    named at the failure, a flag or environment switch the diff introduces
//    switched on in the job, a changed module or file named elsewhere in
//    the log, the ownership map.
// 3. The decision, with the rule followed (`JobTriage.decision`):
//
//   no fatal event, or only the step's exit code        UNKNOWN       no-root-cause
//   base log fails with the same root signature         PRE_EXISTING  base-same
//     (unless the failing test is one the change adds)
//   runner root cause (no GPU, setup, checkout)          INFRA         runner
//   other infra root cause, changed code at the root     PR_TOUCHED    infra-in-changed-code
//     or a test the change adds
//   other infra root cause                              INFRA         infra
//   code/test failure, evidence that the change reaches  PR_TOUCHED    root-reachable / job-runs-changed-code
//   code/test failure, no such evidence                  UNTOUCHED_FAILURE  not-reachable
//
// Each decision carries a confidence, and where it is thin the step that
// would settle it (re-run once, fetch the base log) and what was missing.
#ifndef MXVAL_SERVICE_TRIAGE_LOG_TRIAGE_H_
#define MXVAL_SERVICE_TRIAGE_LOG_TRIAGE_H_

#include <functional>

#include "absl/status/statusor.h"
#include "mxval/v1/mxval.pb.h"
#include "service/triage/diff.h"
#include "service/triage/log_classifier.h"
#include "service/triage/log_model.h"
#include "service/triage/ownership.h"

namespace mxval {
namespace triage {

struct LogTriageOptions {
  size_t max_log_bytes = 8 << 20;  // larger logs: only the tail is read (truncated = true)
  int max_jobs = 2000;
  int max_changed_files = 100000;
  int max_evidence = 12;      // per job, strongest first
  int max_consequences = 5;   // per job
  int max_failing_tests = 20; // per job, in the response
  DiffLimits diff;
  LogModelLimits model;
  // Checked between jobs: true stops the work (CANCELLED).
  std::function<bool()> cancelled;
};

// INVALID_ARGUMENT naming the field for no jobs, an empty or duplicate job
// name, too many jobs or files, or a diff that cannot be read.
absl::StatusOr<v1::TriageLogsResponse> TriageLogs(const v1::TriageLogsRequest& request,
                                                  const LogClassifier& classifier, const Ownership& ownership,
                                                  const LogTriageOptions& options = {});

}  // namespace triage
}  // namespace mxval

#endif  // MXVAL_SERVICE_TRIAGE_LOG_TRIAGE_H_
