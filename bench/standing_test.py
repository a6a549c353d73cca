#!/usr/bin/env python3
"""Unit test of bench/standing.py on the CPU: a synthetic gpu_bench.py
results file whose rows sit on both sides of each goal's threshold checks the
counts, the misses, the thresholds' edges, a row without a peer, the Markdown
table and the refusal of a file that is not a results file; a second run of
the same rows checks the comparison across runs (met in every run, in some,
in none, with the value's range)."""
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standing as st  # noqa: E402


def timing(us):
    return {"median": us, "p10": us * 0.99, "p90": us * 1.01}


def row(shape, M, ours, cublas, dot, floor, pdl=None):
    r = {"shape": shape, "M": M, "kernel": "a16wfp4_wgmma_rs", "config": "BM128_BN64_BK64_KS1_S8_W5",
         "floor_us": floor, "mxval": timing(ours)}
    if cublas is not None:
        r["cublas"] = timing(cublas)
    if dot is not None:
        r["dot_scaled"] = timing(dot)
    # The best-peer ratios as gpu_bench.py stores them.
    peers = [t for t in (cublas, dot) if t is not None]
    r["vs_best_peer"] = min(peers) / ours
    if pdl is not None:
        r["mxval_pdl"] = timing(pdl)
        r["vs_best_peer_pdl"] = min(peers) / pdl
    return r


ROWS = [
    # M <= 64: ahead (2.9 vs cuBLAS 3.0), 4.99 us is under 5, 5.0 is not
    row("a/kup", 1, 2.9, 3.0, 3.5, 0.2, pdl=2.1),
    row("a/kup", 16, 4.99, 4.97, 6.0, 0.3, pdl=4.0),   # 4.97 / 4.99 = 0.996: level
    row("a/vup", 64, 5.0, 4.0, 5.5, 0.5, pdl=3.0),     # behind plain (0.80), ahead with PDL
    # M >= 4096: floor ratio 1.15 exactly is within; 1.16 is not
    row("a/kup", 4096, 23.0, 25.0, 60.0, 20.0, pdl=22.0),
    row("a/vup", 8192, 46.4, 46.0, 90.0, 40.0, pdl=45.0),  # 1.16x; peer 46.0 / 46.4 = 0.991: behind
    row("b/kup", 1024, 9.0, None, 17.0, 5.0),               # no cuBLAS: dot_scaled is the best peer; no PDL
]


class StandingTest(unittest.TestCase):
    def setUp(self):
        self.results = {"device": "test GPU", "copy_bw": 4.0e12, "bf16_rate": 7.8e14, "rows": ROWS}

    def test_counts_and_misses_plain(self):
        g = st.goals(ROWS, "mxval")
        met, n, misses = g["best peer"]
        self.assertEqual((met, n), (4, 6))
        self.assertEqual(sorted(st.label(r) for r, _ in misses), ["a/vup M=64", "a/vup M=8192"])
        self.assertAlmostEqual(dict((st.label(r), v) for r, v in misses)["a/vup M=64"], 0.8)
        met, n, misses = g["floor"]
        self.assertEqual((met, n), (1, 2))  # 23 / 20 = 1.15 is within, 46.4 / 40 = 1.16 is not
        self.assertEqual([st.label(r) for r, _ in misses], ["a/vup M=8192"])
        met, n, misses = g["5 us"]
        self.assertEqual((met, n), (2, 3))  # 5.0 us is not under 5
        self.assertEqual([st.label(r) for r, _ in misses], ["a/vup M=64"])

    def test_pdl_counts_only_rows_that_have_it(self):
        g = st.goals(ROWS, "mxval_pdl")
        self.assertEqual(g["best peer"][:2], (5, 5))
        self.assertEqual(g["floor"][:2], (2, 2))
        self.assertEqual(g["5 us"][:2], (3, 3))

    def test_report_names_the_misses(self):
        text = st.report(self.results)
        self.assertIn("best peer   4 of  6", text)
        self.assertIn("a/vup M=64 (0.800)", text)
        self.assertIn("a/vup M=8192 (1.16x)", text)
        self.assertIn("with PDL:", text)

    def test_markdown_has_a_row_per_result(self):
        md = st.markdown(self.results).splitlines()
        self.assertEqual(len(md), 2 + len(ROWS))
        ncols = md[0].count("|")
        self.assertTrue(all(line.count("|") == ncols for line in md))
        self.assertIn("| b/kup | 1024 |", md[-1])
        self.assertIn("—", md[-1])  # no cuBLAS and no PDL time

    def test_main_refuses_a_file_that_is_not_results(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump([1, 2, 3], f)
        err = io.StringIO()
        try:
            with redirect_stderr(err):
                self.assertEqual(st.main([f.name]), 2)
        finally:
            os.unlink(f.name)
        self.assertIn("not a gpu_bench.py results file", err.getvalue())

    def test_main_prints_the_report(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(self.results, f)
        out = io.StringIO()
        try:
            with redirect_stdout(out):
                self.assertEqual(st.main([f.name, "--markdown"]), 0)
        finally:
            os.unlink(f.name)
        self.assertIn("plain launch:", out.getvalue())
        self.assertIn("| shape | M |", out.getvalue())

    def test_across_runs_sorts_rows_by_how_often_they_met_a_goal(self):
        # Run 2: a/kup M=16 drops just behind its peer (0.990), a/vup M=64
        # stays behind, a/vup M=8192 moves inside the floor; no PDL times.
        run2 = [dict(r) for r in ROWS]
        for r in run2:
            r.pop("mxval_pdl", None)
            r.pop("vs_best_peer_pdl", None)
        run2[1] = row("a/kup", 16, 5.02, 4.97, 6.0, 0.3)
        run2[4] = row("a/vup", 8192, 45.0, 46.0, 90.0, 40.0)
        text = st.across([self.results, {"rows": run2}])
        plain, pdl = text.split("with PDL")
        self.assertIn("plain launch (2 of 2 runs have it)", plain)
        self.assertIn("best peer   3 of  6 in every run", plain)
        self.assertIn("in some runs only: a/kup M=16 (0.990-0.996), a/vup M=8192 (0.991-1.022)", plain)
        self.assertIn("in none: a/vup M=64 (0.800)", plain)
        self.assertIn("floor       1 of  2 in every run", plain)
        self.assertIn("a/vup M=8192 (1.12x-1.16x)", plain)
        self.assertIn("5 us        1 of  3 in every run", plain)  # M = 16 flips; M = 64 never under
        self.assertIn("in some runs only: a/kup M=16 (4.99 us-5.02 us)", plain)
        # Only the first run has PDL times: counted over that run alone.
        self.assertIn("(1 of 2 runs have it)", pdl)
        self.assertIn("best peer   5 of  5 in every run", pdl)

    def test_main_with_several_files_prints_each_and_the_comparison(self):
        paths = []
        for res in (self.results, self.results):
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump(res, f)
            paths.append(f.name)
        out = io.StringIO()
        try:
            with redirect_stdout(out):
                self.assertEqual(st.main(paths), 0)
            err = io.StringIO()
            with redirect_stderr(err):
                self.assertEqual(st.main(paths + ["/nonexistent/results.json"]), 2)
            self.assertIn("/nonexistent/results.json", err.getvalue())
        finally:
            for p in paths:
                os.unlink(p)
        self.assertEqual(out.getvalue().count("== "), 2)
        self.assertIn("across 2 runs:", out.getvalue())
        self.assertIn("best peer   4 of  6 in every run", out.getvalue())


if __name__ == "__main__":
    unittest.main()
