#!/usr/bin/env python3
"""Side-by-side GPU benchmark of the A16WFP4 batched GEMM (one run, one GPU).

Implementations, all on the same inputs (B=16, GLM-5 TP4 and DeepSeek-V3 TP8
K-up / V-up shapes, bf16 activations, x strided inside q for K-up):
  mxval      our kernels through the C kernel ABI (ctypes), with the kernel and
             config kernels/configs/sm_90a.json selects; also the best of all
             compiled configs ("mxval-best", a tuning hint for the table)
  cublas     torch.bmm on bf16 weights dequantized ahead of time
  dot_scaled a Triton batched kernel using tl.dot_scaled(bf16, e2m1)
Timing: CUDA events, rotating input sets so the working set exceeds L2,
warm-up, median / p10 / p90 per call. Two numbers per implementation:
  graph  a CUDA graph of 20 calls replayed (GPU time, launch cost amortized)
  eager  the same 20 calls launched from Python (launch cost included)
With --pdl, mxval is also timed (graph) launched with programmatic dependent
launch (MXVAL_CUDA_PDL=1): each call may start its weight prologue while the
call before it finishes. Its contract (the kernel before it on the stream does
not write the weights) holds in serving and here; cuBLAS and Triton are timed
as they launch, so the PDL column is reported beside the plain one, never
instead of it.
The floor per shape is max(FLOPs / measured bf16 GEMM rate, minimal bytes /
measured copy bandwidth), both measured on this device first.
Clocks: every timed window also records the SM clock (min / median / max),
the peak power and the clock-event reasons NVML reported while it ran
(bench/gpu_clocks.py), as "clock" beside each median in the JSON and as the
"clk" column (mxval / cuBLAS) in the log: on the H200 the board's power cap
moves the SM clock between about 1.0 and 2.0 GHz under large-M runs, so a
time is read together with the clock it ran at. Before each timed window
the script waits (up to 3 s) until the board is off its power cap
(gpu_clocks.ClockSampler.settle), so that no implementation inherits the cap
that the one timed before it ran into: the first run with clocks showed
cuBLAS, timed right after us on each large-M row, at 1500 MHz where we had
run at 1980. --no-settle keeps the old back-to-back order; --no-clocks turns
both off.

Usage: python3 bench/gpu_bench.py --lib build-gpu/lib/libmxval_cuda_kernels.so --out results.json
"""
import argparse
import contextlib
import ctypes as C
import json
import math
import os
import re
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_clocks  # noqa: E402

try:
    import triton
    import triton.language as tl
except Exception:  # pragma: no cover - reported as unavailable
    triton = None

# ---------------------------------------------------------------- kernel ABI
class TileConfig(C.Structure):
    _fields_ = [(n, C.c_int32) for n in ("block_m", "block_n", "block_k", "ksplit", "num_stages", "num_warps")]

    def key(self):
        return (self.block_m, self.block_n, self.block_k, self.ksplit, self.num_stages, self.num_warps)

    def __str__(self):
        return "BM%d_BN%d_BK%d_KS%d_S%d_W%d" % self.key()


class GemmArgs(C.Structure):
    _fields_ = [("B", C.c_int64), ("M", C.c_int64), ("N", C.c_int64), ("K", C.c_int64),
                ("activations", C.c_int32),
                ("x", C.c_void_p), ("x_stride_b", C.c_int64), ("x_stride_m", C.c_int64), ("x_stride_k", C.c_int64),
                ("w_packed", C.c_void_p), ("w_packed_stride_b", C.c_int64), ("w_packed_stride_n", C.c_int64),
                ("w_scales", C.c_void_p), ("w_scales_stride_b", C.c_int64), ("w_scales_stride_n", C.c_int64),
                ("y", C.c_void_p), ("y_stride_b", C.c_int64), ("y_stride_m", C.c_int64),
                ("workspace", C.c_void_p), ("workspace_bytes", C.c_size_t), ("stream", C.c_void_p),
                ("launch_flags", C.c_uint32)]  # ABI version 2; version-1 libraries read only what precedes it


CHECK_FN = C.CFUNCTYPE(C.c_int32, C.POINTER(GemmArgs), C.POINTER(TileConfig), C.c_char_p, C.c_size_t)
WS_FN = C.CFUNCTYPE(C.c_size_t, C.POINTER(GemmArgs), C.POINTER(TileConfig))


class KernelV1(C.Structure):
    _fields_ = [("name", C.c_char_p), ("device", C.c_int32), ("archs", C.c_char_p), ("activation_modes", C.c_uint32),
                ("configs", C.POINTER(TileConfig)), ("num_configs", C.c_int32),
                ("can_implement", CHECK_FN), ("workspace_size", WS_FN), ("run", CHECK_FN)]


class Kernel(C.Structure):  # ABI version 2
    _fields_ = KernelV1._fields_ + [("launch_flags", C.c_uint32)]


class Library(C.Structure):
    _fields_ = [("abi_version", C.c_uint32), ("library_name", C.c_char_p), ("build_id", C.c_char_p),
                ("num_kernels", C.c_int32), ("kernels", C.POINTER(Kernel))]


def load_kernels(path):
    """name -> (kernel, [configs]) for every kernel the library exports."""
    lib = C.CDLL(path)
    lib.mxval_get_kernel_library.restype = C.POINTER(Library)
    table = lib.mxval_get_kernel_library().contents
    assert table.abi_version in (1, 2), table.abi_version
    # A version-1 table (an older build, e.g. an A/B baseline) has the shorter kernel struct.
    kernels = table.kernels if table.abi_version == 2 else C.cast(table.kernels, C.POINTER(KernelV1))
    out = {}
    for i in range(table.num_kernels):
        k = kernels[i]
        out[k.name.decode()] = (k, [k.configs[j] for j in range(k.num_configs)])
    return lib, out


# ------------------------------------------------------------ dispatch table
def table_lookup(table, op, M, N, K):
    shapes = table["ops"][op]
    key = "N=%d,K=%d" % (N, K)
    buckets = shapes.get(key) or shapes["default"]
    if key not in shapes:
        key = "default"
    order = sorted(buckets.items(), key=lambda kv: math.inf if kv[0] == "any" else int(kv[0][6:]))
    for name, c in order:
        if name == "any" or M <= int(name[6:]):
            cfg = TileConfig(c["BLOCK_SIZE_M"], c["BLOCK_SIZE_N"], c["BLOCK_SIZE_K"], c.get("NUM_KSPLIT", 1),
                             c.get("num_stages", 2), c.get("num_warps", 4))
            return "%s/%s/%s" % (op, key, name), c.get("kernel", table.get("kernel", "a16wfp4_tc")), cfg
    raise KeyError((op, M))


# -------------------------------------------------------------------- inputs
E2M1 = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.float32)


def make_weights(B, N, K, gen):
    packed = torch.randint(0, 256, (B, N, K // 2), dtype=torch.uint8, device="cuda", generator=gen)
    scales = torch.randint(124, 129, (B, N, K // 32), dtype=torch.uint8, device="cuda", generator=gen)
    return packed, scales


def dequant(packed, scales):
    lut = E2M1.to(packed.device)
    lo, hi = (packed & 15).long(), (packed >> 4).long()
    codes = torch.stack([lut[lo], lut[hi]], dim=-1).flatten(-2)  # (B, N, K)
    s = torch.exp2(scales.float() - 127).repeat_interleave(32, dim=-1)
    return codes * s


class Problem:
    """One input set: x (strided for K-up), weights, output in the op's layout."""

    def __init__(self, op, B, M, N, K, strided, batch_major, gen):
        self.op, self.B, self.M, self.N, self.K = op, B, M, N, K
        pitch = K + 64 if strided else K
        self.q = torch.randn(M, B, pitch, dtype=torch.bfloat16, device="cuda", generator=gen) if strided else None
        self.x = self.q[:, :, :K].transpose(0, 1) if strided else torch.randn(B, M, K, dtype=torch.bfloat16, device="cuda", generator=gen)
        self.packed, self.scales = make_weights(B, N, K, gen)
        self.w_bf16 = dequant(self.packed, self.scales).to(torch.bfloat16)  # the cuBLAS peer's weights
        self.batch_major = batch_major
        self.y_store = torch.empty((M, B, N) if batch_major else (B, M, N), dtype=torch.bfloat16, device="cuda")
        self.y = self.y_store.transpose(0, 1) if batch_major else self.y_store  # (B, M, N) view
        self.y_peer = torch.empty(B, M, N, dtype=torch.bfloat16, device="cuda")
        self.workspace = None

    def min_bytes(self):
        return self.B * self.M * self.K * 2 + self.B * self.N * self.K // 2 + self.B * self.N * self.K // 32 + self.B * self.M * self.N * 2


def rotating_sets(op, B, M, N, K, strided, batch_major, gen):
    """Enough input sets (1 to 8) that together they hold at least 3 x 60 MB,
    so that timing calls round-robin over them keeps L2 from flattering."""
    one = Problem(op, B, M, N, K, strided, batch_major, gen)
    nsets = max(1, min(8, math.ceil(3 * 60e6 / one.min_bytes())))
    return [one] + [Problem(op, B, M, N, K, strided, batch_major, gen) for _ in range(nsets - 1)]


# --------------------------------------------------------------- our kernel
class Ours:
    def __init__(self, kernel):
        self.k = kernel
        self.err = C.create_string_buffer(512)

    def args(self, p, cfg):
        a = GemmArgs()
        a.B, a.M, a.N, a.K = p.B, p.M, p.N, p.K
        a.activations = 0
        a.x = p.x.data_ptr()
        a.x_stride_b, a.x_stride_m, a.x_stride_k = p.x.stride()
        a.w_packed = p.packed.data_ptr()
        a.w_packed_stride_b, a.w_packed_stride_n = p.packed.stride(0), p.packed.stride(1)
        a.w_scales = p.scales.data_ptr()
        a.w_scales_stride_b, a.w_scales_stride_n = p.scales.stride(0), p.scales.stride(1)
        a.y = p.y.data_ptr()
        a.y_stride_b, a.y_stride_m = p.y.stride(0), p.y.stride(1)
        need = self.k.workspace_size(C.byref(a), C.byref(cfg))
        if need:
            # Kept on the problem itself: keying a cache by id(p) handed a
            # freed problem's smaller buffer to a new one (ids are reused).
            if p.workspace is None or p.workspace.numel() < need:
                p.workspace = torch.empty(need, dtype=torch.uint8, device="cuda")
            a.workspace, a.workspace_bytes = p.workspace.data_ptr(), need
        return a

    def can(self, p, cfg):
        a = self.args(p, cfg)
        return self.k.can_implement(C.byref(a), C.byref(cfg), self.err, 512) == 0

    def call(self, p, cfg):
        a = self.args(p, cfg)
        run, err = self.k.run, self.err

        def f():
            a.stream = torch.cuda.current_stream().cuda_stream
            if run(C.byref(a), C.byref(cfg), err, 512) != 0:
                raise RuntimeError(err.value.decode())
        return f


# ------------------------------------------------------------ triton peer
if triton is not None:
    @triton.autotune(
        configs=[triton.Config({"BM": bm, "BN": bn, "BK": bk}, num_warps=w, num_stages=s)
                 for (bm, bn, bk, w, s) in [(16, 64, 64, 4, 3), (32, 64, 64, 4, 3), (64, 64, 64, 4, 3),
                                            (64, 128, 64, 4, 3), (128, 128, 64, 8, 3), (128, 64, 128, 8, 3),
                                            (128, 128, 128, 8, 2), (64, 64, 128, 4, 3)]],
        key=["M", "N", "K"])
    @triton.jit
    def _dot_scaled_bmm(x_ptr, w_ptr, s_ptr, y_ptr, M, N, K, sxb, sxm, swb, swn, ssb, ssn, syb, sym,
                        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pid_n = tl.program_id(0)
        pid_m = tl.program_id(1)
        b = tl.program_id(2)
        offs_m = pid_m * BM + tl.arange(0, BM)
        offs_n = pid_n * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            offs_k = k0 + tl.arange(0, BK)
            a = tl.load(x_ptr + b * sxb + offs_m[:, None] * sxm + offs_k[None, :],
                        mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)
            offs_k2 = k0 // 2 + tl.arange(0, BK // 2)
            wq = tl.load(w_ptr + b * swb + offs_n[None, :] * swn + offs_k2[:, None],
                         mask=(offs_n[None, :] < N) & (offs_k2[:, None] < K // 2), other=0)
            offs_g = k0 // 32 + tl.arange(0, BK // 32)
            ws = tl.load(s_ptr + b * ssb + offs_n[:, None] * ssn + offs_g[None, :],
                         mask=(offs_n[:, None] < N) & (offs_g[None, :] < K // 32), other=0)
            acc = tl.dot_scaled(a, None, "bf16", wq, ws, "e2m1", acc)
        tl.store(y_ptr + b * syb + offs_m[:, None] * sym + offs_n[None, :], acc.to(tl.bfloat16),
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def triton_call(p):
    def f():
        grid = lambda meta: (triton.cdiv(p.N, meta["BN"]), triton.cdiv(p.M, meta["BM"]), p.B)
        _dot_scaled_bmm[grid](p.x, p.packed, p.scales, p.y_peer, p.M, p.N, p.K, p.x.stride(0), p.x.stride(1),
                              p.packed.stride(0), p.packed.stride(1), p.scales.stride(0), p.scales.stride(1),
                              p.y_peer.stride(0), p.y_peer.stride(1))
    return f


def cublas_call(p):
    wt = p.w_bf16.transpose(1, 2)
    return lambda: torch.bmm(p.x, wt, out=p.y_peer)


# ----------------------------------------------------------------- timing
def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]


def stats(v):
    return {"median": statistics.median(v), "p10": pct(v, 0.1), "p90": pct(v, 0.9)}


@contextlib.contextmanager
def environment(settings):
    """Sets `settings` (name -> value) in os.environ for the block, then puts
    back what was there: the kernel libraries read their A/B knobs per call
    (captured into the CUDA graph at capture time)."""
    saved = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def parse_settings(text):
    """'A=1,B=x' -> {'A': '1', 'B': 'x'}; empty items are skipped."""
    return dict(kv.split("=", 1) for kv in text.split(",") if kv)


# The clock sampler (gpu_clocks.ClockSampler) of this process, or None; set by
# the scripts' main() so that time_calls adds each window's clocks.
CLOCKS = None
SETTLE = True  # wait for the board to leave its power cap before each timed window


def open_clocks(disabled=False, settle=True):
    """Starts the module's clock sampler (unless disabled) and says so."""
    global CLOCKS, SETTLE
    CLOCKS = None if disabled else gpu_clocks.ClockSampler.open()
    SETTLE = settle
    print("clocks: %s" % (("NVML, SM clock / power / event reasons per timed window; %s" %
                           ("each window starts off the power cap" if settle else "windows back to back"))
                          if CLOCKS else "not recorded"))
    return CLOCKS


def warm_and_capture(calls, inner=20, graph=True):
    """Runs every call twice on a side stream, then (graph) captures `inner`
    calls round-robin over them in a CUDA graph: (stream, graph or None)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for c in calls * 2:
            c()
    torch.cuda.synchronize()
    if not graph:
        return s, None
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        for i in range(inner):
            calls[i % len(calls)]()
    return s, g


def parse_case(case):
    """'preset/op:M' -> (name, op, B, M, N, K, strided, batch_major), or exits
    naming the known shapes (SHAPES)."""
    shapes = {"%s/%s" % (s[0], s[1]): s for s in SHAPES}
    name, m = case.rsplit(":", 1)
    if name not in shapes:
        raise SystemExit("unknown shape %r (known: %s)" % (name, ", ".join(shapes)))
    _preset, op, B, N, K, strided, bmaj = shapes[name]
    return name, op, B, int(m), N, K, strided, bmaj


def time_calls(calls, graph, inner=20, reps=25):
    s, g = warm_and_capture(calls, inner, graph)
    if graph:
        run = g.replay
    else:
        def run():
            for i in range(inner):
                calls[i % len(calls)]()
    out = []
    window = CLOCKS.window() if CLOCKS else contextlib.nullcontext()
    with torch.cuda.stream(s):
        for _ in range(3):
            run()
        torch.cuda.synchronize()
        settled = CLOCKS.settle() if CLOCKS and SETTLE else None
        with window:
            for _ in range(reps):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record(s)
                run()
                e1.record(s)
                e1.synchronize()
                out.append(e0.elapsed_time(e1) * 1e3 / inner)  # microseconds per call
    result = stats(out)
    if CLOCKS:
        result["clock"] = window.summary
        if settled is not None and result["clock"]:
            result["clock"]["settle_s"] = round(settled, 3)
    return result


def measure_roofline():
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    t = []
    for _ in range(12):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); b.copy_(a); e1.record(); e1.synchronize()
        t.append(e0.elapsed_time(e1) * 1e-3)
    bw = 2 * a.numel() / statistics.median(t[2:])
    del a, b
    x = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    y = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    t = []
    for _ in range(12):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); torch.mm(x, y); e1.record(); e1.synchronize()
        t.append(e0.elapsed_time(e1) * 1e-3)
    rate = 2 * 8192 ** 3 / statistics.median(t[2:])
    return bw, rate


# ------------------------------------------------------------------- main
SHAPES = [("glm5-tp4", "kup", 16, 512, 192, True, False), ("glm5-tp4", "vup", 16, 256, 512, False, True),
          ("dsv3-tp8", "kup", 16, 512, 128, True, False), ("dsv3-tp8", "vup", 16, 128, 512, False, True)]


def add_probe_args(ap, out):
    """The arguments the same-bytes probes (batch_locality.py, layout_probe.py) share."""
    ap.add_argument("--lib", required=True)
    ap.add_argument("--table", default=os.path.join(os.path.dirname(__file__), "..", "kernels", "configs", "sm_90a.json"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-clocks", action="store_true")
    ap.add_argument("--out", default=out)


def start_probe(args, seed):
    """Clocks on (settled windows), the library's kernels, the table, a seeded
    generator and the benchmark's shapes by name, for add_probe_args' args."""
    open_clocks(args.no_clocks, True)
    _lib, kernels = load_kernels(args.lib)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    return kernels, json.load(open(args.table)), gen, {"%s/%s" % (s[0], s[1]): s for s in SHAPES}


def checked_run(call, p):
    """Poisons p.y, runs `call` once and returns its relative error against an
    fp32 torch reference (NaN, i.e. a failed check, if an element was left unwritten)."""
    p.y.fill_(float("nan"))
    call()
    torch.cuda.synchronize()
    ref = torch.bmm(p.x.float(), p.w_bf16.float().transpose(1, 2))
    return float((p.y.float() - ref).norm() / ref.norm())


def save_results(results, path, complete):
    """Writes the JSON atomically; called after every row so that a run cut
    off by a time limit (or a machine taken away) keeps what it measured."""
    results["complete"] = complete
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f, indent=1)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--table", default=os.path.join(os.path.dirname(__file__), "..", "kernels", "configs", "sm_90a.json"))
    ap.add_argument("--ms", default="1,4,16,64,256,1024,4096,8192,16384")
    ap.add_argument("--shapes", default="all")
    ap.add_argument("--no-sweep", action="store_true", help="skip timing every compiled config")
    ap.add_argument("--sweep-kernels", default="a16wfp4_tc,a16wfp4_tc_panel,a16wfp4_decode,a16wfp4_wgmma,a16wfp4_wgmma_rs",
                    help="kernels whose compiled configs the sweep times")
    ap.add_argument("--sweep-match", default="",
                    help="time only the swept configs whose tagged name (e.g. D:BM64_BN16_BK64_KS1_S2_W8) matches this regex")
    ap.add_argument("--only-mxval", action="store_true", help="run our kernel only (for profilers)")
    ap.add_argument("--pdl", action="store_true",
                    help="also time mxval with programmatic dependent launch (MXVAL_CUDA_PDL=1), as extra columns")
    ap.add_argument("--no-clocks", action="store_true", help="do not sample the SM clock / power / event reasons")
    ap.add_argument("--no-settle", action="store_true", help="time windows back to back (no wait for the power cap to clear)")
    ap.add_argument("--out", default="gpu_bench.json")
    args = ap.parse_args()
    torch.manual_seed(0)
    _lib, kernels = load_kernels(args.lib)
    ours_by_name = {name: Ours(k) for name, (k, _) in kernels.items()}
    sweep = [(name, c) for name in args.sweep_kernels.split(",") if name in kernels for c in kernels[name][1]]
    tag = {"a16wfp4_tc_panel": "P:", "a16wfp4_decode": "D:", "a16wfp4_wgmma": "W:", "a16wfp4_wgmma_rs": "R:"}
    table = json.load(open(args.table))
    if args.only_mxval:
        gen = torch.Generator(device="cuda")
        gen.manual_seed(1)
        for (preset, op, B, N, K, strided, bmaj) in SHAPES:
            if args.shapes != "all" and preset + "/" + op not in args.shapes.split(","):
                continue
            for M in [int(m) for m in args.ms.split(",")]:
                p = Problem(op, B, M, N, K, strided, bmaj, gen)
                entry, kname, cfg = table_lookup(table, op, M, N, K)
                ours_by_name[kname].call(p, cfg)()
                torch.cuda.synchronize()
                print("ran", preset, op, M, cfg)
        return
    open_clocks(args.no_clocks, not args.no_settle)
    bw, rate = measure_roofline()
    print("device %s: copy bandwidth %.2f TB/s (read+write), bf16 GEMM %.0f TFLOP/s (8192^3 torch.mm)"
          % (torch.cuda.get_device_name(), bw / 1e12, rate / 1e12))
    results = {"device": torch.cuda.get_device_name(), "copy_bw": bw, "bf16_rate": rate,
               "torch": torch.__version__, "triton": triton.__version__ if triton else None, "rows": []}
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1)
    hdr = "%-13s %6s | %-22s %8s %8s | %8s %8s | %8s %8s | %7s | %6s %6s | %-22s | %s" % (
        "shape", "M", "mxval config", "graph", "eager", "cublas", "eager", "dot_sc", "eager", "floor", "vsBest", "vsFlr",
        "clk MHz mxval / cublas", "mxval-best")
    print(hdr)
    for (preset, op, B, N, K, strided, bmaj) in SHAPES:
        if args.shapes != "all" and preset + "/" + op not in args.shapes.split(","):
            continue
        for M in [int(m) for m in args.ms.split(",")]:
            probs = rotating_sets(op, B, M, N, K, strided, bmaj, gen)
            one, nsets = probs[0], len(probs)
            entry, kname, cfg = table_lookup(table, op, M, N, K)
            ours = ours_by_name[kname]
            row = {"shape": preset + "/" + op, "B": B, "M": M, "N": N, "K": K, "entry": entry, "kernel": kname, "config": str(cfg),
                   "flops": 2.0 * B * M * N * K, "bytes": one.min_bytes(), "sets": nsets}
            row["floor_us"] = max(row["flops"] / rate, row["bytes"] / bw) * 1e6
            # correctness of all three on the first set vs an fp32 torch reference
            ref = torch.bmm(one.x.float(), one.w_bf16.float().transpose(1, 2))
            if not ours.can(one, cfg):
                raise SystemExit("table config %s rejected: %s" % (cfg, ours.err.value.decode()))
            ours.call(one, cfg)(); torch.cuda.synchronize()
            row["mxval_rel_err"] = float((one.y.float() - ref).norm() / ref.norm())
            row["mxval"] = time_calls([ours.call(p, cfg) for p in probs], True)
            row["mxval_eager"] = time_calls([ours.call(p, cfg) for p in probs], False)
            if args.pdl:
                with environment({"MXVAL_CUDA_PDL": "1"}):
                    one.y.fill_(float("nan"))  # poisoned: the PDL launch must write every element
                    ours.call(one, cfg)(); torch.cuda.synchronize()
                    row["mxval_pdl_rel_err"] = float((one.y.float() - ref).norm() / ref.norm())
                    row["mxval_pdl"] = time_calls([ours.call(p, cfg) for p in probs], True)
            cublas_call(one)(); torch.cuda.synchronize()
            row["cublas_rel_err"] = float((one.y_peer.float() - ref).norm() / ref.norm())
            row["cublas"] = time_calls([cublas_call(p) for p in probs], True)
            row["cublas_eager"] = time_calls([cublas_call(p) for p in probs], False)
            try:
                triton_call(one)(); torch.cuda.synchronize()
                row["dot_scaled_rel_err"] = float((one.y_peer.float() - ref).norm() / ref.norm())
                row["dot_scaled"] = time_calls([triton_call(p) for p in probs], True)
                row["dot_scaled_eager"] = time_calls([triton_call(p) for p in probs], False)
            except Exception as e:  # noqa: BLE001
                row["dot_scaled_error"] = repr(e)[:300]
            if not args.no_sweep:
                best, timed = None, []
                for kn, c in sweep:
                    if (kn.endswith("panel") and M < 256) or (kn == "a16wfp4_wgmma" and M < 64):
                        continue
                    if kn.endswith("decode") and M > 256:
                        continue
                    # a16wfp4_tc / simt split K through a workspace at any NUM_KSPLIT; the others
                    # list each NUM_KSPLIT they compile (a16wfp4_wgmma_rs: the cluster size).
                    for ks in (1, 2, 4) if M <= 64 and kn in ("a16wfp4_tc", "a16wfp4_simt") else (c.ksplit,):
                        cc = TileConfig(c.block_m, c.block_n, c.block_k, ks, c.num_stages, c.num_warps)
                        if args.sweep_match and not re.search(args.sweep_match, tag.get(kn, "") + str(cc)):
                            continue
                        if not ours_by_name[kn].can(one, cc):
                            continue
                        r = time_calls([ours_by_name[kn].call(p, cc) for p in probs], True, reps=10)
                        t = r["median"]
                        timed.append({"config": tag.get(kn, "") + str(cc), "median": t, "clock": r.get("clock")})
                        if best is None or t < best[0]:
                            best = (t, tag.get(kn, "") + str(cc))
                # Every timed config, fastest first, so a table can be retuned
                # (or a runner-up checked) from the JSON alone.
                row["mxval_sweep"] = sorted(timed, key=lambda e: e["median"])
                if best is not None:
                    row["mxval_best"] = {"median": best[0], "config": best[1]}
            peers = [row["cublas"]["median"]] + ([row["dot_scaled"]["median"]] if "dot_scaled" in row else [])
            row["vs_best_peer"] = min(peers) / row["mxval"]["median"]
            if "mxval_pdl" in row:
                row["vs_best_peer_pdl"] = min(peers) / row["mxval_pdl"]["median"]
            row["vs_floor"] = row["mxval"]["median"] / row["floor_us"]
            t = row["mxval"]["median"] * 1e-6
            row["mxval_tflops"] = row["flops"] / t / 1e12
            row["mxval_gbps"] = row["bytes"] / t / 1e9
            row["mxval_roofline_fraction"] = row["floor_us"] / row["mxval"]["median"]
            results["rows"].append(row)
            save_results(results, args.out, False)
            ds = row.get("dot_scaled", {"median": float("nan")})
            dse = row.get("dot_scaled_eager", {"median": float("nan")})
            clk = "%s / %s" % (gpu_clocks.short(row["mxval"].get("clock")), gpu_clocks.short(row["cublas"].get("clock")))
            print("%-13s %6d | %-22s %8.1f %8.1f | %8.1f %8.1f | %8.1f %8.1f | %7.1f | %6.2f %6.2f | %-22s | %s" % (
                row["shape"], M, (tag.get(kname, "") + str(cfg))[:22], row["mxval"]["median"], row["mxval_eager"]["median"],
                row["cublas"]["median"], row["cublas_eager"]["median"], ds["median"], dse["median"], row["floor_us"],
                row["vs_best_peer"], row["vs_floor"], clk,
                ("%.1f %s" % (row["mxval_best"]["median"], row["mxval_best"]["config"])) if "mxval_best" in row else ""))
            if "mxval_pdl" in row:
                print("%-13s %6d |   with PDL: graph %.2f, best peer / mxval %.2f, clk %s" % (
                    row["shape"], M, row["mxval_pdl"]["median"], row["vs_best_peer_pdl"],
                    gpu_clocks.short(row["mxval_pdl"].get("clock"))))
            sys.stdout.flush()
            for key in ("mxval_rel_err", "mxval_pdl_rel_err"):
                if not row.get(key, 0) <= 2e-2:  # NaN (an unwritten element) fails too
                    print("  !! %s %.3g" % (key, row[key]))
            del probs, one
            torch.cuda.empty_cache()
    save_results(results, args.out, True)
    print("times in microseconds per call (median); vsBest = best peer / mxval (graph), vsFlr = mxval / floor")


if __name__ == "__main__":
    main()
