#include "service/triage/kernel_triage.h"

#include "gtest/gtest.h"

namespace mxval::triage {
namespace {

v1::KernelRun MakeRun(v1::Verdict v, const std::string& entry, int bk, int mismatches = 0) {
  v1::KernelRun r;
  r.set_dispatch_entry(entry);
  r.mutable_config()->set_block_m(16);
  r.mutable_config()->set_block_n(64);
  r.mutable_config()->set_block_k(bk);
  r.mutable_kernel()->set_library("mxval-builtin-cuda");
  r.mutable_kernel()->set_kernel("a16wfp4_tc");
  r.mutable_accuracy()->set_verdict(v);
  r.mutable_accuracy()->set_checked(1000);
  r.mutable_accuracy()->set_mismatch_count(mismatches);
  return r;
}

struct Case {
  v1::JobSpec spec;
  v1::TaskSpec task;
  v1::TaskResult result, first;
  bool has_first = false, infra_failed = false;
  v1::KernelTriage Classify(const Ownership& o = *Ownership::Empty()) {
    KernelTaskFacts f{&spec, &task, &result, has_first ? &first : nullptr, infra_failed};
    return ClassifyKernelTask(f, o);
  }
};

Case Make(v1::Verdict base, v1::Verdict cand, int base_bk = 64, int cand_bk = 64) {
  Case c;
  for (auto* k : {c.task.mutable_baseline_kernel(), c.task.mutable_candidate_kernel()}) {
    k->set_library("mxval-builtin-cuda");
    k->set_kernel("a16wfp4_tc");
  }
  c.task.mutable_baseline_config()->set_block_k(base_bk);
  c.task.mutable_candidate_config()->set_block_k(cand_bk);
  c.task.set_baseline_entry("kup/N=512,K=192/M_LEQ_16");
  c.task.set_candidate_entry("kup/N=512,K=192/M_LEQ_16");
  *c.result.mutable_baseline() = MakeRun(base, "kup/N=512,K=192/M_LEQ_16", base_bk, base == v1::VERDICT_PASS ? 0 : 10);
  *c.result.mutable_candidate() = MakeRun(cand, "kup/N=512,K=192/M_LEQ_16", cand_bk, cand == v1::VERDICT_PASS ? 0 : 10);
  auto* a = c.result.add_attempts();
  a->set_worker_id("w1");
  a->set_failure(v1::FAILURE_CLASS_NONE);
  return c;
}

TEST(KernelTriage, RetunedEntryThatFailsIsPrTouched) {
  Case c = Make(v1::VERDICT_PASS, v1::VERDICT_FAIL_MISMATCH, 64, 128);  // K=192 with BLOCK_K 128: the mask bug
  c.first = c.result;
  c.has_first = true;
  auto t = c.Classify();
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED) << t.reason();
  EXPECT_TRUE(t.entry_differs());
  EXPECT_FALSE(t.possible_race());
  EXPECT_EQ(t.signature(), "candidate FAIL_MISMATCH");
  EXPECT_NE(t.reason().find("reproduced"), std::string::npos);
  EXPECT_EQ(t.first_candidate().accuracy().verdict(), v1::VERDICT_FAIL_MISMATCH);
}

TEST(KernelTriage, SameEntryFailingIsUntouchedUnlessFilesMapToTheKernel) {
  Case c = Make(v1::VERDICT_PASS, v1::VERDICT_FAIL_NON_FINITE);
  EXPECT_EQ(c.Classify().triage_class(), v1::TRIAGE_CLASS_UNTOUCHED_FAILURE);
  c.spec.mutable_pull_request()->add_changed_files("kernels/gpu/a16wfp4_gpu.cu");
  v1::OwnershipMap m;
  auto* e = m.add_entries();
  e->add_paths("kernels/gpu/**");
  e->add_kernels("a16wfp4_tc");
  auto o = Ownership::Create(m);
  ASSERT_TRUE(o.ok());
  auto t = c.Classify(**o);
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED) << t.reason();
  ASSERT_EQ(t.changed_files_matched_size(), 1);
  // A different kernel build is a touched path too.
  Case d = Make(v1::VERDICT_PASS, v1::VERDICT_FAIL_MISMATCH);
  d.task.mutable_candidate_kernel()->set_build_id("pr-1234");
  EXPECT_EQ(d.Classify().triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED);
  EXPECT_TRUE(d.Classify().kernel_differs());
  // So is an entry the PR lists as changed.
  Case e2 = Make(v1::VERDICT_PASS, v1::VERDICT_FAIL_MISMATCH);
  e2.spec.mutable_pull_request()->add_changed_dispatch_entries("kup/N=512,K=192/M_LEQ_16");
  EXPECT_EQ(e2.Classify().triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED);
}

TEST(KernelTriage, BaselineFailingIsPreExisting) {
  Case c = Make(v1::VERDICT_FAIL_MISMATCH, v1::VERDICT_FAIL_MISMATCH, 64, 128);
  auto t = c.Classify();
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_PRE_EXISTING) << t.reason();
  Case fixed = Make(v1::VERDICT_FAIL_UNWRITTEN, v1::VERDICT_PASS, 64, 128);
  EXPECT_EQ(fixed.Classify().triage_class(), v1::TRIAGE_CLASS_PRE_EXISTING);
  EXPECT_NE(fixed.Classify().reason().find("candidate passes"), std::string::npos);
}

TEST(KernelTriage, FailThenPassIsFlakyAndDifferentFailuresFlagARace) {
  Case c = Make(v1::VERDICT_PASS, v1::VERDICT_PASS);
  c.first = c.result;
  *c.first.mutable_candidate() = MakeRun(v1::VERDICT_FAIL_MISMATCH, "kup/N=512,K=192/M_LEQ_16", 64, 3);
  c.has_first = true;
  auto t = c.Classify();
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_FLAKY) << t.reason();
  Case r = Make(v1::VERDICT_PASS, v1::VERDICT_FAIL_MISMATCH, 64, 128);
  r.first = r.result;
  r.first.mutable_candidate()->mutable_accuracy()->set_mismatch_count(77);
  r.has_first = true;
  auto rt = r.Classify();
  EXPECT_EQ(rt.triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED);
  EXPECT_TRUE(rt.possible_race());
}

// A plain-vs-PDL job: same kernel, entry and config on both sides, the
// candidate launched with PDL. A candidate that fails only with PDL is
// caused by the launch (PR_TOUCHED, the launch named), not an untouched
// failure; the recorded launch is what counts, not what was asked for.
TEST(KernelTriage, FailingOnlyWithPdlIsTouchedByTheLaunch) {
  Case c = Make(v1::VERDICT_PASS, v1::VERDICT_FAIL_NON_FINITE);
  c.task.set_launch(v1::LAUNCH_MODE_PLAIN);
  c.task.set_candidate_launch(v1::LAUNCH_MODE_PDL);
  c.result.mutable_baseline()->set_launch(v1::LAUNCH_MODE_PLAIN);
  c.result.mutable_candidate()->set_launch(v1::LAUNCH_MODE_PDL);
  auto t = c.Classify();
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED) << t.reason();
  EXPECT_TRUE(t.launch_differs());
  EXPECT_FALSE(t.entry_differs());
  EXPECT_FALSE(t.kernel_differs());
  EXPECT_EQ(t.signature(), "candidate FAIL_NON_FINITE");
  EXPECT_NE(t.reason().find("ran with PDL where the baseline ran plain"), std::string::npos) << t.reason();
  bool named = false;
  for (const std::string& e : t.evidence()) named |= e == "launch differs: baseline plain, candidate PDL";
  EXPECT_TRUE(named);

  // Asked for PDL, but the kernel does not act on it: both ran plain, so the
  // launch explains nothing and the failure stays untouched.
  Case plain = c;
  plain.result.mutable_candidate()->set_launch(v1::LAUNCH_MODE_PLAIN);
  auto u = plain.Classify();
  EXPECT_EQ(u.triage_class(), v1::TRIAGE_CLASS_UNTOUCHED_FAILURE) << u.reason();
  EXPECT_FALSE(u.launch_differs());

  // Both sides with PDL: not a difference, but said in the evidence.
  Case both = Make(v1::VERDICT_PASS, v1::VERDICT_FAIL_MISMATCH);
  both.result.mutable_baseline()->set_launch(v1::LAUNCH_MODE_PDL);
  both.result.mutable_candidate()->set_launch(v1::LAUNCH_MODE_PDL);
  auto b = both.Classify();
  EXPECT_EQ(b.triage_class(), v1::TRIAGE_CLASS_UNTOUCHED_FAILURE);
  bool said = false;
  for (const std::string& e : b.evidence()) said |= e == "both sides launched with PDL";
  EXPECT_TRUE(said);

  // The baseline failing with PDL while the plain candidate passes stays
  // PRE_EXISTING, and the reason points at the launch.
  Case rev = Make(v1::VERDICT_FAIL_MISMATCH, v1::VERDICT_PASS);
  rev.result.mutable_baseline()->set_launch(v1::LAUNCH_MODE_PDL);
  auto r = rev.Classify();
  EXPECT_EQ(r.triage_class(), v1::TRIAGE_CLASS_PRE_EXISTING);
  EXPECT_TRUE(r.launch_differs());
  EXPECT_NE(r.reason().find("PDL-only failure"), std::string::npos) << r.reason();
}

// A kernel that declines a case in can_implement never ran it: both
// declining is nobody's failure, the baseline alone declining while the
// candidate passes is a pass, and the candidate declining what the
// baseline ran is the change's (it lost the case).
TEST(KernelTriage, DeclinedSides) {
  Case both = Make(v1::VERDICT_ERROR, v1::VERDICT_ERROR);
  both.result.mutable_baseline()->set_declined(true);
  both.result.mutable_candidate()->set_declined(true);
  both.result.mutable_baseline()->mutable_accuracy()->set_reason("declined by can_implement: needs x_stride_k == 1");
  auto t = both.Classify();
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_PRE_EXISTING);
  EXPECT_NE(t.reason().find("neither kernel takes this case"), std::string::npos) << t.reason();
  EXPECT_NE(t.reason().find("x_stride_k"), std::string::npos) << t.reason();
  Case base_only = Make(v1::VERDICT_ERROR, v1::VERDICT_PASS);
  base_only.result.mutable_baseline()->set_declined(true);
  t = base_only.Classify();
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_PASS);
  EXPECT_NE(t.reason().find("the candidate passes"), std::string::npos) << t.reason();
  Case cand_only = Make(v1::VERDICT_PASS, v1::VERDICT_ERROR, 64, 128);
  cand_only.result.mutable_candidate()->set_declined(true);
  EXPECT_EQ(cand_only.Classify().triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED);
  // ... except on a layout probe, which a kernel may decline.
  cand_only.result.mutable_shape()->set_layout_probe(true);
  t = cand_only.Classify();
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_PASS);
  EXPECT_NE(t.reason().find("layout probe"), std::string::npos) << t.reason();
  // A declined baseline does not make a wrong candidate pre-existing.
  Case worse = Make(v1::VERDICT_ERROR, v1::VERDICT_FAIL_MISMATCH, 64, 128);
  worse.result.mutable_baseline()->set_declined(true);
  t = worse.Classify();
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_PR_TOUCHED);
  EXPECT_NE(t.reason().find("where the baseline's kernel declines the case"), std::string::npos) << t.reason();
}

TEST(KernelTriage, InfrastructureFailures) {
  Case c = Make(v1::VERDICT_PASS, v1::VERDICT_PASS);
  c.result.clear_baseline();
  c.result.clear_candidate();
  c.result.clear_attempts();
  for (const char* w : {"w1", "w2", "w3"}) {
    auto* a = c.result.add_attempts();
    a->set_worker_id(w);
    a->set_failure(v1::FAILURE_CLASS_INFRA);
    a->set_failure_detail("killed by signal 11 (Segmentation fault)");
  }
  c.infra_failed = true;
  auto t = c.Classify();
  EXPECT_EQ(t.triage_class(), v1::TRIAGE_CLASS_INFRA);
  EXPECT_NE(t.reason().find("3 worker"), std::string::npos) << t.reason();
  // Crashed once, then passed: recorded as recovered infrastructure, not a pass.
  Case once = Make(v1::VERDICT_PASS, v1::VERDICT_PASS);
  once.result.clear_attempts();
  auto* a = once.result.add_attempts();
  a->set_worker_id("w1");
  a->set_failure(v1::FAILURE_CLASS_INFRA);
  a->set_failure_detail("killed by signal 11");
  once.result.add_attempts()->set_worker_id("w2");
  auto t2 = once.Classify();
  EXPECT_EQ(t2.triage_class(), v1::TRIAGE_CLASS_INFRA);
  EXPECT_NE(t2.reason().find("recovered"), std::string::npos);
  EXPECT_EQ(Make(v1::VERDICT_PASS, v1::VERDICT_PASS).Classify().triage_class(), v1::TRIAGE_CLASS_PASS);
}

}  // namespace
}  // namespace mxval::triage
