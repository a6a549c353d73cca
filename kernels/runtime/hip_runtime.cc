// DeviceRuntime over the HIP runtime, reached with dlopen("libamdhip64.so").
//
// COMPILE-CHECKED ONLY: no AMD GPU was reachable where this was written, so
// this file has never run against a device. It uses only HIP entry points
// whose C signatures and enum values have been stable across ROCm 5 and 6
// (hipDeviceAttribute_t was renumbered in ROCm 6, so it is not used: the
// arch and CU count come from the KFD topology in sysfs instead).
#include <dlfcn.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/runtime/device_runtime.h"
#include "mxval/kernel_api.h"

namespace mxval {
namespace {

using hipError = int;
constexpr int kH2D = 1, kD2H = 2, kD2D = 3;
constexpr unsigned kStreamNonBlocking = 1;
constexpr int kCaptureModeRelaxed = 2;
constexpr hipError kErrorOutOfMemory = 2;

struct Api {
  void* handle = nullptr;
  hipError (*Init)(unsigned);
  const char* (*GetErrorString)(hipError);
  hipError (*GetDeviceCount)(int*);
  hipError (*DeviceGetName)(char*, int, int);
  hipError (*DeviceTotalMem)(size_t*, int);
  hipError (*SetDevice)(int);
  hipError (*Malloc)(void**, size_t);
  hipError (*Free)(void*);
  hipError (*MemcpyAsync)(void*, const void*, size_t, int, void*);
  hipError (*MemsetAsync)(void*, int, size_t, void*);
  hipError (*StreamCreateWithFlags)(void**, unsigned);
  hipError (*StreamSynchronize)(void*);
  hipError (*DeviceSynchronize)();
  hipError (*EventCreate)(void**);
  hipError (*EventRecord)(void*, void*);
  hipError (*EventSynchronize)(void*);
  hipError (*EventElapsedTime)(float*, void*, void*);
  hipError (*EventDestroy)(void*);
  hipError (*StreamBeginCapture)(void*, int);
  hipError (*StreamEndCapture)(void*, void**);
  hipError (*GraphInstantiate)(void**, void*, void**, char*, size_t);
  hipError (*GraphLaunch)(void*, void*);
  hipError (*GraphExecDestroy)(void*);
  hipError (*GraphDestroy)(void*);
};

template <typename F>
bool Bind(void* h, F*& fn, const char* name) {
  void* p = dlsym(h, name);
  if (p) fn = reinterpret_cast<F*>(p);
  return p != nullptr;
}

absl::StatusOr<Api> LoadApi() {
  Api a{};
  for (const char* lib : {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"}) {
    a.handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (a.handle) break;
  }
  if (a.handle == nullptr) return absl::UnavailableError("HIP runtime not found (dlopen libamdhip64.so failed)");
  void* h = a.handle;
  bool ok = Bind(h, a.Init, "hipInit") && Bind(h, a.GetErrorString, "hipGetErrorString") &&
            Bind(h, a.GetDeviceCount, "hipGetDeviceCount") && Bind(h, a.DeviceGetName, "hipDeviceGetName") &&
            Bind(h, a.DeviceTotalMem, "hipDeviceTotalMem") && Bind(h, a.SetDevice, "hipSetDevice") &&
            Bind(h, a.Malloc, "hipMalloc") && Bind(h, a.Free, "hipFree") &&
            Bind(h, a.MemcpyAsync, "hipMemcpyAsync") && Bind(h, a.MemsetAsync, "hipMemsetAsync") &&
            Bind(h, a.StreamCreateWithFlags, "hipStreamCreateWithFlags") &&
            Bind(h, a.StreamSynchronize, "hipStreamSynchronize") &&
            Bind(h, a.DeviceSynchronize, "hipDeviceSynchronize") && Bind(h, a.EventCreate, "hipEventCreate") &&
            Bind(h, a.EventRecord, "hipEventRecord") && Bind(h, a.EventSynchronize, "hipEventSynchronize") &&
            Bind(h, a.EventElapsedTime, "hipEventElapsedTime") && Bind(h, a.EventDestroy, "hipEventDestroy") &&
            Bind(h, a.StreamBeginCapture, "hipStreamBeginCapture") &&
            Bind(h, a.StreamEndCapture, "hipStreamEndCapture") && Bind(h, a.GraphInstantiate, "hipGraphInstantiate") &&
            Bind(h, a.GraphLaunch, "hipGraphLaunch") && Bind(h, a.GraphExecDestroy, "hipGraphExecDestroy") &&
            Bind(h, a.GraphDestroy, "hipGraphDestroy");
  if (!ok) {
    dlclose(h);
    return absl::UnavailableError("libamdhip64.so lacks a HIP entry point mxval needs");
  }
  return a;
}

std::map<std::string, std::string> ReadProperties(const std::string& path) {
  std::map<std::string, std::string> kv;
  std::ifstream in(path);
  std::string k, v;
  while (in >> k >> v) kv[k] = v;
  return kv;
}

}  // namespace

// gfx_target_version 90402 -> "gfx942", 90010 -> "gfx90a", 90500 -> "gfx950".
std::string GfxArchFromTargetVersion(int64_t v) {
  if (v <= 0) return "";
  const int64_t major = v / 10000, minor = (v / 100) % 100, step = v % 100;
  return absl::StrFormat("gfx%d%d%x", major, minor, step);
}

namespace {

struct KfdNode {
  std::string arch;
  int compute_units = 0;
};

// GPU nodes of the KFD topology in node order (the order HIP enumerates
// them when no *_VISIBLE_DEVICES filter is set).
std::vector<KfdNode> KfdGpuNodes() {
  std::vector<KfdNode> out;
  for (int i = 0; i < 256; ++i) {
    const std::string dir = absl::StrCat("/sys/class/kfd/kfd/topology/nodes/", i);
    auto kv = ReadProperties(dir + "/properties");
    if (kv.empty()) break;
    const int64_t target = kv.count("gfx_target_version") ? std::atoll(kv["gfx_target_version"].c_str()) : 0;
    if (target == 0) continue;  // a CPU node
    KfdNode n;
    n.arch = GfxArchFromTargetVersion(target);
    const int simd = kv.count("simd_count") ? std::atoi(kv["simd_count"].c_str()) : 0;
    const int per_cu = kv.count("simd_per_cu") ? std::atoi(kv["simd_per_cu"].c_str()) : 0;
    n.compute_units = per_cu > 0 ? simd / per_cu : 0;
    out.push_back(n);
  }
  return out;
}

class HipGraph : public DeviceGraph {
 public:
  HipGraph(const Api* api, void* g, void* e, void* s) : api_(api), graph_(g), exec_(e), stream_(s) {}
  ~HipGraph() override {
    api_->GraphExecDestroy(exec_);
    api_->GraphDestroy(graph_);
  }
  absl::Status Launch() override {
    if (hipError r = api_->GraphLaunch(exec_, stream_); r != 0) {
      return absl::InternalError(absl::StrCat("hipGraphLaunch: ", api_->GetErrorString(r)));
    }
    return absl::OkStatus();
  }

 private:
  const Api* api_;
  void *graph_, *exec_, *stream_;
};

class HipRuntime : public DeviceRuntime {
 public:
  explicit HipRuntime(Api api) : api_(api) {}
  std::string kind() const override { return "hip"; }
  int32_t kernel_device() const override { return MXVAL_DEVICE_HIP; }

  absl::Status Check(hipError r, const char* what) const {
    if (r == 0) return absl::OkStatus();
    const std::string msg = absl::StrCat(what, ": ", api_.GetErrorString(r), " (hipError ", r, ")");
    if (r == kErrorOutOfMemory) return absl::ResourceExhaustedError(msg);
    return absl::InternalError(msg);
  }

  absl::StatusOr<std::vector<DeviceProperties>> Devices() override {
    int n = 0;
    if (auto s = Check(api_.GetDeviceCount(&n), "hipGetDeviceCount"); !s.ok()) return s;
    const std::vector<KfdNode> nodes = KfdGpuNodes();
    std::vector<DeviceProperties> out;
    for (int i = 0; i < n; ++i) {
      DeviceProperties p;
      p.index = i;
      char name[256] = {};
      api_.DeviceGetName(name, sizeof(name) - 1, i);
      p.name = name;
      size_t mem = 0;
      api_.DeviceTotalMem(&mem, i);
      p.memory_bytes = static_cast<int64_t>(mem);
      if (nodes.size() == static_cast<size_t>(n)) {
        p.arch = nodes[i].arch;
        p.multiprocessors = nodes[i].compute_units;
      } else if (!nodes.empty() && std::all_of(nodes.begin(), nodes.end(),
                                               [&](const KfdNode& k) { return k.arch == nodes[0].arch; })) {
        p.arch = nodes[0].arch;  // a visibility filter is set, but the node is homogeneous
      } else {
        p.arch = "gfx-unknown";
      }
      out.push_back(p);
    }
    return out;
  }

  absl::Status SetDevice(int index) override {
    int n = 0;
    if (auto s = Check(api_.GetDeviceCount(&n), "hipGetDeviceCount"); !s.ok()) return s;
    if (index < 0 || index >= n) {
      return absl::InvalidArgumentError(absl::StrCat("HIP device ", index, " does not exist (", n, " seen)"));
    }
    if (auto s = Check(api_.SetDevice(index), "hipSetDevice"); !s.ok()) return s;
    return Check(api_.StreamCreateWithFlags(&stream_, kStreamNonBlocking), "hipStreamCreateWithFlags");
  }

  absl::StatusOr<void*> Alloc(size_t bytes) override {
    void* p = nullptr;
    if (auto s = Check(api_.Malloc(&p, bytes == 0 ? 1 : bytes), "hipMalloc"); !s.ok()) return s;
    return p;
  }
  void Free(void* p) override {
    if (p) api_.Free(p);
  }
  absl::Status Copy(void* dst, const void* src, size_t n, int kind, const char* what) {
    if (n == 0) return absl::OkStatus();
    if (auto s = Check(api_.MemcpyAsync(dst, src, n, kind, stream_), what); !s.ok()) return s;
    return Check(api_.StreamSynchronize(stream_), "hipStreamSynchronize");
  }
  absl::Status CopyToDevice(void* d, const void* s, size_t n) override { return Copy(d, s, n, kH2D, "hipMemcpy H2D"); }
  absl::Status CopyToHost(void* d, const void* s, size_t n) override { return Copy(d, s, n, kD2H, "hipMemcpy D2H"); }
  absl::Status CopyOnDevice(void* d, const void* s, size_t n) override { return Copy(d, s, n, kD2D, "hipMemcpy D2D"); }
  absl::Status CopyOnDeviceAsync(void* d, const void* s, size_t n) override {
    if (n == 0) return absl::OkStatus();
    return Check(api_.MemcpyAsync(d, s, n, kD2D, stream_), "hipMemcpyAsync D2D");
  }
  absl::Status Memset(void* d, uint8_t v, size_t n) override {
    if (n == 0) return absl::OkStatus();
    if (auto s = Check(api_.MemsetAsync(d, v, n, stream_), "hipMemsetAsync"); !s.ok()) return s;
    return Check(api_.StreamSynchronize(stream_), "hipStreamSynchronize");
  }
  void* stream() override { return stream_; }
  absl::Status Synchronize() override { return Check(api_.DeviceSynchronize(), "hipDeviceSynchronize"); }
  absl::StatusOr<void*> CreateEvent() override {
    void* e = nullptr;
    if (auto s = Check(api_.EventCreate(&e), "hipEventCreate"); !s.ok()) return s;
    return e;
  }
  absl::Status Record(void* e) override { return Check(api_.EventRecord(e, stream_), "hipEventRecord"); }
  absl::StatusOr<double> ElapsedSeconds(void* a, void* b) override {
    if (auto s = Check(api_.EventSynchronize(b), "hipEventSynchronize"); !s.ok()) return s;
    float ms = 0;
    if (auto s = Check(api_.EventElapsedTime(&ms, a, b), "hipEventElapsedTime"); !s.ok()) return s;
    return ms * 1e-3;
  }
  void DestroyEvent(void* e) override {
    if (e) api_.EventDestroy(e);
  }
  absl::Status LaunchLateWriter(const LateWrite&) override {
    return absl::UnimplementedError("HIP has no programmatic dependent launch; no late writer");
  }
  absl::StatusOr<std::unique_ptr<DeviceGraph>> Capture(const std::function<absl::Status()>& body) override {
    if (auto s = Check(api_.StreamBeginCapture(stream_, kCaptureModeRelaxed), "hipStreamBeginCapture"); !s.ok()) {
      return s;
    }
    absl::Status inner = body();
    void* g = nullptr;
    const hipError end = api_.StreamEndCapture(stream_, &g);
    if (!inner.ok()) {
      if (g) api_.GraphDestroy(g);
      return inner;
    }
    if (auto s = Check(end, "hipStreamEndCapture"); !s.ok()) return s;
    void* exec = nullptr;
    if (auto s = Check(api_.GraphInstantiate(&exec, g, nullptr, nullptr, 0), "hipGraphInstantiate"); !s.ok()) {
      api_.GraphDestroy(g);
      return s;
    }
    return std::unique_ptr<DeviceGraph>(new HipGraph(&api_, g, exec, stream_));
  }

 private:
  Api api_;
  void* stream_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceRuntime>> OpenHipRuntime() {
  auto api = LoadApi();
  if (!api.ok()) return api.status();
  if (hipError r = api->Init(0); r != 0) {
    return absl::UnavailableError(absl::StrCat("hipInit failed: ", api->GetErrorString(r)));
  }
  return std::unique_ptr<DeviceRuntime>(new HipRuntime(*api));
}

}  // namespace mxval
