// Log triage for CI jobs that are not kernel tasks: per failing job, the
// matched signature, the lines that matched, whether the same signature
// failed on the merge base, whether the job can reach a changed file, and
// the class that follows:
//
//   same signature on the base                      PRE_EXISTING
//   infra signature, job cannot reach the change    INFRA
//   infra signature, job covers changed files       UNKNOWN  (re-run to tell)
//   test failure, job covers changed files          PR_TOUCHED
//   test failure, no ownership entry, base passed   PR_TOUCHED
//   test failure, job cannot reach the change       UNKNOWN
//   test failure, no ownership entry, no base log   UNKNOWN
//   no rule matched                                 UNKNOWN
#ifndef MXVAL_SERVICE_TRIAGE_LOG_TRIAGE_H_
#define MXVAL_SERVICE_TRIAGE_LOG_TRIAGE_H_

#include "absl/status/statusor.h"
#include "mxval/v1/mxval.pb.h"
#include "service/triage/log_classifier.h"
#include "service/triage/ownership.h"

namespace mxval {
namespace triage {

struct LogTriageOptions {
  size_t max_log_bytes = 8 << 20;  // larger logs: only the tail is read (truncated = true)
  int max_jobs = 2000;
  int max_changed_files = 100000;
};

// INVALID_ARGUMENT naming the field for no jobs, an empty or duplicate job
// name, or too many jobs or files.
absl::StatusOr<v1::TriageLogsResponse> TriageLogs(const v1::TriageLogsRequest& request,
                                                  const LogClassifier& classifier, const Ownership& ownership,
                                                  const LogTriageOptions& options = {});

}  // namespace triage
}  // namespace mxval

#endif  // MXVAL_SERVICE_TRIAGE_LOG_TRIAGE_H_
