// Job-spec validation from the wire: any bytes as a SubmitJobRequest, then
// the planner (validation + expansion) the coordinator runs on SubmitJob.
// Invariant: a plan that is accepted has tasks that name their shape and
// kernels and stay within the limits.
#include <cstdint>
#include <cstdlib>

#include "mxval/v1/mxval.pb.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mxval::v1::SubmitJobRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
  const auto& o = mxval::fuzz::FuzzPlannerOptions();
  auto plan = mxval::coordinator::PlanJob(req.spec(), o, mxval::fuzz::FuzzLibraries());
  if (!plan.ok()) {
    if (plan.status().message().empty()) abort();  // every refusal says why
    return 0;
  }
  if (plan->tasks.empty() || static_cast<int>(plan->tasks.size()) > o.max_tasks_per_job) abort();
  for (const auto& t : plan->tasks) {
    if (t.spec.m() < 1 || t.spec.shape().k() % 32 != 0 || t.spec.candidate_kernel().library().empty()) abort();
    if (t.dedup_key.empty()) abort();
  }
  return 0;
}
