// One validation case: inputs built with guard regions, a kernel run on
// poisoned outputs, the FP32 reference on the same inputs, and the verdict.
//
// Guards (so out-of-bounds reads fail loudly):
//   x       NaN rows past M (per batch), NaN in the row pitch past K and,
//           for a K-strided x, NaN between the elements of a row
//   scales  0xFF (NaN) groups past K/32 in every row; by default as many
//           as keep each row's stride as aligned as a dense row's (K/32
//           bytes), so a kernel that takes a vectorized scale path only on
//           aligned rows is validated on the path production runs
//   packed  0xFF bytes past K/2 in every row
//   y       poisoned (signalling NaN) before the kernel runs, with
//           kYGuardElems guard elements (kYGuardBf16Bits) before its first
//           and after its last element, checked after every run: a write
//           there is VERDICT_FAIL_OUT_OF_BOUNDS
//   workspace  (host kernels) poisoned with 0xFF bytes (NaN as fp32: its
//           contents are undefined on entry) and followed by a guard,
//           checked after every run
#ifndef MXVAL_VALIDATION_VALIDATION_CASE_H_
#define MXVAL_VALIDATION_VALIDATION_CASE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gemm_problem.h"
#include "common/inputs.h"
#include "kernels/dispatch/tile_config.h"
#include "kernels/mxfp4/mxfp4.h"
#include "reference/accuracy.h"

namespace mxval {

struct CaseSpec {
  std::string op = "custom";  // "kup", "vup" or "custom": selects the dispatch table
  GemmShape shape;
  ActivationMode activations = ActivationMode::kBf16;
  OutputLayout layout = OutputLayout::kHeadMajor;
  // x stored as (M, B, x_pitch) memory, viewed as (B, M, K) with strides
  // (x_pitch, B * x_pitch, 1), as q_nope is inside q in the model; else dense.
  bool strided_x = false;
  int64_t x_pitch_extra = 64;  // x_pitch = K + this when strided
  // x_stride_k != 1 (kernel_api.h allows it): K-strided rows of pitch
  // 2K (+ the extra when strided_x), or M-major (B, K + 1, M + guard_rows)
  // storage with a NaN row past K (not with strided_x).
  XLayout x_layout = XLayout::kKContiguous;
  GeneratorSpec x_gen;
  GeneratorSpec w_gen;
  mxfp4::ScaleRule w_rule = mxfp4::ScaleRule::kEven;
  // NaN/Inf inside K (common/inputs.h). Jobs default to mixed (the planner
  // sets it); a CaseSpec built in code to none.
  SpecialValues specials = SpecialValues::kNone;
  uint64_t seed = 1;
  int64_t guard_rows = 3;
  // Scale groups past K/32 per row (0xFF); < 0: DefaultScaleGuardGroups(K).
  int64_t guard_groups = -1;
  // Optional weights from files (e.g. a checkpoint's w_kc): dense uint8
  // (B, N, K/2) and (B, N, K/32). When set, w_gen and w_rule are unused;
  // the tensors are copied into guarded buffers like generated ones.
  std::shared_ptr<const std::vector<uint8_t>> w_packed_file, w_scales_file;
};

// The default scale guard: 2 x the largest power of two dividing K/32, so
// the guarded row stride (K/32 + guard bytes, and N times it per batch) has
// exactly the power-of-two alignment of the dense layout: 48-byte rows at
// K = 512 (dense 16), 10 at K = 192 (dense 6), 12 at K = 128 (dense 4).
// A fixed guard of 2 made every K = 512 row 18 bytes, 2-aligned where
// production rows are 16-aligned, so a kernel's 16-byte scale loads were
// never validated (BENCHMARKS.md, thirtieth session).
int64_t DefaultScaleGuardGroups(int64_t K);

struct OpShape;
// The case for one preset/custom shape at M (generators and seed defaulted).
CaseSpec SpecForShape(const OpShape& shape, int64_t M);

// Buffers for one case. Owns everything; views point inside.
struct CaseData {
  CaseSpec spec;
  std::vector<float> x_f32;      // with guards
  std::vector<uint16_t> x_bf16;  // same layout, bf16 bits
  XStrides xs;
  std::vector<uint8_t> packed, scales;
  WeightView w;
  YStrides ys;
  int64_t y_elems = 0;
  // Where the special values went (specials = mixed): the weight row
  // (special_b, special_n) with the NaN scale, and the x rows (b, m)
  // holding Inf/NaN. -1: none.
  int64_t special_b = -1, special_n = -1;
  std::vector<std::pair<int64_t, int64_t>> special_rows;
  bool IsSpecialOutput(int64_t b, int64_t m, int64_t n) const {
    if (b == special_b && n == special_n) return true;
    for (const auto& [rb, rm] : special_rows)
      if (rb == b && rm == m) return true;
    return false;
  }

  // INVALID_ARGUMENT for invalid shapes; RESOURCE_EXHAUSTED past max_bytes.
  static absl::StatusOr<CaseData> Build(const CaseSpec& spec, int64_t max_bytes = int64_t{8} << 30);
};

// Guard elements on each side of y and their bf16 pattern (a NaN payload
// no kernel computes, different from the in-range poison).
inline constexpr int64_t kYGuardElems = 256;
inline constexpr uint16_t kYGuardBf16Bits = 0x7FB7u;

// A kernel under test: writes y (bf16 bits, layout from the case) or fails.
// CheckKernel's y sits between host guards it checks itself; a kernel that
// runs on a device mirror keeps guards around its device y, and a host
// kernel one after its workspace: a KernelFn that finds its guards written
// returns a status carrying kOutOfBoundsPayload. CheckKernel turns either
// into kFailOutOfBounds.
using KernelFn = std::function<absl::Status(const CaseData&, uint16_t* y)>;
inline constexpr char kOutOfBoundsPayload[] = "mxval.dev/out-of-bounds";

struct CaseResult {
  reference::AccuracyReport accuracy;
  double kernel_seconds = 0;     // best of the timed repetitions
  std::vector<double> kernel_times;  // every repetition, seconds
  double reference_seconds = 0;
  int64_t rows_checked = 0;      // M, or the sampled row count
};

struct CheckOptions {
  reference::Tolerance tolerance;
  // Compute the reference on sampled rows only when M exceeds this.
  int64_t sample_above_m = 4096;
  int64_t sample_rows = 512;
  int repetitions = 1;           // kernel runs timed (first one is checked)
  int threads = 0;
};

// The FP32 reference of a case (sampled rows when M > sample_above_m).
struct ReferenceOutput {
  std::vector<float> want;     // y_elems, layout of the case; only `rows` filled when sampled
  std::vector<int64_t> rows;   // empty: every row
  double seconds = 0;
};
absl::StatusOr<ReferenceOutput> ComputeReference(const CaseData& data, const CheckOptions& options);

// Poisons y, runs the kernel, compares with `reference` (computed here when
// null; pass one to check several kernels on the same case without
// recomputing it). Errors: the kernel's own (e.g. INVALID_ARGUMENT).
absl::StatusOr<CaseResult> CheckKernel(const CaseData& data, const KernelFn& kernel, const CheckOptions& options,
                                       const ReferenceOutput* reference = nullptr);

}  // namespace mxval

#endif  // MXVAL_VALIDATION_VALIDATION_CASE_H_
