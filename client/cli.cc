#include "client/cli.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <new>
#include <fstream>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/library_describe.h"
#include "client/flags.h"
#include "client/service_verbs.h"
#include "client/sweep.h"
#include "common/bounded_read.h"
#include "common/status_macros.h"
#include "common/tensor_io.h"
#include "kernels/mxfp4/quantize.h"
#include "reference/reference_gemm.h"
#include "service/worker/child_results.h"
#include "service/worker/task_child.h"
#include "service/worker/task_runner.h"
#include <iostream>
#include <iterator>

namespace mxval {
namespace {

// Maps a status to an exit code: caller-side problems are usage errors.
int ExitFor(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kOk: return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kResourceExhausted: return kExitUsage;
    default: return kExitInternal;
  }
}

int Fail(std::ostream& err, const std::string& verb, const absl::Status& st) {
  err << "mxval " << verb << ": " << st.message() << "\n";
  return ExitFor(st);
}

// Parses flags; returns -1 to continue, else the exit code (help or error).
int ParseOrExit(FlagSet& flags, const std::vector<std::string>& args, const std::string& verb, std::ostream& out,
                std::ostream& err) {
  absl::Status st = flags.Parse(args);
  if (!st.ok()) {
    err << "mxval " << verb << ": " << st.message() << "\n(see mxval " << verb << " --help)\n";
    return kExitUsage;
  }
  if (flags.help_requested()) {
    out << flags.Usage();
    return kExitOk;
  }
  return -1;
}

// What the tensor verbs (quantize, dequantize, reference, run on tensor files)
// may hold in memory at once: their inputs as loaded and converted, and their
// outputs. Checked from the files' headers before anything is allocated.
constexpr int64_t kMaxCliTensorMemoryBytes = int64_t{4} << 30;

// a * b, saturating at INT64_MAX (shapes from different files can overflow).
int64_t SatMul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  if (a > std::numeric_limits<int64_t>::max() / b) return std::numeric_limits<int64_t>::max();
  return a * b;
}
int64_t SatAdd(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max() : a + b;
}

// A tensor file's header, the error naming its flag.
absl::StatusOr<TensorInfo> PeekAs(const std::string& flag, const std::string& path) {
  auto t = PeekTensor(path);
  if (!t.ok()) return absl::Status(t.status().code(), absl::StrCat("--", flag, ": ", t.status().message()));
  return t;
}

int64_t Numel(const TensorInfo& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n = SatMul(n, d);
  return n;
}

std::string ShapeText(const std::vector<int64_t>& shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

// INVALID_ARGUMENT naming the inputs and what they would need when `bytes`
// passes kMaxCliTensorMemoryBytes.
absl::Status CheckMemory(const std::vector<std::pair<std::string, const TensorInfo*>>& inputs, const std::string& output,
                         int64_t bytes) {
  if (bytes <= kMaxCliTensorMemoryBytes) return absl::OkStatus();
  std::vector<std::string> names;
  for (const auto& [flag, t] : inputs) names.push_back(absl::StrCat("--", flag, " ", ShapeText(t->shape)));
  return absl::InvalidArgumentError(absl::StrCat(
      absl::StrJoin(names, ", "), ": ", output, " would need ",
      bytes == std::numeric_limits<int64_t>::max() ? std::string("more than 8 EiB") : absl::StrCat(bytes >> 20, " MiB"),
      " of memory with the inputs, over the cap of ", FormatBytes(kMaxCliTensorMemoryBytes)));
}

absl::StatusOr<HostTensor> LoadAs(const std::string& flag, const std::string& path, DType want) {
  auto t = LoadTensor(path, kMaxCliTensorMemoryBytes);
  if (!t.ok()) return absl::Status(t.status().code(), absl::StrCat("--", flag, ": ", t.status().message()));
  if (want == DType::kF32) {
    auto f = ToFloat32(*t);
    if (!f.ok()) return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", f.status().message()));
    return f;
  }
  if (t->dtype != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": expected dtype ", DTypeName(want), ", got ", DTypeName(t->dtype)));
  }
  return t;
}

int Quantize(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string input, rule = "even", out_packed, out_scales;
  FlagSet f("quantize", "Quantizes a float tensor [..., K] to MXFP4 along its last axis (K a multiple of 32).");
  f.String("input", &input, "float32 .npy (or .safetensors#name) tensor [..., K]", true);
  f.String("scale-rule", &rule, "floor | even | rceil");
  f.String("out-packed", &out_packed, "output .npy, uint8 [..., K/2]", true);
  f.String("out-scales", &out_scales, "output .npy, uint8 [..., K/32]", true);
  if (int rc = ParseOrExit(f, args, "quantize", out, err); rc >= 0) return rc;
  auto r = mxfp4::ParseScaleRule(rule);
  if (!r.ok()) return Fail(err, "quantize", absl::InvalidArgumentError(absl::StrCat("--scale-rule: ", r.status().message())));
  {
    auto xi = PeekAs("input", input);
    if (!xi.ok()) return Fail(err, "quantize", xi.status());
    const int64_t n = Numel(*xi);  // packed n/2 and scales n/32 bytes; f32 conversion n*4
    const int64_t bytes = SatAdd(SatAdd(xi->bytes, SatMul(n, 4)), n / 2 + n / 32);
    if (absl::Status st = CheckMemory({{"input", &*xi}}, "the packed output", bytes); !st.ok()) return Fail(err, "quantize", st);
  }
  auto x = LoadAs("input", input, DType::kF32);
  if (!x.ok()) return Fail(err, "quantize", x.status());
  if (x->shape.empty() || x->shape.back() % 32 != 0 || x->shape.back() == 0) {
    return Fail(err, "quantize", absl::InvalidArgumentError(absl::StrCat(
                                     "--input: last dimension must be a positive multiple of 32, shape is ", x->ShapeString())));
  }
  const int64_t K = x->shape.back(), rows = x->numel() / K;
  std::vector<int64_t> ps = x->shape, ss = x->shape;
  ps.back() = K / 2;
  ss.back() = K / 32;
  HostTensor packed = HostTensor::Zeros(DType::kU8, ps), scales = HostTensor::Zeros(DType::kU8, ss);
  absl::Status st = mxfp4::QuantizeRows(x->as<float>(), rows, K, K, *r, packed.as<uint8_t>(), K / 2, scales.as<uint8_t>(), K / 32);
  if (st.ok()) st = SaveNpy(out_packed, packed);
  if (st.ok()) st = SaveNpy(out_scales, scales);
  if (!st.ok()) return Fail(err, "quantize", st);
  out << "quantized " << x->ShapeString() << " with rule " << rule << " -> " << out_packed << " " << packed.ShapeString()
      << ", " << out_scales << " " << scales.ShapeString() << "\n";
  return kExitOk;
}

int Dequantize(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string packed_path, scales_path, out_path;
  FlagSet f("dequantize", "Dequantizes MXFP4 (packed uint8 [..., K/2] + scales uint8 [..., K/32]) to float32 [..., K].");
  f.String("packed", &packed_path, "uint8 .npy [..., K/2]", true);
  f.String("scales", &scales_path, "uint8 .npy [..., K/32]", true);
  f.String("out", &out_path, "output float32 .npy [..., K]", true);
  if (int rc = ParseOrExit(f, args, "dequantize", out, err); rc >= 0) return rc;
  {
    auto pi = PeekAs("packed", packed_path);
    if (!pi.ok()) return Fail(err, "dequantize", pi.status());
    auto si = PeekAs("scales", scales_path);
    if (!si.ok()) return Fail(err, "dequantize", si.status());
    const int64_t out_bytes = SatMul(Numel(*pi), 2 * 4);  // two fp32 values per packed byte
    const int64_t bytes = SatAdd(SatAdd(pi->bytes, si->bytes), out_bytes);
    if (absl::Status st = CheckMemory({{"packed", &*pi}, {"scales", &*si}}, "the float32 output", bytes); !st.ok()) {
      return Fail(err, "dequantize", st);
    }
  }
  auto p = LoadAs("packed", packed_path, DType::kU8);
  if (!p.ok()) return Fail(err, "dequantize", p.status());
  auto s = LoadAs("scales", scales_path, DType::kU8);
  if (!s.ok()) return Fail(err, "dequantize", s.status());
  std::vector<int64_t> lead_p(p->shape.begin(), p->shape.empty() ? p->shape.end() : p->shape.end() - 1);
  std::vector<int64_t> lead_s(s->shape.begin(), s->shape.empty() ? s->shape.end() : s->shape.end() - 1);
  if (p->shape.empty() || s->shape.empty() || lead_p != lead_s || p->shape.back() != s->shape.back() * 16 ||
      s->shape.back() == 0) {
    return Fail(err, "dequantize", absl::InvalidArgumentError(absl::StrCat(
                                       "--packed ", p->ShapeString(), " and --scales ", s->ShapeString(),
                                       " disagree: want [..., K/2] and [..., K/32] with the same leading dimensions")));
  }
  const int64_t K = s->shape.back() * 32, rows = s->numel() / s->shape.back();
  std::vector<int64_t> shape = lead_p;
  shape.push_back(K);
  HostTensor y = HostTensor::Zeros(DType::kF32, shape);
  absl::Status st = mxfp4::DequantizeRows(p->as<uint8_t>(), K / 2, s->as<uint8_t>(), K / 32, rows, K, y.as<float>(), K);
  if (st.ok()) st = SaveNpy(out_path, y);
  if (!st.ok()) return Fail(err, "dequantize", st);
  out << "dequantized -> " << out_path << " " << y.ShapeString() << "\n";
  return kExitOk;
}

int Reference(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string x_path, wp_path, ws_path, out_path, acts = "bf16", layout = "head-major";
  bool fp64 = false;
  int64_t threads = 0;
  FlagSet f("reference", "Computes the FP32 reference y = x . dequant(w)^T per batch.");
  f.String("x", &x_path, "float .npy activations [B, M, K] (rounded to bf16 as kernels see them)", true);
  f.String("w-packed", &wp_path, "uint8 .npy [B, N, K/2] (or file.safetensors#name)", true);
  f.String("w-scales", &ws_path, "uint8 .npy [B, N, K/32] (or file.safetensors#name)", true);
  f.String("out", &out_path, "output float32 .npy, [B, M, N] or [M, B, N]", true);
  f.String("activations", &acts, "bf16 | mxfp4-even");
  f.String("layout", &layout, "head-major ([B,M,N]) | batch-major ([M,B,N])");
  f.Bool("fp64", &fp64, "accumulate in FP64");
  f.Int("threads", &threads, "threads (0 = all)");
  if (int rc = ParseOrExit(f, args, "reference", out, err); rc >= 0) return rc;
  auto am = ParseActivationMode(acts);
  if (!am.ok()) return Fail(err, "reference", absl::InvalidArgumentError(absl::StrCat("--activations: ", am.status().message())));
  auto lay = ParseOutputLayout(layout);
  if (!lay.ok()) return Fail(err, "reference", absl::InvalidArgumentError(absl::StrCat("--layout: ", lay.status().message())));
  {
    auto xi = PeekAs("x", x_path);
    if (!xi.ok()) return Fail(err, "reference", xi.status());
    auto wpi = PeekAs("w-packed", wp_path);
    if (!wpi.ok()) return Fail(err, "reference", wpi.status());
    auto wsi = PeekAs("w-scales", ws_path);
    if (!wsi.ok()) return Fail(err, "reference", wsi.status());
    if (xi->shape.size() != 3 || wpi->shape.size() != 3 || wsi->shape.size() != 3) {
      return Fail(err, "reference", absl::InvalidArgumentError("--x, --w-packed and --w-scales must all be 3-D"));
    }
    // y is [B, M, N] fp32 (B, M from x; N from the weights); x is held as loaded and as fp32.
    const int64_t y_bytes = SatMul(SatMul(SatMul(xi->shape[0], xi->shape[1]), wpi->shape[1]), 4);
    const int64_t bytes = SatAdd(SatAdd(SatAdd(xi->bytes, SatMul(Numel(*xi), 4)), SatAdd(wpi->bytes, wsi->bytes)), y_bytes);
    const std::string out_desc = absl::StrCat("the output [", xi->shape[0], ", ", xi->shape[1], ", ", wpi->shape[1], "]");
    if (absl::Status st = CheckMemory({{"x", &*xi}, {"w-packed", &*wpi}, {"w-scales", &*wsi}}, out_desc, bytes); !st.ok()) {
      return Fail(err, "reference", st);
    }
  }
  auto x = LoadAs("x", x_path, DType::kF32);
  if (!x.ok()) return Fail(err, "reference", x.status());
  auto wp = LoadAs("w-packed", wp_path, DType::kU8);
  if (!wp.ok()) return Fail(err, "reference", wp.status());
  auto ws = LoadAs("w-scales", ws_path, DType::kU8);
  if (!ws.ok()) return Fail(err, "reference", ws.status());
  if (x->shape.size() != 3 || wp->shape.size() != 3 || ws->shape.size() != 3) {
    return Fail(err, "reference", absl::InvalidArgumentError("--x, --w-packed and --w-scales must all be 3-D"));
  }
  const GemmShape s{x->shape[0], x->shape[1], wp->shape[1], x->shape[2]};
  if (wp->shape[0] != s.B || ws->shape[0] != s.B || ws->shape[1] != s.N || wp->shape[2] * 2 != s.K ||
      ws->shape[2] * 32 != s.K) {
    return Fail(err, "reference", absl::InvalidArgumentError(absl::StrCat(
                                      "shapes disagree: --x ", x->ShapeString(), ", --w-packed ", wp->ShapeString(),
                                      ", --w-scales ", ws->ShapeString(), " (want [B,M,K], [B,N,K/2], [B,N,K/32])")));
  }
  if (absl::Status st = ValidateShape(s); !st.ok()) return Fail(err, "reference", st);
  const YStrides ys = YStrides::For(s, *lay);
  HostTensor y = HostTensor::Zeros(DType::kF32, *lay == OutputLayout::kHeadMajor
                                                    ? std::vector<int64_t>{s.B, s.M, s.N}
                                                    : std::vector<int64_t>{s.M, s.B, s.N});
  reference::ReferenceOptions opt;
  opt.activations = *am;
  opt.fp64_accumulate = fp64;
  opt.threads = static_cast<int>(threads);
  const WeightView w{wp->as<uint8_t>(), s.N * s.K / 2, s.K / 2, ws->as<uint8_t>(), s.N * s.K / 32, s.K / 32};
  absl::Status st = reference::ReferenceGemm(s, x->as<float>(), XStrides::Dense(s), w, y.as<float>(), ys, opt);
  if (st.ok()) st = SaveNpy(out_path, y);
  if (!st.ok()) return Fail(err, "reference", st);
  out << "reference B=" << s.B << " M=" << s.M << " N=" << s.N << " K=" << s.K << " (" << acts << ", " << layout
      << ") -> " << out_path << " " << y.ShapeString() << "\n";
  return kExitOk;
}

int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string preset = "glm5-tp4", shapes_text, ms_text = "1,4,16,64,256,1024,4096,8192", table_path, config_text,
              acts = "bf16", xgen = "normal", wgen = "normal", wrule = "even", json_path, ops_text = "kup,vup";
  int64_t seed = 1, reps = 3, threads = 0, sample_above = 4096, sample_rows = 512;
  double atol = 1e-5, rtol = 1.6e-2;
  FlagSet f("run",
            "Runs a local validation sweep of the CPU A16WFP4 kernel against the FP32 reference and prints a table.\n"
            "Exit code 0 if every case passes, 1 if any fails, 2 on bad arguments.");
  f.String("preset", &preset, absl::StrCat("shape preset: ", absl::StrJoin(PresetNames(), " | ")));
  f.String("shapes", &shapes_text, "custom shapes 'op:BxNxK[:layout],...' (replaces --preset)");
  f.String("ops", &ops_text, "ops of the preset to run: kup,vup");
  f.String("m", &ms_text, "comma-separated M values");
  f.String("table", &table_path, "dispatch table JSON (default: built-in kernels/configs/cpu.json)");
  f.String("config", &config_text, "use this config for every case, e.g. BM32_BN64_BK64_KS1");
  f.String("activations", &acts, "bf16 | mxfp4-even");
  f.String("x-gen", &xgen, "activation generator: normal[:sigma] | mxfp4-exact | heavy-tail[:p] | uniform-codes");
  f.String("w-gen", &wgen, "weight generator (then quantized with --w-rule): as --x-gen, or extreme-scales (E8M0 scale bytes 0/1/253/254 in two thirds of the (batch, group) pairs, x rescaled there)");
  f.String("w-rule", &wrule, "weight scale rule: floor | even | rceil");
  f.Int("seed", &seed, "input seed");
  f.Int("reps", &reps, "timed kernel repetitions (best is reported)");
  f.Int("threads", &threads, "threads (0 = all)");
  f.Int("sample-above", &sample_above, "check sampled rows only when M is larger than this");
  f.Int("sample-rows", &sample_rows, "rows checked in sampled mode");
  f.Double("atol", &atol, "absolute tolerance");
  f.Double("rtol", &rtol, "relative tolerance");
  f.String("json", &json_path, "also write results as JSON to this file");
  std::string w_packed_path, w_scales_path, file_op = "custom", file_layout = "head-major";
  f.String("w-packed", &w_packed_path, "validate on these weights: uint8 [B, N, K/2] .npy or file.safetensors#name");
  f.String("w-scales", &w_scales_path, "their E8M0 scales: uint8 [B, N, K/32] (with --w-packed)");
  f.String("w-op", &file_op, "op of the file weights, selects the table: kup | vup | custom");
  f.String("w-layout", &file_layout, "output layout for the file weights: head-major | batch-major");
  if (int rc = ParseOrExit(f, args, "run", out, err); rc >= 0) return rc;

  auto usage = [&](const absl::Status& st) {
    err << "mxval run: " << st.message() << "\n";
    return kExitUsage;
  };
  SweepOptions o;
  if (w_packed_path.empty() != w_scales_path.empty()) {
    return usage(absl::InvalidArgumentError("--w-packed and --w-scales go together"));
  }
  if (!w_packed_path.empty()) {
    if (!shapes_text.empty()) return usage(absl::InvalidArgumentError("--shapes: not with --w-packed (the file sets B, N, K)"));
    {
      auto wpi = PeekAs("w-packed", w_packed_path);
      if (!wpi.ok()) return usage(wpi.status());
      auto wsi = PeekAs("w-scales", w_scales_path);
      if (!wsi.ok()) return usage(wsi.status());
      // Each case's own buffers are capped when it is built (CaseData::Build).
      const int64_t bytes = SatAdd(wpi->bytes, wsi->bytes);
      if (absl::Status st = CheckMemory({{"w-packed", &*wpi}, {"w-scales", &*wsi}}, "the weights", bytes); !st.ok()) {
        return usage(st);
      }
    }
    auto wp = LoadAs("w-packed", w_packed_path, DType::kU8);
    if (!wp.ok()) return usage(wp.status());
    auto ws = LoadAs("w-scales", w_scales_path, DType::kU8);
    if (!ws.ok()) return usage(ws.status());
    if (wp->shape.size() == 2) wp->shape.insert(wp->shape.begin(), 1);
    if (ws->shape.size() == 2) ws->shape.insert(ws->shape.begin(), 1);
    if (wp->shape.size() != 3 || ws->shape.size() != 3 || wp->shape[0] != ws->shape[0] || wp->shape[1] != ws->shape[1] ||
        wp->shape[2] * 2 != ws->shape[2] * 32 || ws->shape[2] == 0) {
      return usage(absl::InvalidArgumentError(absl::StrCat("--w-packed ", wp->ShapeString(), " and --w-scales ",
                                                           ws->ShapeString(), " must be [B, N, K/2] and [B, N, K/32]")));
    }
    if (file_op != "kup" && file_op != "vup" && file_op != "custom") {
      return usage(absl::InvalidArgumentError("--w-op must be kup, vup or custom"));
    }
    auto lay = ParseOutputLayout(file_layout);
    if (!lay.ok()) return usage(absl::InvalidArgumentError(absl::StrCat("--w-layout: ", lay.status().message())));
    o.shapes = {OpShape{file_op, wp->shape[0], wp->shape[1], ws->shape[2] * 32, *lay, false, 0}};
    o.w_packed_file = std::make_shared<const std::vector<uint8_t>>(std::move(wp->data));
    o.w_scales_file = std::make_shared<const std::vector<uint8_t>>(std::move(ws->data));
  } else if (!shapes_text.empty()) {
    auto s = ParseShapes(shapes_text);
    if (!s.ok()) return usage(absl::InvalidArgumentError(absl::StrCat("--shapes: ", s.status().message())));
    o.shapes = *s;
  } else {
    auto s = ShapePreset(preset);
    if (!s.ok()) return usage(absl::InvalidArgumentError(absl::StrCat("--preset: ", s.status().message())));
    std::vector<std::string> ops = absl::StrSplit(ops_text, ',', absl::SkipEmpty());
    for (const std::string& op : ops) {
      if (op != "kup" && op != "vup") return usage(absl::InvalidArgumentError(absl::StrCat("--ops: unknown op '", op, "'")));
    }
    for (const OpShape& sh : *s)
      if (std::find(ops.begin(), ops.end(), sh.op) != ops.end()) o.shapes.push_back(sh);
    if (o.shapes.empty()) return usage(absl::InvalidArgumentError("--ops: selects no shape"));
  }
  auto ms = ParseIntList(ms_text, "--m");
  if (!ms.ok()) return usage(ms.status());
  o.ms = *ms;
  absl::StatusOr<ConfigTable> table = table_path.empty() ? ConfigTable::FromJsonText(DefaultCpuTableJson())
                                                         : ConfigTable::Load(table_path);
  if (!table.ok()) return usage(absl::InvalidArgumentError(absl::StrCat("--table: ", table.status().message())));
  o.table = &*table;
  if (!config_text.empty()) {
    auto c = ParseTileConfig(config_text);
    if (!c.ok()) return usage(absl::InvalidArgumentError(absl::StrCat("--config: ", c.status().message())));
    o.config_override = *c;
  }
  auto am = ParseActivationMode(acts);
  if (!am.ok()) return usage(absl::InvalidArgumentError(absl::StrCat("--activations: ", am.status().message())));
  o.activations = *am;
  auto xg = ParseActivationGenerator(xgen);
  if (!xg.ok()) return usage(absl::InvalidArgumentError(absl::StrCat("--x-gen: ", xg.status().message())));
  auto wg = ParseGenerator(wgen);
  if (!wg.ok()) return usage(absl::InvalidArgumentError(absl::StrCat("--w-gen: ", wg.status().message())));
  auto wr = mxfp4::ParseScaleRule(wrule);
  if (!wr.ok()) return usage(absl::InvalidArgumentError(absl::StrCat("--w-rule: ", wr.status().message())));
  if (reps < 1 || reps > 1000) return usage(absl::InvalidArgumentError("--reps must be in [1, 1000]"));
  if (threads < 0 || threads > 1024) return usage(absl::InvalidArgumentError("--threads must be in [0, 1024]"));
  if (!(atol >= 0) || !(rtol >= 0)) return usage(absl::InvalidArgumentError("--atol and --rtol must be >= 0"));
  if (sample_rows < 2) return usage(absl::InvalidArgumentError("--sample-rows must be >= 2"));
  o.x_gen = *xg;
  o.w_gen = *wg;
  o.w_rule = *wr;
  o.seed = static_cast<uint64_t>(seed);
  o.check.repetitions = static_cast<int>(reps);
  o.check.threads = static_cast<int>(threads);
  o.check.sample_above_m = sample_above;
  o.check.sample_rows = sample_rows;
  o.check.tolerance.atol = atol;
  o.check.tolerance.rtol = rtol;

  out << "mxval run: CPU A16WFP4 kernel vs FP32 reference; activations " << acts << ", x " << o.x_gen.ToString()
      << ", w " << (o.w_packed_file ? "from " + w_packed_path : o.w_gen.ToString() + " (" + wrule + ")") << ", seed "
      << seed << "\n"
      << FormatSweepHeader() << "\n";
  out.flush();
  const auto rows = RunSweep(o, [&](const SweepRow& r) {
    out << FormatSweepRow(r) << "\n";
    out.flush();
  });
  int failed = 0;
  for (const SweepRow& r : rows) failed += !r.passed();
  out << rows.size() - failed << " passed, " << failed << " failed\n";
  if (!json_path.empty()) {
    std::ofstream jf(json_path);
    jf << SweepToJson(o, rows).dump(2) << "\n";
    jf.close();
    if (!jf) return Fail(err, "run", absl::InternalError(absl::StrCat("cannot write --json file '", json_path, "'")));
  }
  return failed ? kExitFailed : kExitOk;
}

// Hidden: the worker's child process (service/worker/task_child.h).
int RunTaskChild(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const std::string self = SelfExePath();
  worker::TaskChildHooks hooks;
  hooks.builtin_dir = self.substr(0, self.rfind('/')) + "/../lib";
  return worker::RunTaskChildMain(args, std::cin, out, err, hooks);
}

struct Verb {
  const char* summary;
  int (*fn)(const std::vector<std::string>&, std::ostream&, std::ostream&);
};

const std::map<std::string, Verb>& Verbs() {
  static const auto* verbs = new std::map<std::string, Verb>{
      {"quantize", {"quantize a float tensor to MXFP4 (packed + E8M0 scales)", Quantize}},
      {"dequantize", {"dequantize MXFP4 back to float32", Dequantize}},
      {"reference", {"compute the FP32 reference GEMM on tensor files", Reference}},
      {"run", {"local validation sweep of the CPU kernel (shape presets, M lists, configs)", Run}},
      {"serve", {"run the coordinator (and, with --workers N, local workers) on a SQLite file", ServeVerb}},
      {"worker", {"run a worker daemon for a coordinator", WorkerVerb}},
      {"submit", {"submit a validation job to a coordinator (--wait for the report)", SubmitVerb}},
      {"get", {"print a job's report: table, json, junit or markdown", GetVerb}},
      {"triage", {"sort failing CI jobs into caused-by-this-change and unrelated, from their logs", TriageVerb}},
      {"demo", {"embedded service demo: coordinator + local workers, GLM-5 sweep, report", DemoVerb}},
      {"watch", {"stream a job's progress", [](const std::vector<std::string>& a, std::ostream& o, std::ostream& e) {
                   return AdminVerb("watch", a, o, e);
                 }}},
      {"cancel", {"cancel a job", [](const std::vector<std::string>& a, std::ostream& o, std::ostream& e) {
                    return AdminVerb("cancel", a, o, e);
                  }}},
      {"jobs", {"list jobs", [](const std::vector<std::string>& a, std::ostream& o, std::ostream& e) {
                  return AdminVerb("jobs", a, o, e);
                }}},
      {"workers", {"list workers", [](const std::vector<std::string>& a, std::ostream& o, std::ostream& e) {
                     return AdminVerb("workers", a, o, e);
                   }}},
      {"drain", {"drain or undrain a worker", [](const std::vector<std::string>& a, std::ostream& o, std::ostream& e) {
                   return AdminVerb("drain", a, o, e);
                 }}},
      {"register-library", {"register an external kernel library with its digest (admin)",
                            [](const std::vector<std::string>& a, std::ostream& o, std::ostream& e) {
                              return AdminVerb("register-library", a, o, e);
                            }}},
      {"unregister-library", {"remove a kernel library registration (admin)",
                              [](const std::vector<std::string>& a, std::ostream& o, std::ostream& e) {
                                return AdminVerb("unregister-library", a, o, e);
                              }}},
      {"libraries", {"list registered kernel libraries", [](const std::vector<std::string>& a, std::ostream& o,
                                                            std::ostream& e) { return AdminVerb("libraries", a, o, e); }}},
  };
  return *verbs;
}

std::string TopUsage() {
  std::string s = "usage: mxval <verb> [flags]   (mxval <verb> --help for its flags)\n\nverbs:\n";
  for (const auto& [name, v] : Verbs()) absl::StrAppend(&s, "  ", name, std::string(name.size() < 20 ? 20 - name.size() : 1, ' '), v.summary, "\n");
  absl::StrAppend(&s, "\nexit codes: 0 ok, 1 validation failed, 2 bad usage or input, 3 internal error or coordinator\n"
                     "unavailable, 4 a job NOT VALIDATED (a side could not run), 5 refused for a limit (retry later)\n");
  return s;
}

int RunCliUnguarded(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty()) {
    err << TopUsage();
    return kExitUsage;
  }
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    out << TopUsage();
    return kExitOk;
  }
  if (args[0] == "__run-task") return RunTaskChild(std::vector<std::string>(args.begin() + 1, args.end()), out, err);
  if (args[0] == "__describe-library") {
    return DescribeLibraryChild(std::vector<std::string>(args.begin() + 1, args.end()), out, err);
  }
  auto it = Verbs().find(args[0]);
  if (it == Verbs().end()) {
    err << "mxval: unknown verb '" << args[0] << "'\n" << TopUsage();
    return kExitUsage;
  }
  return it->second.fn(std::vector<std::string>(args.begin() + 1, args.end()), out, err);
}

}  // namespace

// The code is exception-free by design (absl::Status); what the standard
// library or a dependency still throws (bad_alloc, length_error,
// filesystem_error) is a bug to fix at its cause, and ends here as exit 3
// with a message instead of std::terminate's SIGABRT.
int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const std::string verb = args.empty() ? std::string("mxval") : "mxval " + args[0];
  try {
    return RunCliUnguarded(args, out, err);
  } catch (const std::bad_alloc&) {
    err << verb << ": internal error: out of memory (std::bad_alloc)\n";
  } catch (const std::exception& e) {
    err << verb << ": internal error: " << e.what() << "\n";
  } catch (...) {
    err << verb << ": internal error: unknown exception\n";
  }
  return kExitInternal;
}

}  // namespace mxval
