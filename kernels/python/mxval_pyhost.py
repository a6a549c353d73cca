"""mxval's task child for Python kernel libraries (kernels/python/README.md).

The worker runs a task with a side in a Python kernel library as

    PYTHON -I mxval_pyhost.py --task-lib <prefix>/lib/libmxval_task.so
           [--cache-dir DIR] -- <the flags of `mxval __run-task`>

in the interpreter the worker was given (`mxval worker --python`). This file
loads libmxval_task.so, mxval's own task child (service/worker/task_child.h),
and hands it a loader: when the task names a Python library, the C++ side
copies the library's tree into a private directory while hashing it, checks
the digest against the registered one, and only then calls the loader, which
imports the library from that copy and returns a kernel table of the C ABI
(kernels/include/mxval/kernel_api.h) whose entry points call into Python.
Guards, poisoning, the FP32 reference, verdicts and the GPU timing harness
are mxval's C++, exactly as for a compiled library.

`-I` (isolated mode) keeps PYTHONPATH, the user's site directory and the
working directory off sys.path: a library imports its own tree and installed
packages, nothing else. Output the kernel prints goes to stderr: stdout is
the results channel to the worker.

With `--serve` the child stays up and runs one task after another: the
worker writes each TaskSpec as a frame ([u32 length, little-endian][bytes])
on stdin, and the child answers with its results as frames, then an end
frame [u32 0][i32 exit code] (task_child_capi.cc). PyTorch, Triton and the
CUDA context start once per child instead of once per task; a library is
verified and imported once per child. The worker replaces a serving child
that crashed, hung or has run its share of tasks.

`--describe` prints this interpreter's environment as JSON (the worker's
probe at start-up) and exits.
"""

import ctypes
import json
import os
import platform
import sys
import traceback
import types

API_VERSION = 2  # libmxval_task.so's mxval_task_api_version()
ABI_VERSION = 3  # kernel_api.h's MXVAL_KERNEL_ABI_VERSION
ACT_BITS = {"bf16": 1 << 0, "mxfp4-even": 1 << 1}
DEVICE_KIND = {"": 0, "cuda": 1, "hip": 2}  # enum mxval_device_kind by --runtime
ERR_TAIL_BYTES = 3500  # what fits the C side's 4096-byte message buffer


# ---------------------------------------------------------------- the C ABI


class TileConfig(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in ("block_m", "block_n", "block_k", "ksplit", "num_stages", "num_warps")]


class GemmArgs(ctypes.Structure):
    _fields_ = [
        ("B", ctypes.c_int64), ("M", ctypes.c_int64), ("N", ctypes.c_int64), ("K", ctypes.c_int64),
        ("activations", ctypes.c_int32),
        ("x", ctypes.c_void_p), ("x_stride_b", ctypes.c_int64), ("x_stride_m", ctypes.c_int64),
        ("x_stride_k", ctypes.c_int64),
        ("w_packed", ctypes.c_void_p), ("w_packed_stride_b", ctypes.c_int64), ("w_packed_stride_n", ctypes.c_int64),
        ("w_scales", ctypes.c_void_p), ("w_scales_stride_b", ctypes.c_int64), ("w_scales_stride_n", ctypes.c_int64),
        ("y", ctypes.c_void_p), ("y_stride_b", ctypes.c_int64), ("y_stride_m", ctypes.c_int64),
        ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_size_t),
        ("stream", ctypes.c_void_p), ("launch_flags", ctypes.c_uint32),
        ("config_json", ctypes.c_char_p),
    ]


ENTRY = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(GemmArgs), ctypes.POINTER(TileConfig), ctypes.c_void_p,
                         ctypes.c_size_t)
WORKSPACE = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.POINTER(GemmArgs), ctypes.POINTER(TileConfig))


class Kernel(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p), ("device", ctypes.c_int32), ("archs", ctypes.c_char_p),
        ("activation_modes", ctypes.c_uint32), ("configs", ctypes.POINTER(TileConfig)), ("num_configs", ctypes.c_int32),
        ("can_implement", ENTRY), ("workspace_size", WORKSPACE), ("run", ENTRY), ("launch_flags", ctypes.c_uint32),
    ]


class KernelLibrary(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_uint32), ("library_name", ctypes.c_char_p), ("build_id", ctypes.c_char_p),
                ("num_kernels", ctypes.c_int32), ("kernels", ctypes.POINTER(Kernel))]


LOADER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p,
                          ctypes.c_size_t)


def write_message(buf, size, text):
    """Copies `text` (its tail when long: a traceback ends with the error) into a C buffer."""
    if not buf or size == 0:
        return
    text = "".join(ch if ch == "\n" or ch == "\t" or (" " <= ch and ch != "\x7f") else "?" for ch in text)
    data = text.encode("utf-8", "replace")
    limit = min(size - 1, ERR_TAIL_BYTES)
    if len(data) > limit:
        data = b"..." + data[-(limit - 3):]
    ctypes.memmove(buf, data + b"\0", len(data) + 1)


def exception_text():
    """The exception and the tail of its traceback, innermost frames last."""
    etype, value, tb = sys.exc_info()
    frames = traceback.format_tb(tb)[-6:]
    head = "".join(traceback.format_exception_only(etype, value)).strip()
    return head + "\nTraceback (innermost last):\n" + "".join(frames)


# ---------------------------------------------------------------- tensors over mxval's buffers


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.CFUNCTYPE(None, ctypes.c_void_p))]


DL_CPU, DL_CUDA, DL_ROCM = 1, 2, 10
DL_UINT, DL_BFLOAT = 1, 4
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class Views:
    """PyTorch tensors viewing raw buffers through DLPack, without copies.

    The DLPack structs are kept for the life of the process: PyTorch reads
    a struct's deleter when the tensor dies, which may be after a kernel
    dropped or kept it. The harness rotates through a bounded set of buffers,
    so the views are cached by (pointer, shape, strides)."""

    def __init__(self, torch, dl_device_type, device_id):
        self.torch = torch
        self.device = (dl_device_type, device_id)
        self.cache = {}
        self.keep = []

    def view(self, ptr, shape, strides, code, bits):
        if not ptr:
            return None
        key = (ptr, shape, strides, code, bits)
        t = self.cache.get(key)
        if t is not None:
            return t
        n = len(shape)
        m = DLManagedTensor()
        shp = (ctypes.c_int64 * n)(*shape)
        std = (ctypes.c_int64 * n)(*strides)
        m.dl_tensor.data = ptr
        m.dl_tensor.device = DLDevice(*self.device)
        m.dl_tensor.ndim = n
        m.dl_tensor.dtype = DLDataType(code, bits, 1)
        m.dl_tensor.shape = shp
        m.dl_tensor.strides = std
        m.dl_tensor.byte_offset = 0
        self.keep.append((m, shp, std))
        capsule = _capsule_new(ctypes.addressof(m), b"dltensor", None)
        t = self.torch.utils.dlpack.from_dlpack(capsule)
        if len(self.cache) < 4096:
            self.cache[key] = t
        return t


# ---------------------------------------------------------------- one loaded library


def resolve(spec, root, what):
    """`package.module:function` imported from the library's tree."""
    import importlib

    module_name, _, func_name = spec.partition(":")
    module = importlib.import_module(module_name)
    path = os.path.realpath(getattr(module, "__file__", "") or "")
    if not path.startswith(root + os.sep):
        raise ImportError(f"{what} '{spec}': module '{module_name}' was imported from '{path or '(built in)'}', "
                          f"outside the library's tree: a library imports its own code and installed packages only")
    fn = getattr(module, func_name, None)
    if not callable(fn):
        raise ImportError(f"{what} '{spec}': '{module_name}' has no callable '{func_name}'")
    return fn


class Library:
    """A Python kernel library imported from its verified tree copy.

    Libraries of one task may share package names (a pull request's build
    and the baseline's): each keeps its own modules, and before any call
    into a library its modules and paths are put back in sys.modules and
    sys.path (activate), so lazy imports inside a kernel resolve in its own
    tree."""

    active = None

    def __init__(self, host, root, name, sha256):
        self.host = host
        self.root = os.path.realpath(root)
        with open(os.path.join(self.root, "mxval_library.json"), encoding="utf-8") as f:
            manifest = json.load(f)
        if manifest.get("name") != name:
            raise ValueError(f"mxval_library.json names the library '{manifest.get('name')}', the task '{name}'")
        self.name = name
        self.paths = [os.path.realpath(os.path.join(self.root, p)) for p in manifest.get("python_paths", ["."])]
        for p in self.paths:
            if p != self.root and not p.startswith(self.root + os.sep):
                raise ImportError(f"python_paths entry '{p}' is outside the library's tree")
        self.cache_dir = os.path.join(host.cache_dir, f"{name}-{sha256[:16]}") if host.cache_dir else ""
        self.modules = {}
        self.activate()
        try:
            self.kernels = [PyKernel(self, k) for k in manifest["kernels"]]
        finally:
            self.collect_modules()
        self.table = self.build_table(manifest)

    def owns(self, module):
        """Whether `module` (a module or a package, namespace packages too) was imported from this tree."""
        try:  # modules are any objects in sys.modules (PyTorch's torch.classes has a __path__ that is no list)
            paths = [getattr(module, "__file__", None)]
            search = getattr(module, "__path__", None)
            if search is not None and not isinstance(search, (str, bytes)):
                paths += list(search)
        except Exception:
            return False
        return any(isinstance(p, str) and p and (os.path.realpath(p) + os.sep).startswith(self.root + os.sep)
                   for p in paths)

    def collect_modules(self):
        """Takes every module imported from this tree (at load, or lazily by a kernel since) into self.modules."""
        for name, mod in list(sys.modules.items()):
            if mod is not None and self.owns(mod):
                self.modules[name] = mod

    def activate(self):
        if Library.active is self:
            return
        other = Library.active
        if other is not None:
            other.collect_modules()
            for mod in other.modules:
                sys.modules.pop(mod, None)
            sys.path[:] = [p for p in sys.path if p not in other.paths]
        # No module of another library's tree may stay importable under this one's names.
        for lib in self.host.libraries:
            if lib is not self:
                for name in [n for n, m in sys.modules.items() if m is not None and lib.owns(m)]:
                    sys.modules.pop(name, None)
        sys.modules.update(self.modules)
        sys.path[0:0] = [p for p in self.paths if p not in sys.path]
        if self.cache_dir:
            # Triton compiles once per config and library build on this worker.
            os.environ["TRITON_CACHE_DIR"] = os.path.join(self.cache_dir, "triton")
        Library.active = self

    def build_table(self, manifest):
        arr = (Kernel * len(self.kernels))()
        for i, k in enumerate(self.kernels):
            arr[i].name = k.name.encode()
            arr[i].device = DEVICE_KIND[self.host.runtime]
            arr[i].archs = ",".join(k.archs).encode()
            arr[i].activation_modes = sum(ACT_BITS[a] for a in k.activations)
            arr[i].configs = None
            arr[i].num_configs = 0
            arr[i].can_implement = k.c_can_implement
            arr[i].workspace_size = k.c_workspace_size
            arr[i].run = k.c_run
            arr[i].launch_flags = 0
        self.kernel_array = arr
        t = KernelLibrary()
        t.abi_version = ABI_VERSION
        t.library_name = self.name.encode()
        t.build_id = str(manifest["build_id"]).encode()
        t.num_kernels = len(self.kernels)
        t.kernels = arr
        return t


class PyKernel:
    def __init__(self, lib, spec):
        self.lib = lib
        self.name = spec["name"]
        self.archs = list(spec["archs"])
        self.activations = list(spec["activations"])
        self.fn = resolve(spec["entry"], lib.root, f"kernel '{self.name}' entry")
        self.fn_can = resolve(spec["can_implement"], lib.root, "can_implement") if spec.get("can_implement") else None
        self.fn_ws = resolve(spec["workspace_size"], lib.root, "workspace_size") if spec.get("workspace_size") else None
        self.configs = {}
        self.workspace_error = None  # workspace_size's exception for the current call's problem, if it raised
        self.c_can_implement = ENTRY(self.can_implement)
        self.c_workspace_size = WORKSPACE(self.workspace_size)
        self.c_run = ENTRY(self.run)

    def config(self, a, c):
        text = a.config_json
        if text is None:
            t = c.contents
            return {"BLOCK_SIZE_M": t.block_m, "BLOCK_SIZE_N": t.block_n, "BLOCK_SIZE_K": t.block_k,
                    "NUM_KSPLIT": t.ksplit, "num_stages": t.num_stages, "num_warps": t.num_warps}
        d = self.configs.get(text)
        if d is None:
            d = json.loads(text)
            self.configs[text] = d
        return dict(d)  # a kernel may edit its copy

    def problem(self, a):
        return types.SimpleNamespace(
            B=a.B, M=a.M, N=a.N, K=a.K, activations="mxfp4-even" if a.activations == 1 else "bf16",
            device="cpu" if self.lib.host.runtime == "" else "cuda",
            x_strides=(a.x_stride_b, a.x_stride_m, a.x_stride_k), w_strides=(a.w_packed_stride_b, a.w_packed_stride_n, 1),
            w_scales_strides=(a.w_scales_stride_b, a.w_scales_stride_n, 1), y_strides=(a.y_stride_b, a.y_stride_m, 1))

    def can_implement(self, args, cfg, err, err_len):
        try:
            self.lib.activate()
            a = args.contents
            host = self.lib.host
            arch_ok = ("cpu" in self.archs) if host.runtime == "" else True
            if not arch_ok:
                write_message(err, err_len, f"kernel '{self.name}' runs on {','.join(self.archs)}, not on the CPU")
                return 1
            if self.workspace_error is not None:
                write_message(err, err_len, "workspace_size raised " + self.workspace_error)
                return 1
            if self.fn_can is None:
                return 0
            why = self.fn_can(self.problem(a), self.config(a, cfg))
            if why is None or why is True or why == "":
                return 0
            write_message(err, err_len, "can_implement returned False" if why is False else str(why))
            return 1
        except BaseException:
            write_message(err, err_len, "can_implement raised " + exception_text())
            return 1

    def workspace_size(self, args, cfg):
        self.workspace_error = None
        try:
            self.lib.activate()
            if self.fn_ws is None:
                return 0
            a = args.contents
            n = int(self.fn_ws(self.problem(a), self.config(a, cfg)))
            if n < 0 or n > (64 << 30):
                raise ValueError(f"workspace_size returned {n} bytes (must be 0 to 64 GiB)")
            return n
        except BaseException:
            # The C ABI's workspace_size cannot fail: the error is reported
            # by the next can_implement, and run refuses meanwhile.
            self.workspace_error = exception_text()
            return 0

    def run(self, args, cfg, err, err_len):
        try:
            if self.workspace_error is not None:
                write_message(err, err_len, "workspace_size raised " + self.workspace_error)
                return 1
            self.lib.activate()
            host = self.lib.host
            a = args.contents
            v = host.views
            K, N, M, B = a.K, a.N, a.M, a.B
            x = v.view(a.x, (B, M, K), (a.x_stride_b, a.x_stride_m, a.x_stride_k), DL_BFLOAT, 16)
            w = v.view(a.w_packed, (B, N, K // 2), (a.w_packed_stride_b, a.w_packed_stride_n, 1), DL_UINT, 8)
            s = v.view(a.w_scales, (B, N, K // 32), (a.w_scales_stride_b, a.w_scales_stride_n, 1), DL_UINT, 8)
            y = v.view(a.y, (B, M, N), (a.y_stride_b, a.y_stride_m, 1), DL_BFLOAT, 16)
            ws = v.view(a.workspace, (a.workspace_bytes,), (1,), DL_UINT, 8) if a.workspace_bytes else None
            kwargs = dict(config=self.config(a, cfg), activations="mxfp4-even" if a.activations == 1 else "bf16",
                          workspace=ws)
            stream = host.stream(a.stream)
            if stream is None:
                self.fn(x, w, s, y, stream=None, **kwargs)
            else:
                with host.torch.cuda.stream(stream):
                    self.fn(x, w, s, y, stream=stream, **kwargs)
            return 0
        except BaseException:
            write_message(err, err_len, exception_text())
            return 1


# ---------------------------------------------------------------- the host


class Host:
    def __init__(self, runtime, device, cache_dir):
        self.runtime = runtime
        self.device = device
        self.cache_dir = cache_dir
        self.torch = None
        self.views = None
        self.streams = {}
        self.libraries = []  # kept alive: their tables and callbacks are in use by C++

    def ensure_torch(self):
        if self.torch is not None:
            return
        import torch  # noqa: the library's own dependency, installed in this interpreter

        self.torch = torch
        if self.runtime:
            if not torch.cuda.is_available():
                raise RuntimeError(f"this interpreter's PyTorch ({torch.__version__}) sees no GPU; the task runs on "
                                   f"{self.runtime} device {self.device}")
            torch.cuda.set_device(self.device)
            self.views = Views(torch, DL_ROCM if torch.version.hip else DL_CUDA, self.device)
        else:
            self.views = Views(torch, DL_CPU, 0)

    def new_task(self):
        """Forgets the views of the last task's buffers (they are freed)."""
        if self.views is not None:
            self.views.cache.clear()

    def after_task(self):
        """Gives the device memory PyTorch cached for this task back: between tasks the device is not ours."""
        if self.runtime and self.torch is not None:
            self.torch.cuda.empty_cache()

    def stream(self, handle):
        """The PyTorch stream over mxval's stream handle (None on the CPU)."""
        if not self.runtime or not handle:
            return None
        s = self.streams.get(handle)
        if s is None:
            s = self.torch.cuda.ExternalStream(handle, device=self.torch.device("cuda", self.device))
            self.streams[handle] = s
        return s

    def load(self, dir_b, name_b, sha_b, err, err_len):
        try:
            self.ensure_torch()
            lib = Library(self, dir_b.decode(), name_b.decode(), sha_b.decode())
            self.libraries.append(lib)
            return ctypes.addressof(lib.table)
        except BaseException:
            write_message(err, err_len, exception_text())
            return None


def distribution_version(*names):
    from importlib import metadata

    for n in names:
        try:
            return metadata.version(n)
        except Exception:
            continue
    return ""


def torch_backend():
    """"cuda 13.0" / "hip 6.4" / "cpu", read from torch/version.py without importing PyTorch (seconds)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
    except Exception:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return "none (PyTorch is not installed)"
    fields = {}
    try:
        with open(os.path.join(list(spec.submodule_search_locations)[0], "version.py"), encoding="utf-8") as f:
            for line in f:
                key, sep, value = line.partition("=")
                key = key.split(":")[0].strip()  # `cuda: Optional[str] = '13.0'` in newer PyTorch
                if sep and key in ("cuda", "hip"):
                    value = value.split("#")[0].strip().strip("'\"")
                    fields[key] = "" if value == "None" else value
    except OSError:
        return "unknown"
    if fields.get("hip"):
        return "hip " + fields["hip"]
    if fields.get("cuda"):
        return "cuda " + fields["cuda"]
    return "cpu"


def environment():
    return {"interpreter": sys.executable, "python_version": platform.python_version(),
            "torch_version": distribution_version("torch"),
            "triton_version": distribution_version("triton", "pytorch-triton-rocm", "pytorch-triton", "triton-rocm"),
            "backend": torch_backend()}


def flag(args, name, default=""):
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a[len(name) + 1:]
    return default


def main(argv):
    if argv[:1] == ["--describe"]:
        print(json.dumps(environment()), flush=True)
        return 0
    if "--" not in argv:
        print("usage: mxval_pyhost.py --task-lib PATH [--cache-dir DIR] [--serve] -- <mxval __run-task flags>",
              file=sys.stderr)
        return 2
    own, child = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    task_lib = flag(own, "--task-lib")
    cache_dir = flag(own, "--cache-dir")
    # stdout is the results channel: whatever the kernel prints goes to stderr.
    results_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    lib = ctypes.CDLL(task_lib, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    if lib.mxval_task_api_version() != API_VERSION:
        print(f"mxval_pyhost: {task_lib} speaks task API {lib.mxval_task_api_version()}, this host {API_VERSION}",
              file=sys.stderr)
        return 3
    host = Host(flag(child, "--runtime"), int(flag(child, "--device", "0") or 0), cache_dir)
    loader = LOADER(host.load)
    lib.mxval_task_child_main.restype = ctypes.c_int
    lib.mxval_task_child_main.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, ctypes.c_int,
                                          LOADER, ctypes.c_char_p]
    c_args = (ctypes.c_char_p * len(child))(*[a.encode() for a in child])
    env = json.dumps(environment()).encode()
    if "--serve" not in own:
        return lib.mxval_task_child_main(len(child), c_args, 0, results_fd, loader, env)
    lib.mxval_task_child_open.restype = ctypes.c_void_p
    lib.mxval_task_child_open.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), LOADER, ctypes.c_char_p,
                                          ctypes.POINTER(ctypes.c_int)]
    lib.mxval_task_child_run.restype = ctypes.c_int
    lib.mxval_task_child_run.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
    lib.mxval_task_child_close.argtypes = [ctypes.c_void_p]
    # PyTorch first: an interpreter that cannot import it (or see the GPU)
    # ends here, before any task, which the worker reports as its own failure.
    try:
        host.ensure_torch()
    except BaseException:
        print("mxval_pyhost: " + exception_text(), file=sys.stderr)
        return 3
    code = ctypes.c_int(0)
    ctx = lib.mxval_task_child_open(len(child), c_args, loader, env, ctypes.byref(code))
    if not ctx:
        return code.value
    stdin = os.fdopen(0, "rb", buffering=0)
    while True:
        header = read_exact(stdin, 4)
        if header is None:
            lib.mxval_task_child_close(ctx)  # the worker closed stdin: done (removes the verified copies)
            return 0
        n = int.from_bytes(header, "little")
        task = read_exact(stdin, n)
        if task is None:
            return 3
        host.new_task()
        rc = lib.mxval_task_child_run(ctx, task, n, results_fd)
        if rc != 0:
            return rc  # the worker replaces this child (a failed task, or a device that faulted)
        host.after_task()


def read_exact(f, n):
    """n bytes, or None at end of input."""
    chunks, got = [], 0
    while got < n:
        b = f.read(n - got)
        if not b:
            return None
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


if __name__ == "__main__":
    # os._exit: the results are written; interpreter teardown with a GPU
    # context and compiled kernels alive has nothing left to add.
    code = main(sys.argv[1:])
    for stream in (sys.stdout, sys.stderr, sys.__stdout__):
        stream.flush()
    os._exit(code)
