#include "service/triage/kernel_triage.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "proto/config_label.h"

namespace mxval {
namespace triage {
namespace {

std::string KernelName(const v1::KernelRef& k) {
  return absl::StrCat(k.library(), "/", k.kernel().empty() ? "(table)" : k.kernel(),
                      k.build_id().empty() ? "" : absl::StrCat("@", k.build_id()));
}

std::string RunLine(const char* side, const v1::KernelRun& r) {
  const v1::Accuracy& a = r.accuracy();
  std::string s = absl::StrCat(side, ": ", r.dispatch_entry().empty() ? "-" : r.dispatch_entry(), " ",
                               ConfigLabel(r.config()), " -> ", RunSignature(r));
  if (a.checked() > 0) {
    absl::StrAppend(&s, absl::StrFormat(" (max_abs_err %.3g, rel_fro %.3g, %d of %d elements off", a.max_abs_err(),
                                        a.rel_fro_err(), a.mismatch_count(), a.checked()));
    if (a.nan_count() > 0) absl::StrAppend(&s, ", ", a.nan_count(), " NaN");
    if (a.unwritten_count() > 0) absl::StrAppend(&s, ", ", a.unwritten_count(), " unwritten");
    // Where the output is wrong: the first elements the checker rejected.
    for (int i = 0; i < std::min(a.first_mismatches_size(), 2); ++i) {
      const v1::ElementError& e = a.first_mismatches(i);
      absl::StrAppend(&s, i == 0 ? "; first at " : ", ",
                      absl::StrFormat("[b=%d m=%d n=%d] got %.4g want %.4g", e.b(), e.m(), e.n(), e.got(), e.want()));
    }
    absl::StrAppend(&s, ")");
  }
  return s;
}

// The launch a run actually had (KernelRun.launch; unset is plain).
bool RanPdl(const v1::KernelRun& r) { return r.launch() == v1::LAUNCH_MODE_PDL; }
const char* LaunchWord(const v1::KernelRun& r) { return RanPdl(r) ? "PDL" : "plain"; }

bool SameRun(const v1::KernelRun& a, const v1::KernelRun& b) {
  return a.accuracy().verdict() == b.accuracy().verdict() &&
         a.accuracy().mismatch_count() == b.accuracy().mismatch_count() &&
         a.accuracy().nan_count() == b.accuracy().nan_count() &&
         a.accuracy().unwritten_count() == b.accuracy().unwritten_count();
}

}  // namespace

bool RunFailed(const v1::KernelRun& run) { return run.accuracy().verdict() != v1::VERDICT_PASS; }

std::string RunSignature(const v1::KernelRun& run) {
  std::string v = v1::Verdict_Name(run.accuracy().verdict());
  if (v.rfind("VERDICT_", 0) == 0) v = v.substr(8);
  if (run.accuracy().verdict() == v1::VERDICT_ERROR) {
    absl::StrAppend(&v, ": ", run.accuracy().reason().substr(0, 80));
  }
  return v;
}

const char* TriageClassName(v1::TriageClass c) {
  switch (c) {
    case v1::TRIAGE_CLASS_PASS: return "PASS";
    case v1::TRIAGE_CLASS_PR_TOUCHED: return "PR_TOUCHED";
    case v1::TRIAGE_CLASS_PRE_EXISTING: return "PRE_EXISTING";
    case v1::TRIAGE_CLASS_INFRA: return "INFRA";
    case v1::TRIAGE_CLASS_FLAKY: return "FLAKY";
    case v1::TRIAGE_CLASS_UNTOUCHED_FAILURE: return "UNTOUCHED_FAILURE";
    case v1::TRIAGE_CLASS_UNKNOWN: return "UNKNOWN";
    default: return "UNSPECIFIED";
  }
}

v1::KernelTriage ClassifyKernelTask(const KernelTaskFacts& f, const Ownership& ownership) {
  v1::KernelTriage t;
  const v1::TaskResult& r = *f.result;
  const v1::TaskSpec& task = *f.task;
  // Attempts, always part of the evidence.
  std::vector<const v1::Attempt*> infra;
  for (int i = 0; i < r.attempts_size(); ++i) {
    const v1::Attempt& a = r.attempts(i);
    const bool bad = a.failure() == v1::FAILURE_CLASS_INFRA;
    if (bad) infra.push_back(&a);
    t.add_evidence(absl::StrCat("attempt ", i + 1, ": worker ", a.worker_id(), " device ", a.device_index(), ": ",
                                bad ? absl::StrCat("infrastructure failure: ", a.failure_detail().substr(0, 300))
                                    : (a.failure_detail().empty() ? std::string("ran") : a.failure_detail())));
  }
  if (f.infra_failed) {
    t.set_triage_class(v1::TRIAGE_CLASS_INFRA);
    const std::string last = infra.empty() ? "" : infra.back()->failure_detail().substr(0, 120);
    t.set_signature(absl::StrCat("infra: ", last));
    std::set<std::string> workers;
    for (const v1::Attempt* a : infra) workers.insert(a->worker_id());
    t.set_reason(absl::StrCat("every attempt (", infra.size(), ", on ", workers.size(),
                              " worker(s)) failed on infrastructure; last: ", last));
    return t;
  }
  // The paths each side took.
  const v1::KernelRun& base = r.baseline();
  const v1::KernelRun& cand = r.candidate();
  const bool entry_differs = base.dispatch_entry() != cand.dispatch_entry() ||
                             task.baseline_config().SerializeAsString() != task.candidate_config().SerializeAsString() ||
                             task.baseline_config_json() != task.candidate_config_json();
  const bool kernel_differs = task.baseline_kernel().SerializeAsString() != task.candidate_kernel().SerializeAsString();
  // The launch each side really had: PDL only where it was asked for and
  // the kernel acts on it (the worker records it per run).
  const bool launch_differs = RanPdl(base) != RanPdl(cand);
  t.set_entry_differs(entry_differs);
  t.set_kernel_differs(kernel_differs);
  t.set_launch_differs(launch_differs);
  std::vector<std::string> files;
  if (f.spec != nullptr) {
    const std::vector<std::string> changed(f.spec->pull_request().changed_files().begin(),
                                           f.spec->pull_request().changed_files().end());
    std::string kernel = cand.kernel().kernel().empty() ? task.candidate_kernel().kernel() : cand.kernel().kernel();
    files = ownership.FilesForKernel(kernel, changed);
    for (const std::string& x : files) t.add_changed_files_matched(x);
  }
  bool entry_listed = false;
  if (f.spec != nullptr) {
    for (const std::string& e : f.spec->pull_request().changed_dispatch_entries())
      entry_listed |= (e == cand.dispatch_entry() || e == task.candidate_entry());
  }
  t.add_evidence(RunLine("baseline", base));
  t.add_evidence(RunLine("candidate", cand));
  t.add_evidence(entry_differs ? absl::StrCat("dispatch differs: baseline ", base.dispatch_entry(), " ",
                                              ConfigLabel(task.baseline_config()), " vs candidate ",
                                              cand.dispatch_entry(), " ", ConfigLabel(task.candidate_config()))
                               : absl::StrCat("same dispatch entry and config under both tables (",
                                              ConfigLabel(task.candidate_config()), ")"));
  t.add_evidence(kernel_differs ? absl::StrCat("kernel differs: ", KernelName(task.baseline_kernel()), " vs ",
                                               KernelName(task.candidate_kernel()))
                                : absl::StrCat("same kernel: ", KernelName(task.candidate_kernel())));
  if (launch_differs) {
    t.add_evidence(absl::StrCat("launch differs: baseline ", LaunchWord(base), ", candidate ", LaunchWord(cand)));
  } else if (RanPdl(cand)) {
    t.add_evidence("both sides launched with PDL");
  }
  if (!files.empty()) t.add_evidence(absl::StrCat("changed files that build this kernel: ", absl::StrJoin(files, ", ")));
  if (entry_listed) t.add_evidence("the pull request lists this dispatch entry as changed");
  if (f.first != nullptr) {
    t.add_evidence(absl::StrCat("first run: baseline ", RunSignature(f.first->baseline()), ", candidate ",
                                RunSignature(f.first->candidate()), "; verification re-run: baseline ",
                                RunSignature(base), ", candidate ", RunSignature(cand)));
    *t.mutable_first_baseline() = f.first->baseline();
    *t.mutable_first_candidate() = f.first->candidate();
  }

  const bool base_fail = RunFailed(base), cand_fail = RunFailed(cand);
  // A side whose kernel declined the case in can_implement never ran: it
  // is the kernel's statement that it does not take these arguments.
  const bool base_declined = base_fail && base.declined(), cand_declined = cand_fail && cand.declined();
  if (cand_declined && !base_fail && r.shape().layout_probe()) {
    t.set_triage_class(v1::TRIAGE_CLASS_PASS);
    t.set_reason(absl::StrCat("a layout probe the candidate's kernel declines in can_implement (",
                              cand.accuracy().reason().substr(0, 160),
                              "), which kernel_api.h allows; the baseline runs it and passes"));
    return t;
  }
  if (base_declined && (cand_declined || !cand_fail)) {
    t.set_triage_class(cand_declined ? v1::TRIAGE_CLASS_PRE_EXISTING : v1::TRIAGE_CLASS_PASS);
    t.set_signature(cand_declined ? "both sides declined" : "");
    t.set_reason(cand_declined
                     ? absl::StrCat("neither kernel takes this case: both decline it in can_implement (baseline: ",
                                    base.accuracy().reason().substr(0, 160), "); nothing ran, nothing is compared")
                     : absl::StrCat("the candidate passes; the baseline's kernel declines this case in can_implement (",
                                    base.accuracy().reason().substr(0, 160), "), so there is no baseline to compare with"));
    return t;
  }
  if (!base_fail && !cand_fail) {
    if (f.first != nullptr && (RunFailed(f.first->baseline()) || RunFailed(f.first->candidate()))) {
      const bool c = RunFailed(f.first->candidate());
      t.set_triage_class(v1::TRIAGE_CLASS_FLAKY);
      t.set_signature(absl::StrCat(c ? "candidate " : "baseline ",
                                   RunSignature(c ? f.first->candidate() : f.first->baseline())));
      t.set_reason(absl::StrCat("failed (", t.signature(), ") then passed on a re-run with the same inputs",
                                r.attempts_size() > 1 ? absl::StrCat(" on worker ", r.attempts(r.attempts_size() - 1).worker_id())
                                                      : ""));
    } else if (!infra.empty()) {
      t.set_triage_class(v1::TRIAGE_CLASS_INFRA);
      t.set_signature(absl::StrCat("infra: ", infra.front()->failure_detail().substr(0, 120)));
      t.set_reason(absl::StrCat("recovered: ", infra.size(), " infrastructure failure(s) (",
                                infra.front()->failure_detail().substr(0, 80), "), then passed on a retry"));
    } else {
      t.set_triage_class(v1::TRIAGE_CLASS_PASS);
      t.set_reason("both sides pass");
    }
    return t;
  }
  if (f.first != nullptr) {
    const bool differs = (RunFailed(f.first->baseline()) && !SameRun(f.first->baseline(), base)) ||
                         (RunFailed(f.first->candidate()) && !SameRun(f.first->candidate(), cand)) ||
                         RunFailed(f.first->baseline()) != base_fail || RunFailed(f.first->candidate()) != cand_fail;
    t.set_possible_race(differs);
    if (differs) t.add_evidence("the two runs on the same inputs failed differently: possible race or uninitialized memory");
  }
  if (base_fail && !base_declined) {
    t.set_triage_class(v1::TRIAGE_CLASS_PRE_EXISTING);
    t.set_signature(absl::StrCat("baseline ", RunSignature(base)));
    t.set_reason(cand_fail ? absl::StrCat("the baseline fails too (", RunSignature(base), "; candidate ",
                                          RunSignature(cand), ")")
                           : absl::StrCat("the baseline fails (", RunSignature(base),
                                          "); the candidate passes: fixed by this change?",
                                          launch_differs && RanPdl(base)
                                              ? " The baseline ran with PDL and the candidate plain: a PDL-only "
                                                "failure of the baseline's kernel (it reads x or writes y before "
                                                "griddepcontrol.wait)?"
                                              : ""));
    return t;
  }
  t.set_signature(absl::StrCat("candidate ", RunSignature(cand)));
  const bool touched = entry_differs || kernel_differs || launch_differs || entry_listed || !files.empty();
  std::vector<std::string> why;
  if (entry_differs) why.push_back("its dispatch entry/config changed");
  if (kernel_differs) why.push_back("its kernel build changed");
  if (launch_differs) {
    why.push_back(RanPdl(cand) ? "it ran with PDL where the baseline ran plain: the kernel reads x or writes y "
                                 "before griddepcontrol.wait, or never waits"
                               : "it ran plain where the baseline ran with PDL");
  }
  if (entry_listed) why.push_back("the PR lists its entry");
  if (!files.empty()) why.push_back(absl::StrCat("changed files build it (", files.front(), files.size() > 1 ? ", ..." : "", ")"));
  const std::string reproduced = f.first != nullptr ? " (reproduced on the verification re-run)" : "";
  const char* where_base = base_declined ? " where the baseline's kernel declines the case" : " where the baseline passes";
  if (touched) {
    t.set_triage_class(v1::TRIAGE_CLASS_PR_TOUCHED);
    t.set_reason(absl::StrCat("candidate ", RunSignature(cand), where_base, ", and ", absl::StrJoin(why, "; "),
                              reproduced));
  } else {
    t.set_triage_class(v1::TRIAGE_CLASS_UNTOUCHED_FAILURE);
    t.set_reason(absl::StrCat("candidate ", RunSignature(cand), where_base,
                              ", on a path this change did not touch (same kernel, entry "
                              "and config): non-determinism or corruption elsewhere?",
                              reproduced));
  }
  return t;
}

}  // namespace triage
}  // namespace mxval
