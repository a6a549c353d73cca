#include "service/worker/task_runner.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/digest.h"
#include "common/inputs.h"
#include "common/tree_digest.h"
#include "kernels/python/manifest.h"
#include "common/stats.h"
#include "kernels/cpu/cpu_kernel_library.h"
#include "kernels/mxfp4/quantize.h"
#include "service/worker/child_results.h"
#include "validation/abi_kernel.h"
#include "validation/roofline.h"
#include "validation/validation_case.h"

namespace mxval {
namespace worker {
namespace {

v1::Verdict ToProto(reference::Verdict v) {
  switch (v) {
    case reference::Verdict::kPass: return v1::VERDICT_PASS;
    case reference::Verdict::kFailMismatch: return v1::VERDICT_FAIL_MISMATCH;
    case reference::Verdict::kFailNonFinite: return v1::VERDICT_FAIL_NON_FINITE;
    case reference::Verdict::kFailUnwritten: return v1::VERDICT_FAIL_UNWRITTEN;
    case reference::Verdict::kFailCatastrophic: return v1::VERDICT_FAIL_CATASTROPHIC;
    case reference::Verdict::kInvalid: return v1::VERDICT_INVALID;
    case reference::Verdict::kFailOutOfBounds: return v1::VERDICT_FAIL_OUT_OF_BOUNDS;
  }
  return v1::VERDICT_UNSPECIFIED;
}

void FillAccuracy(const reference::AccuracyReport& a, v1::Accuracy* out) {
  out->set_verdict(ToProto(a.verdict));
  out->set_reason(a.reason);
  out->set_checked(a.checked);
  out->set_max_abs_err(a.max_abs_err);
  out->set_max_rel_err(a.max_rel_err);
  out->set_rel_fro_err(a.rel_fro_err);
  out->set_cosine(a.cosine);
  out->set_nan_count(a.nan_count);
  out->set_inf_count(a.inf_count);
  out->set_unwritten_count(a.unwritten_count);
  out->set_mismatch_count(a.mismatch_count);
  out->set_mismatch_fraction(a.mismatch_fraction);
  out->set_accumulation_allowed(a.accumulation_allowed);
  for (const auto& e : a.first_mismatches) {
    v1::ElementError* p = out->add_first_mismatches();
    p->set_b(e.b);
    p->set_m(e.m);
    p->set_n(e.n);
    p->set_got(e.got);
    p->set_want(e.want);
  }
}

TileConfig FromProto(const v1::TileConfig& c) {
  return TileConfig{c.block_m(), c.block_n(), c.block_k(), c.ksplit() == 0 ? 1 : c.ksplit(),
                    c.num_stages() == 0 ? 2 : c.num_stages(), c.num_warps() == 0 ? 4 : c.num_warps()};
}

void SetError(v1::KernelRun* out, absl::string_view reason) {
  out->mutable_accuracy()->set_verdict(v1::VERDICT_ERROR);
  out->mutable_accuracy()->set_reason(std::string(reason));
}

// An ERROR from a kernel's run; `declined` when its can_implement refused.
void SetError(v1::KernelRun* out, const absl::Status& st) {
  SetError(out, st.message());
  out->set_declined(st.GetPayload(kDeclinedPayload).has_value());
}

const char* DeviceName(int32_t d) {
  return d == MXVAL_DEVICE_CUDA ? "CUDA" : d == MXVAL_DEVICE_HIP ? "HIP" : d == MXVAL_DEVICE_CPU ? "CPU" : "unknown";
}

// Device mirrors of the task's case, uploaded on first use and shared by
// both sides.
struct DeviceState {
  DeviceRuntime* runtime = nullptr;
  TimingOptions timing;
  std::unique_ptr<DeviceCase> mirror;
  // A device fault (INTERNAL from the runtime) leaves the context unusable:
  // later sides of the task are not run, and say why, instead of failing
  // with errors that would be blamed on them.
  std::string fault;
};

// A device side whose accuracy check ran: what TimeSides() times.
struct PendingTiming {
  const mxval_kernel* kernel = nullptr;
  TileConfig tile;
  uint32_t flags = 0;
  int repetitions = 1;
  v1::KernelRun* out = nullptr;
};

// The bytes a call must move at least: x and y once, the packed weights and
// their scales once (bench/gpu_bench.py's min_bytes).
double MinimalBytes(const GemmShape& s) {
  return s.B * s.M * s.K * 2.0 + s.B * s.N * (s.K / 2.0 + s.K / 32.0) + s.B * s.M * s.N * 2.0;
}

void FillRates(const CaseData& data, v1::Timing* t) {
  const GemmShape& s = data.spec.shape;
  t->set_tflops(s.Flops() / (t->median_us() * 1e-6) * 1e-12);
  t->set_gbps(MinimalBytes(s) / (t->median_us() * 1e-6) * 1e-9);
}

void SetTiming(const CaseData& data, const DeviceTiming& timing, v1::KernelRun* out) {
  v1::Timing* t = out->mutable_timing();
  t->set_graph(timing.graph);
  t->set_eager_reason(timing.eager_reason);
  t->set_median_us(timing.median_s * 1e6);
  t->set_p10_us(timing.p10_s * 1e6);
  t->set_p90_us(timing.p90_s * 1e6);
  FillRates(data, t);
  FillClock(timing.clock, t->mutable_clock());
}

}  // namespace

void FillRoofline(const Roofline& r, const GemmShape& shape, v1::TaskResult* result,
                  const std::vector<v1::KernelRun*>& device_sides) {
  v1::DeviceRoofline* d = result->mutable_roofline();
  d->set_copy_gbps(r.copy_bytes_per_s * 1e-9);
  d->set_bf16_tflops(r.bf16_flops_per_s * 1e-12);
  d->set_note(r.note);
  const double floor_s = FloorSeconds(r, shape.Flops(), MinimalBytes(shape));
  for (v1::KernelRun* run : device_sides) {
    v1::Timing* t = run->mutable_timing();
    if (floor_s <= 0 || t->median_us() <= 0) continue;
    t->set_floor_us(floor_s * 1e6);
    t->set_roofline_fraction(RooflineFraction(floor_s, t->median_us() * 1e-6));
  }
}

void FillClock(const ClockSummary& c, v1::ClockWindow* w) {
  w->Clear();
  w->set_source(c.source);
  w->set_note(c.note);
  w->set_samples(c.samples);
  w->set_sm_mhz_min(c.sm_mhz_min);
  w->set_sm_mhz_median(c.sm_mhz_median);
  w->set_sm_mhz_max(c.sm_mhz_max);
  w->set_event_reasons(c.reasons);
  for (const std::string& name : ClockReasonNames(c.reasons)) w->add_reasons(name);
  w->set_power_w_max(c.power_w_max);
  w->set_settle_s(c.settle_s);
  w->set_settled(c.settled);
  w->set_disturbed(c.Disturbed());
}

namespace {

// Adds `note` to the side's accuracy reason (the verdict stands).
void AppendReason(v1::KernelRun* out, absl::string_view note) {
  out->mutable_accuracy()->set_reason(
      absl::StrCat(out->accuracy().reason(), out->accuracy().reason().empty() ? "" : "; ", note));
}

// A failure to time is reported beside the accuracy, which stands; a device
// fault (INTERNAL) also marks the side as an error.
void TimingFailed(DeviceState& dev, const absl::Status& st, absl::string_view what, v1::KernelRun* out) {
  AppendReason(out, absl::StrCat(what, ": ", st.message()));
  if (st.code() == absl::StatusCode::kInternal) {
    dev.fault = std::string(st.message());
    SetError(out, absl::StrCat("device fault: ", out->accuracy().reason()));
  }
}

// Times one side alone.
void TimeOneSide(const CaseData& data, DeviceState& dev, const PendingTiming& p) {
  TimingOptions to = dev.timing;
  to.samples = std::max(to.samples, p.repetitions);
  auto timing = dev.mirror->Time(p.kernel, p.tile, to, p.flags);
  if (!timing.ok()) return TimingFailed(dev, timing.status(), "timing failed", p.out);
  SetTiming(data, *timing, p.out);
}

// Times the device sides of a task. Both sides together have their samples
// interleaved (DeviceCase::TimeInterleaved), so a candidate is never the one
// that always runs after the baseline: timed one after the other on the
// H200, the second side of a large-M task could run under the power cap the
// first ran into. If timing them together is refused, each is timed alone,
// so the refusal is reported on the side it belongs to. A device fault while
// both were timed cannot be pinned on one side: both are marked with it.
void TimeSides(const CaseData& data, DeviceState& dev, const std::vector<PendingTiming>& sides) {
  if (sides.size() == 2 && dev.fault.empty()) {
    TimingOptions to = dev.timing;
    to.samples = std::max({to.samples, sides[0].repetitions, sides[1].repetitions});
    auto both = dev.mirror->TimeInterleaved(
        {TimedKernel{sides[0].kernel, sides[0].tile, sides[0].flags}, TimedKernel{sides[1].kernel, sides[1].tile, sides[1].flags}},
        to);
    if (both.ok()) {
      for (size_t i = 0; i < 2; ++i) {
        SetTiming(data, (*both)[i], sides[i].out);
        sides[i].out->mutable_timing()->set_interleaved(true);
      }
      return;
    }
    if (both.status().code() == absl::StatusCode::kInternal) {
      for (const PendingTiming& p : sides)
        TimingFailed(dev, both.status(), "timing failed while both sides were timed together", p.out);
      return;
    }
  }
  for (const PendingTiming& p : sides) {
    if (!dev.fault.empty()) {  // its accuracy check ran before the fault and stands
      AppendReason(p.out, absl::StrCat("not timed: the device faulted in this task (", dev.fault, ")"));
      continue;
    }
    TimeOneSide(data, dev, p);
  }
}

// One side (baseline or candidate) of a task: the accuracy check, and for a
// host kernel its timing. A device side that ran is added to `pending`, to be
// timed with the other side by TimeSides().
void RunSide(const CaseData& data, const ReferenceOutput& reference, const CheckOptions& co, const v1::KernelRef& ref,
             const v1::TileConfig& config, const std::string& config_json, const std::string& entry,
             v1::LaunchMode launch, KernelResolver& kernels, DeviceState& dev, v1::KernelRun* out,
             std::vector<PendingTiming>* pending) {
  *out->mutable_kernel() = ref;
  out->set_launch(v1::LAUNCH_MODE_PLAIN);
  out->set_dispatch_entry(entry);
  *out->mutable_config() = config;
  out->set_config_json(config_json);
  // Wall time from here to the end of the correctness run: loading the
  // library (a Python library's imports) and the first call (a JIT
  // kernel's compilation) land in it.
  const absl::Time start = absl::Now();
  auto first_run_done = [&] { out->set_first_run_seconds(absl::ToDoubleSeconds(absl::Now() - start)); };
  auto kernel = kernels.Resolve(ref);
  if (!kernel.ok()) {
    out->mutable_accuracy()->set_verdict(v1::VERDICT_ERROR);
    out->mutable_accuracy()->set_reason(std::string(kernel.status().message()));
    return;
  }
  TileConfig tile = FromProto(config);
  tile.json = config_json;
  if (config.block_m() == 0 && config_json.empty()) {
    // No table gave this side a config (the planner leaves it unset for a
    // library whose declared configs the table's entry is not among): the
    // library's own first config that accepts the case.
    alignas(256) static uint16_t no_y[8];  // can_implement only looks at pointers, never writes
    const mxval_gemm_args probe = AbiArgsFor(data, data.x_bf16.data(), data.packed.data(), data.scales.data(), no_y,
                                             nullptr, 0, nullptr);
    auto chosen = FirstAcceptedConfig(**kernel, probe);
    if (!chosen.ok()) return SetError(out, chosen.status());
    tile = *chosen;
    v1::TileConfig* c = out->mutable_config();
    c->set_block_m(tile.block_m), c->set_block_n(tile.block_n), c->set_block_k(tile.block_k);
    c->set_ksplit(tile.ksplit), c->set_num_stages(tile.num_stages), c->set_num_warps(tile.num_warps);
  }
  const int32_t kdev = (*kernel)->device;
  v1::Timing* t = out->mutable_timing();
  if (kdev == MXVAL_DEVICE_CPU) {
    auto r = CheckKernel(data, HostAbiKernel(*kernel, tile), co, &reference);
    first_run_done();
    if (!r.ok()) return SetError(out, r.status());
    FillAccuracy(r->accuracy, out->mutable_accuracy());
    t->set_median_us(Percentile(r->kernel_times, 0.5) * 1e6);
    t->set_p10_us(Percentile(r->kernel_times, 0.1) * 1e6);
    t->set_p90_us(Percentile(r->kernel_times, 0.9) * 1e6);
    FillRates(data, t);
  } else {
    if (dev.runtime == nullptr || dev.runtime->kernel_device() != kdev) {
      return SetError(out, absl::StrCat("kernel '", (*kernel)->name, "' needs a ", DeviceName(kdev),
                                        " device; this executor has ",
                                        dev.runtime ? absl::StrCat("a ", dev.runtime->kind(), " device") : "none"));
    }
    if (!dev.fault.empty()) {
      return SetError(out, absl::StrCat("not run: the device faulted earlier in this task (", dev.fault, ")"));
    }
    if (dev.mirror == nullptr) {
      auto m = DeviceCase::Upload(*dev.runtime, data);
      if (!m.ok()) return SetError(out, absl::StrCat("uploading inputs: ", m.status().message()));
      dev.mirror = std::move(*m);
    }
    CheckOptions once = co;
    once.repetitions = 1;  // correctness run; timing is the harness's job
    const uint32_t flags =
        DeviceCase::EffectiveFlags(*kernel, launch == v1::LAUNCH_MODE_PDL ? uint32_t{MXVAL_LAUNCH_PDL} : 0u);
    if (flags & MXVAL_LAUNCH_PDL) out->set_launch(v1::LAUNCH_MODE_PDL);
    auto r = CheckKernel(data, dev.mirror->Kernel(*kernel, tile, flags), once, &reference);
    first_run_done();
    if (!r.ok()) {
      if (r.status().code() == absl::StatusCode::kInternal) {
        dev.fault = std::string(r.status().message());
        return SetError(out, absl::StrCat("device fault: ", r.status().message()));
      }
      return SetError(out, r.status());
    }
    FillAccuracy(r->accuracy, out->mutable_accuracy());
    if ((flags & MXVAL_LAUNCH_PDL) && out->accuracy().verdict() != v1::VERDICT_PASS) {
      out->mutable_accuracy()->set_reason(absl::StrCat(
          out->accuracy().reason(),
          " (launched with PDL right after a kernel that writes x late and poisons y again: reading x or writing y "
          "before griddepcontrol.wait fails here)"));
    }
    // A side that computes the wrong function is not timed: its time means
    // nothing, and a kernel that writes out of bounds can fault the device
    // while timed beside the other side, whose result would then be lost.
    if (out->accuracy().verdict() != v1::VERDICT_PASS) {
      return AppendReason(out, "not timed: it failed its correctness check");
    }
    pending->push_back(PendingTiming{*kernel, tile, flags, co.repetitions, out});
  }
}

}  // namespace

KernelResolver::KernelResolver(std::string kernel_dir, std::string builtin_dir, PythonLibraryLoader python_loader,
                               std::string scratch_dir, std::string library_cache)
    : dir_(std::move(kernel_dir)),
      builtin_dir_(std::move(builtin_dir)),
      cache_dir_(std::move(library_cache)),
      python_loader_(std::move(python_loader)),
      scratch_dir_(std::move(scratch_dir)) {}

KernelResolver::~KernelResolver() {
  for (const std::string& d : copies_) {
    std::error_code ec;
    std::filesystem::remove_all(d, ec);
  }
}

absl::StatusOr<std::unique_ptr<KernelLibrary>> KernelResolver::OpenExternal(const v1::KernelRef& ref) {
  const bool python = ref.format() == v1::LIBRARY_FORMAT_PYTHON;
  if (python && python_loader_ == nullptr) return OpenPython(ref, dir_);  // says why it cannot run here
  auto open = [&](const std::string& dir) {
    return python ? OpenPython(ref, dir) : KernelLibrary::OpenVerified(dir, ref.library(), ref.sha256());
  };
  absl::StatusOr<std::unique_ptr<KernelLibrary>> from_dir =
      absl::NotFoundError(absl::StrCat("library '", ref.library(), "' is not available on this worker (no --kernel-dir "
                                       "has it and it was not fetched from the coordinator)"));
  if (!dir_.empty()) {
    from_dir = open(dir_);
    // Only a missing library or one with another digest is looked for in the cache.
    if (from_dir.ok() || (!absl::IsNotFound(from_dir.status()) && !absl::IsPermissionDenied(from_dir.status()))) {
      return from_dir;
    }
  }
  if (cache_dir_.empty() || !IsSha256Hex(ref.sha256())) return from_dir;
  const std::string slot = absl::StrCat(cache_dir_, "/", ref.sha256());
  std::error_code ec;
  if (!std::filesystem::exists(slot, ec)) return from_dir;
  return open(slot);
}

absl::StatusOr<std::unique_ptr<KernelLibrary>> KernelResolver::OpenPython(const v1::KernelRef& ref,
                                                                          const std::string& dir) {
  const std::string& name = ref.library();
  if (absl::Status st = CheckExternalLibraryName(name); !st.ok()) return st;
  if (!IsSha256Hex(ref.sha256())) {
    return absl::InvalidArgumentError(absl::StrCat("library '", name, "': the task carries no valid SHA-256 digest ('",
                                                   ref.sha256().substr(0, 80), "'); only registered libraries run"));
  }
  if (python_loader_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "library '", name, "' is a Python kernel library and this task child runs no interpreter (a worker runs "
        "such tasks under its --python)"));
  }
  if (dir.empty()) return absl::NotFoundError(absl::StrCat("library '", name, "': this worker has no --kernel-dir"));
  std::error_code ec;
  const std::filesystem::path root = std::filesystem::canonical(dir, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("kernel directory '", dir, "': ", ec.message()));
  const std::filesystem::path src = std::filesystem::canonical(root / name, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("Python kernel library '", (root / name).string(), "': ", ec.message()));
  if (src.parent_path() != root || !std::filesystem::is_directory(src)) {
    return absl::PermissionDeniedError(absl::StrCat("Python kernel library '", (root / name).string(), "' resolves to '",
                                                    src.string(), "', not a directory inside the kernel directory"));
  }
  std::string base = scratch_dir_;
  if (base.empty()) {
    const char* t = std::getenv("TMPDIR");
    base = t != nullptr && *t != '\0' ? t : "/tmp";
  }
  std::string tmpl = absl::StrCat(base, "/mxval-pylib-XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create a private directory under '", base, "': ", strerror(errno)));
  }
  copies_.push_back(tmpl);
  const std::string copy = absl::StrCat(tmpl, "/", name);
  auto digest = CopyVerifiedTree(src.string(), copy, ref.sha256());
  if (!digest.ok()) {
    return absl::Status(digest.status().code(),
                        absl::StrCat("Python kernel library '", src.string(), "': ", digest.status().message()));
  }
  // The copy is the registered tree; its manifest is checked again here so
  // that the host imports only what the manifest parser accepts.
  auto manifest = python::LoadManifest(copy);
  if (!manifest.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("Python kernel library '", name, "': ", manifest.status().message()));
  }
  if (manifest->name != name) {
    return absl::InvalidArgumentError(
        absl::StrCat("Python kernel library '", name, "': its manifest names it '", manifest->name, "'"));
  }
  auto table = python_loader_(copy, name, ref.sha256());
  if (!table.ok()) {
    return absl::Status(table.status().code(),
                        absl::StrCat("Python kernel library '", name, "' did not load: ", table.status().message()));
  }
  return KernelLibrary::FromTable(*table);
}

absl::StatusOr<const mxval_kernel*> KernelResolver::Resolve(const v1::KernelRef& ref) {
  KernelLibrary* lib = nullptr;
  // External libraries are cached per digest: a re-registered build is a different library.
  const std::string key = absl::StrCat(ref.library(), "@", ref.sha256());
  for (auto& [name, l] : libraries_)
    if (name == key) lib = l.get();
  if (lib == nullptr) {
    absl::StatusOr<std::unique_ptr<KernelLibrary>> opened;
    if (ref.format() == v1::LIBRARY_FORMAT_PYTHON) {
      opened = OpenExternal(ref);
    } else if (ref.library() == "mxval-builtin-cpu") {
      opened = KernelLibrary::FromTable(cpu::CpuKernelLibrary());
    } else if (ref.library() == "mxval-builtin-cuda" || ref.library() == "mxval-builtin-hip") {
      if (builtin_dir_.empty()) {
        return absl::NotFoundError(absl::StrCat("kernel library '", ref.library(), "' is not built into this worker"));
      }
      opened = KernelLibrary::Open(absl::StrCat(builtin_dir_, "/libmxval_",
                                                ref.library() == "mxval-builtin-cuda" ? "cuda" : "hip", "_kernels.so"));
    } else if (!dir_.empty() || !cache_dir_.empty()) {
      // Only from the kernel directory or the fetched copies, only the registered bytes.
      opened = OpenExternal(ref);
    } else {
      return absl::NotFoundError(absl::StrCat("kernel library '", ref.library(), "' is not available on this worker"));
    }
    if (!opened.ok()) return opened.status();
    libraries_.emplace_back(key, std::move(*opened));
    lib = libraries_.back().second.get();
  }
  if (!ref.build_id().empty() && ref.build_id() != lib->build_id()) {
    return absl::FailedPreconditionError(absl::StrCat("library '", ref.library(), "' has build_id '", lib->build_id(),
                                                      "', the task asks for '", ref.build_id(), "'"));
  }
  return lib->Find(ref.kernel().empty() ? lib->kernels().front()->name : ref.kernel());
}

std::unique_ptr<ClockReader> OpenDeviceClocks(DeviceRuntime& runtime, int index, std::string* note) {
  if (runtime.kind() != "cuda") {
    *note = absl::StrCat("no clock reader for ", runtime.kind(), " devices");
    return nullptr;
  }
  auto devs = runtime.Devices();
  if (!devs.ok()) {
    *note = std::string(devs.status().message());
    return nullptr;
  }
  for (const DeviceProperties& p : *devs) {
    if (p.index != index) continue;
    auto clocks = OpenNvmlClocks(p.pci_bus_id);
    if (clocks.ok()) return std::move(*clocks);
    *note = std::string(clocks.status().message());
    return nullptr;
  }
  *note = absl::StrCat("device ", index, " not found");
  return nullptr;
}

absl::StatusOr<v1::TaskResult> RunTask(const v1::TaskSpec& task, KernelResolver& kernels, const TaskRunnerOptions& o) {
  const v1::Shape& sh = task.shape();
  CaseSpec spec;
  spec.op = sh.op() == v1::OP_KUP ? "kup" : sh.op() == v1::OP_VUP ? "vup" : "custom";
  spec.shape = {sh.b(), task.m(), sh.n(), sh.k()};
  spec.layout = sh.layout() == v1::OUTPUT_LAYOUT_BATCH_MAJOR ? OutputLayout::kBatchMajor : OutputLayout::kHeadMajor;
  spec.strided_x = sh.strided_x();
  spec.x_pitch_extra = sh.x_pitch_extra();
  spec.x_layout = sh.x_layout() == v1::X_LAYOUT_K_STRIDED ? XLayout::kKStrided
                  : sh.x_layout() == v1::X_LAYOUT_M_MAJOR ? XLayout::kMMajor
                                                          : XLayout::kKContiguous;
  spec.activations = task.activations() == v1::ACTIVATIONS_MXFP4_EVEN ? ActivationMode::kMxfp4Even : ActivationMode::kBf16;
  auto xg = ParseActivationGenerator(task.inputs().x_generator().empty() ? "normal" : task.inputs().x_generator());
  if (!xg.ok()) return absl::InvalidArgumentError(absl::StrCat("task.inputs.x_generator: ", xg.status().message()));
  auto wg = ParseGenerator(task.inputs().w_generator().empty() ? "normal" : task.inputs().w_generator());
  if (!wg.ok()) return absl::InvalidArgumentError(absl::StrCat("task.inputs.w_generator: ", wg.status().message()));
  auto rule = mxfp4::ParseScaleRule(task.inputs().w_scale_rule().empty() ? "even" : task.inputs().w_scale_rule());
  if (!rule.ok()) return absl::InvalidArgumentError(absl::StrCat("task.inputs.w_scale_rule: ", rule.status().message()));
  // Empty: a task planned before special values existed.
  auto specials = ParseSpecialValues(task.inputs().special_values().empty() ? "none" : task.inputs().special_values());
  if (!specials.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("task.inputs.special_values: ", specials.status().message()));
  }
  spec.specials = *specials;
  spec.x_gen = *xg;
  spec.w_gen = *wg;
  spec.w_rule = *rule;
  spec.seed = task.inputs().seed() == 0 ? 1 : task.inputs().seed();
  auto data = CaseData::Build(spec, o.max_task_bytes);
  if (!data.ok()) return data.status();
  v1::TaskResult result;
  result.set_task_id(task.task_id());
  *result.mutable_shape() = sh;
  result.set_m(task.m());
  result.set_arch(task.arch());
  CheckOptions co;
  co.tolerance.atol = task.tolerance().atol();
  co.tolerance.rtol = task.tolerance().rtol();
  co.tolerance.max_mismatch_fraction = task.tolerance().max_mismatch_fraction();
  co.repetitions = std::max(1, task.repetitions());
  co.threads = o.threads;
  // One reference for both sides: they run on the same inputs.
  auto reference = ComputeReference(*data, co);
  if (!reference.ok()) return reference.status();
  DeviceState dev{o.runtime, o.device_timing, nullptr, ""};
  std::vector<PendingTiming> pending;
  RunSide(*data, *reference, co, task.baseline_kernel(), task.baseline_config(), task.baseline_config_json(),
          task.baseline_entry(), task.launch(), kernels, dev, result.mutable_baseline(), &pending);
  RunSide(*data, *reference, co, task.candidate_kernel(), task.candidate_config(), task.candidate_config_json(),
          task.candidate_entry(),
          task.candidate_launch() == v1::LAUNCH_MODE_UNSPECIFIED ? task.launch() : task.candidate_launch(), kernels, dev,
          result.mutable_candidate(), &pending);
  TimeSides(*data, dev, pending);
  if (o.device_faulted != nullptr) *o.device_faulted = !dev.fault.empty();
  // The device's ceilings, measured after the timings on a device that did
  // not fault: each timed device side gets its floor and fraction. Like the
  // timings, they wait first (at most settle_max) for the board to come off
  // its power cap, which a large-M timing window can leave it at: ceilings
  // measured at a capped clock would read low and the fractions high.
  if (!pending.empty() && o.measure_roofline && dev.fault.empty()) {
    std::vector<v1::KernelRun*> sides;
    for (const PendingTiming& p : pending) sides.push_back(p.out);
    const TimingOptions& t = o.device_timing;
    if (o.on_checked) {
      v1::TaskResult checkpoint = result;
      checkpoint.mutable_roofline()->set_note(kRooflineInterruptedNote);
      o.on_checked(checkpoint);
    }
    SettledClockWindow window(t.clocks, t.settle_max, t.clock_poll, t.no_clock_note);
    const Roofline r = MeasureRoofline(*dev.runtime, o.roofline);
    const ClockSummary clock = window.Finish();
    FillRoofline(r, data->spec.shape, &result, sides);
    FillClock(clock, result.mutable_roofline()->mutable_clock());
  }
  return result;
}

}  // namespace worker
}  // namespace mxval
