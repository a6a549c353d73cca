#!/usr/bin/env python3
"""SM clock, power and clock-event reasons sampled while a benchmark times.

Why: on the lent H200 the board hits its software power cap during large-M
runs (650-697 W, event reason 0x4) and the SM clock swings between about 1020
and 1965 MHz from one quarter-second to the next (BENCHMARKS.md, twentieth
session). A time measured at 1.0 GHz and one measured at 1.9 GHz are not the
same kernel's speed, so every timed window now carries the clock it ran at.

How: a background thread reads NVML (libnvidia-ml.so.1 through ctypes, no
pynvml needed) every `interval` seconds while a window is open, plus one read
when the window opens and one when it closes, so even a window shorter than
the interval has two samples. NVML calls release the GIL (ctypes), and the
timed loops are CUDA-graph replays measured with CUDA events, so the sampler
does not sit on the timed path.

A window's summary (`ClockSampler.window()` → `.summary`):
  sm_mhz    {"min", "median", "max"} over the samples
  power_w   the highest power reading (NVML averages it over about a second)
  reasons   the OR of the clock-event reason bits seen (GPU idle excluded)
  flags     those bits by name, e.g. ["sw_power_cap"]
  samples   how many reads

`ClockSampler.settle()` waits (at most max_wait seconds) until the board has
cooled off from the previous window: no power or thermal reason set and the
power reading under half the board's limit. gpu_bench.py calls it before
every timed window, so that each implementation starts from the same power
state instead of inheriting the cap that the one timed before it ran into
(the first run with clocks showed cuBLAS, timed after us on each row, at
1500 MHz where we had run at 1980).

The sampler is optional: where NVML cannot be loaded (no driver, a CPU
machine) `ClockSampler.open()` returns None and callers skip it.
"""
import ctypes as C
import statistics
import threading
import time

# nvmlClocksEventReasons (nvml.h); 0x1, GPU idle, is dropped from summaries:
# between timed replays the GPU is briefly idle, and that says nothing.
REASONS = {
    0x2: "app_clock_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clock",
}
IDLE = 0x1
# The reasons that mean the board is holding its clocks down for power or heat.
THROTTLE = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def reason_names(bits):
    """Names of the set reason bits, lowest bit first; unknown bits as hex."""
    out = [name for bit, name in sorted(REASONS.items()) if bits & bit]
    rest = bits & ~(sum(REASONS) | IDLE)
    if rest:
        out.append("0x%x" % rest)
    return out


def summarize(samples):
    """samples: [(sm_mhz, reasons, power_mw)] → the window summary (None if empty)."""
    if not samples:
        return None
    mhz = [s[0] for s in samples]
    bits = 0
    for s in samples:
        bits |= s[1]
    bits &= ~IDLE
    return {"sm_mhz": {"min": min(mhz), "median": statistics.median(mhz), "max": max(mhz)},
            "power_w": max(s[2] for s in samples) / 1000.0,
            "reasons": bits, "flags": reason_names(bits), "samples": len(samples)}


def moved(summary):
    """Whether the window's SM clock moved by 30 MHz or more."""
    c = summary["sm_mhz"]
    return c["max"] - c["min"] >= 30


def short(summary):
    """'1980' when nothing slowed the clock, '1020-1965 pwr' when it moved and why."""
    if not summary:
        return "-"
    c = summary["sm_mhz"]
    text = "%d-%d" % (c["min"], c["max"]) if moved(summary) else "%d" % c["median"]
    tags = {"sw_power_cap": "pwr", "hw_slowdown": "hwslow", "sw_thermal": "therm", "hw_thermal": "hwtherm",
            "hw_power_brake": "brake"}
    flags = [tags[f] for f in summary["flags"] if f in tags]
    return text + (" " + "+".join(flags) if flags else "")


class _Nvml:
    """The three NVML reads for one device."""

    def __init__(self, pci_bus_id=None, index=0):
        self.lib = C.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise OSError("nvmlInit_v2 failed")
        self.dev = C.c_void_p()
        ok = False
        if pci_bus_id:
            ok = self.lib.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), C.byref(self.dev)) == 0
        if not ok and self.lib.nvmlDeviceGetHandleByIndex_v2(C.c_uint(index), C.byref(self.dev)) != 0:
            raise OSError("no NVML handle for the device")
        # Renamed in newer drivers (ClocksThrottleReasons → ClocksEventReasons); the bits are the same.
        self.reasons_fn = getattr(self.lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            self.lib.nvmlDeviceGetCurrentClocksThrottleReasons

    def power_limit_mw(self):
        mw = C.c_uint()
        if self.lib.nvmlDeviceGetEnforcedPowerLimit(self.dev, C.byref(mw)) != 0:
            return None
        return mw.value

    def __call__(self):
        mhz, bits, mw = C.c_uint(), C.c_ulonglong(), C.c_uint()
        if self.lib.nvmlDeviceGetClockInfo(self.dev, 1, C.byref(mhz)) != 0:  # NVML_CLOCK_SM
            raise OSError("nvmlDeviceGetClockInfo failed")
        self.reasons_fn(self.dev, C.byref(bits))
        self.lib.nvmlDeviceGetPowerUsage(self.dev, C.byref(mw))
        return (mhz.value, bits.value, mw.value)


class ClockSampler:
    def __init__(self, reader, interval=0.005, power_limit_mw=None, sleep=None):
        self.read, self.interval = reader, interval
        self.power_limit_mw = power_limit_mw
        self._sleep = sleep or time.sleep
        self._lock = threading.Lock()
        self._samples = None  # a list while a window is open
        self._wake = threading.Event()
        self._halt = threading.Event()  # set by close(): stops the thread, also mid-sleep
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @classmethod
    def open(cls, interval=0.005):
        """A sampler on the current CUDA device, or None where NVML is unavailable."""
        bus = None
        try:
            import torch
            p = torch.cuda.get_device_properties(torch.cuda.current_device())
            if hasattr(p, "pci_bus_id"):
                bus = "%08x:%02x:%02x.0" % (getattr(p, "pci_domain_id", 0), p.pci_bus_id, getattr(p, "pci_device_id", 0))
            reader = _Nvml(bus)
            reader()
        except Exception:  # noqa: BLE001 - no driver / no NVML: run without clocks
            return None
        return cls(reader, interval, reader.power_limit_mw())

    def settle(self, max_wait=3.0, poll=0.01, calm_reads=3):
        """Waits until `calm_reads` reads in a row show no THROTTLE reason and
        (where the limit is known) power under half the limit; gives up after
        max_wait seconds. Returns the seconds waited (max_wait if it gave up)."""
        waited, calm = 0.0, 0
        while waited < max_wait:
            try:
                _mhz, bits, mw = self.read()
            except Exception:  # noqa: BLE001
                return waited
            hot = (bits & THROTTLE) or (self.power_limit_mw and mw > self.power_limit_mw // 2)
            calm = 0 if hot else calm + 1
            if calm >= calm_reads:
                return waited
            self._sleep(poll)
            waited += poll
        return max_wait

    def _take(self):
        try:
            s = self.read()
        except Exception:  # noqa: BLE001 - one failed read is skipped, not fatal
            return
        with self._lock:
            if self._samples is not None:
                self._samples.append(s)

    def _run(self):
        while not self._halt.is_set():
            self._wake.wait()
            while not self._halt.is_set() and self._samples is not None:
                self._take()
                self._halt.wait(self.interval)

    def close(self):
        self._halt.set()
        self._wake.set()
        self._thread.join(timeout=1)

    class _Window:
        def __init__(self, sampler):
            self.s, self.summary = sampler, None

        def __enter__(self):
            with self.s._lock:
                self.s._samples = []
            self.s._take()
            self.s._wake.set()
            return self

        def __exit__(self, *exc):
            self.s._take()
            with self.s._lock:
                samples, self.s._samples = self.s._samples, None
            self.s._wake.clear()
            self.summary = summarize(samples)
            return False

    def window(self):
        return ClockSampler._Window(self)
