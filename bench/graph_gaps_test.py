#!/usr/bin/env python3
"""Unit test of bench/graph_gaps.py's bookkeeping on the CPU: kernel spans
from graph replays are split at the host's synchronize, and the per-call
time, gap and per-kernel medians are taken within each replay only."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import graph_gaps as gg  # noqa: E402


def replay(t0, kernel, gap, n, name="k"):
    return [(t0 + i * (kernel + gap), t0 + i * (kernel + gap) + kernel, name) for i in range(n)]


class GraphGapsTest(unittest.TestCase):
    def test_splits_replays_and_takes_medians_within_them(self):
        # Replay 1: 2.5 us kernels, 1.5 us gaps; replay 2 starts 60 us later
        # with 3.5 us kernels and 1.0 us gaps. Given out of order.
        a, b = replay(100.0, 2.5, 1.5, 5), replay(180.0, 3.5, 1.0, 5)
        reps = gg.split_replays(list(reversed(b)) + a)
        self.assertEqual([len(r) for r in reps], [5, 5])
        self.assertEqual(reps[0][0], (100.0, 102.5, "k"))
        st = gg.gap_stats(reps, calls=5)
        # The pause between replays is not a gap: gaps are 1.5 x 4 and 1.0 x 4.
        self.assertAlmostEqual(st["gap_us"], 1.25)
        self.assertAlmostEqual(st["kernel_us"], 3.0)
        # Replay spans 18.5 and 21.5 us over 5 calls.
        self.assertAlmostEqual(st["per_call_us"], (18.5 / 5 + 21.5 / 5) / 2)
        self.assertEqual(st["kernels"]["k"]["count"], 10)
        self.assertEqual(st["replays"], 2)

    def test_a_call_of_two_kernels_reports_the_main_one(self):
        # Each call: a 1 us memset, a 0.5 us gap, a 40 us kernel, a 0.5 us gap.
        spans = []
        for c in range(4):
            t = 10.0 + 42.0 * c
            spans += [(t, t + 1.0, "Memset"), (t + 1.5, t + 41.5, "gemm")]
        st = gg.gap_stats(gg.split_replays(spans), calls=4)
        self.assertEqual(st["kernel"], "gemm")
        self.assertAlmostEqual(st["kernel_us"], 40.0)
        self.assertAlmostEqual(st["per_call_us"], (41.5 + 3 * 42.0) / 4)
        self.assertEqual(st["kernels"]["Memset"]["count"], 4)

    def test_a_replay_of_one_kernel_has_no_gap(self):
        with self.assertRaises(ValueError):
            gg.gap_stats(gg.split_replays([(0.0, 1.0, "k"), (500.0, 501.0, "k")], sep_us=50.0), calls=1)


if __name__ == "__main__":
    unittest.main()
