// DeviceRuntime over the CUDA driver API, reached with dlopen("libcuda.so.1")
// so the worker needs no CUDA toolkit to build or to start on a CPU node.
// The driver API's types are opaque handles and int result codes; only the
// few entry points below are used, each with its documented C signature.
#include <dlfcn.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/runtime/device_runtime.h"
#include "kernels/runtime/dl_bind.h"
#include "kernels/runtime/late_writer_ptx.h"
#include "mxval/kernel_api.h"
namespace mxval {
namespace {

using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUstream = void*;
using CUevent = void*;
using CUgraph = void*;
using CUgraphExec = void*;
using CUdeviceptr = unsigned long long;  // NOLINT: the driver's typedef
using CUmodule = void*;
using CUfunction = void*;

// cuLaunchKernelEx's configuration, as cuda.h (12.0+) lays it out.
struct CuLaunchAttribute {
  int id;
  char pad[8 - sizeof(int)];
  union {
    char bytes[64];
    int programmatic_stream_serialization_allowed;
  } value;
};
struct CuLaunchConfig {
  unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
  CUstream stream;
  CuLaunchAttribute* attrs;
  unsigned num_attrs;
};
constexpr int kLaunchAttrProgrammaticStreamSerialization = 6;

constexpr int kAttrMultiprocessors = 16;
constexpr int kAttrL2Bytes = 38;
constexpr int kAttrCcMajor = 75;
constexpr int kAttrCcMinor = 76;
constexpr unsigned kStreamNonBlocking = 1;
constexpr int kCaptureModeRelaxed = 2;
constexpr CUresult kErrorOutOfMemory = 2;

struct Api {
  void* handle = nullptr;
  CUresult (*Init)(unsigned);
  CUresult (*GetErrorString)(CUresult, const char**);
  CUresult (*DeviceGetCount)(int*);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*DeviceGetName)(char*, int, CUdevice);
  CUresult (*DeviceTotalMem)(size_t*, CUdevice);
  CUresult (*DeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*PrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*CtxSynchronize)();
  CUresult (*CtxGetDevice)(CUdevice*);
  CUresult (*MemAlloc)(CUdeviceptr*, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*MemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*StreamCreate)(CUstream*, unsigned);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*EventCreate)(CUevent*, unsigned);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventSynchronize)(CUevent);
  CUresult (*EventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*StreamBeginCapture)(CUstream, int);
  CUresult (*StreamEndCapture)(CUstream, CUgraph*);
  CUresult (*GraphInstantiate)(CUgraphExec*, CUgraph, unsigned long long);  // NOLINT
  CUresult (*GraphLaunch)(CUgraphExec, CUstream);
  CUresult (*GraphExecDestroy)(CUgraphExec);
  CUresult (*GraphDestroy)(CUgraph);
  // Optional (CUDA 12.0+ drivers): the late writer needs them.
  CUresult (*ModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*LaunchKernelEx)(const CuLaunchConfig*, CUfunction, void**, void**) = nullptr;
  // Optional: the PCI bus id finds the device in NVML (device_clocks.h).
  CUresult (*DeviceGetPCIBusId)(char*, int, CUdevice) = nullptr;
};

absl::StatusOr<Api> LoadApi() {
  Api a{};
  a.handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (a.handle == nullptr) {
    const char* e = dlerror();
    return absl::UnavailableError(absl::StrCat("CUDA driver not found: ", e ? e : "dlopen(libcuda.so.1) failed"));
  }
  bool ok = true;
  void* h = a.handle;
  ok &= DlBind(h, a.Init, {"cuInit"});
  ok &= DlBind(h, a.GetErrorString, {"cuGetErrorString"});
  ok &= DlBind(h, a.DeviceGetCount, {"cuDeviceGetCount"});
  ok &= DlBind(h, a.DeviceGet, {"cuDeviceGet"});
  ok &= DlBind(h, a.DeviceGetName, {"cuDeviceGetName"});
  ok &= DlBind(h, a.DeviceTotalMem, {"cuDeviceTotalMem_v2"});
  ok &= DlBind(h, a.DeviceGetAttribute, {"cuDeviceGetAttribute"});
  ok &= DlBind(h, a.PrimaryCtxRetain, {"cuDevicePrimaryCtxRetain"});
  ok &= DlBind(h, a.CtxSetCurrent, {"cuCtxSetCurrent"});
  ok &= DlBind(h, a.CtxSynchronize, {"cuCtxSynchronize"});
  ok &= DlBind(h, a.CtxGetDevice, {"cuCtxGetDevice"});
  ok &= DlBind(h, a.MemAlloc, {"cuMemAlloc_v2"});
  ok &= DlBind(h, a.MemFree, {"cuMemFree_v2"});
  ok &= DlBind(h, a.MemcpyHtoDAsync, {"cuMemcpyHtoDAsync_v2"});
  ok &= DlBind(h, a.MemcpyDtoHAsync, {"cuMemcpyDtoHAsync_v2"});
  ok &= DlBind(h, a.MemcpyDtoDAsync, {"cuMemcpyDtoDAsync_v2"});
  ok &= DlBind(h, a.MemsetD8Async, {"cuMemsetD8Async"});
  ok &= DlBind(h, a.StreamCreate, {"cuStreamCreate"});
  ok &= DlBind(h, a.StreamSynchronize, {"cuStreamSynchronize"});
  ok &= DlBind(h, a.EventCreate, {"cuEventCreate"});
  ok &= DlBind(h, a.EventRecord, {"cuEventRecord"});
  ok &= DlBind(h, a.EventSynchronize, {"cuEventSynchronize"});
  ok &= DlBind(h, a.EventElapsedTime, {"cuEventElapsedTime_v2", "cuEventElapsedTime"});
  ok &= DlBind(h, a.EventDestroy, {"cuEventDestroy_v2"});
  ok &= DlBind(h, a.StreamBeginCapture, {"cuStreamBeginCapture_v2"});
  ok &= DlBind(h, a.StreamEndCapture, {"cuStreamEndCapture"});
  ok &= DlBind(h, a.GraphInstantiate, {"cuGraphInstantiateWithFlags"});
  ok &= DlBind(h, a.GraphLaunch, {"cuGraphLaunch"});
  ok &= DlBind(h, a.GraphExecDestroy, {"cuGraphExecDestroy"});
  ok &= DlBind(h, a.GraphDestroy, {"cuGraphDestroy"});
  DlBind(h, a.ModuleLoadData, {"cuModuleLoadData"});
  DlBind(h, a.ModuleGetFunction, {"cuModuleGetFunction"});
  DlBind(h, a.LaunchKernelEx, {"cuLaunchKernelEx"});
  DlBind(h, a.DeviceGetPCIBusId, {"cuDeviceGetPCIBusId"});
  if (!ok) {
    dlclose(h);
    return absl::UnavailableError("libcuda.so.1 lacks a driver API entry point mxval needs (driver too old)");
  }
  return a;
}

class CudaGraph : public DeviceGraph {
 public:
  CudaGraph(const Api* api, CUgraph g, CUgraphExec e, CUstream s) : api_(api), graph_(g), exec_(e), stream_(s) {}
  ~CudaGraph() override {
    api_->GraphExecDestroy(exec_);
    api_->GraphDestroy(graph_);
  }
  absl::Status Launch() override {
    const CUresult r = api_->GraphLaunch(exec_, stream_);
    if (r != 0) return absl::InternalError(absl::StrCat("cuGraphLaunch failed (CUresult ", r, ")"));
    return absl::OkStatus();
  }

 private:
  const Api* api_;
  CUgraph graph_;
  CUgraphExec exec_;
  CUstream stream_;
};

class CudaRuntime : public DeviceRuntime {
 public:
  explicit CudaRuntime(Api api) : api_(api) {}
  ~CudaRuntime() override = default;  // the driver cleans up at exit; dlclose of libcuda is unsafe

  std::string kind() const override { return "cuda"; }
  int32_t kernel_device() const override { return MXVAL_DEVICE_CUDA; }

  absl::Status Check(CUresult r, const char* what) const {
    if (r == 0) return absl::OkStatus();
    const char* s = nullptr;
    api_.GetErrorString(r, &s);
    const std::string msg = absl::StrCat(what, ": ", s ? s : "unknown CUDA error", " (CUresult ", r, ")");
    if (r == kErrorOutOfMemory) return absl::ResourceExhaustedError(msg);
    return absl::InternalError(msg);
  }

  absl::Status InitOnce() {
    if (initialized_) return absl::OkStatus();
    if (CUresult r = api_.Init(0); r != 0) {
      const char* s = nullptr;
      api_.GetErrorString(r, &s);
      return absl::UnavailableError(absl::StrCat("cuInit failed: ", s ? s : "unknown", " (CUresult ", r, ")"));
    }
    initialized_ = true;
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<DeviceProperties>> Devices() override {
    if (auto s = InitOnce(); !s.ok()) return s;
    int n = 0;
    if (auto s = Check(api_.DeviceGetCount(&n), "cuDeviceGetCount"); !s.ok()) return s;
    std::vector<DeviceProperties> out;
    for (int i = 0; i < n; ++i) {
      CUdevice d = 0;
      if (auto s = Check(api_.DeviceGet(&d, i), "cuDeviceGet"); !s.ok()) return s;
      DeviceProperties p;
      p.index = i;
      char name[256] = {};
      api_.DeviceGetName(name, sizeof(name) - 1, d);
      p.name = name;
      size_t mem = 0;
      api_.DeviceTotalMem(&mem, d);
      p.memory_bytes = static_cast<int64_t>(mem);
      int major = 0, minor = 0, sms = 0, l2 = 0;
      api_.DeviceGetAttribute(&major, kAttrCcMajor, d);
      api_.DeviceGetAttribute(&minor, kAttrCcMinor, d);
      api_.DeviceGetAttribute(&sms, kAttrMultiprocessors, d);
      api_.DeviceGetAttribute(&l2, kAttrL2Bytes, d);
      // Hopper and later: the arch-specific target ("sm_90a") is what our
      // libraries are built for, and every device of that CC runs it.
      p.arch = absl::StrCat("sm_", major, minor, major >= 9 ? "a" : "");
      p.multiprocessors = sms;
      p.l2_bytes = l2;
      char bus[64] = {};
      if (api_.DeviceGetPCIBusId != nullptr && api_.DeviceGetPCIBusId(bus, sizeof(bus) - 1, d) == 0) p.pci_bus_id = bus;
      out.push_back(p);
    }
    return out;
  }

  absl::Status SetDevice(int index) override {
    auto devs = Devices();
    if (!devs.ok()) return devs.status();
    if (index < 0 || index >= static_cast<int>(devs->size())) {
      return absl::InvalidArgumentError(absl::StrCat("CUDA device ", index, " does not exist (", devs->size(), " seen)"));
    }
    CUdevice d = 0;
    if (auto s = Check(api_.DeviceGet(&d, index), "cuDeviceGet"); !s.ok()) return s;
    CUcontext ctx = nullptr;
    if (auto s = Check(api_.PrimaryCtxRetain(&ctx, d), "cuDevicePrimaryCtxRetain"); !s.ok()) return s;
    if (auto s = Check(api_.CtxSetCurrent(ctx), "cuCtxSetCurrent"); !s.ok()) return s;
    // Non-blocking: capturable, and independent of the legacy stream.
    stream_ = nullptr;
    late_writer_ = nullptr;  // its module belongs to the previous context
    return Check(api_.StreamCreate(&stream_, kStreamNonBlocking), "cuStreamCreate");
  }

  absl::StatusOr<void*> Alloc(size_t bytes) override {
    if (auto s = RequireDevice(); !s.ok()) return s;
    CUdeviceptr p = 0;
    if (auto s = Check(api_.MemAlloc(&p, bytes == 0 ? 1 : bytes), "cuMemAlloc"); !s.ok()) return s;
    return reinterpret_cast<void*>(p);
  }
  void Free(void* ptr) override {
    if (ptr) api_.MemFree(reinterpret_cast<CUdeviceptr>(ptr));
  }
  absl::Status CopyToDevice(void* dst, const void* src, size_t n) override {
    if (n == 0) return absl::OkStatus();
    if (auto s = Check(api_.MemcpyHtoDAsync(Ptr(dst), src, n, stream_), "cuMemcpyHtoD"); !s.ok()) return s;
    return Check(api_.StreamSynchronize(stream_), "cuStreamSynchronize");
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t n) override {
    if (n == 0) return absl::OkStatus();
    if (auto s = Check(api_.MemcpyDtoHAsync(dst, Ptr(src), n, stream_), "cuMemcpyDtoH"); !s.ok()) return s;
    return Check(api_.StreamSynchronize(stream_), "cuStreamSynchronize");
  }
  absl::Status CopyOnDevice(void* dst, const void* src, size_t n) override {
    if (n == 0) return absl::OkStatus();
    if (auto s = Check(api_.MemcpyDtoDAsync(Ptr(dst), Ptr(src), n, stream_), "cuMemcpyDtoD"); !s.ok()) return s;
    return Check(api_.StreamSynchronize(stream_), "cuStreamSynchronize");
  }
  absl::Status CopyOnDeviceAsync(void* dst, const void* src, size_t n) override {
    if (n == 0) return absl::OkStatus();
    return Check(api_.MemcpyDtoDAsync(Ptr(dst), Ptr(src), n, stream_), "cuMemcpyDtoDAsync");
  }
  absl::Status Memset(void* dst, uint8_t v, size_t n) override {
    if (n == 0) return absl::OkStatus();
    if (auto s = Check(api_.MemsetD8Async(Ptr(dst), v, n, stream_), "cuMemsetD8"); !s.ok()) return s;
    return Check(api_.StreamSynchronize(stream_), "cuStreamSynchronize");
  }
  void* stream() override { return stream_; }
  absl::Status Synchronize() override { return Check(api_.CtxSynchronize(), "cuCtxSynchronize"); }

  absl::StatusOr<void*> CreateEvent() override {
    CUevent e = nullptr;
    if (auto s = Check(api_.EventCreate(&e, 0), "cuEventCreate"); !s.ok()) return s;
    return e;
  }
  absl::Status Record(void* e) override { return Check(api_.EventRecord(e, stream_), "cuEventRecord"); }
  absl::StatusOr<double> ElapsedSeconds(void* a, void* b) override {
    if (auto s = Check(api_.EventSynchronize(b), "cuEventSynchronize"); !s.ok()) return s;
    float ms = 0;
    if (auto s = Check(api_.EventElapsedTime(&ms, a, b), "cuEventElapsedTime"); !s.ok()) return s;
    return ms * 1e-3;
  }
  void DestroyEvent(void* e) override {
    if (e) api_.EventDestroy(e);
  }

  absl::Status LaunchLateWriter(const LateWrite& w) override {
    if (auto s = RequireDevice(); !s.ok()) return s;
    if (api_.ModuleLoadData == nullptr || api_.ModuleGetFunction == nullptr || api_.LaunchKernelEx == nullptr) {
      return absl::UnimplementedError("this CUDA driver lacks cuLaunchKernelEx (needs 12.0+); no late writer");
    }
    if (late_writer_ == nullptr) {  // JIT-compiled once, on the primary context
      CUmodule m = nullptr;
      if (auto s = Check(api_.ModuleLoadData(&m, kLateWriterPtx), "cuModuleLoadData(late writer)"); !s.ok()) return s;
      if (auto s = Check(api_.ModuleGetFunction(&late_writer_, m, "mxval_late_writer"), "cuModuleGetFunction");
          !s.ok()) {
        return s;
      }
      int sms = 0;
      CUdevice d = 0;
      api_.CtxGetDevice(&d);
      api_.DeviceGetAttribute(&sms, kAttrMultiprocessors, d);
      late_writer_ctas_ = sms > 0 ? static_cast<unsigned>(sms) : 132;
    }
    CUdeviceptr d1 = Ptr(w.first.dst), s1 = Ptr(w.first.src), d2 = Ptr(w.second.dst), s2 = Ptr(w.second.src),
                stamps = Ptr(w.stamps);
    unsigned long long n1 = w.first.bytes, n2 = w.second.bytes,  // NOLINT: the kernel's u64 parameters
        delay = static_cast<unsigned long long>(std::max<int64_t>(w.delay_ns, 0));  // NOLINT
    void* params[] = {&d1, &s1, &n1, &d2, &s2, &n2, &delay, &stamps};
    CuLaunchAttribute attr{};
    attr.id = kLaunchAttrProgrammaticStreamSerialization;
    attr.value.programmatic_stream_serialization_allowed = 1;
    // One CTA of 256 threads per SM: small enough to leave room on every SM
    // for the kernel under test, which starts while these spin.
    CuLaunchConfig cfg{late_writer_ctas_, 1, 1, 256, 1, 1, 0, stream_, w.pdl ? &attr : nullptr, w.pdl ? 1u : 0u};
    return Check(api_.LaunchKernelEx(&cfg, late_writer_, params, nullptr), "cuLaunchKernelEx(late writer)");
  }

  absl::StatusOr<std::unique_ptr<DeviceGraph>> Capture(const std::function<absl::Status()>& body) override {
    if (auto s = RequireDevice(); !s.ok()) return s;
    if (auto s = Check(api_.StreamBeginCapture(stream_, kCaptureModeRelaxed), "cuStreamBeginCapture"); !s.ok()) {
      return s;
    }
    absl::Status inner = body();
    CUgraph g = nullptr;
    const CUresult end = api_.StreamEndCapture(stream_, &g);
    if (!inner.ok()) {
      if (g) api_.GraphDestroy(g);
      return inner;
    }
    if (auto s = Check(end, "cuStreamEndCapture"); !s.ok()) return s;
    CUgraphExec exec = nullptr;
    if (auto s = Check(api_.GraphInstantiate(&exec, g, 0), "cuGraphInstantiate"); !s.ok()) {
      api_.GraphDestroy(g);
      return s;
    }
    return std::unique_ptr<DeviceGraph>(new CudaGraph(&api_, g, exec, stream_));
  }

 private:
  static CUdeviceptr Ptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }
  absl::Status RequireDevice() const {
    if (stream_ == nullptr) return absl::FailedPreconditionError("SetDevice() was not called");
    return absl::OkStatus();
  }

  Api api_;
  bool initialized_ = false;
  CUstream stream_ = nullptr;
  CUfunction late_writer_ = nullptr;
  unsigned late_writer_ctas_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceRuntime>> OpenCudaRuntime() {
  auto api = LoadApi();
  if (!api.ok()) return api.status();
  auto rt = std::make_unique<CudaRuntime>(*api);
  if (auto s = rt->InitOnce(); !s.ok()) return s;
  return std::unique_ptr<DeviceRuntime>(std::move(rt));
}

}  // namespace mxval
