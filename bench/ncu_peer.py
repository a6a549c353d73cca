#!/usr/bin/env python3
"""Our kernel and the cuBLAS peer, one launch each per case, for Nsight Compute.

Run it under ncu so that only the calls inside the "prof" NVTX range are
profiled (the input generation and the warm-up calls are not):

  ncu --nvtx --nvtx-include "prof/" --metrics <list> \\
      python3 bench/ncu_peer.py --lib build-gpu/lib/libmxval_cuda_kernels.so \\
      --cases dsv3-tp8/vup:64,dsv3-tp8/kup:16384

Each case prints a "== shape M side config" line before its launch, so ncu's
report for that launch follows the line that names it. Our side runs the
table's kernel and config (kernels/configs/sm_90a.json, as gpu_bench.py does);
the cuBLAS side is gpu_bench.py's peer (torch.bmm on weights dequantized ahead
of time). Both outputs are checked against an fp32 torch reference after the
profiled launches, so a profile of a wrong result is not reported as a result.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_bench as gb  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--table", default=os.path.join(os.path.dirname(__file__), "..", "kernels", "configs", "sm_90a.json"))
    ap.add_argument("--cases", required=True, help="shape:M,... e.g. dsv3-tp8/vup:64")
    args = ap.parse_args()
    _lib, kernels = gb.load_kernels(args.lib)
    table = json.load(open(args.table))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(5)
    bad = 0
    for case in args.cases.split(","):
        name, op, B, M, N, K, strided, bmaj = gb.parse_case(case)
        p = gb.Problem(op, B, M, N, K, strided, bmaj, gen)
        _entry, kname, cfg = gb.table_lookup(table, op, M, N, K)
        ours = gb.Ours(kernels[kname][0]).call(p, cfg)
        peer = gb.cublas_call(p)
        for f in (ours, peer):  # warm-up, outside the profiled range
            f()
        torch.cuda.synchronize()
        p.y.fill_(float("nan"))
        p.y_peer.fill_(float("nan"))
        for side, f in (("mxval", ours), ("cublas", peer)):
            print("== %s M=%d %s %s" % (name, M, side, ("%s %s" % (kname, cfg)) if side == "mxval" else "torch.bmm"))
            sys.stdout.flush()
            torch.cuda.nvtx.range_push("prof")
            f()
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
        ref = torch.bmm(p.x.float(), p.w_bf16.float().transpose(1, 2))
        for side, y in (("mxval", p.y), ("cublas", p.y_peer)):
            err = float((y.float() - ref).norm() / ref.norm())
            ok = err <= 2e-2  # NaN (an unwritten element) fails too
            bad += not ok
            print("   %s %s rel_err %.3g %s" % (name, side, err, "ok" if ok else "WRONG"))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
