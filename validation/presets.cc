#include "validation/presets.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace mxval {

std::string OpShape::ToString() const {
  return absl::StrCat(op, " B=", B, " N=", N, " K=", K, " ", OutputLayoutName(layout), strided_x ? " strided-x" : "",
                      x_layout != XLayout::kKContiguous ? absl::StrCat(" ", XLayoutName(x_layout), "-x") : "");
}

std::vector<std::string> PresetNames() { return {"glm5-tp4", "dsv3-tp8"}; }

absl::StatusOr<std::vector<OpShape>> ShapePreset(const std::string& name) {
  if (name == "glm5-tp4") {
    return std::vector<OpShape>{{"kup", 16, 512, 192, OutputLayout::kHeadMajor, true, 64},
                                {"vup", 16, 256, 512, OutputLayout::kBatchMajor, false, 0}};
  }
  if (name == "dsv3-tp8") {
    return std::vector<OpShape>{{"kup", 16, 512, 128, OutputLayout::kHeadMajor, true, 64},
                                {"vup", 16, 128, 512, OutputLayout::kBatchMajor, false, 0}};
  }
  return absl::NotFoundError(absl::StrCat("unknown preset '", name, "' (known: ", absl::StrJoin(PresetNames(), ", "), ")"));
}

absl::StatusOr<std::vector<OpShape>> ParseShapes(const std::string& text) {
  std::vector<OpShape> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(item, ':');
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat("shape '", std::string(item), "': ", why,
                                                     " (want op:BxNxK[:head-major|batch-major])"));
    };
    if (parts.size() < 2 || parts.size() > 3) return bad("wrong number of ':' parts");
    OpShape s;
    s.op = parts[0];
    if (s.op != "kup" && s.op != "vup" && s.op != "custom") return bad("op must be kup, vup or custom");
    std::vector<std::string> dims = absl::StrSplit(parts[1], 'x');
    if (dims.size() != 3 || !absl::SimpleAtoi(dims[0], &s.B) || !absl::SimpleAtoi(dims[1], &s.N) ||
        !absl::SimpleAtoi(dims[2], &s.K)) {
      return bad("dimensions must be BxNxK integers");
    }
    if (absl::Status st = ValidateShape({s.B, 1, s.N, s.K}); !st.ok()) return bad(std::string(st.message()));
    if (parts.size() == 3) {
      auto l = ParseOutputLayout(parts[2]);
      if (!l.ok()) return bad(std::string(l.status().message()));
      s.layout = *l;
    }
    out.push_back(s);
  }
  if (out.empty()) return absl::InvalidArgumentError("no shapes given");
  return out;
}

absl::StatusOr<std::vector<int64_t>> ParseIntList(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  for (absl::string_view p : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v;
    if (!absl::SimpleAtoi(p, &v) || v < 1) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": '", std::string(p), "' is not a positive integer"));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": empty list"));
  return out;
}

}  // namespace mxval
