#!/usr/bin/env python3
"""Does the number of batches in flight set a large-M call's DRAM efficiency?

The same bytes and FLOPs as a B = 16 K-up call at M = 16384, re-batched as
B in {16, 8, 4, 2, 1} with M = 16 * 16384 / B, timed for our table's config
(the shape's large-M bucket) and for the cuBLAS peer, interleaved per round
in one process, graph replay over two input sets (gpu_bench.py's timing).

Why: our register-sourced kernel gives each CTA one (N slice, batch) at
M >= 4096, so all 16 batches stream at once (16 x reads, 16 y regions);
how cuBLAS's persistent 256x128 kernel orders its tiles is not known here.
Nsight Compute's PM sampling (BENCHMARKS.md, twenty-sixth session)
had ours at about 75% of DRAM peak in steady state against cuBLAS's 81% at
DeepSeek-V3 K-up M = 16384. With B = 1 the kernel's CTAs all work on
neighbouring M tiles of one batch, so if the batches in flight cost DRAM
efficiency, the B = 1 row is faster at the same bytes.

Usage: python3 bench/batch_locality.py --lib build-gpu/lib/libmxval_cuda_kernels.so [--shapes dsv3-tp8/kup]
       [--bs 16,4,1] [--rounds 2] [--out batch_locality.json]
"""
import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_bench as gb  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    gb.add_probe_args(ap, "batch_locality.json")
    ap.add_argument("--shapes", default="dsv3-tp8/kup,glm5-tp4/kup")
    ap.add_argument("--rows", type=int, default=16 * 16384, help="B * M, the same for every B")
    ap.add_argument("--bs", default="16,8,4,2,1")
    ap.add_argument("--env", default="", help="K=V,... set while our calls are captured (the library's per-call knobs)")
    args = ap.parse_args()
    kernels, table, gen, shapes = gb.start_probe(args, 3)
    env = gb.parse_settings(args.env)
    rows = []
    print("%-14s %3s %7s %-32s %-9s %s" % ("shape", "B", "M", "config", "rel_err", "rounds: mxval / cublas (us)"))
    for name in args.shapes.split(","):
        _preset, op, B0, N, K, strided, bmaj = shapes[name]
        _entry, kname, cfg = gb.table_lookup(table, op, args.rows // B0, N, K)  # the B = 16 row's config
        ours = gb.Ours(kernels[kname][0])
        for B in [int(b) for b in args.bs.split(",")]:
            M = args.rows // B
            p = gb.Problem(op, B, M, N, K, strided, bmaj, gen)
            with gb.environment(env):
                err = gb.checked_run(ours.call(p, cfg), p)
            probs = [p, gb.Problem(op, B, M, N, K, strided, bmaj, gen)]  # two input sets, rotated
            t = {"mxval": [], "cublas": []}
            clk = {"mxval": [], "cublas": []}
            for _ in range(args.rounds):
                with gb.environment(env):
                    r = gb.time_calls([ours.call(q, cfg) for q in probs], True)
                t["mxval"].append(r["median"])
                clk["mxval"].append(r.get("clock"))
                r = gb.time_calls([gb.cublas_call(q) for q in probs], True)
                t["cublas"].append(r["median"])
                clk["cublas"].append(r.get("clock"))
            row = {"shape": name, "B": B, "M": M, "N": N, "K": K, "kernel": kname, "config": str(cfg), "rel_err": err,
                   "mxval": t["mxval"], "cublas": t["cublas"], "clock_mxval": clk["mxval"], "clock_cublas": clk["cublas"],
                   "bytes": p.min_bytes()}
            rows.append(row)
            print("%-14s %3d %7d %-32s %-9.2g %s   median %.1f / %.1f" % (
                name, B, M, "%s %s" % (kname[8:], cfg), err,
                "  ".join("%.1f / %.1f" % (a, c) for a, c in zip(t["mxval"], t["cublas"])),
                statistics.median(t["mxval"]), statistics.median(t["cublas"])))
            sys.stdout.flush()
            del probs, p
            torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "env": env, "rows": rows}, f, indent=1)
    bad = [r for r in rows if not r["rel_err"] <= 2e-2]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
