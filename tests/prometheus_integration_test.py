#!/usr/bin/env python3
"""A real Prometheus server scrapes a running mxval (coordinator + worker on
loopback) while a job runs; asserts through Prometheus's HTTP API that the
expected series exist with plausible values, that the recording and alert
rules evaluate, and that every Grafana dashboard expression is valid and uses
only series mxval exports or the recording rules define.

Usage: prometheus_integration_test.py --mxval build/bin/mxval --source-dir .
Exit 77 (CTest skip) when Debian's `prometheus` is not installed."""
import argparse
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.error
import urllib.request

import yaml


def free_port():
    # Prometheus cannot report a port it picked itself, so take one the
    # kernel hands out on loopback and release it just before use.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_line(proc, prefix, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            time.sleep(0.05)
            continue
        if line.startswith(prefix):
            return line[len(prefix):].strip()
    raise SystemExit("timed out waiting for '%s'" % prefix)


def query(port, expr):
    url = "http://127.0.0.1:%d/api/v1/query?%s" % (port, urllib.parse.urlencode({"query": expr}))
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:
        raise AssertionError("query %r failed: HTTP %d %s" % (expr, e.code, e.read()[:300]))
    if body.get("status") != "success":
        raise AssertionError("query %r failed: %s" % (expr, body))
    return body["data"]["result"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mxval", required=True)
    ap.add_argument("--source-dir", required=True)
    args = ap.parse_args()
    if shutil.which("prometheus") is None:
        print("SKIP: prometheus is not installed (scripts/setup.sh installs it)")
        return 77
    work = tempfile.mkdtemp(prefix="mxval_prom_")
    procs = []
    failures = []

    def check(cond, what):
        print(("ok    " if cond else "FAIL  ") + what)
        if not cond:
            failures.append(what)

    try:
        serve = subprocess.Popen([args.mxval, "serve", "--listen", "127.0.0.1:0", "--db", os.path.join(work, "db"),
                                  "--metrics-listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 text=True)
        procs.append(serve)
        coord_metrics = read_line(serve, "metrics on ")
        addr = read_line(serve, "listening on ")
        worker = subprocess.Popen([args.mxval, "worker", "--coordinator", addr, "--devices", "cpu", "--metrics-listen",
                                   "127.0.0.1:0", "--id", "prom-w1"], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
        procs.append(worker)
        worker_metrics = read_line(worker, "metrics on ")

        rules = os.path.abspath(os.path.join(args.source_dir, "deploy", "prometheus", "rules"))
        prom_port = free_port()
        config = os.path.join(work, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "rule_files:\n  - %s/mxval-recording.yml\n  - %s/mxval-alerts.yml\n"
                    "scrape_configs:\n"
                    "  - job_name: mxval-coordinator\n    static_configs:\n      - targets: ['%s']\n"
                    "  - job_name: mxval-worker\n    static_configs:\n      - targets: ['%s']\n"
                    % (rules, rules, coord_metrics, worker_metrics))
        prom = subprocess.Popen(["prometheus", "--config.file=" + config, "--storage.tsdb.path=" + os.path.join(work, "tsdb"),
                                 "--web.listen-address=127.0.0.1:%d" % prom_port],
                                stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "prometheus.log"), "w"))
        procs.append(prom)

        def up_both():
            try:
                return len(query(prom_port, "up == 1")) == 2
            except (OSError, AssertionError):
                return False
        deadline = time.time() + 60
        while time.time() < deadline and not up_both():
            time.sleep(0.5)
        check(up_both(), "Prometheus scrapes both targets")

        # Two jobs a few scrapes apart, so counters grow while Prometheus
        # watches (rate() and the recording rules need an increase):
        # 2 shapes x M {1, 16}, then 2 shapes x M {4}; each job also has a
        # K-strided x probe per shape at its smallest M: 6 + 4 tasks.
        for ms in ("1,16", "4"):
            sub = subprocess.run([args.mxval, "submit", "--coordinator", addr, "--preset", "glm5-tp4", "--m", ms,
                                  "--wait", "--format", "table", "--timeout", "300"], capture_output=True, text=True)
            check(sub.returncode == 0, "job M=%s finished and passed (exit %d)" % (ms, sub.returncode))
            time.sleep(3)

        # Wait until Prometheus has scraped both finished jobs.
        deadline = time.time() + 90
        done = []
        while time.time() < deadline:
            try:
                done = query(prom_port, 'mxval_coordinator_jobs{state="done"} == 2')
                runs = query(prom_port, "sum(mxval_worker_kernel_runs_total)")
                if done and runs and float(runs[0]["value"][1]) >= 20:
                    break
            except (OSError, AssertionError):
                pass
            time.sleep(1)
        check(bool(done), "Prometheus sees both jobs done")

        def value(expr):
            r = query(prom_port, expr)
            return float(r[0]["value"][1]) if r else None

        check(value('up{job="mxval-coordinator"}') == 1, "coordinator target up")
        check(value('up{job="mxval-worker"}') == 1, "worker target up")
        check(value('sum(mxval_coordinator_tasks_reported_total{outcome="pass"})') == 10, "10 tasks reported pass")
        check(value('sum(mxval_worker_kernel_runs_total{verdict="pass"})') == 20, "20 kernel runs passed (2 per task)")
        check(value('mxval_coordinator_workers{arch="cpu",state="active"}') == 1, "1 active cpu worker")
        check(value('mxval_coordinator_tasks{state="queued"}') == 0, "queue empty")
        check(value('sum(mxval_coordinator_triage_decisions_total{class="PASS"})') == 10, "10 triage PASS decisions")
        tf = value('max(mxval_worker_kernel_tflops{side="candidate"})')
        check(tf is not None and 0 < tf < 10, "candidate TFLOP/s plausible on a CPU (%s)" % tf)
        err = value("max(mxval_worker_kernel_rel_fro_error)")
        check(err is not None and 0 < err < 0.02, "relative error plausible (%s)" % err)
        p50 = value('max(histogram_quantile(0.5, sum by (le) (rate(mxval_worker_kernel_time_seconds_bucket[5m]))))')
        check(p50 is not None and 1e-6 <= p50 <= 10, "kernel time p50 from the histogram plausible (%s s)" % p50)
        # Recording rules evaluate on the live series (their group runs every 30 s).
        deadline = time.time() + 75
        ratio = None
        # NaN (0/0) until Prometheus has seen the counters increase: not ready yet.
        while time.time() < deadline and (ratio is None or math.isnan(ratio)):
            ratio = value('min(mxval:kernel_pass_ratio:rate30m)')
            time.sleep(1)
        check(ratio == 1, "recording rule mxval:kernel_pass_ratio:rate30m = 1 (%s)" % ratio)
        loaded = json.load(urllib.request.urlopen("http://127.0.0.1:%d/api/v1/rules" % prom_port, timeout=10))
        check(len(loaded["data"]["groups"]) == 2, "both rule groups loaded")
        firing = query(prom_port, 'ALERTS{alertstate="firing"}')
        check(not firing, "no alert firing on a healthy fleet (%s)" % [a["metric"].get("alertname") for a in firing])

        # Every series name the services export (one scrape of each).
        exported = set()
        for target in (coord_metrics, worker_metrics):
            text = urllib.request.urlopen("http://%s/metrics" % target, timeout=10).read().decode()
            exported |= {m.group(1) for m in re.finditer(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.M)}
        recorded = set()
        for fn in os.listdir(rules):
            recorded |= set(re.findall(r"record:\s*([a-zA-Z_:][a-zA-Z0-9_:]*)", open(os.path.join(rules, fn)).read()))
        # Families declared in the sources (a family with no samples yet, e.g.
        # triage_changed_total, is not in a scrape); histograms add suffixes.
        declared = set()
        for root, _dirs, files in os.walk(os.path.join(args.source_dir, "service")):
            for fn in files:
                if fn.endswith(".cc"):
                    src = open(os.path.join(root, fn)).read()
                    for m in re.finditer(r'Build(Counter|Gauge|Histogram)\(\)\s*\.Name\("([a-zA-Z0-9_:]+)"\)', src):
                        declared.add(m.group(2))
                        if m.group(1) == "Histogram":
                            declared |= {m.group(2) + sfx for sfx in ("_bucket", "_sum", "_count")}
        check("mxval_coordinator_triage_changed_total" in declared, "declared metric families found in the sources")
        known = exported | declared | recorded | {"up", "ALERTS"}
        # The dashboard and the alert rules may name only those.
        exprs = []
        dash = json.load(open(os.path.join(args.source_dir, "deploy", "grafana", "mxval-kernel-health.json")))
        for p in dash["panels"]:
            exprs += [("dashboard '%s'" % p["title"], t["expr"]) for t in p["targets"]]
        for fn in os.listdir(rules):
            for group in yaml.safe_load(open(os.path.join(rules, fn)))["groups"]:
                for rule in group["rules"]:
                    exprs.append(("%s %s" % (fn, rule.get("alert") or rule.get("record")), rule["expr"]))
        for where, expr in exprs:
            names = set(re.findall(r"\b(mxval[_:][a-zA-Z0-9_:]*)", expr))
            unknown = sorted(names - known)
            check(not unknown, "%s uses only exported series %s" % (where, unknown if unknown else ""))
            try:
                query(prom_port, expr)
                ok = True
            except AssertionError as e:
                ok = False
                print(e)
            check(ok, "%s is valid PromQL" % where)
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
