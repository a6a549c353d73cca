#!/usr/bin/env python3
"""End to end: Python kernel libraries (kernels/python/README.md) through the real
service. One `mxval serve` (coordinator + 2 embedded CPU workers running Python
libraries in --python) on loopback, a kernel directory holding the CPU example
library tests/python_kernels/torch_mxfp4, three of its bug variants
(make_variants.py) and trees made here; libraries registered with
`mxval register-library --dir`, jobs submitted with `mxval submit --spec job.yaml
--wait --format json`. Checks:

  registration  the printed SHA-256 is the tree digest of common/tree_digest.h
                (recomputed here); a directory without mxval_library.json and
                --file with --dir are usage errors (exit 2)
  a             correct vs correct: every task passes on both sides, with the
                interpreter's environment and the config objects in the results
  b             correct vs each variant: caught (exit 1), PR_TOUCHED where the
                variant's bug bites, never PRE_EXISTING or INFRA
  c             a retune of the library's own table (one bucket's NUM_KSPLIT and
                an AITER key changed): passes, the changed config object reaches
                the results verbatim; c2 proves it reaches the kernel itself
  d             a kernel raising ValueError: the candidate's VERDICT_ERROR with the
                exception and traceback, PR_TOUCHED
  e             a registered tree changed on disk afterwards: the candidate side is
                VERDICT_ERROR naming both digests, never a pass
  f             spec errors caught at submit (exit 2, naming the field)
  g             a library no longer in the workers' --kernel-dir: fetched from the
                coordinator by its tree digest into --library-cache, and it passes

Usage: python_library_e2e_test.py --mxval build/bin/mxval --source .
Runs with the interpreter that has PyTorch (Debian's python3-torch: /usr/bin/python3).
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest

MXVAL = None
SOURCE = None
PYTHON = "/usr/bin/python3"
LIB = "torch_mxfp4"
KERNEL = "a16wfp4_torch"
VARIANTS = ["nibble_order", "reduce_strides_swapped", "even_rule_floor"]
M_VALUES = [1, 4, 64]        # glm5-tp4: 2 shapes (B=16) x 3 = 6 tasks; buckets M_LEQ_4, M_LEQ_4, M_LEQ_64
SUBMIT_TIMEOUT_S = 300       # per job (mxval submit --timeout)
SUMMARY = []                 # (test id, status, seconds, note)


def tree_sha256(root):
    """common/tree_digest.h's digest, recomputed independently."""
    root, h, files = os.fsencode(root), hashlib.sha256(), []
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if x not in (b"__pycache__", b".git")]
        for n in names:
            p = os.path.join(d, n)
            if os.path.islink(p) or not os.path.isfile(p):
                raise AssertionError("tree %r holds a non-regular file %r" % (root, p))
            if not n.endswith(b".pyc"):
                files.append(os.path.relpath(p, root))
    for p in sorted(files):
        with open(os.path.join(root, p), "rb") as f:
            data = f.read()
        h.update(p + b"\0" + str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()


def get(d, *path, default=None):
    """A field of the report's proto3 JSON (default values are omitted there)."""
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return default
        d = d[k]
    return d


def verdict(run):
    return get(run, "accuracy", "verdict", default="VERDICT_UNSPECIFIED")


def triage_class(r):
    return get(r, "triage", "triageClass", default="TRIAGE_CLASS_UNSPECIFIED")


def task_name(r):
    s = r.get("shape", {})
    return "%s B=%s N=%s K=%s M=%s" % (s.get("op", "?"), s.get("b"), s.get("n"), s.get("k"), r.get("m"))


def yaml_scalar(v):
    # JSON scalars and flow collections are YAML; strings JSON-quoted are YAML double-quoted strings.
    return json.dumps(v)


def job_yaml(name, baseline, candidate=None, activations=None, m_values=M_VALUES, target_archs=("cpu",),
             baseline_table=None, candidate_table=None, repetitions=2):
    """A JobSpec as a CI user writes it (block YAML, snake_case field names, tables as literal blocks)."""
    lines = ["name: %s" % yaml_scalar(name),
             "baseline_kernel: {library: %s, build_id: %s, kernel: %s}" % tuple(map(yaml_scalar, baseline))]
    if candidate is not None:
        lines.append("candidate_kernel: {library: %s, build_id: %s, kernel: %s}" % tuple(map(yaml_scalar, candidate)))
    # no_layout_probes: the counts below are per preset shape and M (probes: service_integration_test).
    lines += ["presets: [glm5-tp4]", "no_layout_probes: true",
              "m_values: [%s]" % ", ".join(str(m) for m in m_values),
              "target_archs: [%s]" % ", ".join(target_archs),
              "repetitions: %d" % repetitions]
    if activations:
        lines.append("activations: %s" % activations)
    for field, table in (("baseline_table", baseline_table), ("candidate_table", candidate_table)):
        if table is not None:
            tname, text = table
            lines += ["%s:" % field, "  name: %s" % yaml_scalar(tname), "  json: |",
                      textwrap.indent(text.rstrip("\n"), "    ")]
    return "\n".join(lines) + "\n"


class Service:
    """`mxval serve` with 2 embedded workers running Python libraries; every process it starts is
    in its own session, so stop() can take down task children left behind."""

    def __init__(self, work, kdir):
        self.stderr_path = os.path.join(work, "serve.stderr")
        self.stdout_lines = []
        self.listening = threading.Event()
        self.addr = None
        env = dict(os.environ, TMPDIR=os.path.join(work, "tmp"))  # the workers' private tree copies
        os.makedirs(env["TMPDIR"], exist_ok=True)
        self.cache_dir = os.path.join(work, "pycache")
        self._stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(
            [MXVAL, "serve", "--listen", "127.0.0.1:0", "--db", os.path.join(work, "x.db"), "--workers", "2",
             "--kernel-dir", kdir, "--library-cache", os.path.join(work, "libcache"), "--python", PYTHON,
             "--python-cache-dir", self.cache_dir],
            stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL, text=True, env=env,
            start_new_session=True)
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()

    def _read_stdout(self):
        for line in self.proc.stdout:
            self.stdout_lines.append(line)
            if line.startswith("listening on ") and self.addr is None:
                self.addr = line[len("listening on "):].strip()
                self.listening.set()
        self.listening.set()  # EOF: serve exited

    def wait_listening(self, timeout=60):
        if not self.listening.wait(timeout) or self.addr is None:
            raise AssertionError("mxval serve printed no 'listening on' within %ds (exit %s); stderr:\n%s"
                                 % (timeout, self.proc.poll(), self.stderr()[-3000:]))
        return self.addr

    def stderr(self):
        with open(self.stderr_path, errors="replace") as f:
            return f.read()

    def wait_stderr(self, pattern, count=1, timeout=60):
        """The matches of `pattern` once stderr holds `count` of them (bounded)."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.findall(pattern, self.stderr(), re.M)
            if len(found) >= count or time.monotonic() > deadline or self.proc.poll() is not None:
                return found
            time.sleep(0.1)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        try:  # serve's session: itself if still alive, and any task child left behind
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._reader.join(timeout=5)
        self._stderr.close()


def run_cli(args, timeout=60):
    return subprocess.run([MXVAL] + args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


class PythonLibraryE2E(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="mxval_pylib_e2e_")
        cls.service = None
        try:
            cls._prepare()
            cls.service = Service(cls.work, cls.kdir)
            cls.addr = cls.service.wait_listening()
            cls.env_lines = cls.service.wait_stderr(
                r"^mxval serve: Python kernel libraries run in python (\S+) \((.*?)\), torch (\S+), triton (\S+), "
                r"(.*?), compile cache (.*)$", count=2)
            cls._register_all()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.service is not None:
            cls.service.stop()
            cls.service = None
        if os.environ.get("MXVAL_KEEP_TMP"):
            print("kept", cls.work, file=sys.stderr)
        else:
            shutil.rmtree(cls.work, ignore_errors=True)

    # ---------------------------------------------------------------- setup

    @classmethod
    def _prepare(cls):
        src = os.path.join(SOURCE, "tests", "python_kernels", LIB)
        cls.kdir = os.path.join(cls.work, "kernels")
        os.makedirs(cls.kdir)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "variants.json")
        shutil.copytree(src, os.path.join(cls.kdir, LIB), ignore=ignore)
        with open(os.path.join(src, "variants.json")) as f:
            known = {v["name"] for v in json.load(f)}
        missing = set(VARIANTS) - known
        if missing:
            raise AssertionError("variants.json lacks %s (has %s)" % (sorted(missing), sorted(known)))
        mk = subprocess.run([PYTHON, os.path.join(SOURCE, "tests", "python_kernels", "make_variants.py"), src, cls.kdir,
                             "--only", ",".join(VARIANTS)], capture_output=True, text=True, timeout=60)
        if mk.returncode != 0:
            raise AssertionError("make_variants.py failed (%d): %s" % (mk.returncode, mk.stderr))
        # Trees made here (a copy of the correct library each, renamed).
        cls._derive("raises", lambda text: cls._replace_once(
            text, "    B, M, K = x.shape\n", '    raise ValueError("boom")\n', before=True))
        cls._derive("crashes", lambda text: cls._replace_once(
            text, "    B, M, K = x.shape\n", '    import os, signal; os.kill(os.getpid(), signal.SIGSEGV)\n', before=True))
        cls._derive("tamper", lambda text: text)
        cls._derive("fetched", lambda text: text)
        cls._derive("strict", lambda text: text + textwrap.dedent('''

            _unchecked_run = run


            def run(x, w, w_scales, y, *, config, **kwargs):
                """The library's run, after checking the config object carries what the table said it would."""
                want = config.get("mxval_e2e_expect")
                if want is not None:
                    got = {k: config.get(k, "<missing>") for k in want}
                    if got != want:
                        raise ValueError("config object %r: expected %r, got %r" % (config, want, got))
                return _unchecked_run(x, w, w_scales, y, config=config, **kwargs)
            '''))
        cls.libs = [LIB] + ["%s_%s" % (LIB, v) for v in VARIANTS] + ["%s_%s" % (LIB, s) for s in ("raises", "crashes", "tamper", "strict", "fetched")]
        for name in cls.libs:
            if not os.path.isfile(os.path.join(cls.kdir, name, "mxval_library.json")):
                raise AssertionError("kernel directory lacks %s/mxval_library.json" % name)

    @staticmethod
    def _replace_once(text, old, new, before=False):
        if text.count(old) != 1:
            raise AssertionError("%r occurs %d times in gemm.py, not once" % (old, text.count(old)))
        return text.replace(old, new + old if before else new)

    @classmethod
    def _derive(cls, suffix, edit_gemm):
        name = "%s_%s" % (LIB, suffix)
        dst = os.path.join(cls.kdir, name)
        shutil.copytree(os.path.join(cls.kdir, LIB), dst)
        gemm = os.path.join(dst, "mxval_torch_mxfp4", "gemm.py")
        with open(gemm) as f:
            text = f.read()
        with open(gemm, "w") as f:
            f.write(edit_gemm(text))
        mpath = os.path.join(dst, "mxval_library.json")
        with open(mpath) as f:
            m = json.load(f)
        m["name"], m["build_id"] = name, suffix
        with open(mpath, "w") as f:
            json.dump(m, f, indent=2)

    @classmethod
    def _register_all(cls):
        cls.registered = {}  # name -> (CompletedProcess, digest computed here before registering)
        for name in cls.libs:
            d = os.path.join(cls.kdir, name)
            # The tamper library is registered by digest only, so the workers' --kernel-dir is its only
            # source and a tree changed there is refused (test_e); the others are uploaded as well.
            no_upload = ["--no-upload"] if name.endswith("_tamper") else []
            cls.registered[name] = (run_cli(["register-library", "--coordinator", cls.addr, "--dir", d] + no_upload),
                                    tree_sha256(d))

    def build_id(self, lib):
        with open(os.path.join(self.kdir, lib, "mxval_library.json")) as f:
            return json.load(f)["build_id"]

    def ref(self, lib):
        r, _ = self.registered[lib]
        self.assertEqual(r.returncode, 0, "register-library %s failed: %s%s" % (lib, r.stdout, r.stderr))
        return (lib, self.build_id(lib), KERNEL)

    # ---------------------------------------------------------------- jobs

    def submit(self, tag, yaml_text, timeout=SUBMIT_TIMEOUT_S):
        """(exit code, report dict or None, stderr) of `mxval submit --spec job.yaml --wait --format json`."""
        path = os.path.join(self.work, "job-%s.yaml" % tag)
        with open(path, "w") as f:
            f.write(yaml_text)
        p = run_cli(["submit", "--coordinator", self.addr, "--spec", path, "--wait", "--format", "json",
                     "--timeout", str(timeout)], timeout=timeout + 60)
        with open(os.path.join(self.work, "job-%s.out" % tag), "w") as f:
            f.write("exit %d\n--- stderr\n%s--- stdout\n%s" % (p.returncode, p.stderr, p.stdout))
        job = None
        if p.stdout.strip():
            try:
                job = json.loads(p.stdout)
            except ValueError as e:
                self.fail("submit %s: stdout is not the JSON report (%s): %r" % (tag, e, p.stdout[:2000]))
        return p.returncode, job, p.stderr

    def done_job(self, tag, yaml_text, want_rc, tasks=6):
        rc, job, err = self.submit(tag, yaml_text)
        self.assertIsNotNone(job, "submit %s printed no report (exit %d): %s" % (tag, rc, err[-3000:]))
        self.assertEqual(job.get("state"), "JOB_STATE_DONE", "job %s: %s" % (tag, json.dumps(job)[:3000]))
        results = job.get("results", [])
        self.assertEqual(len(results), tasks, "job %s: %d results, want %d" % (tag, len(results), tasks))
        self.assertEqual(rc, want_rc, "job %s exited %d, want %d; stderr: %s\nresults:\n%s"
                         % (tag, rc, want_rc, err[-2000:], self.describe(results)))
        return results

    @staticmethod
    def describe(results):
        out = []
        for r in results:
            out.append("  %s: %s baseline %s candidate %s: %s | %s" % (
                task_name(r), triage_class(r), verdict(r.get("baseline")), verdict(r.get("candidate")),
                get(r, "triage", "reason", default=""), get(r, "candidate", "accuracy", "reason", default="")[:400]))
        return "\n".join(out)

    def note(self, text):
        self._note = text

    # ---------------------------------------------------------------- tests

    def test_0_service_and_registration(self):
        """serve reports its interpreter; register-library prints the tree digest; usage errors exit 2."""
        self.assertEqual(len(self.env_lines), 2, "want one 'Python kernel libraries run in python ... torch ...' line "
                         "per embedded worker on serve's stderr:\n" + self.service.stderr()[-3000:])
        version, interpreter, torch_v, _triton, backend, cache = self.env_lines[0]
        self.assertEqual(os.path.realpath(interpreter), os.path.realpath(PYTHON))
        self.assertNotEqual(torch_v, "-", "the interpreter's PyTorch is not seen")
        self.assertEqual(backend, "cpu")
        self.assertEqual(cache, self.service.cache_dir)
        for name in self.libs:
            r, want = self.registered[name]
            self.assertEqual(r.returncode, 0, "register-library --dir %s: exit %d: %s%s"
                             % (name, r.returncode, r.stdout, r.stderr))
            m = re.search(r"^registered (\S+) build (\S+) sha256 ([0-9a-f]{64})$", r.stdout, re.M)
            self.assertIsNotNone(m, "register-library printed %r" % r.stdout)
            self.assertEqual(m.group(1), name)
            self.assertEqual(m.group(2), self.build_id(name))
            self.assertEqual(m.group(3), want, "%s: registered digest is not the tree digest of common/tree_digest.h"
                             % name)
        ls = run_cli(["libraries", "--coordinator", self.addr, "--json"])
        self.assertEqual(ls.returncode, 0, ls.stderr)
        listed = json.dumps(json.loads(ls.stdout))
        for name in self.libs:
            self.assertIn(self.registered[name][1], listed, "`mxval libraries` lacks %s's digest" % name)

        # Negative: not a library; --file with --dir.
        empty = os.path.join(self.work, "not_a_library")
        os.makedirs(os.path.join(empty, "pkg"))
        with open(os.path.join(empty, "pkg", "mod.py"), "w") as f:
            f.write("def run(*a, **k):\n    pass\n")
        r = run_cli(["register-library", "--coordinator", self.addr, "--dir", empty])
        self.assertEqual(r.returncode, 2, "register-library of a directory without mxval_library.json: exit %d: %s%s"
                         % (r.returncode, r.stdout, r.stderr))
        self.assertIn("mxval_library.json", r.stderr)
        r = run_cli(["register-library", "--coordinator", self.addr, "--dir", os.path.join(self.kdir, LIB),
                     "--file", os.path.join(self.kdir, "lib%s.so" % LIB)])
        self.assertEqual(r.returncode, 2, "register-library --file with --dir: exit %d: %s%s"
                         % (r.returncode, r.stdout, r.stderr))
        self.assertIn("--dir", r.stderr)
        self.note("python %s, torch %s, %s; %d libraries registered at their tree digests; 2 usage errors exit 2"
                  % (version, torch_v, backend, len(self.libs)))

    def test_a_correct_vs_correct(self):
        lib = self.ref(LIB)
        results = self.done_job("a", job_yaml("e2e a: correct vs correct", lib, lib), want_rc=0)
        torch_v = self.env_lines[0][2] if self.env_lines else None
        for r in results:
            name = task_name(r)
            self.assertEqual(triage_class(r), "TRIAGE_CLASS_PASS", name + "\n" + self.describe(results))
            for side in ("baseline", "candidate"):
                run = r.get(side, {})
                self.assertEqual(verdict(run), "VERDICT_PASS", "%s %s: %s" % (name, side, run))
                self.assertEqual(get(run, "kernel", "library"), LIB)
                self.assertEqual(get(run, "kernel", "format"), "LIBRARY_FORMAT_PYTHON")
                cj = run.get("configJson")
                self.assertTrue(cj, "%s %s: no config_json" % (name, side))
                cfg = json.loads(cj)
                self.assertIn("waves_per_eu", cfg, "%s %s: config_json %s lost the table's AITER keys" % (name, side, cj))
            py = r.get("python", {})
            self.assertTrue(py.get("torchVersion"), "%s: no python.torch_version in %s" % (name, py))
            self.assertEqual(py.get("torchVersion"), torch_v)
            self.assertEqual(py.get("backend"), "cpu")
            self.assertEqual(os.path.realpath(py.get("interpreter", "")), os.path.realpath(PYTHON))
        self.note("6 tasks PASS on both sides, torch %s, config_json on both runs" % torch_v)

    def test_b_variants_are_caught(self):
        base = self.ref(LIB)
        jobs = {}
        with concurrent.futures.ThreadPoolExecutor(len(VARIANTS)) as pool:
            for v in VARIANTS:
                cand = self.ref("%s_%s" % (LIB, v))
                acts = "ACTIVATIONS_MXFP4_EVEN" if v.startswith("even_") else None
                text = job_yaml("e2e b: correct vs %s" % v, base, cand, activations=acts)
                jobs[v] = pool.submit(self.submit, "b-" + v, text)
        summary = []
        for v in VARIANTS:
            rc, job, err = jobs[v].result()
            with self.subTest(variant=v):
                self.assertIsNotNone(job, "%s: no report (exit %d): %s" % (v, rc, err[-2000:]))
                results = job.get("results", [])
                self.assertEqual(job.get("state"), "JOB_STATE_DONE")
                self.assertEqual(len(results), 6)
                self.assertEqual(rc, 1, "%s: exit %d, want 1 (caught)\n%s" % (v, rc, self.describe(results)))
                classes = [triage_class(r) for r in results]
                for r in results:
                    self.assertNotIn(triage_class(r), ("TRIAGE_CLASS_PRE_EXISTING", "TRIAGE_CLASS_INFRA"),
                                     "%s %s\n%s" % (v, task_name(r), self.describe(results)))
                    self.assertEqual(verdict(r.get("baseline")), "VERDICT_PASS", "%s %s baseline" % (v, task_name(r)))
                    touched = triage_class(r) == "TRIAGE_CLASS_PR_TOUCHED"
                    if touched:
                        self.assertNotEqual(verdict(r.get("candidate")), "VERDICT_PASS")
                    else:
                        self.assertEqual(triage_class(r), "TRIAGE_CLASS_PASS", "%s %s\n%s" % (v, task_name(r),
                                                                                             self.describe(results)))
                    self.assertTrue(get(r, "triage", "kernelDiffers"), "%s %s: kernel_differs unset" % (v, task_name(r)))
                self.assertIn("TRIAGE_CLASS_PR_TOUCHED", classes, "%s not caught\n%s" % (v, self.describe(results)))
                if v == "nibble_order":  # every shape and mode
                    self.assertEqual(set(classes), {"TRIAGE_CLASS_PR_TOUCHED"}, self.describe(results))
                if v == "reduce_strides_swapped":  # only NUM_KSPLIT > 1 with B, M > 1: M_LEQ_4 at M = 4
                    for r in results:
                        want = "TRIAGE_CLASS_PR_TOUCHED" if r.get("m") == "4" or r.get("m") == 4 else "TRIAGE_CLASS_PASS"
                        self.assertEqual(triage_class(r), want, "%s %s\n%s" % (v, task_name(r), self.describe(results)))
                summary.append("%s %d/6" % (v, classes.count("TRIAGE_CLASS_PR_TOUCHED")))
                # The report says where the output is wrong, and where the Python kernels ran.
                md = run_cli(["get", "--coordinator", self.addr, "--job", job["jobId"], "--format", "markdown"])
                # Markdown escapes brackets in caller-influenced text ("\\[b=").
                self.assertIn("first at [b=", md.stdout.replace("\\[", "[").replace("\\]", "]"), v)
                self.assertIn("Python kernels ran in Python 3.", md.stdout, v)
                self.assertIn("first runs (the library's imports in a new child, and JIT compilation)", md.stdout, v)
        self.note("PR_TOUCHED tasks: " + ", ".join(summary))

    def retune_tables(self, expect):
        with open(os.path.join(self.kdir, LIB, "configs", "a16wfp4_torch.json")) as f:
            own = f.read()
        table = json.loads(own)
        self.assertEqual(table["M_LEQ_64"]["NUM_KSPLIT"], 1)
        cfg = table["M_LEQ_64"]
        cfg["NUM_KSPLIT"] = 2
        cfg["waves_per_eu"] = 3
        if expect:
            cfg["mxval_e2e_expect"] = {"NUM_KSPLIT": 2, "waves_per_eu": 3, "cache_modifier": None,
                                       "matrix_instr_nonkdim": 16}
        return own, json.dumps(table, indent=2)

    def test_c_retune_keeps_table_keys(self):
        lib = self.ref(LIB)
        own, retuned = self.retune_tables(expect=False)
        text = job_yaml("e2e c: retune", lib, lib, baseline_table=("torch_mxfp4:configs/a16wfp4_torch.json", own),
                        candidate_table=("retune: M_LEQ_64 NUM_KSPLIT 2, waves_per_eu 3", retuned))
        results = self.done_job("c", text, want_rc=0)
        changed = 0
        for r in results:
            name = task_name(r)
            self.assertEqual(triage_class(r), "TRIAGE_CLASS_PASS", name + "\n" + self.describe(results))
            b, c = r.get("baseline", {}), r.get("candidate", {})
            self.assertEqual(verdict(b), "VERDICT_PASS")
            self.assertEqual(verdict(c), "VERDICT_PASS")
            bj, cj = json.loads(b.get("configJson", "{}")), json.loads(c.get("configJson", "{}"))
            if int(r.get("m")) == 64:
                changed += 1
                self.assertEqual(cj.get("waves_per_eu"), 3, "%s: candidate config_json %s" % (name, c.get("configJson")))
                self.assertEqual(cj.get("NUM_KSPLIT"), 2)
                self.assertEqual(get(c, "config", "ksplit"), 2)
                self.assertIn("cache_modifier", cj)  # a null value is a key too
                self.assertIsNone(cj["cache_modifier"])
                self.assertEqual(bj.get("waves_per_eu"), 2, "%s: baseline config_json %s" % (name, b.get("configJson")))
                self.assertEqual(bj.get("NUM_KSPLIT"), 1)
                self.assertTrue(get(r, "triage", "entryDiffers"), "%s: entry_differs unset for a changed config" % name)
            else:
                self.assertEqual(bj, cj, name)
                self.assertFalse(get(r, "triage", "entryDiffers", default=False), name)
        self.assertEqual(changed, 2)
        self.note("6 tasks PASS; M=64's candidate config_json carries NUM_KSPLIT 2 and waves_per_eu 3")

    def test_c2_config_object_reaches_the_kernel(self):
        """The strict copy's run() raises unless its config dict holds what the table wrote."""
        lib = self.ref(LIB + "_strict")
        own, retuned = self.retune_tables(expect=True)
        text = job_yaml("e2e c2: config reaches the kernel", lib, lib, m_values=[64],
                        baseline_table=("own", own), candidate_table=("retune+expect", retuned))
        results = self.done_job("c2", text, want_rc=0, tasks=2)
        for r in results:
            self.assertEqual(verdict(r.get("candidate")), "VERDICT_PASS", self.describe(results))
            self.assertIn("mxval_e2e_expect", json.loads(get(r, "candidate", "configJson", default="{}")))
        self.note("the kernel's config dict held waves_per_eu 3, NUM_KSPLIT 2, a null and the unknown key")

    def test_d_python_exception(self):
        base, cand = self.ref(LIB), self.ref(LIB + "_raises")
        results = self.done_job("d", job_yaml("e2e d: run raises", base, cand), want_rc=1)
        for r in results:
            name = task_name(r)
            self.assertEqual(verdict(r.get("baseline")), "VERDICT_PASS", name)
            self.assertEqual(verdict(r.get("candidate")), "VERDICT_ERROR", name + "\n" + self.describe(results))
            reason = get(r, "candidate", "accuracy", "reason", default="")
            self.assertIn("ValueError: boom", reason, name)
            self.assertRegex(reason, r'File ".*gemm\.py", line \d+, in run', name + ": no traceback line in " + reason)
            self.assertEqual(triage_class(r), "TRIAGE_CLASS_PR_TOUCHED", name + "\n" + self.describe(results))
        self.note("6 tasks candidate VERDICT_ERROR 'ValueError: boom' with traceback, PR_TOUCHED")

    def test_d2_crash_is_isolated(self):
        # A kernel that kills its interpreter (a segfault in a Triton launch,
        # say) ends only its task's child: every attempt is an infrastructure
        # failure, the workers go on, and the next job runs in a new child.
        base, cand = self.ref(LIB), self.ref(LIB + "_crashes")
        text = job_yaml("e2e d2: run segfaults", base, cand, m_values=(1,))
        rc, job, err = self.submit("d2", text)
        self.assertIsNotNone(job, "no report (exit %d): %s" % (rc, err[-2000:]))
        results = job.get("results", [])
        self.assertEqual(len(results), 2)
        for r in results:
            self.assertEqual(triage_class(r), "TRIAGE_CLASS_INFRA", self.describe(results))
            details = " ".join(a.get("failureDetail", "") for a in r.get("attempts", []))
            self.assertIn("signal 11", details, details)
        after = self.done_job("d2-after", job_yaml("e2e d2: after the crash", base, base), want_rc=0)
        self.assertEqual({verdict(r.get("candidate")) for r in after}, {"VERDICT_PASS"})
        self.note("every attempt of the segfaulting kernel INFRA (signal 11); the devices stayed healthy and the "
                  "next job passed")

    def test_e_tree_changed_after_registration(self):
        base, cand = self.ref(LIB), self.ref(LIB + "_tamper")
        registered = self.registered[LIB + "_tamper"][1]
        gemm = os.path.join(self.kdir, LIB + "_tamper", "mxval_torch_mxfp4", "gemm.py")
        with open(gemm, "a") as f:
            f.write("# changed after registration\n")
        now = tree_sha256(os.path.join(self.kdir, LIB + "_tamper"))
        self.assertNotEqual(now, registered)
        rc, job, err = self.submit("e", job_yaml("e2e e: tree changed", base, cand))
        self.assertIsNotNone(job, "no report (exit %d): %s" % (rc, err[-2000:]))
        results = job.get("results", [])
        self.assertEqual(job.get("state"), "JOB_STATE_DONE", json.dumps(job)[:3000])
        self.assertEqual(len(results), 6)
        self.assertEqual(rc, 1, "a job whose candidate tree was changed exited %d\n%s" % (rc, self.describe(results)))
        classes = set()
        for r in results:
            name = task_name(r)
            classes.add(triage_class(r))
            self.assertEqual(verdict(r.get("baseline")), "VERDICT_PASS", name + "\n" + self.describe(results))
            self.assertEqual(verdict(r.get("candidate")), "VERDICT_ERROR", name + "\n" + self.describe(results))
            reason = get(r, "candidate", "accuracy", "reason", default="")
            self.assertIn(registered, reason, "%s: the reason names not the registered digest: %s" % (name, reason))
            self.assertIn(now, reason, "%s: the reason names not the tree's digest: %s" % (name, reason))
            self.assertNotEqual(triage_class(r), "TRIAGE_CLASS_PASS", name)
        self.note("6 tasks candidate VERDICT_ERROR naming both digests (triage %s)"
                  % ", ".join(sorted(c.replace("TRIAGE_CLASS_", "") for c in classes)))

    def test_g_library_fetched_by_digest(self):
        """Registering once is enough: a library the workers' --kernel-dir no longer has is fetched from the
        coordinator by its tree digest into their --library-cache, and its tasks pass."""
        name = LIB + "_fetched"
        base, cand = self.ref(LIB), self.ref(name)
        registered = self.registered[name][1]
        shutil.rmtree(os.path.join(self.kdir, name))
        results = self.done_job("g", job_yaml("e2e g: fetched by digest", base, cand), want_rc=0)
        for r in results:
            self.assertEqual(verdict(r.get("candidate")), "VERDICT_PASS", task_name(r) + "\n" + self.describe(results))
        fetched = os.path.join(self.work, "libcache", registered, name)
        self.assertTrue(os.path.isfile(os.path.join(fetched, "mxval_library.json")), "not in the library cache: " + fetched)
        self.assertEqual(tree_sha256(fetched), registered)
        self.note("6 tasks passed with the library fetched from the coordinator (tree digest checked)")

    def test_f_spec_errors(self):
        lib = self.ref(LIB)
        cases = [
            ("unknown kernel", job_yaml("e2e f1", lib, (LIB, self.build_id(LIB), "no_such_kernel")),
             "spec.candidate_kernel.kernel", "no_such_kernel"),
            ("arch the kernel does not list", job_yaml("e2e f2", lib, lib, target_archs=("gfx90a",)),
             "spec.target_archs[0]", "gfx90a"),
            ("build not registered", job_yaml("e2e f3", lib, (LIB, "not-the-build", KERNEL)),
             "spec.candidate_kernel.build_id", "not-the-build"),
        ]
        cases.append(("library not registered", job_yaml("e2e f4", lib, ("not_registered_lib", "x", KERNEL)),
                      "spec.candidate_kernel.library", "not_registered_lib"))
        for what, text, field, word in cases:
            with self.subTest(what):
                rc, job, err = self.submit("f-" + word, text, timeout=30)
                self.assertEqual(rc, 2, "%s: exit %d, stderr %s" % (what, rc, err))
                self.assertIn(field, err, what)
                self.assertIn(word, err, what)
                self.assertIsNone(job, what)
                # A command the message points to must exist.
                for hint in re.findall(r"\(mxval ([a-z][a-z-]*)", err):
                    h = run_cli([hint, "--help"])
                    self.assertEqual(h.returncode, 0, "%s: the message %r points to `mxval %s`, which is no verb: %s"
                                     % (what, err.strip(), hint, (h.stderr.strip().splitlines() or [""])[0]))
        self.note("%d spec errors exit 2 naming their field" % len(cases))


class SummaryResult(unittest.TextTestResult):
    def startTest(self, test):
        self._t0 = time.monotonic()
        test._note = ""
        test._recorded = False
        super().startTest(test)

    def stopTest(self, test):
        if not getattr(test, "_recorded", False):  # a failing subtest, no verdict of the test itself
            self._record(test, "FAIL")
        super().stopTest(test)

    def _record(self, test, status):
        test._recorded = True
        SUMMARY.append((test.id().rsplit(".", 1)[-1], status, time.monotonic() - getattr(self, "_t0", time.monotonic()),
                        getattr(test, "_note", "")))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "ok")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "FAIL")

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "ERROR")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            SUMMARY.append((subtest.id().rsplit(".", 1)[-1], "FAIL", 0.0, str(err[1]).split("\n")[0][:200]))


def main():
    global MXVAL, SOURCE
    ap = argparse.ArgumentParser()
    ap.add_argument("--mxval", required=True)
    ap.add_argument("--source", required=True)
    args, rest = ap.parse_known_args()
    MXVAL, SOURCE = os.path.abspath(args.mxval), os.path.abspath(args.source)
    t0 = time.monotonic()
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(PythonLibraryE2E)
    if rest:
        suite = unittest.TestSuite(t for t in suite if any(r in t.id() for r in rest))
    result = unittest.TextTestRunner(verbosity=2, resultclass=SummaryResult).run(suite)
    print("\nsummary (%.0f s):" % (time.monotonic() - t0))
    for name, status, secs, note in SUMMARY:
        print("  %-5s %-40s %6.1f s  %s" % (status, name, secs, note))
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
