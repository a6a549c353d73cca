#include "common/inputs.h"

#include <cmath>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kernels/mxfp4/mxfp4.h"

namespace mxval {

std::string GeneratorSpec::ToString() const {
  switch (kind) {
    case GeneratorKind::kNormal: return param == 1.0 ? "normal" : absl::StrCat("normal:", param);
    case GeneratorKind::kMxfp4Exact: return "mxfp4-exact";
    case GeneratorKind::kHeavyTail: return param == 1e-3 ? "heavy-tail" : absl::StrCat("heavy-tail:", param);
    case GeneratorKind::kUniformCodes: return "uniform-codes";
    case GeneratorKind::kExtremeScales: return "extreme-scales";
  }
  return "?";
}

absl::StatusOr<SpecialValues> ParseSpecialValues(const std::string& s) {
  if (s == "none") return SpecialValues::kNone;
  if (s == "mixed") return SpecialValues::kMixed;
  return absl::InvalidArgumentError(absl::StrCat("special values '", s.substr(0, 64), "' is not one of none, mixed"));
}

absl::StatusOr<GeneratorSpec> ParseGenerator(const std::string& s) {
  GeneratorSpec g;
  std::string name = s, arg;
  if (size_t c = s.find(':'); c != std::string::npos) {
    name = s.substr(0, c);
    arg = s.substr(c + 1);
  }
  if (name == "normal") {
    g.kind = GeneratorKind::kNormal;
    g.param = 1.0;
  } else if (name == "heavy-tail") {
    g.kind = GeneratorKind::kHeavyTail;
    g.param = 1e-3;
  } else if (name == "mxfp4-exact" && arg.empty()) {
    g.kind = GeneratorKind::kMxfp4Exact;
  } else if (name == "uniform-codes" && arg.empty()) {
    g.kind = GeneratorKind::kUniformCodes;
  } else if (name == "extreme-scales" && arg.empty()) {
    g.kind = GeneratorKind::kExtremeScales;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("generator '", s,
                     "' is not one of normal[:sigma], mxfp4-exact, heavy-tail[:fraction], uniform-codes, "
                     "extreme-scales (weights only)"));
  }
  if (!arg.empty()) {
    double v;
    if (!absl::SimpleAtod(arg, &v) || !(v > 0) || !std::isfinite(v) ||
        (g.kind == GeneratorKind::kHeavyTail && v >= 1)) {
      return absl::InvalidArgumentError(absl::StrCat("generator '", s, "': bad parameter '", arg, "'"));
    }
    g.param = v;
  }
  return g;
}

absl::StatusOr<GeneratorSpec> ParseActivationGenerator(const std::string& s) {
  auto g = ParseGenerator(s);
  if (g.ok() && g->kind == GeneratorKind::kExtremeScales) {
    return absl::InvalidArgumentError("generator 'extreme-scales' is for the weights only");
  }
  return g;
}

uint64_t OperandSeed(uint64_t seed, uint64_t operand) {
  // splitmix64 of (seed, operand)
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (operand + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void FillTensor(const GeneratorSpec& spec, uint64_t seed, float* x, int64_t rows, int64_t K, int64_t row_stride) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  std::uniform_int_distribution<int> code(0, 15), exp_small(-3, 3), exp_tiny(-2, 2);
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * row_stride;
    switch (spec.kind) {
      case GeneratorKind::kNormal:
      case GeneratorKind::kExtremeScales:
        for (int64_t k = 0; k < K; ++k) xr[k] = static_cast<float>(spec.param) * normal(rng);
        break;
      case GeneratorKind::kHeavyTail: {
        const float row_scale = std::exp2(4.0f * uni(rng) - 2.0f);  // rows span 2^-2 .. 2^2
        for (int64_t k = 0; k < K; ++k) {
          float v = row_scale * normal(rng);
          if (uni(rng) < spec.param) v *= 100.0f;
          xr[k] = v;
        }
        break;
      }
      case GeneratorKind::kMxfp4Exact:
      case GeneratorKind::kUniformCodes:
        for (int64_t g = 0; g < K; g += 32) {
          const int e = spec.kind == GeneratorKind::kMxfp4Exact ? exp_small(rng) : exp_tiny(rng);
          const float scale = std::ldexp(1.0f, e);
          for (int i = 0; i < 32; ++i) xr[g + i] = mxfp4::DecodeE2M1(code(rng)) * scale;
          if (spec.kind == GeneratorKind::kMxfp4Exact) xr[g + (e & 31)] = 6.0f * scale;  // pin amax: exact
        }
        break;
    }
  }
}

}  // namespace mxval
