#!/usr/bin/env python3
"""Issue #3's goals, counted from one `gpu_bench.py` results file.

Reads the JSON that `python3 bench/gpu_bench.py --no-sweep [--pdl] --out F`
writes and prints, for the plain launch and (when the run has it) with
programmatic dependent launch:

  best peer   rows where best peer / mxval >= LEVEL (0.995: "ahead of or
              level"), the ratio gpu_bench.py stores (vs_best_peer,
              vs_best_peer_pdl: min(cuBLAS, dot_scaled), graph medians)
  floor       rows with M >= 4096 where mxval / floor <= 1.15
  5 us        rows with M <= 64 where mxval < 5 us per call

then the rows that miss each goal, and with --markdown a table of every
row for BENCHMARKS.md. Sessions used to count these by hand from the log.

Usage: python3 bench/standing.py RESULTS.json [--markdown]
"""
import argparse
import json
import sys

LEVEL = 0.995      # best peer / mxval at or above this is "ahead of or level"
FLOOR_RATIO = 1.15  # M >= FLOOR_MIN_M: mxval within this multiple of the floor
FLOOR_MIN_M = 4096
SMALL_MAX_M = 64    # M <= this: under SMALL_US per call
SMALL_US = 5.0


def median(row, side):
    """The graph-replay median of one side (mxval, mxval_pdl, cublas,
    dot_scaled), or None when the run did not time it."""
    v = row.get(side)
    return v.get("median") if isinstance(v, dict) else None


# gpu_bench.py's best-peer ratio (min(cuBLAS, dot_scaled) / mxval) per side.
PEER_RATIO = {"mxval": "vs_best_peer", "mxval_pdl": "vs_best_peer_pdl"}


def label(row):
    return "%s M=%d" % (row["shape"], row["M"])


def goals(rows, side):
    """Per goal: (met, counted, misses), misses as (row, value) pairs.
    `side` is "mxval" (plain launch) or "mxval_pdl"."""
    out = {}
    peer = [(r, r[PEER_RATIO[side]]) for r in rows if PEER_RATIO[side] in r]
    out["best peer"] = (sum(v >= LEVEL for _, v in peer), len(peer), [(r, v) for r, v in peer if v < LEVEL])
    big = [(r, median(r, side) / r["floor_us"]) for r in rows
           if r["M"] >= FLOOR_MIN_M and median(r, side) and r.get("floor_us")]
    out["floor"] = (sum(v <= FLOOR_RATIO for _, v in big), len(big), [(r, v) for r, v in big if v > FLOOR_RATIO])
    small = [(r, median(r, side)) for r in rows if r["M"] <= SMALL_MAX_M and median(r, side)]
    out["5 us"] = (sum(v < SMALL_US for _, v in small), len(small), [(r, v) for r, v in small if v >= SMALL_US])
    return out


def report(results):
    rows = results["rows"]
    lines = ["device %s: copy bandwidth %.2f TB/s, bf16 GEMM %.0f TFLOP/s; %d rows"
             % (results.get("device", "?"), results.get("copy_bw", 0) / 1e12, results.get("bf16_rate", 0) / 1e12,
                len(rows))]
    what = {"best peer": "ahead of or level with the best peer (best peer / mxval >= %.3f)" % LEVEL,
            "floor": "M >= %d within %.2fx of the floor" % (FLOOR_MIN_M, FLOOR_RATIO),
            "5 us": "M <= %d under %.0f us per call" % (SMALL_MAX_M, SMALL_US)}
    fmt = {"best peer": "%.3f", "floor": "%.2fx", "5 us": "%.2f us"}
    for side, name in (("mxval", "plain launch"), ("mxval_pdl", "with PDL")):
        if not any(median(r, side) for r in rows):
            continue
        lines.append("%s:" % name)
        for goal, (met, n, misses) in goals(rows, side).items():
            lines.append("  %-10s %2d of %2d  %s" % (goal, met, n, what[goal]))
            if misses:
                lines.append("             missed: " + ", ".join(
                    "%s (%s)" % (label(r), fmt[goal] % v) for r, v in sorted(misses, key=lambda m: m[1])))
    return "\n".join(lines)


def markdown(results):
    has_pdl = any(median(r, "mxval_pdl") for r in results["rows"])
    head = ["shape", "M", "mxval config", "mxval µs"] + (["with PDL"] if has_pdl else []) + \
           ["cuBLAS", "dot_scaled", "floor", "best peer / mxval"] + (["… with PDL"] if has_pdl else []) + ["mxval / floor"]
    out = ["| " + " | ".join(head) + " |", "|---|---:|---|" + "---:|" * (len(head) - 3)]
    def f(v, spec="%.2f"):
        return spec % v if v else "—"

    for r in results["rows"]:
        ours, pdl = median(r, "mxval"), median(r, "mxval_pdl")
        cells = [r["shape"], str(r["M"]), "%s `%s`" % (r.get("kernel", "?").replace("a16wfp4_", ""), r.get("config", "?")),
                 f(ours)] + ([f(pdl)] if has_pdl else []) + \
                [f(median(r, "cublas")), f(median(r, "dot_scaled")), f(r.get("floor_us"), "%.1f"),
                 f(r.get("vs_best_peer"))] + ([f(r.get("vs_best_peer_pdl"))] if has_pdl else []) + \
                [f(ours / r["floor_us"] if ours and r.get("floor_us") else None)]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results")
    ap.add_argument("--markdown", action="store_true", help="also print every row as a Markdown table")
    args = ap.parse_args(argv)
    with open(args.results) as f:
        results = json.load(f)
    if not isinstance(results, dict) or not isinstance(results.get("rows"), list):
        print("%s: not a gpu_bench.py results file (no 'rows' list)" % args.results, file=sys.stderr)
        return 2
    print(report(results))
    if args.markdown:
        print()
        print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
