#include "service/coordinator/job_planner.h"

#include <algorithm>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "absl/strings/str_format.h"
#include "common/inputs.h"
#include "absl/strings/str_join.h"
#include "kernels/dispatch/config_table.h"
#include "kernels/python/manifest.h"
#include "nlohmann/json.hpp"
#include "kernels/mxfp4/quantize.h"
#include "mxval/default_tables.h"
#include "service/coordinator/request_bounds.h"
#include "validation/presets.h"

namespace mxval {
namespace coordinator {
namespace {

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

const char* OpName(v1::Op op) {
  switch (op) {
    case v1::OP_KUP: return "kup";
    case v1::OP_VUP: return "vup";
    default: return "custom";
  }
}

v1::Op OpFromName(const std::string& s) { return s == "kup" ? v1::OP_KUP : s == "vup" ? v1::OP_VUP : v1::OP_CUSTOM; }

std::string DefaultLibrary(const std::string& arch) {
  if (arch == "cpu") return "mxval-builtin-cpu";
  if (arch.rfind("sm_", 0) == 0) return "mxval-builtin-cuda";
  return "mxval-builtin-hip";
}


// FNV-1a, 64-bit: stable across runs and builds (std::hash is not).
std::string StableHash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return absl::StrFormat("%016x", h);
}

std::string ConfigKey(const v1::TileConfig& c) {
  return absl::StrCat(c.block_m(), ".", c.block_n(), ".", c.block_k(), ".", c.ksplit(), ".", c.num_stages(), ".",
                      c.num_warps());
}

v1::TileConfig ToProto(const TileConfig& c) {
  v1::TileConfig p;
  p.set_block_m(c.block_m);
  p.set_block_n(c.block_n);
  p.set_block_k(c.block_k);
  p.set_ksplit(c.ksplit);
  p.set_num_stages(c.num_stages);
  p.set_num_warps(c.num_warps);
  return p;
}

// The kernel reference a task carries: for an external library, registered
// and at its registered build, with the registered digest stamped in.
absl::StatusOr<v1::KernelRef> ResolveKernelRef(const v1::KernelRef& k, const std::string& field,
                                               const PlannerOptions& o, const LibraryMap& libraries) {
  v1::KernelRef out = k;
  out.clear_sha256();
  out.clear_format();  // both come from the registration, never from the client
  if (k.library().empty() || o.builtin_libraries.count(k.library())) return out;
  auto it = libraries.find(k.library());
  if (it == libraries.end()) {
    return Bad(field + ".library", absl::StrCat("unknown kernel library '", k.library(),
                                                "': external libraries must be registered by an admin"
                                                " (mxval register-library)"));
  }
  if (k.build_id().empty()) {
    return Bad(field + ".build_id", absl::StrCat("required for external library '", k.library(), "'"));
  }
  if (k.build_id() != it->second.build_id()) {
    return Bad(field + ".build_id", absl::StrCat("'", k.build_id(), "' is not the registered build of '", k.library(),
                                                 "' ('", it->second.build_id(), "'); an admin registers new builds"));
  }
  out.set_sha256(it->second.sha256());
  out.set_format(it->second.format() == v1::LIBRARY_FORMAT_PYTHON ? v1::LIBRARY_FORMAT_PYTHON
                                                                   : v1::LIBRARY_FORMAT_SHARED_OBJECT);
  return out;
}

// A side in a Python kernel library: its manifest entry for the kernel the
// job names (or the library's only kernel), and the library's own table of
// that kernel (its config_table file, or its configs list, first config for
// every M) for a job that gives none.
struct PythonSide {
  python::KernelEntry kernel;
  ConfigTable table;
};

absl::StatusOr<std::optional<PythonSide>> ResolvePythonSide(v1::KernelRef* ref, const std::string& field,
                                                            const LibraryMap& libraries) {
  if (ref->format() != v1::LIBRARY_FORMAT_PYTHON) return std::optional<PythonSide>();
  auto found = libraries.find(ref->library());
  if (found == libraries.end()) return Bad(field + ".library", "not a registered Python library");
  const v1::KernelLibraryRegistration& reg = found->second;
  auto m = python::ParseManifest(reg.manifest_json());
  if (!m.ok()) return absl::InternalError(absl::StrCat("registered manifest of '", ref->library(), "': ", m.status().message()));
  std::vector<std::string> names;
  for (const python::KernelEntry& k : m->kernels) names.push_back(k.name);
  if (ref->kernel().empty()) {
    if (m->kernels.size() != 1) {
      return Bad(field + ".kernel", absl::StrCat("library '", ref->library(), "' has several kernels (",
                                                 absl::StrJoin(names, ", "), "): name one"));
    }
    ref->set_kernel(m->kernels[0].name);
  }
  for (const python::KernelEntry& k : m->kernels) {
    if (k.name != ref->kernel()) continue;
    ConfigTableOptions to;
    to.allow_unknown_keys = true;
    absl::StatusOr<ConfigTable> t;
    if (!k.config_table.empty()) {
      auto text = reg.kernel_tables().find(k.name);
      if (text == reg.kernel_tables().end()) {
        return absl::InternalError(absl::StrCat("registration of '", ref->library(), "' lacks kernel ", k.name, "'s table"));
      }
      t = ConfigTable::FromJsonText(text->second, to);
    } else {
      t = ConfigTable::FromJson(nlohmann::json{{"any", k.configs.front()}}, to);
    }
    if (!t.ok()) return absl::InternalError(absl::StrCat("table of ", ref->library(), "/", k.name, ": ", t.status().message()));
    return std::optional<PythonSide>(PythonSide{k, std::move(*t)});
  }
  return Bad(field + ".kernel", absl::StrCat("library '", ref->library(), "' has no kernel '", ref->kernel(),
                                             "' (has: ", absl::StrJoin(names, ", "), ")"));
}

// Whether a Python side's kernel runs on `arch` with `acts`.
// What a registered shared object declares of one kernel (declared_json).
struct DeclaredKernel {
  std::string library, name;
  std::vector<std::string> archs, activations;
  std::vector<v1::TileConfig> configs;  // empty: none declared (any config)

  // Whether `c` is one of the declared configs at reduction length K
  // (num_stages and num_warps compared only where both sides give them;
  // NUM_KSPLIT as a table lookup lowers it, to ceil(K / BLOCK_SIZE_K)).
  bool Declares(const v1::TileConfig& c, int64_t K) const {
    if (configs.empty()) return true;
    const auto splits = [K](const v1::TileConfig& t) {
      const int64_t kblocks = t.block_k() > 0 ? (K + t.block_k() - 1) / t.block_k() : 1;
      return std::min<int64_t>(std::max(1, t.ksplit()), kblocks);
    };
    for (const v1::TileConfig& d : configs) {
      if (d.block_m() == c.block_m() && d.block_n() == c.block_n() && d.block_k() == c.block_k() &&
          splits(d) == splits(c) &&
          (d.num_stages() == 0 || c.num_stages() == 0 || d.num_stages() == c.num_stages()) &&
          (d.num_warps() == 0 || c.num_warps() == 0 || d.num_warps() == c.num_warps())) {
        return true;
      }
    }
    return false;
  }
};

// The declared kernel a side names (or the library's only kernel, filled
// into ref->kernel); nullopt for a library with no declaration.
// INVALID_ARGUMENT naming field.kernel for a kernel it does not declare.
absl::StatusOr<std::optional<DeclaredKernel>> ResolveDeclaredSide(v1::KernelRef* ref, const std::string& field,
                                                                  const LibraryMap& libraries) {
  auto it = libraries.find(ref->library());
  if (it == libraries.end() || it->second.declared_json().empty()) return std::nullopt;
  const nlohmann::json d = nlohmann::json::parse(it->second.declared_json(), nullptr, false);
  if (!d.is_object() || !d.contains("kernels") || !d["kernels"].is_array()) return std::nullopt;  // checked at registration
  std::vector<std::string> names;
  for (const auto& k : d["kernels"])
    if (k.is_object() && k.contains("name") && k["name"].is_string()) names.push_back(k["name"].get<std::string>());
  if (ref->kernel().empty()) {
    if (names.size() != 1) {
      return Bad(field + ".kernel", absl::StrCat("library '", ref->library(), "' declares ", names.size(),
                                                 " kernels (", absl::StrJoin(names, ", "), "): name one"));
    }
    ref->set_kernel(names.front());
  }
  for (const auto& k : d["kernels"]) {
    if (!k.is_object() || k.value("name", "") != ref->kernel()) continue;
    DeclaredKernel out;
    out.library = ref->library();
    out.name = ref->kernel();
    for (const char* key : {"archs", "activations"}) {
      if (!k.contains(key) || !k[key].is_array()) continue;
      for (const auto& v : k[key])
        if (v.is_string()) (std::string(key) == "archs" ? out.archs : out.activations).push_back(v.get<std::string>());
    }
    if (k.contains("configs") && k["configs"].is_array()) {
      for (const auto& c : k["configs"]) {
        if (!c.is_object()) continue;
        v1::TileConfig t;
        const auto num = [&](const char* key) { return c.contains(key) && c[key].is_number_integer() ? c[key].get<int32_t>() : 0; };
        t.set_block_m(num("BLOCK_SIZE_M"));
        t.set_block_n(num("BLOCK_SIZE_N"));
        t.set_block_k(num("BLOCK_SIZE_K"));
        t.set_ksplit(num("NUM_KSPLIT"));
        t.set_num_stages(num("num_stages"));
        t.set_num_warps(num("num_warps"));
        out.configs.push_back(t);
      }
    }
    return out;
  }
  return Bad(field + ".kernel", absl::StrCat("library '", ref->library(), "' has no kernel '", ref->kernel(),
                                             "' (it declares ", absl::StrJoin(names, ", "), ")"));
}

// A side whose library declares its configs: a config the job gives it
// (`field`: its table or override) must be one of them, else
// INVALID_ARGUMENT naming the field. A built-in table's entry (`field`
// empty) it does not declare is cleared, and the worker runs the
// library's own first config that can_implement accepts.
absl::Status FitDeclaredConfigs(const std::optional<DeclaredKernel>& d, int64_t K, const std::string& field,
                                v1::TileConfig* c, std::string* json, std::string* entry) {
  if (!d || d->Declares(*c, K)) return absl::OkStatus();
  if (!field.empty()) {
    return Bad(field, absl::StrCat("entry '", *entry, "' gives ", d->library, "/", d->name, " config ", ConfigKey(*c),
                                   " (block_m.block_n.block_k.ksplit.stages.warps), which is not among the ",
                                   d->configs.size(), " configs the library declares"));
  }
  c->Clear();
  json->clear();
  *entry = absl::StrCat("own configs of ", d->library);
  return absl::OkStatus();
}

// A side's kernel must run on the arch and take the activation mode.
absl::Status CheckKernelRuns(const std::vector<std::string>& archs, const std::vector<std::string>& modes,
                             const v1::KernelRef& ref, const std::string& field, const std::string& arch,
                             v1::Activations acts) {
  if (std::find(archs.begin(), archs.end(), arch) == archs.end()) {
    return Bad(field, absl::StrCat("kernel ", ref.library(), "/", ref.kernel(), " runs on ", absl::StrJoin(archs, ","),
                                   ", not on '", arch, "'"));
  }
  const std::string mode = acts == v1::ACTIVATIONS_MXFP4_EVEN ? "mxfp4-even" : "bf16";
  if (std::find(modes.begin(), modes.end(), mode) == modes.end()) {
    return Bad("spec.activations", absl::StrCat("kernel ", ref.library(), "/", ref.kernel(), " supports ",
                                                absl::StrJoin(modes, ","), ", not ", mode));
  }
  return absl::OkStatus();
}

absl::Status CheckPythonSide(const std::optional<PythonSide>& side, const v1::KernelRef& ref, const std::string& field,
                             const std::string& arch, v1::Activations acts) {
  if (!side) return absl::OkStatus();
  return CheckKernelRuns(side->kernel.archs, side->kernel.activations, ref, field, arch, acts);
}


std::string PoolOf(const std::map<std::string, std::string>& pools, const std::string& arch) {
  auto it = pools.find(arch);
  return it == pools.end() ? "none" : it->second;
}

// The dedup key's part for a config: its six fields, and the JSON object
// when it carries more (a Python kernel's tuning keys): tables of the C
// kernels keep the keys they had before configs carried JSON.
std::string ConfigKeyWithExtras(const v1::TileConfig& c, const std::string& json) {
  const std::string extras = ConfigExtras(json, 1 << 20);
  return extras.empty() ? ConfigKey(c) : absl::StrCat(ConfigKey(c), "{", json, "}");
}

// Elements per row of x's storage: K-strided rows are twice as wide.
double XPitch(const v1::Shape& s) {
  return static_cast<double>((s.x_layout() == v1::X_LAYOUT_K_STRIDED ? 2 : 1) * s.k() +
                             (s.strided_x() ? s.x_pitch_extra() : 0));
}

// Estimated host bytes for one task (x f32 + bf16 with guards, weights,
// kernel output, reference and comparison copies).
int64_t TaskBytes(const v1::Shape& s, int64_t M) {
  const double pitch = XPitch(s);
  const double bytes = s.b() * (M + 3) * pitch * 6.0 + s.b() * s.n() * (s.k() / 2.0 + s.k() / 32.0 + 18) +
                       static_cast<double>(s.b()) * M * s.n() * 14.0;
  return bytes > 9e18 ? INT64_MAX : static_cast<int64_t>(bytes);
}

// The largest tensor of a task, in elements: x (with its pitch), w, y.
int64_t LargestTensor(const v1::Shape& s, int64_t M) {
  const double pitch = XPitch(s);
  const double e = std::max({s.b() * M * pitch, static_cast<double>(s.b()) * s.n() * s.k(),
                             static_cast<double>(s.b()) * M * s.n()});
  return e > 9e18 ? INT64_MAX : static_cast<int64_t>(e);
}

// Estimated device bytes of a GPU task: bf16 x with guards, packed w and
// scales, bf16 y, and an FP32 split-K workspace of the larger ksplit.
int64_t DeviceBytes(const v1::Shape& s, int64_t M, int64_t ksplit) {
  const double pitch = XPitch(s);
  const double bytes = s.b() * (M + 3) * pitch * 2.0 + s.b() * s.n() * (s.k() / 2.0 + s.k() / 32.0) +
                       static_cast<double>(s.b()) * M * s.n() * 2.0 +
                       (ksplit > 1 ? static_cast<double>(s.b()) * M * s.n() * 4.0 * ksplit : 0.0);
  return bytes > 9e18 ? INT64_MAX : static_cast<int64_t>(bytes);
}

}  // namespace

PlannerOptions PlannerOptions::WithBuiltinTables() {
  PlannerOptions o;
  o.default_tables["cpu"] = kDefaultCpuTableJson;
  o.default_tables["sm_90a"] = kDefaultSm90aTableJson;
  o.default_tables["gfx942"] = kDefaultGfx942TableJson;  // untuned, never run (no AMD GPU here)
  o.default_tables["gfx950"] = kDefaultGfx950TableJson;
  return o;
}

absl::StatusOr<JobPlan> PlanJob(const v1::JobSpec& spec, const PlannerOptions& o, const LibraryMap& libraries,
                                const std::map<std::string, std::string>& python_pools) {
  // Every string and list a caller stores is bounded (request_bounds.h), and
  // the whole spec, so a job (listed, watched, fetched) always fits in a message.
  if (spec.ByteSizeLong() > kMaxSpecBytes) {
    return Bad("spec", absl::StrCat(spec.ByteSizeLong(), " bytes; at most ", kMaxSpecBytes));
  }
  if (absl::Status st = CheckBounds(spec, "spec"); !st.ok()) return st;
  // Shapes: explicit ones, then presets.
  std::vector<v1::Shape> shapes;
  for (int i = 0; i < spec.shapes_size(); ++i) {
    const v1::Shape& s = spec.shapes(i);
    const std::string f = absl::StrCat("spec.shapes[", i, "]");
    if (s.op() == v1::OP_UNSPECIFIED || !v1::Op_IsValid(s.op())) return Bad(f + ".op", "must be OP_KUP, OP_VUP or OP_CUSTOM");
    if (s.b() < 1 || s.b() > 65535) return Bad(f + ".b", absl::StrCat(s.b(), " is not in [1, 65535]"));
    if (s.n() < 1 || s.n() > (1 << 20)) return Bad(f + ".n", absl::StrCat(s.n(), " is not in [1, 1048576]"));
    if (s.k() < 32 || s.k() % 32 != 0 || s.k() > (1 << 20)) {
      return Bad(f + ".k", absl::StrCat(s.k(), " is not a positive multiple of 32 (one E8M0 scale per 32)"));
    }
    if (!v1::OutputLayout_IsValid(s.layout())) return Bad(f + ".layout", "unknown layout");
    if (s.x_pitch_extra() < 0 || s.x_pitch_extra() > (1 << 16)) return Bad(f + ".x_pitch_extra", "must be in [0, 65536]");
    if (!v1::XLayout_IsValid(s.x_layout())) return Bad(f + ".x_layout", "unknown value");
    if (s.x_layout() == v1::X_LAYOUT_M_MAJOR && s.strided_x()) {
      return Bad(f + ".x_layout", "X_LAYOUT_M_MAJOR stores x (B, K, M): it has no row pitch, so not with strided_x");
    }
    shapes.push_back(s);
  }
  std::set<size_t> preset_shapes;  // indices into `shapes`
  for (int i = 0; i < spec.presets_size(); ++i) {
    auto preset = ShapePreset(spec.presets(i));
    if (!preset.ok()) return Bad(absl::StrCat("spec.presets[", i, "]"), std::string(preset.status().message()));
    for (const OpShape& p : *preset) {
      v1::Shape s;
      s.set_op(OpFromName(p.op));
      s.set_b(p.B);
      s.set_n(p.N);
      s.set_k(p.K);
      s.set_layout(p.layout == OutputLayout::kHeadMajor ? v1::OUTPUT_LAYOUT_HEAD_MAJOR : v1::OUTPUT_LAYOUT_BATCH_MAJOR);
      s.set_strided_x(p.strided_x);
      s.set_x_pitch_extra(p.x_pitch_extra);
      preset_shapes.insert(shapes.size());
      shapes.push_back(s);
    }
  }
  if (shapes.empty()) return Bad("spec.shapes", "empty: give shapes or presets");
  for (v1::Shape& s : shapes) {
    if (s.layout() == v1::OUTPUT_LAYOUT_UNSPECIFIED) {
      s.set_layout(s.op() == v1::OP_VUP ? v1::OUTPUT_LAYOUT_BATCH_MAJOR : v1::OUTPUT_LAYOUT_HEAD_MAJOR);
    }
  }
  if (spec.m_values().empty()) return Bad("spec.m_values", "empty");
  for (int i = 0; i < spec.m_values_size(); ++i) {
    if (spec.m_values(i) < 1 || spec.m_values(i) > o.max_m) {
      return Bad(absl::StrCat("spec.m_values[", i, "]"), absl::StrCat(spec.m_values(i), " is not in [1, ", o.max_m, "]"));
    }
  }
  if (!v1::Activations_IsValid(spec.activations())) return Bad("spec.activations", "unknown value");
  const v1::Activations acts =
      spec.activations() == v1::ACTIVATIONS_UNSPECIFIED ? v1::ACTIVATIONS_BF16 : spec.activations();
  if (!v1::LaunchMode_IsValid(spec.launch())) return Bad("spec.launch", "unknown value");
  if (!v1::LaunchMode_IsValid(spec.candidate_launch())) return Bad("spec.candidate_launch", "unknown value");
  const v1::LaunchMode launch = spec.launch() == v1::LAUNCH_MODE_PDL ? v1::LAUNCH_MODE_PDL : v1::LAUNCH_MODE_PLAIN;
  const v1::LaunchMode cand_launch = spec.candidate_launch() == v1::LAUNCH_MODE_UNSPECIFIED ? launch
                                     : spec.candidate_launch() == v1::LAUNCH_MODE_PDL      ? v1::LAUNCH_MODE_PDL
                                                                                           : v1::LAUNCH_MODE_PLAIN;

  // Inputs.
  v1::InputSpec inputs = spec.inputs();
  if (inputs.x_generator().empty()) inputs.set_x_generator("normal");
  if (inputs.w_generator().empty()) inputs.set_w_generator("normal");
  if (inputs.w_scale_rule().empty()) inputs.set_w_scale_rule("even");
  if (inputs.seed() == 0) inputs.set_seed(1);
  if (inputs.special_values().empty()) inputs.set_special_values("mixed");
  if (auto v = ParseSpecialValues(inputs.special_values()); !v.ok()) {
    return Bad("spec.inputs.special_values", std::string(v.status().message()));
  }
  if (auto g = ParseActivationGenerator(inputs.x_generator()); !g.ok()) return Bad("spec.inputs.x_generator", std::string(g.status().message()));
  if (auto g = ParseGenerator(inputs.w_generator()); !g.ok()) return Bad("spec.inputs.w_generator", std::string(g.status().message()));
  if (auto r = mxfp4::ParseScaleRule(inputs.w_scale_rule()); !r.ok()) {
    return Bad("spec.inputs.w_scale_rule", std::string(r.status().message()));
  }

  // Tolerance, repetitions, priority, deadline.
  v1::Tolerance tol = spec.tolerance();
  for (auto [name, v] : {std::pair{"atol", tol.atol()}, std::pair{"rtol", tol.rtol()},
                         std::pair{"max_mismatch_fraction", tol.max_mismatch_fraction()}}) {
    if (!(v >= 0) || !std::isfinite(v)) return Bad(absl::StrCat("spec.tolerance.", name), "must be finite and >= 0");
  }
  if (tol.max_mismatch_fraction() > 1) return Bad("spec.tolerance.max_mismatch_fraction", "must be <= 1");
  if (!spec.has_tolerance()) {
    tol.set_atol(1e-5);
    tol.set_rtol(1.6e-2);
  }
  const int reps = spec.repetitions() == 0 ? 10 : spec.repetitions();
  if (reps < 1 || reps > 1000) return Bad("spec.repetitions", absl::StrCat(spec.repetitions(), " is not in [1, 1000]"));
  if (spec.priority() < 0 || spec.priority() > 100) return Bad("spec.priority", "must be in [0, 100]");
  JobPlan plan;
  plan.priority = spec.priority();
  if (spec.has_deadline()) {
    if (absl::Status st = ValidateDeadline(spec.deadline()); !st.ok()) return st;
    plan.deadline = absl::Seconds(spec.deadline().seconds()) + absl::Nanoseconds(spec.deadline().nanos());
  }

  // Kernels and tables.
  auto base_ref = ResolveKernelRef(spec.baseline_kernel(), "spec.baseline_kernel", o, libraries);
  if (!base_ref.ok()) return base_ref.status();
  auto cand_ref = ResolveKernelRef(spec.has_candidate_kernel() ? spec.candidate_kernel() : spec.baseline_kernel(),
                                   spec.has_candidate_kernel() ? "spec.candidate_kernel" : "spec.baseline_kernel", o,
                                   libraries);
  if (!cand_ref.ok()) return cand_ref.status();
  auto base_py = ResolvePythonSide(&*base_ref, "spec.baseline_kernel", libraries);
  if (!base_py.ok()) return base_py.status();
  auto cand_py = ResolvePythonSide(&*cand_ref, spec.has_candidate_kernel() ? "spec.candidate_kernel" : "spec.baseline_kernel",
                                   libraries);
  if (!cand_py.ok()) return cand_py.status();
  auto base_decl = ResolveDeclaredSide(&*base_ref, "spec.baseline_kernel", libraries);
  if (!base_decl.ok()) return base_decl.status();
  auto cand_decl = ResolveDeclaredSide(&*cand_ref, spec.has_candidate_kernel() ? "spec.candidate_kernel" : "spec.baseline_kernel",
                                       libraries);
  if (!cand_decl.ok()) return cand_decl.status();
  // A Python kernel's table keeps every key for the kernel (it reads them);
  // a C kernel's refuses keys it cannot honour.
  std::optional<ConfigTable> base_table, cand_table;
  if (!spec.baseline_table().json().empty()) {
    ConfigTableOptions to;
    to.allow_unknown_keys = base_py->has_value();
    auto t = ConfigTable::FromJsonText(spec.baseline_table().json(), to);
    if (!t.ok()) return Bad("spec.baseline_table", std::string(t.status().message()));
    base_table = std::move(*t);
  } else if (base_py->has_value()) {
    base_table = (*base_py)->table;
  }
  if (!spec.candidate_table().json().empty()) {
    ConfigTableOptions to;
    to.allow_unknown_keys = cand_py->has_value();
    auto t = ConfigTable::FromJsonText(spec.candidate_table().json(), to);
    if (!t.ok()) return Bad("spec.candidate_table", std::string(t.status().message()));
    cand_table = std::move(*t);
  } else if (cand_py->has_value() && spec.has_candidate_kernel() && spec.baseline_table().json().empty()) {
    cand_table = (*cand_py)->table;  // a kernel change: each build under its own table
  }
  if (spec.has_candidate_override()) {
    const v1::TileConfig& c = spec.candidate_override();
    for (auto [name, v] : {std::pair{"block_m", c.block_m()}, std::pair{"block_n", c.block_n()},
                           std::pair{"block_k", c.block_k()}, std::pair{"ksplit", c.ksplit()}}) {
      if (v < 1 || v > 4096) return Bad(absl::StrCat("spec.candidate_override.", name), "must be in [1, 4096]");
    }
  }
  std::vector<std::string> archs(spec.target_archs().begin(), spec.target_archs().end());
  if (archs.empty()) archs = {"cpu"};
  std::set<std::string> seen_archs;
  for (size_t i = 0; i < archs.size(); ++i) {
    const std::string f = absl::StrCat("spec.target_archs[", i, "]");
    if (!o.known_archs.count(archs[i])) return Bad(f, absl::StrCat("unknown arch '", archs[i], "'"));
    if (!seen_archs.insert(archs[i]).second) return Bad(f, absl::StrCat("'", archs[i], "' listed twice"));
    if (absl::Status st = CheckPythonSide(*base_py, *base_ref, f, archs[i], acts); !st.ok()) return st;
    if (absl::Status st = CheckPythonSide(*cand_py, *cand_ref, f, archs[i], acts); !st.ok()) return st;
    for (const auto* d : {&*base_decl, &*cand_decl}) {
      if (!d->has_value()) continue;
      const v1::KernelRef& ref = d == &*base_decl ? *base_ref : *cand_ref;
      if (absl::Status st = CheckKernelRuns((*d)->archs, (*d)->activations, ref, f, archs[i], acts); !st.ok()) return st;
    }
  }

  // Layout probes: each preset shape once more at the smallest M (at most
  // 64), with x K-strided (see JobSpec.no_layout_probes). A probe never
  // makes a job invalid: one over a cap, or over the task limit, is left out.
  std::vector<v1::Shape> probes;
  if (!spec.no_layout_probes()) {
    for (const v1::Shape& s : shapes)
      if (s.x_layout() == v1::X_LAYOUT_UNSPECIFIED && preset_shapes.count(&s - shapes.data())) {
        probes.push_back(s);
        probes.back().set_x_layout(v1::X_LAYOUT_K_STRIDED);
        probes.back().set_layout_probe(true);
      }
  }
  const int64_t probe_m = std::min<int64_t>(64, *std::min_element(spec.m_values().begin(), spec.m_values().end()));
  if (static_cast<int64_t>(archs.size()) * (shapes.size() * spec.m_values_size() + probes.size()) > o.max_tasks_per_job) {
    probes.clear();
  }

  // Whether a side's configs come from the job (its own table, or the
  // baseline table the candidate shares) rather than the built-in table.
  const bool base_explicit = !spec.baseline_table().json().empty();
  const bool cand_explicit = !spec.candidate_table().json().empty() || (base_explicit && !cand_table);

  // Expansion.
  const int64_t total =
      static_cast<int64_t>(archs.size()) * (shapes.size() * spec.m_values_size() + probes.size());
  if (total > o.max_tasks_per_job) {
    return absl::ResourceExhaustedError(absl::StrCat("spec: expands to ", total, " tasks, over the limit of ",
                                                     o.max_tasks_per_job, " per job"));
  }
  for (const std::string& arch : archs) {
    std::optional<ConfigTable> builtin;
    if (!base_table || !cand_table) {
      auto it = o.default_tables.find(arch);
      if (it == o.default_tables.end()) {
        return Bad(base_table ? "spec.candidate_table" : "spec.baseline_table",
                   absl::StrCat("no built-in table for arch '", arch, "': pass one"));
      }
      auto t = ConfigTable::FromJsonText(it->second);
      if (!t.ok()) return absl::InternalError(absl::StrCat("built-in table for ", arch, ": ", t.status().message()));
      builtin = std::move(*t);
    }
    const ConfigTable& bt = base_table ? *base_table : *builtin;
    const ConfigTable& ct = cand_table ? *cand_table : bt;
    // One task of shape `s` at M; `where` names the shape and M in errors.
    auto plan_task = [&](const v1::Shape& s, int64_t M, const std::string& where) -> absl::Status {
      if (TaskBytes(s, M) > o.max_task_bytes) {
        return Bad(where,
                   absl::StrCat("B=", s.b(), " M=", M, " N=", s.n(), " K=", s.k(), " needs about ",
                                TaskBytes(s, M) >> 20, " MiB per task, over the cap of ", o.max_task_bytes >> 20,
                                " MiB"));
      }
      if (LargestTensor(s, M) > o.max_tensor_elements) {
        return Bad(where,
                   absl::StrCat("B=", s.b(), " M=", M, " N=", s.n(), " K=", s.k(), " has a tensor of ",
                                LargestTensor(s, M), " elements, over the cap of ", o.max_tensor_elements));
      }
      PlannedTask t;
      v1::TaskSpec& ts = t.spec;
      *ts.mutable_shape() = s;
      ts.set_m(M);
      ts.set_arch(arch);
      ts.set_activations(acts);
      ts.set_launch(launch);
      ts.set_candidate_launch(cand_launch);
      *ts.mutable_inputs() = inputs;
      *ts.mutable_tolerance() = tol;
      ts.set_repetitions(reps);
      auto be = bt.Lookup(OpName(s.op()), M, s.n(), s.k());
      if (!be.ok()) return Bad("spec.baseline_table", std::string(be.status().message()));
      v1::KernelRef bk = *base_ref;
      if (bk.library().empty()) bk.set_library(DefaultLibrary(arch));
      if (bk.kernel().empty()) bk.set_kernel(be->kernel);
      *ts.mutable_baseline_kernel() = bk;
      *ts.mutable_baseline_config() = ToProto(be->config);
      ts.set_baseline_config_json(be->config.json);
      ts.set_baseline_entry(be->name);
      v1::KernelRef ck = *cand_ref;
      if (ck.library().empty()) ck.set_library(DefaultLibrary(arch));
      if (spec.has_candidate_override()) {
        if (ck.kernel().empty()) ck.set_kernel(be->kernel);
        *ts.mutable_candidate_config() = spec.candidate_override();
        ts.set_candidate_entry("override");
      } else {
        auto ce = ct.Lookup(OpName(s.op()), M, s.n(), s.k());
        if (!ce.ok()) return Bad("spec.candidate_table", std::string(ce.status().message()));
        if (ck.kernel().empty()) ck.set_kernel(ce->kernel);
        *ts.mutable_candidate_config() = ToProto(ce->config);
        ts.set_candidate_config_json(ce->config.json);
        ts.set_candidate_entry(ce->name);
      }
      *ts.mutable_candidate_kernel() = ck;
      MXVAL_RETURN_IF_ERROR(FitDeclaredConfigs(*base_decl, s.k(), base_explicit ? "spec.baseline_table" : "",
                                               ts.mutable_baseline_config(), ts.mutable_baseline_config_json(),
                                               ts.mutable_baseline_entry()));
      MXVAL_RETURN_IF_ERROR(FitDeclaredConfigs(*cand_decl, s.k(),
                                               spec.has_candidate_override()         ? "spec.candidate_override"
                                               : !spec.candidate_table().json().empty() ? "spec.candidate_table"
                                               : cand_explicit ? "spec.baseline_table (the candidate's table too)"
                                                               : "",
                                               ts.mutable_candidate_config(), ts.mutable_candidate_config_json(),
                                               ts.mutable_candidate_entry()));
      if (arch != "cpu") {
        const int64_t ksplit = std::max(ts.baseline_config().ksplit(), ts.candidate_config().ksplit());
        if (DeviceBytes(s, M, ksplit) > o.max_device_bytes_per_task) {
          return Bad(where,
                     absl::StrCat("B=", s.b(), " M=", M, " N=", s.n(), " K=", s.k(), " KSPLIT=", ksplit,
                                  " needs about ", DeviceBytes(s, M, ksplit) >> 20,
                                  " MiB of device memory per task on ", arch, ", over the cap of ",
                                  o.max_device_bytes_per_task >> 20, " MiB"));
        }
      }
      t.dedup_key = StableHash(absl::StrCat(
          arch, "|", OpName(s.op()), "|", s.b(), "|", M, "|", s.n(), "|", s.k(), "|", s.layout(), "|", s.strided_x(),
          "|", s.x_pitch_extra(), "|", acts, "|", inputs.x_generator(), "|", inputs.w_generator(), "|",
          inputs.w_scale_rule(), "|", inputs.seed(), "|", tol.atol(), "|", tol.rtol(), "|", tol.max_mismatch_fraction(),
          "|", reps, "|", bk.library(), "/", bk.kernel(), "@", bk.build_id(), "#", bk.sha256(), "|", ConfigKeyWithExtras(ts.baseline_config(), ts.baseline_config_json()), "|",
          ck.library(), "/", ck.kernel(), "@", ck.build_id(), "#", ck.sha256(), "|", ConfigKeyWithExtras(ts.candidate_config(), ts.candidate_config_json()),
          // Plain launches keep the keys they had before launch modes existed.
          launch == v1::LAUNCH_MODE_PDL ? "|launch=pdl" : "",
          cand_launch != launch ? absl::StrCat("|candidate_launch=", cand_launch == v1::LAUNCH_MODE_PDL ? "pdl" : "plain")
                                : "",
          base_py->has_value() || cand_py->has_value() ? absl::StrCat("|python=", PoolOf(python_pools, arch)) : "",
          s.x_layout() != v1::X_LAYOUT_UNSPECIFIED ? absl::StrCat("|x_layout=", s.x_layout()) : "",
          inputs.special_values() != "none" ? absl::StrCat("|specials=", inputs.special_values()) : ""));
      plan.tasks.push_back(std::move(t));
      return absl::OkStatus();
    };
    for (size_t si = 0; si < shapes.size(); ++si)
      for (int mi = 0; mi < spec.m_values_size(); ++mi) {
        MXVAL_RETURN_IF_ERROR(plan_task(shapes[si], spec.m_values(mi),
                                        absl::StrCat("spec.shapes[", si, "] at m_values[", mi, "]")));
      }
    for (const v1::Shape& p : probes) plan_task(p, probe_m, "a layout probe").IgnoreError();
  }
  return plan;
}

}  // namespace coordinator
}  // namespace mxval
