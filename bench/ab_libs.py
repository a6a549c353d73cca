#!/usr/bin/env python3
"""A/B of two kernel libraries (or of one library under two settings of its
environment knobs, or under two dispatch tables) in one process: the
table's kernel and config for each (shape, M),
timed as gpu_bench.py times it (graph replay, rotating input sets),
interleaved A, B, A, B so that drift hits both alike.

Usage: python3 bench/ab_libs.py --a OLD.so [--b NEW.so] [--env-a K=V,...] [--env-b K=V,...]
                                [--table T.json] [--table-b T2.json] [--ms 256,1024,4096] [--rounds 2]
                                [--shapes dsv3-tp8/kup,...]
--b defaults to --a and --table-b to --table; --env-a / --env-b are set while
that side's calls are captured (the kernels read their A/B knobs, e.g.
MXVAL_WGMMA_RING, per call). Each round's SM clock (NVML, bench/gpu_clocks.py)
is kept beside its time ("clock_A" / "clock_B" in the JSON) and printed under
the row when a side's clock moved or a power / thermal reason was set; each
window starts off the power cap (gpu_bench.py's settle; --no-settle to skip).
"""
import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import gpu_bench as gb  # noqa: E402
import gpu_clocks  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", default=None)
    ap.add_argument("--env-a", default="")
    ap.add_argument("--env-b", default="")
    ap.add_argument("--table", default=os.path.join(os.path.dirname(__file__), "..", "kernels", "configs", "sm_90a.json"))
    ap.add_argument("--table-b", default=None, help="side B's dispatch table (default: --table)")
    ap.add_argument("--ms", default="256,1024,4096")
    ap.add_argument("--shapes", default="all", help="comma-separated preset/op names (e.g. dsv3-tp8/kup), or all")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-clocks", action="store_true")
    ap.add_argument("--no-settle", action="store_true")
    ap.add_argument("--out", default="ab_libs.json")
    args = ap.parse_args()
    gb.open_clocks(args.no_clocks, not args.no_settle)
    libs = {"A": gb.load_kernels(args.a)[1]}
    libs["B"] = libs["A"] if args.b is None or args.b == args.a else gb.load_kernels(args.b)[1]
    envs = {"A": gb.parse_settings(args.env_a), "B": gb.parse_settings(args.env_b)}
    print("A = %s %s, B = %s %s" % (args.a, envs["A"], args.b or args.a, envs["B"]))
    tables = {"A": json.load(open(args.table))}
    tables["B"] = json.load(open(args.table_b)) if args.table_b else tables["A"]
    gen = torch.Generator(device="cuda")
    gen.manual_seed(11)
    rows = []
    print("%-14s %5s %-30s %s" % ("shape", "M", "config (B's)", "  ".join("A%d     B%d    " % (i, i) for i in range(args.rounds))))
    for (preset, op, B, N, K, strided, bmaj) in gb.SHAPES:
        if args.shapes != "all" and "%s/%s" % (preset, op) not in args.shapes.split(","):
            continue
        for M in [int(m) for m in args.ms.split(",")]:
            picks = {name: gb.table_lookup(tables[name], op, M, N, K)[1:] for name in ("A", "B")}
            kname, cfg = picks["B"]
            one = gb.Problem(op, B, M, N, K, strided, bmaj, gen)
            nsets = max(2, min(16, -(-160 * 2**20 // one.min_bytes())))
            probs = [one] + [gb.Problem(op, B, M, N, K, strided, bmaj, gen) for _ in range(nsets - 1)]
            times, clocks = {"A": [], "B": []}, {"A": [], "B": []}
            for _ in range(args.rounds):
                for name in ("A", "B"):
                    ours = gb.Ours(libs[name][picks[name][0]][0])
                    with gb.environment(envs[name]):
                        r = gb.time_calls([ours.call(p, picks[name][1]) for p in probs], graph=True)
                    times[name].append(r["median"])
                    clocks[name].append(r.get("clock"))
            rows.append({"shape": "%s/%s" % (preset, op), "M": M, "kernel": kname, "config": str(cfg),
                         "kernel_a": picks["A"][0], "config_a": str(picks["A"][1]), "A": times["A"],
                         "B": times["B"], "clock_A": clocks["A"], "clock_B": clocks["B"],
                         "B_over_A": statistics.median(times["B"]) / statistics.median(times["A"])})
            print("%-14s %5d %-30s %s   B/A %.3f" % ("%s/%s" % (preset, op), M, "%s %s" % (kname[8:], cfg),
                  "  ".join("%6.2f %6.2f" % (a, b) for a, b in zip(times["A"], times["B"])), rows[-1]["B_over_A"]))
            if any(c and (c["reasons"] or gpu_clocks.moved(c)) for c in clocks["A"] + clocks["B"]):
                print("%-14s %5s   clk MHz %s" % ("", "", "  ".join(
                    "A%d %s  B%d %s" % (i, gpu_clocks.short(a), i, gpu_clocks.short(b))
                    for i, (a, b) in enumerate(zip(clocks["A"], clocks["B"])))))
            sys.stdout.flush()
            with open(args.out, "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
