#!/usr/bin/env python3
"""DRAM and L2 time series of each profiled kernel from Nsight Compute's PM sampling.

Profile with the PmSampling section and export the raw page with every
instance value, e.g. (bench/ncu_peer.py runs our kernel and the cuBLAS peer):

  ncu --clock-control none --nvtx --nvtx-include "prof/" --set full --section PmSampling \\
      -o pm python3 bench/ncu_peer.py --lib build-gpu/lib/libmxval_cuda_kernels.so --cases dsv3-tp8/kup:16384
  ncu -i pm.ncu-rep --page raw --csv --print-metric-instances values > pm_raw.csv
  python3 bench/pm_series.py pm_raw.csv

For each kernel it prints, one sample per column (the sampling interval is in
the report, about 1.5 us on the H200 for a 100 us kernel), the DRAM total /
read / write throughput and the L2 throughput in percent of peak, trimmed to
the samples where DRAM was active, then the mean over the middle half of those
samples ("steady") next to the mean over all of them.
"""
import csv
import statistics
import sys

SERIES = [("dram", "FBSP.TriageCompute.dramc__throughput.avg.pct_of_peak_sustained_elapsed"),
          ("rd", "FBSP.TriageCompute.dramc__read_throughput.avg.pct_of_peak_sustained_elapsed"),
          ("wr", "FBSP.TriageCompute.dramc__write_throughput.avg.pct_of_peak_sustained_elapsed"),
          ("l2", "LTS.TriageCompute.lts__throughput.avg.pct_of_peak_sustained_elapsed")]


def values(cell):
    """An instanced cell "(v0; v1; ...)" (thousands separators allowed) -> floats."""
    inner = cell[cell.index("(") + 1:cell.rindex(")")]
    return [float(x.strip().replace(",", "")) for x in inner.split(";")]


def kernels(rows):
    """rows: the raw page's CSV rows (names, units, then one row per kernel).
    Yields (kernel name, duration us, {series: samples while DRAM was active},
    {series: (steady mean, mean)}), where "steady" is the middle half of the
    active samples. SystemExit if the export has no PM sampling DRAM series."""
    hdr = rows[0]
    col = {name: hdr.index(metric) for name, metric in SERIES if metric in hdr}
    if "dram" not in col:
        raise SystemExit("no PM sampling DRAM series in the export (profile with --section PmSampling and export "
                         "--print-metric-instances values)")
    kname, dur = hdr.index("Kernel Name"), hdr.index("gpu__time_duration.sum")
    for r in rows[2:]:
        s = {name: values(r[c]) for name, c in col.items()}
        active = [i for i, v in enumerate(s["dram"]) if v > 0.5]
        if not active:
            continue
        a, b = active[0], active[-1] + 1
        seg = {name: v[a:b] for name, v in s.items()}
        means = {}
        for name, v in seg.items():
            mid = v[len(v) // 4:3 * len(v) // 4] or v
            means[name] = (statistics.mean(mid), statistics.mean(v))
        yield r[kname], float(r[dur].replace(",", "")), seg, means


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: pm_series.py RAW.csv")
    for name, us, seg, means in kernels(list(csv.reader(open(sys.argv[1])))):
        print("%s  %.1f us, %d samples" % (name[:90], us, len(seg["dram"])))
        for s, v in seg.items():
            print("  %-4s steady %5.1f  all %5.1f | %s" % (s, means[s][0], means[s][1], " ".join("%.0f" % x for x in v)))


if __name__ == "__main__":
    main()
