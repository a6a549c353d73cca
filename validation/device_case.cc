#include "validation/device_case.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/stats.h"
#include "common/status_macros.h"
#include "validation/abi_kernel.h"

namespace mxval {
namespace {


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
  MXVAL_RETURN_IF_ERROR(alloc(s.y, (data_.y_elems + 2 * kYGuardElems) * sizeof(uint16_t)));
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

// y begins kYGuardElems elements into its buffer.
void* DeviceCase::YOf(const Set& s) { return static_cast<uint16_t*>(s.y.get()) + kYGuardElems; }

mxval_gemm_args DeviceCase::Args(const Set& s) const {
  return AbiArgsFor(data_, s.x.get(), static_cast<const uint8_t*>(s.packed.get()),
                    static_cast<const uint8_t*>(s.scales.get()), YOf(s), s.workspace.get(), s.workspace.bytes(),
                    rt_.stream());
}

absl::Status DeviceCase::ArmGuards(const Set& s) {
  const std::vector<uint16_t> guard(kYGuardElems, kYGuardBf16Bits);
  const size_t bytes = kYGuardElems * sizeof(uint16_t);
  MXVAL_RETURN_IF_ERROR(rt_.CopyToDevice(s.y.get(), guard.data(), bytes));
  return rt_.CopyToDevice(static_cast<uint16_t*>(YOf(s)) + data_.y_elems, guard.data(), bytes);
}

absl::Status DeviceCase::CheckGuards(const Set& s) {
  std::vector<uint16_t> before(kYGuardElems), after(kYGuardElems);
  const size_t bytes = kYGuardElems * sizeof(uint16_t);
  MXVAL_RETURN_IF_ERROR(rt_.CopyToHost(before.data(), s.y.get(), bytes));
  MXVAL_RETURN_IF_ERROR(rt_.CopyToHost(after.data(), static_cast<uint16_t*>(YOf(s)) + data_.y_elems, bytes));
  int64_t nb = 0, na = 0;
  for (int64_t i = 0; i < kYGuardElems; ++i) nb += before[i] != kYGuardBf16Bits, na += after[i] != kYGuardBf16Bits;
  if (nb == 0 && na == 0) return absl::OkStatus();
  absl::Status st = absl::OutOfRangeError(absl::StrCat("wrote outside y on the device: ", nb,
                                                       " bf16 element(s) in the guard before its first, ", na,
                                                       " in the guard after its last"));
  st.SetPayload(kOutOfBoundsPayload, absl::Cord("device y"));
  return st;
}

KernelFn DeviceCase::Kernel(const mxval_kernel* kernel, const TileConfig& config, uint32_t launch_flags) {
  const uint32_t flags = EffectiveFlags(kernel, launch_flags);
  return [this, kernel, config, flags](const CaseData& d, uint16_t* y) -> absl::Status {
    if (&d != &data_) return absl::InvalidArgumentError("DeviceCase::Kernel used with a different case");
    Set& s = sets_[0];
    mxval_gemm_args a = Args(s);
    MXVAL_RETURN_IF_ERROR(Grow(s.workspace, WorkspaceSize(*kernel, a, config)));
    MXVAL_RETURN_IF_ERROR(rt_.Memset(s.workspace.get(), 0xFF, s.workspace.bytes()));
    const size_t y_bytes = d.y_elems * sizeof(uint16_t);
    MXVAL_RETURN_IF_ERROR(rt_.CopyToDevice(YOf(s), y, y_bytes));  // poisoned
    MXVAL_RETURN_IF_ERROR(ArmGuards(s));
    a = Args(s);
    a.launch_flags = flags;
    MXVAL_RETURN_IF_ERROR(CheckCanImplement(*kernel, a, config));  // with the arguments run() gets
    if (flags & MXVAL_LAUNCH_PDL) {
      MXVAL_RETURN_IF_ERROR(Grow(late_x_, s.x.bytes()));
      MXVAL_RETURN_IF_ERROR(Grow(late_y_, y_bytes));
      MXVAL_RETURN_IF_ERROR(rt_.CopyOnDevice(late_x_.get(), s.x.get(), s.x.bytes()));
      MXVAL_RETURN_IF_ERROR(rt_.CopyToDevice(late_y_.get(), y, y_bytes));
      MXVAL_RETURN_IF_ERROR(rt_.Memset(s.x.get(), 0xFF, s.x.bytes()));  // bf16 NaN until the writer lands
      LateWrite w;
      w.first = {YOf(s), late_y_.get(), y_bytes};
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
      MXVAL_RETURN_IF_ERROR(rt_.CopyToHost(y, YOf(s), y_bytes));
      return CheckGuards(s);
    }
    MXVAL_RETURN_IF_ERROR(Run(*kernel, a, config));
    MXVAL_RETURN_IF_ERROR(rt_.Synchronize());
    MXVAL_RETURN_IF_ERROR(rt_.CopyToHost(y, YOf(s), d.y_elems * sizeof(uint16_t)));
    return CheckGuards(s);
  };
}

absl::StatusOr<DeviceTiming> DeviceCase::Time(const mxval_kernel* kernel, const TileConfig& config,
                                              const TimingOptions& o, uint32_t launch_flags) {
  auto r = TimeInterleaved({TimedKernel{kernel, config, launch_flags}}, o);
  if (!r.ok()) return r.status();
  return std::move(r->front());
}

absl::StatusOr<std::vector<DeviceTiming>> DeviceCase::TimeInterleaved(const std::vector<TimedKernel>& sides,
                                                                      const TimingOptions& o) {
  if (sides.empty()) return absl::InvalidArgumentError("TimeInterleaved: no kernels to time");
  // Per side: its effective flags, launch cursor, launches per sample and graph.
  struct Side {
    const TimedKernel* k;
    uint32_t flags = 0;
    int next = 0;
    int L = 1;
    std::unique_ptr<DeviceGraph> graph;
    std::string eager_reason;
  };
  std::vector<Side> st(sides.size());
  size_t ws_max = 0;
  for (size_t i = 0; i < sides.size(); ++i) {
    Side& sd = st[i];
    sd.k = &sides[i];
    sd.flags = EffectiveFlags(sd.k->kernel, sd.k->launch_flags);
    mxval_gemm_args probe = Args(sets_[0]);
    probe.launch_flags = sd.flags;
    MXVAL_RETURN_IF_ERROR(CanImplement(*sd.k->kernel, probe, sd.k->config));
    ws_max = std::max(ws_max, WorkspaceSize(*sd.k->kernel, probe, sd.k->config));
  }
  const int64_t set_bytes = static_cast<int64_t>(sets_[0].x.bytes() + sets_[0].packed.bytes() +
                                                 sets_[0].scales.bytes() + sets_[0].y.bytes() + ws_max);
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
  for (int i = 0; i < nsets; ++i) MXVAL_RETURN_IF_ERROR(Grow(sets_[i].workspace, ws_max));

  auto launch = [&](Side& sd) -> absl::Status {
    const Set& s = sets_[sd.next];
    sd.next = (sd.next + 1) % nsets;
    mxval_gemm_args a = Args(s);
    a.launch_flags = sd.flags;
    return Run(*sd.k->kernel, a, sd.k->config);
  };
  auto body = [&](Side& sd) -> absl::Status {  // one sample's launches
    for (int i = 0; i < sd.L; ++i) MXVAL_RETURN_IF_ERROR(launch(sd));
    return absl::OkStatus();
  };
  EventPair ev(rt_);
  MXVAL_RETURN_IF_ERROR(ev.Create());
  for (Side& sd : st) {
    for (int i = 0; i < std::max(o.warmup, nsets); ++i) MXVAL_RETURN_IF_ERROR(launch(sd));
    MXVAL_RETURN_IF_ERROR(rt_.Synchronize());
    sd.L = o.launches_per_sample;
    if (sd.L <= 0) {
      MXVAL_RETURN_IF_ERROR(rt_.Record(ev.a));
      MXVAL_RETURN_IF_ERROR(launch(sd));
      MXVAL_RETURN_IF_ERROR(rt_.Record(ev.b));
      auto one = rt_.ElapsedSeconds(ev.a, ev.b);
      if (!one.ok()) return one.status();
      sd.L = static_cast<int>(std::clamp(std::ceil(200e-6 / std::max(*one, 1e-7)), 1.0, 64.0));
    }
    if (o.use_graph) {
      auto g = rt_.Capture([&]() { return body(sd); });
      if (g.ok()) {
        sd.graph = std::move(*g);
      } else {
        sd.eager_reason = absl::StrCat("graph capture failed: ", g.status().message());
      }
    } else {
      sd.eager_reason = "graph capture turned off";
    }
  }
  std::vector<DeviceTiming> out(st.size());
  for (size_t i = 0; i < st.size(); ++i) {
    out[i].buffer_sets = nsets;
    out[i].launches_per_sample = st[i].L;
    out[i].graph = st[i].graph != nullptr;
    out[i].eager_reason = st[i].eager_reason;
  }
  // The samples start off the power cap (where the clocks can be read) and
  // the clock is watched while they run.
  SettledClockWindow window(o.clocks, o.settle_max, o.clock_poll, o.no_clock_note);
  // Sample s visits the sides forward when s is even and backward when it is
  // odd (A B, B A, A B, ...), so neither side is always the one that runs
  // right after the other: drift and the board's power cap fall on both.
  const int n = static_cast<int>(st.size());
  for (int s = 0; s < std::max(1, o.samples); ++s) {
    for (int j = 0; j < n; ++j) {
      const int i = s % 2 == 0 ? j : n - 1 - j;
      Side& sd = st[i];
      MXVAL_RETURN_IF_ERROR(rt_.Record(ev.a));
      MXVAL_RETURN_IF_ERROR(sd.graph ? sd.graph->Launch() : body(sd));
      MXVAL_RETURN_IF_ERROR(rt_.Record(ev.b));
      auto dt = rt_.ElapsedSeconds(ev.a, ev.b);
      if (!dt.ok()) return dt.status();
      out[i].per_launch_seconds.push_back(*dt / sd.L);
    }
  }
  MXVAL_RETURN_IF_ERROR(rt_.Synchronize());
  const ClockSummary clock = window.Finish();
  for (DeviceTiming& t : out) {
    t.clock = clock;
    t.median_s = Percentile(t.per_launch_seconds, 0.5);
    t.p10_s = Percentile(t.per_launch_seconds, 0.1);
    t.p90_s = Percentile(t.per_launch_seconds, 0.9);
  }
  return out;
}

}  // namespace mxval
