#include "validation/device_case.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "validation/abi_kernel.h"

namespace mxval {
namespace {


double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1) + 0.5)];
}

// RAII pair of events.
struct EventPair {
  DeviceRuntime& rt;
  void* a = nullptr;
  void* b = nullptr;
  explicit EventPair(DeviceRuntime& r) : rt(r) {}
  ~EventPair() {
    rt.DestroyEvent(a);
    rt.DestroyEvent(b);
  }
  absl::Status Create() {
    auto ea = rt.CreateEvent();
    if (!ea.ok()) return ea.status();
    a = *ea;
    auto eb = rt.CreateEvent();
    if (!eb.ok()) return eb.status();
    b = *eb;
    return absl::OkStatus();
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceCase>> DeviceCase::Upload(DeviceRuntime& rt, const CaseData& d) {
  std::unique_ptr<DeviceCase> c(new DeviceCase(rt, d));
  MXVAL_RETURN_IF_ERROR(c->AddSet());
  Set& s = c->sets_[0];
  MXVAL_RETURN_IF_ERROR(rt.CopyToDevice(s.x.get(), d.x_bf16.data(), d.x_bf16.size() * sizeof(uint16_t)));
  MXVAL_RETURN_IF_ERROR(rt.CopyToDevice(s.packed.get(), d.packed.data(), d.packed.size()));
  MXVAL_RETURN_IF_ERROR(rt.CopyToDevice(s.scales.get(), d.scales.data(), d.scales.size()));
  return c;
}

absl::Status DeviceCase::AddSet() {
  Set s;
  auto alloc = [&](DeviceBuffer& b, size_t bytes) -> absl::Status {
    auto r = DeviceBuffer::Allocate(rt_, bytes);
    if (!r.ok()) return r.status();
    b = std::move(*r);
    return absl::OkStatus();
  };
  MXVAL_RETURN_IF_ERROR(alloc(s.x, data_.x_bf16.size() * sizeof(uint16_t)));
  MXVAL_RETURN_IF_ERROR(alloc(s.packed, data_.packed.size()));
  MXVAL_RETURN_IF_ERROR(alloc(s.scales, data_.scales.size()));
  MXVAL_RETURN_IF_ERROR(alloc(s.y, data_.y_elems * sizeof(uint16_t)));
  if (!sets_.empty()) {  // a rotating copy of the inputs
    const Set& o = sets_[0];
    MXVAL_RETURN_IF_ERROR(rt_.CopyOnDevice(s.x.get(), o.x.get(), o.x.bytes()));
    MXVAL_RETURN_IF_ERROR(rt_.CopyOnDevice(s.packed.get(), o.packed.get(), o.packed.bytes()));
    MXVAL_RETURN_IF_ERROR(rt_.CopyOnDevice(s.scales.get(), o.scales.get(), o.scales.bytes()));
  }
  sets_.push_back(std::move(s));
  return absl::OkStatus();
}

absl::Status DeviceCase::Grow(DeviceBuffer& b, size_t bytes) {
  if (bytes <= b.bytes()) return absl::OkStatus();
  auto r = DeviceBuffer::Allocate(rt_, bytes);
  if (!r.ok()) return r.status();
  b = std::move(*r);
  return absl::OkStatus();
}

mxval_gemm_args DeviceCase::Args(const Set& s) const {
  return AbiArgsFor(data_, s.x.get(), static_cast<const uint8_t*>(s.packed.get()),
                    static_cast<const uint8_t*>(s.scales.get()), s.y.get(), s.workspace.get(), s.workspace.bytes(),
                    rt_.stream());
}

KernelFn DeviceCase::Kernel(const mxval_kernel* kernel, const TileConfig& config, uint32_t launch_flags) {
  const uint32_t flags = EffectiveFlags(kernel, launch_flags);
  return [this, kernel, config, flags](const CaseData& d, uint16_t* y) -> absl::Status {
    if (&d != &data_) return absl::InvalidArgumentError("DeviceCase::Kernel used with a different case");
    Set& s = sets_[0];
    const mxval_tile_config c = ToAbi(config);
    mxval_gemm_args a = Args(s);
    MXVAL_RETURN_IF_ERROR(Grow(s.workspace, kernel->workspace_size(&a, &c)));
    MXVAL_RETURN_IF_ERROR(rt_.Memset(s.workspace.get(), 0xFF, s.workspace.bytes()));
    const size_t y_bytes = d.y_elems * sizeof(uint16_t);
    MXVAL_RETURN_IF_ERROR(rt_.CopyToDevice(s.y.get(), y, y_bytes));  // poisoned
    a = Args(s);
    a.launch_flags = flags;
    if (flags & MXVAL_LAUNCH_PDL) {
      MXVAL_RETURN_IF_ERROR(Grow(late_x_, s.x.bytes()));
      MXVAL_RETURN_IF_ERROR(Grow(late_y_, y_bytes));
      MXVAL_RETURN_IF_ERROR(rt_.CopyOnDevice(late_x_.get(), s.x.get(), s.x.bytes()));
      MXVAL_RETURN_IF_ERROR(rt_.CopyToDevice(late_y_.get(), y, y_bytes));
      MXVAL_RETURN_IF_ERROR(rt_.Memset(s.x.get(), 0xFF, s.x.bytes()));  // bf16 NaN until the writer lands
      LateWrite w;
      w.first = {s.y.get(), late_y_.get(), y_bytes};
      w.second = {s.x.get(), late_x_.get(), s.x.bytes()};
      absl::Status st = rt_.LaunchLateWriter(w);
      if (st.ok()) st = Run(*kernel, a, config);
      if (!st.ok()) {
        // x must not stay poisoned for the timing runs and the other side.
        rt_.Synchronize().IgnoreError();
        rt_.CopyOnDevice(s.x.get(), late_x_.get(), s.x.bytes()).IgnoreError();
        return st;
      }
      MXVAL_RETURN_IF_ERROR(rt_.Synchronize());
      return rt_.CopyToHost(y, s.y.get(), y_bytes);
    }
    MXVAL_RETURN_IF_ERROR(Run(*kernel, a, config));
    MXVAL_RETURN_IF_ERROR(rt_.Synchronize());
    return rt_.CopyToHost(y, s.y.get(), d.y_elems * sizeof(uint16_t));
  };
}

absl::StatusOr<DeviceTiming> DeviceCase::Time(const mxval_kernel* kernel, const TileConfig& config,
                                              const TimingOptions& o, uint32_t launch_flags) {
  const mxval_tile_config c = ToAbi(config);
  const uint32_t flags = EffectiveFlags(kernel, launch_flags);
  mxval_gemm_args probe = Args(sets_[0]);
  probe.launch_flags = flags;
  MXVAL_RETURN_IF_ERROR(CanImplement(*kernel, probe, config));
  const size_t ws = kernel->workspace_size(&probe, &c);
  const int64_t set_bytes = static_cast<int64_t>(sets_[0].x.bytes() + sets_[0].packed.bytes() +
                                                 sets_[0].scales.bytes() + sets_[0].y.bytes() + ws);
  int64_t target = o.rotate_bytes;
  if (target <= 0) {
    int64_t l2 = 0;
    if (auto devs = rt_.Devices(); devs.ok())
      for (const auto& p : *devs) l2 = std::max(l2, p.l2_bytes);
    target = 3 * std::max<int64_t>(l2, 4 << 20);
  }
  int want = static_cast<int>(std::min<int64_t>((target + set_bytes - 1) / std::max<int64_t>(set_bytes, 1), o.max_sets));
  want = std::max<int>(1, std::min<int64_t>(want, o.max_rotate_bytes / std::max<int64_t>(set_bytes, 1)));
  while (static_cast<int>(sets_.size()) < want) MXVAL_RETURN_IF_ERROR(AddSet());
  const int nsets = std::max(1, std::min(want, static_cast<int>(sets_.size())));
  for (int i = 0; i < nsets; ++i) MXVAL_RETURN_IF_ERROR(Grow(sets_[i].workspace, ws));

  int next = 0;
  auto launch = [&]() -> absl::Status {
    const Set& s = sets_[next];
    next = (next + 1) % nsets;
    mxval_gemm_args a = Args(s);
    a.launch_flags = flags;
    return Run(*kernel, a, config);
  };
  for (int i = 0; i < std::max(o.warmup, nsets); ++i) MXVAL_RETURN_IF_ERROR(launch());
  MXVAL_RETURN_IF_ERROR(rt_.Synchronize());

  EventPair ev(rt_);
  MXVAL_RETURN_IF_ERROR(ev.Create());
  DeviceTiming t;
  t.buffer_sets = nsets;
  int L = o.launches_per_sample;
  if (L <= 0) {
    MXVAL_RETURN_IF_ERROR(rt_.Record(ev.a));
    MXVAL_RETURN_IF_ERROR(launch());
    MXVAL_RETURN_IF_ERROR(rt_.Record(ev.b));
    auto one = rt_.ElapsedSeconds(ev.a, ev.b);
    if (!one.ok()) return one.status();
    L = static_cast<int>(std::clamp(std::ceil(200e-6 / std::max(*one, 1e-7)), 1.0, 64.0));
  }
  t.launches_per_sample = L;
  auto body = [&]() -> absl::Status {
    for (int i = 0; i < L; ++i) MXVAL_RETURN_IF_ERROR(launch());
    return absl::OkStatus();
  };
  std::unique_ptr<DeviceGraph> graph;
  if (o.use_graph) {
    auto g = rt_.Capture(body);
    if (g.ok()) graph = std::move(*g);
  }
  t.graph = graph != nullptr;
  for (int s = 0; s < std::max(1, o.samples); ++s) {
    MXVAL_RETURN_IF_ERROR(rt_.Record(ev.a));
    MXVAL_RETURN_IF_ERROR(graph ? graph->Launch() : body());
    MXVAL_RETURN_IF_ERROR(rt_.Record(ev.b));
    auto dt = rt_.ElapsedSeconds(ev.a, ev.b);
    if (!dt.ok()) return dt.status();
    t.per_launch_seconds.push_back(*dt / L);
  }
  MXVAL_RETURN_IF_ERROR(rt_.Synchronize());
  t.median_s = Percentile(t.per_launch_seconds, 0.5);
  t.p10_s = Percentile(t.per_launch_seconds, 0.1);
  t.p90_s = Percentile(t.per_launch_seconds, 0.9);
  return t;
}

}  // namespace mxval
