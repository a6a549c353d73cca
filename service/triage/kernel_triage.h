// Kernel-task triage: the class of one validation task, with its evidence,
// from the job (pull-request context), the task (both kernels, dispatch
// entries and configs), its final result, the first result when the
// coordinator re-ran a failing task to verify it, and its attempts.
//
//   every attempt failed on infrastructure               INFRA
//   passed after an infrastructure failure               INFRA (recovered; evidence kept)
//   failed, then passed on the verification re-run       FLAKY
//   baseline fails (candidate too, or not)               PRE_EXISTING
//   candidate fails, baseline passes, path touched       PR_TOUCHED
//   candidate fails, baseline passes, path untouched     UNTOUCHED_FAILURE
// "Touched": the dispatch entry or config differs between the tables, the
// kernel (library, name or build) differs, the entry is listed as changed in
// the pull request, or a changed file maps to the candidate kernel in the
// ownership map, or the two sides ran with different launch modes (a
// plain-vs-PDL job: a candidate that fails only with PDL is PR_TOUCHED, with
// the launch named in the evidence). Two runs on the same inputs that fail
// differently set possible_race.
#ifndef MXVAL_SERVICE_TRIAGE_KERNEL_TRIAGE_H_
#define MXVAL_SERVICE_TRIAGE_KERNEL_TRIAGE_H_

#include <string>

#include "mxval/v1/mxval.pb.h"
#include "service/triage/ownership.h"

namespace mxval {
namespace triage {

struct KernelTaskFacts {
  const v1::JobSpec* spec = nullptr;
  const v1::TaskSpec* task = nullptr;
  const v1::TaskResult* result = nullptr;  // final; attempts filled by the coordinator
  const v1::TaskResult* first = nullptr;   // the run before the verification re-run, if any
  bool infra_failed = false;
};

v1::KernelTriage ClassifyKernelTask(const KernelTaskFacts& facts, const Ownership& ownership);

// Whether a run's verdict is a failure (anything but PASS).
bool RunFailed(const v1::KernelRun& run);
// "FAIL_MISMATCH", "ERROR: device fault ..." (bounded length).
std::string RunSignature(const v1::KernelRun& run);
const char* TriageClassName(v1::TriageClass c);  // "PR_TOUCHED", ...

}  // namespace triage
}  // namespace mxval

#endif  // MXVAL_SERVICE_TRIAGE_KERNEL_TRIAGE_H_
