#!/usr/bin/env python3
"""GPU self-check of an mxval Python kernel library (A16WFP4 batched GEMM, kernels/python/README.md).

  triton_selfcheck.py --library tests/python_kernels/triton_mxfp4
  make_variants.py tests/python_kernels/triton_mxfp4 /tmp/variants
  triton_selfcheck.py --variants-dir /tmp/variants [--library tests/python_kernels/triton_mxfp4]

A case is (shape preset, M, activations). Its inputs are guarded the way mxval guards
them: x is a view inside a NaN-filled buffer (the K-up presets: inside q, row pitch past K,
rows past M), the packed weight rows and the scale rows are padded with 0xFF (0xFF scales
are E8M0 NaN; scale rows padded by 2 x the largest power of two dividing K/32 groups, as
mxval pads them), y is poisoned with the signalling NaN 0x7FA5 and sits in front of a
poisoned guard region. The config is the library's table entry for M (M_LEQ_<x>, else
`any`); the workspace (workspace_size bytes, 0xFF-filled) is passed when it is nonzero.

The call runs on a side torch.cuda.Stream inside `with torch.cuda.stream(s)`; then the
same call is captured into a CUDA graph on that stream and replayed. Each result is
checked against an fp64 reference (w dequantized exactly; in mxfp4-even mode x
re-quantized per 32-K group with the `even` rule by a separate implementation):
|y - ref| <= 1e-5 + 1.6e-2 |ref| elementwise, or within mxval's accumulation-order bound
4 sqrt(K) 2^-24 sum_k |x_k w_k|; y finite and fully written; the guard untouched; the
reference not all zero. One line per case, then `N passed, N failed`; exit 1 on a failure.
The cases are split over --jobs processes (Triton compiles each kernel variant on the CPU,
one after another within a process); --jobs 1 runs them all in this process.

--variants-dir runs every library under DIR (one process each, --jobs at a time; an empty
or missing DIR is first filled by make_variants.py from --library's variants.json) and
prints `variant NAME: caught on N cases` or `variant NAME: NOT caught`; exit 1 if a
variant is not caught (or --library, run alongside, fails).
"""
import argparse
import importlib
import json
import math
import os
import re
import subprocess
import sys
import time
import traceback
import zlib

import torch

POISON = 0x7FA5  # bf16 signalling NaN: an element still holding it was never written
ATOL, RTOL = 1e-5, 1.6e-2

# name -> B, N, K, x layout, x K-stride, y layout, default Ms
#   x "q": a view inside q [M + 8, B, pitch] (the MLA q_nope layout, strides (pitch, B*pitch, ks))
#   x "dense": a dense [B, M, K] at the front of a NaN-filled buffer
#   y "head": [B, M, N] dense; y "batch": [M, B, N] dense, seen as its (0, 1) transpose
PRESETS = {
    "kup": dict(B=16, N=512, K=192, x="q", pitch=256, kstride=1, y="head", ms=(1, 4, 16, 64, 256, 333)),
    "vup": dict(B=16, N=256, K=512, x="dense", pitch=None, kstride=1, y="batch", ms=(1, 4, 16, 64, 256)),
    "odd": dict(B=3, N=96, K=224, x="q", pitch=512, kstride=2, y="batch", ms=(5, 300)),
}
DEFAULT_SHAPES = "kup;vup;odd"
MODES = ("bf16", "mxfp4-even")

E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


# ----------------------------------------------------------------- library
class Problem(dict):
    """The `problem` argument: attributes and keys both work."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class Library:
    def __init__(self, root):
        self.root = os.path.abspath(root)
        with open(os.path.join(self.root, "mxval_library.json")) as f:
            self.manifest = json.load(f)
        kernels = self.manifest["kernels"]
        k = next((k for k in kernels if k["name"] == "batched_gemm_a16wfp4"), kernels[0])
        self.kernel_name = k["name"]
        for p in reversed(self.manifest.get("python_paths", ["."])):
            sys.path.insert(0, os.path.normpath(os.path.join(self.root, p)))
        self.run = self._resolve(k["entry"])
        self.can_implement = self._resolve(k["can_implement"]) if k.get("can_implement") else None
        self.workspace_size = self._resolve(k["workspace_size"]) if k.get("workspace_size") else None
        if "config_table" in k:
            with open(os.path.join(self.root, k["config_table"])) as f:
                self.table, self.configs = json.load(f), None
        else:
            self.table, self.configs = None, k["configs"]

    @staticmethod
    def _resolve(spec):
        module, fn = spec.split(":")
        return getattr(importlib.import_module(module), fn)

    def configs_for(self, M):
        """[(entry name, config)]: the table's entry for M, or every listed config."""
        if self.table is None:
            return [("configs[%d]" % i, c) for i, c in enumerate(self.configs)]
        buckets = sorted((int(k[len("M_LEQ_"):]), k) for k in self.table if k.startswith("M_LEQ_"))
        for bound, key in buckets:
            if M <= bound:
                return [(key, self.table[key])]
        return [("any", self.table["any"])]


# ---------------------------------------------------------------- numerics
def pow2_f64(e):
    """2.0 ** e exactly, for an int64 tensor e in [-1022, 1023]."""
    return ((e + 1023) << 52).view(torch.float64)


def dequant_weights(w, w_scales):
    """fp64 [B, N, K] from packed E2M1 (even element in the low nibble) and E8M0 scales."""
    lut = torch.tensor(E2M1_MAGNITUDES + tuple(-v for v in E2M1_MAGNITUDES), dtype=torch.float64, device=w.device)
    codes = torch.stack([w & 15, w >> 4], dim=-1).flatten(-2).long()
    s = w_scales.long()
    scale = torch.where(s == 255, torch.full(s.shape, float("nan"), dtype=torch.float64, device=w.device),
                        pow2_f64(s - 127))
    return lut[codes] * scale.repeat_interleave(32, dim=-1)


def requant_even(x):
    """fp64 values of x [B, M, K] re-quantized to MXFP4 per 32-K group with the `even`
    scale rule: amax bits + 0x200000 masked to sign and exponent, floor(log2) - 2, clamped
    to [-127, 127]; elements rounded to the nearest E2M1 value, ties to the even code,
    saturating at 6. (Nearest value by distance: independent of how a kernel rounds.)"""
    B, M, K = x.shape
    xf = x.float().reshape(B, M, K // 32, 32)
    amax = xf.abs().amax(dim=-1, keepdim=True)
    rounded = ((amax.view(torch.int32) + 0x200000) & -0x800000).view(torch.float32).double()
    _, ex = torch.frexp(rounded)  # a power of two p = 0.5 * 2**ex
    e = ex.long() - 1 - 2
    e = torch.where(rounded == 0, torch.full_like(e, -127), e)
    e = torch.where(torch.isinf(rounded), torch.full_like(e, 127), e)
    e = e.clamp(-127, 127)
    v = xf.double() * pow2_f64(-e)
    grid = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float64, device=x.device)
    # ties: odd codes lose by far less than any real distance gap (v has 8 significant bits)
    penalty = (torch.arange(8, device=x.device) % 2).double() * 1e-6
    idx = ((v.abs().unsqueeze(-1) - grid).abs() + penalty).argmin(dim=-1)
    return (torch.sign(v) * grid[idx] * pow2_f64(e)).reshape(B, M, K)


# ------------------------------------------------------------------- cases
class Case:
    """Guarded inputs, poisoned output and the reference of one (preset, M, mode)."""

    def __init__(self, preset, M, mode, seed, device="cuda", w_row_pad=32):
        p = PRESETS[preset]
        B, N, K = p["B"], p["N"], p["K"]
        self.preset, self.B, self.M, self.N, self.K, self.mode = preset, B, M, N, K, mode
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        bf16 = torch.bfloat16

        data = torch.randn(B, M, K, generator=gen, device=device, dtype=torch.float32)
        data[:, 0, 32:64] = 0  # a zero group: scale byte 0, codes 0
        data[:, M - 1, 0:32] *= 0.5
        data[:, M - 1, 0] = 7.0  # amax 7: the `even` rounding carries (exponent 1, not 0)
        data[:, M // 2, K - 32:] *= 2.0 ** -12  # a small group: exponent about -13
        if p["x"] == "q":
            ks, pitch = p["kstride"], p["pitch"]
            assert pitch >= K * ks
            self.x_store = torch.full((M + 8, B, pitch), float("nan"), dtype=bf16, device=device)
            self.x = self.x_store[:M, :, 0:K * ks:ks].transpose(0, 1)
        else:
            self.x_store = torch.full((B * M * K + 8 * K,), float("nan"), dtype=bf16, device=device)
            self.x = self.x_store[:B * M * K].view(B, M, K)
        self.x.copy_(data.to(bf16))

        self.w_store = torch.full((B, N, K // 2 + w_row_pad), 0xFF, dtype=torch.uint8, device=device)
        self.w = self.w_store[:, :, :K // 2]
        self.w.copy_(torch.randint(0, 256, (B, N, K // 2), generator=gen, device=device, dtype=torch.uint8))
        G = K // 32
        self.s_store = torch.full((B, N, G + 2 * (G & -G)), 0xFF, dtype=torch.uint8, device=device)
        self.w_scales = self.s_store[:, :, :G]
        self.w_scales.copy_(torch.randint(120, 131, (B, N, G), generator=gen, device=device, dtype=torch.uint8))

        # y in front of a guard big enough for row/batch mix-ups to land in it
        self.n_main = B * M * N
        spill = B * B * N + M * M * N
        guard = 65536 + (spill if spill <= (1 << 26) else 0)
        self.y_store = torch.empty(self.n_main + guard, dtype=bf16, device=device)
        if p["y"] == "head":
            self.y = self.y_store[:self.n_main].view(B, M, N)
        else:
            self.y = self.y_store[:self.n_main].view(M, B, N).transpose(0, 1)
        self.y_layout = p["y"]

        # bit copies of the input buffers (guards included): a kernel must not write them
        self.inputs = [(t, t.view(torch.int16 if t.dtype == bf16 else torch.uint8).clone())
                       for t in (self.x_store, self.w_store, self.s_store)]

        xq = requant_even(self.x) if mode == "mxfp4-even" else self.x.double()
        wq = dequant_weights(self.w, self.w_scales)
        self.ref = torch.bmm(xq, wq.transpose(1, 2))
        self.abs_ref = torch.bmm(xq.abs(), wq.abs().transpose(1, 2))
        self.poison()

    def name(self):
        return "%s M=%d %s" % (self.preset, self.M, self.mode)

    def problem(self):
        return Problem(B=self.B, M=self.M, N=self.N, K=self.K, activations=self.mode, device=self.x.device.type,
                       x_strides=tuple(self.x.stride()), w_strides=tuple(self.w.stride()),
                       w_scales_strides=tuple(self.w_scales.stride()), y_strides=tuple(self.y.stride()))

    def poison(self):
        self.y_store.view(torch.int16).fill_(POISON)

    def check(self):
        """(ok, summary) for the output now in y (call after the device finished)."""
        y = self.y.double()
        ref = self.ref
        unwritten = int((self.y.view(torch.int16) == POISON).sum())
        guard = int((self.y_store[self.n_main:].view(torch.int16) != POISON).sum())
        inputs_changed = sum(int((t.view(c.dtype) != c).sum()) for t, c in self.inputs)
        nonfinite = int((~torch.isfinite(y) & torch.isfinite(ref)).sum())
        err = (y - ref).abs()
        ok = torch.isfinite(y) & ((err <= ATOL + RTOL * ref.abs())
                                  | (err <= 4 * math.sqrt(self.K) * 2.0 ** -24 * self.abs_ref))
        bad = int((~ok).sum())
        ref_max = float(ref.abs().max())
        finite_err = torch.where(torch.isfinite(err), err, torch.zeros_like(err))
        rel = float(finite_err.norm() / ref.norm()) if ref_max > 0 else float("nan")
        passed = bad == 0 and unwritten == 0 and guard == 0 and inputs_changed == 0 and nonfinite == 0 and ref_max > 0
        if passed:
            return True, "rel_err %.2e" % rel
        parts = ["%d/%d bad" % (bad, ref.numel())]
        if unwritten:
            parts.append("%d unwritten" % unwritten)
        if nonfinite:
            parts.append("%d non-finite" % nonfinite)
        if guard:
            parts.append("%d guard elements past y overwritten" % guard)
        if inputs_changed:
            parts.append("%d input elements (x, w, scales or their guards) overwritten" % inputs_changed)
        if ref_max == 0:
            parts.append("reference is all zero (invalid case)")
        parts.append("max|err| %.3g, rel_err %.2e" % (float(finite_err.max()), rel))
        return False, ", ".join(parts)


def describe(entry, config):
    keys = (("BM", "BLOCK_SIZE_M"), ("BN", "BLOCK_SIZE_N"), ("BK", "BLOCK_SIZE_K"), ("KS", "NUM_KSPLIT"))
    return "%s %s" % (entry, "_".join("%s%s" % (s, config.get(k)) for s, k in keys))


def run_case(lib, case, entry, config, graph):
    """(status, detail): status PASS, FAIL or ERROR."""
    problem = case.problem()
    if lib.can_implement is not None:
        why = lib.can_implement(problem, dict(config))
        if why:
            return "FAIL", "can_implement rejects the table's config: %s" % why
    ws_bytes = int(lib.workspace_size(problem, dict(config))) if lib.workspace_size else 0
    workspace = torch.full((ws_bytes,), 0xFF, dtype=torch.uint8, device="cuda") if ws_bytes else None

    def call(stream):
        lib.run(case.x, case.w, case.w_scales, case.y, config=dict(config), activations=case.mode,
                workspace=workspace, stream=stream)

    s = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        call(s)
    torch.cuda.synchronize()
    ok, detail = case.check()
    if not ok:
        return "FAIL", "eager: " + detail
    if not graph:
        return "PASS", "eager " + detail
    case.poison()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        call(s)
    g.replay()
    torch.cuda.synchronize()
    gok, gdetail = case.check()
    if not gok:
        return "FAIL", "eager ok, CUDA graph: " + gdetail
    return "PASS", "eager+graph " + gdetail


def add_random_presets(n, seed):
    """Adds n seeded random shapes ("r0".."r<n-1>", one M each) to PRESETS; returns their spec.
    B, N, K, M, the x layout (strided inside q with a random pitch, K-stride 1 or 2, or dense)
    and the y layout are drawn so that K tails, ragged M and N tiles and every config bucket occur."""
    import random

    rng = random.Random(seed * 7919 + 17)
    names = []
    for i in range(n):
        K = 32 * rng.randint(1, 24)
        strided = rng.random() < 0.5
        ks = rng.choice((1, 1, 2)) if strided else 1
        PRESETS["r%d" % i] = dict(
            B=rng.choice((1, 2, 3, 16)), N=16 * rng.randint(1, 40), K=K, x="q" if strided else "dense",
            pitch=K * ks + 32 * rng.randint(1, 4) if strided else None, kstride=ks,
            y=rng.choice(("head", "batch")), ms=(rng.choice((rng.randint(1, 16), rng.randint(1, 300), rng.randint(1, 1500))),))
        names.append("r%d" % i)
    return ";".join(names)


def parse_shapes(text):
    """'kup;vup:1,64;odd' -> [(preset, M)]."""
    out = []
    for item in filter(None, (t.strip() for t in text.split(";"))):
        name, _, ms = item.partition(":")
        if name not in PRESETS:
            raise SystemExit("unknown shape preset %r (known: %s)" % (name, ", ".join(PRESETS)))
        out += [(name, int(m)) for m in (ms.split(",") if ms else PRESETS[name]["ms"])]
    return out


def case_seed(seed, preset, M, mode):
    """The same inputs for a case however the cases are split over processes."""
    return (seed * 1000003 + zlib.crc32(("%s/%d/%s" % (preset, M, mode)).encode())) % (1 << 62)


def check_library(args):
    """Runs the cases on one library in this process; returns the exit code."""
    if not torch.cuda.is_available():
        print("no CUDA device: this self-check needs a GPU")
        return 2
    lib = Library(args.library)
    import triton  # noqa: F401  (after the library: its python_paths may provide it)
    print("library %s (build %s) kernel %s | %s | torch %s, triton %s" % (
        lib.manifest["name"], lib.manifest["build_id"], lib.kernel_name, torch.cuda.get_device_name(),
        torch.__version__, sys.modules["triton"].__version__), flush=True)
    modes = [m for m in args.modes.split(",") if m]
    passed = failed = errors = 0
    t0 = time.time()
    for preset, M in parse_shapes(args.shapes):
        for mode in modes:
            case = None
            for entry, config in lib.configs_for(M):
                label = "%s M=%d %s [%s]" % (preset, M, mode, describe(entry, config))
                trace = None
                try:
                    if case is None:
                        case = Case(preset, M, mode, seed=case_seed(args.seed, preset, M, mode),
                                    w_row_pad=args.w_row_pad)
                    status, detail = run_case(lib, case, entry, config, not args.no_graph)
                except Exception as e:  # noqa: BLE001 - a raising kernel is a failed case
                    lines = [l.strip() for l in str(e).strip().splitlines() if l.strip()]
                    msg = " ... ".join(lines[:1] + lines[-1:]) if len(lines) > 1 else "".join(lines)
                    status, detail = "ERROR", "%s: %s" % (type(e).__name__, msg[:400])
                    if not errors:
                        trace = traceback.format_exc()
                    errors += 1
                print("%-5s %s: %s" % (status, label, detail), flush=True)
                if trace:  # the first error's traceback, indented (not a result line)
                    print("\n".join("      " + l for l in trace.rstrip().splitlines()[-40:]), flush=True)
                if status == "PASS":
                    passed += 1
                else:
                    failed += 1
            del case
    print("elapsed %.1f s" % (time.time() - t0))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


def run_children(argvs, jobs, timeout):
    """Runs this script once per argv list (`jobs` at a time); [(exit code, output)] in order."""
    results, running, queue = [None] * len(argvs), [], list(enumerate(argvs))
    while queue or running:
        while queue and len(running) < jobs:
            i, argv = queue.pop(0)
            proc = subprocess.Popen([sys.executable, os.path.abspath(__file__)] + argv,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            running.append((i, proc, time.time()))
        for item in list(running):
            i, proc, start = item
            try:
                out = proc.communicate(timeout=0.2)[0]
            except subprocess.TimeoutExpired:
                if time.time() - start < timeout:
                    continue
                proc.kill()
                out = proc.communicate()[0] + "\n(killed after %.0f s)" % timeout
            results[i] = (proc.returncode, out)
            running.remove(item)
    return results


def child_args(args, shapes):
    return (["--jobs", "1", "--shapes", shapes, "--modes", args.modes, "--seed", str(args.seed),
             "--random", str(args.random),
             "--w-row-pad", str(args.w_row_pad)] + (["--no-graph"] if args.no_graph else []))


def summary_of(lines):
    """(passed, failed) from a child's last `N passed, N failed` line, or None."""
    for l in reversed(lines):
        m = re.fullmatch(r"(\d+) passed, (\d+) failed", l.strip())
        if m:
            return int(m.group(1)), int(m.group(2))
    return None


def check_library_parallel(args):
    """The cases of one library split over --jobs processes (Triton compiles on the CPU,
    one kernel variant after another in a process); output in case order."""
    units = ["%s:%d" % u for u in parse_shapes(args.shapes)]
    n = max(1, min(args.jobs, len(units)))
    chunks = [units[i * len(units) // n:(i + 1) * len(units) // n] for i in range(n)]
    t0 = time.time()
    results = run_children([["--library", args.library] + child_args(args, ";".join(c)) for c in chunks],
                           args.jobs, args.timeout)
    passed = failed = 0
    for i, (rc, out) in enumerate(results):
        lines = out.splitlines()
        if i == 0 and lines and lines[0].startswith("library "):
            print(lines[0])
        for l in lines:
            if l.startswith(("PASS", "FAIL", "ERROR", " ")):
                print(l)
        got = summary_of(lines)
        if got is None:
            expected = len(chunks[i]) * len([m for m in args.modes.split(",") if m])
            print("FAIL  process for %s: no summary (exit %s); last output:" % (";".join(chunks[i]), rc))
            print("\n".join("      " + l for l in lines[-15:]))
            failed += expected
        else:
            passed, failed = passed + got[0], failed + got[1]
    print("elapsed %.1f s (%d processes)" % (time.time() - t0, n))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


def check_variants(args):
    """One process per library (the variants under DIR, and --library if given), --jobs at
    a time; a variant is caught when at least one of its cases FAILs."""
    def libraries():
        return sorted(os.path.join(args.variants_dir, d) for d in os.listdir(args.variants_dir)
                      if os.path.isfile(os.path.join(args.variants_dir, d, "mxval_library.json")))

    os.makedirs(args.variants_dir, exist_ok=True)
    dirs = libraries()
    if not dirs and args.library and os.path.isfile(os.path.join(args.library, "variants.json")):
        make = os.path.join(os.path.dirname(os.path.abspath(__file__)), "make_variants.py")
        subprocess.run([sys.executable, make, args.library, args.variants_dir], check=True,
                       stdout=subprocess.DEVNULL)
        dirs = libraries()
    if not dirs:
        print("no library (mxval_library.json) under %s" % args.variants_dir)
        return 2
    libs = ([("library", args.library)] if args.library else []) + [("variant", d) for d in dirs]
    t0 = time.time()
    results = run_children([["--library", d] + child_args(args, args.shapes) for _, d in libs],
                           args.jobs, args.timeout)
    exit_code = 0
    for (kind, d), (rc, out) in zip(libs, results):
        lines = out.splitlines()
        with open(os.path.join(d, "mxval_library.json")) as f:
            name = json.load(f)["name"]
        fails = [l for l in lines if l.startswith("FAIL")]
        errors = [l for l in lines if l.startswith("ERROR")]
        got = summary_of(lines)
        if kind == "library":
            print("library %s: %s" % (name, "%d passed, %d failed" % got if got else "no summary (exit %s)" % rc))
            if rc != 0 or got is None:
                exit_code = 1
                print("\n".join("    " + l for l in ((fails + errors)[:20] or lines[-20:])))
            continue
        if fails:
            print("variant %s: caught on %d cases" % (name, len(fails)))
            for l in fails[:args.show]:
                print("    " + l)
            if len(fails) > args.show:
                print("    ... %d more" % (len(fails) - args.show))
        else:
            print("variant %s: NOT caught" % name)
            exit_code = 1
        if errors:
            print("    (%d cases raised instead, e.g. %s)" % (len(errors), errors[0]))
        if got is None:
            print("    no summary line (exit %s); last output:" % rc)
            print("\n".join("      " + l for l in lines[-10:]))
    print("elapsed %.1f s" % (time.time() - t0))
    return exit_code


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--library", help="library directory (holds mxval_library.json)")
    ap.add_argument("--variants-dir", help="directory of variant libraries (make_variants.py output)")
    ap.add_argument("--shapes", default=DEFAULT_SHAPES,
                    help="presets and Ms, e.g. 'kup;vup:1,64;odd' (presets: %s)" % ", ".join(
                        "%s B=%d N=%d K=%d" % (k, v["B"], v["N"], v["K"]) for k, v in PRESETS.items()))
    ap.add_argument("--modes", default=",".join(MODES), help="activation modes")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--random", type=int, default=0,
                    help="add N seeded random shapes (r0..rN-1: B, N, K, M and layouts drawn from --seed)")
    ap.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph capture and replay")
    ap.add_argument("--w-row-pad", type=int, default=32, help="0xFF bytes after each packed weight row")
    ap.add_argument("--jobs", type=int, default=4,
                    help="processes: a library's cases are split over them; with --variants-dir, "
                         "libraries checked at once (1: everything in this process)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per child process")
    ap.add_argument("--show", type=int, default=6, help="failing cases listed per variant")
    args = ap.parse_args()
    if args.random:
        names = add_random_presets(args.random, args.seed)
        if args.shapes == DEFAULT_SHAPES:  # a child gets its own explicit share of the cases
            args.shapes = DEFAULT_SHAPES + ";" + names
    if args.variants_dir:
        return check_variants(args)
    if not args.library:
        ap.error("give --library DIR and/or --variants-dir DIR")
    if args.jobs > 1:
        return check_library_parallel(args)
    return check_library(args)


if __name__ == "__main__":
    sys.exit(main())
