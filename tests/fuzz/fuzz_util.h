// Shared pieces of the libFuzzer targets: the planner limits every target
// uses (small, so one input never takes seconds), and a registered library.
#ifndef MXVAL_TESTS_FUZZ_FUZZ_UTIL_H_
#define MXVAL_TESTS_FUZZ_FUZZ_UTIL_H_

#include "service/coordinator/job_planner.h"

namespace mxval::fuzz {

inline const coordinator::PlannerOptions& FuzzPlannerOptions() {
  static const coordinator::PlannerOptions* o = [] {
    auto* p = new coordinator::PlannerOptions(coordinator::PlannerOptions::WithBuiltinTables());
    p->max_tasks_per_job = 512;
    p->max_task_bytes = int64_t{256} << 20;
    p->max_device_bytes_per_task = int64_t{256} << 20;
    return p;
  }();
  return *o;
}

inline const coordinator::LibraryMap& FuzzLibraries() {
  static const coordinator::LibraryMap* m = [] {
    auto* libs = new coordinator::LibraryMap();
    v1::KernelLibraryRegistration r;
    r.set_name("pr-kernels");
    r.set_build_id("b1");
    r.set_sha256(std::string(64, 'a'));
    (*libs)[r.name()] = r;
    return libs;
  }();
  return *m;
}

}  // namespace mxval::fuzz

#endif  // MXVAL_TESTS_FUZZ_FUZZ_UTIL_H_
