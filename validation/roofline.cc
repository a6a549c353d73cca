#include "validation/roofline.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/stats.h"
#include "kernels/runtime/dl_bind.h"

namespace mxval {
namespace {

// Times `body` (work queued on rt.stream()) between two events, warmup
// times untimed, then `samples` times; the per-sample seconds.
absl::StatusOr<std::vector<double>> TimeOnStream(DeviceRuntime& rt, int warmup, int samples,
                                                 const std::function<absl::Status()>& body) {
  auto e0 = rt.CreateEvent();
  if (!e0.ok()) return e0.status();
  auto e1 = rt.CreateEvent();
  if (!e1.ok()) {
    rt.DestroyEvent(*e0);
    return e1.status();
  }
  std::vector<double> out;
  absl::Status st;
  for (int i = 0; i < warmup + samples && st.ok(); ++i) {
    st = rt.Record(*e0);
    if (st.ok()) st = body();
    if (st.ok()) st = rt.Record(*e1);
    if (st.ok()) st = rt.Synchronize();
    if (!st.ok()) break;
    auto s = rt.ElapsedSeconds(*e0, *e1);
    if (!s.ok()) {
      st = s.status();
      break;
    }
    if (i >= warmup) out.push_back(*s);
  }
  rt.DestroyEvent(*e0);
  rt.DestroyEvent(*e1);
  if (!st.ok()) return st;
  return out;
}

// cuBLAS, reached with dlopen (cublas_api.h's values).
constexpr int kCublasOpN = 0, kCublasOpT = 1;
constexpr int kCudaR16BF = 14;
constexpr int kCublasCompute32F = 68;
constexpr int kCublasGemmDefault = -1;
struct CublasApi {
  int (*Create)(void** handle) = nullptr;
  int (*Destroy)(void* handle) = nullptr;
  int (*SetStream)(void* handle, void* stream) = nullptr;
  int (*GemmEx)(void* handle, int transa, int transb, int m, int n, int k, const void* alpha, const void* a, int atype,
                int lda, const void* b, int btype, int ldb, const void* beta, void* c, int ctype, int ldc,
                int compute, int algo) = nullptr;
};

// Loaded once per process and kept: unloading cuBLAS while the driver still
// holds its modules is not worth the risk.
absl::StatusOr<const CublasApi*> LoadCublas() {
  static const absl::StatusOr<const CublasApi*> api = []() -> absl::StatusOr<const CublasApi*> {
    void* h = nullptr;
    std::string tried;
    for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
      h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (h != nullptr) break;
      const char* e = dlerror();
      absl::StrAppend(&tried, tried.empty() ? "" : "; ", e ? e : name);
    }
    if (h == nullptr) return absl::UnavailableError(absl::StrCat("cuBLAS not found (", tried, ")"));
    auto* a = new CublasApi;
    if (!DlBind(h, a->Create, {"cublasCreate_v2"}) || !DlBind(h, a->Destroy, {"cublasDestroy_v2"}) ||
        !DlBind(h, a->SetStream, {"cublasSetStream_v2"}) || !DlBind(h, a->GemmEx, {"cublasGemmEx"})) {
      delete a;
      return absl::UnavailableError("cuBLAS lacks cublasCreate_v2 / cublasSetStream_v2 / cublasGemmEx");
    }
    return a;
  }();
  return api;
}

// Pseudo-random bf16 in about [-1, 1] (not constants: a GEMM on constant
// data draws less power and can run at a higher clock than real data).
std::vector<uint16_t> RandomBf16(size_t n, uint32_t seed) {
  std::vector<uint16_t> v(n);
  uint32_t s = seed;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    const float f = static_cast<float>(static_cast<int32_t>(s)) * (1.0f / 2147483648.0f);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    v[i] = static_cast<uint16_t>(bits >> 16);
  }
  return v;
}

}  // namespace

absl::Status FillRandomBf16(DeviceRuntime& rt, void* dst, size_t elems, uint32_t seed) {
  constexpr size_t kBlock = size_t{1} << 20;  // elements generated on the host
  const std::vector<uint16_t> block = RandomBf16(std::min(elems, kBlock), seed);
  if (absl::Status s = rt.CopyToDevice(dst, block.data(), block.size() * 2); !s.ok()) return s;
  auto* d = static_cast<uint8_t*>(dst);
  for (size_t done = block.size(); done < elems;) {  // double the filled prefix on the device
    const size_t n = std::min(done, elems - done);
    if (absl::Status s = rt.CopyOnDevice(d + done * 2, d, n * 2); !s.ok()) return s;
    done += n;
  }
  return absl::OkStatus();
}

absl::StatusOr<double> MeasureCopyBandwidth(DeviceRuntime& rt, int64_t bytes, int warmup, int samples) {
  if (bytes <= 0 || samples <= 0) return absl::InvalidArgumentError("copy bandwidth: bytes and samples must be positive");
  auto src = DeviceBuffer::Allocate(rt, static_cast<size_t>(bytes));
  if (!src.ok()) return src.status();
  auto dst = DeviceBuffer::Allocate(rt, static_cast<size_t>(bytes));
  if (!dst.ok()) return dst.status();
  if (absl::Status s = rt.Memset(src->get(), 0x3C, static_cast<size_t>(bytes)); !s.ok()) return s;
  auto t = TimeOnStream(rt, warmup, samples,
                        [&] { return rt.CopyOnDeviceAsync(dst->get(), src->get(), static_cast<size_t>(bytes)); });
  if (!t.ok()) return t.status();
  const double med = Percentile(*t, 0.5);
  if (!(med > 0)) return absl::InternalError("copy bandwidth: the copy took no measurable time");
  return 2.0 * static_cast<double>(bytes) / med;
}

absl::StatusOr<double> MeasureBf16GemmRate(DeviceRuntime& rt, int n, int warmup, int samples) {
  if (rt.kind() != "cuda") {
    return absl::UnimplementedError(absl::StrCat("no bf16 GEMM probe for ", rt.kind(), " devices"));
  }
  if (n <= 0 || n % 8 != 0 || samples <= 0) {
    return absl::InvalidArgumentError("bf16 GEMM rate: n must be a positive multiple of 8, samples positive");
  }
  auto api = LoadCublas();
  if (!api.ok()) return api.status();
  const CublasApi& b = **api;
  const size_t elems = static_cast<size_t>(n) * n, bytes = elems * 2;
  auto a_buf = DeviceBuffer::Allocate(rt, bytes);
  if (!a_buf.ok()) return a_buf.status();
  auto b_buf = DeviceBuffer::Allocate(rt, bytes);
  if (!b_buf.ok()) return b_buf.status();
  auto c_buf = DeviceBuffer::Allocate(rt, bytes);
  if (!c_buf.ok()) return c_buf.status();
  for (auto [buf, seed] : {std::pair<DeviceBuffer*, uint32_t>{&*a_buf, 1u}, {&*b_buf, 2u}}) {
    if (absl::Status s = FillRandomBf16(rt, buf->get(), elems, seed); !s.ok()) return s;
  }
  void* handle = nullptr;
  if (int rc = b.Create(&handle); rc != 0) return absl::InternalError(absl::StrCat("cublasCreate failed (status ", rc, ")"));
  absl::StatusOr<std::vector<double>> t = absl::InternalError("not run");
  if (int rc = b.SetStream(handle, rt.stream()); rc != 0) {
    t = absl::InternalError(absl::StrCat("cublasSetStream failed (status ", rc, ")"));
  } else {
    const float alpha = 1.0f, beta = 0.0f;
    // Square, so the orientation only picks cuBLAS's kernel, not the FLOPs:
    // "TN", the layout every BLAS serves fastest.
    t = TimeOnStream(rt, warmup, samples, [&]() -> absl::Status {
      const int rc = b.GemmEx(handle, kCublasOpT, kCublasOpN, n, n, n, &alpha, b_buf->get(), kCudaR16BF, n,
                              a_buf->get(), kCudaR16BF, n, &beta, c_buf->get(), kCudaR16BF, n, kCublasCompute32F,
                              kCublasGemmDefault);
      if (rc != 0) return absl::InternalError(absl::StrCat("cublasGemmEx failed (status ", rc, ")"));
      return absl::OkStatus();
    });
  }
  b.Destroy(handle);
  if (!t.ok()) return t.status();
  const double med = Percentile(*t, 0.5);
  if (!(med > 0)) return absl::InternalError("bf16 GEMM rate: the GEMM took no measurable time");
  return 2.0 * n * static_cast<double>(n) * n / med;
}

Roofline MeasureRoofline(DeviceRuntime& rt, const RooflineOptions& o) {
  Roofline r;
  int64_t bytes = o.copy_bytes;
  if (auto devs = rt.Devices(); devs.ok()) {
    for (const DeviceProperties& p : *devs) {
      if (p.memory_bytes > 0) bytes = std::min(bytes, p.memory_bytes / 16);
    }
  }
  auto bw = MeasureCopyBandwidth(rt, bytes, o.warmup, o.samples);
  if (bw.ok()) {
    r.copy_bytes_per_s = *bw;
    r.note = absl::StrFormat("copy: %.0f MiB device-to-device, median of %d", bytes / 1048576.0, o.samples);
  } else {
    r.note = absl::StrCat("copy bandwidth not measured: ", bw.status().message());
    return r;  // no floor without it
  }
  auto rate = MeasureBf16GemmRate(rt, o.gemm_n, o.warmup, o.samples);
  if (rate.ok()) {
    r.bf16_flops_per_s = *rate;
    absl::StrAppend(&r.note, absl::StrFormat("; bf16 GEMM: %d^3 through cuBLAS, median of %d", o.gemm_n, o.samples));
  } else {
    absl::StrAppend(&r.note, "; bf16 GEMM rate not measured (the floor is the memory floor alone): ",
                    rate.status().message());
  }
  return r;
}

double FloorSeconds(const Roofline& r, double flops, double bytes) {
  if (!(r.copy_bytes_per_s > 0)) return 0;
  const double mem = bytes / r.copy_bytes_per_s;
  return r.bf16_flops_per_s > 0 ? std::max(mem, flops / r.bf16_flops_per_s) : mem;
}

double RooflineFraction(double floor_s, double measured_s) {
  return floor_s > 0 && measured_s > 0 ? floor_s / measured_s : 0;
}

}  // namespace mxval
