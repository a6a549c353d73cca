#!/usr/bin/env python3
"""Issue #3's goals, counted from `gpu_bench.py` results files.

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

Given several files (runs of the same rows, e.g. the same library twice),
it also prints, per goal, the rows met in every run, in some runs only
(level with the threshold: their value's range across the runs) and in none.

Usage: python3 bench/standing.py RESULTS.json [MORE.json ...] [--markdown]
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


def goal_values(rows, side):
    """Per goal, every row it counts: (row, value, met). `side` is "mxval"
    (plain launch) or "mxval_pdl"."""
    out = {"best peer": [(r, r[PEER_RATIO[side]], r[PEER_RATIO[side]] >= LEVEL) for r in rows if PEER_RATIO[side] in r]}
    big = [(r, median(r, side) / r["floor_us"]) for r in rows
           if r["M"] >= FLOOR_MIN_M and median(r, side) and r.get("floor_us")]
    out["floor"] = [(r, v, v <= FLOOR_RATIO) for r, v in big]
    small = [(r, median(r, side)) for r in rows if r["M"] <= SMALL_MAX_M and median(r, side)]
    out["5 us"] = [(r, v, v < SMALL_US) for r, v in small]
    return out


def goals(rows, side):
    """Per goal: (met, counted, misses), misses as (row, value) pairs."""
    return {g: (sum(ok for _, _, ok in vals), len(vals), [(r, v) for r, v, ok in vals if not ok])
            for g, vals in goal_values(rows, side).items()}


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


def across(runs):
    """Several results files of the same rows (e.g. the same library run
    twice): per side and goal, how many rows met it in every run, and the
    rows that met it in some runs only or in none, with their value's range.
    A row that flips between runs is level with its threshold, not won."""
    lines = ["across %d runs:" % len(runs)]
    fmt = {"best peer": "%.3f", "floor": "%.2fx", "5 us": "%.2f us"}
    for side, name in (("mxval", "plain launch"), ("mxval_pdl", "with PDL")):
        have = [res for res in runs if any(median(r, side) for r in res["rows"])]
        if not have:
            continue
        lines.append("%s (%d of %d runs have it):" % (name, len(have), len(runs)))
        per_goal = {}
        for res in have:
            for goal, vals in goal_values(res["rows"], side).items():
                for r, v, ok in vals:
                    per_goal.setdefault(goal, {}).setdefault(label(r), []).append((v, ok))
        for goal, by_row in per_goal.items():
            every = [k for k, vs in by_row.items() if len(vs) == len(have) and all(ok for _, ok in vs)]
            none = [k for k, vs in by_row.items() if not any(ok for _, ok in vs)]
            some = [k for k in by_row if k not in every and k not in none]

            def rng(k):
                vs = [v for v, _ in by_row[k]]
                lo, hi = fmt[goal] % min(vs), fmt[goal] % max(vs)
                return "%s (%s)" % (k, lo if lo == hi else "%s-%s" % (lo, hi))

            lines.append("  %-10s %2d of %2d in every run" % (goal, len(every), len(by_row)))
            if some:
                lines.append("             in some runs only: " + ", ".join(rng(k) for k in sorted(some)))
            if none:
                lines.append("             in none: " + ", ".join(rng(k) for k in sorted(none)))
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
    ap.add_argument("results", nargs="+", help="one results file, or several runs of the same rows")
    ap.add_argument("--markdown", action="store_true", help="also print every row as a Markdown table (of each file)")
    args = ap.parse_args(argv)
    runs = []
    for path in args.results:
        try:
            with open(path) as f:
                results = json.load(f)
        except (OSError, ValueError) as e:
            print("%s: %s" % (path, e), file=sys.stderr)
            return 2
        if not isinstance(results, dict) or not isinstance(results.get("rows"), list):
            print("%s: not a gpu_bench.py results file (no 'rows' list)" % path, file=sys.stderr)
            return 2
        runs.append(results)
    for path, results in zip(args.results, runs):
        if len(runs) > 1:
            print("== %s" % path)
        print(report(results))
        if args.markdown:
            print()
            print(markdown(results))
        if len(runs) > 1:
            print()
    if len(runs) > 1:
        print(across(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
