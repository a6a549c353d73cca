#!/usr/bin/env python3
"""Bounds for two kernel ideas, measured before building them (one run, one GPU).

1. Split-K over a cluster for the register-sourced kernel at small M: a CTA
   that owns K / s of the reduction costs at least what the unsplit kernel
   costs on a problem with K / s (same N, M, B; each CTA alone on its SM as
   long as the grid fits one wave). Times a16wfp4_wgmma_rs on such reduced-K
   problems next to the full-K problem and cuBLAS on it.
2. What launching in clusters costs by itself: a NUM_KSPLIT = 1 config
   timed plainly and with MXVAL_RS_CLUSTER=2 (clusters of two CTAs that the
   kernel ignores), same process, interleaved.
3. The write-only bandwidth behind the large-M floor: torch's fill_ of y
   (B, M, N), timed in CUDA graphs like the benchmark.

Usage: python3 bench/probe_bounds.py --lib build-gpu/lib/libmxval_cuda_kernels.so
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import gpu_bench as gb  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--parts", default="split,cluster,memory")
    args = ap.parse_args()
    parts = args.parts.split(",")
    _lib, kernels = gb.load_kernels(args.lib)
    rs = gb.Ours(kernels["a16wfp4_wgmma_rs"][0])
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1)
    if "cluster" in parts:
        print("== cluster launch cost: NUM_KSPLIT = 1, plain vs MXVAL_RS_CLUSTER=2 (graph median us, 3 rounds)")
        for name, N, K, bmaj in (("glm5/vup", 256, 512, True), ("dsv3/vup", 128, 512, True), ("dsv3/kup", 512, 128, False)):
            for M in (64, 256):
                ps = [gb.Problem("vup", 16, M, N, K, False, bmaj, gen) for _ in range(8)]
                cfg = gb.TileConfig(64, 64, 64, 1, 10, 5)
                line = "%-9s M=%4d BM64 KS1:" % (name, M)
                for _ in range(3):
                    for env in ({}, {"MXVAL_RS_CLUSTER": "2"}):
                        with gb.environment(env):
                            t = gb.time_calls([rs.call(q, cfg) for q in ps], True)["median"]
                        line += " %s %.2f" % ("cluster" if env else "plain", t)
                print(line)
                sys.stdout.flush()
    cases = []
    if "split" in parts:
        print("== split-K bound: a16wfp4_wgmma_rs on K / s (graph median us)")
        cases = [("glm5/vup", 256, 512, True), ("dsv3/vup", 128, 512, True), ("glm5/kup", 512, 192, False),
                 ("dsv3/kup", 512, 128, False)]
    for name, N, K, bmaj in cases:
        for M in (64, 128, 256):
            # 8 rotating input sets, as gpu_bench.py uses at these sizes (L2 does not flatter)
            full = [gb.Problem("vup", 16, M, N, K, False, bmaj, gen) for _ in range(8)]
            cb = gb.time_calls([gb.cublas_call(q) for q in full], True)["median"]
            line = "%-9s M=%4d cublas(K=%d) %6.2f |" % (name, M, K, cb)
            for kk in (K, 256, 128, 64):
                if kk > K or K % kk:
                    continue
                ps = [gb.Problem("vup", 16, M, N, kk, False, bmaj, gen) for _ in range(8)]
                p = ps[0]
                for bm in (64, 128):
                    cfg = gb.TileConfig(bm, 64, 64, 1, 10 if bm == 64 else 8, 5)
                    if rs.can(p, cfg):
                        t = gb.time_calls([rs.call(q, cfg) for q in ps], True)["median"]
                        line += " K=%d BM%d %6.2f" % (kk, bm, t)
            print(line)
            sys.stdout.flush()
    if "memory" not in parts:
        return
    print("== write-only probe at M = 4096 / 16384: fill_ of y (graph median us, TB/s written)")
    for name, N in (("glm5/kup", 512), ("dsv3/kup", 512), ("glm5/vup", 256), ("dsv3/vup", 128)):
        for M in (4096, 16384):
            y = torch.empty(16, M, N, dtype=torch.bfloat16, device="cuda")
            t = gb.time_calls([lambda y=y: y.fill_(1.0)], True)["median"]
            print("%-9s M=%5d y %.0f MB | fill(y) %7.2f us %.2f TB/s" % (name, M, y.numel() * 2 / 1e6, t, y.numel() * 2 / t / 1e6))
            sys.stdout.flush()
            del y
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
