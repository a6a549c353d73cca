#!/usr/bin/env python3
"""Checks a Python MXFP4 kernel library (default: torch_mxfp4) on the CPU the way mxval
does, against an independent float64 reference, and checks that its bug variants fail.

The library is driven through its manifest (kernels/python/README.md): guarded,
poisoned inputs (x a strided view inside rows of pitch K+64 or with K-stride 2, NaN
padding and NaN rows past M; packed weights and scales inside rows padded with 0xFF),
NaN-poisoned y in head-major and batch-major layouts, a 0xFF-poisoned workspace inside
guard bytes. Every case runs every config of the library's table (not only the bucket
dispatch would pick for M), so that split-K configs meet B > 1 and M > 1.

A case passes when can_implement accepts it, run returns, every y element satisfies
|y - ref| <= 1e-5 + 1.6e-2 |ref| (no NaN left), the reference is nonzero, and nothing
outside y's view changed (y's guards, x, w, scales, the workspace's guards).

With --variants-dir DIR, make_variants.py writes the library's variants.json trees to
DIR and each must fail at least one case (it is "caught").

Usage: torch_mxfp4_check.py [--library DIR] [--variants-dir DIR]
Prints one line per case / variant and `N passed, N failed`; exits 1 on any failure.
"""
import argparse
import importlib
import json
import os
import subprocess
import sys
import traceback

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = [(2, 48, 192), (3, 32, 512), (1, 16, 64)]  # (B, N, K)
MS = [1, 3, 17, 40]
ACTIVATIONS = ["bf16", "mxfp4-even"]
LAYOUTS = ["head-major", "batch-major"]
ATOL, RTOL = 1e-5, 1.6e-2
BF16_POISON = 0x7FA5  # signalling-NaN bits, as mxval poisons
X_PAD = 64            # extra elements per x row (K-up's q_nope inside q)
GUARD = 32            # poisoned elements / bytes before and after y and the workspace
EXTREME_X = 2.0 ** 124  # batch 0's first two K groups: scale bytes 0 and 1, x scaled up


# ---------------------------------------------------------------- library loading

class Library:
    def __init__(self, lib_dir, kernel_name=None):
        self.dir = os.path.abspath(lib_dir)
        with open(os.path.join(self.dir, "mxval_library.json")) as f:
            self.manifest = json.load(f)
        kernels = self.manifest["kernels"]
        k = next(k for k in kernels if k["name"] == kernel_name) if kernel_name else kernels[0]
        self.kernel = k
        self.name = self.manifest["name"]
        if "config_table" in k:
            with open(os.path.join(self.dir, k["config_table"])) as f:
                self.configs = json.load(f)  # bucket -> config
        else:
            self.configs = {f"configs[{i}]": c for i, c in enumerate(k["configs"])}
        points = [k["entry"], k.get("can_implement"), k.get("workspace_size")]
        # A variant has the same package names as the library: drop what an earlier
        # library imported so that this tree's modules load.
        tops = {p.split(":")[0].split(".")[0] for p in points if p}
        for mod in list(sys.modules):
            if mod.split(".")[0] in tops:
                del sys.modules[mod]
        paths = [os.path.join(self.dir, p) for p in self.manifest.get("python_paths", ["."])]
        sys.path[:] = paths + [p for p in sys.path if p not in _inserted_paths]
        _inserted_paths[:] = paths
        importlib.invalidate_caches()
        self.run = _resolve(k["entry"])
        self.can_implement = _resolve(k["can_implement"]) if k.get("can_implement") else (lambda p, c: None)
        self.workspace_size = _resolve(k["workspace_size"]) if k.get("workspace_size") else (lambda p, c: 0)


_inserted_paths = []


def _resolve(point):
    mod, fn = point.split(":")
    return getattr(importlib.import_module(mod), fn)


# ---------------------------------------------------------------- inputs

def f32_to_bf16_bits(f):
    """Round-to-nearest-even fp32 -> bf16 bits (finite inputs)."""
    u = np.ascontiguousarray(f, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_bits_to_f64(h):
    return (h.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def scale_guard(kg):
    """Guard bytes per scale row: 2 x the largest power of two dividing K/32 (README)."""
    return 2 * (kg & -kg)


class Inputs:
    """Host data of one (B, N, K, M): bf16 bits of x, packed weights, scales."""

    def __init__(self, B, N, K, M):
        rng = np.random.default_rng([B, N, K, M])
        self.B, self.N, self.K, self.M = B, N, K, M
        x = np.clip(rng.standard_normal((B, M, K)), -7, 7).astype(np.float32)
        x[0, :, :64] *= np.float32(EXTREME_X)
        self.x_bits = f32_to_bf16_bits(x)
        self.packed = rng.integers(0, 256, (B, N, K // 2), dtype=np.uint8)
        self.scales = rng.integers(123, 132, (B, N, K // 32), dtype=np.uint8)
        # Subnormal 2^-127 and smallest normal 2^-126 scales, balanced by x above.
        self.scales[0, :, 0] = 0
        self.scales[0, :, 1] = 1


def guarded_x(inp, kstride):
    """bf16 [B, M, K] view (K-stride kstride) inside rows of pitch kstride*K + X_PAD,
    with NaN rows past M; returns (view, backing int16 buffer)."""
    B, M, K = inp.B, inp.M, inp.K
    buf = torch.full((B, M + 2, kstride * K + X_PAD), BF16_POISON, dtype=torch.int16)
    buf[:, :M, 0:kstride * K:kstride] = torch.from_numpy(inp.x_bits.view(np.int16))
    return buf.view(torch.bfloat16)[:, :M, 0:kstride * K:kstride], buf


def guarded_bytes(data, pad):
    """uint8 view of data [B, N, L] inside rows of L + pad bytes, padding 0xFF."""
    B, N, L = data.shape
    buf = torch.full((B, N, L + pad), 0xFF, dtype=torch.uint8)
    buf[:, :, :L] = torch.from_numpy(data)
    return buf[:, :, :L], buf


def guarded_y(B, M, N, layout):
    flat = torch.full((2 * GUARD + B * M * N,), BF16_POISON, dtype=torch.int16)
    body = flat.view(torch.bfloat16)[GUARD:GUARD + B * M * N]
    y = body.view(B, M, N) if layout == "head-major" else body.view(M, B, N).transpose(0, 1)
    return y, flat


# ---------------------------------------------------------------- reference

E2M1_GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def ref_weights(packed, scales):
    """float64 [B, N, K]: low nibble = even K element, 2^(s-127) scales, 0xFF -> NaN."""
    B, N, H = packed.shape
    codes = np.empty((B, N, 2 * H), dtype=np.int64)
    codes[..., 0::2] = packed & 0x0F
    codes[..., 1::2] = packed >> 4
    mag = E2M1_GRID[codes & 7]
    vals = np.where(codes & 8, -mag, mag)
    s = scales.astype(np.int64)
    sc = np.where(s == 0xFF, np.nan, np.ldexp(1.0, s - 127))
    return vals * np.repeat(sc, 32, axis=-1)


def ref_requant_even(x):
    """float64 [..., K] fake-quantized per 32-K group, the `even` rule (README)."""
    shape = x.shape
    g = x.reshape(-1, 32)
    out = np.empty_like(g)
    even_code = (np.arange(8) % 2) == 0
    for i, v in enumerate(g):
        if not np.all(np.isfinite(v)):
            out[i] = np.nan
            continue
        amax = np.max(np.abs(v))
        if amax == 0:
            out[i] = 0.0
            continue
        bits = int(np.float32(amax).view(np.uint32))
        rb = (bits + 0x200000) & 0xFF800000
        if rb == 0:
            e = -127
        elif rb >= 0x7F800000:
            e = 127
        else:
            _, ex = np.frexp(float(np.uint32(rb).view(np.float32)))
            e = min(max(ex - 1 - 2, -127), 127)
        q = np.abs(v) / np.ldexp(1.0, e)
        d = np.abs(q[:, None] - E2M1_GRID[None, :])
        nearest = d == d.min(axis=1, keepdims=True)
        # Ties pick the even code; argmax takes the first of the best scores.
        best = np.argmax(nearest * 2 + (nearest & even_code), axis=1)
        best = np.where(q >= 6.0, 7, best)
        out[i] = np.where(np.signbit(v), -1.0, 1.0) * E2M1_GRID[best] * np.ldexp(1.0, e)
    return out.reshape(shape)


_ref_cache = {}


def reference(inp, activations):
    key = (inp.B, inp.N, inp.K, inp.M, activations)
    if key not in _ref_cache:
        x = bf16_bits_to_f64(inp.x_bits)
        if activations == "mxfp4-even":
            x = ref_requant_even(x)
        w = ref_weights(inp.packed, inp.scales)
        _ref_cache[key] = np.matmul(x, np.swapaxes(w, 1, 2))
    return _ref_cache[key]


# ---------------------------------------------------------------- one case

def run_case(lib, inp, activations, layout, bucket, config):
    """Returns None (pass) or the reason it failed."""
    B, N, K, M = inp.B, inp.N, inp.K, inp.M
    kstride = 1 if layout == "head-major" else 2
    x, x_buf = guarded_x(inp, kstride)
    w, w_buf = guarded_bytes(inp.packed, 16)
    ws_view, s_buf = guarded_bytes(inp.scales, scale_guard(K // 32))
    y, y_flat = guarded_y(B, M, N, layout)
    saved = [t.clone() for t in (x_buf, w_buf, s_buf)]
    problem = {"B": B, "M": M, "N": N, "K": K, "activations": activations, "device": "cpu",
               "x_strides": tuple(x.stride()), "w_strides": tuple(w.stride()),
               "w_scales_strides": tuple(ws_view.stride()), "y_strides": tuple(y.stride())}
    try:
        why = lib.can_implement(problem, dict(config))
        if why is not None:
            return f"can_implement refused: {why}"
        nbytes = int(lib.workspace_size(problem, dict(config)))
        ws_buf = torch.full((2 * GUARD + nbytes,), 0xFF, dtype=torch.uint8)
        workspace = ws_buf[GUARD:GUARD + nbytes] if nbytes > 0 else None
        lib.run(x, w, ws_view, y, config=dict(config), activations=activations,
                workspace=workspace, stream=None)
    except Exception as e:  # the library's error is the case's verdict
        tb = traceback.format_exception_only(type(e), e)[-1].strip()
        return f"raised {tb}"
    for name, before, after in zip(("x", "w", "w_scales"), saved, (x_buf, w_buf, s_buf)):
        if not torch.equal(before, after):
            return f"{name} storage modified"
    if not (bool((y_flat[:GUARD] == BF16_POISON).all()) and bool((y_flat[GUARD + B * M * N:] == BF16_POISON).all())):
        return "wrote outside y"
    if not (bool((ws_buf[:GUARD] == 0xFF).all()) and bool((ws_buf[GUARD + nbytes:] == 0xFF).all())):
        return "wrote outside the workspace"
    ref = reference(inp, activations)
    assert np.all(np.isfinite(ref)) and np.any(ref != 0), "reference is zero or non-finite"
    got = y.float().numpy().astype(np.float64)
    if np.isnan(got).any():
        return f"{int(np.isnan(got).sum())} NaN elements in y (unwritten or non-finite)"
    err = np.abs(got - ref)
    bad = err > ATOL + RTOL * np.abs(ref)
    if bad.any():
        b, m, n = np.argwhere(bad)[0]
        return (f"{int(bad.sum())}/{bad.size} elements off, first y[{b},{m},{n}] = {got[b, m, n]:.6g}"
                f" vs ref {ref[b, m, n]:.6g}")
    return None


def cases(lib):
    for (B, N, K) in SHAPES:
        for M in MS:
            inp = Inputs(B, N, K, M)
            for act in ACTIVATIONS:
                if act not in lib.kernel["activations"]:
                    continue
                for layout in LAYOUTS:
                    for bucket, config in lib.configs.items():
                        label = (f"B={B} M={M} N={N} K={K} act={act} y={layout} "
                                 f"x_kstride={1 if layout == 'head-major' else 2} cfg={bucket}")
                        yield label, inp, act, layout, bucket, config


def api_checks(lib):
    """can_implement / workspace_size on problems the kernel must refuse or size."""
    base = dict(next(iter(lib.configs.values())))
    prob = {"B": 2, "M": 3, "N": 16, "K": 64, "activations": "bf16", "device": "cpu"}
    checks = [
        ("can_implement refuses K = 48", lib.can_implement(dict(prob, K=48), base) is not None),
        ("can_implement refuses BLOCK_SIZE_K = 48", lib.can_implement(prob, dict(base, BLOCK_SIZE_K=48)) is not None),
        ("can_implement refuses a config without BLOCK_SIZE_K",
         lib.can_implement(prob, {k: v for k, v in base.items() if k != "BLOCK_SIZE_K"}) is not None),
        ("can_implement accepts extra keys", lib.can_implement(prob, dict(base, my_key=1)) is None),
        ("workspace_size 0 for NUM_KSPLIT = 1", lib.workspace_size(prob, dict(base, NUM_KSPLIT=1)) == 0),
        ("workspace_size NUM_KSPLIT*B*M*N*4", lib.workspace_size(prob, dict(base, NUM_KSPLIT=3)) == 3 * 2 * 3 * 16 * 4),
    ]
    return checks


def check_library(lib):
    passed = failed = 0
    for label, ok in api_checks(lib):
        print(f"{'PASS' if ok else 'FAIL'} {lib.name} api: {label}")
        passed, failed = passed + ok, failed + (not ok)
    for label, inp, act, layout, bucket, config in cases(lib):
        why = run_case(lib, inp, act, layout, bucket, config)
        print(f"{'PASS' if why is None else 'FAIL'} {lib.name} {label}" + ("" if why is None else f": {why}"))
        passed, failed = passed + (why is None), failed + (why is not None)
    return passed, failed


def check_variants(library_dir, variants_dir):
    with open(os.path.join(library_dir, "variants.json")) as f:
        variants = json.load(f)
    subprocess.run([sys.executable, os.path.join(HERE, "make_variants.py"), library_dir, variants_dir],
                   check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(library_dir, "mxval_library.json")) as f:
        lib_name = json.load(f)["name"]
    passed = failed = 0
    for v in variants:
        lib = Library(os.path.join(variants_dir, f"{lib_name}_{v['name']}"))
        caught = next(((label, "api check failed") for label, ok in api_checks(lib) if not ok), None)
        if caught is None:
            for label, inp, act, layout, bucket, config in cases(lib):
                why = run_case(lib, inp, act, layout, bucket, config)
                if why is not None:
                    caught = (label, why)
                    break
        if caught:
            print(f"PASS variant {lib.name} caught by {caught[0]}: {caught[1]}")
            passed += 1
        else:
            print(f"FAIL variant {lib.name} passed every case (bug: {v['bug']})")
            failed += 1
    return passed, failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--library", default=os.path.join(HERE, "torch_mxfp4"))
    ap.add_argument("--variants-dir", default=None,
                    help="write the library's variants here and check that each fails")
    a = ap.parse_args()
    sys.dont_write_bytecode = True  # keep the library trees free of __pycache__
    torch.manual_seed(0)
    passed, failed = check_library(Library(a.library))
    if a.variants_dir:
        p, f = check_variants(a.library, a.variants_dir)
        passed, failed = passed + p, failed + f
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
