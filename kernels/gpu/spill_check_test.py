#!/usr/bin/env python3
"""Unit test of kernels/gpu/spill_check.py on a synthetic ptxas report: a
clean report passes; a bf16 instance that spills, a missing instance, an
allowed spill that grew, a ptxas performance advisory (wgmma serialized),
an unknown kernel and a report with no function lines fail; mxfp4-even
spills and advisories are reported, not failed; the AMDGPU metadata form
(spilled VGPRs and SGPRs) is read and checked the same way; names whose
namespace hash ends in digits and negative template arguments parse."""
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spill_check as sc  # noqa: E402

NS = "_ZN5mxval3gpu47_GLOBAL__N__f3aeaad8_14_a16wfp4_gpu_cu_5e7c2ef3"  # hash ends in a digit


def mangled(name, args, params="EEvNS0_10GemmParamsE"):
    enc = "".join(f"Lb{int(a)}E" if isinstance(a, bool) else (f"Lin{-a}E" if a < 0 else f"Li{a}E") for a in args)
    return f"{NS}{len(name)}{name}I{enc}{params}"


def report(funcs):
    """ptxas -v lines for {mangled: (registers, stack, spill stores, spill loads)}."""
    out = ["ptxas info    : 0 bytes gmem"]
    for m, (regs, stack, sst, sld) in funcs.items():
        out += [f"ptxas info    : Compiling entry function '{m}' for 'sm_90a'",
                f"ptxas info    : Function properties for {m}",
                f"    {stack} bytes stack frame, {sst} bytes spill stores, {sld} bytes spill loads",
                f"ptxas info    : Used {regs} registers, used 1 barriers",
                "ptxas info    : Compile time = 1.0 ms"]
    return "\n".join(out) + "\n"


RS = (64, 1, 512, 1, 10)  # BM, WGS, K, KS, STAGES
TABLE = {
    "arch": "sm_90a", "kernel": "a16wfp4_tc",
    "ops": {
        "vup": {"N=128,K=512": {
            "M_LEQ_16": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 16, "BLOCK_SIZE_K": 64, "NUM_KSPLIT": 1,
                         "num_stages": 1, "num_warps": 8, "kernel": "a16wfp4_decode"},
            "any": {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "NUM_KSPLIT": 1,
                    "num_stages": 10, "num_warps": 5, "kernel": "a16wfp4_wgmma_rs"}}},
        "custom": {"default": {
            "any": {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "NUM_KSPLIT": 1,
                    "num_stages": 3, "num_warps": 4}}},
    },
}


def clean_funcs():
    return {
        mangled("A16wfp4WgmmaRsKernel", [*RS, False, 1, 32], "EEv14CUtensorMap_stS3_NS0_10GemmParamsEiii"):
            (186, 0, 0, 0),
        mangled("A16wfp4WgmmaRsKernel", [*RS, True, 1, 32], "EEv14CUtensorMap_stS3_NS0_10GemmParamsEiii"):
            (255, 64, 360, 384),  # mxfp4-even: reported only
        mangled("A16wfp4DecodeKernel", [2, 4, 1, 512]): (78, 0, 0, 0),
        mangled("A16wfp4TcKernel", [32, 64, 64, 1, 4, 3]): (96, 8, 4, 8),  # in ALLOWED
        mangled("A16wfp4TcKernel", [32, 64, 64, 2, 2, 3]): (96, 0, 0, 0),  # another warp split, same count
        mangled("DequantSelfTestKernel", [], "EPji"): (26, 0, 0, 0),
    }


def amd_asm(funcs):
    """AMDGPU assembly metadata for {mangled: (vgprs, agprs, sgprs, vgpr spills, sgpr spills)}."""
    out = ["\t.text", "\t.amdgpu_metadata", "---", "amdhsa.kernels:"]
    for m, (v, a, sg, vs, ss) in funcs.items():
        out += [f"  - .agpr_count:     {a}", "    .args:", "      - .offset:         0",
                "        .size:           168", f"    .name:           {m}",
                "    .private_segment_fixed_size: 0", f"    .sgpr_count:     {sg}", f"    .sgpr_spill_count: {ss}",
                f"    .symbol:         {m}.kd", f"    .vgpr_count:     {v}", f"    .vgpr_spill_count: {vs}",
                "    .wavefront_size: 64"]
    out += ["amdhsa.target:   amdgcn-amd-amdhsa--gfx940", "amdhsa.version:", "  - 1", "  - 1", "...",
            "\t.end_amdgpu_metadata"]
    return "\n".join(out) + "\n"


AMD_TABLE = {"arch": "gfx942", "kernel": "a16wfp4_tc", "ops": {"custom": {"default": {
    "M_LEQ_64": {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "NUM_KSPLIT": 1,
                 "num_stages": 3, "num_warps": 4},
    "any": {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "NUM_KSPLIT": 1,
            "num_stages": 2, "num_warps": 4, "kernel": "a16wfp4_tc_panel"}}}}}


def run_main(table, text, flag="--log"):
    with tempfile.TemporaryDirectory() as d:
        tp, lp = os.path.join(d, "t.json"), os.path.join(d, "p.log")
        with open(tp, "w") as f:
            json.dump(table, f)
        with open(lp, "w") as f:
            f.write(text)
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            rc = sc.main(["--table", tp, flag, lp])
        return rc, out.getvalue(), err.getvalue()


class SpillCheckTest(unittest.TestCase):
    def test_clean_report_passes_and_lists_each_instance(self):
        rc, out, err = run_main(TABLE, report(clean_funcs()))
        self.assertEqual(rc, 0, err)
        self.assertIn("| A16wfp4WgmmaRsKernel<64, 1, 512, 1, 10, false, 1, 32> | 186 | 0 | 0 | checked |", out)
        self.assertIn("| A16wfp4WgmmaRsKernel<64, 1, 512, 1, 10, true, 1, 32> | 255 | 360 | 384 | reported only", out)
        self.assertIn("| A16wfp4DecodeKernel<2, 4, 1, 512> | 78 | 0 | 0 | checked |", out)
        self.assertIn("A16wfp4TcKernel<32, 64, 64, 1, 4, 3> | 96 | 4 | 8 | checked: at most 4 / 8", out)
        self.assertIn("A16wfp4TcKernel<32, 64, 64, 2, 2, 3> | 96 | 0 | 0 | checked |", out)
        self.assertIn("5 instances named by", out)

    def test_bf16_spill_fails_naming_the_bucket(self):
        f = clean_funcs()
        key = next(k for k in f if "Lb0E" in k)
        f[key] = (255, 16, 12, 12)
        rc, _, err = run_main(TABLE, report(f))
        self.assertEqual(rc, 1)
        self.assertIn("vup N=128,K=512 any (a16wfp4_wgmma_rs): A16wfp4WgmmaRsKernel<64, 1, 512, 1, 10, false, 1, 32> "
                      "spills (12 bytes stored, 12 loaded; allowed 0 / 0)", err)

    def test_missing_instance_fails(self):
        f = {k: v for k, v in clean_funcs().items() if "DecodeKernel" not in k}
        rc, _, err = run_main(TABLE, report(f))
        self.assertEqual(rc, 1)
        self.assertIn("vup N=128,K=512 M_LEQ_16 (a16wfp4_decode): no instance A16wfp4DecodeKernel<2, 4, 1, 512>", err)

    def test_allowed_spill_that_grew_fails(self):
        f = clean_funcs()
        f[mangled("A16wfp4TcKernel", [32, 64, 64, 1, 4, 3])] = (96, 8, 8, 8)
        rc, _, err = run_main(TABLE, report(f))
        self.assertEqual(rc, 1)
        self.assertIn("A16wfp4TcKernel<32, 64, 64, 1, 4, 3> spills (8 bytes stored, 8 loaded; allowed 4 / 8)", err)

    def test_performance_advisory_fails_for_bf16_and_is_listed_for_mxfp4_even(self):
        f = clean_funcs()
        bf16 = next(k for k in f if "Lb0E" in k)
        mx = next(k for k in f if "Lb1E" in k)
        text = report(f) + "".join(
            f"ptxas info    : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized "
            f"due to wgmma pipeline crossing function boundary at a function call in the function '{k}'\n"
            for k in (bf16, mx))
        rc, out, err = run_main(TABLE, text)
        self.assertEqual(rc, 1)
        self.assertIn("vup N=128,K=512 any (a16wfp4_wgmma_rs): A16wfp4WgmmaRsKernel<64, 1, 512, 1, 10, false, 1, 32>: "
                      "ptxas: (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized", err)
        self.assertNotIn("true, 1, 32>: ptxas", err)
        self.assertIn("reported only (mxfp4-even); (C7510) Potential Performance Loss", out)

    def test_config_field_the_kernel_fixes_fails(self):
        t = json.loads(json.dumps(TABLE))
        t["ops"]["vup"]["N=128,K=512"]["M_LEQ_16"]["num_stages"] = 2
        rc, _, err = run_main(t, report(clean_funcs()))
        self.assertEqual(rc, 1)
        self.assertIn("M_LEQ_16 (a16wfp4_decode): a16wfp4_decode is compiled for num_stages = 1 only, the bucket has 2",
                      err)

    def test_warp_count_no_instance_can_have_fails(self):
        t = json.loads(json.dumps(TABLE))
        t["ops"]["vup"]["N=128,K=512"]["any"]["num_warps"] = 9
        t["ops"]["vup"]["N=128,K=512"]["M_LEQ_16"]["num_warps"] = 3
        rc, _, err = run_main(t, report(clean_funcs()))
        self.assertEqual(rc, 1)
        self.assertIn("any (a16wfp4_wgmma_rs): a16wfp4_wgmma_rs is compiled for num_warps 5 or 12 only", err)
        self.assertIn("M_LEQ_16 (a16wfp4_decode): a16wfp4_decode needs BLOCK_SIZE_N a multiple of 8", err)

    def test_unknown_kernel_fails(self):
        t = json.loads(json.dumps(TABLE))
        t["ops"]["vup"]["N=128,K=512"]["any"]["kernel"] = "a16wfp4_new"
        rc, _, err = run_main(t, report(clean_funcs()))
        self.assertEqual(rc, 1)
        self.assertIn("unknown kernel 'a16wfp4_new'", err)

    def test_bucket_without_a_field_and_table_without_buckets(self):
        t = json.loads(json.dumps(TABLE))
        del t["ops"]["vup"]["N=128,K=512"]["any"]["num_stages"]
        rc, _, err = run_main(t, report(clean_funcs()))
        self.assertEqual(rc, 1)
        self.assertIn("any (a16wfp4_wgmma_rs): the bucket has no 'num_stages'", err)
        rc, _, err = run_main({"arch": "sm_90a"}, report(clean_funcs()))
        self.assertEqual(rc, 2)
        self.assertIn("names no kernel", err)

    def test_report_without_function_lines_is_an_error(self):
        rc, _, err = run_main(TABLE, "nvcc warning : something else\n")
        self.assertEqual(rc, 2)
        self.assertIn("holds no ptxas function report", err)

    def test_amdgpu_metadata(self):
        tc = mangled("A16wfp4TcKernel", [32, 64, 64, 1, 4, 3]).replace(NS, "_ZN5mxval3gpu12_GLOBAL__N_1")
        panel = mangled("A16wfp4PanelKernel", [128, 64, 128, 2, 2, 2]).replace(NS, "_ZN5mxval3gpu12_GLOBAL__N_1")
        clean = {tc: (116, 8, 97, 0, 0), panel: (152, 32, 99, 0, 0)}
        rc, out, err = run_main(AMD_TABLE, amd_asm(clean), "--amdgpu-asm")
        self.assertEqual(rc, 0, err)
        self.assertIn("| instance | registers | VGPRs spilled | SGPRs spilled | |", out)
        self.assertIn("| A16wfp4TcKernel<32, 64, 64, 1, 4, 3> | 116 v + 8 a + 97 s | 0 | 0 | checked |", out)
        self.assertIn("| A16wfp4PanelKernel<128, 64, 128, 2, 2, 2> | 152 v + 32 a + 99 s | 0 | 0 | checked |", out)
        # ALLOWED is the ptxas report's: on AMD the same instance may not spill at all.
        rc, _, err = run_main(AMD_TABLE, amd_asm({**clean, tc: (128, 8, 102, 1, 0)}), "--amdgpu-asm")
        self.assertEqual(rc, 1)
        self.assertIn("custom default M_LEQ_64 (a16wfp4_tc): A16wfp4TcKernel<32, 64, 64, 1, 4, 3> spills "
                      "(1 VGPRs spilled, 0 SGPRs spilled; allowed 0 / 0)", err)
        rc, _, err = run_main(AMD_TABLE, amd_asm({**clean, panel: (152, 32, 99, 0, 3)}), "--amdgpu-asm")
        self.assertEqual(rc, 1)
        self.assertIn("(0 VGPRs spilled, 3 SGPRs spilled; allowed 0 / 0)", err)
        rc, _, err = run_main(AMD_TABLE, "\t.text\n", "--amdgpu-asm")
        self.assertEqual(rc, 2)
        self.assertIn("holds no amdhsa.kernels metadata", err)

    def test_demangle(self):
        self.assertEqual(sc.demangle_kernel(mangled("A16wfp4DecodeKernel", [2, -4, 1, 512])),
                         ("A16wfp4DecodeKernel", [2, -4, 1, 512]))
        self.assertEqual(sc.demangle_kernel(mangled("A16wfp4WgmmaRsKernel", [64, True, False])),
                         ("A16wfp4WgmmaRsKernel", [64, True, False]))
        self.assertIsNone(sc.demangle_kernel(mangled("DequantSelfTestKernel", [], "EPji")))
        self.assertIsNone(sc.demangle_kernel(NS + "15A16wfp4TcKernelILi32EXtruncated"))


if __name__ == "__main__":
    unittest.main()
