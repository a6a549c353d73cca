#!/usr/bin/env python3
"""Per-CTA timeline of a16wfp4_wgmma's TMA-fed kernel or of a16wfp4_wgmma_rs
(--kernel; a profiling build).

Needs a kernel library compiled with -DMXVAL_WGMMA_TRACE (never the shipped
one): scripts/build_wgmma_trace.sh builds it. The kernel then records, per
CTA, SM cycles at its phases and the global timer at entry and exit; this
script replays a CUDA graph of 20 calls on rotating input sets (as
gpu_bench.py times them) and prints the last call's timeline:

  skew     CTA entry relative to the first CTA's entry (launch spread)
  init     entry -> mbarriers initialized (+ __syncthreads)
  panel    -> weight panel dequantized into shared memory, split into
    p.entry  -> the panel function entered
    p.issue  -> its first loads issued (thread 0)
    p.wait   thread 0's first item back and stored
    p.deq    -> the last thread's dequantization done
    p.sync   -> past the barrier (fence, __syncthreads)
  x wait   -> first x chunk landed (TMA), after the panel
  chunks   -> last chunk of the first tile landed
  mma      -> first tile's MMAs retired
  epi      -> first tile's TMA store issued
  rest     -> exit (later tiles, then waiting for the stores)
  span     last CTA exit - first CTA entry (global timer)
  exit spread  how far apart (global timer) the CTAs of one (M group,
           batch), one per N tile, exit: whether they drift apart over
           their tiles (JSON: exit_spread_us, one value per group)
With --kernel a16wfp4_wgmma_rs the prologue phases are its own:
  prologue barriers initialized -> thread 0's A fragments built, split into
    w.issue  -> the weight rows' cp.async issued
    s.issue  -> the scale loads issued
    w.wait   -> the rows landed (warpgroup barrier passed)
    deq      -> thread 0's A fragments built (prmt tables; rare pass), split into
      d.scales -> thread 0's scale bytes all arrived (ld.global, issued at entry)
      d.conv   -> the conversion itself
    deq.last rows landed -> the last consumer thread's A fragments built
  x wait   A fragments built -> first x chunk landed (about 0 when the
           chunk was already there)

Usage: python3 bench/wgmma_trace.py --lib /path/libmxval_cuda_kernels_trace.so
           [--cases glm5-tp4/vup:256,dsv3-tp8/vup:64] [--config BM128_BN64_BK64_KS1_S8_W9]
"""
import argparse
import ctypes as C
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import gpu_bench as gb  # noqa: E402

SLOTS = 20  # kTraceSlots in kernels/gpu/a16wfp4_gpu.cu
PHASES = [("init", 0, 1), ("panel", 1, 2), ("p.entry", 1, 14), ("p.issue", 14, 11), ("p.wait", 11, 12), ("p.deq", 12, 13),
          ("p.sync", 13, 2), ("x wait", 2, 3), ("chunks", 3, 4), ("mma", 4, 5), ("epi", 5, 6),
          ("rest", 6, 9), ("1st tile", 1, 5)]
PHASES_RS = [("init", 0, 1), ("prologue", 1, 2), ("w.issue", 1, 14), ("s.issue", 14, 11), ("w.wait", 11, 12),
             ("deq", 12, 2), ("d.scales", 12, 19), ("d.conv", 19, 2), ("deq.last", 12, 13), ("x wait", 2, 3), ("chunks", 3, 4), ("mma", 4, 5), ("epi", 5, 6),
             ("rest", 6, 9), ("1st tile", 1, 5), ("red.wait", 5, 15), ("red.rest", 15, 6)]


def q(v, f):
    v = sorted(v)
    return v[min(len(v) - 1, int(f * len(v)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--table", default=os.path.join(os.path.dirname(__file__), "..", "kernels", "configs", "sm_90a.json"))
    ap.add_argument("--cases", default="dsv3-tp8/vup:64,dsv3-tp8/vup:256,glm5-tp4/vup:256,glm5-tp4/vup:1024,"
                    "glm5-tp4/kup:256,dsv3-tp8/kup:256,glm5-tp4/kup:16384")
    ap.add_argument("--kernel", default="a16wfp4_wgmma", choices=["a16wfp4_wgmma", "a16wfp4_wgmma_rs"])
    ap.add_argument("--config", default="", help="a config name of --kernel instead of the table's")
    ap.add_argument("--variants", default="",
                    help="comma-separated NAME=VALUE environment settings, each case timed once per variant "
                         "(an empty item = the environment as is), e.g. ',MXVAL_WGMMA_RING=first'")
    ap.add_argument("--out", default="wgmma_trace.json")
    args = ap.parse_args()
    lib, kernels = gb.load_kernels(args.lib)
    copy = lib.mxval_wgmma_trace_copy
    copy.argtypes, copy.restype = [C.POINTER(C.c_ulonglong), C.c_int32], C.c_int32
    kernel, configs = kernels[args.kernel]
    phases = PHASES_RS if args.kernel == "a16wfp4_wgmma_rs" else PHASES
    ours = gb.Ours(kernel)
    table = json.load(open(args.table))
    shapes = {"%s/%s" % (s[0], s[1]): s for s in gb.SHAPES}
    gen = torch.Generator(device="cuda")
    gen.manual_seed(7)
    results = []
    buf = (C.c_ulonglong * (4096 * SLOTS))()
    for case in args.cases.split(","):
        name, m = case.split(":")
        _, op, B, N, K, strided, bmaj = shapes[name]
        M = int(m)
        if args.config:
            cfg = next(c for c in configs if str(c) == args.config)
        else:
            _, kname, cfg = gb.table_lookup(table, op, M, N, K)
            if kname != args.kernel:  # the table runs another kernel here: a default config of this one
                warps = 5 if args.kernel == "a16wfp4_wgmma_rs" else 9
                cfg = next(c for c in configs if c.block_m == 128 and c.block_n == 64 and c.num_stages == 8 and c.num_warps == warps)
        one = gb.Problem(op, B, M, N, K, strided, bmaj, gen)
        nsets = max(2, min(16, -(-160 * 2**20 // one.min_bytes())))
        probs = [one] + [gb.Problem(op, B, M, N, K, strided, bmaj, gen) for _ in range(nsets - 1)]
        calls = [ours.call(p, cfg) for p in probs]
        for variant in args.variants.split(",") if args.variants else [""]:
            trace_one(copy, buf, calls, name, M, cfg, variant, results, phases, -(-N // cfg.block_n) * cfg.ksplit)
        with open(args.out, "w") as f:
            json.dump(results, f, separators=(",", ":"))


def trace_one(copy, buf, calls, name, M, cfg, variant, results, phases=PHASES, grid_x=0):
    """Times the calls (graph replay) with `variant` set in the environment
    (the kernel library reads its knobs per call), then prints the timeline
    of the last call."""
    with gb.environment(gb.parse_settings(variant)):
        t = gb.time_calls(calls, graph=True)
        copy(buf, 0)  # clear: the timed replays overwrote it many times
        t2 = gb.time_calls(calls, graph=True, reps=1)
        torch.cuda.synchronize()
        if copy(buf, 4096) != 0:
            raise RuntimeError("mxval_wgmma_trace_copy failed")
        # (CTA-linear index, slots) of every CTA that ran
        indexed = [(i, r) for i, r in enumerate(list(buf[i * SLOTS:(i + 1) * SLOTS]) for i in range(4096)) if r[8] != 0]
        rows = [r for _, r in indexed]
        if not rows:
            print("%s M=%d: no trace (not the TMA kernel?)" % (name, M))
            return
        ghz = statistics.median([(r[9] - r[0]) / max(1, r[10] - r[8]) for r in rows])
        t0 = min(r[8] for r in rows)
        span = (max(r[10] for r in rows) - t0) / 1e3
        out = {"case": "%s:%d" % (name, M), "variant": variant, "config": str(cfg), "ctas": len(rows), "sms": len({r[7] & 0xffffffff for r in rows}),
               "tiles_max": max(r[7] >> 32 for r in rows), "graph_us": t["median"], "graph_us_trace_run": t2["median"],
               "ghz": ghz, "span_us": span, "phases": {}}
        out["phases"]["skew"] = sorted((r[8] - t0) / 1e3 for r in rows)
        for ph, a, b in phases:
            out["phases"][ph] = sorted(round((r[b] - r[a]) / ghz / 1e3, 3) for r in rows if r[a] and r[b])
        out["phases"]["total"] = sorted((r[9] - r[0]) / ghz / 1e3 for r in rows)
        # When the CTAs exit (global timer, from the first entry): the call's
        # tail is the time between the first exits and the last, when fewer
        # and fewer SMs still move bytes.
        out["exit_us"] = sorted((r[10] - t0) / 1e3 for r in rows)
        results.append(out)
        print("%-18s M=%-5d %-28s %s ctas %4d on %3d SMs, tiles/CTA <= %d, %.2f GHz; graph %.2f us/call, span %.2f us"
              % (name, M, cfg, variant or "(default)", out["ctas"], out["sms"], out["tiles_max"], ghz, t["median"], span))
        print("    %-8s %8s %8s %8s %8s" % ("phase", "min", "median", "p90", "max"))
        for ph in ["skew"] + [p[0] for p in phases] + ["total"]:
            v = out["phases"][ph]
            if v:
                print("    %-8s %8.2f %8.2f %8.2f %8.2f" % (ph, v[0], q(v, 0.5), q(v, 0.9), v[-1]))
        ex = out["exit_us"]
        print("    exits, us from the first entry: first %.2f, p10 %.2f, median %.2f, p90 %.2f, last %.2f"
              % (ex[0], q(ex, 0.1), q(ex, 0.5), q(ex, 0.9), ex[-1]))
        if grid_x > 1:
            # Drift: the CTAs of one (M group, batch) are grid_x consecutive
            # linear indices (one per N tile); how far apart they exit says
            # how far apart they write the same y rows by the end.
            groups = {}  # (M group, batch) -> its CTAs' trace rows
            for i, r in indexed:
                groups.setdefault(i // grid_x, []).append(r)
            spread = sorted((max(r[10] for r in v) - min(r[10] for r in v)) / 1e3 for v in groups.values()
                            if len(v) == grid_x)
            if spread:
                out["exit_spread_us"] = spread
                print("    exit spread within an (M group, batch) of %d N tiles: median %.2f us, p90 %.2f, max %.2f "
                      "(%d groups)" % (grid_x, q(spread, 0.5), q(spread, 0.9), spread[-1], len(spread)))
            # Progress across the (M group, batch) groups (a16wfp4_wgmma_rs
            # only: slots 16-18 are the global timer as a CTA starts tiles
            # 1/4, 1/2 and 3/4 of its own; slot 10 its exit): each group's
            # median over its N tiles, relative to the first entry. With one
            # M group per batch (large M), the spread is how far apart the
            # batches run, i.e. how many batches' x rows are read at once.
            marks = [(16, "1/4"), (17, "1/2"), (18, "3/4"), (10, "exit")]
            table = {}
            for slot, label in marks:
                per = [statistics.median((r[slot] - t0) / 1e3 for r in v) for v in groups.values()
                       if len(v) == grid_x and all(r[slot] for r in v)]
                if len(per) > 1:
                    table[label] = per
            if table:
                out["group_progress_us"] = table
                print("    progress across %d (M group, batch) groups, us from the first entry (group medians over "
                      "N tiles): %s" % (len(groups), "; ".join("%s: min %.2f max %.2f spread %.2f" % (
                          k, min(v), max(v), max(v) - min(v)) for k, v in table.items())))
        if cfg.ksplit > 1:  # split-K: rows are CTA-linear, so a row's cluster rank is its index % NUM_KSPLIT
            for rank in range(cfg.ksplit):
                sel = [r for i, r in indexed if i % cfg.ksplit == rank]
                if not sel:
                    continue
                ent = sorted((r[8] - t0) / 1e3 for r in sel)
                ext = sorted((r[10] - t0) / 1e3 for r in sel)
                tot = sorted((r[9] - r[0]) / ghz / 1e3 for r in sel)
                print("    rank %d: %d CTAs, entry median %.2f us, exit median %.2f (p90 %.2f), total median %.2f"
                      % (rank, len(sel), q(ent, 0.5), q(ext, 0.5), q(ext, 0.9), q(tot, 0.5)))
                for ph, a, b in phases:
                    v = sorted((r[b] - r[a]) / ghz / 1e3 for r in sel if r[a] and r[b])
                    if v:
                        print("      %-8s median %6.2f p90 %6.2f" % (ph, q(v, 0.5), q(v, 0.9)))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
