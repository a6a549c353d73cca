// Named shape presets from the MLA "absorbed" projections of real models,
// per tensor-parallel rank (B = heads per rank).
//
//   glm5-tp4  B=16  kup: K=192 N=512 (q_nope inside q: x pitch 256), head-major
//                   vup: K=512 N=256, batch-major output
//   dsv3-tp8  B=16  kup: K=128 N=512 (x pitch 192), head-major
//                   vup: K=512 N=128, batch-major output
#ifndef MXVAL_VALIDATION_PRESETS_H_
#define MXVAL_VALIDATION_PRESETS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gemm_problem.h"

namespace mxval {

struct OpShape {
  std::string op;  // "kup", "vup" or "custom"
  int64_t B = 1, N = 1, K = 32;
  OutputLayout layout = OutputLayout::kHeadMajor;
  bool strided_x = false;
  int64_t x_pitch_extra = 0;
  XLayout x_layout = XLayout::kKContiguous;
  std::string ToString() const;  // "kup B=16 N=512 K=192 head-major"
};

// NOT_FOUND naming the known presets.
absl::StatusOr<std::vector<OpShape>> ShapePreset(const std::string& name);
std::vector<std::string> PresetNames();

// Parses "op:BxNxK[:layout]" items separated by commas, e.g.
// "kup:16x512x192,vup:16x256x512:batch-major". INVALID_ARGUMENT otherwise.
absl::StatusOr<std::vector<OpShape>> ParseShapes(const std::string& text);

// Parses a comma-separated list of positive integers ("1,4,16").
absl::StatusOr<std::vector<int64_t>> ParseIntList(const std::string& text, const std::string& what);

}  // namespace mxval

#endif  // MXVAL_VALIDATION_PRESETS_H_
