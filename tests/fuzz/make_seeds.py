#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/).

Run from the repository root after changing a format; the output is
committed. Needs python3-numpy and protoc (both installed by scripts/setup.sh).
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# --- job specs (text): first byte 1 = YAML, 0 = JSON
YAML_SPECS = {
    "glm5_retune.yaml": """name: "glm5 retune"
presets: [glm5-tp4]
mValues: [1, 64, 1024]
activations: ACTIVATIONS_MXFP4_EVEN
inputs: {xGenerator: heavy-tail, seed: 42}
tolerance: {atol: 1.0e-5, rtol: 0.016}
pullRequest:
  changedFiles: [aiter/configs/gfx950-BATCHED_GEMM-A16WFP4.json]
  changedDispatchEntries: ["kup/N=512,K=192/M_LEQ_16"]
reuseResults: true
""",
    "shapes_ragged.yaml": """name: ragged
shapes:
  - {op: OP_KUP, b: 16, n: 512, k: 192, stridedX: true, xPitchExtra: 64}
  - {op: OP_VUP, b: 16, n: 128, k: 512, layout: OUTPUT_LAYOUT_BATCH_MAJOR}
mValues: [1, 3, 17, 255]
targetArchs: [cpu, sm_90a]
candidateOverride: {blockM: 16, blockN: 64, blockK: 64, ksplit: 2, numStages: 2, numWarps: 4}
priority: 50
deadline: 3600s
""",
    "external_library.yaml": """name: pr-kernels
presets: [dsv3-tp8]
mValues: [1, 2]
candidateKernel: {library: pr-kernels, kernel: a16wfp4_tc, buildId: b1}
candidateTable:
  name: pr
  json: '{"kernel": "a16wfp4_tc", "ops": {"kup": {"any": {"any": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64}}}}}'
""",
}
for name, text in YAML_SPECS.items():
    put("fuzz_job_spec_text", name, b"\x01" + text.encode())
put("fuzz_job_spec_text", "glm5_retune.json", b"\x00" + json.dumps({
    "name": "glm5 retune", "presets": ["glm5-tp4"], "mValues": [1, 64, 1024],
    "activations": "ACTIVATIONS_MXFP4_EVEN", "inputs": {"xGenerator": "heavy-tail", "seed": 42},
    "tolerance": {"atol": 1e-5, "rtol": 0.016}, "repetitions": 3}).encode())
put("fuzz_job_spec_text", "bad_k.json", b"\x00" + json.dumps({
    "shapes": [{"op": "OP_KUP", "b": 16, "n": 512, "k": 100}], "mValues": [4]}).encode())

# --- job specs (wire): protoc --encode from text format
TEXT_PROTOS = {
    "presets.txtpb": 'request_id: "r1" spec { name: "x" presets: "dsv3-tp8" presets: "glm5-tp4" m_values: 1 m_values: 64 repetitions: 2 }',
    "shapes.txtpb": 'spec { shapes { op: OP_KUP b: 16 n: 512 k: 192 strided_x: true x_pitch_extra: 32 } '
                    'shapes { op: OP_VUP b: 1 n: 128 k: 512 layout: OUTPUT_LAYOUT_BATCH_MAJOR } m_values: 1 m_values: 4096 '
                    'target_archs: "sm_90a" activations: ACTIVATIONS_MXFP4_EVEN inputs { x_generator: "mxfp4-exact" '
                    'w_scale_rule: "rceil" seed: 7 } tolerance { atol: 0.001 rtol: 0.02 max_mismatch_fraction: 0.001 } }',
    "library.txtpb": 'spec { presets: "dsv3-tp8" m_values: 2 candidate_kernel { library: "pr-kernels" kernel: "k" build_id: "b1" } '
                     'candidate_override { block_m: 32 block_n: 64 block_k: 128 ksplit: 4 } priority: 100 deadline { seconds: 60 } }',
}
proto = os.path.join(ROOT, "proto")
for name, text in TEXT_PROTOS.items():
    data = subprocess.run(["protoc", "-I", proto, "--encode=mxval.v1.SubmitJobRequest", "mxval/v1/mxval.proto"],
                          input=text.encode(), check=True, capture_output=True).stdout
    put("fuzz_job_spec_proto", name.replace(".txtpb", ".bin"), data)


# --- .npy
def npy(arr, fortran=False):
    import io
    buf = io.BytesIO()
    np.save(buf, np.asfortranarray(arr) if fortran else arr)
    return buf.getvalue()


rng = np.random.default_rng(1)
put("fuzz_npy", "f32_2x3.npy", npy(rng.standard_normal((2, 3)).astype(np.float32)))
put("fuzz_npy", "u8_4x16.npy", npy(rng.integers(0, 255, (4, 16)).astype(np.uint8)))
put("fuzz_npy", "f16_5.npy", npy(rng.standard_normal(5).astype(np.float16)))
put("fuzz_npy", "f64_scalar.npy", npy(np.float64(3.5)))
put("fuzz_npy", "i8_empty.npy", npy(np.zeros((0, 4), np.int8)))
put("fuzz_npy", "f32_fortran.npy", npy(rng.standard_normal((3, 2)).astype(np.float32), fortran=True))
put("fuzz_npy", "f32_bigendian.npy", npy(rng.standard_normal(3).astype(">f4")))


# --- .safetensors: u64 header length, JSON header, data
def safetensors(tensors, meta=None):
    header, blobs, off = {}, b"", 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs += raw
        off += len(raw)
    if meta:
        header["__metadata__"] = meta
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + blobs


put("fuzz_safetensors", "three.safetensors", safetensors({
    "w": ("U8", [2, 8], bytes(range(16))),
    "scales": ("U8", [2, 1], b"\x7f\x80"),
    "x": ("BF16", [1, 4], b"\x80\x3f\x00\x40\x40\x40\x80\x40"),
    "y": ("F32", [2], struct.pack("<2f", 1.5, -2.0)),
}, meta={"format": "mxfp4"}))
put("fuzz_safetensors", "f16.safetensors", safetensors({"h": ("F16", [3], struct.pack("<3e", 1.0, 0.5, -4.0))}))
put("fuzz_safetensors", "bad_offsets.safetensors",
    struct.pack("<Q", 60) + b'{"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 99]}}'[:60])

_overlap = json.dumps({"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},
                       "b": {"dtype": "U8", "shape": [8], "data_offsets": [4, 12]}}).encode()
put("fuzz_safetensors", "overlap.safetensors", struct.pack("<Q", len(_overlap)) + _overlap + bytes(12))

# --- YAML -> JSON: real files, aliases, and the bombs the converter bounds
put("fuzz_yaml_json", "ownership.yaml",
    open(os.path.join(ROOT, "service", "triage", "rules", "default_ownership.yaml"), "rb").read())
put("fuzz_yaml_json", "retune.yaml", open(os.path.join(ROOT, "docs", "specs", "retune.yaml"), "rb").read())
put("fuzz_yaml_json", "aliases.yaml", b"base: &b {atol: 1.0e-5, tags: [x, y]}\ncopy: *b\n&k key: 1\nother: {*k : 2}\n")
laughs = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
for c in "bcdefghi":
    laughs += c + ": &" + c + " [" + ", ".join(["*" + chr(ord(c) - 1)] * 10) + "]\n"
put("fuzz_yaml_json", "billion_laughs.yaml", laughs.encode())
put("fuzz_yaml_json", "deep_flow.yaml", b"[" * 5000 + b"x" + b"]" * 5000)
put("fuzz_yaml_json", "deep_block.yaml", b"- " * 5000 + b"x\n")

# --- triage: first byte 1 = YAML rules, then NUL, then a log
rules = open(os.path.join(ROOT, "service", "triage", "rules", "default_rules.yaml"), "rb").read()
logs = os.path.join(ROOT, "tests", "data", "triage", "logs")
for i, name in enumerate(sorted(os.listdir(logs))[:4]):
    log = open(os.path.join(logs, name), "rb").read()[-4096:]
    put("fuzz_triage_rules", "default_" + name, b"\x01" + rules + b"\x00" + log)
put("fuzz_triage_rules", "small_json.rules", b"\x00" + json.dumps({"rules": [
    {"name": "oom", "pattern": r"CUDA out of memory\. Tried to allocate (\S+)", "infra": True},
    {"name": "assert", "pattern": r"AssertionError: (.*)"}]}).encode()
    + b"\x00" + b"step 1\nRuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
own = open(os.path.join(ROOT, "tests", "data", "triage", "ownership.yaml"), "rb").read()
put("fuzz_triage_rules", "ownership.yaml", b"\x01" + own + b"\x00" + b"FAILED tests/test_x.py::test_y\n")


# --- log triage: diff, NUL, log, NUL, base log (a few corpus jobs, small ones)
corpus = os.path.join(ROOT, "tests", "data", "triage", "corpus", "dev")
for scen in sorted(os.listdir(corpus)):
    sdir = os.path.join(corpus, scen)
    if not os.path.isdir(sdir):
        continue
    diff = open(os.path.join(sdir, "pr.diff"), "rb").read()
    for name in sorted(os.listdir(os.path.join(sdir, "logs")))[:2]:
        log = open(os.path.join(sdir, "logs", name), "rb").read()
        bpath = os.path.join(sdir, "base_logs", name)
        base = open(bpath, "rb").read() if os.path.exists(bpath) else b""
        put("fuzz_log_triage", scen + "_" + name, diff + b"\x00" + log + b"\x00" + base)
put("fuzz_log_triage", "not_a_diff", b"just text\x00Traceback (most recent call last):\nKeyError\n")
put("fuzz_log_triage", "empty", b"")

# --- dispatch tables: 16 bytes of (op, M, N, K), then the JSON
for name in ("cpu.json", "sm_90a.json", "cpu_naive.json"):
    text = open(os.path.join(ROOT, "kernels", "configs", name), "rb").read()
    for q, tag in (((0, 0, 511, 191), "kup"), ((1, 300, 127, 511), "vup")):
        put("fuzz_config_table", f"{tag}_{name}", struct.pack("<4I", *q) + text)
print("seeds written under", CORPUS, file=sys.stderr)
