#include "service/triage/diff.h"

#include "gtest/gtest.h"
#include "service/triage/change_index.h"

namespace mxval::triage {
namespace {

const char kGitDiff[] = R"(diff --git a/python/pkg/srt/layers/quantization/mxfp4.py b/python/pkg/srt/layers/quantization/mxfp4.py
index 1111111..2222222 100644
--- a/python/pkg/srt/layers/quantization/mxfp4.py
+++ b/python/pkg/srt/layers/quantization/mxfp4.py
@@ -40,7 +40,9 @@ class Mxfp4MoEMethod(FusedMoEMethodBase):
     def apply(self, layer, x):
-        out = old_path(x)
+        if envs.PKG_USE_TRITON_MXFP4_MOE:
+            out = new_path(x)
+        out = old_path(x)
         return out
@@ -120,6 +122,8 @@ def _mxfp4_moe_kernel(
     pid = tl.program_id(0)
+    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
--- this content line starts like a header but is inside the hunk
     return
diff --git a/python/pkg/srt/server_args.py b/python/pkg/srt/server_args.py
index 3333333..4444444 100644
--- a/python/pkg/srt/server_args.py
+++ b/python/pkg/srt/server_args.py
@@ -10,3 +10,11 @@ def add_cli_args(parser):
     parser.add_argument("--tp-size", type=int)
+    parser.add_argument(
+        "--enable-mxfp4-triton-moe",
+        action="store_true",
+    )
+    os.environ.get("PKG_NEW_SWITCH_X", "0")
+    fast = get_bool_env_var(
+        "PKG_MULTILINE_SWITCH", "true")
+    cmd = ["--not-a-definition", "x"]
diff --git a/test/srt/test_mxfp4_moe.py b/test/srt/test_mxfp4_moe.py
new file mode 100644
index 0000000..5555555
--- /dev/null
+++ b/test/srt/test_mxfp4_moe.py
@@ -0,0 +1,3 @@
+@triton.jit
+def _helper_kernel(x):
+    pass
diff --git a/old/gone.py b/old/gone.py
deleted file mode 100644
index 6666666..0000000
--- a/old/gone.py
+++ /dev/null
@@ -1,2 +0,0 @@
-def gone():
-    pass
diff --git a/a/before.py b/a/after.py
similarity index 90%
rename from a/before.py
rename to a/after.py
diff --git a/weights.bin b/weights.bin
index 7777777..8888888 100644
Binary files a/weights.bin and b/weights.bin differ
)";

TEST(Diff, GitDiffFilesFunctionsAndSymbols) {
  auto d = ParseUnifiedDiff(kGitDiff);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->files.size(), 6u);
  const DiffFile& q = d->files[0];
  EXPECT_EQ(q.path, "python/pkg/srt/layers/quantization/mxfp4.py");
  EXPECT_EQ(q.added_lines, 4);
  EXPECT_EQ(q.removed_lines, 2) << "a removed line whose text starts with \"-- \" is not a header";
  EXPECT_TRUE(q.functions.count("apply")) << "the enclosing def of a changed line";
  EXPECT_TRUE(q.functions.count("_mxfp4_moe_kernel")) << "the hunk header's function";
  EXPECT_TRUE(q.kernels.count("_mxfp4_moe_kernel"));
  EXPECT_TRUE(q.env.count("PKG_USE_TRITON_MXFP4_MOE"));
  const DiffFile& sa = d->files[1];
  EXPECT_TRUE(sa.flags.count("--enable-mxfp4-triton-moe"));
  EXPECT_TRUE(sa.flags.count("enable_mxfp4_triton_moe"));
  EXPECT_FALSE(sa.flags.count("--tp-size")) << "a context line introduces nothing";
  EXPECT_TRUE(sa.env.count("PKG_NEW_SWITCH_X"));
  EXPECT_TRUE(sa.env.count("PKG_MULTILINE_SWITCH")) << "the name on the line after the call";
  EXPECT_FALSE(sa.flags.count("--not-a-definition")) << "a command line uses flags, it does not define them";
  EXPECT_TRUE(d->files[2].added);
  EXPECT_TRUE(d->files[2].kernels.count("_helper_kernel")) << "decorated with @triton.jit";
  EXPECT_TRUE(d->files[3].deleted);
  EXPECT_EQ(d->files[3].path, "old/gone.py");
  EXPECT_TRUE(d->files[4].renamed);
  EXPECT_EQ(d->files[4].old_path, "a/before.py");
  EXPECT_EQ(d->files[4].path, "a/after.py");
  EXPECT_TRUE(d->files[5].binary);
}

TEST(Diff, FlagsPresentBeforeAreNotIntroduced) {
  auto d = ParseUnifiedDiff(
      "--- a/x.py\n+++ b/x.py\n@@ -1,1 +1,1 @@\n-    p.add_argument(\"--enable-foo\", help=\"old\")\n"
      "+    p.add_argument(\"--enable-foo\", help=\"new\")\n");
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->files.size(), 1u);
  EXPECT_TRUE(d->files[0].flags.empty());
  EXPECT_EQ(d->files[0].path, "x.py");
}

// Calls on changed lines are not definitions: the function the hunk header
// names stays the changed one.
TEST(Diff, CallsAreNotDefinitions) {
  auto d = ParseUnifiedDiff(
      "diff --git a/pkg/moe.py b/pkg/moe.py\n--- a/pkg/moe.py\n+++ b/pkg/moe.py\n"
      "@@ -10,2 +10,4 @@ def fused_experts_impl(x, w):\n"
      "     y = x\n"
      "+    if isinstance(w, list):\n"
      "+        raise RuntimeError(\"bad weights\")\n"
      "     return y\n"
      "diff --git a/csrc/quant.cu b/csrc/quant.cu\n--- a/csrc/quant.cu\n+++ b/csrc/quant.cu\n"
      "@@ -1,2 +1,3 @@ void launch(int n) {\n"
      "   int x = 0;\n"
      "+  return helper(n);\n"
      "   }\n");
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->files.size(), 2u);
  EXPECT_EQ(d->files[0].functions, (std::set<std::string>{"fused_experts_impl"}));
  EXPECT_EQ(d->files[1].functions, (std::set<std::string>{"launch"}));
}

TEST(Diff, BadInputIsAClearErrorAndBounded) {
  EXPECT_EQ(ParseUnifiedDiff("just some text\nno headers\n").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ParseUnifiedDiff("x").status().message().find("diff:"), std::string::npos);
  DiffLimits l;
  l.max_bytes = 10;
  EXPECT_EQ(ParseUnifiedDiff(kGitDiff, l).status().code(), absl::StatusCode::kInvalidArgument);
  l = DiffLimits();
  l.max_files = 2;
  EXPECT_NE(ParseUnifiedDiff(kGitDiff, l).status().message().find("more than 2 files"), std::string::npos);
  // A hunk that claims more lines than it has ends at the next header.
  auto d = ParseUnifiedDiff("diff --git a/a.py b/a.py\n@@ -1,50 +1,50 @@\n+x\ndiff --git a/b.py b/b.py\n@@ -1 +1 @@\n-y\n+z\n");
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->files.size(), 2u);
  EXPECT_EQ(d->files[1].path, "b.py");
  EXPECT_EQ(d->files[1].added_lines, 1);
  EXPECT_TRUE(ParseUnifiedDiff("").ok());  // an empty change
}

TEST(ChangeIndex, PathSuffixModuleAndSymbols) {
  auto d = ParseUnifiedDiff(kGitDiff);
  ASSERT_TRUE(d.ok());
  const ChangeIndex idx({"aiter/ops/triton/configs/gemm/gemm_afp4wfp4-N=7168-K=2048.json", "pkg/utils.py"}, &*d);
  const auto site = idx.MatchPath("/opt/venv/lib/python3.12/site-packages/pkg/srt/layers/quantization/mxfp4.py");
  ASSERT_GE(site.file, 0);
  EXPECT_EQ(idx.files()[site.file].path, "python/pkg/srt/layers/quantization/mxfp4.py");
  EXPECT_EQ(site.common, 5);
  EXPECT_GE(idx.MatchPath("test_mxfp4_moe.py").file, 0) << "a distinctive basename alone";
  EXPECT_LT(idx.MatchPath("/usr/lib/other/utils.py").file, 0) << "a generic basename alone is no evidence";
  EXPECT_GE(idx.MatchPath("site-packages/pkg/utils.py").file, 0);
  EXPECT_LT(idx.MatchPath("/x/other/mxfp4_unrelated.py").file, 0);
  EXPECT_LT(idx.MatchPath("/usr/lib/python3/dist-packages/vllm/srt/layers/quantization/mxfp4.py").file, 0)
      << "another package's file of the same name";
  const auto mod = idx.MatchModule("pkg.srt.layers.quantization.mxfp4.Mxfp4MoEMethod");
  ASSERT_GE(mod.file, 0);
  EXPECT_EQ(idx.files()[mod.file].path, "python/pkg/srt/layers/quantization/mxfp4.py");
  EXPECT_LT(idx.MatchModule("json.decoder").file, 0);
  std::vector<ChangeIndex::SymbolHit> hits;
  idx.MatchWord("_mxfp4_moe_kernel", &hits);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].kind, ChangeIndex::Symbol::kKernel);
  hits.clear();
  idx.MatchWord("apply", &hits);
  EXPECT_TRUE(hits.empty()) << "too generic a name to be evidence on its own";
  hits.clear();
  idx.MatchTableOps("_gemm_afp4wfp4_kernel", &hits);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].name, "gemm_afp4wfp4");
  EXPECT_TRUE(idx.ChangesFunction(site.file, "apply"));
  EXPECT_FALSE(idx.ChangesFunction(site.file, "load_weights"));
  EXPECT_GE(idx.MatchPath("a/before.py").file, 0) << "a renamed file's old path is a change too";
}

}  // namespace
}  // namespace mxval::triage
