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
4. The large-M floor measured (--parts stream, --probe-lib): our memory
   probes (bench/stream_probe.cu) move exactly x's and y's bytes of each
   large-M row with no arithmetic -- y alone, x alone, x and y row by row --
   timed in the same process as cuBLAS and the table's config, next to the
   computed floor.
5. What each part of an a16wfp4_wgmma_rs call costs by itself (--parts
   ablate, --ablation-lib: the build of scripts/build_rs_ablation.sh): the
   table's config timed with MXVAL_RS_ABLATE = 0 (whole), 1 (no MMAs), 2 (no
   y stores), 4 (no x copies), 3 (x copies only), 5 (y stores only), and
   launched in clusters of two (MXVAL_RS_CLUSTER=2), next to the shipped
   library, same process; the computing variants checked against fp32 first.

6. Where the K-up y stores lose against the write probe (--parts pattern,
   --probe-lib): y alone, written in a16wfp4_wgmma_rs's 128-row x 64-column
   boxes by one 128-thread CTA per (column slice, batch), in four patterns
   (the kernel's: the slices of a batch in step; staggered; every row's
   columns from one CTA; fewer batches in flight at a time) by TMA stores at several staging depths and by
   plain stores, next to the row-wise write probe, cuBLAS and the table's
   config (bench/stream_probe.cu, mxval_tile_write_probe).

7. Where the K-up x copies lose against the read probe (--parts xread,
   --probe-lib): x alone, read by TMA into a ring the way a16wfp4_wgmma_rs's
   producer reads it (boxes of 64 elements x R rows, one thread per CTA, S =
   N / 64 CTAs per batch), with every CTA of a batch reading all of its x
   (the kernel's: x crosses from L2 into shared memory S times) or each
   reading 1/S of it, at several ring depths and box heights, from the
   strided x and from a contiguous copy, next to the row-wise read probe,
   cuBLAS and the table's config (bench/stream_probe.cu, mxval_tile_read_probe).

Every timed window records its clocks and starts off the board's power cap, as
in gpu_bench.py (--no-clocks / --no-settle turn that off).

Usage: python3 bench/probe_bounds.py --lib build-gpu/lib/libmxval_cuda_kernels.so
       python3 bench/probe_bounds.py --lib ... --probe-lib .../libmxval_stream_probe.so --parts stream
       python3 bench/probe_bounds.py --lib ... --probe-lib .../libmxval_stream_probe.so --parts pattern
       python3 bench/probe_bounds.py --lib ... --probe-lib .../libmxval_stream_probe.so --parts xread
"""
import argparse
import ctypes as C
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import gpu_bench as gb  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--parts", default="split,cluster,memory")
    ap.add_argument("--probe-lib", help="libmxval_stream_probe.so (needed by --parts stream)")
    ap.add_argument("--ms", default="4096,8192,16384", help="M values of --parts stream and ablate")
    ap.add_argument("--ablation-lib", help="the library of scripts/build_rs_ablation.sh (needed by --parts ablate)")
    ap.add_argument("--out", help="--parts stream / ablate: also write the rows as JSON here")
    ap.add_argument("--no-clocks", action="store_true", help="do not sample the SM clock (gpu_bench.py's --no-clocks)")
    ap.add_argument("--no-settle", action="store_true", help="time windows back to back (gpu_bench.py's --no-settle)")
    args = ap.parse_args()
    gb.open_clocks(args.no_clocks, not args.no_settle)
    parts = args.parts.split(",")
    _lib, kernels = gb.load_kernels(args.lib)
    if "stream" in parts:
        stream_floor(args, kernels)
    if "pattern" in parts:
        write_patterns(args, kernels)
    if "xread" in parts:
        x_reads(args, kernels)
    if "ablate" in parts:
        ablate(args, kernels, gb.load_kernels(args.ablation_lib)[1])
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


# (label, mode, CTAs per SM of 256 threads): mode 0 writes y alone, 1 reads
# x and writes y row by row, 2 reads x alone (bench/stream_probe.cu)
PROBES = [("write y", 0, 8), ("read x", 2, 8), ("rows x+y", 1, 8), ("rows x+y 1/SM", 1, 1)]


def large_m_cases(ms, ops=("kup", "vup")):
    """Yields (shape name, M, N, K, the rotating input sets, the table's kernel
    name and config) for each model shape of an op in `ops` and each M, the
    sets sized as gpu_bench.py sizes them."""
    table = json.load(open(os.path.join(os.path.dirname(__file__), "..", "kernels", "configs", "sm_90a.json")))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1)
    for (preset, op, B, N, K, strided, bmaj) in gb.SHAPES:
        if op not in ops:
            continue
        for M in [int(m) for m in ms.split(",")]:
            probs = gb.rotating_sets(op, B, M, N, K, strided, bmaj, gen)
            _entry, kname, cfg = gb.table_lookup(table, op, M, N, K)
            yield preset + "/" + op, M, N, K, probs, kname, cfg
            del probs
            torch.cuda.empty_cache()


def probe_fns(path):
    """The probe library's entry points (bench/stream_probe.cu), typed: the
    row-wise stream probe, the tile write probe, the tile read probe."""
    lib = C.CDLL(path)
    i, p, ll = C.c_int, C.c_void_p, C.c_longlong
    rows, write, read = lib.mxval_stream_probe, lib.mxval_tile_write_probe, lib.mxval_tile_read_probe
    rows.argtypes = [i, i, p, ll, ll, p, ll, ll, i, i, i, i, p]
    write.argtypes = [i, i, i, i, p, ll, ll, i, i, i, p]
    read.argtypes = [i, i, i, i, i, p, ll, ll, i, i, i, p]
    for f in (rows, write, read):
        f.restype = i
    return rows, write, read


def launcher(fn, a):
    """A call of probe entry point fn with arguments a on the current stream."""
    def f():
        rc = fn(*a, torch.cuda.current_stream().cuda_stream)
        if rc:
            raise RuntimeError("probe: cuda error %d" % rc)
    return f


def time_rounds(row, timed, rounds=2):
    """row[label] = the graph medians of `rounds` rounds over every (label, calls) in timed, interleaved."""
    for label, _ in timed:
        row[label] = []
    for _ in range(rounds):
        for label, calls in timed:
            row[label].append(gb.time_calls(calls, True)["median"])


def stream_floor(args, kernels):
    probe = probe_fns(args.probe_lib)[0]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    bw, _rate = gb.measure_roofline()
    ours = {name: gb.Ours(k) for name, (k, _) in kernels.items()}
    print("== the large-M floor measured: memory probes vs cuBLAS vs mxval (graph median us; copy bandwidth %.2f TB/s)"
          % (bw / 1e12))
    print("%-13s %6s %7s %8s %8s | %s" % ("shape", "M", "floor", "cublas", "mxval", " | ".join(p[0] for p in PROBES)))
    rows = []
    for shape, M, N, K, probs, kname, cfg in large_m_cases(args.ms):
        one, B = probs[0], probs[0].B
        row = {"shape": shape, "M": M, "N": N, "K": K, "sets": len(probs), "bytes": one.min_bytes(),
               "floor_us": one.min_bytes() / bw * 1e6, "mxval_config": str(cfg)}
        row["cublas"] = gb.time_calls([gb.cublas_call(q) for q in probs], True)["median"]
        row["mxval"] = gb.time_calls([ours[kname].call(q, cfg) for q in probs], True)["median"]

        def call(q, mode, ctas):
            x, y = q.x, q.y
            args_ = (mode, ctas, x.data_ptr(), x.stride(0), x.stride(1), y.data_ptr(), y.stride(0), y.stride(1),
                     B, M, K, N)

            def f():
                rc = probe(*args_, torch.cuda.current_stream().cuda_stream)
                if rc:
                    raise RuntimeError("mxval_stream_probe: cuda error %d" % rc)
            return f
        for label, mode, per in PROBES:
            ctas = per * sms
            if mode != 2:  # every 16-byte chunk of y written? (poisoned first; a
                # stored chunk equals the poison with probability 2^-128)
                words = one.y_store.view(torch.int64).view(-1, 2)
                words.fill_(0x5A5A_1234_A5A5_4321)
                call(one, mode, ctas)()
                torch.cuda.synchronize()
                missed = int((words == 0x5A5A_1234_A5A5_4321).all(dim=1).sum())
                if missed:
                    raise SystemExit("%s left %d chunks of y unwritten at %s M=%d" % (label, missed, row["shape"], M))
            row[label] = gb.time_calls([call(q, mode, ctas) for q in probs], True)["median"]
        rows.append(row)
        print("%-13s %6d %7.1f %8.1f %8.1f | %s" % (row["shape"], M, row["floor_us"], row["cublas"], row["mxval"],
                                                  " | ".join("%6.1f" % row[p[0]] for p in PROBES)))
        sys.stdout.flush()
        del probs, one  # before large_m_cases frees the cache and builds the next sets
    print("floor = (x + weights + scales + y bytes) / copy bandwidth; the probes move x and y only")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "copy_bw": bw, "rows": rows}, f, indent=1)


# (label, pattern, engine, depth) of mxval_tile_write_probe: patterns 0
# slices in step (the kernel's), 1 staggered, 2 full rows per CTA; engine 0
# TMA stores with `depth` staging boxes, 1 plain stores.
# 3 slices with F batches in flight instead of B (the 5th field).
PATTERNS = [("tma slices d2", 0, 0, 2, 1), ("tma slices d4", 0, 0, 4, 1), ("tma slices d8", 0, 0, 8, 1),
            ("tma stagger d2", 1, 0, 2, 1), ("tma rows d2", 2, 0, 2, 1), ("tma rows d8", 2, 0, 8, 1),
            ("tma F=8", 3, 0, 2, 8), ("tma F=4", 3, 0, 2, 4), ("tma F=2", 3, 0, 2, 2), ("tma F=1", 3, 0, 2, 1),
            ("st slices", 0, 1, 0, 1), ("st stagger", 1, 1, 0, 1), ("st rows", 2, 1, 0, 1), ("st F=4", 3, 1, 0, 4),
            ("st F=1", 3, 1, 0, 1)]


def write_patterns(args, kernels):
    rows_probe, tile, _read = probe_fns(args.probe_lib)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ours = {name: gb.Ours(k) for name, (k, _) in kernels.items()}
    print("== y alone in the kernel's tile patterns (graph median us, 2 rounds, the faster; TB/s of y written)")
    rows = []
    for shape, M, N, K, probs, kname, cfg in large_m_cases(args.ms, ops=("kup",)):
        one, B = probs[0], probs[0].B

        def call(q, spec):
            y = q.y
            if spec is None:  # the row-wise write probe (mode 0, 8 CTAs of 256 threads per SM)
                a = (0, 8 * sms, q.x.data_ptr(), q.x.stride(0), q.x.stride(1), y.data_ptr(), y.stride(0), y.stride(1),
                     B, M, K, N)
                fn = rows_probe
            else:
                a = (spec[1], spec[2], spec[3], spec[4], y.data_ptr(), y.stride(0), y.stride(1), B, M, N)
                fn = tile
            return launcher(fn, a)
        specs = [("write rows", None)] + [(p[0], p) for p in PATTERNS]
        row = {"shape": shape, "M": M, "N": N, "y_bytes": one.y.numel() * 2, "mxval_config": str(cfg)}
        for label, spec in specs:  # every 16-byte chunk of y written? (poisoned first)
            words = one.y_store.view(torch.int64).view(-1, 2)
            words.fill_(0x5A5A_1234_A5A5_4321)
            call(one, spec)()
            torch.cuda.synchronize()
            missed = int((words == 0x5A5A_1234_A5A5_4321).all(dim=1).sum())
            if missed:
                raise SystemExit("%s left %d chunks of y unwritten at %s M=%d" % (label, missed, shape, M))
        timed = [("cublas", [gb.cublas_call(q) for q in probs]), ("mxval", [ours[kname].call(q, cfg) for q in probs])]
        timed += [(label, [call(q, spec) for q in probs]) for label, spec in specs]
        time_rounds(row, timed)
        rows.append(row)
        print("%-13s M=%5d y %.0f MB" % (shape, M, row["y_bytes"] / 1e6))
        for label, _ in timed:
            t = min(row[label])
            print("   %-16s %8.1f us %5.2f TB/s" % (label, t, row["y_bytes"] / t / 1e6))
        sys.stdout.flush()
        del probs, one
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


# (label, pattern, ring depth, box rows, 256-byte L2 promotion, contiguous x)
# of mxval_tile_read_probe: pattern 0 every CTA of a batch reads all of its
# x (the kernel's), 1 CTA j of S reads the M tiles j, j + S, ..., 2 the S
# CTAs of a batch are a cluster and multicast R / S rows of each box each;
# 3 and 4 are 0 and 1 with one copy per M tile (all K chunks) instead of
# one per 64-wide chunk.
READS = [("shared d8 r128", 0, 8, 128, 0, False), ("shared d4 r128", 0, 4, 128, 0, False),
         ("shared d12 r128", 0, 12, 128, 0, False), ("shared d16 r64", 0, 16, 64, 0, False),
         ("shared d4 r256", 0, 4, 256, 0, False), ("shared d8 r128 p256", 0, 8, 128, 1, False),
         ("split d8 r128", 1, 8, 128, 0, False), ("split d4 r128", 1, 4, 128, 0, False),
         ("split d4 r256", 1, 4, 256, 0, False), ("split d8 r128 p256", 1, 8, 128, 1, False),
         ("shared d8 r128 contig", 0, 8, 128, 1, True), ("split d8 r128 contig", 1, 8, 128, 1, True),
         ("mcast d8 r128", 2, 8, 128, 0, False), ("mcast d12 r128", 2, 12, 128, 0, False),
         ("mcast d4 r256", 2, 4, 256, 0, False), ("shared d4 r128 1/tile", 3, 4, 128, 0, False),
         ("split d4 r128 1/tile", 4, 4, 128, 0, False), ("shared d2 r128 1/tile", 3, 2, 128, 0, False)]


def x_reads(args, kernels):
    rows_probe, _write, tile = probe_fns(args.probe_lib)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ours = {name: gb.Ours(k) for name, (k, _) in kernels.items()}
    print("== x alone, read by TMA in the kernel's pattern (graph median us, 2 rounds, the faster; TB/s of x read)")
    rows = []
    for shape, M, N, K, probs, kname, cfg in large_m_cases(args.ms, ops=("kup",)):
        one, B, S = probs[0], probs[0].B, N // 64
        contig = [q.x.contiguous() for q in probs]  # (B, M, K), rows K apart

        def call(q, i, spec):
            x = contig[i] if spec is not None and spec[5] else q.x
            if spec is None:  # the row-wise read probe (mode 2, 8 CTAs of 256 threads per SM)
                a = (2, 8 * sms, x.data_ptr(), x.stride(0), x.stride(1), q.y.data_ptr(), q.y.stride(0), q.y.stride(1),
                     B, M, K, N)
                fn = rows_probe
            else:
                a = (spec[1], spec[2], spec[3], S, spec[4], x.data_ptr(), x.stride(0), x.stride(1), B, M, K)
                fn = tile
            return launcher(fn, a)
        specs = [("read rows", None)] + [(r[0], r) for r in READS]
        for label, spec in list(specs):  # every setting launches (one the driver refuses is dropped, said so)
            try:
                call(one, 0, spec)()
            except RuntimeError as e:
                print("   %-22s refused: %s" % (label, e))
                specs.remove((label, spec))
        torch.cuda.synchronize()
        x_bytes = B * M * K * 2
        row = {"shape": shape, "M": M, "N": N, "K": K, "x_bytes": x_bytes, "mxval_config": str(cfg)}
        timed = [("cublas", [gb.cublas_call(q) for q in probs]), ("mxval", [ours[kname].call(q, cfg) for q in probs])]
        timed += [(label, [call(q, i, spec) for i, q in enumerate(probs)]) for label, spec in specs]
        time_rounds(row, timed)
        rows.append(row)
        print("%-13s M=%5d x %.0f MB (S = %d CTAs per batch)" % (shape, M, x_bytes / 1e6, S))
        for label, _ in timed:
            t = min(row[label])
            print("   %-22s %8.1f us %5.2f TB/s" % (label, t, x_bytes / t / 1e6))
        sys.stdout.flush()
        del probs, one
        contig = None  # frees the copies (a del would leave call() naming a deleted variable)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


# (label, settings): MXVAL_RS_ABLATE bits drop the MMAs (1), the y stores (2),
# the x copies (4); MXVAL_RS_CLUSTER=2 launches in clusters of two CTAs that
# the kernel ignores. (x multicast over such pairs was measured with these
# and dropped: bench/results/h200_rs_x_multicast_2026-12-02.patch.)
ABLATIONS = [("whole", {}), ("no MMA", {"MXVAL_RS_ABLATE": "1"}), ("no y store", {"MXVAL_RS_ABLATE": "2"}),
             ("no x load", {"MXVAL_RS_ABLATE": "4"}), ("x load only", {"MXVAL_RS_ABLATE": "3"}),
             ("y store only", {"MXVAL_RS_ABLATE": "5"}), ("clusters of 2", {"MXVAL_RS_CLUSTER": "2"})]


def ablate(args, kernels, abl_kernels):
    shipped = gb.Ours(kernels["a16wfp4_wgmma_rs"][0])
    abl = gb.Ours(abl_kernels["a16wfp4_wgmma_rs"][0])
    print("== a16wfp4_wgmma_rs ablations (graph median us, 2 rounds; MXVAL_RS_ABLATE bits: 1 no MMA, 2 no y store, 4 no x copy)")
    print("%-13s %6s %-28s %8s | %s" % ("shape", "M", "config", "shipped", " | ".join(a[0] for a in ABLATIONS)))
    rows = []
    for shape, M, N, K, probs, kname, cfg in large_m_cases(args.ms):
        one = probs[0]
        if kname != "a16wfp4_wgmma_rs":  # the ablation switches are in this kernel only
            cfg = gb.TileConfig(64, 64, 64, 1, 10, 5) if M <= 256 else gb.TileConfig(128, 64, 64, 1, 8, 5)
        row = {"shape": shape, "M": M, "config": str(cfg), "shipped": [], **{a[0]: [] for a in ABLATIONS}}
        # The variants that compute (no ablation bit) checked against an fp32 reference first.
        ref = torch.bmm(one.x.float(), one.w_bf16.float().transpose(1, 2))
        errs = []
        for label, env in [("shipped", {})] + [a for a in ABLATIONS if "MXVAL_RS_ABLATE" not in a[1]]:
            one.y.fill_(float("nan"))
            with gb.environment(env):
                (shipped if label == "shipped" else abl).call(one, cfg)()
            torch.cuda.synchronize()
            err = float((one.y.float() - ref).norm() / ref.norm())
            row[label + " rel_err"] = err
            errs.append("%s %.1e" % (label, err))
            if not err < 2e-2:
                raise SystemExit("%s: relative error %g at %s M=%d" % (label, err, row["shape"], M))
        print("  rel err: " + ", ".join(errs))
        for _ in range(2):
            row["shipped"].append(gb.time_calls([shipped.call(q, cfg) for q in probs], True)["median"])
            for label, env in ABLATIONS:
                with gb.environment(env):
                    row[label].append(gb.time_calls([abl.call(q, cfg) for q in probs], True)["median"])
        rows.append(row)
        print("%-13s %6d %-28s %8.1f | %s" % (row["shape"], M, row["config"], min(row["shipped"]),
                                              " | ".join("%6.1f" % min(row[a[0]]) for a in ABLATIONS)))
        sys.stdout.flush()
        del probs, one, ref
    print("each cell: the faster of two rounds")
    if args.out:
        with open(os.path.splitext(args.out)[0] + "_ablate.json", "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
