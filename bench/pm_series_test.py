#!/usr/bin/env python3
"""Unit test of bench/pm_series.py on the CPU: a synthetic Nsight Compute raw
export (two kernels, one with no DRAM activity) checks the trimming to active
samples, the steady (middle half) and whole means, and the error for an
export without PM sampling."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pm_series as ps  # noqa: E402

METRICS = [m for _, m in ps.SERIES]
HDR = ["ID", "Kernel Name", "gpu__time_duration.sum"] + METRICS
UNITS = ["", "", "us"] + ["%"] * len(METRICS)


def cell(v):
    return "(" + "; ".join(v) + ")"


def row(name, us, dram, rd, wr, l2):
    return ["0", name, us] + [cell(x) for x in (dram, rd, wr, l2)]


class PmSeriesTest(unittest.TestCase):
    def test_trims_to_active_samples_and_averages_the_middle_half(self):
        # DRAM idle for two samples, active for eight (ramp, steady 80, tail), idle after.
        dram = ["0", "0.00", "20", "60", "80", "80", "80", "80", "40", "10", "0", "0"]
        rd = ["0", "0", "20", "20", "16", "16", "16", "16", "8", "2", "0", "0"]
        wr = ["0", "0", "0", "40", "64", "64", "64", "64", "32", "8", "0", "0"]
        l2 = ["1", "2", "30", "70", "74", "74", "74", "74", "40", "10", "0", "0"]
        rows = [HDR, UNITS, row("ours<128>", "1,099.5", dram, rd, wr, l2),
                row("idle", "3.0", ["0"] * 4, ["0"] * 4, ["0"] * 4, ["0"] * 4)]
        got = list(ps.kernels(rows))
        self.assertEqual(len(got), 1)  # the kernel with no DRAM activity is skipped
        name, us, seg, means = got[0]
        self.assertEqual(name, "ours<128>")
        self.assertAlmostEqual(us, 1099.5)
        self.assertEqual(seg["dram"], [20, 60, 80, 80, 80, 80, 40, 10])
        self.assertEqual(seg["wr"][:2], [0, 40])  # the other series are trimmed to the same samples
        self.assertAlmostEqual(means["dram"][0], 80.0)  # samples 2..5 of the 8
        self.assertAlmostEqual(means["dram"][1], 450 / 8)
        self.assertAlmostEqual(means["rd"][0], 16.0)
        self.assertAlmostEqual(means["l2"][0], 74.0)

    def test_export_without_pm_sampling_is_refused(self):
        rows = [["ID", "Kernel Name", "gpu__time_duration.sum"], ["", "", "us"], ["0", "k", "1.0"]]
        with self.assertRaises(SystemExit) as e:
            list(ps.kernels(rows))
        self.assertIn("PmSampling", str(e.exception))

    def test_values_parses_thousands_separators(self):
        self.assertEqual(ps.values("(1,234.5; 0; 7)"), [1234.5, 0.0, 7.0])


if __name__ == "__main__":
    unittest.main()
