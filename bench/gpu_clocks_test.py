#!/usr/bin/env python3
"""Unit test of bench/gpu_clocks.py on the CPU: a scripted reader stands in for
NVML, so the window mechanics and the summaries are checked without a GPU."""
import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_clocks as gc  # noqa: E402


class ScriptedReader:
    """Returns the scripted samples in order, then repeats the last one."""

    def __init__(self, samples):
        self.samples, self.i, self.lock = samples, 0, threading.Lock()

    def __call__(self):
        with self.lock:
            s = self.samples[min(self.i, len(self.samples) - 1)]
            self.i += 1
            return s


def one_window(reader, **kw):
    """Opens a sampler on `reader`, runs one empty window, closes it; the window's summary."""
    s = gc.ClockSampler(reader, **kw)
    try:
        with s.window() as w:
            pass
    finally:
        s.close()
    return w.summary


class SummaryTest(unittest.TestCase):
    def test_empty(self):
        self.assertIsNone(gc.summarize([]))
        self.assertEqual(gc.short(None), "-")

    def test_stats_and_reasons(self):
        s = gc.summarize([(1980, 0x1, 300000), (1020, 0x4, 697000), (1500, 0x0, 650000)])
        self.assertEqual(s["sm_mhz"], {"min": 1020, "median": 1500, "max": 1980})
        self.assertAlmostEqual(s["power_w"], 697.0)
        self.assertEqual(s["reasons"], 0x4)  # idle dropped
        self.assertEqual(s["flags"], ["sw_power_cap"])
        self.assertEqual(s["samples"], 3)
        self.assertEqual(gc.short(s), "1020-1980 pwr")

    def test_steady_clock_prints_one_number(self):
        s = gc.summarize([(1980, 0, 400000), (1965, 0, 410000)])
        self.assertEqual(gc.short(s), "1972")

    def test_unknown_bits_kept(self):
        self.assertEqual(gc.reason_names(0x4 | 0x40 | 0x1000), ["sw_power_cap", "hw_thermal", "0x1000"])
        self.assertEqual(gc.reason_names(0x1), [])


class WindowTest(unittest.TestCase):
    def test_short_window_has_open_and_close_reads(self):
        reader = ScriptedReader([(1980, 0, 100000), (1020, 0x4, 690000)])
        summary = one_window(reader, interval=10.0)  # the thread never gets a timed read in
        self.assertGreaterEqual(summary["samples"], 2)
        self.assertEqual(summary["sm_mhz"]["min"], 1020)
        self.assertEqual(summary["flags"], ["sw_power_cap"])

    def test_windows_do_not_mix(self):
        reader = ScriptedReader([(1000, 0x4, 1)] * 4 + [(1900, 0, 2)])
        s = gc.ClockSampler(reader, interval=10.0)
        try:
            with s.window() as first:
                pass
            reader.samples, reader.i = [(1900, 0, 2)], 0
            with s.window() as second:
                pass
        finally:
            s.close()
        self.assertEqual(first.summary["sm_mhz"]["max"], 1000)
        self.assertEqual(second.summary["sm_mhz"]["min"], 1900)
        self.assertEqual(second.summary["flags"], [])

    def test_background_reads_while_open(self):
        reader = ScriptedReader([(1500, 0, 1)])
        s = gc.ClockSampler(reader, interval=0.001)
        done = threading.Event()
        try:
            with s.window() as w:
                # Wait (bounded) until the thread has added reads of its own.
                for _ in range(2000):
                    if reader.i >= 6:
                        break
                    done.wait(0.001)
        finally:
            s.close()
        self.assertGreaterEqual(w.summary["samples"], 4)

    def test_settle_waits_for_the_cap_to_clear(self):
        # Capped for 5 reads, then under the cap but still above half the limit, then calm.
        reader = ScriptedReader([(1500, 0x4, 690000)] * 5 + [(1980, 0, 400000)] * 2 + [(345, 0x1, 90000)])
        slept = []
        s = gc.ClockSampler(reader, interval=10.0, power_limit_mw=700000, sleep=slept.append)
        try:
            waited = s.settle(max_wait=1.0, poll=0.01, calm_reads=3)
        finally:
            s.close()
        self.assertEqual(len(slept), 9)  # 7 hot reads, then 3 calm ones (the last needs no sleep)
        self.assertAlmostEqual(waited, 0.09)

    def test_settle_gives_up(self):
        reader = ScriptedReader([(1020, 0x4, 697000)])
        s = gc.ClockSampler(reader, interval=10.0, sleep=lambda _s: None)
        try:
            self.assertEqual(s.settle(max_wait=0.05, poll=0.01), 0.05)
        finally:
            s.close()

    def test_failed_read_is_skipped(self):
        calls = []

        def flaky():
            calls.append(1)
            if len(calls) == 1:
                raise OSError("NVML hiccup")
            return (1800, 0, 1)
        summary = one_window(flaky, interval=10.0)
        self.assertEqual(summary["samples"], 1)
        self.assertEqual(summary["sm_mhz"]["median"], 1800)


if __name__ == "__main__":
    unittest.main()
