#!/usr/bin/env python3
"""Validates deploy/ as far as this machine can: Kubernetes manifests parse
and carry the fields an operator relies on; images are referenced
consistently with the Dockerfiles; systemd units run hardened as a
dedicated user; Prometheus config and rules pass promtool (config, rules and
the rule unit tests). Usage: deploy_test.py --source-dir ."""
import argparse
import configparser
import glob
import os
import re
import shutil
import subprocess
import sys

import yaml

failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-dir", required=True)
    d = os.path.join(os.path.abspath(ap.parse_args().source_dir), "deploy")

    # Images the Dockerfiles build (from their "docker build -t" line and label).
    built = {}
    for df in glob.glob(os.path.join(d, "docker", "Dockerfile.*")):
        text = open(df).read()
        tags = re.findall(r"docker build -f \S+ -t (\S+) \.", text)
        check(len(tags) == 1, "%s names the image it builds" % os.path.basename(df))
        for t in tags:
            built[t] = df
        check(re.search(r"^USER 10001", text, re.M) is not None, "%s runs as a non-root user" % os.path.basename(df))
        check('ENTRYPOINT ["/usr/local/bin/mxval"]' in text, "%s enters mxval" % os.path.basename(df))
        for base in re.findall(r"^ARG \w+_IMAGE=(\S+)", text, re.M):
            check(":" in base and not base.endswith(":latest"), "%s pins base image %s" % (os.path.basename(df), base))

    # Kubernetes manifests.
    docs = []
    for fn in sorted(glob.glob(os.path.join(d, "k8s", "*.yaml"))):
        for doc in yaml.safe_load_all(open(fn)):
            if doc:
                docs.append((os.path.basename(fn), doc))
    check(len(docs) >= 8, "%d Kubernetes objects parse" % len(docs))
    kinds = {}
    for fn, doc in docs:
        for field in ("apiVersion", "kind", "metadata"):
            check(field in doc, "%s %s has %s" % (fn, doc.get("kind"), field))
        kinds.setdefault(doc["kind"], []).append(doc)
        if doc["kind"] != "Namespace":
            check(doc["metadata"].get("namespace") == "mxval", "%s %s is in namespace mxval" % (fn, doc["metadata"]["name"]))
    for kind in ("StatefulSet", "DaemonSet", "Service", "ServiceMonitor", "PodMonitor", "NetworkPolicy"):
        check(kind in kinds, "a %s is defined" % kind)
    for doc in kinds.get("StatefulSet", []) + kinds.get("DaemonSet", []) + kinds.get("Deployment", []):
        name = doc["metadata"]["name"]
        spec = doc["spec"]
        tmpl = spec["template"]
        check(spec["selector"]["matchLabels"].items() <= tmpl["metadata"]["labels"].items(),
              "%s selector matches its pod labels" % name)
        for c in tmpl["spec"]["containers"]:
            check(c["image"] in built, "%s image %s is built by a Dockerfile" % (name, c["image"]))
            res = c.get("resources", {})
            check("requests" in res and "limits" in res, "%s has resource requests and limits" % name)
            sc = c.get("securityContext", {})
            check(sc.get("allowPrivilegeEscalation") is False, "%s disallows privilege escalation" % name)
            check(c.get("livenessProbe") is not None, "%s has a liveness probe" % name)
            args = " ".join(c.get("args", []))
            if doc["kind"] == "Deployment":  # coordinators on a shared PostgreSQL database
                check(c.get("readinessProbe", {}).get("grpc", {}).get("port") == 50051,
                      "%s readiness is the gRPC health check" % name)
                check(re.search(r"--db=postgres(ql)?://", args) is not None, "%s uses the PostgreSQL store" % name)
                check(not re.search(r"--db=postgres(ql)?://[^ @/]*:[^ @/]*@", args),
                      "%s keeps the password off the command line" % name)
                env = {e["name"]: e for e in c.get("env", [])}
                check("secretKeyRef" in env.get("PGPASSWORD", {}).get("valueFrom", {}),
                      "%s takes the database password from a Secret" % name)
                check(spec.get("replicas", 1) >= 2, "%s runs several coordinators" % name)
                check(tmpl["metadata"]["labels"].get("app.kubernetes.io/component") == "coordinator",
                      "%s pods are behind the coordinator Service" % name)
            elif doc["kind"] == "StatefulSet":
                check(c.get("readinessProbe", {}).get("grpc", {}).get("port") == 50051,
                      "%s readiness is the gRPC health check" % name)
                check("--db=/var/lib/mxval/" in args, "%s keeps SQLite on its volume" % name)
                mounts = [m["mountPath"] for m in c.get("volumeMounts", [])]
                check("/var/lib/mxval" in mounts, "%s mounts the state volume" % name)
            else:
                vendor = tmpl["metadata"]["labels"].get("mxval.io/gpu-vendor")
                gpu = {"amd": "amd.com/gpu", "nvidia": "nvidia.com/gpu"}.get(vendor)
                check(gpu is not None and gpu in res.get("limits", {}), "%s requests %s" % (name, gpu))
                terms = tmpl["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                keys = [e["key"] for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]]
                check(any(k.startswith(gpu.split("/")[0]) for k in keys), "%s runs only on %s nodes" % (name, vendor))
                check("--coordinator=mxval-coordinator.mxval.svc:50051" in args, "%s points at the coordinator Service" % name)
                check("--devices=" in args, "%s selects its devices" % name)
    services = {s["metadata"]["name"]: s for s in kinds.get("Service", [])}
    coord = services.get("mxval-coordinator")
    check(coord is not None and {p["name"] for p in coord["spec"]["ports"]} >= {"grpc", "metrics"},
          "coordinator Service exposes grpc and metrics")
    for mon in kinds.get("ServiceMonitor", []):
        check(mon["spec"]["endpoints"][0]["port"] == "metrics", "ServiceMonitor scrapes the metrics port")

    # systemd units.
    for unit in sorted(glob.glob(os.path.join(d, "systemd", "*.service"))):
        cp = configparser.ConfigParser(strict=False, interpolation=None)
        cp.optionxform = str
        cp.read(unit)
        svc = cp["Service"]
        name = os.path.basename(unit)
        check(svc.get("User") == "mxval", "%s runs as the mxval user" % name)
        for key, want in (("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"), ("ProtectHome", "yes"),
                          ("PrivateTmp", "yes")):
            check(svc.get(key) == want, "%s sets %s=%s" % (name, key, want))
        check("ReadWritePaths" in svc, "%s limits writable paths" % name)
        check(svc.get("ExecStart", "").startswith("/usr/local/bin/mxval "), "%s starts mxval" % name)
        check(svc.get("KillSignal") == "SIGTERM", "%s stops with SIGTERM (drain)" % name)
        check("WantedBy" in cp["Install"], "%s is installable" % name)
    if shutil.which("systemd-analyze"):
        # Syntax only: the binary and user do not exist on a build machine.
        out = subprocess.run(["systemd-analyze", "verify", "--man=no"] + glob.glob(os.path.join(d, "systemd", "*.service")),
                             capture_output=True, text=True)
        bad = [l for l in (out.stderr + out.stdout).splitlines()
               if ("Unknown key" in l or "Invalid" in l or "Failed to parse" in l)]
        check(not bad, "systemd-analyze finds no unknown or invalid settings %s" % bad)

    # Prometheus.
    if shutil.which("promtool"):
        for argv in (["promtool", "check", "config", os.path.join(d, "prometheus", "prometheus.yml")],
                     ["promtool", "check", "rules"] + glob.glob(os.path.join(d, "prometheus", "rules", "*.yml")),
                     ["promtool", "test", "rules", os.path.join(d, "prometheus", "tests", "alerts_test.yml")]):
            r = subprocess.run(argv, capture_output=True, text=True)
            check(r.returncode == 0, " ".join(argv[:3]) + (" (%s)" % (r.stdout + r.stderr)[-400:] if r.returncode else ""))
        alerts = yaml.safe_load(open(os.path.join(d, "prometheus", "rules", "mxval-alerts.yml")))
        tests = open(os.path.join(d, "prometheus", "tests", "alerts_test.yml")).read()
        for rule in alerts["groups"][0]["rules"]:
            check("alertname: %s" % rule["alert"] in tests, "alert %s has a unit test" % rule["alert"])
    else:
        check(False, "promtool is installed (scripts/setup.sh installs prometheus)")
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
