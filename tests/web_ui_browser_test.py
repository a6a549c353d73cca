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


def auth_case(mxval, work, check):
    """serve with TLS and --auth-config: the web page and /metrics answer 401
    without a token, 200 with a viewer token; a browser signs in on /login
    and its cookie works; a wrong gRPC token is logged and counted."""
    import base64
    import hashlib
    import http.client
    import ssl
    certs = os.path.join(work, "certs")
    gen = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "gen_test_certs.sh")
    subprocess.run(["bash", gen, certs, "w1"], check=True, capture_output=True)
    cfg = os.path.join(work, "auth.yaml")
    with open(cfg, "w") as f:
        f.write("tokens:\n  - name: dash\n    sha256: %s\n    role: ROLE_VIEWER\n"
                % hashlib.sha256(b"view-secret").hexdigest())
    err_path = os.path.join(work, "auth_serve.err")
    serve = subprocess.Popen([mxval, "serve", "--listen", "127.0.0.1:0", "--db", os.path.join(work, "auth.db"),
                              "--tls-cert", os.path.join(certs, "server.crt"), "--tls-key",
                              os.path.join(certs, "server.key"), "--tls-client-ca", os.path.join(certs, "ca.crt"),
                              "--auth-config", cfg, "--http-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"],
                             stdout=subprocess.PIPE, stderr=open(err_path, "w"), text=True)
    try:
        metrics = int(read_line(serve, "metrics on 127.0.0.1:"))
        web = int(read_line(serve, "web UI on https://127.0.0.1:").rstrip("/"))
        addr = read_line(serve, "listening on ")
        tls = ssl.create_default_context(cafile=os.path.join(certs, "ca.crt"))

        def req(port, method, path, headers=None, body=None):
            c = http.client.HTTPSConnection("127.0.0.1", port, context=tls, timeout=30)
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            out = (r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read().decode("utf-8", "replace"))
            c.close()
            return out

        env = dict(os.environ, MXVAL_TLS_CA=os.path.join(certs, "ca.crt"), MXVAL_TOKEN="not-a-token")
        jobs = subprocess.run([mxval, "jobs", "--coordinator", addr], env=env, capture_output=True, text=True)
        check(jobs.returncode != 0, "a wrong gRPC token is refused (exit %d)" % jobs.returncode)
        status, headers, body = req(web, "GET", "/api/jobs")
        check(status == 401 and headers.get("www-authenticate", "").startswith("Bearer"),
              "GET /api/jobs without a token: 401 with WWW-Authenticate: Bearer (%d)" % status)
        check('"jobs"' not in body, "the 401 carries no data")
        status, _, body = req(web, "GET", "/api/jobs", {"Authorization": "Bearer view-secret"})
        check(status == 200, "GET /api/jobs with a viewer token: 200 (%d)" % status)
        status, _, _ = req(web, "GET", "/", {"Authorization": "Bearer wrong"})
        check(status == 401, "a wrong token on the web page: 401 (%d)" % status)
        origin = "https://127.0.0.1:%d" % web
        form = {"Content-Type": "application/x-www-form-urlencoded", "Origin": origin}
        status, headers, _ = req(web, "POST", "/login", dict(form, Origin="https://evil.example"), "token=view-secret")
        check(status == 403 and "set-cookie" not in headers, "a cross-origin login is refused (%d)" % status)
        status, headers, _ = req(web, "POST", "/login", form, "token=view-secret")
        cookie = headers.get("set-cookie", "")
        check(status == 303 and cookie.startswith("mxval_session=") and "HttpOnly" in cookie and
              "SameSite=Strict" in cookie and "Secure" in cookie and "view-secret" not in cookie,
              "POST /login sets an HttpOnly, Secure, SameSite=Strict session cookie (%d %s)" % (status, cookie[:40]))
        status, _, body = req(web, "GET", "/api/jobs", {"Cookie": cookie.split(";")[0]})
        check(status == 200, "the session cookie reads /api/jobs (%d)" % status)
        status, _, _ = req(metrics, "GET", "/metrics", {"Cookie": cookie.split(";")[0]})
        check(status == 401, "the web page's cookie is no credential on /metrics (%d)" % status)
        status, _, _ = req(metrics, "GET", "/metrics")
        check(status == 401, "GET /metrics without a token: 401 (%d)" % status)
        basic = base64.b64encode(b"prometheus:view-secret").decode()
        status, _, _ = req(metrics, "GET", "/metrics", {"Authorization": "Basic " + basic})
        check(status == 200, "GET /metrics with Basic (token as password): 200 (%d)" % status)
        status, _, body = req(metrics, "GET", "/metrics", {"Authorization": "Bearer view-secret"})
        check(status == 200, "GET /metrics with a bearer token: 200 (%d)" % status)
        for reason, n in (("unknown_token", 1), ("http_unauthenticated", 3), ("http_unknown_token", 1),
                          ("http_cross_origin", 1)):
            line = 'mxval_coordinator_auth_denied_total{reason="%s"} %d' % (reason, n)
            check(line in body, "counted: " + line)
    finally:
        serve.terminate()
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
    log = open(err_path).read()
    check("denied /mxval.v1.ValidationService/ListJobs for unauthenticated peer (unknown_token)" in log,
          "the wrong gRPC token is logged")
    check("denied GET /api/jobs for 127.0.0.1:" in log and "(http_unauthenticated)" in log,
          "HTTP denials are logged with path and peer")
    check("secret" not in log and "not-a-token" not in log, "no token in the log")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mxval", required=True)
    ap.add_argument("--out-dir", default=".")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="mxval_web_")
    failures = []

    def check(cond, what):
        print(("ok    " if cond else "FAIL  ") + what)
        if not cond:
            failures.append(what)

    auth_case(a.mxval, work, check)  # plain HTTPS requests; no browser needed
    if shutil.which("chromium") is None:
        print("SKIP: chromium is not installed (scripts/setup.sh installs it); %d failures so far" % len(failures))
        shutil.rmtree(work, ignore_errors=True)
        return 1 if failures else 77

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
