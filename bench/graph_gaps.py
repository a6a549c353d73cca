#!/usr/bin/env python3
"""Kernel time and launch gap inside a CUDA graph replay, ours against cuBLAS.

gpu_bench.py times a graph of 20 calls and divides by 20, so each call's
time there is the kernel itself plus the gap between one kernel's end and
the next one's start. This script replays the same kind of graph (20 calls
round-robin over rotating input sets) under the PyTorch profiler (CUPTI
kernel records, which name every kernel of a graph replay) and splits the
per-call time into the two:

  kernel    median duration (end - start) of the call's main kernel
  gap       median of next start - this end, between neighbouring kernels
  per call  a replay's span (first start to last end) / calls

for our table's kernel and config (or --config) and for the cuBLAS peer.
With --probe-lib, the empty kernels of bench/stream_probe.cu
(mxval_launch_probe) are timed the same way in the launch shapes of our
small-M configs (grid, block, dynamic shared memory, two tensor maps as
parameters) and in smaller ones: what a kernel of that shape costs before it
does any work.
Usage:
  python3 bench/graph_gaps.py --lib build-gpu/lib/libmxval_cuda_kernels.so \\
      --cases dsv3-tp8/vup:64,dsv3-tp8/vup:256 [--config BM32_BN32_BK64_KS1_S10_W5] \\
      [--probe-lib build-gpu/lib/libmxval_stream_probe.so]
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def split_replays(spans, sep_us=None):
    """(start, end, name) spans in microseconds, from several replays of one
    graph -> one list per replay, in start order. The host synchronizes
    between replays, so a replay boundary is a gap far above the launch gaps
    inside one: above sep_us, by default 10x the median gap (at least 5 us)."""
    ev = sorted(spans)
    if len(ev) < 2:
        return [ev] if ev else []
    gaps = [ev[i + 1][0] - ev[i][1] for i in range(len(ev) - 1)]
    if sep_us is None:
        sep_us = max(5.0, 10 * statistics.median(gaps))
    reps, cur = [], [ev[0]]
    for g, a in zip(gaps, ev[1:]):
        if g > sep_us:
            reps.append(cur)
            cur = []
        cur.append(a)
    reps.append(cur)
    return reps


def gap_stats(replays, calls):
    """For replays of a graph of `calls` calls (a call may launch more than
    one kernel: cuBLAS adds a memset where it uses a workspace): the median
    time per call (replay span / calls), the median gap between neighbouring
    kernels of a replay, and each kernel name's count and median duration."""
    per_call, gap, by_name = [], [], {}
    for rep in replays:
        if len(rep) < 2:
            continue
        per_call.append((rep[-1][1] - rep[0][0]) / calls)
        gap += [rep[i + 1][0] - rep[i][1] for i in range(len(rep) - 1)]
        for s, e, name in rep:
            by_name.setdefault(name, []).append(e - s)
    if not per_call:
        raise ValueError("no replay with two kernels or more")
    kernels = {n: {"count": len(v), "median_us": statistics.median(v)} for n, v in by_name.items()}
    main = max(kernels, key=lambda n: kernels[n]["median_us"] * kernels[n]["count"])
    return {"per_call_us": statistics.median(per_call), "gap_us": statistics.median(gap),
            "kernel_us": kernels[main]["median_us"], "kernel": main[:80], "replays": len(per_call),
            "kernels": {n[:80]: v for n, v in kernels.items()}}


def profile_graph(calls, name_filter, inner=20, reps=10):
    """Captures `inner` calls round-robin over `calls` in a graph, replays it
    `reps` times under the profiler and returns gap_stats of the kernels whose
    name passes name_filter."""
    import torch
    import gpu_bench as gb
    s, g = gb.warm_and_capture(calls, inner)
    with torch.cuda.stream(s):
        for _ in range(3):
            g.replay()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA], acc_events=True) as prof:
        for _ in range(reps):
            with torch.cuda.stream(s):
                g.replay()
            torch.cuda.synchronize()
    kern = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and name_filter(e.name)]
    return gap_stats(split_replays([(e.time_range.start, e.time_range.end, e.name) for e in kern]), inner)


def rs_smem(bm, stages, k, wgs=1, bufs=2):
    """a16wfp4_wgmma_rs's dynamic shared memory (RsConfig::Smem, NUM_KSPLIT = 1)."""
    return 1024 + stages * bm * 128 + bufs * wgs * bm * 128 + wgs * 64 * (k // 2 + 16) + (2 * stages + 3) * 8


# Launch shapes for --probe-lib: (label, big parameter set, grid, threads, dynamic smem).
PROBE_SHAPES = [
    ("as R BM64_BN32 S10 at V-up M=64 (DeepSeek-V3)", 1, (4, 1, 16), 160, rs_smem(64, 10, 512)),
    ("  the same, no dynamic smem", 1, (4, 1, 16), 160, 0),
    ("  the same, one int parameter", 0, (4, 1, 16), 160, 0),
    ("as R BM64_BN64 S10 at V-up M=256 (DeepSeek-V3)", 1, (2, 4, 16), 160, rs_smem(64, 10, 512)),
    ("one CTA of 32 threads, one int parameter", 0, (1, 1, 1), 32, 0),
]


def probe_rows(path):
    """The empty launch probe (bench/stream_probe.cu) in each PROBE_SHAPES shape."""
    import ctypes as C
    import torch
    lib = C.CDLL(path)
    fn = lib.mxval_launch_probe
    fn.argtypes = [C.c_int] * 6 + [C.c_void_p]
    fn.restype = C.c_int
    rows = []
    for label, big, (gx, gy, gz), threads, smem in PROBE_SHAPES:
        def call(big=big, gx=gx, gy=gy, gz=gz, threads=threads, smem=smem):
            rc = fn(big, gx, gy, gz, threads, smem, torch.cuda.current_stream().cuda_stream)
            if rc != 0:
                raise RuntimeError("mxval_launch_probe failed: cudaError %d" % rc)
        st = profile_graph([call], lambda n: "LaunchProbe" in n)
        rows.append({"shape": label, "grid": [gx, gy, gz], "threads": threads, "smem": smem, "big_params": big, **st})
        print("%-50s kernel %5.2f gap %4.2f per call %5.2f" % (label, st["kernel_us"], st["gap_us"], st["per_call_us"]))
        sys.stdout.flush()
    return rows


def main():
    import torch
    import gpu_bench as gb
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--table", default=os.path.join(os.path.dirname(__file__), "..", "kernels", "configs", "sm_90a.json"))
    ap.add_argument("--cases", required=True, help="shape:M,... e.g. dsv3-tp8/vup:64")
    ap.add_argument("--kernel", default="a16wfp4_wgmma_rs", help="the kernel --config names")
    ap.add_argument("--config", default="", help="a config name of --kernel (e.g. BM32_BN32_BK64_KS1_S10_W5) instead of the table's")
    ap.add_argument("--probe-lib", default="", help="libmxval_stream_probe.so: also time its empty launch probe "
                    "in the launch shapes of PROBE_SHAPES")
    ap.add_argument("--out", default="graph_gaps.json")
    args = ap.parse_args()
    _lib, kernels = gb.load_kernels(args.lib)
    table = json.load(open(args.table))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(7)
    results = []
    for case in args.cases.split(","):
        name, op, B, M, N, K, strided, bmaj = gb.parse_case(case)
        sets = gb.rotating_sets(op, B, M, N, K, strided, bmaj, gen)
        _entry, kname, cfg = gb.table_lookup(table, op, M, N, K)
        label = "%s %s" % (kname, cfg)
        if args.config:
            kname = args.kernel
            cfg = next((c for c in kernels[kname][1] if str(c) == args.config), None)
            if cfg is None:
                raise SystemExit("%s has no config %s" % (kname, args.config))
            label = "%s %s" % (kname, cfg)
        ours = [gb.Ours(kernels[kname][0]).call(p, cfg) for p in sets]
        peer = [gb.cublas_call(p) for p in sets]
        errs = [gb.checked_run(f, p) for p, f in zip(sets, ours)]
        bad = [e for e in errs if not e < 2e-2]  # NaN too: an unwritten element (max() would skip it)
        if bad:
            raise SystemExit("%s: our output is wrong (relative error %g)" % (case, bad[0]))
        err = max(errs)
        row = {"case": case, "ours_config": label, "rel_err": err}
        row["mxval"] = profile_graph(ours, lambda n: "A16wfp4" in n or "a16wfp4" in n)
        row["cublas"] = profile_graph(peer, lambda n: "A16wfp4" not in n and "a16wfp4" not in n)
        results.append(row)
        print("%-18s M=%-5d %-46s kernel %6.2f gap %4.2f per call %6.2f | cuBLAS kernel %6.2f gap %4.2f per call %6.2f (%s)"
              % (name, M, label[:46], row["mxval"]["kernel_us"], row["mxval"]["gap_us"], row["mxval"]["per_call_us"],
                 row["cublas"]["kernel_us"], row["cublas"]["gap_us"], row["cublas"]["per_call_us"],
                 ", ".join("%s x%d" % (n[:40], v["count"]) for n, v in row["cublas"]["kernels"].items())))
        sys.stdout.flush()
    probes = probe_rows(args.probe_lib) if args.probe_lib else []
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": results, "launch_probe": probes}, f, indent=1)


if __name__ == "__main__":
    main()
