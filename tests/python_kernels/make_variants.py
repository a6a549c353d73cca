#!/usr/bin/env python3
"""Writes the bug variants of a Python kernel library as library trees of their own.

A library directory may hold `variants.json` (not part of the library's manifest):

    [{"name": "ktail_packed_len",             # the variant's suffix
      "bug": "K-tail mask compares element offsets against K/2",
      "file": "pkg/bmm.py",                   # tree-relative
      "old": "offs_k < K", "new": "offs_k < K // 2"}, ...]

Each variant is the library with exactly one substitution applied (the `old` text
must occur exactly once in `file`: a variant never silently stops carrying its bug),
written to DST/<library name>_<variant name>/ with the manifest's `name` and
`build_id` set to that name. variants.json itself is not copied.

Usage: make_variants.py LIBRARY_DIR DST_DIR [--only NAME,...]
Prints one line per variant: its directory.
"""
import argparse
import json
import os
import shutil
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("library")
    ap.add_argument("dst")
    ap.add_argument("--only", default="", help="comma-separated variant names")
    a = ap.parse_args()
    with open(os.path.join(a.library, "variants.json")) as f:
        variants = json.load(f)
    with open(os.path.join(a.library, "mxval_library.json")) as f:
        manifest = json.load(f)
    only = set(filter(None, a.only.split(",")))
    for v in variants:
        if only and v["name"] not in only:
            continue
        name = f"{manifest['name']}_{v['name']}"
        dst = os.path.join(a.dst, name)
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(a.library, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "variants.json"))
        path = os.path.join(dst, v["file"])
        with open(path) as f:
            text = f.read()
        if text.count(v["old"]) != 1:
            sys.exit(f"make_variants: '{v['old']}' occurs {text.count(v['old'])} times in {v['file']}, not once")
        with open(path, "w") as f:
            f.write(text.replace(v["old"], v["new"]))
        m = dict(manifest, name=name, build_id=name)
        with open(os.path.join(dst, "mxval_library.json"), "w") as f:
            json.dump(m, f, indent=2)
        print(dst)


if __name__ == "__main__":
    main()
