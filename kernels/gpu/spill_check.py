#!/usr/bin/env python3
"""Checks that every kernel instance a dispatch table names compiles without
register spills, from ptxas's resource report of kernels/gpu/a16wfp4_gpu.cu
(nvcc --resource-usage; the build keeps it in build/ptxas/a16wfp4_gpu.cu.log,
see cmake/ptxas_log_launcher.sh).

CI has no GPU, so this is its one guard on the shipped kernels' speed: a
change that makes a table's kernel spill (local-memory loads and stores in
the hot loop) fails here instead of only showing up, sessions later, as a
slower benchmark row.

For each bucket of the table (kernels/configs/sm_90a.json), the bucket's
kernel and config are mapped to the template instance that runs it (the same
mapping as the entry tables in a16wfp4_gpu.cu: MXVAL_RS_ENTRY,
MXVAL_DECODE_E, MXVAL_TC_ENTRY, ...). It fails (exit 1) if an instance is
missing from the report, if its bf16 variant spills, or if ptxas gave a
performance advisory for it (such as "(C7510) Potential Performance Loss:
wgmma.mma_async instructions are serialized ..."). The mxfp4-even
variants of a16wfp4_wgmma_rs are reported, not checked: several of them
spill as shipped (BENCHMARKS.md), and the benchmarks time bf16.

The AMD tables get the same check from the HIP build's device assembly
(--amdgpu-asm: the AMDGPU metadata's .vgpr_spill_count and
.sgpr_spill_count per kernel). Debian's hipcc has no gfx942 or gfx950
target, so gfx940's assembly (the MI300 family's earlier ISA, the same
register file) stands in for both: a compile-time check on a stand-in, not
a statement about code built for those chips.

Usage: spill_check.py --table kernels/configs/sm_90a.json --log build/ptxas/a16wfp4_gpu.cu.log
       spill_check.py --table kernels/configs/gfx942.json --amdgpu-asm build/hip/a16wfp4_gpu.gfx940.s
"""
import argparse
import json
import re
import sys

ANY = None

# Spills the check allows, as (spill store bytes, spill load bytes) at most:
# a ratchet, so that any growth fails. The mma.sync kernel's 1 x 4-warp
# BN = 64 instances (the 'custom' op's M <= 64 bucket names one of them; no
# model shape runs on it) have compiled with a 4-byte spill and an 8-byte
# stack frame at 96 registers since before this check existed (nvcc 13.0,
# 2026-12-05). It is not register pressure: the PTX has no calls and no
# local arrays, and ptxas -O1 compiles the same instance with the same 96
# registers and no spill (-O3 / -O2 spill; --maxrregcount 128 changes
# nothing), so an -O2 transformation chooses it. Where in the code was not
# found: no SASS disassembler on the build machine.
ALLOWED = {
    ("A16wfp4TcKernel", (32, 64, 64, 1, 4, 3)): (4, 8),
}

_ENTRY = re.compile(r"^ptxas info\s*: Compiling entry function '([^']+)'")
_PROPS = re.compile(r"^ptxas info\s*: Function properties for (\S+)")
_STACK = re.compile(r"^\s*(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"^ptxas info\s*: Used (\d+) registers")
# ptxas's performance advisories, e.g. "(C7510) Potential Performance Loss:
# wgmma.mma_async instructions are serialized due to ... in the function '...'".
_ADVICE = re.compile(r"^ptxas (?:info|warning)\s*: (\(C\d+\) .*?)(?: in the function '([^']+)')?\s*$")


def parse_log(text):
    """{mangled name: {"stack", "spill_stores", "spill_loads", "registers"}}
    from ptxas -v output (entry functions only)."""
    funcs, current, props_of = {}, None, None
    for line in text.splitlines():
        m = _ADVICE.match(line)
        if m:
            name = m.group(2) or current
            if name is not None:
                funcs.setdefault(name, {}).setdefault("advisories", []).append(m.group(1))
            continue
        m = _ENTRY.match(line)
        if m:
            current = m.group(1)
            funcs.setdefault(current, {})
            continue
        m = _PROPS.match(line)
        if m:
            props_of = m.group(1)
            continue
        m = _STACK.match(line)
        if m and props_of is not None:
            funcs.setdefault(props_of, {}).update(
                stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
            props_of = None
            continue
        m = _REGS.match(line)
        if m and current is not None:
            funcs[current]["registers"] = int(m.group(1))
            current = None
    return funcs


_AMD_KEY = re.compile(r"^  (?:- |  )\.([a-z_]+):\s*(\S*)\s*$")


def parse_amdgpu_asm(text):
    """The same shape as parse_log from an AMDGPU assembly file's
    amdhsa.kernels metadata: "spill_stores" / "spill_loads" hold the
    spilled VGPR / SGPR counts (registers, not bytes), "registers" the
    VGPR + AGPR + SGPR counts, "stack" the private segment (scratch) bytes."""
    funcs, entry, inside = {}, None, False

    def flush(e):
        if e and "name" in e:
            funcs[e["name"]] = {
                "registers": f"{e.get('vgpr_count', '?')} v + {e.get('agpr_count', '?')} a + "
                             f"{e.get('sgpr_count', '?')} s",
                "spill_stores": int(e["vgpr_spill_count"]), "spill_loads": int(e["sgpr_spill_count"]),
                "stack": int(e.get("private_segment_fixed_size", 0))}

    for line in text.splitlines():
        if line.startswith("amdhsa.kernels:"):
            inside = True
            continue
        if not inside:
            continue
        if line and not line.startswith(" "):  # the next top-level key ends the list
            break
        m = _AMD_KEY.match(line)
        if not m:
            continue
        if line.startswith("  - "):
            flush(entry)
            entry = {}
        if entry is not None:
            entry[m.group(1)] = m.group(2)
    flush(entry)
    return funcs


def demangle_kernel(mangled):
    """(kernel name, [template arguments]) of a mangled kernel template
    instance (A16wfp4...Kernel<...>): ints as int, bools as bool; None if the
    name is not one. Only what follows the name is read (the anonymous
    namespace's hash before it can end in digits, so the name's length
    prefix is not trusted)."""
    m = re.search(r"(A16wfp4[A-Za-z0-9]*?Kernel)I", mangled)
    if not m:
        return None
    rest = mangled[m.end():]
    args, i = [], 0
    while i < len(rest) and rest[i] == "L":
        am = re.match(r"L([ib])(n?)(\d+)E", rest[i:])
        if not am:
            return None
        v = int(am.group(3)) * (-1 if am.group(2) else 1)
        args.append(bool(v) if am.group(1) == "b" else v)
        i += am.end()
    if i >= len(rest) or rest[i] != "E":
        return None
    return (m.group(1), args)


def expected_instances(kernel, cfg, K):
    """[(template name, [argument or ANY], extra predicate or None)] that a
    bucket's (kernel, config) runs on, for K (an int, or ANY for a 'default'
    shape): the variants the ABI entry tables in a16wfp4_gpu.cu point at.
    Raises ValueError for a kernel this check does not know."""
    bm, bn, bk = cfg["BLOCK_SIZE_M"], cfg["BLOCK_SIZE_N"], cfg["BLOCK_SIZE_K"]
    ks, st, w = cfg["NUM_KSPLIT"], cfg["num_stages"], cfg["num_warps"]
    # Config fields that are not template arguments but that the kernel's
    # compiled config list fixes (a16wfp4_gpu.cu): another value is refused
    # at run time, so it is a missing instance here.
    fixed = {"a16wfp4_wgmma_rs": {"BLOCK_SIZE_K": 64}, "a16wfp4_wgmma": {"BLOCK_SIZE_K": 64},
             "a16wfp4_decode": {"BLOCK_SIZE_K": 64, "num_stages": 1, "NUM_KSPLIT": 1}}.get(kernel, {})
    for field, value in fixed.items():
        if cfg[field] != value:
            raise ValueError(f"{kernel} is compiled for {field} = {value} only, the bucket has {cfg[field]}")
    if kernel == "a16wfp4_wgmma_rs":  # <BM, WGS, K / KS, KS, STAGES, MX, MINB, ROWS>
        if w not in (5, 12):
            raise ValueError(f"{kernel} is compiled for num_warps 5 or 12 only, the bucket has {w}")
        wgs = 1 if w == 5 else 2
        rows = 32 if bn == 32 else 64
        kk = ANY if K is ANY else K // ks
        return [("A16wfp4WgmmaRsKernel", [bm, wgs, kk, ks, st, mx, ANY, rows], None) for mx in (False, True)]
    if kernel == "a16wfp4_decode":  # <WN, KW, MT, K>: BN = 8 WN, warps = WN KW, BM = 16 MT
        wn = bn // 8
        if bn % 8 or wn == 0 or w % wn:
            raise ValueError(f"{kernel} needs BLOCK_SIZE_N a multiple of 8 and num_warps a multiple of "
                             f"BLOCK_SIZE_N / 8, the bucket has {bn} / {w}")
        return [("A16wfp4DecodeKernel", [wn, w // wn, bm // 16, K], None)]
    if kernel in ("a16wfp4_tc", "a16wfp4_tc_panel"):  # <BM, BN, BK, WARPS_M, WARPS_N, STAGES>
        name = "A16wfp4TcKernel" if kernel == "a16wfp4_tc" else "A16wfp4PanelKernel"
        return [(name, [bm, bn, bk, ANY, ANY, st], lambda a: a[3] * a[4] == w)]
    if kernel == "a16wfp4_wgmma":
        if w == 9:  # TMA-fed: <BM, BN, STAGES, MX, TMA store>
            return [("A16wfp4WgmmaTmaKernel", [bm, bn, st, mx, ANY], None) for mx in (False, True)]
        return [("A16wfp4WgmmaKernel", [bm // 64, bn, st, mx], None) for mx in (False, True)]  # <WGS, BN, STAGES, MX>
    raise ValueError(f"unknown kernel {kernel!r}")


def _matches(args, want, extra):
    if len(args) != len(want):
        return False
    if any(wv is not ANY and wv != av for av, wv in zip(args, want)):
        return False
    return extra is None or extra(args)


def _is_mx(name, args):
    """Whether an instance is an mxfp4-even variant (reported, not checked)."""
    if name == "A16wfp4WgmmaRsKernel":
        return args[5] is True
    if name in ("A16wfp4WgmmaTmaKernel", "A16wfp4WgmmaKernel"):
        return args[3] is True
    return False


def _shape_k(shape_key):
    m = re.search(r"K=(\d+)", shape_key)
    return int(m.group(1)) if m else ANY


# How each report's two spill figures read: (table columns, failure text).
NVIDIA_UNITS = (("spill stores (bytes)", "spill loads (bytes)"), ("bytes stored", "loaded"))
AMD_UNITS = (("VGPRs spilled", "SGPRs spilled"), ("VGPRs spilled", "SGPRs spilled"))


def check(table, funcs, units=NVIDIA_UNITS, allowed_spills=None):
    """(rows, failures): one row per (bucket, instance) for the report, and
    the reasons the check fails. allowed_spills: ALLOWED for the ptxas
    report (the default), {} for the AMD one."""
    allowed_spills = ALLOWED if allowed_spills is None else allowed_spills
    units = units[1]
    instances = {}
    for mangled, props in funcs.items():
        d = demangle_kernel(mangled)
        if d is not None:
            instances.setdefault(d[0], []).append((d[1], props))
    rows, failures = [], []
    default_kernel = table.get("kernel", "a16wfp4_tc")
    for op, shapes in sorted(table.get("ops", {}).items()):
        for shape_key, buckets in shapes.items():
            K = _shape_k(shape_key)
            for bucket, cfg in buckets.items():
                kernel = cfg.get("kernel", default_kernel)
                where = f"{op} {shape_key} {bucket} ({kernel})"
                try:
                    wants = expected_instances(kernel, cfg, K)
                except KeyError as e:
                    failures.append(f"{where}: the bucket has no {e}")
                    continue
                except ValueError as e:
                    failures.append(f"{where}: {e}")
                    continue
                for name, want, extra in wants:
                    found = [(a, p) for a, p in instances.get(name, []) if _matches(a, want, extra)]
                    label = f"{name}<{', '.join('*' if v is ANY else str(v).lower() for v in want)}>"
                    if not found:
                        failures.append(f"{where}: no instance {label} in the ptxas report")
                        continue
                    for args, props in found:
                        mx = _is_mx(name, args)
                        inst = f"{name}<{', '.join(str(a).lower() for a in args)}>"
                        allowed = allowed_spills.get((name, tuple(args)), (0, 0))
                        how = "reported only (mxfp4-even)" if mx else "checked"
                        if "spill_stores" not in props:
                            failures.append(f"{where}: {inst}: the report has no spill line")
                        elif not mx and (props["spill_stores"] > allowed[0] or props["spill_loads"] > allowed[1]):
                            failures.append(
                                f"{where}: {inst} spills ({props['spill_stores']} {units[0]}, "
                                f"{props['spill_loads']} {units[1]}; allowed {allowed[0]} / {allowed[1]})")
                        elif allowed != (0, 0) and not mx:
                            how = f"checked: at most {allowed[0]} / {allowed[1]} allowed (ALLOWED)"
                        for advice in props.get("advisories", []):
                            if mx:
                                how += f"; {advice}"
                            else:
                                failures.append(f"{where}: {inst}: ptxas: {advice}")
                        rows.append((where, inst, props.get("registers"), props.get("spill_stores"),
                                     props.get("spill_loads"), how))
    return rows, failures


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", required=True, help="dispatch table JSON (kernels/configs/sm_90a.json)")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--log", help="ptxas resource report (build/ptxas/a16wfp4_gpu.cu.log)")
    src.add_argument("--amdgpu-asm", help="HIP device assembly (build/hip/a16wfp4_gpu.gfx940.s)")
    a = ap.parse_args(argv)
    path = a.log or a.amdgpu_asm
    try:
        with open(a.table) as f:
            table = json.load(f)
        with open(path) as f:
            text = f.read()
    except (OSError, ValueError) as e:
        print(f"spill_check: {e}", file=sys.stderr)
        return 2
    funcs = parse_log(text) if a.log else parse_amdgpu_asm(text)
    if not funcs:
        what = "ptxas function report (built without --resource-usage?)" if a.log else "amdhsa.kernels metadata"
        print(f"spill_check: {path} holds no {what}", file=sys.stderr)
        return 2
    units = NVIDIA_UNITS if a.log else AMD_UNITS
    rows, failures = check(table, funcs, units, None if a.log else {})
    if not rows and not failures:
        print(f"spill_check: {a.table} names no kernel (no 'ops' buckets)", file=sys.stderr)
        return 2
    seen = set()
    print(f"| instance | registers | {units[0][0]} | {units[0][1]} | |")
    print("|---|---:|---:|---:|---|")
    for _, inst, regs, sst, sld, how in rows:
        if inst in seen:
            continue
        seen.add(inst)
        print(f"| {inst} | {regs} | {sst} | {sld} | {how} |")
    print(f"{len(seen)} instances named by {a.table} ({len(funcs)} kernels in the report)")
    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
