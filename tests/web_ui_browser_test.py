#!/usr/bin/env python3
"""Renders the coordinator's web page in headless Chromium against a running
embedded instance (loopback) and checks what a person would see: the jobs
list, a job's results table, plots and triage section, and that a job name
carrying markup is shown as text and never becomes an element. Writes
screenshots next to the build for humans (web_ui_jobs.png, web_ui_job.png).

Usage: web_ui_browser_test.py --mxval build/bin/mxval --out-dir build
Exit 77 (CTest skip) when Debian's `chromium` is not installed."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

EVIL = "retune <img src=x onerror=alert(1)> & \"quotes\""


def read_line(proc, prefix, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if line.startswith(prefix):
            return line[len(prefix):].strip()
        if not line:
            time.sleep(0.05)
    raise SystemExit("timed out waiting for '%s'" % prefix)


def chromium(args, url, work):
    base = ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--user-data-dir=" + os.path.join(work, "profile"), "--virtual-time-budget=8000"]
    return subprocess.run(base + args + [url], capture_output=True, text=True, timeout=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mxval", required=True)
    ap.add_argument("--out-dir", default=".")
    a = ap.parse_args()
    if shutil.which("chromium") is None:
        print("SKIP: chromium is not installed (scripts/setup.sh installs it)")
        return 77
    work = tempfile.mkdtemp(prefix="mxval_web_")
    failures = []

    def check(cond, what):
        print(("ok    " if cond else "FAIL  ") + what)
        if not cond:
            failures.append(what)

    serve = subprocess.Popen([a.mxval, "serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--db",
                              os.path.join(work, "db"), "--workers", "2"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        web = read_line(serve, "web UI on ")
        addr = read_line(serve, "listening on ")
        spec = os.path.join(work, "spec.json")
        json.dump({"name": EVIL, "presets": ["glm5-tp4"], "no_layout_probes": True, "m_values": [1, 16, 64], "repetitions": 2,
                   "pull_request": {"changed_files": ["kernels/configs/cpu.json"]}}, open(spec, "w"))
        sub = subprocess.run([a.mxval, "submit", "--coordinator", addr, "--spec", spec, "--wait", "--timeout", "300"],
                             capture_output=True, text=True)
        check(sub.returncode == 0, "job ran (exit %d)" % sub.returncode)

        dom = chromium(["--dump-dom"], web, work).stdout
        check("job-1" in dom and 'href="/job?id=job-1"' in dom, "jobs page lists job-1 with a link")
        check("done" in dom and "6/6" in dom, "jobs page shows state and progress")
        dom = chromium(["--dump-dom"], web + "job?id=job-1", work).stdout
        check("Job job-1: retune &lt;img src=x onerror=alert(1)&gt; &amp; \"quotes\"" in dom,
              "the job name is shown as text, markup escaped")
        check("<img" not in dom, "no element was created from the job name")
        rows = dom.count("<tr>") - 1  # minus the header row
        check(rows == 6, "results table has 6 rows (%d)" % rows)
        check("0 new failures, 0 unrelated" in dom, "triage headline rendered")
        check(dom.count("<svg") == 4, "time and error plots per shape (%d)" % dom.count("<svg"))
        check("polyline" in dom, "plots have lines")
        check("kup B=16 N=512 K=192" in dom and "vup B=16 N=256 K=512" in dom, "both shapes shown")
        check("error:" not in dom, "no script error on the page")
        dom = chromium(["--dump-dom"], web + "job?id=job-404", work).stdout
        check("error: /api/job?id=job-404: HTTP 404" in dom, "an unknown job is a clear error")
        for name, url in (("web_ui_jobs.png", web), ("web_ui_job.png", web + "job?id=job-1")):
            out = os.path.join(os.path.abspath(a.out_dir), name)
            chromium(["--screenshot=" + out, "--window-size=1300,1800", "--hide-scrollbars"], url, work)
            check(os.path.exists(out) and os.path.getsize(out) > 10000, "screenshot %s" % out)
    finally:
        serve.terminate()
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
        shutil.rmtree(work, ignore_errors=True)
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
