#!/usr/bin/env python3
"""The same large-M K-up call on other memory layouts of x and y.

The benchmark lays K-up x out as MLA does: K of every K + 64 elements of q,
q being (M, B, K + 64), so one m's x rows of all B batches are neighbours in
memory and one batch's rows are B * (K + 64) elements apart; y is (B, M, N).
Our kernel takes any strides, so the same call (the table's config, the same
bytes and FLOPs) can be timed on:
  q         the benchmark's layout (the reference row)
  x_bmk     x contiguous per batch, (B, M, K)
  x_mbk     x (M, B, K): batches interleaved as in q, without the rope gap
  y_pad<r>  y with r spare rows between batches (batch stride (M + r) * N)
and cuBLAS (torch.bmm) on the x layouts, to tell which side of the traffic
(x reads or y writes) a layout change moves. Graph replay, two input sets,
interleaved rounds (gpu_bench.py's timing); every layout's output is checked
against an fp32 reference.

Usage: python3 bench/layout_probe.py --lib build-gpu/lib/libmxval_cuda_kernels.so
       [--shapes dsv3-tp8/kup,glm5-tp4/kup] [--ms 16384] [--rounds 2] [--out layout_probe.json]
"""
import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_bench as gb  # noqa: E402


def relayout(p, name):
    """Rewrites problem p's x or y storage in layout `name` (same values of x)."""
    B, M, N = p.B, p.M, p.N
    if name == "x_bmk":
        p.x = p.x.contiguous()
    elif name == "x_mbk":
        p.x = p.x.transpose(0, 1).contiguous().transpose(0, 1)
    elif name.startswith("y_pad"):
        r = int(name[5:])
        store = torch.empty(B * (M + r) * N, dtype=torch.bfloat16, device="cuda")
        p.y = store.as_strided((B, M, N), ((M + r) * N, N, 1))
    elif name != "q":
        raise SystemExit("unknown layout %r" % name)
    return p


def main():
    ap = argparse.ArgumentParser()
    gb.add_probe_args(ap, "layout_probe.json")
    ap.add_argument("--shapes", default="dsv3-tp8/kup,glm5-tp4/kup")
    ap.add_argument("--ms", default="16384")
    ap.add_argument("--layouts", default="q,x_bmk,x_mbk,y_pad1,y_pad9")
    args = ap.parse_args()
    kernels, table, gen, shapes = gb.start_probe(args, 4)
    rows = []
    print("%-14s %6s %-8s %-9s %s" % ("shape", "M", "layout", "rel_err", "rounds: mxval / cublas (us)"))
    for name in args.shapes.split(","):
        _preset, op, B, N, K, strided, bmaj = shapes[name]
        for M in [int(m) for m in args.ms.split(",")]:
            _entry, kname, cfg = gb.table_lookup(table, op, M, N, K)
            ours = gb.Ours(kernels[kname][0])
            for lay in args.layouts.split(","):
                probs = [relayout(gb.Problem(op, B, M, N, K, strided, bmaj, gen), lay) for _ in range(2)]
                p = probs[0]
                err = gb.checked_run(ours.call(p, cfg), p)
                with_peer = not lay.startswith("y_pad")
                t = {"mxval": [], "cublas": []}
                for _ in range(args.rounds):
                    t["mxval"].append(gb.time_calls([ours.call(q, cfg) for q in probs], True)["median"])
                    if with_peer:
                        t["cublas"].append(gb.time_calls([gb.cublas_call(q) for q in probs], True)["median"])
                rows.append({"shape": name, "M": M, "layout": lay, "config": str(cfg), "rel_err": err,
                             "x_strides": list(p.x.stride()), "y_strides": list(p.y.stride()), **t})
                print("%-14s %6d %-8s %-9.2g %s   median %.1f / %s" % (
                    name, M, lay, err, "  ".join("%.1f / %s" % (a, ("%.1f" % c) if with_peer else "-")
                                                for a, c in zip(t["mxval"], t["cublas"] or [None] * args.rounds)),
                    statistics.median(t["mxval"]), ("%.1f" % statistics.median(t["cublas"])) if with_peer else "-"))
                sys.stdout.flush()
                del probs, p
                torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    sys.exit(1 if any(not r["rel_err"] <= 2e-2 for r in rows) else 0)


if __name__ == "__main__":
    main()
